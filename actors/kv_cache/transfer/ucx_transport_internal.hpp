// Private to ucx_transport.cpp and ucx_transport_pulls.cpp, the two halves of UcxTransport:
// the class, the commands callers enqueue, and the Pull and Peer records the progress thread
// keeps. Nothing else includes it; the public API is ucx_transport.hpp (make_ucx_transport).
//
// UcxTransport: KvTransport over UCX's UCP API (RMA get), driven by one progress thread.
//
// Who touches what:
//
//   caller threads ──pull()/forget_peer()──► commands_ (mutex) ──eventfd──┐
//                                                                         ▼
//   progress thread: drain commands → ucp_worker_progress → endpoint failures → timeouts
//                    → retire closed endpoints → run finished PullDones → arm + poll(efd, eventfd)
//
// Everything of UCX below the context (worker, endpoints, rkeys, requests) belongs to the
// progress thread. The context and the memory registration are made by the constructing thread
// before the progress thread starts, and released by the destructor after it has joined.
//
// Lifetimes (all on the progress thread):
//   Pull  — from issue until its last get completed; the get requests point at it (user_data).
//   Peer  — in peers_ while usable; on failure, timeout, forget or shutdown it moves to
//           retiring_peers_ and its endpoint is force-closed, which makes UCX complete every
//           outstanding get on it with an error. It is freed (rkey destroyed) only once the
//           close finished and no get of it is outstanding.
// NOTE: a PullDone runs only after every get of its pull completed, so after done(error) UCX
// writes nothing more into the caller's bytes. A timed-out pull therefore finishes when the
// force close has purged its gets, not at the deadline itself.
// NOTE: ucp_rkey_destroy wants "after outstanding operations are flushed, and before the
// endpoint is destroyed". With gets outstanding both cannot hold; we keep the first (the rkey
// outlives every get that uses it). ucp_rkey_destroy (ucp_rkey.c) only releases the transport
// keys into the worker's pool, never using the endpoint; the worker must still exist.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <ucp/api/ucp.h>

#include "actors/kv_cache/transfer/kv_transport.hpp"
#include "actors/kv_cache/transfer/ucx_transport.hpp"

namespace troupe::kv_transfer::detail {

using Clock = std::chrono::steady_clock;

inline std::string describe_ucx_failure(std::string_view what, ucs_status_t status) {
  return std::string(what) + ": " + ucs_status_string(status);
}

struct PullCommand {
  std::string peer_key;
  LocalDescriptor peer;
  std::vector<Segment> segments;
  Clock::time_point deadline;
  std::chrono::milliseconds timeout;
  KvTransport::PullDone done;
};
struct ForgetPeerCommand {
  std::string peer_key;
};
using Command = std::variant<PullCommand, ForgetPeerCommand>;

class UcxTransport;
struct Peer;

struct Pull {
  UcxTransport* owner = nullptr;
  Peer* peer = nullptr;  // set once its gets are issued
  std::string peer_key;
  KvTransport::PullDone done;
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  uint64_t num_bytes = 0;
  uint64_t num_segments = 0;
  uint32_t gets_in_flight = 0;
  bool all_gets_issued = false;
  bool timed_out = false;
  Status status;  // the first failure wins
};

struct Peer {
  UcxTransport* owner = nullptr;
  std::string key;
  LocalDescriptor descriptor;
  ucp_ep_h endpoint = nullptr;
  ucp_rkey_h rkey = nullptr;
  std::unordered_set<Pull*> pulls_with_gets_in_flight;
  bool retiring = false;
  void* close_request = nullptr;  // force close still in progress
};

// Thread-safety: public members as KvTransport says; everything else is the progress thread's.
class UcxTransport final : public KvTransport {
 public:
  UcxTransport(void* base, size_t bytes, const UcxTransportConfig& config)
      : config_(config), region_base_(static_cast<uint8_t*>(base)), region_bytes_(bytes) {}
  ~UcxTransport() override;

  // Constructing thread, once: context, registration, progress thread. Empty string on success.
  std::string start();

  std::string_view name() const override { return "ucx"; }
  const LocalDescriptor& local_descriptor() const override { return descriptor_; }
  void pull(const std::string& peer_key, const LocalDescriptor& peer, std::vector<Segment> segments,
            std::chrono::milliseconds timeout, PullDone done) override;
  void forget_peer(const std::string& peer_key) override;
  Stats stats() const override;

 private:
  std::string init_context_and_register_region();
  void enqueue(Command command);
  void wake_progress_thread();

  // ---- progress thread only ----
  void run_progress_thread();
  std::string create_worker();
  bool drain_commands();  // false once stop was requested
  void start_pull(PullCommand command);
  Peer* find_or_connect_peer(const std::string& peer_key, const LocalDescriptor& descriptor,
                             Status* failure);
  void issue_gets(Pull* pull, Peer* peer, const std::vector<Segment>& segments);
  void on_get_completed(Pull* pull, ucs_status_t status);
  void retire_peer(Peer* peer, const Status& reason);
  void retire_failed_endpoints();
  void expire_timed_out_pulls(Clock::time_point now);
  void free_closed_peers();
  void move_to_finished(Pull* pull);
  void finish_now(std::unique_ptr<Pull> pull, Status status);
  void run_finished_pull_callbacks();
  bool progress_once();  // true: stopped at its bound with more work likely waiting
  void wait_for_events(bool busy);
  void shut_down_on_progress_thread();
  void publish_peer_count() { num_peers_.store(static_cast<int32_t>(peers_.size())); }

  static void get_completed_callback(void* request, ucs_status_t status, void* user_data);
  static void endpoint_error_callback(void* arg, ucp_ep_h endpoint, ucs_status_t status);

  const UcxTransportConfig config_;
  uint8_t* const region_base_;
  const size_t region_bytes_;
  LocalDescriptor descriptor_;  // complete before start() returns, immutable after
  ucp_context_h context_ = nullptr;
  ucp_mem_h region_memory_handle_ = nullptr;
  int wake_fd_ = -1;
  std::promise<std::string> started_;  // the progress thread's worker: "" or why it failed
  std::thread progress_thread_;

  // Shared between callers and the progress thread.
  std::mutex mutex_;
  std::deque<Command> commands_;  // guarded by mutex_
  bool stop_requested_ = false;   // guarded by mutex_
  std::atomic<uint64_t> num_pulls_ok_{0}, num_pulls_failed_{0}, num_bytes_pulled_{0};
  std::atomic<uint64_t> num_segments_pulled_{0}, num_gets_issued_{0};
  std::atomic<int32_t> num_peers_{0}, num_pulls_in_flight_{0};

  // Progress thread only.
  ucp_worker_h worker_ = nullptr;
  int worker_event_fd_ = -1;  // -1: the worker's transports cannot wake us; poll briefly instead
  std::unordered_map<std::string, std::unique_ptr<Peer>> peers_;
  std::vector<std::unique_ptr<Peer>> retiring_peers_;
  std::unordered_map<Pull*, std::unique_ptr<Pull>> pulls_in_flight_;
  std::vector<std::unique_ptr<Pull>> finished_pulls_;
  // Reported by UCX's error callback (inside ucp_worker_progress); closed after it returns.
  std::vector<std::pair<Peer*, ucs_status_t>> failed_endpoints_;
};

}  // namespace troupe::kv_transfer::detail
