// Private to ucx_transport.cpp, ucx_transport_pulls.cpp and ucx_transport_serve.cpp, the three
// parts of UcxTransport: the class, the commands callers enqueue, the wire format of its two
// active messages, and the Pull, Peer and SendBuffers records the progress thread keeps. Nothing
// else includes it; the public API is ucx_transport.hpp (make_ucx_transport).
//
// UcxTransport: KvTransport over UCX's UCP API, driven by one progress thread. A pull is a
// request/reply exchange of UCP active messages (why not ucp_get_nbx: ucx_transport.hpp):
//
//   decode (puller)                                  prefill (owner of the bytes)
//   READ_REQUEST {pull id, n} + n × {offset, bytes} ─►  checks every range against its region
//                                                   ◄─  READ_REPLY {pull id, read, offset} + bytes,
//   copies each chunk to its read's local offset        one per chunk (or one REFUSED reply)
//
// Who touches what:
//
//   caller threads ──pull()/forget_peer()──► commands_ (mutex) ──eventfd──┐
//                                                                         ▼
//   progress thread: drain commands → ucp_worker_progress (our AM handlers run inside it)
//                    → endpoint failures → timeouts → retire closed endpoints
//                    → run finished PullDones → arm + poll(efd, eventfd)
//
// Everything of UCX below the context (worker, endpoints, requests) belongs to the progress
// thread. The context and the memory registration are made by the constructing thread before the
// progress thread starts, and released by the destructor after it has joined.
//
// Lifetimes (all on the progress thread):
//   Pull        — from start_pull until it finishes: every byte arrived, its peer failed or was
//                 dropped, it timed out, or a reply was refused. Found by id (pulls_in_flight_),
//                 never by pointer, so a reply that arrives after its pull finished finds nothing
//                 and is dropped.
//   Peer        — in peers_ while usable; on failure, timeout, forget or shutdown it moves to
//                 retiring_peers_ (its pulls finish at once) and its endpoint is closed (flushed);
//                 freed once the close finished.
//   SendBuffers — the bytes of our outgoing messages that UCX may still read (1.13 packs a
//                 bcopy AM's user header when the fragment leaves, which can be after
//                 ucp_am_send_nbx returned); freed when the last of its sends completed, or after
//                 the worker is destroyed.
// NOTE: our memory is written only by the READ_REPLY handler, on the progress thread, for a pull
// still in flight. So once a pull's done runs, nothing writes into its bytes any more, even when
// the peer keeps sending: a timed-out or failed pull finishes at once, without waiting for UCX.
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

// ---- Wire format. Both ends are our engines, built from this source for the same host
// architecture, so the records travel as raw little-endian structs. The AM ids are ours alone
// (a worker carries nothing else).
inline constexpr unsigned kReadRequestAmId = 1;  // decode -> prefill
inline constexpr unsigned kReadReplyAmId = 2;    // prefill -> decode

// Header of a READ_REQUEST; its data is num_reads ReadRanges.
struct ReadRequestHeader {
  uint64_t pull_id = 0;
  uint32_t num_reads = 0;
  uint32_t reserved = 0;
};
struct ReadRange {  // offset and size in the owner's region
  uint64_t remote_offset = 0;
  uint64_t bytes = 0;
};
// Header of a READ_REPLY; its data is bytes [offset, offset + length) of read `read_index`.
struct ReadReplyHeader {
  enum : uint32_t { kData = 0, kRefused = 1 };  // kRefused: a range was outside the region
  uint64_t pull_id = 0;
  uint32_t read_index = 0;
  uint32_t status = kData;
  uint64_t offset = 0;
};

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
  uint64_t id = 0;
  Peer* peer = nullptr;  // set once its request is sent
  std::string peer_key;
  KvTransport::PullDone done;
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  std::vector<Segment> reads;  // after coalescing; replies name them by index
  uint64_t num_bytes = 0;      // sum of reads[].bytes
  uint64_t bytes_arrived = 0;
  uint64_t num_segments = 0;  // as the caller gave them
  Status status;
};

