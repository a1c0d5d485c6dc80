// Helpers shared by the CUDA tests: the device check every test starts with (skip, never fail,
// without a device), device buffers poisoned with NaN before each run, and error norms.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_query.cuh"

namespace troupe::gpu::cuda::testing {

// Empty when a device is usable, else why not.
inline std::string no_device_reason() {
  const DeviceQueryResult r = query_device_count();
  if (r.status != 0) return std::string("no CUDA device: ") + r.status_text;
  if (r.device_count == 0) return "no CUDA device: cudaGetDeviceCount found 0 devices";
  return {};
}

#define TROUPE_REQUIRE_CUDA_DEVICE()                                                  \
  do {                                                                                \
    const std::string troupe_why_ = ::troupe::gpu::cuda::testing::no_device_reason(); \
    if (!troupe_why_.empty()) GTEST_SKIP() << troupe_why_ << " (test needs a GPU)";   \
  } while (0)

// A device allocation filled with 0xFF bytes (NaN in F32, F16 and BF16) so an element a kernel
// forgot to write fails the comparison.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(n * sizeof(T), 1)));
    poison();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void poison() { CUDA_CHECK(cudaMemset(ptr_, 0xFF, std::max<size_t>(n_ * sizeof(T), 1))); }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(n_);
    CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }

 private:
  void* ptr_ = nullptr;
  size_t n_ = 0;
};

// ||got - want|| / ||want||; infinite when any element is NaN.
template <typename A, typename B>
double relative_error(const std::vector<A>& got, const std::vector<B>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    if (std::isnan(g)) return INFINITY;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / (den > 0.0 ? den : 1.0));
}

}  // namespace troupe::gpu::cuda::testing
