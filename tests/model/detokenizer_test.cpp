// IncrementalDetokenizer: never emits half a UTF-8 character, whatever the token boundaries.
#include "model/detokenizer.hpp"

#include <filesystem>

#include <gtest/gtest.h>

#include "tests/model/smollm2_tokenizer.hpp"

#include "model/unicode.hpp"

namespace troupe::model {

namespace {

const Tokenizer* tokenizer_or_null() {
  return smollm2_tokenizer();
}

}  // namespace

TEST(IncrementalDetokenizer, EmitsOnlyCompleteCharacters) {
  const Tokenizer* tok = tokenizer_or_null();
  if (tok == nullptr) GTEST_SKIP() << "model file not found at " << default_model_path();
  const std::vector<std::string> texts = {"😀😃😄 emoji",
                                          "👨‍👩‍👧‍👦 family",
                                          "你好，世界！我爱自然语言处理。",
                                          "𠜎𠜱𠝹𠱓",
                                          "café 🇫🇷 Ελληνικά",
                                          "mixed 中文 and 🚀 rockets 🌍!",
                                          "日本語のテキストです。"};
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok->encode(text, false);
    IncrementalDetokenizer detok(*tok);
    std::string streamed;
    bool held_back_somewhere = false;
    for (const int32_t id : ids) {
      const std::string delta = detok.push(id);
      EXPECT_TRUE(unicode::is_valid_utf8(delta)) << ::testing::PrintToString(delta);
      held_back_somewhere |= detok.num_pending_bytes() > 0;
      streamed += delta;
    }
    EXPECT_EQ(detok.num_pending_bytes(), 0u);
    streamed += detok.flush();
    EXPECT_EQ(streamed, text);
    // Byte-level BPE splits these characters across tokens, so something was held back.
    if (ids.size() > 1 && text.find("𠜎") != std::string::npos) {
      EXPECT_TRUE(held_back_somewhere);
    }
  }
}

TEST(IncrementalDetokenizer, ByteByByte) {
  const Tokenizer* tok = tokenizer_or_null();
  if (tok == nullptr) GTEST_SKIP() << "model file not found at " << default_model_path();
  IncrementalDetokenizer detok(*tok);
  const std::string emoji = "\xF0\x9F\x98\x80";
  EXPECT_EQ(detok.push_bytes(emoji.substr(0, 1)), "");
  EXPECT_EQ(detok.push_bytes(emoji.substr(1, 2)), "");
  EXPECT_EQ(detok.num_pending_bytes(), 3u);
  EXPECT_EQ(detok.push_bytes(emoji.substr(3) + "a"), emoji + "a");
}

TEST(IncrementalDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer* tok = tokenizer_or_null();
  if (tok == nullptr) GTEST_SKIP() << "model file not found at " << default_model_path();
  IncrementalDetokenizer detok(*tok);
  // A stray continuation byte can never become valid: replaced at once.
  EXPECT_EQ(detok.push_bytes("a\x80"
                             "b"),
            "a\xEF\xBF\xBD"
            "b");
  // An incomplete sequence broken by ASCII: replaced when the ASCII arrives.
  EXPECT_EQ(detok.push_bytes("\xE4\xBD"), "");
  EXPECT_EQ(detok.push_bytes("x"),
            "\xEF\xBF\xBD"
            "x");
  // Held at the end of the stream: flushed as U+FFFD.
  EXPECT_EQ(detok.push_bytes("\xF0\x9F\x98"), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(detok.flush(), "");
}

TEST(IncrementalDetokenizer, ControlTokensHiddenUnlessRendered) {
  const Tokenizer* tok = tokenizer_or_null();
  if (tok == nullptr) GTEST_SKIP() << "model file not found at " << default_model_path();
  IncrementalDetokenizer plain(*tok);
  EXPECT_EQ(plain.push(2), "");
  IncrementalDetokenizer special(*tok, /*render_special=*/true);
  EXPECT_EQ(special.push(2), "<|im_end|>");
}

}  // namespace troupe::model
