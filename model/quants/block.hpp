// Reading and writing one quant block of a GGUF row: what every format family of model/quants/
// shares. A row is a run of packed blocks at 2-byte alignment (fp16 fields, odd sizes such as
// 18 or 210 bytes), and a byte buffer holds no block objects, so blocks move by memcpy (which
// the compiler turns into plain loads).
//
// Plain C++17: nvcc reads model/quants headers for the geometry.
//
// Thread-safety: pure functions; callable from any thread.
#pragma once

#include <cstdint>
#include <cstring>

namespace troupe::model::quants {

// Block `b` of a row of `Block`s.
template <class Block>
inline Block load_block(const void* row, int64_t b) {
  Block blk;
  std::memcpy(&blk, static_cast<const uint8_t*>(row) + b * static_cast<int64_t>(sizeof(Block)),
              sizeof(Block));
  return blk;
}

// Writes block `b` of a row of `Block`s.
template <class Block>
inline void store_block(void* row, int64_t b, const Block& blk) {
  std::memcpy(static_cast<uint8_t*>(row) + b * static_cast<int64_t>(sizeof(Block)), &blk,
              sizeof(Block));
}

}  // namespace troupe::model::quants
