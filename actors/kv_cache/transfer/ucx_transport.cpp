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
#include "actors/kv_cache/transfer/ucx_transport.hpp"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>

namespace troupe::kv_transfer {
namespace {

using Clock = std::chrono::steady_clock;

std::string describe_ucx_failure(std::string_view what, ucs_status_t status) {
  return std::string(what) + ": " + ucs_status_string(status);
}

// now + timeout, saturating: a caller may pass milliseconds::max() for "no timeout".
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const Clock::time_point now = Clock::now();
  if (timeout >=
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

template <class... Handlers>
struct Overloaded : Handlers... {
  using Handlers::operator()...;
};
template <class... Handlers>
Overloaded(Handlers...) -> Overloaded<Handlers...>;

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

// ---------------------------------------------------------------------------------------------
// Caller side

std::string UcxTransport::start() {
  if (region_base_ == nullptr || region_bytes_ == 0) return "the KV region is empty";
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return std::string("eventfd: ") + std::strerror(errno);
  if (std::string error = init_context_and_register_region(); !error.empty()) return error;

  std::future<std::string> started = started_.get_future();
  progress_thread_ = std::thread([this] { run_progress_thread(); });
  return started.get();  // on an error the thread has ended; the destructor joins it
}

std::string UcxTransport::init_context_and_register_region() {
  ucp_config_t* ucx_config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &ucx_config);
  if (status != UCS_OK) return describe_ucx_failure("ucp_config_read", status);
  if (!config_.transports.empty()) {
    status = ucp_config_modify(ucx_config, "TLS", config_.transports.c_str());
    if (status != UCS_OK) {
      ucp_config_release(ucx_config);
      return describe_ucx_failure("UCX transports '" + config_.transports + "'", status);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  status = ucp_init(&params, ucx_config, &context_);
  ucp_config_release(ucx_config);
  if (status != UCS_OK) return describe_ucx_failure("ucp_init", status);

  ucp_mem_map_params_t map_params{};  // existing memory: no UCP_MEM_MAP_ALLOCATE
  map_params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  map_params.address = region_base_;
  map_params.length = region_bytes_;
  status = ucp_mem_map(context_, &map_params, &region_memory_handle_);
  if (status != UCS_OK) return describe_ucx_failure("ucp_mem_map", status);

  void* packed_rkey = nullptr;
  size_t packed_rkey_bytes = 0;
  status = ucp_rkey_pack(context_, region_memory_handle_, &packed_rkey, &packed_rkey_bytes);
  if (status != UCS_OK) return describe_ucx_failure("ucp_rkey_pack", status);
  descriptor_.rkey.assign(static_cast<const char*>(packed_rkey), packed_rkey_bytes);
  ucp_rkey_buffer_release(packed_rkey);
  descriptor_.transport = "ucx";
  descriptor_.base_address = reinterpret_cast<uint64_t>(region_base_);
  descriptor_.region_bytes = region_bytes_;
  return {};
}

UcxTransport::~UcxTransport() {
  if (progress_thread_.joinable()) {
    {
      std::lock_guard lock(mutex_);
      stop_requested_ = true;
    }
    wake_progress_thread();
    progress_thread_.join();
  }
  if (region_memory_handle_ != nullptr) ucp_mem_unmap(context_, region_memory_handle_);
  if (context_ != nullptr) ucp_cleanup(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void UcxTransport::pull(const std::string& peer_key, const LocalDescriptor& peer,
                        std::vector<Segment> segments, std::chrono::milliseconds timeout,
                        PullDone done) {
  num_pulls_in_flight_.fetch_add(1);
  enqueue(PullCommand{.peer_key = peer_key,
                      .peer = peer,
                      .segments = std::move(segments),
                      .deadline = deadline_after(timeout),
                      .timeout = timeout,
                      .done = std::move(done)});
}

void UcxTransport::forget_peer(const std::string& peer_key) {
  enqueue(ForgetPeerCommand{.peer_key = peer_key});
}

KvTransport::Stats UcxTransport::stats() const {
  return Stats{.pulls_ok = num_pulls_ok_.load(),
               .pulls_failed = num_pulls_failed_.load(),
               .bytes_pulled = num_bytes_pulled_.load(),
               .segments = num_segments_pulled_.load(),
               .gets_issued = num_gets_issued_.load(),
               .peers = num_peers_.load(),
               .in_flight = num_pulls_in_flight_.load()};
}

void UcxTransport::enqueue(Command command) {
  {
    std::lock_guard lock(mutex_);
    commands_.push_back(std::move(command));
  }
  wake_progress_thread();
}

void UcxTransport::wake_progress_thread() {
  const uint64_t one = 1;
  // Only fails when the counter would overflow, and then the thread is awake anyway.
  [[maybe_unused]] ssize_t written = write(wake_fd_, &one, sizeof(one));
}

// ---------------------------------------------------------------------------------------------
// Progress thread: the loop

void UcxTransport::run_progress_thread() {
  if (std::string error = create_worker(); !error.empty()) {
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    worker_ = nullptr;
    started_.set_value(std::move(error));
    return;
  }
  started_.set_value({});

  while (drain_commands()) {
    const bool more_to_progress = progress_once();
    expire_timed_out_pulls(Clock::now());
    free_closed_peers();
    run_finished_pull_callbacks();
    if (!more_to_progress) {
      wait_for_events(/*busy=*/!pulls_in_flight_.empty() || !retiring_peers_.empty());
    }
  }
  shut_down_on_progress_thread();
}

std::string UcxTransport::create_worker() {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t status = ucp_worker_create(context_, &params, &worker_);
  if (status != UCS_OK) return describe_ucx_failure("ucp_worker_create", status);

  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  status = ucp_worker_get_address(worker_, &address, &address_bytes);
  if (status != UCS_OK) return describe_ucx_failure("ucp_worker_get_address", status);
  descriptor_.worker_address.assign(reinterpret_cast<const char*>(address), address_bytes);
  ucp_worker_release_address(worker_, address);

  if (ucp_worker_get_efd(worker_, &worker_event_fd_) != UCS_OK) worker_event_fd_ = -1;
  return {};
}

bool UcxTransport::drain_commands() {
  std::deque<Command> commands;
  bool stop_requested = false;
  {
    std::lock_guard lock(mutex_);
    commands.swap(commands_);
    stop_requested = stop_requested_;
  }
  for (Command& command : commands) {
    std::visit(Overloaded{
                   [&](PullCommand& pull_command) {
                     if (!stop_requested) {
                       start_pull(std::move(pull_command));
                       return;
                     }
                     auto pull = std::make_unique<Pull>();
                     pull->done = std::move(pull_command.done);
                     finish_now(std::move(pull),
                                Status::failure(StatusCode::kShuttingDown,
                                                "the UCX transport is shutting down"));
                   },
                   [&](ForgetPeerCommand& forget) {
                     auto found = peers_.find(forget.peer_key);
                     if (found == peers_.end()) return;
                     retire_peer(found->second.get(),
                                 Status::failure(StatusCode::kPeerFailed,
                                                 "peer '" + forget.peer_key + "' was forgotten"));
                   },
               },
               command);
  }
  return !stop_requested;
}

bool UcxTransport::progress_once() {
  // Bounded, so that a peer streaming requests at us cannot starve our commands and timeouts.
  constexpr int kMaxProgressRounds = 256;
  int round = 0;
  while (round < kMaxProgressRounds && ucp_worker_progress(worker_) != 0) ++round;
  retire_failed_endpoints();
  return round == kMaxProgressRounds;
}

void UcxTransport::wait_for_events(bool busy) {
  const auto interval = busy ? config_.busy_poll_interval : config_.idle_poll_interval;
  pollfd fds[2] = {{.fd = wake_fd_, .events = POLLIN, .revents = 0},
                   {.fd = worker_event_fd_, .events = POLLIN, .revents = 0}};
  if (worker_event_fd_ >= 0) {
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) return;  // events arrived since the last progress: go again
    if (armed == UCS_OK) {
      poll(fds, 2, static_cast<int>(interval.count()));
    } else {
      poll(fds, 1, 1);  // arming failed: do not trust the efd, come back soon
    }
  } else {
    // No event fd: nothing tells us when a peer's request arrives, so keep polling often
    // (briefly while our own pulls are in flight).
    const timespec nap{.tv_sec = 0, .tv_nsec = busy ? 50'000 : 1'000'000};
    ppoll(fds, 1, &nap, nullptr);
  }
  uint64_t wakeups = 0;
  [[maybe_unused]] ssize_t bytes_read = read(wake_fd_, &wakeups, sizeof(wakeups));
}

// ---------------------------------------------------------------------------------------------
// Progress thread: pulls

void UcxTransport::start_pull(PullCommand command) {
  auto pull = std::make_unique<Pull>();
  pull->owner = this;
  pull->peer_key = command.peer_key;
  pull->done = std::move(command.done);
  pull->deadline = command.deadline;
  pull->timeout = command.timeout;
  pull->num_segments = command.segments.size();

  const LocalDescriptor& descriptor = command.peer;
  if (descriptor.transport != "ucx" || descriptor.worker_address.empty() ||
      descriptor.rkey.empty()) {
    finish_now(std::move(pull), Status::failure(StatusCode::kInvalidRequest,
                                                "the descriptor of peer '" + command.peer_key +
                                                    "' is not a UCX descriptor"));
    return;
  }
  Status in_range =
      check_segments_in_range(command.segments, descriptor.region_bytes, region_bytes_);
  if (!in_range.ok()) {
    finish_now(std::move(pull), std::move(in_range));
    return;
  }
  const std::vector<Segment> gets = coalesce_adjacent_segments(command.segments);
  for (const Segment& get : gets) pull->num_bytes += get.bytes;
  if (gets.empty()) {
    finish_now(std::move(pull), Status::success());
    return;
  }
  Status connect_failure;
  Peer* peer = find_or_connect_peer(command.peer_key, descriptor, &connect_failure);
  if (peer == nullptr) {
    finish_now(std::move(pull), std::move(connect_failure));
    return;
  }
  Pull* issued = pull.get();
  pulls_in_flight_.emplace(issued, std::move(pull));
  issue_gets(issued, peer, gets);
}

Peer* UcxTransport::find_or_connect_peer(const std::string& peer_key,
                                         const LocalDescriptor& descriptor, Status* failure) {
  if (auto found = peers_.find(peer_key); found != peers_.end()) {
    if (found->second->descriptor == descriptor) return found->second.get();
    retire_peer(found->second.get(),
                Status::failure(StatusCode::kPeerFailed,
                                "peer '" + peer_key + "' restarted (its descriptor changed)"));
  }
  auto peer = std::make_unique<Peer>();
  peer->owner = this;
  peer->key = peer_key;
  peer->descriptor = descriptor;

  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(descriptor.worker_address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxTransport::endpoint_error_callback;
  params.err_handler.arg = peer.get();
  ucs_status_t status = ucp_ep_create(worker_, &params, &peer->endpoint);
  if (status != UCS_OK) {
    std::string error =
        describe_ucx_failure("cannot create an endpoint to peer '" + peer_key + "'", status);
    if (status == UCS_ERR_UNREACHABLE) {
      // Both causes look the same from here; the second is a configuration error.
      error +=
          " (the peer is gone, or no transport in common can report peer failures: UCX "
          "1.13's shared memory cannot, so UCX_TLS needs tcp or an RDMA transport)";
    }
    *failure = Status::failure(StatusCode::kPeerFailed, std::move(error));
    return nullptr;
  }
  Peer* connected = peer.get();
  peers_.emplace(peer_key, std::move(peer));
  publish_peer_count();

  status = ucp_ep_rkey_unpack(connected->endpoint, descriptor.rkey.data(), &connected->rkey);
  if (status != UCS_OK) {
    *failure = Status::failure(
        StatusCode::kInvalidRequest,
        describe_ucx_failure("cannot unpack the rkey of peer '" + peer_key + "'", status));
    retire_peer(connected, *failure);
    return nullptr;
  }
  return connected;
}

void UcxTransport::issue_gets(Pull* pull, Peer* peer, const std::vector<Segment>& gets) {
  pull->peer = peer;
  peer->pulls_with_gets_in_flight.insert(pull);
  for (const Segment& get : gets) {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    params.cb.send = &UcxTransport::get_completed_callback;
    params.user_data = pull;
    ucs_status_ptr_t request =
        ucp_get_nbx(peer->endpoint, region_base_ + get.local_offset, get.bytes,
                    peer->descriptor.base_address + get.remote_offset, peer->rkey, &params);
    num_gets_issued_.fetch_add(1);
    if (request == nullptr) continue;  // completed in place; the callback will not run
    if (UCS_PTR_IS_ERR(request)) {
      pull->status = Status::failure(
          StatusCode::kPeerFailed, describe_ucx_failure("ucp_get_nbx from peer '" + peer->key + "'",
                                                        UCS_PTR_STATUS(request)));
      break;
    }
    ++pull->gets_in_flight;
  }
  pull->all_gets_issued = true;
  const Status refused = pull->status;
  if (pull->gets_in_flight == 0) {
    peer->pulls_with_gets_in_flight.erase(pull);
    move_to_finished(pull);
  }
  // The endpoint refused a get: it is unusable, so the next pull must reconnect. Closing may
  // complete this pull's other gets, so it comes after the completion check above.
  if (!refused.ok()) retire_peer(peer, refused);
}

void UcxTransport::get_completed_callback(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);  // allowed inside the callback: UCX releases it when we return
  auto* pull = static_cast<Pull*>(user_data);
  pull->owner->on_get_completed(pull, status);
}

void UcxTransport::on_get_completed(Pull* pull, ucs_status_t status) {
  --pull->gets_in_flight;
  if (status != UCS_OK && pull->status.ok()) {
    pull->status = Status::failure(
        StatusCode::kPeerFailed,
        describe_ucx_failure("read from peer '" + pull->peer_key + "' failed", status));
  }
  // Still issuing (UCX may complete an earlier get inside a later ucp_get_nbx): issue_gets
  // finishes the pull itself.
  if (pull->gets_in_flight > 0 || !pull->all_gets_issued) return;
  pull->peer->pulls_with_gets_in_flight.erase(pull);
  move_to_finished(pull);
}

void UcxTransport::expire_timed_out_pulls(Clock::time_point now) {
  std::vector<Peer*> peers_to_drop;
  for (auto& [raw, pull] : pulls_in_flight_) {
    if (pull->timed_out || now < pull->deadline) continue;
    pull->timed_out = true;
    if (pull->status.ok()) {
      pull->status = Status::failure(StatusCode::kTimedOut,
                                     "pull from peer '" + pull->peer_key + "' did not finish in " +
                                         std::to_string(pull->timeout.count()) + " ms");
    }
    peers_to_drop.push_back(pull->peer);
  }
  // Closing can complete gets (and erase pulls) synchronously, so not inside the loop above.
  for (Peer* peer : peers_to_drop) {
    retire_peer(peer, Status::failure(StatusCode::kPeerFailed,
                                      "the endpoint to peer '" + peer->key +
                                          "' was dropped because a pull from it timed out"));
  }
}

void UcxTransport::move_to_finished(Pull* pull) {
  auto found = pulls_in_flight_.find(pull);
  finished_pulls_.push_back(std::move(found->second));
  pulls_in_flight_.erase(found);
}

void UcxTransport::finish_now(std::unique_ptr<Pull> pull, Status status) {
  pull->status = std::move(status);
  finished_pulls_.push_back(std::move(pull));
}

void UcxTransport::run_finished_pull_callbacks() {
  std::vector<std::unique_ptr<Pull>> finished;
  finished.swap(finished_pulls_);
  for (std::unique_ptr<Pull>& pull : finished) {
    // Counters first, so a caller woken by `done` already sees this pull in stats().
    if (pull->status.ok()) {
      num_pulls_ok_.fetch_add(1);
      num_bytes_pulled_.fetch_add(pull->num_bytes);
      num_segments_pulled_.fetch_add(pull->num_segments);
    } else {
      num_pulls_failed_.fetch_add(1);
    }
    num_pulls_in_flight_.fetch_sub(1);
    if (pull->done) pull->done(std::move(pull->status));
  }
}

// ---------------------------------------------------------------------------------------------
// Progress thread: endpoints

void UcxTransport::endpoint_error_callback(void* arg, ucp_ep_h /*endpoint*/, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  // Inside ucp_worker_progress: only note it; the endpoint is closed once progress returns.
  peer->owner->failed_endpoints_.emplace_back(peer, status);
}

void UcxTransport::retire_failed_endpoints() {
  while (!failed_endpoints_.empty()) {  // closing one endpoint may report another
    std::vector<std::pair<Peer*, ucs_status_t>> failed;
    failed.swap(failed_endpoints_);
    for (auto& [peer, status] : failed) {
      retire_peer(peer,
                  Status::failure(StatusCode::kPeerFailed,
                                  describe_ucx_failure(
                                      "the endpoint to peer '" + peer->key + "' failed", status)));
    }
  }
}

void UcxTransport::retire_peer(Peer* peer, const Status& reason) {
  if (peer->retiring) return;
  peer->retiring = true;
  for (Pull* pull : peer->pulls_with_gets_in_flight) {
    if (pull->status.ok()) pull->status = reason;
  }
  auto found = peers_.find(peer->key);
  if (found != peers_.end() && found->second.get() == peer) {
    retiring_peers_.push_back(std::move(found->second));
    peers_.erase(found);
    publish_peer_count();
  }
  if (peer->rkey != nullptr && peer->pulls_with_gets_in_flight.empty()) {
    ucp_rkey_destroy(peer->rkey);  // nothing uses it: destroy before the endpoint, as UCX asks
    peer->rkey = nullptr;
  }
  // FORCE: do not wait for the peer (it may be dead or stopped); UCX completes every outstanding
  // get on this endpoint with an error, possibly before ucp_ep_close_nbx returns.
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucp_ep_h endpoint = std::exchange(peer->endpoint, nullptr);
  ucs_status_ptr_t request = ucp_ep_close_nbx(endpoint, &params);
  if (UCS_PTR_IS_PTR(request)) peer->close_request = request;
  // NULL or an error: the endpoint is released either way.
}

void UcxTransport::free_closed_peers() {
  retire_failed_endpoints();  // they hold Peer pointers: handle them before freeing any peer
  std::erase_if(retiring_peers_, [](std::unique_ptr<Peer>& peer) {
    if (peer->close_request != nullptr) {
      if (ucp_request_check_status(peer->close_request) == UCS_INPROGRESS) return false;
      ucp_request_free(peer->close_request);
      peer->close_request = nullptr;
    }
    if (!peer->pulls_with_gets_in_flight.empty()) return false;
    if (peer->rkey != nullptr) ucp_rkey_destroy(peer->rkey);
    return true;
  });
}

// ---------------------------------------------------------------------------------------------
// Progress thread: shutdown

void UcxTransport::shut_down_on_progress_thread() {
  std::vector<Peer*> connected;
  for (auto& [key, peer] : peers_) connected.push_back(peer.get());
  for (Peer* peer : connected) {
    retire_peer(peer,
                Status::failure(StatusCode::kShuttingDown, "the UCX transport is shutting down"));
  }
  // Wait for the force closes to purge every outstanding get, so no done runs while UCX may
  // still write into the caller's memory.
  const Clock::time_point give_up = Clock::now() + config_.shutdown_timeout;
  while ((!retiring_peers_.empty() || !pulls_in_flight_.empty()) && Clock::now() < give_up) {
    progress_once();
    free_closed_peers();
    run_finished_pull_callbacks();
    if (!retiring_peers_.empty() || !pulls_in_flight_.empty()) wait_for_events(/*busy=*/true);
  }
  if (!retiring_peers_.empty() || !pulls_in_flight_.empty()) {
    spdlog::warn(
        "kv-transfer: {} endpoints and {} pulls still open after {} ms; destroying the "
        "UCX worker anyway",
        retiring_peers_.size(), pulls_in_flight_.size(), config_.shutdown_timeout.count());
  }
  for (std::unique_ptr<Peer>& peer : retiring_peers_) {
    if (peer->close_request != nullptr) ucp_request_free(peer->close_request);
    if (peer->rkey != nullptr) ucp_rkey_destroy(peer->rkey);
  }
  ucp_worker_destroy(worker_);  // from here on UCX writes nothing into our region
  worker_ = nullptr;
  retiring_peers_.clear();
  for (auto& [raw, pull] : pulls_in_flight_) {
    pull->status = Status::failure(StatusCode::kShuttingDown, "the UCX transport shut down");
    finished_pulls_.push_back(std::move(pull));
  }
  pulls_in_flight_.clear();
  drain_commands();  // pulls that raced with the destructor: answered, never dropped
  run_finished_pull_callbacks();
}

}  // namespace

std::optional<std::string> check_transport_list(std::string_view transports) {
  if (transports.empty() || transports.front() == '^') return std::nullopt;  // UCX's choice / all but
  // Transports whose endpoints can report a dead peer (UCP_ERR_HANDLING_MODE_PEER), which every
  // endpoint here needs: a pull must fail, never hang, when its peer dies.
  constexpr std::string_view kReportsPeerFailure[] = {"tcp", "ib", "rc", "rc_v", "rc_x", "rc_mlx5",
                                                      "ud", "ud_v", "ud_x", "ud_mlx5", "dc",
                                                      "dc_x", "dc_mlx5", "all"};
  size_t start = 0;
  while (start <= transports.size()) {
    const size_t end = std::min(transports.find(',', start), transports.size());
    const std::string_view name = transports.substr(start, end - start);
    for (std::string_view good : kReportsPeerFailure) {
      if (name == good) return std::nullopt;
    }
    start = end + 1;
  }
  return "UCX transports '" + std::string(transports) +
         "' cannot report a dead peer (UCX 1.13's shared memory transports posix, sysv, cma "
         "cannot), so a pull could hang: add tcp or an RDMA transport (e.g. posix,cma,tcp)";
}

std::unique_ptr<KvTransport> make_ucx_transport(void* base, size_t bytes,
                                                const UcxTransportConfig& config,
                                                std::string* error) {
  if (auto refused = check_transport_list(config.transports)) {
    if (error != nullptr) *error = std::move(*refused);
    return nullptr;
  }
  auto transport = std::make_unique<UcxTransport>(base, bytes, config);
  if (std::string failure = transport->start(); !failure.empty()) {
    if (error != nullptr) *error = std::move(failure);
    return nullptr;
  }
  return transport;
}

}  // namespace troupe::kv_transfer
