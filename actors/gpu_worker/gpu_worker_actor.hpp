// The gpu-worker actor: owns the Backend (weights and KV memory on one device) and launches the
// steps the scheduler sends it. It does not wait for a step: the backend completes the step's
// CompletionSlot from its own thread (CPU compute thread, CUDA event poller), and the scheduler
// awaits that slot on its own executor.
//
// Thread-safety: start() from the wiring thread; try_send()/send()/shutdown() from any thread;
// handle() runs on the actor's executor, the only place the backend is touched.
#pragma once

#include <memory>

#include "actors/runtime/actor.hpp"
#include "actors/runtime/completion_slot.hpp"
#include "gpu/backend.hpp"

namespace troupe::gpu_worker {

struct RunStep {
  gpu::StepBatch batch;
  std::shared_ptr<actors::runtime::CompletionSlot<gpu::StepOutcome>> done;
};

using GpuWorkerMessage = RunStep;

class GpuWorkerActor final : public actors::runtime::Actor<GpuWorkerMessage> {
 public:
  explicit GpuWorkerActor(std::unique_ptr<gpu::Backend> backend);

  const gpu::Backend& backend() const { return *backend_; }

 protected:
  boost::asio::awaitable<void> handle(GpuWorkerMessage message) override;
  void abandon(GpuWorkerMessage message) override;

 private:
  std::unique_ptr<gpu::Backend> backend_;
};

}  // namespace troupe::gpu_worker
