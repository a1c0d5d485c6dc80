// WindowPages: sliding-window pages attached to prefix-cache nodes (see window_pages.hpp).
#include "actors/kv_cache/window_pages.hpp"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace troupe::kv_cache {

WindowPages::WindowPages(int32_t num_blocks, int32_t num_groups)
    : num_sliding_(num_groups > 1 ? num_groups - 1 : 0),
      pages_(static_cast<size_t>(num_blocks) * static_cast<size_t>(num_sliding_), kNoBlock),
      owner_(static_cast<size_t>(num_blocks), kNoBlock) {}

size_t WindowPages::slot(BlockId node, int32_t group) const {
  if (group < 1 || group > num_sliding_ || node < 0 || static_cast<size_t>(node) >= owner_.size()) {
    throw std::logic_error(fmt::format("window page slot of node {} in group {}", node, group));
  }
  return static_cast<size_t>(node) * static_cast<size_t>(num_sliding_) +
         static_cast<size_t>(group - 1);
}

BlockId WindowPages::page_of(BlockId node, int32_t group) const {
  return pages_[slot(node, group)];
}

bool WindowPages::has_every_group(BlockId node) const {
  for (int32_t g = 1; g <= num_sliding_; ++g) {
    if (page_of(node, g) == kNoBlock) return false;
  }
  return true;
}

void WindowPages::attach(BlockId node, int32_t group, BlockId page) {
  BlockId& held = pages_[slot(node, group)];
  if (held != kNoBlock || is_attached(page)) {
    throw std::logic_error(
        fmt::format("attaching page {} to node {} group {}: taken", page, node, group));
  }
  held = page;
  owner_[static_cast<size_t>(page)] = node;
  ++num_attached_;
}

void WindowPages::detach_page(BlockId page) {
  const BlockId node = owner_[static_cast<size_t>(page)];
  if (node == kNoBlock) return;
  for (int32_t g = 1; g <= num_sliding_; ++g) {
    BlockId& held = pages_[slot(node, g)];
    if (held == page) held = kNoBlock;
  }
  owner_[static_cast<size_t>(page)] = kNoBlock;
  --num_attached_;
}

std::vector<BlockId> WindowPages::detach_node(BlockId node) {
  std::vector<BlockId> detached;
  if (num_sliding_ == 0) return detached;
  for (int32_t g = 1; g <= num_sliding_; ++g) {
    BlockId& held = pages_[slot(node, g)];
    if (held == kNoBlock) continue;
    owner_[static_cast<size_t>(held)] = kNoBlock;
    detached.push_back(std::exchange(held, kNoBlock));
    --num_attached_;
  }
  return detached;
}

std::optional<std::string> WindowPages::check_invariants() const {
  int32_t counted = 0;
  for (size_t node = 0; node < owner_.size(); ++node) {
    for (int32_t g = 1; g <= num_sliding_; ++g) {
      const BlockId page = pages_[slot(static_cast<BlockId>(node), g)];
      if (page == kNoBlock) continue;
      ++counted;
      if (owner_[static_cast<size_t>(page)] != static_cast<BlockId>(node)) {
        return fmt::format("page {} sits under node {} group {} but names node {} as its owner",
                           page, node, g, owner_[static_cast<size_t>(page)]);
      }
    }
  }
  if (counted != num_attached_) {
    return fmt::format("{} pages attached, {} counted", counted, num_attached_);
  }
  for (size_t page = 0; page < owner_.size(); ++page) {
    const BlockId node = owner_[page];
    if (node == kNoBlock) continue;
    bool found = false;
    for (int32_t g = 1; g <= num_sliding_; ++g)
      found |= page_of(node, g) == static_cast<BlockId>(page);
    if (!found) return fmt::format("page {} names node {}, which does not hold it", page, node);
  }
  return std::nullopt;
}

}  // namespace troupe::kv_cache
