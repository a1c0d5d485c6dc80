// StepBatch checks and input packing for the CUDA backend (see step_inputs.hpp).
#include "gpu/cuda/step_inputs.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "gpu/kv_table_check.hpp"

namespace troupe::gpu::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

[[noreturn]] void bad_batch(const std::string& what) {
  throw std::invalid_argument("StepBatch: " + what);
}

}  // namespace

void validate_batch(const StepBatch& b, const CudaBackendConfig& config, int32_t n_vocab,
                    int32_t num_blocks, const KvGroups& groups) {
  const int32_t T = b.num_tokens();
  if (T == 0) bad_batch("no tokens");
  if (T > config.max_num_batched_tokens) {
    bad_batch(std::to_string(T) + " tokens; the CUDA backend was sized for max_num_batched_tokens " +
              std::to_string(config.max_num_batched_tokens));
  }
  if (b.positions.size() != b.token_ids.size()) bad_batch("positions and token_ids differ in size");
  if (b.num_kv_groups != groups.num_groups) {
    bad_batch(std::to_string(b.num_kv_groups) + " KV groups, the model has " +
              std::to_string(groups.num_groups));
  }
  if (b.max_blocks_per_seq < 0 ||
      b.block_tables.size() < static_cast<size_t>(b.num_kv_groups) * b.seqs.size() *
                                  static_cast<size_t>(b.max_blocks_per_seq)) {
    bad_batch("block_tables smaller than groups x seqs x max_blocks_per_seq");
  }
  for (int32_t id : b.token_ids) {
    if (id < 0 || id >= n_vocab) bad_batch("token id " + std::to_string(id) + " out of vocabulary");
  }
  for (const SamplingSlot& slot : b.sampling) {
    if (slot.bitmask_row < 0) continue;
    const size_t end = (static_cast<size_t>(slot.bitmask_row) + 1) * static_cast<size_t>(std::max(b.bitmask_num_words, 0));
    if (b.bitmask_num_words <= 0 || end > b.token_bitmask.size()) bad_batch("sampling slot bitmask_row out of range");
  }
  int64_t covered = 0, rows = 0;
  for (const SequenceSlice& q : b.seqs) {
    const std::string who = "seq " + std::to_string(q.seq_id) + ": ";
    if (q.num_tokens <= 0 || q.token_offset < 0 || q.token_offset + q.num_tokens > T) bad_batch(who + "token span out of range");
    covered += q.num_tokens;
    if (q.context_len < q.num_tokens) bad_batch(who + "context_len < num_tokens");
    if (q.block_table_row < 0 || static_cast<size_t>(q.block_table_row) >= b.seqs.size()) bad_batch(who + "block_table_row out of range");
    const int32_t needed = (q.context_len + config.block_size - 1) / config.block_size;
    if (needed > b.max_blocks_per_seq) bad_batch(who + "context needs more blocks than the table row");
    if (const auto why = missing_kv_page(groups, b, q, config.block_size, num_blocks)) {
      bad_batch(who + *why);
    }
    for (int32_t i = 0; i < q.num_tokens; ++i) {
      if (b.positions[q.token_offset + i] != q.context_len - q.num_tokens + i) bad_batch(who + "positions do not match context_len");
    }
    if (q.sample) {
      if (q.sampling_index < 0 || static_cast<size_t>(q.sampling_index) >= b.sampling.size()) bad_batch(who + "sampling_index out of range");
      ++rows;
    }
  }
  if (covered != T) bad_batch("sequence spans do not cover token_ids exactly");
  if (rows > config.max_num_seqs) {
    bad_batch(std::to_string(rows) + " sampling rows; the CUDA backend was sized for max_num_seqs " + std::to_string(config.max_num_seqs));
  }
  for (const SamplingSlot& slot : b.sampling) {
    if (slot.recent_offset < 0 || slot.recent_count < 0 ||
        static_cast<size_t>(slot.recent_offset) + slot.recent_count > b.recent_tokens.size()) {
      bad_batch("sampling slot recent window out of range");
    }
  }
}

