// The KV transfer transport over real UCX (actors/kv_cache/transfer/ucx_transport.hpp): pulls
// between two transports in this process and between two processes, with the failure paths a
// disaggregated deployment meets (a peer that is unreachable, killed, or stops answering).
//
// Every UCX test runs once per UCX transport setting, chosen with UCX_TLS before the transports
// are created (forked peers inherit it):
//   tcp            — a pull is a READ_REQUEST active message answered by the peer's progress
//                    thread with READ_REPLY messages (ucx_transport.hpp). Works on loopback with
//                    UCX's default devices (it picks tcp/lo here); UCX_NET_DEVICES is not needed.
//   posix,cma,tcp  — what a same-host deployment would set. On UCX 1.13 it behaves exactly like
//                    tcp: posix cannot report peer failures (required by our endpoints' PEER
//                    error mode) and cma has no active messages. Kept so that a UCX upgrade
//                    that changes this is exercised.
// UCX_TLS=posix,cma alone cannot connect at all on 1.13 (PosixAndCmaAloneAreRefusedFast below).
// Timeouts are generous and only guarantee termination; nothing here depends on speed.
// Under ThreadSanitizer run with UCX_MEM_EVENTS=no: UCX's madvise hook (libucm, installed when
// the library loads) crashes TSan's interceptor at thread exit. Set in the environment, not
// here: libucm reads it before main.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "actors/kv_cache/transfer/ucx_transport.hpp"

namespace troupe::kv_transfer {
namespace {

using namespace std::chrono_literals;

constexpr auto kPullTimeout = 5000ms;     // only so that a broken transport cannot hang a test
constexpr auto kHangAllowance = 10000ms;  // beyond a pull's own timeout: "it hung"
constexpr uint64_t kBlockBytes = 6144;    // one KV block of one layer's K (or V)
constexpr int kNumLayers = 30;
constexpr uint64_t kRegionBytes = 16ull << 20;

// A byte that depends on the whole offset, so a segment landing at a wrong offset (even one
// off by a multiple of 256) shows up.
uint8_t pattern_byte(uint32_t seed, uint64_t offset) {
  uint64_t mixed = (offset + seed) * 0x9E3779B97F4A7C15ull;
  mixed ^= mixed >> 29;
  return static_cast<uint8_t>(mixed);
}

void fill_pattern(std::vector<uint8_t>& region, uint32_t seed) {
  for (uint64_t offset = 0; offset < region.size(); ++offset) {
    region[offset] = pattern_byte(seed, offset);
  }
}

// Every segment's bytes arrived at its local offset, and nothing else in `local` changed from
// zero. Returns the first problem found.
std::string check_pulled(const std::vector<uint8_t>& local, uint32_t remote_seed,
                         const std::vector<Segment>& segments) {
  std::vector<bool> written(local.size(), false);
  for (const Segment& segment : segments) {
    for (uint64_t i = 0; i < segment.bytes; ++i) {
      const uint64_t local_offset = segment.local_offset + i;
      written[local_offset] = true;
      if (local[local_offset] != pattern_byte(remote_seed, segment.remote_offset + i)) {
        return "wrong byte at local offset " + std::to_string(local_offset);
      }
    }
  }
  for (uint64_t offset = 0; offset < local.size(); ++offset) {
    if (!written[offset] && local[offset] != 0) {
      return "byte outside every segment changed at offset " + std::to_string(offset);
    }
  }
  return {};
}

// One KV block across all layers, K and V, as a block table scatters it: each layer's K and V
// live in separate planes, so no two segments are contiguous on either side. The planes fill the
// first 60 * 16 * 6144 bytes (~5.6 MiB) of a region; the rest is free for big segments.
constexpr uint64_t kBlocksPerPlane = 16;
std::vector<Segment> one_block_all_layers(uint64_t remote_block, uint64_t local_block) {
  EXPECT_TRUE(remote_block < kBlocksPerPlane && local_block < kBlocksPerPlane);
  constexpr uint64_t kPlaneBytes = kBlocksPerPlane * kBlockBytes;
  std::vector<Segment> segments;
  for (uint64_t plane = 0; plane < 2 * kNumLayers; ++plane) {
    segments.push_back({.remote_offset = plane * kPlaneBytes + remote_block * kBlockBytes,
                        .local_offset = plane * kPlaneBytes + local_block * kBlockBytes,
                        .bytes = kBlockBytes});
  }
  return segments;
}

// Calls pull() and waits for its done; a done that never comes is a test failure, not a hang.
Status pull_and_wait(KvTransport& transport, const std::string& peer_key,
                     const LocalDescriptor& peer, std::vector<Segment> segments,
                     std::chrono::milliseconds timeout = kPullTimeout) {
  auto answer = std::make_shared<std::promise<Status>>();
  auto num_calls = std::make_shared<std::atomic<int>>(0);
  std::future<Status> answered = answer->get_future();
  transport.pull(peer_key, peer, std::move(segments), timeout, [answer, num_calls](Status status) {
    if (num_calls->fetch_add(1) == 0) {
      answer->set_value(std::move(status));
    } else {
      ADD_FAILURE() << "done ran twice";
    }
  });
  if (answered.wait_for(timeout + kHangAllowance) != std::future_status::ready) {
    ADD_FAILURE() << "pull did not finish within its timeout plus " << kHangAllowance.count()
                  << " ms";
    return Status::failure(StatusCode::kTimedOut, "hung");
  }
  return answered.get();
}

// A transport over its own zeroed (or patterned) region, in this process.
struct LocalEngine {
  explicit LocalEngine(std::optional<uint32_t> seed = std::nullopt,
                       const UcxTransportConfig& config = {})
      : region(kRegionBytes, 0) {
    if (seed) fill_pattern(region, *seed);
    std::string error;
    transport = make_ucx_transport(region.data(), region.size(), config, &error);
    EXPECT_NE(transport, nullptr) << error;
  }
  std::vector<uint8_t> region;  // declared first: outlives the transport registered over it
  std::unique_ptr<KvTransport> transport;
};

// ---------------------------------------------------------------------------------------------
// A peer engine in a forked process: a transport over a patterned region, whose descriptor
// comes back through a pipe. The child lives until the parent closes the control pipe (or
// kills it), so its progress thread keeps answering read requests meanwhile.

void write_all(int fd, const void* data, size_t bytes) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = write(fd, cursor, bytes);
    if (written <= 0) _exit(3);  // only the child writes; the parent gone means nothing to do
    cursor += written;
    bytes -= static_cast<size_t>(written);
  }
}

