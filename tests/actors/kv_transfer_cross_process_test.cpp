// The KV transfer transports — troupe's own TCP one (actors/kv_cache/transfer/tcp_transport.hpp)
// and UCX (ucx_transport.hpp) — with a peer engine in a forked process (ChildEngine), and the failure paths a disaggregated
// deployment meets there: a peer that is killed (before the first pull, between pulls, mid-pull),
// one that stops answering, a decode engine dying mid-pull from us, and a transport destroyed
// with pulls in flight. The shared fixtures, and how each case runs once per transport setting,
// are in kv_transfer_test_support.hpp. The ctest kv_transfer_decode_deaths_stress (label slow,
// tests/actors/kv_transfer.cmake) repeats one case here.
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/kv_cache/transfer/ucx_transport.hpp"
#include "tests/actors/kv_transfer_test_support.hpp"

namespace troupe::kv_transfer {
namespace {

using namespace testing;

TEST_P(KvTransferTest, PullsFromAnotherProcessThenFailsOnceItIsKilled) {
  ChildEngine prefill(/*seed=*/8, kRegionBytes);  // forked before this process starts UCX
  ASSERT_TRUE(prefill.descriptor()) << "the child could not start its transport";
  LocalEngine decode;
  ASSERT_TRUE(decode.transport);

  std::vector<Segment> segments = one_block_all_layers(3, 4);
  segments.push_back(
      {.remote_offset = 8ull << 20, .local_offset = 10ull << 20, .bytes = 4ull << 20});
  const Status first =
      pull_and_wait(*decode.transport, "prefill-0", *prefill.descriptor(), segments);
  ASSERT_TRUE(first.ok()) << first.error;
  EXPECT_EQ(check_pulled(decode.region, 8, segments), "");

  prefill.kill_now();
  const Status after_kill = pull_and_wait(*decode.transport, "prefill-0", *prefill.descriptor(),
                                          one_block_all_layers(6, 6));
  EXPECT_FALSE(after_kill.ok());
  EXPECT_NE(after_kill.code, StatusCode::kInvalidRequest) << after_kill.error;
  // The failed endpoint was dropped; reconnecting to the dead peer fails too, without hanging.
  const Status reconnect = pull_and_wait(*decode.transport, "prefill-0", *prefill.descriptor(),
                                         one_block_all_layers(7, 7));
  EXPECT_FALSE(reconnect.ok());
  EXPECT_EQ(decode.transport->stats().pulls_ok, 1u);
  EXPECT_EQ(decode.transport->stats().pulls_failed, 2u);
}

TEST_P(KvTransferTest, APeerKilledMidPullFailsThePullWithoutWaitingForItsTimeout) {
  ChildEngine prefill(/*seed=*/13, kRegionBytes);
  ASSERT_TRUE(prefill.descriptor()) << "the child could not start its transport";
  LocalEngine decode;
  ASSERT_NO_FATAL_FAILURE(pull_first_block(decode, prefill));

  prefill.stop();  // the read below waits for the peer's answer ...
  auto answer = std::make_shared<std::promise<Status>>();
  std::future<Status> answered = answer->get_future();
  decode.transport->pull("prefill-0", *prefill.descriptor(), one_block_all_layers(1, 1), 60s,
                         [answer](Status status) { answer->set_value(std::move(status)); });
  prefill.kill_now();  // ... until the peer dies and its socket closes

  ASSERT_EQ(answered.wait_for(60s + kHangAllowance), std::future_status::ready);
  const Status status = answered.get();
  EXPECT_EQ(status.code, StatusCode::kPeerFailed) << status.error;
  EXPECT_EQ(decode.transport->stats().peers, 0);
  EXPECT_EQ(decode.transport->stats().in_flight, 0);
}

// The other direction: here we are the prefill engine, answering children that pull in a loop,
// and each child dies mid-pull. Our process must survive it and keep serving others.
// This once aborted this process about once per 100-200 kills (4% of kills on a loaded 2-core
// box): over tcp UCX 1.13 emulated the get, and a reply whose send failed was fatal inside UCX
// ("Fatal: unexpected error: Endpoint timeout" from ucp_get_req_handler; ucx_transport.hpp).
// Three kills per run; the ctest `kv_transfer_decode_deaths_stress` (label slow) repeats it.
TEST_P(KvTransferTest, ADecodeEngineDyingMidPullLeavesThePrefillEngineServing) {
  constexpr int kNumDecodeEngines = 3;
  std::vector<std::unique_ptr<ChildEngine>> decode_children;
  for (int i = 0; i < kNumDecodeEngines; ++i) {  // all forked before UCX starts here
    decode_children.push_back(std::make_unique<ChildEngine>(/*seed=*/20 + i, kRegionBytes));
    ASSERT_TRUE(decode_children.back()->descriptor()) << "a child could not start its transport";
  }
  LocalEngine prefill(/*seed=*/15);
  ASSERT_TRUE(prefill.transport);

  for (std::unique_ptr<ChildEngine>& decode_child : decode_children) {
    ASSERT_TRUE(decode_child->start_pulling_from(prefill.transport->local_descriptor()));
    EXPECT_EQ(decode_child->kill_now(), "killed");  // mid-pull, most likely: it never pauses
  }
  LocalEngine decode;
  ASSERT_TRUE(decode.transport);
  const Status status = pull_and_wait(*decode.transport, "prefill-0",
                                      prefill.transport->local_descriptor(), child_pull_segments());
  EXPECT_TRUE(status.ok()) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 15, child_pull_segments()), "");
  // Served each child's first pull at least, and ours.
  EXPECT_GE(prefill.transport->stats().bytes_served, 4 * (60 * kBlockBytes + (4ull << 20)));
  // How many kills hit a reply being sent (the case that used to abort): with --gtest_output=xml
  // a stress run can show it did exercise that path.
  RecordProperty("serves_failed", static_cast<int>(prefill.transport->stats().serves_failed));
}