SamplingRowParams sampling_row_params(const SamplingSlot& slot) {
  const model::SamplingParams& p = slot.params;
  SamplingRowParams q;
  q.seed = p.seed;
  q.temperature = p.temperature;
  q.top_k = p.top_k;
  q.top_p = p.top_p;
  q.min_p = p.min_p;
  q.repetition_penalty = p.repetition_penalty;
  q.presence_penalty = p.presence_penalty;
  q.frequency_penalty = p.frequency_penalty;
  q.penalty_last_n = p.penalty_last_n;
  q.num_generated = slot.num_generated;
  q.recent_offset = slot.recent_offset;
  q.recent_count = slot.recent_count;
  q.num_top_logprobs = std::clamp(p.top_logprobs, 0, kMaxTopLogprobs);
  q.want_logprob = (p.logprobs || p.top_logprobs > 0) ? 1 : 0;
  return q;
}

std::vector<SamplingRow> collect_sampling_rows(const StepBatch& b) {
  std::vector<SamplingRow> rows;
  for (const SequenceSlice& s : b.seqs) {
    if (s.sample) rows.push_back({s.seq_id, s.token_offset + s.num_tokens - 1, &b.sampling[s.sampling_index]});
  }
  return rows;
}

InputLayout input_layout(const StepBatch& b, int32_t num_rows) {
  const size_t T = b.token_ids.size();
  InputLayout l{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  l.token_ids = take(4 * T);
  l.positions = take(4 * T);
  l.table_rows = take(4 * T);
  l.slots = take(4 * T * static_cast<size_t>(b.num_kv_groups));
  l.slots_group_stride = static_cast<int64_t>(T);
  l.tables_group_stride = static_cast<int64_t>(b.seqs.size()) * b.max_blocks_per_seq;
  l.sample_rows = take(4 * static_cast<size_t>(num_rows));
  l.block_tables = take(4 * b.block_tables.size());
  l.recent = take(4 * b.recent_tokens.size());
  l.params = take(sizeof(SamplingRowParams) * static_cast<size_t>(num_rows));
  size_t num_bias = 0, num_end = 0;
  for (const SamplingSlot& slot : b.sampling) {
    num_bias += slot.params.logit_bias.size();
    if (slot.masks_end_tokens()) num_end += slot.end_token_ids.size();
  }
  l.bias_ids = take(4 * num_bias);
  l.bias_values = take(4 * num_bias);
  l.end_ids = take(4 * num_end);
  l.constrained = std::any_of(b.sampling.begin(), b.sampling.end(),
                              [](const SamplingSlot& slot) { return slot.bitmask_row >= 0; });
  l.bitmask_num_words = l.constrained ? b.bitmask_num_words : 0;
  l.bitmask = take(l.constrained ? 4 * b.token_bitmask.size() : 0);
  l.bitmask_rows = take(l.constrained ? 4 * static_cast<size_t>(num_rows) : 0);
  l.total = off;
  return l;
}

void pack_step_inputs(const StepBatch& b, const std::vector<SamplingRow>& rows,
                      const InputLayout& in, int32_t block_size, void* host_in) {
  const int32_t T = b.num_tokens();
  const int32_t S = static_cast<int32_t>(rows.size());
  char* host = static_cast<char*>(host_in);
  auto host_i32 = [&](size_t offset) { return reinterpret_cast<int32_t*>(host + offset); };
  std::memcpy(host + in.token_ids, b.token_ids.data(), 4 * static_cast<size_t>(T));
  std::memcpy(host + in.positions, b.positions.data(), 4 * static_cast<size_t>(T));
  int32_t* table_rows = host_i32(in.table_rows);
  int32_t* slot_mapping = host_i32(in.slots);
  for (const SequenceSlice& s : b.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) table_rows[s.token_offset + i] = s.block_table_row;
  }
  for (int32_t g = 0; g < b.num_kv_groups; ++g) {
    for (const SequenceSlice& s : b.seqs) {
      const int32_t* table = b.block_tables.data() + g * in.tables_group_stride +
                             static_cast<size_t>(s.block_table_row) * b.max_blocks_per_seq;
      for (int32_t i = 0; i < s.num_tokens; ++i) {
        const int32_t t = s.token_offset + i, pos = b.positions[t];
        // The token's own page exists in every group: it is inside its own window.
        slot_mapping[g * in.slots_group_stride + t] =
            table[pos / block_size] * block_size + pos % block_size;
      }
    }
  }
  int32_t* sample_rows = host_i32(in.sample_rows);
  auto* params = reinterpret_cast<SamplingRowParams*>(host + in.params);
  int32_t* bias_ids = host_i32(in.bias_ids);
  auto* bias_values = reinterpret_cast<float*>(host + in.bias_values);
  int32_t* end_ids = host_i32(in.end_ids);
  int32_t* bitmask_rows = in.constrained ? host_i32(in.bitmask_rows) : nullptr;
  int32_t num_bias = 0, num_end = 0;
  for (int32_t r = 0; r < S; ++r) {
    sample_rows[r] = rows[r].token_index;
    const SamplingSlot& slot_in = *rows[r].slot;
    const model::SamplingParams& p = slot_in.params;
    SamplingRowParams q = sampling_row_params(slot_in);
    q.bias_offset = num_bias;
    q.bias_count = static_cast<int32_t>(p.logit_bias.size());
    for (const model::LogitBias& e : p.logit_bias) {
      bias_ids[num_bias] = e.token_id;
      bias_values[num_bias++] = e.bias;
    }
    q.end_offset = num_end;
    q.end_count = slot_in.masks_end_tokens() ? static_cast<int32_t>(slot_in.end_token_ids.size()) : 0;
    for (int32_t i = 0; i < q.end_count; ++i) end_ids[num_end++] = slot_in.end_token_ids[i];
    params[r] = q;
    if (bitmask_rows != nullptr) bitmask_rows[r] = slot_in.bitmask_row;
  }
  if (in.constrained) std::memcpy(host + in.bitmask, b.token_bitmask.data(), 4 * b.token_bitmask.size());
  if (!b.block_tables.empty()) std::memcpy(host + in.block_tables, b.block_tables.data(), 4 * b.block_tables.size());
  if (!b.recent_tokens.empty()) std::memcpy(host + in.recent, b.recent_tokens.data(), 4 * b.recent_tokens.size());
}

