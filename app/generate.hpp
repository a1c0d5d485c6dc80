// `troupe generate`: one generation streamed to stdout through the real engine (like llama-cli).
//
// Thread-safety: called once, from main.
#pragma once

#include <optional>
#include <string>

namespace troupe::app {

struct GenerateOptions {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string prompt;
  bool chat = false;
  std::optional<std::string> system;
  std::optional<std::string> max_tokens;
  std::optional<std::string> temperature;
  std::optional<std::string> seed;
  std::optional<std::string> top_k;
  std::optional<std::string> top_p;
  std::optional<std::string> threads;
  bool show_stats = false;  // timings to stderr at the end
};

int run_generate(const GenerateOptions& options);

}  // namespace troupe::app
