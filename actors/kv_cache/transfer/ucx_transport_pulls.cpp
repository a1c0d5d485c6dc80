// UcxTransport's pull machinery, all of it on the progress thread: starting a pull (checks,
// coalescing), finding or connecting the peer's endpoint, sending the READ_REQUEST and taking
// the READ_REPLY chunks into place, timeouts, finished pulls' callbacks, and retiring and freeing
// peers whose endpoint failed, timed out or was forgotten. The lifecycle (context, commands, the
// loop, shutdown) is in ucx_transport.cpp, the answering side in ucx_transport_serve.cpp; the
// wire format and the lifetimes of Pull, Peer and SendBuffers in ucx_transport_internal.hpp.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

#include "actors/kv_cache/transfer/ucx_transport_internal.hpp"

namespace troupe::kv_transfer::detail {

// ---------------------------------------------------------------------------------------------
// Progress thread: pulls

void UcxTransport::start_pull(PullCommand command) {
  auto pull = std::make_unique<Pull>();
  pull->id = next_pull_id_++;
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
  pull->reads = coalesce_adjacent_segments(command.segments);
  for (const Segment& read : pull->reads) pull->num_bytes += read.bytes;
  if (pull->reads.empty()) {
    finish_now(std::move(pull), Status::success());
    return;
  }
  Status connect_failure;
  Peer* peer = find_or_connect_peer(command.peer_key, descriptor, &connect_failure);
  if (peer == nullptr) {
    finish_now(std::move(pull), std::move(connect_failure));
    return;
  }
  Pull* started = pull.get();
  pulls_in_flight_.emplace(started->id, std::move(pull));
  send_read_request(started, peer);
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
  return connected;
}

void UcxTransport::send_read_request(Pull* pull, Peer* peer) {
  pull->peer = peer;
  peer->pulls.insert(pull->id);
  auto owned = std::make_unique<SendBuffers>();
  SendBuffers* buffers = owned.get();
  buffers->owner = this;
  buffers->pull_id = pull->id;
  buffers->request_header.pull_id = pull->id;
  buffers->request_header.num_reads = static_cast<uint32_t>(pull->reads.size());
  buffers->ranges.reserve(pull->reads.size());
  for (const Segment& read : pull->reads) {
    buffers->ranges.push_back({.remote_offset = read.remote_offset, .bytes = read.bytes});
  }
  ucp_request_param_t params{};
  params.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  params.cb.send = &UcxTransport::send_completed_callback;
  params.user_data = buffers;
  // REPLY: the owner answers on the endpoint this arrives on. EAGER: no rendezvous (its control
  // messages can abort a process whose peer died, ucx_transport.hpp).
  params.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  const ucs_status_ptr_t request = ucp_am_send_nbx(
      peer->endpoint, kReadRequestAmId, &buffers->request_header, sizeof(ReadRequestHeader),
      buffers->ranges.data(), buffers->ranges.size() * sizeof(ReadRange), &params);
  num_gets_issued_.fetch_add(pull->reads.size());
  if (UCS_PTR_IS_ERR(request)) {
    // The endpoint refused it: it is unusable, so this pull fails and the next one reconnects.
    retire_peer(peer, Status::failure(StatusCode::kPeerFailed,
                                      describe_ucx_failure(
                                          "cannot send a read request to peer '" + peer->key + "'",
                                          UCS_PTR_STATUS(request))));
    return;
  }
  if (request == nullptr) return;  // sent in place; the callback will not run
  buffers->sends_in_flight = 1;
  buffers->all_issued = true;
  send_buffers_.emplace(buffers, std::move(owned));
}

ucs_status_t UcxTransport::read_reply_callback(void* arg, const void* header, size_t header_length,
                                               void* data, size_t length,
                                               const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  if (header_length != sizeof(ReadReplyHeader)) return UCS_OK;  // not ours: drop it
  ReadReplyHeader reply;
  std::memcpy(&reply, header, sizeof(reply));  // UCX does not align the header
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    // Our peers send eagerly; a rendezvous reply would need ucp_am_recv_data_nbx. Fail the pull
    // rather than wait for bytes that will not come.
    self->finish_pull(reply.pull_id, Status::failure(StatusCode::kInvalidRequest,
                                                     "a read reply came by rendezvous"));
    return UCS_OK;
  }
  self->on_read_reply(reply, data, length);
  return UCS_OK;  // copied: UCX may reuse `data`
}

