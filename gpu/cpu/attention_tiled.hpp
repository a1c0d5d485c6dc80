// Tiled prefill attention: a tile of consecutive chunk-order query tokens of one sequence, for one
// KV head and all `group` query heads that share it, against every key the tile needs. K and V
// come as fp32 converted from the fp16 blocks once (ConvertedHead) and are reused by every
// query row of the tile, and by the next tiles of the same head, where the per-token path
// (attention_group) converts each row again for every token. V is kept as rows [key][head_dim];
// K as rows too, or for the AVX-512 kernels as 16-key panels [head_dim][16] (keys in the vector
// lanes, attention_tiled_kernels.hpp), which lets the scores skip every horizontal sum.
//
//   rows of a tile:  r = i * group + g  (token i, query head g); token i sits at position
//                    first_position + i and attends keys [0, first_position + i + 1)
//   pass 1 (QK):  per block of 64 keys (16 KiB at head_dim 64, stays in L1d): every row's
//                 scores against the keys it may see -> scores [rows][keys] (sized for half an L2)
//                 (AVX-512: whole 16-key panels, a row's scores past its keys are written too)
//   pass 2:       each row's softmax over its own keys, in place
//   pass 3 (PV):  per block of 256 keys: each row's 8 key lanes per dim (lane j sums keys
//                 t = j mod 8) carried across blocks; then hsum8 per dim
//
//   keys a tile of 3 tokens (group 1) at positions p, p+1, p+2 attends:
//                 key 0 ................. p-1  p  p+1 p+2
//     row 0 (p)  :  ######################## #
//     row 1 (p+1):  ######################## #   #
//     row 2 (p+2):  ######################## #   #   #     <- the ragged edge
//
// Bit-identical to attention_group(..., single_token = false) for each token: every output
// element gets the same operations in the same order (attention_kernels.hpp, "chunk order"); the
// softmax stays the exact two-pass one (all scores of a row, then the probabilities), never an
// online one, which would change the bits. Tiling only changes which rows share a converted key.
//
// Thread-safety: attention_tile is a pure function over caller-owned buffers; run tiles with
// disjoint outputs in parallel, each thread with its own AttentionTileScratch and ConvertedHead.
// The path switch below is process-wide: set it between steps only (benchmarks), never while a
// step runs.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {

// How LlamaForward::attention runs chunk-order (prompt) tokens. kTiled is the default;
// kPerToken (attention_group per token) is kept so a benchmark can compare the two in one run.
enum class PrefillAttentionPath { kTiled, kPerToken };
void set_prefill_attention_path(PrefillAttentionPath path);
PrefillAttentionPath prefill_attention_path();

struct AttentionTile {
  // Keys [0, first_position + num_tokens) as ConvertedHead::get returns them for the same isa:
  // V rows [key][head_dim], K rows or panels; rows rounded up to a multiple of 8 (K panels: 16)
  // must be readable.
  const float* k = nullptr;
  const float* v = nullptr;
  int32_t head_dim = 0;
  int32_t first_position = 0;  // position of the tile's first query token
  int32_t num_tokens = 0;      // consecutive query tokens, > 0
  int32_t group = 1;           // query heads of the KV head
  const float* q = nullptr;    // token i: q + i * q_stride, [group][head_dim], fp16-valued
  int64_t q_stride = 0;
  float* out = nullptr;  // token i: out + i * out_stride, [group][head_dim]
  int64_t out_stride = 0;
  float scale = 1.0f;
  bool fp16_probabilities = false;  // as attention_group's
  // A sliding-window layer's window (0: none): token i sees only keys after
  // first_position + i - window, the rest masked as attention_group's first_key masks them.
  int32_t window = 0;
};

// The tile's sliding-window mask on its scores (rows r = i * group + g): no-op without a window.
void mask_tile_window(const AttentionTile& tile, float* scores, int64_t stride);

// A float buffer whose data() is 64-byte aligned (so a vector load never straddles two cache
// lines). grow() keeps the contents; it only ever grows.
class AlignedFloats {
 public:
  void grow(int64_t n);
  float* data() { return storage_.data() + offset_; }

 private:
  std::vector<float> storage_;
  int64_t offset_ = 0;  // to the first 64-byte boundary (an offset, so copies stay valid)
};

// One thread's fp32 copy of one sequence's K and V for one KV head, keys [0, n): what the tiles
// of that head read. Successive tiles of the same head convert only the keys they add (none when
// the longest tile comes first), so a thread converts each row about once per run of tiles.
class ConvertedHead {
 public:
  // Forgets what it holds. Call whenever the KV memory or the block tables may have changed
  // since the last get() (the forward pass: at the start of every layer's attention).
  void reset() { num_keys_ = 0; }

  // K and V of keys [0, num_keys) of (block_table, kv_head), converting the keys not held yet
  // for that same pair since the last reset(): V rows, K in the layout attention_tile reads at
  // the same isa (panels for its AVX-512 kernels, else rows); keys up to a multiple of 8 (K
  // panels: 16) are readable, zero past num_keys. A get() at an isa of another K layout starts
  // over.
  struct Rows {
    const float* k;
    const float* v;
  };
  Rows get(const KvLayerView& kv, const int32_t* block_table, int32_t kv_head, int32_t num_keys,
           IsaLevel isa);

 private:
  AlignedFloats k_, v_;
  const int32_t* block_table_ = nullptr;
  int32_t kv_head_ = -1;
  bool k_panels_ = false;
  int32_t num_keys_ = 0;
};

// One thread's working buffers for attention_tile. They only grow (to the largest tile seen), so
// a steady stream of steps allocates nothing.
class AttentionTileScratch {
 public:
  // Makes room for a tile of `rows` query rows against `num_keys` keys and sets the scores'
  // row stride for it.
  void grow(int32_t rows, int32_t num_keys, int32_t head_dim);

  float* scores() { return scores_.data(); }  // [rows][scores_stride()]
  int64_t scores_stride() const { return scores_stride_; }
  float* lanes() { return lanes_.data(); }          // [rows][8][head_dim] value accumulators
  float* queries() { return queries_.data(); }      // [rows][head_dim], kernel layout
  int32_t* row_keys() { return row_keys_.data(); }  // [rows] keys each row attends

 private:
  AlignedFloats scores_, lanes_, queries_;
  std::vector<int32_t> row_keys_;
  int64_t scores_stride_ = 0;
};

// Query tokens per tile for a tile whose last token attends `num_keys` keys: as many as keep the
// scores ([tokens * group][num_keys] floats) within half a core's L2, between 4 and 32.
int32_t attention_tile_tokens(int32_t group, int32_t num_keys);

// Writes tile.out for every token and query head of the tile. isa picks the kernels (AVX-512
// for head_dim % 16 == 0, AVX2 for % 8, else scalar); every choice gives the same bits. tile.k
// must come from ConvertedHead::get at the same isa (the K layout depends on it).
void attention_tile(const AttentionTile& tile, AttentionTileScratch& scratch, IsaLevel isa);

}  // namespace troupe::gpu::cpu
