// Unicode support for the tokenizer: UTF-8 decoding/encoding that never fails on bad bytes,
// general-category look-up (generated from Python's unicodedata by scripts/gen_unicode_tables.py),
// and GPT-2's byte <-> code point map used by byte-level BPE vocabularies.
//
// Two decoders exist on purpose:
//  - decode_lenient() reproduces llama.cpp's unicode_cpts_from_utf8 so pre-tokenization splits
//    text exactly as llama.cpp does (it accepts overlong forms and surrogates; a byte that starts
//    no sequence becomes U+FFFD and decoding resumes at the next byte).
//  - decode_strict() follows the Unicode standard's well-formed table; the detokenizer uses it so
//    text sent to clients is always valid UTF-8.
//
// Thread-safety: free functions over immutable tables; callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::model::unicode {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr char32_t kMaxCodepoint = 0x10FFFF;

// One bit per general-category class; exactly one is set for every code point.
enum CategoryFlag : uint8_t {
  kUndefined = 1u << 0,    // Cn (and anything above U+10FFFF)
  kNumber = 1u << 1,       // N*
  kLetter = 1u << 2,       // L*
  kSeparator = 1u << 3,    // Z*
  kMark = 1u << 4,         // M*
  kPunctuation = 1u << 5,  // P*
  kSymbol = 1u << 6,       // S*
  kControl = 1u << 7,      // Cc Cf Co Cs
};

struct CodepointFlags {
  uint8_t category = 0;     // 0 only for "no code point" (outside a piece, see pretokenizer.cpp)
  bool whitespace = false;  // the White_Space property

  bool is_number() const { return category & kNumber; }
  bool is_letter() const { return category & kLetter; }
  bool is_punctuation() const { return category & kPunctuation; }
  bool is_whitespace() const { return whitespace; }
  bool is_defined() const { return category != 0; }
};

CodepointFlags flags_of(char32_t cp);
const char* unicode_tables_version();

// --- UTF-8 ------------------------------------------------------------------------------------

// Sequence length implied by a lead byte, llama.cpp's unicode_len_utf8 (continuation bytes and
// 0x80..0xBF count as 1; 0xF8..0xFF count as 4).
size_t utf8_length_from_lead(uint8_t lead);

// llama.cpp-compatible lenient decode of the whole string (see the file comment). Code points
// above U+10FFFF, which llama.cpp cannot re-encode, become U+FFFD for their lead byte.
std::vector<char32_t> decode_lenient(std::string_view text);

enum class Utf8Status : uint8_t { kOk, kInvalid, kIncomplete };
struct Utf8Decoded {
  Utf8Status status = Utf8Status::kOk;
  char32_t codepoint = kReplacementChar;
  size_t length = 1;  // bytes consumed: the sequence (kOk), the bad prefix (kInvalid, >= 1),
                      // or everything left (kIncomplete: a valid prefix cut by the end)
};
// Strict, standard-conforming decode of the sequence starting at text[offset] (offset < size).
Utf8Decoded decode_strict(std::string_view text, size_t offset);

// Appends cp as UTF-8. Surrogates are encoded as their 3 bytes (llama.cpp does the same, and the
// lenient decoder can produce them); values above U+10FFFF append U+FFFD.
void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view text);
// Every ill-formed subsequence replaced by U+FFFD (maximal subparts, as the standard recommends).
std::string sanitize_utf8(std::string_view text);

// --- GPT-2 byte-level map -----------------------------------------------------------------------

// Bytes 0x21..0x7E, 0xA1..0xAC, 0xAE..0xFF map to themselves; the other 68, in order, to
// U+0100.. (so ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
char32_t byte_to_codepoint(uint8_t byte);
// The UTF-8 text of byte_to_codepoint(byte) (1 or 2 bytes).
std::string_view byte_to_mapped_utf8(uint8_t byte);
std::optional<uint8_t> codepoint_to_byte(char32_t cp);

namespace detail {
struct CategoryRange {
  char32_t first;
  char32_t last;
  uint8_t flag;
};
struct CodepointRange {
  char32_t first;
  char32_t last;
};
extern const CategoryRange kCategoryRanges[];
extern const size_t kNumCategoryRanges;
extern const CodepointRange kWhitespaceRanges[];
extern const size_t kNumWhitespaceRanges;
extern const char* const kUnicodeVersion;
}  // namespace detail

}  // namespace troupe::model::unicode
