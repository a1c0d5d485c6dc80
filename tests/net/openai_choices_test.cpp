// `n` > 1 on the OpenAI routes (net/openai_sink.cpp) against a FakeEngine, through the Router
// (no sockets): one engine request for all choices, every choice in the body with the summed
// usage, SSE indices and per-choice finish chunks with one [DONE], one cancel when the client
// goes, one answer for an error. (The engine side — seeds, admission, sharing — is tested in
// tests/actors/output_processor_test.cpp and engine_test.cpp.)
#include "net/openai_sink.hpp"

#include <simdjson.h>

#include <set>

#include <gtest/gtest.h>

#include "net/openai_routes.hpp"
#include "tests/net/fake_engine.hpp"

namespace troupe::net {
namespace {

using testing::FakeEngine;

class OpenAiMultiChoiceTest : public ::testing::Test {
 protected:
  OpenAiMultiChoiceTest() {
    state_.model.id = "M";
    state_.model.context_length = 64;
    add_openai_routes(router_, fake_, state_, config_);
  }
  static HttpRequest make_post(std::string path, std::string body) {
    HttpRequest r;
    r.method = "POST";
    r.target = std::move(path);
    r.body = std::move(body);
    r.headers.emplace_back("Content-Type", "application/json");
    return r;
  }
  HttpResponse post(std::string path, std::string body) {
    return router_.handle(make_post(std::move(path), std::move(body)));
  }
  static size_t count(std::string_view text, std::string_view needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
      ++n;
    }
    return n;
  }

  FakeEngine fake_;
  ServerState state_;
  OpenAiApiConfig config_;
  Router router_;
};

constexpr std::string_view kChat = R"({"model":"M","messages":[{"role":"user","content":"hi"}])";

TEST_F(OpenAiMultiChoiceTest, NonStreamedChatHasEveryChoiceAndSummedUsage) {
  const HttpResponse r = post("/v1/chat/completions", std::string(kChat) + R"(,"n":3})");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parser.parse(simdjson::padded_string(r.body));
  const simdjson::dom::array choices = root["choices"];
  ASSERT_EQ(choices.size(), 3u) << r.body;
  int64_t expected_index = 0;
  for (simdjson::dom::element choice : choices) {
    EXPECT_EQ(int64_t(choice["index"]), expected_index++);
    EXPECT_EQ(std::string_view(choice["message"]["content"]), "Hello world");
    EXPECT_EQ(std::string_view(choice["finish_reason"]), "stop");
  }
  EXPECT_EQ(int64_t(root["usage"]["prompt_tokens"]), 5);          // counted once
  EXPECT_EQ(int64_t(root["usage"]["completion_tokens"]), 3 * 3);  // 3 tokens per choice
  EXPECT_EQ(int64_t(root["usage"]["total_tokens"]), 5 + 9);
  ASSERT_EQ(fake_.submitted().size(), 1u);  // one engine request for all choices
  EXPECT_EQ(fake_.submitted()[0].n, 3);
}

TEST_F(OpenAiMultiChoiceTest, CompletionChoicesCarryTheirOwnLogprobs) {
  const HttpResponse r = post("/v1/completions", R"({"prompt":"x","n":2,"logprobs":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(count(r.body, R"("text":"Hello world")"), 2u) << r.body;
  EXPECT_EQ(count(r.body, R"("text_offset":[0,3,5])"), 2u) << r.body;
  EXPECT_NE(r.body.find(R"("index":1)"), std::string::npos);
}

TEST_F(OpenAiMultiChoiceTest, TheSeedAndNReachTheEngine) {
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"x","n":3,"seed":7})").status, 200);
  const auto submitted = fake_.submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].n, 3);
  EXPECT_EQ(submitted[0].sampling.seed, 7u);  // the engine samples choice i with seed + i
}

TEST_F(OpenAiMultiChoiceTest, WithoutSeedEachRequestStartsFromARandomSeed) {
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post("/v1/completions", R"({"prompt":"x","n":2})").status, 200);
  std::set<uint64_t> seeds;
  for (const auto& request : fake_.submitted()) seeds.insert(request.sampling.seed);
  EXPECT_EQ(seeds.size(), 4u);
}

