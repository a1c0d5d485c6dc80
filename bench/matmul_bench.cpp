// The batched matmul's quantized products alone (gpu/cpu/matmul.hpp): one thread, every SIMD ISA
// this CPU runs, nanoseconds per 16x4 product (16 outputs times one 4-input group of one row:
// one vpdpbusd, one int-to-float and one FMA in ggml's exact order) over a grid of input widths
// K and row counts. One matrix of ~1 M weights per K, reused: it stays in L2, so this measures
// the arithmetic, not the weights' stream from memory (cpu_forward_bench has both). With
// --stream-mib N each call takes the next of N MiB of copies of that matrix instead, so the
// weights come from memory as a forward pass's do (same products, same results).
//
// Each shape is timed twice: the rows in one call (as the forward pass multiplies a batch: from
// 8 rows the AVX-512 kernel unpacks each tile once for all of them), and the same rows in calls
// of 2 (what every row pair paid before: its own nibble unpacking and scale conversions).
//
//   matmul_bench [--type q4_1|q4_0|q8_0|q5_1|q4_k|q5_k|q6_k|f16|bf16] [--rounds N]
//                [--k LIST] [--rows LIST] [--stream-mib N]
//
// K-quants (matmul_q8k.hpp) are not tiled: their "16x4 product" is the same count of
// multiply-adds (16 outputs x 4 inputs x 1 row), and widths that are not a multiple of 256 are
// skipped.
//
// Rounds alternate ISAs, shapes and forms in one process (the 2-vCPU box's speed drifts between
// processes by tens of percent); the tables hold each one's best round.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/cpu/cpu_features.hpp"
#include "gpu/cpu/matmul.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace {

using namespace troupe::gpu::cpu;
using troupe::model::TensorType;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoll(item.c_str()));
  return out;
}

// --type: a weight type's name as tensor_type_name spells it, any case.
TensorType parse_type(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  const TensorType types[] = {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ8_0,
                              TensorType::kQ5_1, TensorType::kQ4_K, TensorType::kQ5_K,
                              TensorType::kQ6_K, TensorType::kF16,  TensorType::kBF16};
  for (TensorType t : types) {
    std::string name(troupe::model::tensor_type_name(t));
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    if (name == s) return t;
  }
  std::fprintf(stderr,
               "matmul_bench: unknown --type %s (q4_0 q4_1 q8_0 q5_1 q4_k q5_k q6_k f16 bf16)\n",
               s.c_str());
  std::exit(2);
}

struct Shape {
  int64_t k, outputs, rows;
  // The matrix, or its copies taken in turn (--stream-mib): one per call.
  std::vector<const PackedMatrix*> copies;
  size_t next_copy = 0;
  std::vector<float> x, y;
  QuantizedRows q;
  std::vector<QuantizedRows> pairs;  // rows 2i, 2i + 1 quantized alone
};

// All the shape's rows at `isa`: in one call, or in calls of 2 rows (each pair reads its own
// quantized copy, made once per shape below: QuantizedRows holds rows from 0).
void multiply(Shape& s, IsaLevel isa, bool in_pairs) {
  const PackedMatrix& packed = *s.copies[s.next_copy];
  s.next_copy = (s.next_copy + 1) % s.copies.size();
  if (!in_pairs) {
    matmul(packed, {s.x.data(), s.k, s.rows, &s.q}, s.y.data(), s.outputs, nullptr, isa);
    return;
  }
  for (int64_t r = 0; r < s.rows; r += 2) {
    matmul(packed, {s.x.data() + r * s.k, s.k, std::min<int64_t>(2, s.rows - r), &s.pairs[r / 2]},
           s.y.data() + r * s.outputs, s.outputs, nullptr, isa);
  }
}

