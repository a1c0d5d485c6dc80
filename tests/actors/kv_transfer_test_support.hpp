// Shared pieces of the KV transfer tests (kv_transfer_in_process_test.cpp,
// kv_transfer_cross_process_test.cpp): a transport — troupe's own TCP one (actors/kv_cache/
// transfer/tcp_transport.hpp) or UCX (ucx_transport.hpp) — over a patterned or zeroed region in
// this process (LocalEngine) or in a forked peer process (ChildEngine), pulls that wait for their
// done, checks of what landed where, and the parameterised fixture that runs each case once per
// transport setting.
//
// Threads: everything here is for the test's own (main) thread. A pull's done callback, set by
// pull_and_wait() or by a test, runs on the pulling transport's progress thread and only fulfils
// a promise. ChildEngine forks, so construct it before this process starts UCX (before any
// LocalEngine of the test): a fork after UCX started its threads would copy them half-way. The
// child (ChildEngine::run_child) never returns into gtest.
//
// Every case runs once per transport setting (the transports a test makes follow it; forked
// peers inherit it):
//   Tcp            — troupe's own TCP transport, the default (tcp_transport.hpp).
// and, for UCX, once per UCX_TLS value, set before the transports are created:
//   UcxTcp         — a pull is a READ_REQUEST active message answered by the peer's progress
//                    thread with READ_REPLY messages (ucx_transport.hpp). Works on loopback with
//                    UCX's default devices (it picks tcp/lo here); UCX_NET_DEVICES is not needed.
//   UcxPosixCmaTcp — posix,cma,tcp, what a same-host deployment would set. On UCX 1.13 it behaves exactly like
//                    tcp: posix cannot report peer failures (required by our endpoints' PEER
//                    error mode) and cma has no active messages. Kept so that a UCX upgrade
//                    that changes this is exercised.
// UCX_TLS=posix,cma alone cannot connect at all on 1.13 (PosixAndCmaAloneAreRefusedFast in
// kv_transfer_in_process_test.cpp). Each file that uses KvTransferTest instantiates it over
// kTransportSettings with transport_setting_name, so every file covers the same settings.
// Timeouts are generous and only guarantee termination; nothing here depends on speed.
// Under ThreadSanitizer run with UCX_MEM_EVENTS=no: UCX's madvise hook (libucm, installed when
// the library loads) crashes TSan's interceptor at thread exit. Set in the environment, not
// here: libucm reads it before main.
#pragma once

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
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "actors/kv_cache/transfer/tcp_transport.hpp"
#include "actors/kv_cache/transfer/ucx_transport.hpp"

