// Structured output in the step loop (issue 19): 16 concurrent streams on the real default
// model, all constrained by one JSON schema vs all unconstrained, at temperature 1 (seed i per
// stream). Prints wall time, output tok/s (completion tokens over the wall), the step time p50
// and the bitmask fill cost per masked step (the scheduler thread's share; applying the mask
// in the sampler is inside the step time). Asserts nothing.
//
//   structured_output_bench [model.gguf] [max tokens per request] [streams]
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "actors/engine/engine.hpp"
#include "actors/engine/engine_config.hpp"

namespace {

using namespace troupe;

struct Done {
  std::mutex mutex;
  std::condition_variable cv;
  int remaining = 0;
  int64_t completion_tokens = 0;
  int num_errors = 0;
};

class CountingSink final : public engine::RequestSink {
 public:
  explicit CountingSink(std::shared_ptr<Done> done) : done_(std::move(done)) {}
  bool on_delta(engine::RequestId, engine::TokenDelta) override { return true; }
  void on_finish(engine::RequestId, engine::Completion completion) override {
    std::lock_guard lock(done_->mutex);
    done_->completion_tokens += completion.usage.completion_tokens;
    --done_->remaining;
    done_->cv.notify_all();
  }
  void on_error(engine::RequestId, engine::RequestError e) override {
    std::fprintf(stderr, "error: %s\n", e.message.c_str());
    std::lock_guard lock(done_->mutex);
    ++done_->num_errors;
    --done_->remaining;
    done_->cv.notify_all();
  }

 private:
  std::shared_ptr<Done> done_;
};

constexpr const char* kSchema =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":32},"age":{"type":"integer"},)"
    R"("city":{"type":"string","maxLength":32},"hobbies":{"type":"array","items":{"type":"string","maxLength":24}}},)"
    R"("required":["name","age","city","hobbies"]})";

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path model =
      argc > 1 ? argv[1] : std::filesystem::path(TROUPE_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const int max_tokens = argc > 2 ? std::stoi(argv[2]) : 96;
  const int streams = argc > 3 ? std::stoi(argv[3]) : 16;
  std::printf("structured output on %s: %d streams, max_tokens %d, temperature 1\n",
              model.filename().c_str(), streams, max_tokens);
  std::printf("%-14s %8s %10s %10s %12s %14s %12s\n", "mode", "wall s", "tokens", "tok/s",
              "step p50 ms", "fill ms/step", "fill max ms");
  for (const bool constrained : {false, true, false, true}) {
    engine::EngineConfig config;
    config.model_path = model;
    config.backend = engine::BackendKind::kCpu;
    auto eng = engine::Engine::start(config);
    auto done = std::make_shared<Done>();
    done->remaining = streams;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < streams; ++i) {
      engine::GenerateRequest request;
      request.messages.push_back(
          {"user", "Person " + std::to_string(i) + ": describe a fictional person as JSON with "
                   "name, age, city and hobbies."});
      request.sampling.temperature = 1.0f;
      request.sampling.seed = static_cast<uint64_t>(i);
      request.stop.max_tokens = max_tokens;
      if (constrained) {
        request.structured_output = model::grammar::GrammarSpec::json_schema(kSchema);
        request.structured_output_field = "response_format";
      }
      eng->submit(std::move(request), std::make_shared<CountingSink>(done));
    }
    {
      std::unique_lock lock(done->mutex);
      done->cv.wait(lock, [&] { return done->remaining == 0; });
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const engine::EngineStats stats = eng->stats();
    const engine::StructuredOutputStats& so = stats.structured_output;
    const double fill_per_step =
        so.num_masked_steps > 0 ? so.mask_fill_ms_total / static_cast<double>(so.num_masked_steps) : 0.0;
    std::printf("%-14s %8.2f %10lld %10.1f %12.2f %14.3f %12.3f%s\n",
                constrained ? "json_schema" : "unconstrained", wall,
                static_cast<long long>(done->completion_tokens), done->completion_tokens / wall,
                stats.step_time.p50_ms, fill_per_step, so.mask_fill_ms_max,
                done->num_errors > 0 ? "  (errors!)" : "");
  }
  return 0;
}
