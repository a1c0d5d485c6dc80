// One step's inputs: the StepBatch checks, the sampling rows, and the packed layout of token ids,
// positions, slot mapping, block tables, recent tokens and the flat sampling arrays (per-row
// params, logit_bias, the min_tokens end-id mask, the structured-output bitmask rows and each
// sampling row's index into them) that travel to the device in one copy. The packed buffer (and
// so the bitmask's room on the device) is reused from step to step and only grows.
//
// Thread-safety: plain functions without state; the backend calls them from the thread that
// calls launch() / compute_logits(), writing only into the pinned buffer of the step's own slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/cuda/sampling.cuh"
#include "gpu/kv_groups.hpp"

namespace troupe::gpu::cuda {

// Output rows of the step's sampling sequences (seqs order) and their sampling slots.
struct SamplingRow {
  uint64_t seq_id = 0;
  int32_t token_index = 0;  // last token of the span
  const SamplingSlot* slot = nullptr;
};

// Offsets of one step's inputs inside the packed buffer.
struct InputLayout {
  // slots: [num_kv_groups][T], each token's cache slot in each KV group's pages; block_tables:
  // StepBatch::block_tables as it is, [num_kv_groups][seqs][max_blocks_per_seq].
  size_t token_ids, positions, table_rows, slots, sample_rows, block_tables, recent, params;
  size_t bias_ids, bias_values, end_ids;  // logit_bias and the min_tokens mask
  // Structured output: StepBatch::token_bitmask as it is, and [num_rows] bitmask row indices;
  // both empty (and the sampler told "no mask") when no sampling row is constrained.
  size_t bitmask, bitmask_rows;
  bool constrained;
  int32_t bitmask_num_words;
  int64_t slots_group_stride;   // T
  int64_t tables_group_stride;  // seqs x max_blocks_per_seq
  size_t total;
};

// The step's inputs inside the device copy of the packed buffer.
struct DeviceStepInputs {
  const int32_t* token_ids = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* table_rows = nullptr;
  const int32_t* slots = nullptr;         // KV group g's at slots + g * slots_group_stride
  const int32_t* sample_rows = nullptr;
  const int32_t* block_tables = nullptr;  // KV group g's at block_tables + g * tables_group_stride
  int64_t slots_group_stride = 0;
  int64_t tables_group_stride = 0;
  const SamplingRowParams* params = nullptr;
  const int32_t* recent = nullptr;
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  const int32_t* end_ids = nullptr;
  const uint32_t* bitmask = nullptr;  // nullptr: no constrained row this step
  int32_t bitmask_num_words = 0;
  const int32_t* bitmask_rows = nullptr;
};

// Throws std::invalid_argument ("StepBatch: ...") for a batch the backend cannot run: among
// others, one whose KV groups are not the model's, or whose tables miss a page a token reads (a
// sliding group's pages below the span's window may be -1, freed).
void validate_batch(const StepBatch& b, const CudaBackendConfig& config, int32_t n_vocab,
                    int32_t num_blocks, const KvGroups& groups);
std::vector<SamplingRow> collect_sampling_rows(const StepBatch& b);
// The device sampler's per-row knobs from a step's sampling slot: the sampling parameters, the
// stream position, the penalty window and the logprob request. The bias and end-id ranges index
// per-step arrays, so the caller fills those.
SamplingRowParams sampling_row_params(const SamplingSlot& slot);
InputLayout input_layout(const StepBatch& b, int32_t num_rows);
// Writes the step's inputs into `host` (at least layout.total bytes).
void pack_step_inputs(const StepBatch& b, const std::vector<SamplingRow>& rows,
                      const InputLayout& in, int32_t block_size, void* host);
DeviceStepInputs device_step_inputs(const void* device_in, const InputLayout& in);

}  // namespace troupe::gpu::cuda