DeviceStepInputs device_step_inputs(const void* device_in, const InputLayout& in) {
  const char* dev = static_cast<const char*>(device_in);
  auto dev_i32 = [&](size_t offset) { return reinterpret_cast<const int32_t*>(dev + offset); };
  DeviceStepInputs d;
  d.token_ids = dev_i32(in.token_ids);
  d.positions = dev_i32(in.positions);
  d.table_rows = dev_i32(in.table_rows);
  d.slots = dev_i32(in.slots);
  d.sample_rows = dev_i32(in.sample_rows);
  d.block_tables = dev_i32(in.block_tables);
  d.slots_group_stride = in.slots_group_stride;
  d.tables_group_stride = in.tables_group_stride;
  d.params = reinterpret_cast<const SamplingRowParams*>(dev + in.params);
  d.recent = dev_i32(in.recent);
  d.bias_ids = dev_i32(in.bias_ids);
  d.bias_values = reinterpret_cast<const float*>(dev + in.bias_values);
  d.end_ids = dev_i32(in.end_ids);
  if (in.constrained) {
    d.bitmask = reinterpret_cast<const uint32_t*>(dev + in.bitmask);
    d.bitmask_num_words = in.bitmask_num_words;
    d.bitmask_rows = dev_i32(in.bitmask_rows);
  }
  return d;
}

}  // namespace troupe::gpu::cuda