struct Peer {
  UcxTransport* owner = nullptr;
  std::string key;
  LocalDescriptor descriptor;
  ucp_ep_h endpoint = nullptr;
  std::unordered_set<uint64_t> pulls;  // ids of its pulls in flight
  bool retiring = false;
  void* close_request = nullptr;  // close still in progress
};

// See "SendBuffers" above. One read request (pull_id != 0) or the replies to one (pull_id == 0).
struct SendBuffers {
  UcxTransport* owner = nullptr;
  uint64_t pull_id = 0;
  ReadRequestHeader request_header;
  std::vector<ReadRange> ranges;
  std::vector<ReadReplyHeader> reply_headers;
  uint32_t sends_in_flight = 0;
  bool all_issued = false;
  bool failed = false;
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
  std::string set_am_handlers();
  bool drain_commands();  // false once stop was requested
  // Pulls (ucx_transport_pulls.cpp).
  void start_pull(PullCommand command);
  Peer* find_or_connect_peer(const std::string& peer_key, const LocalDescriptor& descriptor,
                             Status* failure);
  void send_read_request(Pull* pull, Peer* peer);
  void on_read_reply(const ReadReplyHeader& header, const void* data, size_t length);
  void finish_pull(uint64_t pull_id, Status status);
  void retire_peer(Peer* peer, const Status& reason);
  void retire_failed_endpoints();
  void expire_timed_out_pulls(Clock::time_point now);
  void free_closed_peers();
  void finish_now(std::unique_ptr<Pull> pull, Status status);
  void run_finished_pull_callbacks();
  // Serving peers' reads (ucx_transport_serve.cpp).
  void serve_read_request(const ReadRequestHeader& header, const void* data, size_t length,
                          ucp_ep_h reply_endpoint);
  bool send_reply(SendBuffers* buffers, ucp_ep_h reply_endpoint, const ReadReplyHeader& header,
                  const void* data, size_t length);
  // Sends of either kind.
  void on_send_completed(SendBuffers* buffers, ucs_status_t status);
  void release_if_done(SendBuffers* buffers);
  // The loop.
  bool progress_once();  // true: stopped at its bound with more work likely waiting
  void wait_for_events(bool busy);
  void shut_down_on_progress_thread();
  void publish_peer_count() { num_peers_.store(static_cast<int32_t>(peers_.size())); }

  static void send_completed_callback(void* request, ucs_status_t status, void* user_data);
  static void endpoint_error_callback(void* arg, ucp_ep_h endpoint, ucs_status_t status);
  static ucs_status_t read_request_callback(void* arg, const void* header, size_t header_length,
                                            void* data, size_t length,
                                            const ucp_am_recv_param_t* param);
  static ucs_status_t read_reply_callback(void* arg, const void* header, size_t header_length,
                                          void* data, size_t length,
                                          const ucp_am_recv_param_t* param);

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
  std::atomic<uint64_t> num_bytes_served_{0}, num_serves_failed_{0};
  std::atomic<int32_t> num_peers_{0}, num_pulls_in_flight_{0};

  // Progress thread only.
  ucp_worker_h worker_ = nullptr;
  int worker_event_fd_ = -1;  // -1: the worker's transports cannot wake us; poll briefly instead
  uint64_t next_pull_id_ = 1;
  std::unordered_map<std::string, std::unique_ptr<Peer>> peers_;
  std::vector<std::unique_ptr<Peer>> retiring_peers_;
  std::unordered_map<uint64_t, std::unique_ptr<Pull>> pulls_in_flight_;
  std::vector<std::unique_ptr<Pull>> finished_pulls_;
  std::unordered_map<SendBuffers*, std::unique_ptr<SendBuffers>> send_buffers_;
  // Reported by UCX's error callback (inside ucp_worker_progress); closed after it returns.
  std::vector<std::pair<Peer*, ucs_status_t>> failed_endpoints_;
};

}  // namespace troupe::kv_transfer::detail