bool read_all(int fd, void* data, size_t bytes) {
  auto* cursor = static_cast<char*>(data);
  while (bytes > 0) {
    pollfd readable{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&readable, 1, static_cast<int>(kHangAllowance.count())) != 1) return false;
    const ssize_t got = read(fd, cursor, bytes);
    if (got <= 0) return false;
    cursor += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

void write_blob(int fd, const std::string& blob) {
  const uint64_t size = blob.size();
  write_all(fd, &size, sizeof(size));
  write_all(fd, blob.data(), blob.size());
}

std::optional<std::string> read_blob(int fd) {
  uint64_t size = 0;
  if (!read_all(fd, &size, sizeof(size)) || size > (1u << 20)) return std::nullopt;
  std::string blob(size, '\0');
  if (!read_all(fd, blob.data(), size)) return std::nullopt;
  return blob;
}

void write_descriptor(int fd, const LocalDescriptor& descriptor) {
  write_blob(fd, descriptor.transport);
  write_blob(fd, descriptor.worker_address);
  write_blob(fd, descriptor.rkey);
  write_all(fd, &descriptor.base_address, sizeof(descriptor.base_address));
  write_all(fd, &descriptor.region_bytes, sizeof(descriptor.region_bytes));
}

std::optional<LocalDescriptor> read_descriptor(int fd) {
  LocalDescriptor descriptor;
  std::optional<std::string> transport = read_blob(fd);
  std::optional<std::string> worker_address = read_blob(fd);
  std::optional<std::string> rkey = read_blob(fd);
  if (!transport || !worker_address || !rkey ||
      !read_all(fd, &descriptor.base_address, sizeof(descriptor.base_address)) ||
      !read_all(fd, &descriptor.region_bytes, sizeof(descriptor.region_bytes))) {
    return std::nullopt;
  }
  descriptor.transport = std::move(*transport);
  descriptor.worker_address = std::move(*worker_address);
  descriptor.rkey = std::move(*rkey);
  return descriptor;
}

// What a pulling child pulls, over and over: one block of every layer plus 4 MiB.
std::vector<Segment> child_pull_segments() {
  std::vector<Segment> segments = one_block_all_layers(4, 5);
  segments.push_back(
      {.remote_offset = 6ull << 20, .local_offset = 7ull << 20, .bytes = 4ull << 20});
  return segments;
}

// A peer engine in a forked process, forked before this test starts UCX here. It serves its
// patterned region (a prefill engine) and, when asked, also pulls from us in a loop (a decode
// engine). Pipes: the child reports on `report` (its descriptor, then one byte per event) and
// takes commands on `command`; it lives until the command pipe closes or it is killed.
class ChildEngine {
 public:
  ChildEngine(uint32_t seed, uint64_t region_bytes) {
    int report_pipe[2];
    int command_pipe[2];
    if (pipe(report_pipe) != 0) return;
    if (pipe(command_pipe) != 0) {
      close(report_pipe[0]);
      close(report_pipe[1]);
      return;
    }
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // Dies with the test process: a child pulling in a loop from a parent that crashed would
      // otherwise retry (and log) forever.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(4);  // the parent died before prctl
      close(report_pipe[0]);
      close(command_pipe[1]);
      run_child(seed, region_bytes, report_pipe[1], command_pipe[0]);
    }
    close(report_pipe[1]);
    close(command_pipe[0]);
    report_fd_ = report_pipe[0];
    command_fd_ = command_pipe[1];
    uint8_t started = 0;
    if (pid_ > 0 && read_all(report_fd_, &started, 1) && started == 1) {
      descriptor_ = read_descriptor(report_fd_);
    }
  }
  ~ChildEngine() { kill_now(); }

  // Empty when the child could not start its transport.
  const std::optional<LocalDescriptor>& descriptor() const { return descriptor_; }

  // Makes the child pull from `source` until it dies; returns once its first pull succeeded.
  bool start_pulling_from(const LocalDescriptor& source) {
    const uint8_t pull_command = 'P';
    write_all(command_fd_, &pull_command, 1);
    write_descriptor(command_fd_, source);
    uint8_t first_pull = 0;
    return read_all(report_fd_, &first_pull, 1) && first_pull == 'O';
  }

  // SIGKILLs and reaps the child. Returns how it ended: "killed" when our SIGKILL did it,
  // otherwise what ended it first (a UCX abort is "signal 6").
  std::string kill_now() {
    std::string ending = "not started";
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int wait_status = 0;
      waitpid(pid_, &wait_status, 0);  // reaped: no zombie whose memory CMA could still find
      if (!WIFSIGNALED(wait_status)) {
        ending = "exit " + std::to_string(WEXITSTATUS(wait_status));
      } else if (WTERMSIG(wait_status) == SIGKILL) {
        ending = "killed";
      } else {
        ending = "signal " + std::to_string(WTERMSIG(wait_status));
      }
      pid_ = -1;
    }
    for (int* fd : {&report_fd_, &command_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
    return ending;
  }

  // Returns once every thread of the child has stopped (kill() alone only queues the signal).
  void stop() {
    kill(pid_, SIGSTOP);
    int wait_status = 0;
    while (waitpid(pid_, &wait_status, WUNTRACED) == pid_ && !WIFSTOPPED(wait_status)) {
    }
  }

  void resume() { kill(pid_, SIGCONT); }

 private:
  [[noreturn]] static void run_child(uint32_t seed, uint64_t region_bytes, int report_fd,
                                     int command_fd) {
    std::vector<uint8_t> region(region_bytes);
    fill_pattern(region, seed);
    std::string error;
    std::unique_ptr<KvTransport> transport =
        make_ucx_transport(region.data(), region.size(), UcxTransportConfig{}, &error);
    const uint8_t started = transport != nullptr ? 1 : 0;
    write_all(report_fd, &started, 1);
    if (transport == nullptr) _exit(2);
    write_descriptor(report_fd, transport->local_descriptor());

    uint8_t command = 0;
    while (read(command_fd, &command, 1) == 1) {
      if (command != 'P') continue;
      std::optional<LocalDescriptor> source = read_descriptor(command_fd);
      if (!source) break;
      for (bool first = true;; first = false) {
        const bool ok = pull_and_wait(*transport, "parent", *source, child_pull_segments()).ok();
        if (first) {
          const uint8_t report = ok ? 'O' : 'F';
          write_all(report_fd, &report, 1);
        }
      }
    }
    transport.reset();
    _exit(0);  // never back into gtest: the parent owns the test run
  }

  pid_t pid_ = -1;
  int report_fd_ = -1;
  int command_fd_ = -1;
  std::optional<LocalDescriptor> descriptor_;
};

// Block 0 pulled from a live child as "prefill-0": `decode` holds an endpoint to it afterwards.
void pull_first_block(LocalEngine& decode, const ChildEngine& prefill) {
  ASSERT_TRUE(decode.transport);
  ASSERT_TRUE(pull_and_wait(*decode.transport, "prefill-0", *prefill.descriptor(),
                            one_block_all_layers(0, 0))
                  .ok());
}

// ---------------------------------------------------------------------------------------------

struct TransportSetting {
  const char* test_name;
  const char* ucx_tls;
};

// Names the setting in test listings (and ctest names) instead of dumping its bytes.
void PrintTo(const TransportSetting& setting, std::ostream* out) {
  *out << "UCX_TLS=" << setting.ucx_tls;
}

class KvTransferTest : public ::testing::TestWithParam<TransportSetting> {
 protected:
  // UCX reads UCX_TLS when a transport creates its context; children inherit it.
  void SetUp() override { setenv("UCX_TLS", GetParam().ucx_tls, /*overwrite=*/1); }
};

TEST_P(KvTransferTest, PullsOneBlockOfEveryLayerAndAFewMebibytes) {
  LocalEngine prefill(/*seed=*/1);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);

  std::vector<Segment> segments = one_block_all_layers(/*remote_block=*/5, /*local_block=*/9);
  segments.push_back(
      {.remote_offset = 12ull << 20, .local_offset = 13ull << 20, .bytes = 3ull << 20});
  const Status status = pull_and_wait(*decode.transport, "prefill-0",
                                      prefill.transport->local_descriptor(), segments);

  ASSERT_TRUE(status.ok()) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 1, segments), "");
  const KvTransport::Stats stats = decode.transport->stats();
  EXPECT_EQ(stats.pulls_ok, 1u);
  EXPECT_EQ(stats.pulls_failed, 0u);
  EXPECT_EQ(stats.segments, 61u);
  EXPECT_EQ(stats.gets_issued, 61u);  // nothing here is contiguous
  EXPECT_EQ(stats.bytes_pulled, 60 * kBlockBytes + (3ull << 20));
  EXPECT_EQ(stats.peers, 1);
  EXPECT_EQ(stats.in_flight, 0);
}