void UcxTransport::on_read_reply(const ReadReplyHeader& reply, const void* data, size_t length) {
  auto found = pulls_in_flight_.find(reply.pull_id);
  if (found == pulls_in_flight_.end()) return;  // it finished already (failed or timed out)
  Pull& pull = *found->second;
  if (reply.status == ReadReplyHeader::kRefused) {
    finish_pull(pull.id, Status::failure(StatusCode::kInvalidRequest,
                                         "peer '" + pull.peer_key +
                                             "' refused the read: a range is outside its region"));
    return;
  }
  // Where the bytes land comes from our own record of the pull, never from the wire alone.
  const bool fits = reply.read_index < pull.reads.size() &&
                    reply.offset <= pull.reads[reply.read_index].bytes &&
                    length <= pull.reads[reply.read_index].bytes - reply.offset &&
                    length <= pull.num_bytes - pull.bytes_arrived;
  if (!fits) {
    finish_pull(pull.id, Status::failure(StatusCode::kInvalidRequest,
                                         "peer '" + pull.peer_key +
                                             "' sent a read reply outside the pull's reads"));
    return;
  }
  const Segment& read = pull.reads[reply.read_index];
  std::memcpy(region_base_ + read.local_offset + reply.offset, data, length);
  pull.bytes_arrived += length;
  if (pull.bytes_arrived == pull.num_bytes) finish_pull(pull.id, Status::success());
}

void UcxTransport::finish_pull(uint64_t pull_id, Status status) {
  auto found = pulls_in_flight_.find(pull_id);
  if (found == pulls_in_flight_.end()) return;
  std::unique_ptr<Pull> pull = std::move(found->second);
  pulls_in_flight_.erase(found);
  if (pull->peer != nullptr) pull->peer->pulls.erase(pull_id);
  finish_now(std::move(pull), std::move(status));
}

void UcxTransport::expire_timed_out_pulls(Clock::time_point now) {
  std::vector<uint64_t> expired;
  for (auto& [id, pull] : pulls_in_flight_) {
    if (now >= pull->deadline) expired.push_back(id);
  }
  std::vector<Peer*> peers_to_drop;
  for (uint64_t id : expired) {
    Pull& pull = *pulls_in_flight_.at(id);
    peers_to_drop.push_back(pull.peer);
    finish_pull(id, Status::failure(StatusCode::kTimedOut,
                                    "pull from peer '" + pull.peer_key + "' did not finish in " +
                                        std::to_string(pull.timeout.count()) + " ms"));
  }
  // Its replies may still be on the way; dropping the endpoint stops the peer sending them (and
  // a peer that stopped answering is not worth keeping).
  for (Peer* peer : peers_to_drop) {
    retire_peer(peer, Status::failure(StatusCode::kPeerFailed,
                                      "the endpoint to peer '" + peer->key +
                                          "' was dropped because a pull from it timed out"));
  }
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
// Progress thread: sends of either kind (read requests here, replies in ucx_transport_serve.cpp)

void UcxTransport::send_completed_callback(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);  // allowed inside the callback: UCX releases it when we return
  auto* buffers = static_cast<SendBuffers*>(user_data);
  buffers->owner->on_send_completed(buffers, status);
}

void UcxTransport::on_send_completed(SendBuffers* buffers, ucs_status_t status) {
  --buffers->sends_in_flight;
  if (status != UCS_OK && !buffers->failed) {
    buffers->failed = true;
    if (buffers->pull_id == 0) {
      num_serves_failed_.fetch_add(1);  // the reader is gone: nothing to tell anyone
    } else if (auto found = pulls_in_flight_.find(buffers->pull_id);
               found != pulls_in_flight_.end()) {
      // Our request never left: the endpoint is unusable (its error callback may follow).
      Peer* peer = found->second->peer;
      retire_peer(peer, Status::failure(
                            StatusCode::kPeerFailed,
                            describe_ucx_failure(
                                "the read request to peer '" + peer->key + "' failed", status)));
    }
  }
  release_if_done(buffers);
}

void UcxTransport::release_if_done(SendBuffers* buffers) {
  if (buffers->sends_in_flight == 0 && buffers->all_issued) send_buffers_.erase(buffers);
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
  // Nothing writes into a finished pull's bytes (only our reply handler does, for pulls in
  // flight), so its done may run before the endpoint is closed.
  const std::vector<uint64_t> pulls(peer->pulls.begin(), peer->pulls.end());
  for (uint64_t pull_id : pulls) finish_pull(pull_id, reason);
  auto found = peers_.find(peer->key);
  if (found != peers_.end() && found->second.get() == peer) {
    retiring_peers_.push_back(std::move(found->second));
    peers_.erase(found);
    publish_peer_count();
  }
  // A flush close, not UCP_EP_CLOSE_FLAG_FORCE: UCX 1.13 frees a force-closed endpoint that is
  // still connecting (wireup) while a TCP error on its lanes can still reach it, and the
  // process aborts in ucp_worker_discard_uct_ep (`bench/pd_chaos.py`: 18 of 21 aborts in 200
  // kills aimed at transfers, none in 80 once closes flushed). Nothing waits on the close: the
  // peer's pulls are finished above, the endpoint is freed whenever UCX completes it (at once
  // for a failed one, after its keepalive for a silent one), and shutdown bounds the wait.
  ucp_request_param_t params{};
  params.op_attr_mask = 0;
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
    return true;
  });
}

}  // namespace troupe::kv_transfer::detail
