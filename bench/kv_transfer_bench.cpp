// KV transfer benchmark: a KV transport alone (no model, no servers) — troupe's own tcp one or
// UCX — a decode engine pulling
// a 1k-token prompt's KV from a prefill engine in another process, shaped as troupe's pulls are
// for SmolLM2-135M (30 layers, K and V planes, 6,144-byte blocks, 63 consecutive blocks: 60
// coalesced reads of 387,072 bytes, 23.2 MB). Prints per-pull ms and GB/s (1e9); asserts
// nothing about speed (docs/design.md §5). For ucx, UCX_TLS from the environment (e.g.
// UCX_TLS=tcp); pin with taskset, e.g. the prefill child follows the parent's CPU set.
//
//   kv_transfer_bench [pulls=30] [reply_chunk_bytes=65280 (ucx)] [transport=tcp|ucx]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <sys/prctl.h>
#include <sys/wait.h>

#include "actors/kv_cache/transfer/tcp_transport.hpp"
#include "actors/kv_cache/transfer/ucx_transport.hpp"

namespace {

using troupe::kv_transfer::KvTransport;
using troupe::kv_transfer::LocalDescriptor;
using troupe::kv_transfer::Segment;
using troupe::kv_transfer::Status;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kBlockBytes = 6144;
constexpr uint64_t kPlanes = 60;          // 30 layers x {K, V}
constexpr uint64_t kBlocksPerPlane = 64;  // the prompt's 63 blocks fit
constexpr uint64_t kPromptBlocks = 63;
constexpr uint64_t kRegionBytes = kPlanes * kBlocksPerPlane * kBlockBytes;

bool write_all(int fd, const void* data, size_t bytes) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = write(fd, cursor, bytes);
    if (n <= 0) return false;
    cursor += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t bytes) {
  auto* cursor = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = read(fd, cursor, bytes);
    if (n <= 0) return false;
    cursor += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool write_blob(int fd, const std::string& blob) {
  const uint64_t size = blob.size();
  return write_all(fd, &size, sizeof(size)) && write_all(fd, blob.data(), blob.size());
}

bool read_blob(int fd, std::string* blob) {
  uint64_t size = 0;
  if (!read_all(fd, &size, sizeof(size)) || size > (1u << 20)) return false;
  blob->resize(size);
  return read_all(fd, blob->data(), size);
}

std::unique_ptr<KvTransport> make_transport(const std::string& kind, std::vector<uint8_t>& region,
                                           const troupe::kv_transfer::UcxTransportConfig& config,
                                           std::string* error) {
  if (kind == "ucx") {
    return troupe::kv_transfer::make_ucx_transport(region.data(), region.size(), config, error);
  }
  return troupe::kv_transfer::make_tcp_transport(region.data(), region.size(),
                                                 troupe::kv_transfer::TcpTransportConfig{}, error);
}

[[noreturn]] void run_prefill_child(int report_fd, int hold_fd, const std::string& kind,
                                    const troupe::kv_transfer::UcxTransportConfig& config) {
  std::vector<uint8_t> region(kRegionBytes);
  for (uint64_t i = 0; i < region.size(); ++i) region[i] = static_cast<uint8_t>(i * 131 + 7);
  std::string error;
  std::unique_ptr<KvTransport> transport = make_transport(kind, region, config, &error);
  if (transport == nullptr) {
    std::fprintf(stderr, "prefill: %s\n", error.c_str());
    _exit(2);
  }
  const LocalDescriptor& d = transport->local_descriptor();
  if (!write_blob(report_fd, d.transport) || !write_blob(report_fd, d.worker_address) ||
      !write_blob(report_fd, d.rkey) || !write_all(report_fd, &d.base_address, 8) ||
      !write_all(report_fd, &d.region_bytes, 8)) {
    _exit(3);
  }
  char byte = 0;
  while (read(hold_fd, &byte, 1) > 0) {
  }
  transport.reset();
  _exit(0);
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const size_t index = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[index];
}

}  // namespace

