// Fuzzes the real SmolLM2 tokenizer (model/tokenizer.*, bpe_tokenizer.cpp, pretokenizer.cpp,
// detokenizer.cpp) with any bytes of any length. The tokenizer is loaded once from
// models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup downloads it); without the file the
// harness says so and exits cleanly.
// Input: byte 0 picks a mode, the rest is the text (or, in mode 4, token ids).
//   0  encode(text, parse_special=false): ids in range; valid UTF-8 round-trips through decode
//      (but for the bytes the vocabulary has no token for, which BPE drops like llama.cpp)
//   1  encode(text, parse_special=true): ids in range; round-trips with render_special
//   2  encode_with_plain_spans with two spans from bytes 1-4: no special token inside a span
//   3  encode with max_tokens from byte 1: below the bound the full encoding, above it a prefix
//   4  the bytes as token ids (in and out of range): decode, token_piece, and the incremental
//      detokenizer's stream equals the whole decode with ill-formed UTF-8 replaced
// Every mode also has a CPU-time budget per input byte: encoding must stay linear-ish (no
// quadratic scan or merge loop that a long hostile prompt could exploit). Run with a large
// -max_len (scripts/fuzz uses 64 KiB).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/detokenizer.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "model/unicode.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

std::optional<model::Tokenizer> g_tokenizer;
// Bytes whose GPT-2-mapped character is no token of the vocabulary (SmolLM2 lacks 6 control
// characters, the bytes that never occur in UTF-8, and the lead bytes 0xF1/0xF2). BPE drops
// them, as llama.cpp does, so they cannot round-trip.
std::array<bool, 256> g_dropped{};

// Budget: instrumented SmolLM2 encoding runs at roughly 1-3 µs per byte; 40 µs per byte leaves
// room for noise and unlucky inputs while a quadratic blow-up on a long input still trips it.
constexpr double kMicrosecondsPerByte = 40.0;

template <typename Work>
void timed(const char* what, size_t size, Work&& work) {
  fuzz::within_cpu_budget(what, size, kMicrosecondsPerByte, 50.0, std::forward<Work>(work));
}

void check_ids(const std::vector<int32_t>& ids) {
  const size_t vocab = g_tokenizer->vocab_size();
  for (const int32_t id : ids) {
    TROUPE_FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < vocab, "token id %d", id);
  }
}

bool is_prefix(const std::vector<int32_t>& prefix, const std::vector<int32_t>& whole) {
  return prefix.size() <= whole.size() && std::equal(prefix.begin(), prefix.end(), whole.begin());
}

void check_round_trip(std::string_view text, const std::vector<int32_t>& ids, bool special) {
  if (!model::unicode::is_valid_utf8(text)) return;  // invalid bytes become U+FFFD first
  std::string expected;
  for (const char c : text) {
    if (!g_dropped[static_cast<uint8_t>(c)]) expected.push_back(c);
  }
  const std::string decoded = g_tokenizer->decode(ids, special);
  TROUPE_FUZZ_CHECK(decoded == expected, "round trip differs: %zu bytes in, %zu expected, %zu out",
                    text.size(), expected.size(), decoded.size());
}

