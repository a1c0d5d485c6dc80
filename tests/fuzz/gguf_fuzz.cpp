// Fuzzes the GGUF reader (model/gguf.*) and everything the server reads from a model file after
// it, in the order the engine does at start-up: the model card, the tokenizer, the chat template
// and the llama weights view. A model file is untrusted input (docs/design.md §3): every failure
// must be a GgufError / std::runtime_error / std::invalid_argument naming the problem, never a
// crash, an out-of-bounds read (ASan) or another exception type (std::out_of_range,
// std::length_error, std::bad_alloc from an absurd count).
// Input: the file's bytes (GgufFile::from_bytes, an exactly-sized copy, so ASan sees overreads).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "model/chat_template.hpp"
#include "model/gguf.hpp"
#include "model/llama_config.hpp"
#include "model/llama_weights.hpp"
#include "model/model_info.hpp"
#include "model/tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

// Reads every metadata value through every accessor (arrays are views the parser validated).
void touch_metadata(const model::GgufFile& file) {
  for (const auto& [key, value] : file.metadata()) {
    TROUPE_FUZZ_CHECK(!key.empty(), "empty key accepted");
    (void)value.as_uint();
    (void)value.as_int();
    (void)value.as_float();
    (void)value.as_bool();
    (void)value.as_string();
    if (value.is_array()) {
      if (auto strings = value.as_string_array()) {
        TROUPE_FUZZ_CHECK(strings->size() == value.size(), "string array size");
        size_t total = 0;
        for (const std::string_view s : *strings) total += s.size();
        TROUPE_FUZZ_CHECK(total <= file.file_size(), "strings longer than the file");
      }
      (void)value.as_int_array();
      (void)value.as_float_array();
    }
  }
}

void check_tensors(const model::GgufFile& file) {
  TROUPE_FUZZ_CHECK(file.data_offset() <= file.file_size(), "data offset past the end");
  const uint64_t data_size = file.file_size() - file.data_offset();
  for (const model::GgufTensorInfo& t : file.tensors()) {
    TROUPE_FUZZ_CHECK(t.offset <= data_size && t.num_bytes <= data_size - t.offset,
                      "tensor '%s' outside the data section", t.name.c_str());
    TROUPE_FUZZ_CHECK(t.num_dims >= 1 && t.num_dims <= 4, "n_dims %u", t.num_dims);
    TROUPE_FUZZ_CHECK(file.find_tensor(t.name) == &t, "tensor index");
    // Touch the first and last byte: ASan reports a view that leaves the copy.
    if (t.num_bytes > 0) {
      volatile std::byte first = t.bytes().front();
      volatile std::byte last = t.bytes().back();
      (void)first;
      (void)last;
    }
  }
}

// Runs `step`; an expected start-up failure (a clear error) ends the chain quietly.
template <typename Step>
bool survives(Step&& step) {
  try {
    step();
    return true;
  } catch (const std::runtime_error& e) {  // GgufError included
    TROUPE_FUZZ_CHECK(e.what()[0] != '\0', "empty error message");
  } catch (const std::invalid_argument& e) {
    TROUPE_FUZZ_CHECK(e.what()[0] != '\0', "empty error message");
  } catch (const std::exception& e) {
    TROUPE_FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return false;
}

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  std::optional<model::GgufFile> file;
  if (!survives([&] {
        file.emplace(model::GgufFile::from_bytes(
            std::as_bytes(std::span(data, size)), "fuzz.gguf"));
      })) {
    return;
  }
  touch_metadata(*file);
  check_tensors(*file);

  survives([&] { (void)model::read_model_info(*file); });
  survives([&] {
    const model::Tokenizer tokenizer = model::Tokenizer::from_gguf(*file);
    const std::string text = "Hello <|im_end|> w\xC3\xB6rld\n\n 123 \xFF";
    const std::vector<int32_t> ids = tokenizer.encode(text, true);
    for (const int32_t id : ids) {
      TROUPE_FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < tokenizer.vocab_size(), "id %d", id);
    }
    (void)tokenizer.decode(ids, true);
    (void)tokenizer.max_token_bytes();
  });
  survives([&] {
    const model::ChatTemplate chat_template = model::ChatTemplate::for_model(*file);
    const model::ChatMessage messages[] = {{"user", "hi"}};
    (void)chat_template.render(messages, true);
  });
  survives([&] {
    // A config the backends will compute with: finite, positive RoPE and norm constants (a
    // float64 1e300 in the file is inf as a float).
    const model::LlamaConfig c = model::LlamaConfig::from_gguf(*file);
    TROUPE_FUZZ_CHECK(std::isfinite(c.rope_freq_base) && c.rope_freq_base > 0.0f,
                      "rope_freq_base %g accepted", c.rope_freq_base);
    TROUPE_FUZZ_CHECK(std::isfinite(c.rope_freq_scale) && c.rope_freq_scale > 0.0f,
                      "rope_freq_scale %g accepted", c.rope_freq_scale);
    TROUPE_FUZZ_CHECK(std::isfinite(c.rms_eps) && c.rms_eps > 0.0f, "rms_eps %g accepted",
                      c.rms_eps);
    TROUPE_FUZZ_CHECK(c.q_dim() > 0 && c.kv_dim() > 0, "empty attention dims");
    (void)model::LlamaWeights::from_gguf(*file);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("gguf", size, 50.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
