// UcxTransport's lifecycle: the UCX context and the region's registration, start and
// destruction, the caller-side entry points (pull, forget_peer, stats) and the command queue
// they feed, the progress thread's loop and its shutdown; plus check_transport_list() and
// make_ucx_transport(). The pull machinery (endpoints, read requests and replies, timeouts,
// retiring peers) is in ucx_transport_pulls.cpp, the answering of peers' reads in
// ucx_transport_serve.cpp. Who may touch what, the wire format, and the lifetimes of pulls,
// peers and send buffers: ucx_transport_internal.hpp.
#include "actors/kv_cache/transfer/ucx_transport.hpp"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>

#include "actors/kv_cache/transfer/ucx_transport_internal.hpp"

namespace troupe::kv_transfer {
namespace detail {
namespace {

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

}  // namespace

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
  // AM carries the data (ucx_transport.hpp says why not RMA); RMA only so that the packed rkey
  // in our descriptor is a usable one.
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
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
               .bytes_served = num_bytes_served_.load(),
               .serves_failed = num_serves_failed_.load(),
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
  return set_am_handlers();
}

std::string UcxTransport::set_am_handlers() {
  const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {
      {kReadRequestAmId, &UcxTransport::read_request_callback},
      {kReadReplyAmId, &UcxTransport::read_reply_callback},
  };
  for (const auto& [id, callback] : handlers) {
    ucp_am_handler_param_t params{};
    params.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    params.id = id;
    params.flags = UCP_AM_FLAG_WHOLE_MSG;  // 1.13 supports nothing else
    params.cb = callback;
    params.arg = this;
    const ucs_status_t status = ucp_worker_set_am_recv_handler(worker_, &params);
    if (status != UCS_OK) return describe_ucx_failure("ucp_worker_set_am_recv_handler", status);
  }
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
// Progress thread: shutdown

void UcxTransport::shut_down_on_progress_thread() {
  std::vector<Peer*> connected;
  for (auto& [key, peer] : peers_) connected.push_back(peer.get());
  const Status shutting_down =
      Status::failure(StatusCode::kShuttingDown, "the UCX transport is shutting down");
  for (Peer* peer : connected) retire_peer(peer, shutting_down);  // finishes every pull
  // Let the closes finish, so the worker is destroyed with no endpoint half closed.
  const Clock::time_point give_up = Clock::now() + config_.shutdown_timeout;
  while (!retiring_peers_.empty() && Clock::now() < give_up) {
    progress_once();
    free_closed_peers();
    run_finished_pull_callbacks();
    if (!retiring_peers_.empty()) wait_for_events(/*busy=*/true);
  }
  if (!retiring_peers_.empty()) {
    spdlog::warn(
        "kv-transfer: {} endpoints still closing after {} ms; destroying the UCX worker "
        "anyway",
        retiring_peers_.size(), config_.shutdown_timeout.count());
  }
  for (std::unique_ptr<Peer>& peer : retiring_peers_) {
    if (peer->close_request != nullptr) ucp_request_free(peer->close_request);
  }
  ucp_worker_destroy(worker_);  // from here on UCX reads none of our send buffers
  worker_ = nullptr;
  retiring_peers_.clear();
  send_buffers_.clear();
  for (auto& [id, pull] : pulls_in_flight_) {  // none expected: each belonged to a peer
    pull->status = Status::failure(StatusCode::kShuttingDown, "the UCX transport shut down");
    finished_pulls_.push_back(std::move(pull));
  }
  pulls_in_flight_.clear();
  drain_commands();  // pulls that raced with the destructor: answered, never dropped
  run_finished_pull_callbacks();
}

}  // namespace detail

std::optional<std::string> check_transport_list(std::string_view transports) {
  if (transports.empty() || transports.front() == '^')
    return std::nullopt;  // UCX's choice / all but
  // Transports whose endpoints can report a dead peer (UCP_ERR_HANDLING_MODE_PEER), which every
  // endpoint here needs: a pull must fail, never hang, when its peer dies.
  constexpr std::string_view kReportsPeerFailure[] = {
      "tcp",  "ib",   "rc",      "rc_v", "rc_x", "rc_mlx5", "ud",
      "ud_v", "ud_x", "ud_mlx5", "dc",   "dc_x", "dc_mlx5", "all"};
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
  auto transport = std::make_unique<detail::UcxTransport>(base, bytes, config);
  if (std::string failure = transport->start(); !failure.empty()) {
    if (error != nullptr) *error = std::move(failure);
    return nullptr;
  }
  return transport;
}

}  // namespace troupe::kv_transfer
