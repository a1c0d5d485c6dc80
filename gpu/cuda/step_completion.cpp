// Step slots and the completion poll thread of the CUDA backend (see step_completion.hpp).
#include "gpu/cuda/step_completion.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "gpu/cuda/sampling.cuh"

namespace troupe::gpu::cuda {
namespace {

// The sampled ids, logprobs and top logprobs of a completed step, from its pinned output.
std::vector<SampledToken> read_sampled_tokens(const PendingStep& p, const void* host_out,
                                              int32_t n_vocab) {
  std::vector<SampledToken> tokens;
  const int32_t S = static_cast<int32_t>(p.seq_ids.size());
  const int32_t* out = static_cast<const int32_t*>(host_out);
  const float* logprobs = reinterpret_cast<const float*>(out + S);
  const int32_t* top_ids = out + 2 * S;
  const float* top_logprobs = reinterpret_cast<const float*>(out + 2 * S + S * kMaxTopLogprobs);
  tokens.resize(S);
  for (int32_t r = 0; r < S; ++r) {
    SampledToken& t = tokens[r];
    t.seq_id = p.seq_ids[r];
    t.token_id = out[r];
    if (p.want_logprob[r]) t.logprob = logprobs[r];
    const int32_t k = std::min(p.num_top[r], n_vocab);
    for (int32_t i = 0; i < k; ++i) {
      t.top_logprobs.push_back({top_ids[r * kMaxTopLogprobs + i], top_logprobs[r * kMaxTopLogprobs + i]});
    }
  }
  return tokens;
}

}  // namespace

void StepCompletions::start(int device, int32_t n_vocab) {
  device_ = device;
  n_vocab_ = n_vocab;
  poller_ = std::thread([this] { poll_loop(); });
}

void StepCompletions::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  pending_cv_.notify_all();
  if (poller_.joinable()) poller_.join();  // completes every launched step first
}

int StepCompletions::acquire_slot() {
  std::unique_lock lock(mutex_);
  const int s = next_slot_;
  // Waits only when the caller runs more than kNumSlots steps ahead of the device.
  slot_cv_.wait(lock, [&] { return !slots[s].busy; });
  slots[s].busy = true;
  next_slot_ = (next_slot_ + 1) % kNumSlots;
  return s;
}

void StepCompletions::release_slot(int s) {
  {
    std::lock_guard lock(mutex_);
    slots[s].busy = false;
  }
  slot_cv_.notify_all();
}

void StepCompletions::push(PendingStep p) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(p));
  }
  pending_cv_.notify_one();
}

void StepCompletions::poll_loop() {
  cudaSetDevice(device_);
  for (;;) {
    PendingStep p;
    {
      std::unique_lock lock(mutex_);
      pending_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, and every launched step has completed
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    StepOutcome outcome;
    outcome.result.step_id = p.step_id;
    if (!p.error.empty()) {
      outcome.error = p.error;
    } else {
      StepSlot& slot = slots[p.slot];
      // Spin (yielding) through a typical decode step, then back off: the thread must
      // not hold a core while a long prefill runs.
      const auto begin = std::chrono::steady_clock::now();
      cudaError_t status;
      while ((status = cudaEventQuery(slot.done)) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() - begin < std::chrono::milliseconds(5)) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      if (status != cudaSuccess) {
        outcome.error = std::string("CUDA error while running step ") + std::to_string(p.step_id) + ": " +
                        cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
      } else {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, slot.start, slot.done) == cudaSuccess) last_device_ms_.store(ms);
        outcome.result.tokens = read_sampled_tokens(p, slot.host_out, n_vocab_);
      }
      release_slot(p.slot);
    }
    p.done(std::move(outcome));
  }
}

}  // namespace troupe::gpu::cuda
