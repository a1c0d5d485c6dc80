// The weights on the device are the weights in the file: upload_weights() (on a non-blocking
// stream, as the backend runs it) and then every device matrix and vector downloaded and compared
// with the CPU's decoding of the same view (model::dequantized_copy: the reference dequantizer
// rounded to the compute type). Dummy weights of every type the backend accepts, at the default
// model's shape, tied and untied, a Q4_K_M mix, and the real default model when present.
//
// Issue 34: the upload copied with cudaMemcpy (legacy stream, returns before a pageable copy's
// DMA lands) and converted on the backend's non-blocking stream, so a conversion could read a
// staging buffer that still held the previous matrix. Parity tests only saw garbage logits; this
// test names the matrix and the first differing element.
#include "gpu/cuda/cuda_weights.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_allocations.hpp"
#include "model/dequantized_weights.hpp"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/cuda_test_util.hpp"

namespace troupe::gpu::cuda {
namespace {

using model::TensorType;

std::vector<std::byte> download(const void* device, size_t bytes) {
  std::vector<std::byte> host(bytes);
  CUDA_CHECK(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost));
  return host;
}

// How a device buffer differs from the expected bytes: elements (of `element` bytes) that
// differ, and the first of them.
struct Difference {
  int64_t num_elements = 0;
  int64_t num_different = 0;
  int64_t first = -1;
};

Difference compare(const std::vector<std::byte>& got, const std::byte* want, size_t element) {
  Difference d;
  d.num_elements = static_cast<int64_t>(got.size() / element);
  for (int64_t i = 0; i < d.num_elements; ++i) {
    if (std::memcmp(got.data() + i * element, want + i * element, element) != 0) {
      if (d.first < 0) d.first = i;
      ++d.num_different;
    }
  }
  return d;
}

// Uploads `w` as the backend does and checks every buffer; returns how many buffers differ.
int check_round_trip(const model::LlamaWeights& w, const std::string& label) {
  const TensorType main = w.layers().front().wq.type;
  const ActType act = main == TensorType::kBF16 ? ActType::kBF16 : ActType::kF16;
  const model::LlamaWeights want =
      model::dequantized_copy(w, act == ActType::kF16 ? TensorType::kF16 : TensorType::kBF16);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceAllocations allocations;
  const DeviceWeights d = upload_weights(w, act, stream, allocations);
  int bad = 0;
  auto expect_same = [&](const std::string& name, const void* device, size_t bytes,
                         const std::vector<const std::byte*>& parts,
                         const std::vector<size_t>& part_bytes, size_t element) {
    std::vector<std::byte> expected;
    for (size_t i = 0; i < parts.size(); ++i)
      expected.insert(expected.end(), parts[i], parts[i] + part_bytes[i]);
    ASSERT_EQ(expected.size(), bytes) << name;
    const Difference diff = compare(download(device, bytes), expected.data(), element);
    if (diff.num_different > 0) {
      ++bad;
      ADD_FAILURE() << label << ": " << name << " differs from the CPU's decoding in "
                    << diff.num_different << " of " << diff.num_elements
                    << " elements, the first at " << diff.first;
    }
  };
  const model::LlamaConfig& c = w.config();
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const model::LlamaLayerWeights& L = want.layers()[l];
    const DeviceLayerWeights& D = d.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    expect_same(p + "attn_qkv", D.qkv, L.wq.num_bytes + L.wk.num_bytes + L.wv.num_bytes,
                {L.wq.data, L.wk.data, L.wv.data}, {L.wq.num_bytes, L.wk.num_bytes, L.wv.num_bytes},
                2);
    expect_same(p + "attn_output", D.wo, L.wo.num_bytes, {L.wo.data}, {L.wo.num_bytes}, 2);
    expect_same(p + "ffn_gate_up", D.gate_up, L.w_gate.num_bytes + L.w_up.num_bytes,
                {L.w_gate.data, L.w_up.data}, {L.w_gate.num_bytes, L.w_up.num_bytes}, 2);
    expect_same(p + "ffn_down", D.down, L.w_down.num_bytes, {L.w_down.data}, {L.w_down.num_bytes},
                2);
    expect_same(p + "attn_norm", D.attn_norm, L.attn_norm.num_bytes, {L.attn_norm.data},
                {L.attn_norm.num_bytes}, 4);
    expect_same(p + "ffn_norm", D.ffn_norm, L.ffn_norm.num_bytes, {L.ffn_norm.data},
                {L.ffn_norm.num_bytes}, 4);
  }
  // token_embd stays raw on the device (gathered per step): the file's bytes.
  expect_same("token_embd (raw)", d.embd_raw, w.token_embd().num_bytes, {w.token_embd().data},
              {w.token_embd().num_bytes}, 1);
  EXPECT_EQ(d.embd_type, w.token_embd().type) << label;
  expect_same(c.tied_output ? "output (tied: token_embd converted)" : "output", d.output,
              want.output().num_bytes, {want.output().data}, {want.output().num_bytes}, 2);
  expect_same("output_norm", d.output_norm, w.output_norm().num_bytes, {w.output_norm().data},
              {w.output_norm().num_bytes}, 4);
  if (w.rope_freqs()) {
    expect_same("rope_freqs", d.rope_freqs, w.rope_freqs()->num_bytes, {w.rope_freqs()->data},
                {w.rope_freqs()->num_bytes}, 4);
  }
  allocations.free_all();
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("[ round trip %s ] %d of %d layers' buffers checked, %d differ\n", label.c_str(),
              c.n_layer, c.n_layer, bad);
  return bad;
}

