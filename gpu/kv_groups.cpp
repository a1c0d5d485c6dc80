// KV groups from the model's sliding layers (see kv_groups.hpp).
#include "gpu/kv_groups.hpp"

#include <algorithm>

#include "gpu/kv_table_check.hpp"

namespace troupe::gpu {

KvGroups KvGroups::of(const model::LlamaConfig& c) {
  KvGroups g;
  const int32_t n = c.n_layer;
  g.group_of.assign(static_cast<size_t>(n), 0);
  g.slot_of.resize(static_cast<size_t>(n));
  int32_t global = 0;
  for (int32_t l = 0; l < n; ++l) global += c.is_sliding(l) ? 0 : 1;
  const int32_t sliding = n - global;
  if (c.sliding_window <= 0 || sliding == 0 || global == 0 || sliding % global != 0) {
    g.layers_per_group = n;
    for (int32_t l = 0; l < n; ++l) g.slot_of[static_cast<size_t>(l)] = l;
    return g;
  }
  g.layers_per_group = global;
  g.num_groups = 1 + sliding / global;
  g.sliding_window = c.sliding_window;
  int32_t next_global = 0, next_sliding = 0;
  for (int32_t l = 0; l < n; ++l) {
    const size_t i = static_cast<size_t>(l);
    if (c.is_sliding(l)) {
      g.group_of[i] = 1 + next_sliding / global;
      g.slot_of[i] = next_sliding % global;
      ++next_sliding;
    } else {
      g.group_of[i] = 0;
      g.slot_of[i] = next_global++;
    }
  }
  return g;
}

std::optional<std::string> missing_kv_page(const KvGroups& groups, const StepBatch& b,
                                           const SequenceSlice& q, int32_t block_size,
                                           int32_t num_blocks) {
  const int32_t needed = (q.context_len + block_size - 1) / block_size;
  const int32_t first_query = q.context_len - q.num_tokens;
  const int32_t window_first_block =
      std::max(0, first_query + 1 - groups.sliding_window) / block_size;
  for (int32_t g = 0; g < b.num_kv_groups; ++g) {
    const int32_t* row = b.block_tables.data() + (static_cast<size_t>(g) * b.seqs.size() +
                                                  static_cast<size_t>(q.block_table_row)) *
                                                     static_cast<size_t>(b.max_blocks_per_seq);
    const int32_t first = groups.is_sliding_group(g) ? window_first_block : 0;
    for (int32_t i = 0; i < needed; ++i) {
      if (i < first && row[i] == -1) continue;
      if (row[i] < 0 || row[i] >= num_blocks) {
        return "block id " + std::to_string(row[i]) + " of KV group " + std::to_string(g) +
               " out of range";
      }
    }
  }
  return std::nullopt;
}

}  // namespace troupe::gpu
