#include "actors/batch/batch_planner.hpp"

#include <algorithm>

namespace troupe::batch {

BatchPlanner::BatchPlanner(int32_t max_in_flight) : max_in_flight_(std::max(1, max_in_flight)) {}

BatchPlanner::Feed* BatchPlanner::find(std::string_view batch_id) {
  for (Feed& feed : feeds_) {
    if (feed.id == batch_id) return &feed;
  }
  return nullptr;
}

const BatchPlanner::Feed* BatchPlanner::find(std::string_view batch_id) const {
  return const_cast<BatchPlanner*>(this)->find(batch_id);
}

void BatchPlanner::add(const std::string& batch_id, std::vector<int64_t> pending) {
  if (find(batch_id) != nullptr) return;
  feeds_.push_back(Feed{batch_id, std::deque<int64_t>(pending.begin(), pending.end()), {}, {}, false});
}

void BatchPlanner::remove(std::string_view batch_id) {
  const auto it = std::find_if(feeds_.begin(), feeds_.end(), [&](const Feed& f) { return f.id == batch_id; });
  if (it == feeds_.end()) return;
  in_flight_ -= static_cast<int32_t>(it->in_flight.size());
  feeds_.erase(it);
}

bool BatchPlanner::contains(std::string_view batch_id) const { return find(batch_id) != nullptr; }

std::vector<ItemStart> BatchPlanner::take_starts(int32_t bound, int32_t max_starts) {
  const int32_t limit = std::min({bound, max_in_flight_, in_flight_ + std::max(0, max_starts)});
  std::vector<ItemStart> starts;
  for (Feed& feed : feeds_) {
    while (in_flight_ < limit && !feed.pending.empty()) {
      const int64_t index = feed.pending.front();
      feed.pending.pop_front();
      feed.in_flight.insert(index);
      ++in_flight_;
      starts.push_back(ItemStart{feed.id, index});
    }
    if (in_flight_ >= limit) break;
  }
  return starts;
}

void BatchPlanner::finished(std::string_view batch_id, int64_t index, bool retry) {
  Feed* feed = find(batch_id);
  if (feed == nullptr || feed->in_flight.erase(index) == 0) return;
  --in_flight_;
  if (retry && !feed->stopped) feed->parked.push_back(index);
}

void BatchPlanner::release_parked() {
  for (Feed& feed : feeds_) {
    std::sort(feed.parked.begin(), feed.parked.end());
    feed.pending.insert(feed.pending.begin(), feed.parked.begin(), feed.parked.end());
    feed.parked.clear();
  }
}

std::vector<int64_t> BatchPlanner::stop(std::string_view batch_id) {
  Feed* feed = find(batch_id);
  if (feed == nullptr) return {};
  feed->stopped = true;
  std::vector<int64_t> dropped(feed->pending.begin(), feed->pending.end());
  dropped.insert(dropped.end(), feed->parked.begin(), feed->parked.end());
  feed->pending.clear();
  feed->parked.clear();
  std::sort(dropped.begin(), dropped.end());
  return dropped;
}

std::vector<int64_t> BatchPlanner::in_flight_of(std::string_view batch_id) const {
  const Feed* feed = find(batch_id);
  return feed == nullptr ? std::vector<int64_t>{} : std::vector<int64_t>(feed->in_flight.begin(), feed->in_flight.end());
}

bool BatchPlanner::idle(std::string_view batch_id) const {
  const Feed* feed = find(batch_id);
  return feed == nullptr || (feed->pending.empty() && feed->parked.empty() && feed->in_flight.empty());
}

int64_t BatchPlanner::queued() const {
  int64_t n = 0;
  for (const Feed& feed : feeds_) n += static_cast<int64_t>(feed.pending.size() + feed.parked.size());
  return n;
}

}  // namespace troupe::batch