TEST_F(OpenAiMultiChoiceTest, StreamInterleavesIndicesAndEndsWithOneDone) {
  const HttpResponse r =
      post("/v1/chat/completions",
           std::string(kChat) + R"(,"n":2,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/event-stream");
  EXPECT_EQ(count(r.body, "data: [DONE]"), 1u);
  EXPECT_TRUE(r.body.ends_with("data: [DONE]\n\n"));
  // Each choice: 3 deltas (the first with the role) and its own finish chunk.
  EXPECT_EQ(count(r.body, R"("index":0)"), 4u) << r.body;
  EXPECT_EQ(count(r.body, R"("index":1)"), 4u) << r.body;
  EXPECT_EQ(count(r.body, R"("role":"assistant")"), 2u);
  EXPECT_EQ(count(r.body, R"("finish_reason":"stop")"), 2u);
  // The fake engine steps both requests together: index 1 appears before index 0 finished.
  EXPECT_LT(r.body.find(R"("index":1)"), r.body.find(R"("finish_reason":"stop")"));
  const size_t usage = r.body.find(R"("choices":[],"usage")");
  ASSERT_NE(usage, std::string::npos);
  EXPECT_GT(usage, r.body.rfind(R"("finish_reason":"stop")"));
  EXPECT_NE(r.body.find(R"("prompt_tokens":5,"completion_tokens":6)"), std::string::npos) << r.body;
}

TEST_F(OpenAiMultiChoiceTest, NOutOfRangeIsA400NamingN) {
  for (const std::string n : {"0", "17", "-1", "2.5", "\"2\""}) {
    const HttpResponse r = post("/v1/completions", R"({"prompt":"x","n":)" + n + "}");
    EXPECT_EQ(r.status, 400) << n;
    EXPECT_NE(r.body.find(R"("param":"n")"), std::string::npos) << n << r.body;
  }
  EXPECT_TRUE(fake_.submitted().empty());
}

TEST_F(OpenAiMultiChoiceTest, BatchItemsTakeNChoices) {
  const HttpResponse batch = post(
      "/v1/batch",
      R"({"requests":[{"custom_id":"a","url":"/v1/completions","body":{"prompt":"x","n":2}}]})");
  ASSERT_EQ(batch.status, 200) << batch.body;
  EXPECT_EQ(count(batch.body, R"("text":"Hello world")"), 2u) << batch.body;
  EXPECT_EQ(count(batch.body, R"("index":1)"), 1u) << batch.body;
  EXPECT_NE(batch.body.find(R"("completion_tokens":6)"), std::string::npos) << batch.body;
  ASSERT_EQ(fake_.submitted().size(), 1u);
  EXPECT_EQ(fake_.submitted()[0].n, 2);
}

TEST_F(OpenAiMultiChoiceTest, ClientGoneCancelsEveryChoice) {
  fake_.script.endless = true;
  for (const bool stream : {false, true}) {
    const size_t cancelled_before = fake_.num_cancelled();
    auto out = std::make_shared<ResponseStream>();
    router_.dispatch(make_post("/v1/completions", stream ? R"({"prompt":"x","n":3,"stream":true})"
                                                         : R"({"prompt":"x","n":3})"),
                     out);
    ASSERT_TRUE(FakeEngine::eventually([&] { return fake_.num_active() == 1; }));
    out->mark_client_gone();
    EXPECT_TRUE(
        FakeEngine::eventually([&] { return fake_.num_cancelled() == cancelled_before + 1; }));
    EXPECT_TRUE(FakeEngine::eventually([&] { return fake_.num_active() == 0; }));
  }
}

TEST_F(OpenAiMultiChoiceTest, AnErrorAnswersOnceForAllChoices) {
  fake_.script.error = engine::RequestError{engine::ErrorCode::kQueueFull, "queue full", ""};
  const HttpResponse r = post("/v1/chat/completions", std::string(kChat) + R"(,"n":3})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(count(r.body, "queue_full"), 1u) << r.body;
  EXPECT_TRUE(FakeEngine::eventually([&] { return fake_.num_active() == 0; }));
}

}  // namespace
}  // namespace troupe::net
