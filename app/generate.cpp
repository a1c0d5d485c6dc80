#include "app/generate.hpp"

#include <charconv>
#include <filesystem>
#include <future>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/engine/engine.hpp"
#include "actors/engine/engine_config.hpp"
#include "app/config.hpp"

namespace troupe::app {
namespace {

template <typename T>
T parse_number(const std::optional<std::string>& text, std::string_view flag, T fallback) {
  if (!text) return fallback;
  T value{};
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size()) {
    throw ConfigError(fmt::format("{}: '{}' is not a number", flag, *text));
  }
  return value;
}

// Prints deltas as they arrive and hands the final outcome to the waiting main thread.
class StdoutSink final : public engine::RequestSink {
 public:
  bool on_delta(engine::RequestId, engine::TokenDelta delta) override {
    std::cout << delta.text << std::flush;
    return true;
  }
  void on_finish(engine::RequestId, engine::Completion completion) override {
    done_.set_value(std::move(completion));
  }
  void on_error(engine::RequestId, engine::RequestError error) override {
    error_ = error.message;
    done_.set_value(std::nullopt);
  }
  std::optional<engine::Completion> wait() { return done_.get_future().get(); }
  const std::string& error() const { return error_; }

 private:
  std::promise<std::optional<engine::Completion>> done_;
  std::string error_;
};

}  // namespace

int run_generate(const GenerateOptions& options) {
  engine::EngineConfig config;
  engine::GenerateRequest request;
  request.origin = engine::RequestOrigin::kCli;
  try {
    if (!std::filesystem::exists(options.model)) {
      throw ConfigError(fmt::format("--model: file not found: {}", options.model));
    }
    if (options.prompt.empty()) throw ConfigError("--prompt is required");
    config.model_path = options.model;
    config.backend = engine::BackendKind::kCpu;
    config.cpu.num_threads = parse_number<int>(options.threads, "--threads", 0);
    request.stop.max_tokens = parse_number<int32_t>(options.max_tokens, "--max-tokens", 256);
    request.sampling.temperature = parse_number<float>(options.temperature, "--temperature", 0.8f);
    request.sampling.seed = parse_number<uint64_t>(options.seed, "--seed", 0);
    request.sampling.top_k = parse_number<int32_t>(options.top_k, "--top-k", 40);
    request.sampling.top_p = parse_number<float>(options.top_p, "--top-p", 0.95f);
  } catch (const ConfigError& e) {
    std::cerr << "troupe: " << e.what() << "\n";
    return 2;
  }
  if (options.chat) {
    if (options.system) request.messages.push_back({"system", *options.system});
    request.messages.push_back({"user", options.prompt});
  } else {
    request.prompt_text = options.prompt;
  }

  spdlog::set_level(spdlog::level::warn);
  std::unique_ptr<engine::Engine> engine;
  try {
    engine = engine::Engine::start(config);
  } catch (const std::exception& e) {
    std::cerr << "troupe: cannot load model: " << e.what() << "\n";
    return 1;
  }
  auto sink = std::make_shared<StdoutSink>();
  engine->submit(std::move(request), sink);
  const std::optional<engine::Completion> completion = sink->wait();
  std::cout << "\n";
  if (!completion) {
    std::cerr << "troupe: " << sink->error() << "\n";
    return 1;
  }
  if (options.show_stats) {
    const engine::Timings& t = completion->timings;
    std::cerr << fmt::format(
        "[{} prompt tokens, {} generated, finish_reason {}; first token {:.0f} ms, decode {:.1f} "
        "tok/s]\n",
        completion->usage.prompt_tokens, completion->usage.completion_tokens,
        completion->finish_reason, t.time_to_first_token_ms, t.decode_tokens_per_s);
  }
  return 0;
}

}  // namespace troupe::app
