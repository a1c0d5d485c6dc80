#include "actors/kv_cache/kv_cache_actor.hpp"

#include <type_traits>

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
        } else {
          static_assert(std::is_same_v<T, FlushPrefixCache>);
          flush(m);
        }
      },
      message);
  co_return;
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
        } else {
          m.reply->set_value(0);
        }
      },
      message);
  for (auto& reply : waiting_flushes_) reply->set_value(0);
  waiting_flushes_.clear();
}

void KvCacheActor::publish_stats() {
  engine::KvCacheSnapshot snapshot;
  snapshot.stats = home_->stats();
  snapshot.num_loans = num_loans_;
  board_->publish_kv_cache(std::move(snapshot));
}

}  // namespace troupe::kv_cache