void decode_ids(std::string_view bytes) {
  std::vector<int32_t> ids(bytes.size() / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    int16_t raw = 0;
    std::memcpy(&raw, bytes.data() + 2 * i, 2);
    // Mostly real ids (SmolLM2 has 49152), some out of range or negative.
    ids[i] = raw < -2000 ? raw : static_cast<int32_t>(static_cast<uint16_t>(raw)) * 3 / 4;
  }
  for (const int32_t id : ids) (void)g_tokenizer->token_piece(id, id % 2 == 0);
  for (const bool special : {false, true}) {
    const std::string whole = g_tokenizer->decode(ids, special);
    model::IncrementalDetokenizer detokenizer(*g_tokenizer, special);
    std::string streamed;
    for (const int32_t id : ids) streamed += detokenizer.push(id);
    streamed += detokenizer.flush();
    TROUPE_FUZZ_CHECK(model::unicode::is_valid_utf8(streamed), "streamed text is not UTF-8");
    TROUPE_FUZZ_CHECK(streamed == model::unicode::sanitize_utf8(whole),
                      "streamed %zu bytes, whole decode sanitized to %zu", streamed.size(),
                      model::unicode::sanitize_utf8(whole).size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::filesystem::path path = fuzz::default_model_path();
  if (!std::filesystem::exists(path)) {
    std::printf("[tokenizer_fuzz] %s is missing (run scripts/setup); nothing to fuzz\n",
                path.c_str());
    std::exit(0);
  }
  const model::GgufFile file = model::GgufFile::open(path);
  g_tokenizer.emplace(model::Tokenizer::from_gguf(file));
  for (int b = 0; b < 256; ++b) {
    g_dropped[b] = !g_tokenizer->find_token(model::unicode::byte_to_mapped_utf8(static_cast<uint8_t>(b)));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 5;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const model::Tokenizer& tokenizer = *g_tokenizer;
  switch (mode) {
    case 0: {
      std::vector<int32_t> ids;
      timed("encode", size, [&] { ids = tokenizer.encode(text, false); });
      check_ids(ids);
      check_round_trip(text, ids, false);
      // Untrusted text never yields a control token (no injected <|im_end|>).
      for (const int32_t id : ids) {
        TROUPE_FUZZ_CHECK(!tokenizer.is_control(id), "control token %d from plain text", id);
      }
      break;
    }
    case 1: {
      std::vector<int32_t> ids;
      timed("encode special", size, [&] { ids = tokenizer.encode(text, true); });
      check_ids(ids);
      check_round_trip(text, ids, true);
      break;
    }
    case 2: {
      if (text.size() < 4) return 0;
      const std::string_view body = text.substr(4);
      auto at = [&](size_t i) { return body.empty() ? 0 : static_cast<uint8_t>(text[i]) * body.size() / 256; };
      const model::TextSpan spans[] = {{std::min(at(0), at(1)), std::max(at(0), at(1))},
                                       {at(2), std::min(body.size(), at(2) + at(3) / 4 + 1)}};
      std::vector<int32_t> ids;
      timed("encode_with_plain_spans", size,
            [&] { ids = tokenizer.encode_with_plain_spans(body, spans); });
      check_ids(ids);
      check_round_trip(body, ids, true);
      // Control tokens come only from text outside both spans.
      size_t num_control = 0;
      for (const int32_t id : ids) num_control += tokenizer.is_control(id);
      std::string outside(body);
      for (const model::TextSpan& s : spans) {
        for (size_t i = s.begin; i < s.end && i < outside.size(); ++i) outside[i] = 'x';
      }
      size_t num_control_outside = 0;
      for (const int32_t id : tokenizer.encode(outside, true)) {
        num_control_outside += tokenizer.is_control(id);
      }
      TROUPE_FUZZ_CHECK(num_control <= num_control_outside,
                        "%zu control tokens, only %zu outside the plain spans", num_control,
                        num_control_outside);
      break;
    }
    case 3: {
      if (text.empty()) return 0;
      const size_t max_tokens = static_cast<uint8_t>(text[0]);
      const std::string_view body = text.substr(1);
      std::vector<int32_t> bounded;
      timed("bounded encode", size, [&] { bounded = tokenizer.encode(body, true, max_tokens); });
      const std::vector<int32_t> full = tokenizer.encode(body, true);
      if (full.size() <= max_tokens) {
        TROUPE_FUZZ_CHECK(bounded == full, "below the bound, not the full encoding");
      } else {
        TROUPE_FUZZ_CHECK(bounded.size() > max_tokens, "over the bound, yet %zu <= %zu ids",
                          bounded.size(), max_tokens);
        TROUPE_FUZZ_CHECK(is_prefix(bounded, full), "the bounded encoding is not a prefix");
      }
      break;
    }
    case 4:
      timed("decode", size, [&] { decode_ids(text); });
      break;
  }
  return 0;
}