TEST_P(KvTransferTest, APeerThatDiedBeforeTheFirstPullIsAnErrorNotAHang) {
  ChildEngine prefill(/*seed=*/9, kRegionBytes);
  ASSERT_TRUE(prefill.descriptor()) << "the child could not start its transport";
  const LocalDescriptor descriptor = *prefill.descriptor();
  prefill.kill_now();
  LocalEngine decode;
  ASSERT_TRUE(decode.transport);

  const Status status =
      pull_and_wait(*decode.transport, "prefill-0", descriptor, one_block_all_layers(0, 0));

  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code, StatusCode::kInvalidRequest) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 9, {}), "");
}

TEST_P(KvTransferTest, TimesOutWhenAStoppedPeerCannotAnswer) {
  ChildEngine prefill(/*seed=*/10, kRegionBytes);
  ASSERT_TRUE(prefill.descriptor()) << "the child could not start its transport";
  LocalEngine decode;
  ASSERT_NO_FATAL_FAILURE(pull_first_block(decode, prefill));

  prefill.stop();
  const std::vector<Segment> segments = one_block_all_layers(1, 1);
  const Status status =
      pull_and_wait(*decode.transport, "prefill-0", *prefill.descriptor(), segments, 500ms);
  EXPECT_EQ(status.code, StatusCode::kTimedOut) << status.error;
  EXPECT_EQ(decode.transport->stats().peers, 0);  // the endpoint was dropped
  EXPECT_EQ(decode.transport->stats().in_flight, 0);
  // The transport itself is fine: another peer is served as before.
  LocalEngine other_prefill(/*seed=*/14);
  ASSERT_TRUE(other_prefill.transport);
  const Status other = pull_and_wait(*decode.transport, "prefill-1",
                                     other_prefill.transport->local_descriptor(), segments);
  EXPECT_TRUE(other.ok()) << other.error;
  // Resumed, the child answers a read request on an endpoint we have closed: its sends fail
  // (once UCX 1.13's emulated get made that fatal: ucx_transport.hpp), and it keeps serving.
  prefill.resume();
  const Status after_resume =
      pull_and_wait(*decode.transport, "prefill-0", *prefill.descriptor(), segments);
  EXPECT_TRUE(after_resume.ok()) << after_resume.error;
  EXPECT_EQ(check_pulled(decode.region, 10,
                         [&] {
                           std::vector<Segment> all = one_block_all_layers(0, 0);
                           all.insert(all.end(), segments.begin(), segments.end());
                           return all;
                         }()),
            "");
  EXPECT_EQ(prefill.kill_now(), "killed");  // alive until now: it did not abort
}

TEST_P(KvTransferTest, DestroyingTheTransportAnswersEveryPull) {
  ChildEngine prefill(/*seed=*/11, kRegionBytes);
  ASSERT_TRUE(prefill.descriptor()) << "the child could not start its transport";
  LocalEngine decode;
  ASSERT_NO_FATAL_FAILURE(pull_first_block(decode, prefill));

  prefill.stop();  // the pulls below stay in flight until the transport goes
  std::vector<std::future<Status>> answers;
  for (int block = 1; block <= 4; ++block) {
    auto answer = std::make_shared<std::promise<Status>>();
    answers.push_back(answer->get_future());
    decode.transport->pull("prefill-0", *prefill.descriptor(), one_block_all_layers(block, block),
                           60s, [answer](Status status) { answer->set_value(std::move(status)); });
  }
  decode.transport.reset();

  for (std::future<Status>& answer : answers) {
    ASSERT_EQ(answer.wait_for(0s), std::future_status::ready);  // answered before the dtor ended
    const Status status = answer.get();
    EXPECT_TRUE(status.ok() || status.code == StatusCode::kShuttingDown) << status.error;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, KvTransferTest, ::testing::ValuesIn(kTransportSettings),
                         transport_setting_name);

}  // namespace
}  // namespace troupe::kv_transfer
