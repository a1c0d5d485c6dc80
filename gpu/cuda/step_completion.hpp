// Step slots and completions: the pinned host buffers and events of the steps that may be in
// flight at once (kNumSlots), and the poll thread that waits for each launched step's event in
// launch order, reads its sampled tokens from pinned memory and calls its completion.
//
// Thread-safety: acquire_slot(), release_slot() and push() from the thread that calls launch()
// (they lock); the poll thread runs the completions. start() and stop() from the backend's
// constructor and destructor. A slot's buffers belong to whoever acquired it until released.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/backend.hpp"

namespace troupe::gpu::cuda {

constexpr int kNumSlots = 2;  // steps whose pinned buffers may be in flight at once

struct StepSlot {
  void* host_in = nullptr;
  size_t host_in_bytes = 0;
  void* host_out = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t done = nullptr;
  bool busy = false;
};

// A launched step waiting for its event (or carrying the error that stopped its launch).
struct PendingStep {
  uint64_t step_id = 0;
  int slot = -1;
  std::string error;
  std::vector<uint64_t> seq_ids;
  std::vector<int32_t> want_logprob;
  std::vector<int32_t> num_top;
  Backend::Completion done;
};

class StepCompletions {
 public:
  StepSlot slots[kNumSlots];

  // Starts the poll thread on `device`; n_vocab caps the top logprobs read back.
  void start(int device, int32_t n_vocab);
  // Completes every pushed step, then joins the poll thread.
  void stop();
  int acquire_slot();
  void release_slot(int slot);
  void push(PendingStep p);
  // Device time of the last completed step, from its first copy to its last (ms).
  float last_device_ms() const { return last_device_ms_.load(); }

 private:
  void poll_loop();

  int device_ = 0;
  int32_t n_vocab_ = 0;
  int next_slot_ = 0;
  std::mutex mutex_;
  std::condition_variable pending_cv_;
  std::condition_variable slot_cv_;
  std::deque<PendingStep> pending_;
  bool stopping_ = false;
  std::thread poller_;
  std::atomic<float> last_device_ms_{0.0f};
};

}  // namespace troupe::gpu::cuda