int main(int argc, char** argv) {
  const int num_pulls = argc > 1 ? std::atoi(argv[1]) : 30;
  troupe::kv_transfer::UcxTransportConfig config;
  if (argc > 2) config.reply_chunk_bytes = static_cast<size_t>(std::atoll(argv[2]));
  const std::string kind = argc > 3 ? argv[3] : "tcp";
  if (kind != "tcp" && kind != "ucx") {
    std::fprintf(stderr, "transport must be tcp or ucx, not '%s'\n", kind.c_str());
    return 2;
  }

  int report_pipe[2];
  int hold_pipe[2];
  if (pipe(report_pipe) != 0 || pipe(hold_pipe) != 0) return 1;
  const pid_t parent = getpid();
  const pid_t child = fork();  // before a transport's threads start here
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(4);
    close(report_pipe[0]);
    close(hold_pipe[1]);
    run_prefill_child(report_pipe[1], hold_pipe[0], kind, config);
  }
  close(report_pipe[1]);
  close(hold_pipe[0]);
  LocalDescriptor peer;
  if (!read_blob(report_pipe[0], &peer.transport) ||
      !read_blob(report_pipe[0], &peer.worker_address) || !read_blob(report_pipe[0], &peer.rkey) ||
      !read_all(report_pipe[0], &peer.base_address, 8) ||
      !read_all(report_pipe[0], &peer.region_bytes, 8)) {
    std::fprintf(stderr, "the prefill child did not start\n");
    return 1;
  }

  std::vector<uint8_t> region(kRegionBytes, 0);
  std::string error;
  std::unique_ptr<KvTransport> decode = make_transport(kind, region, config, &error);
  if (decode == nullptr) {
    std::fprintf(stderr, "decode: %s\n", error.c_str());
    return 1;
  }
  // The blocks of one plane after another, as the agent lists them (coalesced to one read per
  // plane by the transport); remote blocks 0..62 into local blocks 1..63.
  std::vector<Segment> segments;
  for (uint64_t plane = 0; plane < kPlanes; ++plane) {
    for (uint64_t block = 0; block < kPromptBlocks; ++block) {
      const uint64_t plane_base = plane * kBlocksPerPlane * kBlockBytes;
      segments.push_back({.remote_offset = plane_base + block * kBlockBytes,
                          .local_offset = plane_base + (block + 1) * kBlockBytes,
                          .bytes = kBlockBytes});
    }
  }
  const double pull_bytes = static_cast<double>(kPlanes * kPromptBlocks * kBlockBytes);

  std::vector<double> ms;
  double first_ms = 0;
  for (int i = 0; i <= num_pulls; ++i) {
    std::promise<Status> answer;
    std::future<Status> answered = answer.get_future();
    const Clock::time_point start = Clock::now();
    decode->pull("prefill", peer, segments, std::chrono::milliseconds(30000),
                 [&answer](Status status) { answer.set_value(std::move(status)); });
    const Status status = answered.get();
    const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!status.ok()) {
      std::fprintf(stderr, "pull %d failed: %s\n", i, status.error.c_str());
      return 1;
    }
    if (i == 0) {
      first_ms = elapsed;  // connects the endpoint: reported apart
    } else {
      ms.push_back(elapsed);
    }
  }
  for (uint64_t block = 0; block < kPromptBlocks; ++block) {  // spot check: plane 59's bytes
    const uint64_t remote = (kPlanes - 1) * kBlocksPerPlane * kBlockBytes + block * kBlockBytes;
    if (region[remote + kBlockBytes + 5] != static_cast<uint8_t>((remote + 5) * 131 + 7)) {
      std::fprintf(stderr, "wrong bytes pulled\n");
      return 1;
    }
  }
  decode.reset();
  close(hold_pipe[1]);
  waitpid(child, nullptr, 0);

  const double median = percentile(ms, 0.5);
  std::printf(
      "kv_transfer_bench: %s, %d pulls of %.1f MB (%llu reads), reply_chunk_bytes %zu (ucx), "
      "UCX_TLS=%s\n",
      kind.c_str(), num_pulls, pull_bytes / 1e6, static_cast<unsigned long long>(kPlanes),
      config.reply_chunk_bytes, std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "(unset)");
  std::printf("  first (connects): %.1f ms\n", first_ms);
  std::printf("  ms p10/median/p90: %.1f / %.1f / %.1f\n", percentile(ms, 0.1), median,
              percentile(ms, 0.9));
  std::printf("  GB/s at p90/median/p10: %.2f / %.2f / %.2f\n",
              pull_bytes / percentile(ms, 0.9) / 1e6, pull_bytes / median / 1e6,
              pull_bytes / percentile(ms, 0.1) / 1e6);
  return 0;
}
