// Response shapes, SSE framing, batch parsing and the metrics text: the pure codecs.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <string>
#include <vector>

#include "net/batch_codec.hpp"
#include "net/metrics.hpp"
#include "net/openai_response.hpp"

namespace troupe::net {
namespace {

simdjson::dom::element parse(simdjson::dom::parser& parser, const std::string& json) {
  simdjson::dom::element root;
  EXPECT_EQ(parser.parse(json).get(root), simdjson::SUCCESS) << json;
  return root;
}

// A JSON number as double (whole numbers parse as integers).
double number(simdjson::dom::element e) {
  return e.is_int64() ? static_cast<double>(int64_t(e)) : double(e);
}

std::string token_text(int32_t id) { return "t" + std::to_string(id); }

TEST(Sse, FramesEventsAndDone) {
  EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  EXPECT_TRUE(make_response_id(ApiKind::kChat).starts_with("chatcmpl-"));
  EXPECT_TRUE(make_response_id(ApiKind::kCompletion).starts_with("cmpl-"));
}

TEST(OpenAiResponse, ChatChunksAndCompletion) {
  simdjson::dom::parser parser;
  const ResponseIdentity id{ApiKind::kChat, "chatcmpl-1", 123, "M"};
  const std::vector<engine::TokenInfo> tokens{{5, "Hi", -0.25f, {{5, -0.25f}, {6, -2.0f}}}};
  const std::string first =
      chunk_json(id, {"Hi", tokens, LogprobsOutput::kText, 0}, true, std::nullopt, token_text);
  auto root = parse(parser, first);
  EXPECT_EQ(std::string_view(root["object"]), "chat.completion.chunk");
  EXPECT_EQ(std::string_view(root["choices"].at(0)["delta"]["role"]), "assistant");
  EXPECT_EQ(std::string_view(root["choices"].at(0)["delta"]["content"]), "Hi");
  EXPECT_TRUE(root["choices"].at(0)["finish_reason"].is_null());
  auto lp = root["choices"].at(0)["logprobs"]["content"].at(0);
  EXPECT_EQ(std::string_view(lp["token"]), "Hi");
  EXPECT_EQ(number(lp["logprob"]), -0.25);
  EXPECT_EQ(int64_t(lp["bytes"].at(0)), 'H');
  EXPECT_EQ(std::string_view(lp["top_logprobs"].at(1)["token"]), "t6");

  const std::string last = chunk_json(id, {}, false, "stop", token_text);
  root = parse(parser, last);
  EXPECT_EQ(std::string_view(root["choices"].at(0)["finish_reason"]), "stop");
  EXPECT_TRUE(root["choices"].at(0)["logprobs"].is_null());

  root = parse(parser, usage_chunk_json(id, {10, 3, 4}));
  EXPECT_EQ(simdjson::dom::array(root["choices"]).size(), 0u);
  EXPECT_EQ(int64_t(root["usage"]["total_tokens"]), 13);
  EXPECT_EQ(int64_t(root["usage"]["prompt_tokens_details"]["cached_tokens"]), 4);

  engine::Completion done;
  done.finish_reason = "length";
  done.usage = {10, 2, 0};
  root = parse(parser,
               completion_json(id, {"Hi there", {}, LogprobsOutput::kNone, 0}, done, token_text));
  EXPECT_EQ(std::string_view(root["object"]), "chat.completion");
  EXPECT_EQ(std::string_view(root["choices"].at(0)["message"]["content"]), "Hi there");
  EXPECT_EQ(std::string_view(root["choices"].at(0)["finish_reason"]), "length");
  EXPECT_EQ(int64_t(root["usage"]["completion_tokens"]), 2);
  EXPECT_EQ(int64_t(root["created"]), 123);
}

TEST(OpenAiResponse, TextCompletionWithLogprobs) {
  simdjson::dom::parser parser;
  const ResponseIdentity id{ApiKind::kCompletion, "cmpl-1", 1, "M"};
  const std::vector<engine::TokenInfo> tokens{{1, "ab", -1.0f, {{1, -1.0f}}},
                                              {2, "c", -2.0f, {{2, -2.0f}}}};
  engine::Completion done;
  done.finish_reason = "stop";
  const std::string whole =
      completion_json(id, {"abc", tokens, LogprobsOutput::kText, 0}, done, token_text);
  parse(parser, whole);
  EXPECT_NE(whole.find(R"("object":"text_completion")"), std::string::npos);
  EXPECT_NE(whole.find(R"("text":"abc","logprobs":{"tokens":["ab","c"],"token_logprobs":[-1,-2],)"
                       R"("top_logprobs":[{"t1":-1},{"t2":-2}],"text_offset":[0,2]})"),
            std::string::npos) << whole;
  const std::string chunk =
      chunk_json(id, {"c", tokens, LogprobsOutput::kNone, 5}, false, std::nullopt, token_text);
  parse(parser, chunk);
  EXPECT_NE(chunk.find(R"("text":"c","logprobs":null)"), std::string::npos) << chunk;
  const std::string with_offset =
      chunk_json(id, {"c", std::span(tokens).subspan(1), LogprobsOutput::kText, 5}, false,
                 std::nullopt, token_text);
  EXPECT_NE(with_offset.find(R"("text_offset":[5])"), std::string::npos) << with_offset;
}

// Issue 37: echo puts the prompt first in the text and the logprobs (its first token's null);
// vLLM's prompt_logprobs list names each scored token, its rank and the alternatives.
TEST(OpenAiResponse, EchoedPromptComesFirstWithANullFirstLogprob) {
  simdjson::dom::parser parser;
  const ResponseIdentity id{ApiKind::kCompletion, "cmpl-1", 1, "M"};
  engine::TokenDelta delta;
  delta.text = "c";
  delta.tokens = {{3, "c", -0.5f, {{3, -0.5f}}}};
  engine::PromptEcho prompt;
  prompt.text = "ab";
  prompt.scored = true;
  prompt.tokens = {{1, "a", 0.0f, {}, 0, false}, {2, "b", -2.0f, {{7, -1.0f}}, 3}};
  delta.prompt = prompt;
  CollectedChoices collected(1, LogprobsOutput::kText, model::ToolCallFormat::kNone,
                             EchoOptions{.echo = true, .top_logprobs = 1, .prompt_logprobs = 1});
  collected.add(delta);
  engine::Completion done;
  done.finish_reason = "length";
  const std::string whole = collected.body_json(id, done, token_text);
  parse(parser, whole);
  EXPECT_NE(whole.find(R"("text":"abc","logprobs":{"tokens":["a","b","c"],)"
                       R"("token_logprobs":[null,-2,-0.5],"top_logprobs":[null,{"t7":-1},{"t3":-0.5}],)"
                       R"("text_offset":[0,1,2]})"),
            std::string::npos)
      << whole;
  EXPECT_NE(whole.find(R"("prompt_logprobs":[null,{"2":{"logprob":-2,"rank":3,"decoded_token":"b"},)"
                       R"("7":{"logprob":-1,"rank":1,"decoded_token":"t7"}}])"),
            std::string::npos)
      << whole;
  // A stream sends the prompt as its own first chunk.
  const std::optional<std::string> chunk =
      prompt_chunk_json(id, prompt, 0, EchoOptions{.echo = true, .top_logprobs = 1},
                        LogprobsOutput::kText, token_text);
  ASSERT_TRUE(chunk.has_value());
  parse(parser, *chunk);
  EXPECT_NE(chunk->find(R"("text":"ab","logprobs":{"tokens":["a","b"],"token_logprobs":[null,-2])"),
            std::string::npos)
      << *chunk;
  EXPECT_FALSE(prompt_chunk_json(id, prompt, 0, EchoOptions{}, LogprobsOutput::kText, token_text));
  // Echo's alternatives are its `logprobs` many, whatever prompt_logprobs asked of the engine.
  const std::optional<std::string> narrow = prompt_chunk_json(
      id, prompt, 0, EchoOptions{.echo = true, .top_logprobs = 0, .prompt_logprobs = 1},
      LogprobsOutput::kText, token_text);
  EXPECT_NE(narrow->find(R"("top_logprobs":[null,{}])"), std::string::npos) << *narrow;
}

// Issue 14: distinct tokens holding parts of UTF-8 characters all became U+FFFD, so one
// position's top_logprobs object repeated a key (a client keeps one entry and loses the rest).
TEST(OpenAiResponse, CompletionTopLogprobsKeysAreUniqueForByteTokens) {
  const auto byte_text = [](int32_t id) -> std::string {
    switch (id) {
      case 1: return "\xE2";        // the first byte of a 3-byte character
      case 2: return "\xE3";        // ... of another
      case 3: return "\xE2\x80";    // two bytes of one
      case 4: return "\xC3\xA9";    // a whole character: itself
      case 5: return "";            // special tokens render empty ...
      case 6: return "";            // ... so two of them share a text
      default: return "x";
    }
  };
  const ResponseIdentity id{ApiKind::kCompletion, "cmpl-1", 1, "M"};
  const std::vector<engine::TokenInfo> tokens{
      {1, "\xE2", -0.1f, {{1, -0.1f}, {2, -0.2f}, {3, -0.3f}, {4, -0.4f}, {5, -0.5f}, {6, -0.6f}}}};
  engine::Completion done;
  done.finish_reason = "length";
  const std::string whole =
      completion_json(id, {"", tokens, LogprobsOutput::kText, 0}, done, byte_text);
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parse(parser, whole);
  const simdjson::dom::element logprobs = root["choices"].at(0)["logprobs"];
  std::vector<std::string> keys;
  for (const auto field : simdjson::dom::object(logprobs["top_logprobs"].at(0))) {
    keys.emplace_back(field.key);
  }
  ASSERT_EQ(keys.size(), 6u) << whole;
  EXPECT_EQ(keys[0], "bytes:\\xe2");
  EXPECT_EQ(keys[1], "bytes:\\xe3");
  EXPECT_EQ(keys[2], "bytes:\\xe2\\x80");
  EXPECT_EQ(keys[3], "\xC3\xA9");
  EXPECT_EQ(keys[4], "");
  EXPECT_EQ(keys[5], "token_id:6");
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << whole;
  EXPECT_EQ(std::string_view(logprobs["tokens"].at(0)), "bytes:\\xe2");
}

TEST(BatchCodec, ParsesJsonlWithBadItemsInOrder) {
  const OpenAiApiConfig config;
  const std::string body =
      R"({"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}]}})"
      "\n\n"
      R"({"custom_id":"b","method":"POST","url":"/v1/completions","body":{"prompt":"x","temperature":9}})"
      "\n"
      R"(not json)"
      "\n"
      R"({"custom_id":"d","url":"/v1/moderations","body":{}})"
      "\r\n"
      R"({"url":"/v1/completions","body":{"prompt":"x"}})"
      "\n"
      R"({"custom_id":"f","url":"/v1/completions","body":{"prompt":"y","stream":true}})";
  const auto parsed = parse_batch(body, "application/jsonl", "M", config);
  ASSERT_TRUE(std::holds_alternative<ParsedBatch>(parsed));
  const ParsedBatch& batch = std::get<ParsedBatch>(parsed);
  EXPECT_TRUE(batch.jsonl);
  ASSERT_EQ(batch.items.size(), 6u);
  EXPECT_TRUE(batch.items[0].request);
  EXPECT_EQ(batch.items[1].response_error->param, "temperature");
  EXPECT_TRUE(batch.items[2].line_error);
  EXPECT_EQ(batch.items[3].response_error->param, "url");
  EXPECT_TRUE(batch.items[4].line_error);
  ASSERT_TRUE(batch.items[5].request);
  EXPECT_FALSE(batch.items[5].request->stream);

  simdjson::dom::parser parser;
  auto root = parse(parser, batch_failed_item_json(batch.items[1]));
  EXPECT_EQ(std::string_view(root["custom_id"]), "b");
  EXPECT_EQ(int64_t(root["response"]["status_code"]), 400);
  EXPECT_EQ(std::string_view(root["response"]["body"]["error"]["param"]), "temperature");
  root = parse(parser, batch_failed_item_json(batch.items[2]));
  EXPECT_TRUE(root["response"].is_null());
  EXPECT_EQ(std::string_view(root["error"]["code"]), "invalid_json");
  root = parse(parser, batch_result_json(batch.items[0], 200, "chatcmpl-x", R"({"ok":1})"));
  EXPECT_EQ(int64_t(root["response"]["body"]["ok"]), 1);
  EXPECT_TRUE(root["error"].is_null());
}