TEST_P(KvTransferTest, CoalescesSegmentsContiguousOnBothSides) {
  LocalEngine prefill(/*seed=*/2);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);

  std::vector<Segment> segments;
  for (uint64_t i = 0; i < 30; ++i) {  // one run: contiguous on both sides -> one get
    segments.push_back({.remote_offset = 4096 + i * kBlockBytes,
                        .local_offset = (1ull << 20) + i * kBlockBytes,
                        .bytes = kBlockBytes});
  }
  for (uint64_t i = 0; i < 10; ++i) {  // contiguous remotely only -> ten gets
    segments.push_back({.remote_offset = (4ull << 20) + i * kBlockBytes,
                        .local_offset = (8ull << 20) + i * 2 * kBlockBytes,
                        .bytes = kBlockBytes});
  }
  const Status status = pull_and_wait(*decode.transport, "prefill-0",
                                      prefill.transport->local_descriptor(), segments);

  ASSERT_TRUE(status.ok()) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 2, segments), "");
  EXPECT_EQ(decode.transport->stats().gets_issued, 11u);
  EXPECT_EQ(decode.transport->stats().segments, 40u);
}

TEST_P(KvTransferTest, RefusesSegmentsOutsideEitherRegionAndReadsNothing) {
  LocalEngine prefill(/*seed=*/3);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);
  const LocalDescriptor& peer = prefill.transport->local_descriptor();
  const Segment fine{.remote_offset = 0, .local_offset = 0, .bytes = kBlockBytes};

  const std::vector<Segment> out_of_range[] = {
      {fine, {.remote_offset = kRegionBytes - 10, .local_offset = 0, .bytes = 11}},
      {fine, {.remote_offset = 0, .local_offset = kRegionBytes, .bytes = 1}},
      {fine, {.remote_offset = UINT64_MAX - 10, .local_offset = 0, .bytes = 100}},  // overflows
      {fine, {.remote_offset = 0, .local_offset = 0, .bytes = UINT64_MAX}},
  };
  for (const std::vector<Segment>& segments : out_of_range) {
    const Status status = pull_and_wait(*decode.transport, "prefill-0", peer, segments);
    EXPECT_EQ(status.code, StatusCode::kInvalidRequest) << status.error;
  }
  EXPECT_EQ(check_pulled(decode.region, 3, {}), "");  // not even the fine segment was read
  const KvTransport::Stats stats = decode.transport->stats();
  EXPECT_EQ(stats.pulls_failed, 4u);
  EXPECT_EQ(stats.gets_issued, 0u);
  EXPECT_EQ(stats.peers, 0);  // refused before connecting
}

