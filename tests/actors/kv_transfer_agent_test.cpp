// KvTransferAgent (actors/kv_cache/kv_transfer_agent.hpp): the kv-cache actor's KV movement,
// driven synchronously with a fake transport and a fake peer client (named as such: the real
// UCX transport has its own tests, kv_transfer_in_process_test, kv_transfer_cross_process_test
// and kv_transfer_segments_test, and the whole path its end-to-end test,
// tests/e2e/test_disagg.py). Messages the agent posts to itself are fed back by hand, as the
// actor's mailbox would.
#include <deque>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "actors/kv_cache/kv_transfer_agent.hpp"

namespace troupe::kv_cache {
namespace {

using Clock = std::chrono::steady_clock;
using scheduler::KvResident;
using scheduler::ReleaseHeldKv;

// A pool of `num_blocks` blocks; the two sides' pools differ in size (so do their strides).
disagg::KvMetadata metadata(std::string engine_id, std::string hash = "same-hash",
                            int32_t num_blocks = 8) {
  disagg::KvMetadata m;
  m.engine_id = std::move(engine_id);
  m.descriptor.transport = "ucx";
  m.descriptor.worker_address = "addr";
  m.descriptor.rkey = "rkey";
  m.descriptor.base_address = 4096;
  m.layout.num_layers = 2;
  m.layout.num_kv_heads = 1;
  m.layout.head_dim = 4;
  m.layout.block_size = 4;
  m.layout.num_blocks = num_blocks;
  m.layout.block_bytes = 32;                 // 1 head x 4 tokens x 4 dims x fp16
  m.layout.kv_stride = static_cast<uint64_t>(num_blocks) * 32;
  m.layout.layer_stride = 2 * m.layout.kv_stride;
  m.descriptor.region_bytes = 2 * m.layout.layer_stride;
  m.compatibility_hash = std::move(hash);
  return m;
}

class FakeTransport final : public kv_transfer::KvTransport {
 public:
  struct Pull {
    std::string peer_key;
    std::vector<kv_transfer::Segment> segments;
    PullDone done;
  };
  std::string_view name() const override { return "fake"; }
  const kv_transfer::LocalDescriptor& local_descriptor() const override { return descriptor_; }
  void pull(const std::string& peer_key, const kv_transfer::LocalDescriptor&,
            std::vector<kv_transfer::Segment> segments, std::chrono::milliseconds,
            PullDone done) override {
    pulls->push_back({peer_key, std::move(segments), std::move(done)});
  }
  void forget_peer(const std::string& peer_key) override { forgotten->push_back(peer_key); }
  Stats stats() const override { return {}; }

  std::shared_ptr<std::vector<Pull>> pulls = std::make_shared<std::vector<Pull>>();
  std::shared_ptr<std::vector<std::string>> forgotten = std::make_shared<std::vector<std::string>>();

 private:
  kv_transfer::LocalDescriptor descriptor_;
};

class FakePeers final : public disagg::PeerClient {
 public:
  CallId prefill(disagg::PrefillCall, std::function<void(disagg::PrefillReply)>) override { return 0; }
  void cancel(CallId) override {}
  void fetch_metadata(disagg::PeerAddress peer, std::chrono::milliseconds,
                      std::function<void(disagg::MetadataReply)> done) override {
    fetches.push_back({peer, std::move(done)});
  }
  void release(disagg::PeerAddress peer, std::string remote_request_id) override {
    releases.push_back(peer.to_string() + "/" + remote_request_id);
  }
  std::vector<std::pair<disagg::PeerAddress, std::function<void(disagg::MetadataReply)>>> fetches;
  std::vector<std::string> releases;
};

struct Rig {
  explicit Rig(disagg::KvMetadata own = metadata("decode-1", "same-hash", 16)) {
    auto fake = std::make_unique<FakeTransport>();
    pulls = fake->pulls;
    forgotten = fake->forgotten;
    peers = std::make_shared<FakePeers>();
    disagg::DisaggConfig config;
    config.kv_lease = std::chrono::milliseconds(1000);
    KvTransferAgent::Outbox outbox{
        [this](KvCacheMessage m) { to_self.push_back(std::move(m)); },
        [this](scheduler::SchedulerMessage m) { to_scheduler.push_back(std::move(m)); },
        [this](disagg::PeerUnusable m) { to_ingress.push_back(std::move(m)); }};
    agent = std::make_unique<KvTransferAgent>(config, std::move(own), std::move(fake), peers,
                                              std::move(outbox));
  }
  // Feeds what the agent posted to itself back in, as the actor's mailbox does.
  void deliver_to_self() {
    while (!to_self.empty()) {
      KvCacheMessage m = std::move(to_self.front());
      to_self.pop_front();
      if (auto* meta = std::get_if<PeerMetadataArrived>(&m)) agent->on_metadata(meta->peer_key, std::move(meta->reply));
      if (auto* done = std::get_if<PullFinished>(&m)) agent->on_pull_finished(done->request_id, done->status);
    }
  }
  std::vector<KvResident> residents() const {
    std::vector<KvResident> out;
    for (const auto& m : to_scheduler) {
      if (const auto* r = std::get_if<KvResident>(&m)) out.push_back(*r);
    }
    return out;
  }