// Seconds per pass over the shape's rows, over enough passes to take ~20 ms.
double time_pass(Shape& s, IsaLevel isa, bool in_pairs) {
  multiply(s, isa, in_pairs);  // warm the caches
  int passes = 1;
  for (;;) {
    const auto start = Clock::now();
    for (int i = 0; i < passes; ++i) multiply(s, isa, in_pairs);
    const double sec = std::chrono::duration<double>(Clock::now() - start).count();
    if (sec > 0.02) return sec / passes;
    passes *= 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  TensorType type = TensorType::kQ4_1;
  int rounds = 3;
  std::vector<int64_t> ks = {576, 1536, 4096, 14336};
  std::vector<int64_t> row_counts = {1, 2, 4, 8, 16, 32, 64};
  int64_t stream_mib = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--type")
      type = parse_type(argv[i + 1]);
    else if (a == "--rounds")
      rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--k")
      ks = parse_list(argv[i + 1]);
    else if (a == "--rows")
      row_counts = parse_list(argv[i + 1]);
    else if (a == "--stream-mib")
      stream_mib = std::max<int64_t>(0, std::atoll(argv[i + 1]));
    else {
      std::fprintf(stderr, "matmul_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }

  if (uses_q8k_activations(type)) {
    std::erase_if(ks, [](int64_t k) { return k % kQ8KBlock != 0; });
  }
  std::vector<Shape> shapes;
  std::vector<std::unique_ptr<PackedMatrix>> matrices;  // every shape's copies, alive to the end
  for (int64_t k : ks) {
    // ~1 M weights per matrix, a whole number of tiles.
    const int64_t outputs = std::max<int64_t>(256, (1536 * 576 / k + 15) / 16 * 16);
    const auto w = testing::random_weights(type, outputs, k, 42 + k);
    std::vector<const PackedMatrix*> copies;
    do {
      matrices.push_back(
          std::make_unique<PackedMatrix>(PackedMatrix::pack(type, w.data(), outputs, k)));
      copies.push_back(matrices.back().get());
    } while (static_cast<int64_t>(copies.size() * copies[0]->bytes()) < (stream_mib << 20));
    for (int64_t rows : row_counts) {
      Shape s{k,
              outputs,
              rows,
              copies,
              0,
              testing::random_floats(rows * k, 7 + rows),
              std::vector<float>(rows * outputs),
              {}};
      quantize_rows(s.x.data(), k, rows, k, s.q);
      for (int64_t r = 0; r < rows; r += 2) {
        s.pairs.emplace_back();
        quantize_rows(s.x.data() + r * k, k, std::min<int64_t>(2, rows - r), k, s.pairs.back());
      }
      shapes.push_back(std::move(s));
    }
  }

  std::printf("matmul_bench: %s, one thread, best of %d rounds; ns per 16x4 product; weights %s\n",
              std::string(troupe::model::tensor_type_name(type)).c_str(), rounds,
              stream_mib > 0 ? "streamed from memory (--stream-mib)" : "L2-resident");
  std::vector<IsaLevel> isas;
  for (IsaLevel isa : runnable_isas()) {
    if (isa != IsaLevel::kScalar) isas.push_back(isa);
  }
  // [isa][form][(k, rows)]: form 0 one call, form 1 calls of 2 rows. Each round runs every ISA,
  // shape and form, so a drift of the box's speed reaches them all alike.
  std::map<IsaLevel, std::map<std::pair<int64_t, int64_t>, double>[2]> best;
  for (int r = 0; r < rounds; ++r) {
    for (IsaLevel isa : isas) {
      for (Shape& s : shapes) {
        const double products = static_cast<double>(s.outputs / kTileOutputs) * s.rows * (s.k / 4);
        for (int form = 0; form < 2; ++form) {
          const double ns = time_pass(s, isa, form == 1) * 1e9 / products;
          auto [it, fresh] = best[isa][form].try_emplace({s.k, s.rows}, ns);
          if (!fresh) it->second = std::min(it->second, ns);
        }
      }
    }
  }
  const char* titles[3] = {"one call", "calls of 2 rows", "one call / calls of 2 rows"};
  for (IsaLevel isa : isas) {
    for (int table = 0; table < 3; ++table) {
      std::printf("\n%s, %s\n| K \\ rows |", std::string(to_string(isa)).c_str(), titles[table]);
      for (int64_t rows : row_counts) std::printf(" %lld |", static_cast<long long>(rows));
      std::printf("\n|---|");
      for (size_t i = 0; i < row_counts.size(); ++i) std::printf("---|");
      std::printf("\n");
      for (int64_t k : ks) {
        std::printf("| %lld |", static_cast<long long>(k));
        for (int64_t rows : row_counts) {
          const double one = best[isa][0][{k, rows}], pairs = best[isa][1][{k, rows}];
          std::printf(" %.3f |", table == 0 ? one : table == 1 ? pairs : one / pairs);
        }
        std::printf("\n");
      }
    }
  }
  return 0;
}