TEST_P(KvTransferTest, RefusesADescriptorThatIsNotUcx) {
  LocalEngine prefill(/*seed=*/4);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);
  const std::vector<Segment> segments = one_block_all_layers(0, 0);

  LocalDescriptor foreign = prefill.transport->local_descriptor();
  foreign.transport = "nixl";
  EXPECT_EQ(pull_and_wait(*decode.transport, "a", foreign, segments).code,
            StatusCode::kInvalidRequest);
  LocalDescriptor no_address = prefill.transport->local_descriptor();
  no_address.worker_address.clear();
  EXPECT_EQ(pull_and_wait(*decode.transport, "b", no_address, segments).code,
            StatusCode::kInvalidRequest);
  LocalDescriptor no_rkey = prefill.transport->local_descriptor();
  no_rkey.rkey.clear();
  EXPECT_EQ(pull_and_wait(*decode.transport, "c", no_rkey, segments).code,
            StatusCode::kInvalidRequest);
  EXPECT_EQ(check_pulled(decode.region, 4, {}), "");
}

TEST_P(KvTransferTest, ForgetPeerDropsTheEndpointAndTheNextPullReconnects) {
  LocalEngine prefill(/*seed=*/5);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);
  const LocalDescriptor& peer = prefill.transport->local_descriptor();
  const std::vector<Segment> first = one_block_all_layers(1, 1);
  const std::vector<Segment> second = one_block_all_layers(2, 3);

  ASSERT_TRUE(pull_and_wait(*decode.transport, "prefill-0", peer, first).ok());
  decode.transport->forget_peer("prefill-0");
  decode.transport->forget_peer("never-seen");  // ignored
  const Status status = pull_and_wait(*decode.transport, "prefill-0", peer, second);

  ASSERT_TRUE(status.ok()) << status.error;
  std::vector<Segment> both = first;
  both.insert(both.end(), second.begin(), second.end());
  EXPECT_EQ(check_pulled(decode.region, 5, both), "");
  EXPECT_EQ(decode.transport->stats().peers, 1);
  EXPECT_EQ(decode.transport->stats().pulls_ok, 2u);
}

