#include "actors/gpu_worker/gpu_worker_actor.hpp"

namespace troupe::gpu_worker {

GpuWorkerActor::GpuWorkerActor(std::unique_ptr<gpu::Backend> backend)
    : Actor("gpu-worker", /*mailbox_capacity=*/4), backend_(std::move(backend)) {}

boost::asio::awaitable<void> GpuWorkerActor::handle(GpuWorkerMessage message) {
  backend_->launch(std::move(message.batch), message.done->completer());
  co_return;
}

void GpuWorkerActor::abandon(GpuWorkerMessage message) {
  gpu::StepOutcome outcome;
  outcome.result.step_id = message.batch.step_id;
  outcome.error = "the gpu-worker is shutting down";
  message.done->complete(std::move(outcome));
}

}  // namespace troupe::gpu_worker
