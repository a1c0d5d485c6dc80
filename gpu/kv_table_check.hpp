// The rule both backends' batch checks share for a model's KV groups (gpu/kv_groups.hpp): which
// block-table entries a step's span reads. Every group's entries for the span's context must be
// pages of [0, num_blocks), except a sliding group's below the window of the span's first query,
// which may be -1 (the scheduler freed those pages; the kernels never read them).
//
// A header of its own, not a member of KvGroups: kv_groups.hpp is included by most of the
// engine, which need not see StepBatch.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gpu/kv_groups.hpp"
#include "gpu/step.hpp"

namespace troupe::gpu {

// What span `q` of `b` cannot read in b.block_tables (naming the block and group), or nullopt.
std::optional<std::string> missing_kv_page(const KvGroups& groups, const StepBatch& b,
                                           const SequenceSlice& q, int32_t block_size,
                                           int32_t num_blocks);

}  // namespace troupe::gpu
