// PromptBuilder on the default model's tokenizer and chat template: an over-long prompt is
// refused cheaply (issue 13) — by its byte length before any tokenizing, else as soon as
// tokenizing passes the context — and prompts that fit are built exactly as before.
#include "actors/ingress/prompt_builder.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <variant>

#include <fmt/format.h>

#include "engine_test_support.hpp"
#include "model/gguf.hpp"

namespace troupe::ingress {
namespace {

using engine::ErrorCode;
using engine::GenerateRequest;
using engine::RequestError;

PromptBuilder builder_for(int32_t max_model_len) {
  const model::GgufFile file = model::GgufFile::open(engine::testing::default_model_path());
  return PromptBuilder(model::Tokenizer::from_gguf(file), model::ChatTemplate::for_model(file),
                       PromptLimits{.max_model_len = max_model_len, .default_max_tokens = 16});
}

GenerateRequest text_request(std::string text) {
  GenerateRequest request;
  request.prompt_text = std::move(text);
  request.stop.max_tokens = 0;  // the default (16 here)
  return request;
}

std::string words(size_t count) {
  std::string text;
  for (size_t i = 0; i < count; ++i) text += "word" + std::to_string(i % 1000) + " ";
  return text;
}

TEST(PromptBuilder, APromptThatFitsIsTheWholeEncoding) {
  TROUPE_REQUIRE_MODEL();
  const PromptBuilder builder = builder_for(8192);
  const std::string text = words(200);
  auto built = builder.build(text_request(text));
  ASSERT_TRUE(std::holds_alternative<BuiltPrompt>(built));
  const auto expected = builder.tokenizer().encode(text, true);
  const auto& ids = std::get<BuiltPrompt>(built).token_ids;
  const size_t bos = builder.tokenizer().add_bos() ? 1 : 0;
  ASSERT_EQ(ids.size(), expected.size() + bos);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), ids.begin() + static_cast<ptrdiff_t>(bos)));
  EXPECT_EQ(std::get<BuiltPrompt>(built).max_tokens, 16);
}

TEST(PromptBuilder, ABytesLongerThanTheContextCanHoldAreRefusedBeforeTokenizing) {
  TROUPE_REQUIRE_MODEL();
  const PromptBuilder builder = builder_for(256);
  const size_t max_bytes = builder.tokenizer().max_token_bytes();
  ASSERT_GT(max_bytes, 4u);
  // max_model_len tokens can hold at most 256 * max_bytes bytes: one byte more cannot fit.
  auto built = builder.build(text_request(std::string(256 * max_bytes, 'a')));
  ASSERT_TRUE(std::holds_alternative<RequestError>(built));
  const RequestError& error = std::get<RequestError>(built);
  EXPECT_EQ(error.code, ErrorCode::kPromptTooLong);
  EXPECT_NE(error.message.find("at least 256 tokens"), std::string::npos) << error.message;
  EXPECT_EQ(error.param, "prompt");
  // The same for chat: the contents alone already cannot fit.
  GenerateRequest chat;
  chat.messages = {{"system", std::string(128 * max_bytes, 'b')}, {"user", std::string(128 * max_bytes, 'c')}};
  built = builder.build(chat);
  ASSERT_TRUE(std::holds_alternative<RequestError>(built));
  EXPECT_EQ(std::get<RequestError>(built).param, "messages");
  EXPECT_NE(std::get<RequestError>(built).message.find("at least"), std::string::npos);
}

TEST(PromptBuilder, TokenizingStopsOnceThePromptPassesTheContext) {
  TROUPE_REQUIRE_MODEL();
  const PromptBuilder builder = builder_for(64);
  const std::string text = words(400);  // ~1000 tokens, few enough bytes to need tokenizing
  ASSERT_LT(text.size() / builder.tokenizer().max_token_bytes(), 64u);
  for (const bool chat : {false, true}) {
    GenerateRequest request;
    if (chat) {
      request.messages = {{"user", text}};
    } else {
      request.prompt_text = text;
    }
    auto built = builder.build(request);
    ASSERT_TRUE(std::holds_alternative<RequestError>(built));
    const RequestError& error = std::get<RequestError>(built);
    EXPECT_EQ(error.code, ErrorCode::kPromptTooLong);
    EXPECT_NE(error.message.find("more than 64 tokens"), std::string::npos) << error.message;
  }
}

// Issue 14: max_tokens = INT32_MAX overflowed the int32 sum in the refusal (the 400 said
// "-2147483648 tokens"; signed overflow is undefined behaviour besides).
TEST(PromptBuilder, AHugeMaxTokensIsRefusedWithTheTrueTotal) {
  TROUPE_REQUIRE_MODEL();
  const PromptBuilder builder = builder_for(8192);
  GenerateRequest request = text_request("Hello there");
  request.stop.max_tokens = std::numeric_limits<int32_t>::max();
  const auto built = builder.build(request);
  ASSERT_TRUE(std::holds_alternative<RequestError>(built));
  const RequestError& error = std::get<RequestError>(built);
  EXPECT_EQ(error.code, ErrorCode::kPromptTooLong);
  EXPECT_EQ(error.param, "max_tokens");
  const size_t bos = builder.tokenizer().add_bos() ? 1 : 0;
  const int64_t prompt_tokens =
      static_cast<int64_t>(builder.tokenizer().encode("Hello there", true).size() + bos);
  const int64_t total = prompt_tokens + std::numeric_limits<int32_t>::max();
  EXPECT_NE(error.message.find(fmt::format("you requested {} tokens", total)), std::string::npos)
      << error.message;
  EXPECT_EQ(error.message.find('-'), std::string::npos) << error.message;
}

}  // namespace
}  // namespace troupe::ingress
