#include "actors/kv_cache/kv_cache_actor.hpp"

#include <type_traits>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

namespace troupe::kv_cache {

KvCacheActor::KvCacheActor(const KvCacheConfig& config, std::shared_ptr<engine::StatsBoard> board,
                           size_t mailbox_capacity)
    : Actor("kv-cache", mailbox_capacity),
      home_(std::make_unique<KvCacheManager>(config)),
      board_(std::move(board)) {
  publish_stats();
}

boost::asio::awaitable<void> KvCacheActor::handle(KvCacheMessage message) {
  std::visit(
      [this](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, LendKvCache>) {
          lend(m);
        } else if constexpr (std::is_same_v<T, ReturnKvCache>) {
          take_back(m);
        } else if constexpr (std::is_same_v<T, FlushPrefixCache>) {
          flush(m);
        } else {
          move_kv(m);
        }
      },
      message);
  co_return;
}

template <typename Message>
void KvCacheActor::move_kv(Message& m) {
  if (agent_ == nullptr) {
    // Only a wiring bug sends these without an agent; answer so nothing waits forever.
    if constexpr (std::is_same_v<Message, ReleaseKvLease>) {
      if (m.reply) m.reply->set_value(false);
    }
    spdlog::error("kv-cache: a KV transfer message without a transfer agent");
    return;
  }
  if constexpr (std::is_same_v<Message, PullKv>) {
    agent_->pull(std::move(m.order));
  } else if constexpr (std::is_same_v<Message, ReleaseRemoteKv>) {
    agent_->release_remote(m.source);
  } else if constexpr (std::is_same_v<Message, PeerMetadataArrived>) {
    agent_->on_metadata(m.peer_key, std::move(m.reply));
  } else if constexpr (std::is_same_v<Message, PullFinished>) {
    agent_->on_pull_finished(m.request_id, m.status);
  } else if constexpr (std::is_same_v<Message, OpenKvLease>) {
    agent_->open_lease(m.request_id, std::chrono::steady_clock::now());
  } else if constexpr (std::is_same_v<Message, ReleaseKvLease>) {
    const bool released = agent_->release_lease(m.request_id);
    if (m.reply) m.reply->set_value(released);
  } else {
    static_assert(std::is_same_v<Message, SweepKvLeases>);
    agent_->expire_leases(std::chrono::steady_clock::now());
  }
  publish_stats();
}

void KvCacheActor::deliver(KvCacheMessage message) {
  actors::runtime::deliver(std::static_pointer_cast<KvCacheActor>(shared_from_this()), std::move(message));
}

void KvCacheActor::start_lease_clock(std::chrono::milliseconds period) {
  std::weak_ptr<KvCacheActor> weak = std::static_pointer_cast<KvCacheActor>(shared_from_this());
  boost::asio::co_spawn(
      lifecycle().executor(),
      [weak, period]() -> boost::asio::awaitable<void> {
        return [](std::weak_ptr<KvCacheActor> w, std::chrono::milliseconds p) -> boost::asio::awaitable<void> {
          boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor);
          for (;;) {
            timer.expires_after(p);
            auto [error] = co_await timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
            if (error) co_return;
            auto actor = w.lock();
            if (actor == nullptr || actor->mailbox().is_closed()) co_return;
            (void)actor->try_send(SweepKvLeases{});  // a full mailbox: the next tick sweeps
          }
        }(weak, period);
      },
      boost::asio::detached);
}

void KvCacheActor::lend(LendKvCache& request) {
  if (home_ == nullptr) {
    // Two borrowers, or one that did not return: either is a wiring bug. Refusing keeps the
    // single-owner rule; the borrower treats an empty lease as fatal.
    spdlog::error("kv-cache: lend requested while the KV manager is out on loan");
    request.reply->complete(nullptr);
    return;
  }
  ++num_loans_;
  request.reply->complete(std::move(home_));
}

void KvCacheActor::take_back(ReturnKvCache& returned) {
  if (returned.lease == nullptr) return;
  if (home_ != nullptr) {
    spdlog::error("kv-cache: a second KV manager was returned; keeping the first");
    return;
  }
  home_ = std::move(returned.lease);
  std::vector<int64_t> flushed;
  for (size_t i = 0; i < waiting_flushes_.size(); ++i) {
    flushed.push_back(home_->flush_unreferenced_cache());
  }
  forward_events();
  publish_stats();  // before answering a flush: its caller may read stats() right away
  for (size_t i = 0; i < waiting_flushes_.size(); ++i) waiting_flushes_[i]->set_value(flushed[i]);
  waiting_flushes_.clear();
}

void KvCacheActor::flush(FlushPrefixCache& request) {
  if (home_ == nullptr) {
    waiting_flushes_.push_back(std::move(request.reply));
    return;
  }
  const int64_t flushed = home_->flush_unreferenced_cache();
  forward_events();
  publish_stats();  // before answering: the caller may read stats() right away
  request.reply->set_value(flushed);
}

void KvCacheActor::abandon(KvCacheMessage message) {
  std::visit(
      [this](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, LendKvCache>) {
          m.reply->complete(nullptr);
        } else if constexpr (std::is_same_v<T, ReturnKvCache>) {
          if (home_ == nullptr) home_ = std::move(m.lease);
        } else if constexpr (std::is_same_v<T, FlushPrefixCache>) {
          m.reply->set_value(0);
        } else if constexpr (std::is_same_v<T, ReleaseKvLease>) {
          if (m.reply) m.reply->set_value(false);
        }
      },
      message);
  for (auto& reply : waiting_flushes_) reply->set_value(0);
  waiting_flushes_.clear();
}

void KvCacheActor::forward_events() {
  std::vector<KvEvent> events = home_->take_events();
  if (events.empty() || events_ == nullptr) return;
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  (void)events_->publish(KvEventBatch{now, std::move(events)});  // a drop is counted there
}

void KvCacheActor::publish_stats() {
  engine::KvCacheSnapshot snapshot;
  // While lent, the last figures stand (the scheduler owns the manager for that tick).
  if (home_ != nullptr) {
    snapshot.stats = home_->stats();
  } else if (auto last = board_->load_kv_cache()) {
    snapshot.stats = last->stats;
  }
  if (agent_ != nullptr) snapshot.transfer = agent_->snapshot();
  if (events_ != nullptr) snapshot.events = events_->stats();
  snapshot.num_loans = num_loans_;
  board_->publish_kv_cache(std::move(snapshot));
}

}  // namespace troupe::kv_cache
