// Fuzzes the BPE pre-tokenizers (model/pretokenizer.*, model/unicode.*): the hand-written regex
// matchers that split text before BPE, for every kind troupe knows. Input: byte 0 picks the
// kind, the rest is the text (any bytes; invalid UTF-8 becomes U+FFFD as in llama.cpp).
// Properties: the pieces are non-empty and cover every code point exactly once, in order (their
// concatenation is the whole mapped text); the split takes CPU time linear in the input (a
// budget per byte: no backtracking blow-up on long runs of spaces, digits or letters).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/pretokenizer.hpp"
#include "model/unicode.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  static constexpr model::PreTokenizerKind kKinds[] = {
      model::PreTokenizerKind::kDefault, model::PreTokenizerKind::kGpt2,
      model::PreTokenizerKind::kSmollm, model::PreTokenizerKind::kLlama3,
      model::PreTokenizerKind::kQwen2};
  const model::PreTokenizer pre(kKinds[data[0] % 5]);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::vector<char32_t> cpts = model::unicode::decode_lenient(text);
  const std::vector<size_t> lengths = pre.split_codepoints(cpts);
  size_t covered = 0;
  for (const size_t n : lengths) {
    TROUPE_FUZZ_CHECK(n > 0, "empty piece");
    covered += n;
  }
  TROUPE_FUZZ_CHECK(covered == cpts.size(), "pieces cover %zu of %zu code points", covered,
                    cpts.size());

  const std::vector<std::string> pieces = pre.split(text);
  TROUPE_FUZZ_CHECK(pieces.size() == lengths.size(), "split and split_codepoints disagree");
  std::string joined;
  for (const std::string& piece : pieces) joined += piece;
  std::string utf8;
  for (const char32_t cp : cpts) model::unicode::append_utf8(utf8, cp);
  std::string mapped;
  for (const char c : utf8) mapped.append(model::unicode::byte_to_mapped_utf8(static_cast<uint8_t>(c)));
  TROUPE_FUZZ_CHECK(joined == mapped, "the pieces do not concatenate to the mapped text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("pre-tokenizer", size, 20.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