// Issue 37: /v1/embeddings items are embeddings requests, checked like the route checks them.
TEST(BatchCodec, EmbeddingItems) {
  const OpenAiApiConfig config;
  const std::string body =
      R"({"custom_id":"e","url":"/v1/embeddings","body":{"input":["a","b"],"encoding_format":"base64"}})"
      "\n"
      R"({"custom_id":"f","url":"/v1/embeddings","body":{"input":""}})"
      "\n"
      R"({"custom_id":"g","url":"/v1/embeddings","body":{"input":"a","truncate_prompt_tokens":3}})";
  const auto parsed = parse_batch(body, "application/jsonl", "M", config);
  ASSERT_TRUE(std::holds_alternative<ParsedBatch>(parsed));
  const ParsedBatch& batch = std::get<ParsedBatch>(parsed);
  ASSERT_EQ(batch.items.size(), 3u);
  ASSERT_TRUE(batch.items[0].embedding);
  EXPECT_FALSE(batch.items[0].request);
  EXPECT_EQ(batch.items[0].embedding->generate.embedding->inputs.size(), 2u);
  EXPECT_EQ(batch.items[0].embedding->generate.origin, engine::RequestOrigin::kBatch);
  EXPECT_EQ(batch.items[0].embedding->generate.client_label, "e");
  EXPECT_EQ(batch.items[0].embedding->output.encoding, EmbeddingEncoding::kBase64);
  EXPECT_EQ(batch.items[1].response_error->param, "input");
  EXPECT_EQ(batch.items[2].response_error->param, "truncate_prompt_tokens");
}