TEST_P(KvTransferTest, TwoEnginesPullFromEachOtherAtOnce) {
  LocalEngine left(/*seed=*/6);
  LocalEngine right(/*seed=*/7);
  ASSERT_TRUE(left.transport && right.transport);
  // Each reads the other's blocks 0..7 into its own blocks 8..15 (its own pattern elsewhere).
  constexpr int kNumPulls = 8;
  auto pull_all = [](LocalEngine& puller, const LocalEngine& source) {
    std::vector<std::future<Status>> answers;
    for (int block = 0; block < kNumPulls; ++block) {
      auto answer = std::make_shared<std::promise<Status>>();
      answers.push_back(answer->get_future());
      puller.transport->pull("other", source.transport->local_descriptor(),
                             one_block_all_layers(block, 8 + block), kPullTimeout,
                             [answer](Status status) { answer->set_value(std::move(status)); });
    }
    return answers;
  };
  std::vector<std::future<Status>> left_answers;
  std::thread left_caller([&] { left_answers = pull_all(left, right); });
  std::vector<std::future<Status>> right_answers = pull_all(right, left);
  left_caller.join();

  for (auto* answers : {&left_answers, &right_answers}) {
    for (std::future<Status>& answer : *answers) {
      ASSERT_EQ(answer.wait_for(kPullTimeout + kHangAllowance), std::future_status::ready);
      const Status status = answer.get();
      EXPECT_TRUE(status.ok()) << status.error;
    }
  }
  for (int block = 0; block < kNumPulls; ++block) {
    for (const Segment& segment : one_block_all_layers(block, 8 + block)) {
      EXPECT_EQ(left.region[segment.local_offset + 17],
                pattern_byte(7, segment.remote_offset + 17));
      EXPECT_EQ(right.region[segment.local_offset + 17],
                pattern_byte(6, segment.remote_offset + 17));
    }
  }
  EXPECT_EQ(left.transport->stats().pulls_ok, static_cast<uint64_t>(kNumPulls));
  EXPECT_EQ(right.transport->stats().in_flight, 0);
}

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