  std::shared_ptr<std::vector<FakeTransport::Pull>> pulls;
  std::shared_ptr<std::vector<std::string>> forgotten;
  std::shared_ptr<FakePeers> peers;
  std::deque<KvCacheMessage> to_self;
  std::vector<scheduler::SchedulerMessage> to_scheduler;
  std::vector<disagg::PeerUnusable> to_ingress;
  std::unique_ptr<KvTransferAgent> agent;
};

scheduler::KvPullOrder order(scheduler::RequestId id, std::string engine_id,
                             std::vector<scheduler::BlockCopy> copies) {
  scheduler::KvPullOrder o;
  o.request_id = id;
  o.source.engine_id = std::move(engine_id);
  o.source.host = "127.0.0.1";
  o.source.port = 8081;
  o.source.request_id = std::to_string(100 + id);
  o.copies = std::move(copies);
  return o;
}

TEST(KvTransferAgent, HandshakesOnceThenPullsEveryLayerAndKvOfEveryBlockAndReleasesTheLease) {
  Rig rig;
  rig.agent->pull(order(1, "prefill-1", {{5, 2}, {6, 3}}));
  ASSERT_EQ(rig.peers->fetches.size(), 1u);
  rig.peers->fetches[0].second(metadata("prefill-1"));
  rig.deliver_to_self();
  ASSERT_EQ(rig.pulls->size(), 1u);
  const auto& segments = (*rig.pulls)[0].segments;
  ASSERT_EQ(segments.size(), 2u * 2u * 2u);  // 2 copies x 2 layers x K/V
  const disagg::KvLayout layout = metadata("x").layout;             // the prefill server's
  const disagg::KvLayout local = metadata("x", "", 16).layout;       // ours: twice the blocks
  // Layer 1, V, second copy: remote block 6 -> local block 3, each in its own pool's strides.
  const kv_transfer::Segment& last = segments.back();
  EXPECT_EQ(last.remote_offset, layout.layer_stride + layout.kv_stride + 6 * layout.block_bytes);
  EXPECT_EQ(last.local_offset, local.layer_stride + local.kv_stride + 3 * local.block_bytes);
  EXPECT_EQ(last.bytes, layout.block_bytes);
  // Consecutive copies come next to each other so the transport can merge them.
  EXPECT_EQ(segments[1].remote_offset, segments[0].remote_offset + layout.block_bytes);

  (*rig.pulls)[0].done(kv_transfer::Status::success());
  rig.deliver_to_self();
  ASSERT_EQ(rig.residents().size(), 1u);
  EXPECT_TRUE(rig.residents()[0].ok);
  EXPECT_EQ(rig.peers->releases, std::vector<std::string>{"127.0.0.1:8081/101"});
  const engine::KvTransferStats stats = rig.agent->snapshot();
  EXPECT_EQ(stats.num_pulls_ok, 1u);
  EXPECT_EQ(stats.num_blocks_pulled, 2u);
  EXPECT_EQ(stats.bytes_pulled, 8u * layout.block_bytes);

  // A second pull to the same peer needs no new handshake.
  rig.agent->pull(order(2, "prefill-1", {{1, 1}}));
  EXPECT_EQ(rig.peers->fetches.size(), 1u);
  EXPECT_EQ(rig.pulls->size(), 2u);
}

TEST(KvTransferAgent, AnIncompatiblePeerFailsItsPullsSoThePromptIsComputedLocally) {
  Rig rig;
  rig.agent->pull(order(1, "prefill-1", {{5, 2}}));
  rig.peers->fetches[0].second(metadata("prefill-1", "another-model"));
  rig.deliver_to_self();
  EXPECT_TRUE(rig.pulls->empty());
  ASSERT_EQ(rig.residents().size(), 1u);
  EXPECT_FALSE(rig.residents()[0].ok);
  EXPECT_EQ(rig.agent->snapshot().num_handshake_failures, 1u);
  EXPECT_EQ(rig.peers->releases.size(), 1u);  // the lease is given back at once
  // Ingress sends that server no more prompts for a while (each would be computed twice).
  ASSERT_EQ(rig.to_ingress.size(), 1u);
  EXPECT_EQ(rig.to_ingress[0].peer.to_string(), "127.0.0.1:8081");
  EXPECT_GE(rig.to_ingress[0].for_how_long, std::chrono::seconds(10));
}

TEST(KvTransferAgent, AnUnreachablePeerFailsTheHandshakeAndTheNextPullTriesAgain) {
  Rig rig;
  rig.agent->pull(order(1, "prefill-1", {{5, 2}}));
  rig.peers->fetches[0].second(std::string("connection refused"));
  rig.deliver_to_self();
  ASSERT_EQ(rig.residents().size(), 1u);
  EXPECT_FALSE(rig.residents()[0].ok);
  rig.agent->pull(order(2, "prefill-1", {{5, 2}}));
  EXPECT_EQ(rig.peers->fetches.size(), 2u);
}

TEST(KvTransferAgent, ARestartedPeerIsShakenHandsWithAgainAndTheOldProcessesLeasesFail) {
  Rig rig;
  rig.agent->pull(order(1, "prefill-1", {{5, 2}}));
  rig.peers->fetches[0].second(metadata("prefill-1"));
  rig.deliver_to_self();
  (*rig.pulls)[0].done(kv_transfer::Status::success());
  rig.deliver_to_self();
  // The prefill server restarted: a new engine id on the same host:port.
  rig.agent->pull(order(2, "prefill-2", {{5, 2}}));
  ASSERT_EQ(rig.peers->fetches.size(), 2u);
  rig.peers->fetches[1].second(metadata("prefill-2"));
  rig.deliver_to_self();
  EXPECT_EQ(*rig.forgotten, std::vector<std::string>{"prefill-1"});
  EXPECT_EQ(rig.pulls->size(), 2u);
  // A request still naming the old process cannot be served: its blocks died with it.
  rig.agent->pull(order(3, "prefill-1", {{5, 2}}));
  ASSERT_EQ(rig.peers->fetches.size(), 3u);
  rig.peers->fetches[2].second(metadata("prefill-2"));
  rig.deliver_to_self();
  const auto residents = rig.residents();
  ASSERT_EQ(residents.size(), 2u);
  EXPECT_EQ(residents.back().request_id, 3u);
  EXPECT_FALSE(residents.back().ok);
}

TEST(KvTransferAgent, AFailedPullIsReportedAndCounted) {
  Rig rig;
  rig.agent->pull(order(1, "prefill-1", {{5, 2}}));
  rig.peers->fetches[0].second(metadata("prefill-1"));
  rig.deliver_to_self();
  (*rig.pulls)[0].done(kv_transfer::Status::failure(kv_transfer::StatusCode::kPeerFailed, "peer died"));
  rig.deliver_to_self();
  ASSERT_EQ(rig.residents().size(), 1u);
  EXPECT_FALSE(rig.residents()[0].ok);
  EXPECT_EQ(rig.agent->snapshot().num_pulls_failed, 1u);
  EXPECT_EQ(rig.agent->snapshot().num_pulls_in_flight, 0);
}

TEST(KvTransferAgent, BlockIdsOutsideEitherPoolAreRefusedBeforeAnyPull) {
  Rig rig;
  rig.agent->pull(order(1, "prefill-1", {{8, 2}}));  // the peer has blocks 0..7
  rig.peers->fetches[0].second(metadata("prefill-1"));
  rig.deliver_to_self();
  EXPECT_TRUE(rig.pulls->empty());
  ASSERT_EQ(rig.residents().size(), 1u);
  EXPECT_FALSE(rig.residents()[0].ok);
}

TEST(KvTransferAgent, LeasesAreReleasedOnceOrExpire) {
  Rig rig;
  const Clock::time_point now = Clock::now();
  rig.agent->open_lease(7, now);
  rig.agent->open_lease(8, now);
  EXPECT_EQ(rig.agent->snapshot().num_leases, 2);
  EXPECT_TRUE(rig.agent->release_lease(7));
  EXPECT_FALSE(rig.agent->release_lease(7));
  rig.agent->expire_leases(now + std::chrono::milliseconds(999));
  EXPECT_EQ(rig.agent->snapshot().num_leases, 1);
  rig.agent->expire_leases(now + std::chrono::milliseconds(1000));
  EXPECT_EQ(rig.agent->snapshot().num_leases, 0);
  EXPECT_EQ(rig.agent->snapshot().num_leases_expired, 1u);
  std::vector<scheduler::RequestId> released;
  for (const auto& m : rig.to_scheduler) {
    if (const auto* r = std::get_if<ReleaseHeldKv>(&m)) released.push_back(r->request_id);
  }
  EXPECT_EQ(released, (std::vector<scheduler::RequestId>{7, 8}));
}

TEST(KvTransferAgent, WithoutATransportEveryPullFailsAtOnce) {
  disagg::DisaggConfig config;
  std::vector<scheduler::SchedulerMessage> to_scheduler;
  KvTransferAgent agent(config, metadata("combined"), nullptr, nullptr,
                        {[](KvCacheMessage) {},
                         [&](scheduler::SchedulerMessage m) { to_scheduler.push_back(std::move(m)); },
                         {}});
  agent.pull(order(1, "prefill-1", {{1, 1}}));
  ASSERT_EQ(to_scheduler.size(), 1u);
  EXPECT_FALSE(std::get<KvResident>(to_scheduler[0]).ok);
}

}  // namespace
}  // namespace troupe::kv_cache
