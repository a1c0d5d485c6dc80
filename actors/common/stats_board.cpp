#include "actors/common/stats_board.hpp"

#include <algorithm>

namespace troupe::engine {

void RollingLatency::add(double milliseconds) {
  samples_.push_back(milliseconds);
  if (samples_.size() > capacity_) samples_.pop_front();
}

LatencySummary RollingLatency::summary() const {
  if (samples_.empty()) return {};
  std::vector<double> sorted(samples_.begin(), samples_.end());
  std::sort(sorted.begin(), sorted.end());
  const auto at = [&](double q) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())))];
  };
  return LatencySummary{at(0.50), at(0.99)};
}

void RollingRate::expire(std::chrono::steady_clock::time_point now) {
  while (!events_.empty() && now - events_.front().first > window_) {
    total_ -= events_.front().second;
    events_.pop_front();
  }
}

void RollingRate::add(std::chrono::steady_clock::time_point at, uint64_t count) {
  events_.emplace_back(at, count);
  total_ += count;
  expire(at);
}

double RollingRate::per_second(std::chrono::steady_clock::time_point now) const {
  uint64_t total = 0;
  for (const auto& [at, count] : events_) {
    if (now - at <= window_) total += count;
  }
  return static_cast<double>(total) / std::chrono::duration<double>(window_).count();
}

StatsBoard::StatsBoard()
    : scheduler_(std::make_shared<const SchedulerSnapshot>()),
      ingress_(std::make_shared<const IngressSnapshot>()),
      kv_cache_(std::make_shared<const KvCacheSnapshot>()) {}

void StatsBoard::publish_scheduler(SchedulerSnapshot snapshot) {
  scheduler_.store(std::make_shared<const SchedulerSnapshot>(std::move(snapshot)),
                   std::memory_order_release);
}

void StatsBoard::publish_ingress(IngressSnapshot snapshot) {
  ingress_.store(std::make_shared<const IngressSnapshot>(std::move(snapshot)),
                 std::memory_order_release);
}

void StatsBoard::publish_kv_cache(KvCacheSnapshot snapshot) {
  kv_cache_.store(std::make_shared<const KvCacheSnapshot>(std::move(snapshot)),
                  std::memory_order_release);
}

std::shared_ptr<const KvCacheSnapshot> StatsBoard::load_kv_cache() const {
  return kv_cache_.load(std::memory_order_acquire);
}

std::shared_ptr<const SchedulerSnapshot> StatsBoard::load_scheduler() const {
  return scheduler_.load(std::memory_order_acquire);
}

std::shared_ptr<const IngressSnapshot> StatsBoard::load_ingress() const {
  return ingress_.load(std::memory_order_acquire);
}

}  // namespace troupe::engine
