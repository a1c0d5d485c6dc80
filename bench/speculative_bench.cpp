// Speculative decoding with n-gram drafts (issue 21) on the real default model, in process:
// two workloads — "repeat" (the answer repeats much of the prompt: copy a paragraph, fix a code
// snippet) and "chat" (free answers to open questions) — at 1 and 16 concurrent streams, with
// drafts off and on (speculative.method ngram, k and lookup bounds from the command line),
// greedy. Prints output tok/s (completion tokens over the wall time), the mean inter-token
// latency per stream (its decode time over its tokens after the first; median over streams),
// the p99 gap between two deltas a client receives, and the draft acceptance. Asserts nothing.
//
//   speculative_bench [model.gguf] [max_tokens] [k] [lookup_min] [lookup_max] [rounds]
//                     [disable_by_batch_size (default 4, the config's; 0: never)]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/engine/engine.hpp"
#include "actors/engine/engine_config.hpp"

namespace {

using namespace troupe;
using Clock = std::chrono::steady_clock;

struct Run {
  std::mutex mutex;
  std::condition_variable cv;
  int remaining = 0;
  int64_t completion_tokens = 0;
  int num_errors = 0;
  std::vector<double> mean_itl_ms;  // per stream
  std::vector<double> gaps_ms;      // between consecutive deltas of a stream
};

class TimingSink final : public engine::RequestSink {
 public:
  explicit TimingSink(std::shared_ptr<Run> run) : run_(std::move(run)) {}
  bool on_delta(engine::RequestId, engine::TokenDelta delta) override {
    const Clock::time_point now = Clock::now();
    if (num_tokens_ == 0) first_ = now;
    if (num_tokens_ > 0) gaps_.push_back(std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
    num_tokens_ = delta.num_generated_tokens;
    return true;
  }
  void on_finish(engine::RequestId, engine::Completion completion) override {
    std::lock_guard lock(run_->mutex);
    run_->completion_tokens += completion.usage.completion_tokens;
    if (num_tokens_ > 1) {
      run_->mean_itl_ms.push_back(std::chrono::duration<double, std::milli>(last_ - first_).count() /
                                  (num_tokens_ - 1));
    }
    run_->gaps_ms.insert(run_->gaps_ms.end(), gaps_.begin(), gaps_.end());
    --run_->remaining;
    run_->cv.notify_all();
  }
  void on_error(engine::RequestId, engine::RequestError e) override {
    std::fprintf(stderr, "error: %s\n", e.message.c_str());
    std::lock_guard lock(run_->mutex);
    ++run_->num_errors;
    --run_->remaining;
    run_->cv.notify_all();
  }

 private:
  std::shared_ptr<Run> run_;
  Clock::time_point first_, last_;
  int32_t num_tokens_ = 0;
  std::vector<double> gaps_;
};

const std::vector<std::string> kRepeat = {
    "Repeat this text exactly, word for word: The old lighthouse stood at the edge of the cliff "
    "for more than a hundred years. Every night its lamp turned slowly, sending a beam across the "
    "dark water so that ships could find their way into the harbour. The keeper climbed the stairs "
    "each evening, cleaned the glass, and wrote the weather in a small book.",
    "Fix the bug in this Python function and print the whole corrected function:\n"
    "def average(numbers):\n    total = 0\n    for n in numbers:\n        total += n\n"
    "    return total / len(numbrs)\n",
    "Copy the following list exactly: apples, bananas, cherries, dates, elderberries, figs, "
    "grapes, honeydew melons, kiwis, lemons, mangoes, nectarines, oranges, papayas, quinces.",
    "Rewrite this paragraph with the same words: Our team meets every Monday at nine in the "
    "morning. We review the tasks of the previous week, decide what to do next, and write the "
    "plan on the board so that everyone knows who is responsible for each part of the work.",
};

const std::vector<std::string> kChat = {
    "What are three good habits for staying healthy?",
    "Tell me a short story about a cat who learns to fly.",
    "Why is the sky blue? Explain it simply.",
    "Give me some ideas for a weekend trip with friends.",
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path model =
      argc > 1 ? argv[1] : std::filesystem::path(TROUPE_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const int max_tokens = argc > 2 ? std::stoi(argv[2]) : 128;
  const int k = argc > 3 ? std::stoi(argv[3]) : 4;
  const int lookup_min = argc > 4 ? std::stoi(argv[4]) : 2;
  const int lookup_max = argc > 5 ? std::stoi(argv[5]) : 4;
  const int rounds = argc > 6 ? std::stoi(argv[6]) : 1;
  const int disable_by_batch_size = argc > 7 ? std::stoi(argv[7]) : 4;  // the config's default
  std::printf("speculative decoding on %s: greedy, max_tokens %d, ngram k %d, lookup [%d, %d], "
              "disable_by_batch_size %d\n",
              model.filename().c_str(), max_tokens, k, lookup_min, lookup_max, disable_by_batch_size);
  std::printf("%-7s %7s %-6s %7s %8s %9s %12s %12s %9s  %s\n", "load", "streams", "drafts", "wall s",
              "tokens", "tok/s", "ITL mean ms", "gap p99 ms", "accepted",
              "fitted ms: fixed/token/logits row");
  for (int round = 0; round < rounds; ++round) {
    for (const bool repeat : {true, false}) {
      for (const int streams : {1, 16}) {
        for (const bool spec : {false, true}) {
          engine::EngineConfig config;
          config.model_path = model;
          config.backend = engine::BackendKind::kCpu;
          if (spec) {
            config.scheduler.speculative = {.method = scheduler::SpeculativeMethod::kNgram,
                                            .num_speculative_tokens = k,
                                            .prompt_lookup_min = lookup_min,
                                            .prompt_lookup_max = lookup_max,
                                            .disable_by_batch_size = disable_by_batch_size};
          } else {
            config.scheduler.speculative = {};  // the engine's default drafts
          }
          auto eng = engine::Engine::start(config);
          auto run = std::make_shared<Run>();
          run->remaining = streams;
          const std::vector<std::string>& prompts = repeat ? kRepeat : kChat;
          const auto start = Clock::now();
          for (int i = 0; i < streams; ++i) {
            engine::GenerateRequest request;
            request.messages.push_back({"user", prompts[static_cast<size_t>(i) % prompts.size()]});
            request.sampling.temperature = 0.0f;
            request.stop.max_tokens = max_tokens;
            eng->submit(std::move(request), std::make_shared<TimingSink>(run));
          }
          {
            std::unique_lock lock(run->mutex);
            run->cv.wait(lock, [&] { return run->remaining == 0; });
          }
          const double wall = std::chrono::duration<double>(Clock::now() - start).count();
          const engine::EngineStats stats = eng->stats();
          const engine::SpeculativeStats& s = stats.speculative;
          std::printf("%-7s %7d %-6s %7.2f %8lld %9.1f %12.2f %12.2f %8.0f%%  %.2f/%.3f/%.3f%s\n",
                      repeat ? "repeat" : "chat", streams, spec ? "ngram" : "off", wall,
                      static_cast<long long>(run->completion_tokens), run->completion_tokens / wall,
                      percentile(run->mean_itl_ms, 0.5), percentile(run->gaps_ms, 0.99),
                      100 * s.acceptance_rate(), stats.step_cost.fixed_ms,
                      stats.step_cost.per_token_ms, stats.step_cost.per_sampled_ms,
                      run->num_errors > 0 ? "  (errors!)" : "");
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