// The owner of the bytes checks every range of a read request against its own region (the
// puller checks against the descriptor, which may be stale or wrong) and refuses at once.
TEST_P(KvTransferTest, APeerRefusesARangeOutsideItsRegionAtOnce) {
  LocalEngine prefill(/*seed=*/16);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);
  LocalDescriptor overstated = prefill.transport->local_descriptor();
  overstated.region_bytes = 2 * kRegionBytes;
  const std::vector<Segment> segments = {
      {.remote_offset = 0, .local_offset = 0, .bytes = kBlockBytes},
      {.remote_offset = kRegionBytes - 100, .local_offset = 1ull << 20, .bytes = 200}};

  const Status status = pull_and_wait(*decode.transport, "prefill-0", overstated, segments, 60s);

  EXPECT_EQ(status.code, StatusCode::kInvalidRequest) << status.error;
  EXPECT_NE(status.error.find("refused"), std::string::npos) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 16, {}), "");  // not even the fine range was sent
  EXPECT_EQ(prefill.transport->stats().bytes_served, 0u);
  // A refusal is not a broken peer: the endpoint is kept and serves the next pull.
  EXPECT_TRUE(pull_and_wait(*decode.transport, "prefill-0", overstated, {segments[0]}).ok());
  EXPECT_EQ(decode.transport->stats().peers, 1);
}

// Reads longer than a reply chunk arrive in several replies, each landing at its own offset.
TEST_P(KvTransferTest, ReadsLongerThanAReplyChunkLandInPlace) {
  UcxTransportConfig small_chunks;
  small_chunks.reply_chunk_bytes = 1000;
  LocalEngine prefill(/*seed=*/17, small_chunks);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);
  const std::vector<Segment> segments = {
      {.remote_offset = 10, .local_offset = 5000, .bytes = 2500},      // 3 chunks, last partial
      {.remote_offset = 9000, .local_offset = 100, .bytes = 1},        // 1 byte
      {.remote_offset = 20000, .local_offset = 30000, .bytes = 1000},  // exactly one chunk
      {.remote_offset = 40000, .local_offset = 50000, .bytes = 1001},  // one byte over
      {.remote_offset = 1ull << 20, .local_offset = 3ull << 20, .bytes = 1ull << 20}};

  const Status status = pull_and_wait(*decode.transport, "prefill-0",
                                      prefill.transport->local_descriptor(), segments);

  ASSERT_TRUE(status.ok()) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 17, segments), "");
  EXPECT_EQ(prefill.transport->stats().bytes_served, 2500u + 1 + 1000 + 1001 + (1ull << 20));
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

INSTANTIATE_TEST_SUITE_P(UcxTls, KvTransferTest,
                         ::testing::Values(TransportSetting{"Tcp", "tcp"},
                                           TransportSetting{"PosixCmaTcp", "posix,cma,tcp"}),
                         [](const ::testing::TestParamInfo<TransportSetting>& info) {
                           return std::string(info.param.test_name);
                         });

// UCX 1.13: posix (and sysv) shared memory has no peer-failure handler, and cma has no active
// messages, so with our endpoints' PEER error mode nothing can carry UCX's wire-up: every
// connection is "Destination is unreachable". The pull must say so at once, not hang. If this
// starts failing after a UCX upgrade, posix,cma may work: add it to the settings above (and run
// the decode-death test on it many times: with UCX_MM_ERROR_HANDLING=y on 1.13 it connects, but
// a peer killed mid-send can leave our shared-memory receive stuck for good, ucx_transport.hpp).
TEST(KvTransferUcxTls, PosixAndCmaAloneAreRefusedFast) {
  setenv("UCX_TLS", "posix,cma", /*overwrite=*/1);
  LocalEngine prefill(/*seed=*/12);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);  // the context itself starts fine

  const Status status =
      pull_and_wait(*decode.transport, "prefill-0", prefill.transport->local_descriptor(),
                    one_block_all_layers(0, 0));

  EXPECT_EQ(status.code, StatusCode::kPeerFailed) << status.error;
  EXPECT_NE(status.error.find("unreachable"), std::string::npos) << status.error;
  EXPECT_EQ(decode.transport->stats().peers, 0);
}

// ---------------------------------------------------------------------------------------------
// The pure helpers behind pull(): no UCX.

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