namespace troupe::kv_transfer::testing {

using namespace std::chrono_literals;

inline constexpr auto kPullTimeout = 5000ms;  // only so that a broken transport cannot hang a test
inline constexpr auto kHangAllowance = 10000ms;  // beyond a pull's own timeout: "it hung"
inline constexpr uint64_t kBlockBytes = 6144;    // one KV block of one layer's K (or V)
inline constexpr int kNumLayers = 30;
inline constexpr uint64_t kRegionBytes = 16ull << 20;

// A byte that depends on the whole offset, so a segment landing at a wrong offset (even one
// off by a multiple of 256) shows up.
inline uint8_t pattern_byte(uint32_t seed, uint64_t offset) {
  uint64_t mixed = (offset + seed) * 0x9E3779B97F4A7C15ull;
  mixed ^= mixed >> 29;
  return static_cast<uint8_t>(mixed);
}

inline void fill_pattern(std::vector<uint8_t>& region, uint32_t seed) {
  for (uint64_t offset = 0; offset < region.size(); ++offset) {
    region[offset] = pattern_byte(seed, offset);
  }
}

// Every segment's bytes arrived at its local offset, and nothing else in `local` changed from
// zero. Returns the first problem found.
inline std::string check_pulled(const std::vector<uint8_t>& local, uint32_t remote_seed,
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
inline constexpr uint64_t kBlocksPerPlane = 16;
inline std::vector<Segment> one_block_all_layers(uint64_t remote_block, uint64_t local_block) {
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
inline Status pull_and_wait(KvTransport& transport, const std::string& peer_key,
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

struct TransportSetting {
  const char* test_name;
  const char* transport;  // "tcp" (troupe's own) or "ucx"
  const char* ucx_tls;    // UCX_TLS for "ucx"
};

// The setting of the running case (KvTransferTest::SetUp); tests outside the suite get tcp.
inline const TransportSetting*& current_setting() {
  static const TransportSetting* setting = nullptr;
  return setting;
}

// A transport of the running case's kind over [base, base + bytes); `ucx` only applies to UCX.
inline std::unique_ptr<KvTransport> make_test_transport(void* base, size_t bytes,
                                                        const UcxTransportConfig& ucx,
                                                        std::string* error) {
  const TransportSetting* setting = current_setting();
  if (setting != nullptr && std::string_view(setting->transport) == "ucx") {
    return make_ucx_transport(base, bytes, ucx, error);
  }
  return make_tcp_transport(base, bytes, TcpTransportConfig{}, error);
}

// A transport over its own zeroed (or patterned) region, in this process.
struct LocalEngine {
  explicit LocalEngine(std::optional<uint32_t> seed = std::nullopt,
                       const UcxTransportConfig& config = {})
      : region(kRegionBytes, 0) {
    if (seed) fill_pattern(region, *seed);
    std::string error;
    transport = make_test_transport(region.data(), region.size(), config, &error);
    EXPECT_NE(transport, nullptr) << error;
  }
  std::vector<uint8_t> region;  // declared first: outlives the transport registered over it
  std::unique_ptr<KvTransport> transport;
};

// ---------------------------------------------------------------------------------------------
// A peer engine in a forked process: a transport over a patterned region, whose descriptor
// comes back through a pipe. The child lives until the parent closes the control pipe (or
// kills it), so its progress thread keeps answering read requests meanwhile.

inline void write_all(int fd, const void* data, size_t bytes) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = write(fd, cursor, bytes);
    if (written <= 0) _exit(3);  // only the child writes; the parent gone means nothing to do
    cursor += written;
    bytes -= static_cast<size_t>(written);
  }
}

inline bool read_all(int fd, void* data, size_t bytes) {
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

inline void write_blob(int fd, const std::string& blob) {
  const uint64_t size = blob.size();
  write_all(fd, &size, sizeof(size));
  write_all(fd, blob.data(), blob.size());
}

inline std::optional<std::string> read_blob(int fd) {
  uint64_t size = 0;
  if (!read_all(fd, &size, sizeof(size)) || size > (1u << 20)) return std::nullopt;
  std::string blob(size, '\0');
  if (!read_all(fd, blob.data(), size)) return std::nullopt;
  return blob;
}

inline void write_descriptor(int fd, const LocalDescriptor& descriptor) {
  write_blob(fd, descriptor.transport);
  write_blob(fd, descriptor.worker_address);
  write_blob(fd, descriptor.rkey);
  write_all(fd, &descriptor.base_address, sizeof(descriptor.base_address));
  write_all(fd, &descriptor.region_bytes, sizeof(descriptor.region_bytes));
}

inline std::optional<LocalDescriptor> read_descriptor(int fd) {
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
inline std::vector<Segment> child_pull_segments() {
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
        make_test_transport(region.data(), region.size(), UcxTransportConfig{}, &error);
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
inline void pull_first_block(LocalEngine& decode, const ChildEngine& prefill) {
  ASSERT_TRUE(decode.transport);
  ASSERT_TRUE(pull_and_wait(*decode.transport, "prefill-0", *prefill.descriptor(),
                            one_block_all_layers(0, 0))
                  .ok());
}

// ---------------------------------------------------------------------------------------------

// Names the setting in test listings (and ctest names) instead of dumping its bytes.
inline void PrintTo(const TransportSetting& setting, std::ostream* out) {
  *out << setting.transport;
  if (std::string_view(setting.transport) == "ucx") *out << " UCX_TLS=" << setting.ucx_tls;
}

class KvTransferTest : public ::testing::TestWithParam<TransportSetting> {
 protected:
  // UCX reads UCX_TLS when a transport creates its context; children inherit it.
  void SetUp() override {
    current_setting() = &GetParam();
    if (std::string_view(GetParam().transport) == "ucx") {
      setenv("UCX_TLS", GetParam().ucx_tls, /*overwrite=*/1);
    }
  }
  void TearDown() override { current_setting() = nullptr; }
};

// The settings every KvTransferTest case runs under, and their names in test listings: each
// file instantiates the suite as
//   INSTANTIATE_TEST_SUITE_P(Transports, KvTransferTest, ::testing::ValuesIn(kTransportSettings),
//                            transport_setting_name);
inline constexpr TransportSetting kTransportSettings[] = {
    {"Tcp", "tcp", ""}, {"UcxTcp", "ucx", "tcp"}, {"UcxPosixCmaTcp", "ucx", "posix,cma,tcp"}};

inline std::string transport_setting_name(const ::testing::TestParamInfo<TransportSetting>& info) {
  return std::string(info.param.test_name);
}

}  // namespace troupe::kv_transfer::testing
