// The pure helpers behind the KV transfer transport's pull() (actors/kv_cache/transfer/
// ucx_transport.hpp): which UCX_TLS lists are refused at start, coalescing of segments and the
// range check. No UCX connection is made; UCX over real transports is tested in
// kv_transfer_in_process_test.cpp and kv_transfer_cross_process_test.cpp.
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/kv_cache/transfer/ucx_transport.hpp"

namespace troupe::kv_transfer {
namespace {

TEST(KvTransferUcxTls, AListWithoutATransportThatReportsDeadPeersIsRefusedAtStart) {
  EXPECT_TRUE(check_transport_list("posix,cma").has_value());
  EXPECT_TRUE(check_transport_list("sm").has_value());
  EXPECT_FALSE(check_transport_list("posix,cma,tcp").has_value());
  EXPECT_FALSE(check_transport_list("tcp").has_value());
  EXPECT_FALSE(check_transport_list("rc_x,sm").has_value());
  EXPECT_FALSE(check_transport_list("").has_value());        // UCX's own choice
  EXPECT_FALSE(check_transport_list("^posix").has_value());  // everything but posix
  std::vector<std::byte> memory(4096);
  std::string error;
  UcxTransportConfig config;
  config.transports = "posix,cma";
  EXPECT_EQ(make_ucx_transport(memory.data(), memory.size(), config, &error), nullptr);
  EXPECT_NE(error.find("cannot report a dead peer"), std::string::npos) << error;
}

TEST(KvTransferSegments, CoalescingMergesOnlyNeighboursContiguousOnBothSides) {
  const std::vector<Segment> segments = {
      {.remote_offset = 0, .local_offset = 100, .bytes = 10},
      {.remote_offset = 10, .local_offset = 110, .bytes = 5},  // continues both: merged
      {.remote_offset = 15, .local_offset = 200, .bytes = 5},  // local jumps: new get
      {.remote_offset = 20, .local_offset = 205, .bytes = 0},  // empty: dropped
      {.remote_offset = 20, .local_offset = 205, .bytes = 5},  // continues the previous get
      {.remote_offset = 0, .local_offset = 0, .bytes = 7},     // backwards: new get
  };
  const std::vector<Segment> expected = {
      {.remote_offset = 0, .local_offset = 100, .bytes = 15},
      {.remote_offset = 15, .local_offset = 200, .bytes = 10},
      {.remote_offset = 0, .local_offset = 0, .bytes = 7},
  };
  EXPECT_EQ(coalesce_adjacent_segments(segments), expected);
}

TEST(KvTransferSegments, RangeCheckNamesTheOffendingSegmentAndSide) {
  EXPECT_TRUE(
      check_segments_in_range({{.remote_offset = 90, .local_offset = 0, .bytes = 10}}, 100, 10)
          .ok());
  const Status remote =
      check_segments_in_range({{.remote_offset = 0, .local_offset = 0, .bytes = 1},
                               {.remote_offset = 91, .local_offset = 0, .bytes = 10}},
                              100, 1000);
  EXPECT_EQ(remote.code, StatusCode::kInvalidRequest);
  EXPECT_NE(remote.error.find("segment 1"), std::string::npos) << remote.error;
  EXPECT_NE(remote.error.find("remote"), std::string::npos) << remote.error;
  const Status local =
      check_segments_in_range({{.remote_offset = 0, .local_offset = 1, .bytes = 10}}, 100, 10);
  EXPECT_NE(local.error.find("local"), std::string::npos) << local.error;
}

}  // namespace
}  // namespace troupe::kv_transfer