struct RoundTripCase {
  TensorType type;
  bool tied;
  model::DummyMix mix = model::DummyMix::kUniform;
};

class CudaWeightRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(CudaWeightRoundTrip, EveryDeviceBufferIsTheCpusDecodingAtTheDefaultModelsShape) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const RoundTripCase k = GetParam();
  model::LlamaConfig c = *model::LlamaConfig::named_shape("smollm2-135m");
  c.tied_output = k.tied;
  const model::LlamaWeights w = model::make_dummy_weights(c, k.type, 11, k.mix);
  EXPECT_EQ(check_round_trip(
                w, std::string(model::tensor_type_name(k.type)) + (k.tied ? " tied" : " untied")),
            0);
}

std::vector<RoundTripCase> round_trip_cases() {
  std::vector<RoundTripCase> cases;
  for (const TensorType t :
       {TensorType::kF32, TensorType::kF16, TensorType::kBF16, TensorType::kQ4_0, TensorType::kQ4_1,
        TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ4_K,
        TensorType::kQ5_K, TensorType::kQ6_K}) {
    cases.push_back({t, true});
  }
  for (const TensorType t : {TensorType::kQ4_1, TensorType::kQ8_0, TensorType::kF16})
    cases.push_back({t, false});
  cases.push_back({TensorType::kQ4_K, true, model::DummyMix::kQ4_K_M});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Types, CudaWeightRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         [](const auto& info) {
                           const RoundTripCase& k = info.param;
                           return std::string(k.mix == model::DummyMix::kQ4_K_M
                                                  ? "Q4_K_M_mix"
                                                  : model::tensor_type_name(k.type)) +
                                  (k.tied ? "_tied" : "_untied");
                         });

TEST(CudaWeightRoundTrip, TheRealDefaultModelArrivesIntact) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const std::filesystem::path path = cpu::testing::default_model_path();
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "model not found: " << path << " (set TROUPE_TEST_MODEL)";
  const auto file = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
  EXPECT_EQ(check_round_trip(model::LlamaWeights::from_gguf(file), "SmolLM2-135M-Instruct Q4_1"),
            0);
}

}  // namespace
}  // namespace troupe::gpu::cuda
