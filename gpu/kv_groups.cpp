// KV groups from the model's sliding layers (see kv_groups.hpp).
#include "gpu/kv_groups.hpp"

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

}  // namespace troupe::gpu
