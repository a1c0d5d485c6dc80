// Unicode tables, UTF-8 codecs and the GPT-2 byte map.
#include "model/unicode.hpp"

#include <set>

#include <gtest/gtest.h>

namespace troupe::model::unicode {

TEST(Unicode, Categories) {
  EXPECT_TRUE(flags_of('a').is_letter());
  EXPECT_TRUE(flags_of(U'é').is_letter());
  EXPECT_TRUE(flags_of(U'中').is_letter());
  EXPECT_TRUE(flags_of('7').is_number());
  EXPECT_TRUE(flags_of(U'²').is_number());
  EXPECT_TRUE(flags_of(U'Ⅻ').is_number());
  EXPECT_TRUE(flags_of('!').is_punctuation());
  EXPECT_EQ(flags_of('$').category, kSymbol);
  EXPECT_EQ(flags_of(0x1F600).category, kSymbol);  // 😀
  EXPECT_EQ(flags_of(0x0301).category, kMark);
  EXPECT_EQ(flags_of(0x0378).category, kUndefined);
  EXPECT_EQ(flags_of(0x110000).category, kUndefined);
  EXPECT_EQ(flags_of(0x00AD).category, kControl);  // soft hyphen is Cf
}

TEST(Unicode, WhiteSpaceIsThePropertyNotIsspace) {
  for (const uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u,
                            0x2000u, 0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(flags_of(cp).is_whitespace()) << std::hex << cp;
  }
  for (const uint32_t cp : {0x1Cu, 0x1Du, 0x1Eu, 0x1Fu, 0x200Bu, 0xFEFFu, 0x61u}) {
    EXPECT_FALSE(flags_of(cp).is_whitespace()) << std::hex << cp;
  }
}

TEST(Unicode, Gpt2ByteMap) {
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);
  EXPECT_EQ(byte_to_codepoint('A'), static_cast<char32_t>('A'));
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);
  EXPECT_EQ(byte_to_mapped_utf8(' '), "\xC4\xA0");  // 'Ġ'
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(codepoint_to_byte(cp), static_cast<uint8_t>(b));
  }
  EXPECT_FALSE(codepoint_to_byte(0x20).has_value());  // space itself is remapped
  EXPECT_FALSE(codepoint_to_byte(0x4E2D).has_value());
}

TEST(Unicode, LenientDecodeNeverFails) {
  EXPECT_EQ(decode_lenient("a\xC3\xA9"), (std::vector<char32_t>{'a', 0xE9}));
  EXPECT_EQ(decode_lenient("\xFF"
                           "a"),
            (std::vector<char32_t>{0xFFFD, 'a'}));
  EXPECT_EQ(decode_lenient("\xE2\x82"), (std::vector<char32_t>{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_lenient("\xC0\x80"),
            (std::vector<char32_t>{0}));  // overlong accepted, like llama.cpp
  EXPECT_EQ(decode_lenient("\xF4\x90\x80\x80").front(), 0xFFFDu);  // above U+10FFFF
  EXPECT_TRUE(decode_lenient("").empty());
}

TEST(Unicode, StrictDecode) {
  EXPECT_EQ(decode_strict("\xF0\x9F\x98\x80", 0).codepoint, 0x1F600u);
  EXPECT_EQ(decode_strict("\xF0\x9F\x98", 0).status, Utf8Status::kIncomplete);
  EXPECT_EQ(decode_strict("\xF0\x9F"
                          "a",
                          0)
                .status,
            Utf8Status::kInvalid);
  EXPECT_EQ(decode_strict("\xF0\x9F"
                          "a",
                          0)
                .length,
            2u);
  EXPECT_EQ(decode_strict("\xC0\x80", 0).status, Utf8Status::kInvalid);
  EXPECT_EQ(decode_strict("\xED\xA0\x80", 0).status, Utf8Status::kInvalid);  // surrogate
  EXPECT_EQ(decode_strict("\x80", 0).status, Utf8Status::kInvalid);
  EXPECT_TRUE(is_valid_utf8("héllo 中 😀"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));
  EXPECT_EQ(sanitize_utf8("a\xFF"
                          "b\xE2\x82"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(Unicode, EncodeRoundTrip) {
  for (const uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(s, cp);
    EXPECT_EQ(decode_lenient(s), std::vector<char32_t>{static_cast<char32_t>(cp)});
  }
  std::string s;
  append_utf8(s, 0x110000);
  EXPECT_EQ(s, "\xEF\xBF\xBD");
}

}  // namespace troupe::model::unicode