TEST(BatchCodec, JsonFormLimitsAndEmpty) {
  OpenAiApiConfig config;
  config.max_batch_items = 2;
  const auto json = parse_batch(
      R"({"requests":[{"custom_id":"a","url":"/v1/completions","body":{"prompt":"x"}}]})",
      "application/json", "M", config);
  ASSERT_TRUE(std::holds_alternative<ParsedBatch>(json));
  EXPECT_FALSE(std::get<ParsedBatch>(json).jsonl);
  const std::string line = R"({"custom_id":"a","url":"/v1/completions","body":{"prompt":"x"}})";
  const auto big = parse_batch(line + "\n" + line + "\n" + line, "application/jsonl", "M", config);
  ASSERT_TRUE(std::holds_alternative<ApiError>(big));
  EXPECT_EQ(std::get<ApiError>(big).status, 413);
  const auto empty = parse_batch("\n\n", "application/jsonl", "M", config);
  EXPECT_EQ(std::get<ApiError>(empty).status, 400);
  const auto broken = parse_batch(R"({"requests":[)", "application/json", "M", config);
  EXPECT_EQ(std::get<ApiError>(broken).status, 400);
}

// Issue 21: speculative decoding's counters under vLLM's names (its prometheus_client
// exposition: counter samples end in _total).
TEST(Metrics, SpeculativeDecodingCounters) {
  engine::EngineStats stats;
  stats.speculative.num_drafts = 3;
  stats.speculative.num_draft_tokens = 12;
  stats.speculative.num_accepted_tokens = 9;
  const std::string text = render_metrics(stats, ServingMetrics{}, "M");
  for (const char* needle : {"# TYPE vllm:spec_decode_num_drafts_total counter\n",
                             "vllm:spec_decode_num_drafts_total{model_name=\"M\"} 3\n",
                             "vllm:spec_decode_num_draft_tokens_total{model_name=\"M\"} 12\n",
                             "vllm:spec_decode_num_accepted_tokens_total{model_name=\"M\"} 9\n"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle;
  }
}

TEST(Metrics, HistogramAndExposition) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  const auto s = h.snapshot();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s.count, 3u);
  EXPECT_DOUBLE_EQ(s.sum, 5.55);

  PrometheusText p(PrometheusText::Labels{{"model_name", "M\"x"}});
  p.gauge("a:b", "help", 2);
  p.histogram("h", "hist", s);
  EXPECT_EQ(p.str(),
            "# HELP a:b help\n# TYPE a:b gauge\na:b{model_name=\"M\\\"x\"} 2\n"
            "# HELP h hist\n# TYPE h histogram\n"
            "h_bucket{model_name=\"M\\\"x\",le=\"0.1\"} 1\n"
            "h_bucket{model_name=\"M\\\"x\",le=\"1\"} 2\n"
            "h_bucket{model_name=\"M\\\"x\",le=\"+Inf\"} 3\n"
            "h_sum{model_name=\"M\\\"x\"} 5.55\nh_count{model_name=\"M\\\"x\"} 3\n");

  engine::EngineStats stats;
  stats.num_running = 3;
  stats.num_waiting = 4;
  stats.kv_usage_ratio = 0.25;
  stats.kv_blocks_used = 7;
  ServingMetrics serving;
  engine::Completion done;
  done.finish_reason = "stop";
  done.usage.completion_tokens = 2;
  done.timings.time_to_first_token_ms = 30;
  serving.observe_latencies(done);
  serving.count_finished(done.finish_reason);
  const std::string text = render_metrics(stats, serving, "M");
  for (const char* needle :
       {"vllm:num_requests_running{model_name=\"M\"} 3\n",
        "vllm:num_requests_waiting{model_name=\"M\"} 4\n",
        "vllm:kv_cache_usage_perc{model_name=\"M\"} 0.25\n",
        "troupe:kv_blocks_used{model_name=\"M\"} 7\n",
        "troupe:request_success_total{model_name=\"M\",finished_reason=\"stop\"} 1\n",
        "troupe:time_to_first_token_seconds_bucket{model_name=\"M\",le=\"0.04\"} 1\n",
        "# TYPE troupe:inter_token_latency_seconds histogram\n",
        "# TYPE troupe:e2e_request_latency_seconds histogram\n",
        "# TYPE troupe:request_queue_time_seconds histogram\n",
        "troupe:step_time_seconds{model_name=\"M\",quantile=\"0.99\"} 0\n"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle;
  }
  EXPECT_EQ(text.find("troupe:http_connections_open"), std::string::npos);  // no listener given

  ConnectionMetrics connections;
  connections.num_open = 3;
  connections.num_refused = 2;
  connections.num_accept_failures = 7;
  const std::string with_connections = render_metrics(stats, serving, "M", &connections);
  for (const char* needle : {"troupe:http_connections_open{model_name=\"M\"} 3\n",
                             "troupe:http_connections_refused_total{model_name=\"M\"} 2\n",
                             "troupe:http_accept_failures_total{model_name=\"M\"} 7\n"}) {
    EXPECT_NE(with_connections.find(needle), std::string::npos) << needle;
  }
}

}  // namespace
}  // namespace troupe::net
