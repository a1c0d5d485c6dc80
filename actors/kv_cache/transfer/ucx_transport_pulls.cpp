// UcxTransport's pull machinery, all of it on the progress thread: starting a pull (checks,
// coalescing), finding or connecting the peer's endpoint, issuing the gets and taking their
// completions, timeouts, finished pulls' callbacks, and retiring and freeing peers whose endpoint
// failed, timed out or was forgotten. The lifecycle (context, commands, the loop, shutdown) is in
// ucx_transport.cpp; the lifetimes of Pull and Peer, and the NOTEs they rest on, in
// ucx_transport_internal.hpp.
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

}  // namespace troupe::kv_transfer::detail
