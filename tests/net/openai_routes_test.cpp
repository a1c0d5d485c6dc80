// The OpenAI handlers against a FakeEngine, through the Router (no sockets).
#include "net/openai_routes.hpp"

#include <gtest/gtest.h>

#include "tests/net/fake_engine.hpp"

namespace troupe::net {
namespace {

using testing::FakeEngine;

class OpenAiRoutesTest : public ::testing::Test {
 protected:
  OpenAiRoutesTest() {
    state_.model.id = "M";
    state_.model.context_length = 64;
    add_openai_routes(router_, engine_, state_, config_);
  }
  HttpResponse post(std::string path, std::string body, std::string content_type = "application/json") {
    HttpRequest r;
    r.method = "POST";
    r.target = std::move(path);
    r.body = std::move(body);
    r.headers.emplace_back("Content-Type", std::move(content_type));
    return router_.handle(r);
  }
  static std::string header(const HttpResponse& r, std::string_view name) {
    for (const auto& [key, value] : r.headers) {
      if (key == name) return value;
    }
    return {};
  }

  FakeEngine engine_;
  ServerState state_;
  OpenAiApiConfig config_;
  Router router_;
};

constexpr std::string_view kChat = R"({"model":"M","messages":[{"role":"user","content":"hi"}])";

TEST_F(OpenAiRoutesTest, ChatWithoutStream) {
  const HttpResponse r = post("/v1/chat/completions", std::string(kChat) + "}");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("content":"Hello world")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("finish_reason":"stop")"), std::string::npos);
  ASSERT_EQ(engine_.submitted().size(), 1u);
  EXPECT_EQ(engine_.submitted()[0].messages[0].content, "hi");
}

TEST_F(OpenAiRoutesTest, ChatStreamIsSseWithUsageAndDone) {
  const HttpResponse r = post("/v1/chat/completions",
                              std::string(kChat) + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/event-stream");
  size_t events = 0;
  for (size_t at = r.body.find("data: "); at != std::string::npos; at = r.body.find("data: ", at + 1)) {
    ++events;
  }
  EXPECT_EQ(events, 6u) << r.body;  // 3 deltas, the finish chunk, usage, [DONE]
  EXPECT_TRUE(r.body.ends_with("data: [DONE]\n\n"));
  EXPECT_NE(r.body.find(R"("role":"assistant","content":"Hel")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("choices":[],"usage":{"prompt_tokens":5)"), std::string::npos);
}

TEST_F(OpenAiRoutesTest, CompletionWithLogprobs) {
  const HttpResponse r = post("/v1/completions", R"({"prompt":"x","logprobs":1})");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find(R"("text":"Hello world")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("text_offset":[0,3,5])"), std::string::npos) << r.body;
}

TEST_F(OpenAiRoutesTest, EngineErrorsBecomeStatuses) {
  engine_.script.error = engine::RequestError{engine::ErrorCode::kQueueFull, "queue full", ""};
  HttpResponse r = post("/v1/chat/completions", std::string(kChat) + "}");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(header(r, "Retry-After"), "1");
  engine_.script.error = engine::RequestError{engine::ErrorCode::kPromptTooLong,
                                              "prompt of 70 tokens exceeds the context of 64", ""};
  r = post("/v1/completions", R"({"prompt":"x","stream":true})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find(R"("param":"prompt")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("context_length_exceeded"), std::string::npos);
  engine_.script.error = engine::RequestError{engine::ErrorCode::kDraining, "draining", ""};
  EXPECT_EQ(post("/v1/completions", R"({"prompt":"x"})").status, 503);
}

TEST_F(OpenAiRoutesTest, BadRequestsNeverReachTheEngine) {
  EXPECT_EQ(post("/v1/chat/completions", "{oops").status, 400);
  EXPECT_EQ(post("/v1/chat/completions", R"({"model":"other","messages":[]})").status, 404);
  EXPECT_EQ(post("/v1/completions", R"({"prompt":"x","n":17})").status, 400);
  EXPECT_TRUE(engine_.submitted().empty());
}

TEST_F(OpenAiRoutesTest, BatchJsonlKeepsInputOrderWithBadItems) {
  std::string body;
  for (int i = 0; i < 20; ++i) {
    if (i % 5 == 3) {
      body += R"({"custom_id":"c)" + std::to_string(i) + R"(","url":"/v1/completions","body":{"prompt":"x","top_p":7}})";
    } else {
      body += R"({"custom_id":"c)" + std::to_string(i) + R"(","method":"POST","url":"/v1/chat/completions","body":)" +
              std::string(kChat) + "}}";
    }
    body += "\n";
  }
  const HttpResponse r = post("/v1/batch", body, "application/jsonl");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/jsonl");
  size_t at = 0;
  for (int i = 0; i < 20; ++i) {
    const size_t found = r.body.find(R"("custom_id":"c)" + std::to_string(i) + "\"", at);
    ASSERT_NE(found, std::string::npos) << i << "\n" << r.body;
    const size_t line_end = r.body.find('\n', found);
    const std::string line = r.body.substr(found, line_end - found);
    EXPECT_NE(line.find(i % 5 == 3 ? R"("status_code":400)" : R"("status_code":200)"),
              std::string::npos) << line;
    at = line_end;
  }
  EXPECT_EQ(engine_.submitted().size(), 16u);
  EXPECT_EQ(post("/v1/batch", R"({"requests":[{"custom_id":"a","url":"/v1/completions","body":{"prompt":"x"}}]})")
                .body.substr(0, 25),
            R"({"object":"list","data":[)");
}

TEST_F(OpenAiRoutesTest, TokenizeDetokenizeAndMetrics) {
  HttpResponse r = post("/tokenize", R"({"prompt":"ab c"})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find(R"("count":4)"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("max_model_len":64)"), std::string::npos);
  r = post("/detokenize", R"({"tokens":[32,33,94,34]})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"prompt":"AB C"})");
  EXPECT_EQ(post("/detokenize", R"({"tokens":[1000000]})").status, 400);
  EXPECT_EQ(post("/detokenize", R"({"tokens":"x"})").status, 400);
  EXPECT_EQ(post("/tokenize", R"({"prompt":3})").status, 400);
  EXPECT_EQ(post("/tokenize", R"({"content":3})").status, 400);
  EXPECT_EQ(post("/tokenize", R"({})").status, 400);
  const HttpResponse by_content = post("/tokenize", R"({"content":"ab c"})");  // llama.cpp's name
  EXPECT_EQ(by_content.status, 200);
  EXPECT_EQ(by_content.body, post("/tokenize", R"({"prompt":"ab c"})").body);
  HttpRequest get;
  get.method = "GET";
  get.target = "/metrics";
  r = router_.handle(get);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.content_type.starts_with("text/plain; version=0.0.4"));
  EXPECT_NE(r.body.find("vllm:num_requests_waiting{model_name=\"M\"} 0"), std::string::npos);
}

}  // namespace
}  // namespace troupe::net
