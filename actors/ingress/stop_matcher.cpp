#include "actors/ingress/stop_matcher.hpp"

#include <algorithm>

namespace troupe::ingress {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings, bool include_stop_string)
    : stop_strings_(std::move(stop_strings)), include_stop_string_(include_stop_string) {
  std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
}

size_t StopMatcher::longest_partial_match() const {
  size_t best = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t max_length = std::min(stop.size() - 1, held_.size());
    for (size_t length = max_length; length > best; --length) {
      if (std::string_view(held_).substr(held_.size() - length) ==
          std::string_view(stop).substr(0, length)) {
        best = length;
        break;
      }
    }
  }
  return best;
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result result;
  if (stopped_) return result;
  held_.append(text);
  if (stop_strings_.empty()) {
    result.text = std::move(held_);
    held_.clear();
    return result;
  }
  // The earliest complete match wins (ties: the longer stop string, which ends later).
  size_t match_at = std::string::npos;
  size_t match_length = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t at = held_.find(stop);
    if (at == std::string::npos) continue;
    if (at < match_at || (at == match_at && stop.size() > match_length)) {
      match_at = at;
      match_length = stop.size();
    }
  }
  if (match_at != std::string::npos) {
    stopped_ = true;
    result.stopped = true;
    result.text = held_.substr(0, include_stop_string_ ? match_at + match_length : match_at);
    held_.clear();
    return result;
  }
  const size_t keep = longest_partial_match();
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace troupe::ingress
