// Engine overhead per step: the share of each tick spent outside the backend's forward pass
// (scheduling, hand-offs between actors, detokenization, reporting), with 1, 16 and 64 running
// sequences on the real default model. Prints numbers; asserts nothing.
//
//   engine_overhead_bench [model.gguf] [tokens per request]
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include "actors/engine/engine.hpp"
#include "actors/engine/engine_config.hpp"

namespace {

using namespace troupe;

// Counts finished requests; the bench waits for all of them.
class CountingSink final : public engine::RequestSink {
 public:
  explicit CountingSink(std::shared_ptr<std::pair<std::mutex, std::condition_variable>> done,
                        std::shared_ptr<int> remaining)
      : done_(std::move(done)), remaining_(std::move(remaining)) {}
  bool on_delta(engine::RequestId, engine::TokenDelta) override { return true; }
  void on_finish(engine::RequestId, engine::Completion) override { finish(); }
  void on_error(engine::RequestId, engine::RequestError e) override {
    std::fprintf(stderr, "error: %s\n", e.message.c_str());
    finish();
  }

 private:
  void finish() {
    std::lock_guard lock(done_->first);
    --*remaining_;
    done_->second.notify_all();
  }
  std::shared_ptr<std::pair<std::mutex, std::condition_variable>> done_;
  std::shared_ptr<int> remaining_;
};

uint64_t cpu_steal_ticks() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  uint64_t values[8] = {};
  stat >> cpu;
  for (uint64_t& v : values) stat >> v;
  return values[7];
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path model =
      argc > 1 ? argv[1] : std::filesystem::path(TROUPE_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const int tokens = argc > 2 ? std::stoi(argv[2]) : 64;
  std::printf("engine overhead on %s, %d generated tokens per request, prompt ~16 tokens\n",
              model.filename().c_str(), tokens);
  std::printf("%-8s %10s %12s %12s %10s %8s\n", "seqs", "wall s", "tok/s", "step p50 ms",
              "overhead", "steal");
  for (int concurrency : {1, 16, 64}) {
    engine::EngineConfig config;
    config.model_path = model;
    config.backend = engine::BackendKind::kCpu;
    auto eng = engine::Engine::start(config);
    auto done = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
    auto remaining = std::make_shared<int>(concurrency);
    const uint64_t steal_before = cpu_steal_ticks();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < concurrency; ++i) {
      engine::GenerateRequest request;
      request.prompt_text = "Request " + std::to_string(i) + ": tell me a story about the sea and the wind.";
      request.sampling.temperature = 0.0f;
      request.stop.max_tokens = tokens;
      request.stop.ignore_eos = true;
      eng->submit(std::move(request), std::make_shared<CountingSink>(done, remaining));
    }
    {
      std::unique_lock lock(done->first);
      done->second.wait(lock, [&] { return *remaining == 0; });
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const engine::EngineStats stats = eng->stats();
    std::printf("%-8d %10.2f %12.1f %12.2f %9.2f%% %8llu\n", concurrency, wall,
                concurrency * tokens / wall, stats.step_time.p50_ms,
                100.0 * stats.engine_overhead_ratio,
                static_cast<unsigned long long>(cpu_steal_ticks() - steal_before));
  }
  return 0;
}
