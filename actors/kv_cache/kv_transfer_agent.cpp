#include "actors/kv_cache/kv_transfer_agent.hpp"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "actors/disagg/compatibility.hpp"

namespace troupe::kv_cache {
namespace {

// How long ingress sends no prompts to a prefill server whose handshake failed: briefly when it
// did not answer (it may be restarting), longer when it answered with incompatible KV (someone
// must restart it with the right model).
constexpr std::chrono::milliseconds kUnreachablePeerPause{1000};
constexpr std::chrono::milliseconds kIncompatiblePeerPause{30000};

disagg::PeerAddress address_of(const scheduler::RemoteKvSource& source) {
  return disagg::PeerAddress{source.host, static_cast<uint16_t>(source.port)};
}

std::string peer_key_of(const scheduler::RemoteKvSource& source) {
  return address_of(source).to_string();
}

// Every (remote block -> local block) copy is one contiguous run per layer and K/V. Walking
// copies innermost lets the transport merge runs of consecutive block ids on both sides.
std::vector<kv_transfer::Segment> segments_for(const scheduler::KvPullOrder& order,
                                               const disagg::KvLayout& remote,
                                               const disagg::KvLayout& local) {
  std::vector<kv_transfer::Segment> segments;
  segments.reserve(order.copies.size() * static_cast<size_t>(local.num_layers) * 2);
  for (int32_t layer = 0; layer < local.num_layers; ++layer) {
    for (uint64_t kv = 0; kv < 2; ++kv) {
      for (const scheduler::BlockCopy& copy : order.copies) {
        kv_transfer::Segment s;
        s.remote_offset = static_cast<uint64_t>(layer) * remote.layer_stride + kv * remote.kv_stride +
                          static_cast<uint64_t>(copy.source) * remote.block_bytes;
        s.local_offset = static_cast<uint64_t>(layer) * local.layer_stride + kv * local.kv_stride +
                         static_cast<uint64_t>(copy.destination) * local.block_bytes;
        s.bytes = local.block_bytes;
        segments.push_back(s);
      }
    }
  }
  return segments;
}

}  // namespace

KvTransferAgent::KvTransferAgent(disagg::DisaggConfig config, disagg::KvMetadata own,
                                 std::unique_ptr<kv_transfer::KvTransport> transport,
                                 std::shared_ptr<disagg::PeerClient> peers, Outbox outbox)
    : config_(std::move(config)),
      own_(std::move(own)),
      transport_(std::move(transport)),
      peers_(std::move(peers)),
      outbox_(std::move(outbox)) {
  stats_.role = std::string(disagg::to_string(config_.role));
  stats_.engine_id = own_.engine_id;
  stats_.transport = transport_ ? std::string(transport_->name()) : "";
}

void KvTransferAgent::fail(scheduler::RequestId request_id, const scheduler::RemoteKvSource& source,
                           const std::string& why) {
  spdlog::warn("kv-transfer: request {}: pulling from {} failed ({}); computing the prompt here",
               request_id, peer_key_of(source), why);
  ++stats_.num_pulls_failed;
  outbox_.to_scheduler(scheduler::KvResident{request_id, false});
  // Best effort: the prefill server frees at lease expiry if this is lost (or it is down).
  release_remote(source);
}

void KvTransferAgent::pull(scheduler::KvPullOrder order) {
  if (!transport_ || !peers_) {
    fail(order.request_id, order.source, "this server has no KV transport (disagg.role is combined)");
    return;
  }
  const std::string key = peer_key_of(order.source);
  Peer& peer = peer_states_[key];
  PendingPull pending{std::move(order), Clock::now()};
  if (peer.metadata && peer.metadata->engine_id == pending.order.source.engine_id) {
    start_pull(peer, std::move(pending));
    return;
  }
  // Unknown peer, or it restarted since the handshake (a new engine id): shake hands again.
  const scheduler::RemoteKvSource source = pending.order.source;
  peer.waiting.push_back(std::move(pending));
  if (!peer.fetching) fetch_metadata(key, peer, source);
}

void KvTransferAgent::fetch_metadata(const std::string& peer_key, Peer& peer,
                                     const scheduler::RemoteKvSource& source) {
  peer.fetching = true;
  auto to_self = outbox_.to_self;
  peers_->fetch_metadata(address_of(source),
                         config_.pull_timeout, [to_self, peer_key](disagg::MetadataReply reply) {
                           to_self(PeerMetadataArrived{peer_key, std::move(reply)});
                         });
}

void KvTransferAgent::on_metadata(const std::string& peer_key, disagg::MetadataReply reply) {
  Peer& peer = peer_states_[peer_key];
  peer.fetching = false;
  std::vector<PendingPull> waiting = std::exchange(peer.waiting, {});
  // A peer that cannot be used now gets no prompts for a while: each would be computed twice
  // (there, then here after the failed pull).
  const auto unusable = [&](std::chrono::milliseconds how_long, const std::string& why) {
    ++stats_.num_handshake_failures;
    if (outbox_.to_ingress && !waiting.empty()) {
      const scheduler::RemoteKvSource& source = waiting.front().order.source;
      outbox_.to_ingress(disagg::PeerUnusable{
          address_of(source), how_long, why});
    }
  };
  if (const std::string* error = std::get_if<std::string>(&reply)) {
    unusable(kUnreachablePeerPause, "handshake: " + *error);
    for (const PendingPull& p : waiting) fail(p.order.request_id, p.order.source, "handshake: " + *error);
    return;
  }
  disagg::KvMetadata metadata = std::get<disagg::KvMetadata>(std::move(reply));
  if (auto mismatch = disagg::check_compatible(own_, metadata)) {
    spdlog::error("kv-transfer: prefill server {} is not compatible: {}", peer_key, *mismatch);
    unusable(kIncompatiblePeerPause, *mismatch);
    for (const PendingPull& p : waiting) fail(p.order.request_id, p.order.source, *mismatch);
    return;
  }
  if (peer.metadata && peer.metadata->engine_id != metadata.engine_id && transport_) {
    transport_->forget_peer(peer.metadata->engine_id);  // the old process is gone
  }
  peer.metadata = std::move(metadata);
  stats_.num_peers = static_cast<int32_t>(std::count_if(
      peer_states_.begin(), peer_states_.end(), [](const auto& p) { return p.second.metadata.has_value(); }));
  for (PendingPull& p : waiting) {
    if (p.order.source.engine_id != peer.metadata->engine_id) {
      // The blocks were leased by a process that is no longer there: nothing to pull.
      fail(p.order.request_id, p.order.source, "the prefill server restarted (engine id " + p.order.source.engine_id +
                        " is now " + peer.metadata->engine_id + ")");
      continue;
    }
    start_pull(peer, std::move(p));
  }
}

void KvTransferAgent::start_pull(Peer& peer, PendingPull pending) {
  const disagg::KvMetadata& remote = *peer.metadata;
  const int32_t remote_blocks = remote.layout.num_blocks;
  const int32_t local_blocks = own_.layout.num_blocks;
  for (const scheduler::BlockCopy& copy : pending.order.copies) {
    if (copy.source < 0 || copy.source >= remote_blocks || copy.destination < 0 ||
        copy.destination >= local_blocks) {
      fail(pending.order.request_id, pending.order.source, "a block id is outside the pools");
      return;
    }
  }
  std::vector<kv_transfer::Segment> segments = segments_for(pending.order, remote.layout, own_.layout);
  InFlightPull flight;
  flight.source = pending.order.source;
  flight.started_at = Clock::now();
  flight.blocks = pending.order.copies.size();
  for (const kv_transfer::Segment& s : segments) flight.bytes += s.bytes;
  const scheduler::RequestId request_id = pending.order.request_id;
  in_flight_[request_id] = std::move(flight);
  stats_.num_pulls_in_flight = static_cast<int32_t>(in_flight_.size());
  auto to_self = outbox_.to_self;
  transport_->pull(remote.engine_id, remote.descriptor, std::move(segments), config_.pull_timeout,
                   [to_self, request_id](kv_transfer::Status status) {
                     to_self(PullFinished{request_id, std::move(status)});
                   });
}

void KvTransferAgent::on_pull_finished(scheduler::RequestId request_id,
                                       const kv_transfer::Status& status) {
  const auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;
  InFlightPull flight = std::move(it->second);
  in_flight_.erase(it);
  stats_.num_pulls_in_flight = static_cast<int32_t>(in_flight_.size());
  if (!status.ok()) {
    fail(request_id, flight.source, status.error);
    return;
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - flight.started_at).count();
  ++stats_.num_pulls_ok;
  stats_.num_blocks_pulled += flight.blocks;
  stats_.bytes_pulled += flight.bytes;
  stats_.pull_seconds_total += ms / 1000.0;
  record_pull_time(ms);
  outbox_.to_scheduler(scheduler::KvResident{request_id, true});
  release_remote(flight.source);
}

void KvTransferAgent::record_pull_time(double ms) {
  size_t bucket = 0;
  while (bucket < engine::kPullMsBuckets.size() && ms > engine::kPullMsBuckets[bucket]) ++bucket;
  ++stats_.pull_ms_buckets[bucket];
}

void KvTransferAgent::release_remote(const scheduler::RemoteKvSource& source) {
  if (!peers_) return;
  peers_->release(address_of(source), source.request_id);
}

void KvTransferAgent::open_lease(scheduler::RequestId request_id, Clock::time_point now) {
  leases_[request_id] = now + config_.kv_lease;
  stats_.num_leases = static_cast<int32_t>(leases_.size());
}

bool KvTransferAgent::release_lease(scheduler::RequestId request_id) {
  if (leases_.erase(request_id) == 0) return false;
  ++stats_.num_leases_released;
  stats_.num_leases = static_cast<int32_t>(leases_.size());
  outbox_.to_scheduler(scheduler::ReleaseHeldKv{request_id});
  return true;
}

void KvTransferAgent::expire_leases(Clock::time_point now) {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    spdlog::info("kv-transfer: lease of request {} expired unpulled; its blocks are freed", it->first);
    outbox_.to_scheduler(scheduler::ReleaseHeldKv{it->first});
    ++stats_.num_leases_expired;
    it = leases_.erase(it);
  }
  stats_.num_leases = static_cast<int32_t>(leases_.size());
}

void KvTransferAgent::abandon_pending() {
  for (auto& [key, peer] : peer_states_) {
    for (const PendingPull& p : peer.waiting) outbox_.to_scheduler(scheduler::KvResident{p.order.request_id, false});
    peer.waiting.clear();
  }
}

engine::KvTransferStats KvTransferAgent::snapshot() const { return stats_; }

}  // namespace troupe::kv_cache
