// How a model's layers share the paged KV memory: one group of every layer (the llama family),
// or, for a model with sliding-window layers (gemma3), groups of equal size so that every page
// has one size: group 0 holds the global (full-attention) layers, groups 1.. the sliding ones,
// in layer order (vLLM's hybrid KV cache groups). Gemma 3 270M: 3 global layers (5, 11, 17) ->
// group 0; its 15 sliding layers -> groups 1..5 of 3. Each group has its own block table per
// sequence; a page (one block id) holds block_size tokens of K and V for the group's layers.
// Pages of a sliding group that fall out of the window are freed (kv_cache_manager.hpp), which
// bounds a long conversation's KV by the global group.
//
// When the sliding layers do not split into groups the size of the global one (or a model has
// no global layer), every layer stays in one group: correct, without the saving.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_config.hpp"

namespace troupe::gpu {

struct KvGroups {
  int32_t num_groups = 1;
  int32_t layers_per_group = 0;
  int32_t sliding_window = 0;      // tokens a query sees in groups 1.. (0: no sliding group)
  std::vector<int32_t> group_of;   // [n_layer]
  std::vector<int32_t> slot_of;    // [n_layer]: the layer's place in its group's pages

  bool is_sliding_group(int32_t group) const { return group > 0 && sliding_window > 0; }

  static KvGroups of(const model::LlamaConfig& c);
};

}  // namespace troupe::gpu
