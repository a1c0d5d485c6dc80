// POST /v1/embeddings (net/openai_embeddings.cpp): the request codec, the output vectors against
// hand-computed values and llama.cpp's own normalization, the response body (float and base64),
// and the route through the Router against a synchronous fake engine.
#include "net/openai_embeddings.hpp"

#include <simdjson.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "net/disagg_codec.hpp"
#include "net/openai_routes.hpp"
#include "net/router.hpp"
#include "tests/net/test_tokenizer.hpp"

namespace troupe::net {
namespace {

const OpenAiApiConfig kConfig;

ParsedEmbedding parse(std::string_view body, const OpenAiApiConfig& config = kConfig) {
  return parse_embedding_request(body, "M", config);
}
ApiError error_of(const ParsedEmbedding& parsed) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed));
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}
EmbeddingRequest request_of(const ParsedEmbedding& parsed) {
  EXPECT_TRUE(std::holds_alternative<EmbeddingRequest>(parsed)) << error_of(parsed).message;
  return std::holds_alternative<EmbeddingRequest>(parsed) ? std::get<EmbeddingRequest>(parsed)
                                                          : EmbeddingRequest{};
}
const std::vector<engine::EmbeddingInput>& inputs_of(const EmbeddingRequest& r) {
  static const std::vector<engine::EmbeddingInput> kNone;
  return r.generate.embedding ? r.generate.embedding->inputs : kNone;
}
// The error's status and param, for one-line expectations.
std::pair<int, std::string> refusal(std::string_view body,
                                    const OpenAiApiConfig& config = kConfig) {
  const ApiError e = error_of(parse(body, config));
  return {e.status, e.param};
}
using Refusal = std::pair<int, std::string>;

// ---- the request -------------------------------------------------------------------------------

TEST(EmbeddingRequest, OneStringIsOneTextInputWithTheDefaults) {
  const EmbeddingRequest r = request_of(parse(R"({"input":"hello","model":"M","user":"u1"})"));
  ASSERT_TRUE(r.generate.embedding);
  ASSERT_EQ(inputs_of(r).size(), 1u);
  EXPECT_EQ(*inputs_of(r)[0].text, "hello");
  EXPECT_TRUE(inputs_of(r)[0].token_ids.empty());
  EXPECT_EQ(r.generate.n, 1);
  EXPECT_EQ(r.generate.origin, engine::RequestOrigin::kHttp);
  EXPECT_EQ(r.generate.kind(), engine::RequestKind::kEmbedding);
  EXPECT_EQ(r.generate.embedding->pooling, model::Pooling::kMean);
  EXPECT_EQ(r.generate.client_label, "u1");
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.model, "M");
  EXPECT_EQ(r.output.encoding, EmbeddingEncoding::kFloat);
  EXPECT_FALSE(r.output.dimensions);
  EXPECT_EQ(r.output.norm, kEmbeddingNormEuclidean);
  EXPECT_EQ(r.generate.priority, Priority::kNormal);
}

TEST(EmbeddingRequest, EveryInputShapeBecomesOneEngineInputPerItem) {
  const EmbeddingRequest strings = request_of(parse(R"({"input":["a","bc","d"]})"));
  ASSERT_EQ(inputs_of(strings).size(), 3u);
  EXPECT_EQ(strings.generate.n, 3);
  EXPECT_EQ(*inputs_of(strings)[1].text, "bc");

  const EmbeddingRequest ids = request_of(parse(R"({"input":[5,0,7]})"));
  ASSERT_EQ(inputs_of(ids).size(), 1u);  // one tokenized input, not three
  EXPECT_EQ(ids.generate.n, 1);
  EXPECT_FALSE(inputs_of(ids)[0].text);
  EXPECT_EQ(inputs_of(ids)[0].token_ids, (std::vector<int32_t>{5, 0, 7}));

  const EmbeddingRequest nested = request_of(parse(R"({"input":[[1,2],[3]]})"));
  ASSERT_EQ(inputs_of(nested).size(), 2u);
  EXPECT_EQ(nested.generate.n, 2);
  EXPECT_EQ(inputs_of(nested)[0].token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(inputs_of(nested)[1].token_ids, (std::vector<int32_t>{3}));
}

TEST(EmbeddingRequest, ModelIsTheServedOneOrA404) {
  EXPECT_EQ(request_of(parse(R"({"input":"a"})")).model, "");
  EXPECT_EQ(request_of(parse(R"({"input":"a","model":""})")).model, "");
  EXPECT_EQ(request_of(parse(R"({"input":"a","model":null})")).model, "");
  const ApiError e = error_of(parse(R"({"input":"a","model":"other"})"));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.type, "not_found_error");
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(refusal(R"({"input":"a","model":3})"), (Refusal{400, "model"}));
}

TEST(EmbeddingRequest, EmptyInputsAreRefusedNamingTheItem) {
  EXPECT_EQ(refusal(R"({"input":""})"), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":[]})"), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":[[]]})"), (Refusal{400, "input[0]"}));
  EXPECT_EQ(refusal(R"({"input":["a",""]})"), (Refusal{400, "input[1]"}));
  EXPECT_EQ(refusal(R"({"input":[[1],[]]})"), (Refusal{400, "input[1]"}));
  const ApiError missing = error_of(parse(R"({"model":"M"})"));
  EXPECT_EQ(missing.param, "input");
  EXPECT_EQ(missing.code, "missing_required_parameter");
  EXPECT_EQ(refusal(R"({"input":null})"), (Refusal{400, "input"}));
}

TEST(EmbeddingRequest, WrongInputTypesNameTheField) {
  EXPECT_EQ(refusal(R"({"input":5})"), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":{"text":"a"}})"), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":[1,"a"]})"), (Refusal{400, "input"}));  // one tokenized input
  EXPECT_EQ(refusal(R"({"input":[1.5]})"), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":["a",1]})"), (Refusal{400, "input[1]"}));
  EXPECT_EQ(refusal(R"({"input":[[1],"a"]})"), (Refusal{400, "input[1]"}));
  EXPECT_EQ(refusal(R"({"input":["a",[1]]})"), (Refusal{400, "input[1]"}));
  EXPECT_EQ(refusal(R"({"input":[[1,"x"]]})"), (Refusal{400, "input[0]"}));
  EXPECT_EQ(refusal(R"({"input":[null]})"), (Refusal{400, "input[0]"}));
  EXPECT_EQ(refusal(R"({"input":[true]})"), (Refusal{400, "input[0]"}));
  EXPECT_EQ(error_of(parse(R"({"input":["a",1]})")).code, "invalid_type");
}

TEST(EmbeddingRequest, TokenIdsMustBeNonNegativeInt32) {
  EXPECT_EQ(refusal(R"({"input":[1,-1]})"), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":[[0],[-3]]})"), (Refusal{400, "input[1]"}));
  EXPECT_EQ(refusal(R"({"input":[2147483648]})"), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":[18446744073709551615]})"), (Refusal{400, "input"}));
  EXPECT_EQ(inputs_of(request_of(parse(R"({"input":[2147483647]})")))[0].token_ids[0], 2147483647);
}

TEST(EmbeddingRequest, AtMostMaxEmbeddingInputs) {
  OpenAiApiConfig config;
  config.max_embedding_inputs = 2;
  EXPECT_EQ(request_of(parse(R"({"input":["a","b"]})", config)).generate.n, 2);
  EXPECT_EQ(refusal(R"({"input":["a","b","c"]})", config), (Refusal{400, "input"}));
  EXPECT_EQ(refusal(R"({"input":[[1],[2],[3]]})", config), (Refusal{400, "input"}));
  // One tokenized input is one input however many tokens it has.
  EXPECT_EQ(request_of(parse(R"({"input":[1,2,3,4]})", config)).generate.n, 1);
}

TEST(EmbeddingRequest, TextMustBeUtf8) {
  EXPECT_EQ(error_of(parse("{\"input\":[\"ok\",\"a\xC3\"]}")).code, "invalid_utf8");
  EXPECT_EQ(error_of(parse(R"({"input":["ok","a\ud800b"]})")).status, 400);
}

TEST(EmbeddingRequest, EncodingFormatIsFloatOrBase64) {
  EXPECT_EQ(request_of(parse(R"({"input":"a","encoding_format":"float"})")).output.encoding,
            EmbeddingEncoding::kFloat);
  EXPECT_EQ(request_of(parse(R"({"input":"a","encoding_format":"base64"})")).output.encoding,
            EmbeddingEncoding::kBase64);
  EXPECT_EQ(refusal(R"({"input":"a","encoding_format":"binary"})"),
            (Refusal{400, "encoding_format"}));
  EXPECT_EQ(refusal(R"({"input":"a","encoding_format":1})"), (Refusal{400, "encoding_format"}));
}

TEST(EmbeddingRequest, DimensionsNeedTheMatryoshkaSetting) {
  const ApiError off = error_of(parse(R"({"input":"a","dimensions":8})"));
  EXPECT_EQ(off.status, 400);
  EXPECT_EQ(off.param, "dimensions");
  EXPECT_NE(off.message.find("embeddings.matryoshka"), std::string::npos) << off.message;
  OpenAiApiConfig config;
  config.embedding_matryoshka = true;
  EXPECT_EQ(request_of(parse(R"({"input":"a","dimensions":8})", config)).output.dimensions, 8);
  EXPECT_EQ(refusal(R"({"input":"a","dimensions":0})", config), (Refusal{400, "dimensions"}));
  EXPECT_EQ(refusal(R"({"input":"a","dimensions":-4})", config), (Refusal{400, "dimensions"}));
  EXPECT_EQ(refusal(R"({"input":"a","dimensions":"8"})", config), (Refusal{400, "dimensions"}));
  EXPECT_EQ(refusal(R"({"input":"a","dimensions":2.5})", config), (Refusal{400, "dimensions"}));
  EXPECT_FALSE(request_of(parse(R"({"input":"a","dimensions":null})")).output.dimensions);
}

TEST(EmbeddingRequest, PoolingDefaultsToTheConfigAndMayBeNamed) {
  OpenAiApiConfig config;
  config.embedding_pooling = model::Pooling::kLast;
  EXPECT_EQ(request_of(parse(R"({"input":"a"})", config)).generate.embedding->pooling,
            model::Pooling::kLast);
  EXPECT_EQ(
      request_of(parse(R"({"input":"a","pooling":"cls"})", config)).generate.embedding->pooling,
      model::Pooling::kCls);
  EXPECT_EQ(refusal(R"({"input":"a","pooling":"max"})"), (Refusal{400, "pooling"}));
  EXPECT_EQ(refusal(R"({"input":"a","pooling":1})"), (Refusal{400, "pooling"}));
}

TEST(EmbeddingRequest, NormalizeOrEmbdNormalizeButNotBoth) {
  EXPECT_EQ(request_of(parse(R"({"input":"a","normalize":false})")).output.norm,
            kEmbeddingNormNone);
  EXPECT_EQ(request_of(parse(R"({"input":"a","normalize":true})")).output.norm,
            kEmbeddingNormEuclidean);
  for (const int p : {-1, 0, 1, 2, 3, 7}) {
    const auto body = fmt::format(R"({{"input":"a","embd_normalize":{}}})", p);
    EXPECT_EQ(request_of(parse(body)).output.norm, p);
  }
  EXPECT_EQ(refusal(R"({"input":"a","embd_normalize":-2})"), (Refusal{400, "embd_normalize"}));
  EXPECT_EQ(refusal(R"({"input":"a","embd_normalize":1.5})"), (Refusal{400, "embd_normalize"}));
  EXPECT_EQ(refusal(R"({"input":"a","normalize":1})"), (Refusal{400, "normalize"}));
  EXPECT_EQ(refusal(R"({"input":"a","normalize":true,"embd_normalize":2})"),
            (Refusal{400, "embd_normalize"}));
}

TEST(EmbeddingRequest, PriorityAndUserAsOnTheCompletionRoutes) {
  EXPECT_EQ(request_of(parse(R"({"input":"a","priority":"high"})")).generate.priority,
            Priority::kHigh);
  EXPECT_EQ(refusal(R"({"input":"a","priority":"urgent"})"), (Refusal{400, "priority"}));
  EXPECT_EQ(refusal(R"({"input":"a","priority":2})"), (Refusal{400, "priority"}));
  EXPECT_EQ(refusal(R"({"input":"a","user":7})"), (Refusal{400, "user"}));
}

TEST(EmbeddingRequest, AnyOtherFieldIsRefusedByName) {
  const ApiError truncate = error_of(parse(R"({"input":"a","truncate_prompt_tokens":16})"));
  EXPECT_EQ(truncate.status, 400);
  EXPECT_EQ(truncate.param, "truncate_prompt_tokens");
  EXPECT_EQ(truncate.message, "'truncate_prompt_tokens' is not supported by /v1/embeddings.");
  EXPECT_EQ(refusal(R"({"input":"a","temperature":0.5})"), (Refusal{400, "temperature"}));
  // A null asks for nothing, as everywhere on the OpenAI routes.
  EXPECT_EQ(request_of(parse(R"({"input":"a","truncate_prompt_tokens":null})")).generate.n, 1);
}

TEST(EmbeddingRequest, BodyMustBeAJsonObject) {
  EXPECT_EQ(error_of(parse(R"({"input":)")).code, "invalid_json");
  EXPECT_EQ(error_of(parse(R"(["a"])")).code, "invalid_json");
}

// ---- the output vectors ------------------------------------------------------------------------

std::vector<float> shaped(std::vector<float> pooled, int32_t norm,
                          std::optional<int32_t> dimensions = std::nullopt) {
  return shape_embedding(
      pooled, EmbeddingOutput{
                  .encoding = EmbeddingEncoding::kFloat, .dimensions = dimensions, .norm = norm});
}

TEST(EmbeddingShape, EachNormAgainstHandComputedValues) {
  EXPECT_EQ(shaped({3, 4}, kEmbeddingNormEuclidean), (std::vector<float>{3 * 0.2f, 4 * 0.2f}));
  EXPECT_FLOAT_EQ(shaped({3, 4}, kEmbeddingNormEuclidean)[0], 0.6f);
  EXPECT_EQ(shaped({1, -3}, kEmbeddingNormTaxicab), (std::vector<float>{0.25f, -0.75f}));
  EXPECT_EQ(shaped({1, -2}, kEmbeddingNormMaxAbsInt16), (std::vector<float>{16380, -32760}));
  EXPECT_EQ(shaped({1.5f, -2}, kEmbeddingNormNone), (std::vector<float>{1.5f, -2}));
  // p = 3: (1 + 8 + 8)^(1/3) = 2.5712815906582..., whose inverse is 0.38891111873...
  const std::vector<float> cube = shaped({1, 2, -2}, 3);
  EXPECT_FLOAT_EQ(cube[0], 0.38891112f);
  EXPECT_FLOAT_EQ(cube[1], 0.77782224f);
  EXPECT_FLOAT_EQ(cube[2], -0.77782224f);
}

TEST(EmbeddingShape, ZeroVectorStaysZeroUnderEveryNorm) {
  for (const int32_t norm : {-1, 0, 1, 2, 3}) {
    EXPECT_EQ(shaped({0, 0, 0}, norm), (std::vector<float>{0, 0, 0})) << norm;
  }
}

TEST(EmbeddingShape, DimensionsTruncateBeforeNormalizing) {
  // Normalized whole, then cut, the prefix would be {3/13, 4/13}: not a unit vector.
  EXPECT_EQ(shaped({3, 4, 12}, kEmbeddingNormEuclidean, 2),
            (std::vector<float>{3 * 0.2f, 4 * 0.2f}));
  EXPECT_EQ(shaped({3, 4, 12}, kEmbeddingNormNone, 2), (std::vector<float>{3, 4}));
  // More dimensions than the vector holds: the whole vector.
  EXPECT_EQ(shaped({3, 4}, kEmbeddingNormEuclidean, 10).size(), 2u);
}

// llama.cpp's common_embd_normalize (common/common.cpp), verbatim: the reference for bit-exactness.
void llama_cpp_embd_normalize(const float* inp, float* out, int n, int embd_norm) {
  double sum = 0.0;
  switch (embd_norm) {
    case -1: sum = 1.0; break;
    case 0:
      for (int i = 0; i < n; i++) {
        if (sum < std::abs(inp[i])) sum = std::abs(inp[i]);
      }
      sum /= 32760.0;
      break;
    case 2:
      for (int i = 0; i < n; i++) sum += inp[i] * inp[i];
      sum = std::sqrt(sum);
      break;
    default:
      for (int i = 0; i < n; i++) sum += std::pow(std::abs(inp[i]), embd_norm);
      sum = std::pow(sum, 1.0 / embd_norm);
      break;
  }
  const float norm = sum > 0.0 ? 1.0 / sum : 0.0f;
  for (int i = 0; i < n; i++) out[i] = inp[i] * norm;
}

TEST(EmbeddingShape, MatchesLlamaCppBitForBit) {
  std::mt19937 random(37);
  std::normal_distribution<float> value(0.0f, 3.0f);
  for (const int32_t norm : {-1, 0, 1, 2, 3, 4, 9}) {
    for (const int size : {1, 7, 384, 4096}) {
      std::vector<float> pooled(static_cast<size_t>(size));
      for (float& x : pooled) x = value(random);
      std::vector<float> expected(pooled.size());
      llama_cpp_embd_normalize(pooled.data(), expected.data(), size, norm);
      const std::vector<float> got = shaped(pooled, norm);
      ASSERT_EQ(got.size(), expected.size());
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0)
          << "norm " << norm << ", size " << size;
    }
  }
}

// ---- the response ------------------------------------------------------------------------------

engine::Completion completion_with(std::vector<std::vector<float>> vectors, int32_t prompt_tokens) {
  engine::Completion c;
  c.finish_reason = "stop";
  c.usage.prompt_tokens = prompt_tokens;
  c.embeddings = std::move(vectors);
  return c;
}

TEST(EmbeddingResponse, FloatBodyHasOpenAisShapeAndRoundTrips) {
  const std::vector<std::vector<float>> pooled{{0.1f, -2.5f, 1e-7f, 3}, {7, 0, 0, 0}};
  const EmbeddingOutput output{.encoding = EmbeddingEncoding::kFloat,
                               .dimensions = std::nullopt,
                               .norm = kEmbeddingNormNone};
  const std::string body = encode_embedding_response("M", output, completion_with(pooled, 9));
  EXPECT_TRUE(body.starts_with(R"({"object":"list","data":[{"object":"embedding","index":0,)"
                               R"("embedding":[0.1,-2.5,1e-07,3]},)"))
      << body;
  EXPECT_TRUE(body.ends_with(R"("model":"M","usage":{"prompt_tokens":9,"total_tokens":9}})"))
      << body;
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parser.parse(body);
  size_t index = 0;
  for (simdjson::dom::element item : root["data"].get_array()) {
    EXPECT_EQ(uint64_t(item["index"]), index);
    size_t i = 0;
    for (simdjson::dom::element number : item["embedding"].get_array()) {
      const float parsed = static_cast<float>(double(number));
      EXPECT_EQ(std::bit_cast<uint32_t>(parsed), std::bit_cast<uint32_t>(pooled[index][i])) << i;
      ++i;
    }
    EXPECT_EQ(i, pooled[index].size());
    ++index;
  }
  EXPECT_EQ(index, 2u);
}

TEST(EmbeddingResponse, Base64IsTheLittleEndianFloat32Bytes) {
  const EmbeddingOutput raw{.encoding = EmbeddingEncoding::kBase64,
                            .dimensions = std::nullopt,
                            .norm = kEmbeddingNormNone};
  // 1.0f is 0x3F800000: bytes 00 00 80 3F.
  EXPECT_NE(encode_embedding_response("M", raw, completion_with({{1.0f}}, 1))
                .find(R"("embedding":"AACAPw==")"),
            std::string::npos);

  EmbeddingOutput output = raw;
  output.norm = kEmbeddingNormEuclidean;
  output.dimensions = 3;
  const std::vector<float> pooled{0.3f, -1.25f, 8.5f, 99.0f};
  const std::string body = encode_embedding_response("M", output, completion_with({pooled}, 4));
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parser.parse(body);
  const std::string_view text = root["data"].at(0)["embedding"].get_string();
  const std::optional<std::string> bytes = base64_decode(text);
  ASSERT_TRUE(bytes);
  const std::vector<float> expected = shape_embedding(pooled, output);
  ASSERT_EQ(bytes->size(), expected.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(bytes->data(), expected.data(), bytes->size()), 0);
}

TEST(EmbeddingResponse, TooLongInputErrorNamesTheInput) {
  const ApiError unnamed = api_error_for_embedding(
      engine::RequestError{engine::ErrorCode::kPromptTooLong, "too long", ""});
  EXPECT_EQ(unnamed.param, "input");
  EXPECT_EQ(unnamed.code, "context_length_exceeded");
  const ApiError named = api_error_for_embedding(
      engine::RequestError{engine::ErrorCode::kPromptTooLong, "too long", "input[3]"});
  EXPECT_EQ(named.param, "input[3]");
}

// ---- the route ---------------------------------------------------------------------------------

// Answers every submit at once, on the caller's thread, with the scripted vectors or error.
class EmbeddingEngine final : public engine::Engine {
 public:
  engine::ModelCard card;
  std::vector<std::vector<float>> vectors;
  std::string finish_reason = "stop";
  std::optional<engine::RequestError> error;
  std::vector<engine::GenerateRequest> submitted;
  int num_posted = 0;

  engine::RequestId submit(engine::GenerateRequest request,
                           std::shared_ptr<engine::RequestSink> sink) override {
    submitted.push_back(request);
    if (error) {
      sink->on_error(1, *error);
    } else {
      engine::Completion done = completion_with(vectors, 6);
      done.finish_reason = finish_reason;
      sink->on_finish(1, std::move(done));
    }
    return 1;
  }
  void cancel(engine::RequestId) override {}
  engine::EngineStats stats() const override { return {}; }
  std::vector<engine::RequestInfo> requests() const override { return {}; }
  bool drain(std::chrono::milliseconds) override { return true; }
  int64_t flush_prefix_cache() override { return 0; }
  const model::Tokenizer& tokenizer() const override { return tokenizer_; }
  void post_tokenizer_work(std::function<void()> work) override {
    ++num_posted;
    work();
  }
  const engine::ModelCard& model_card() const override { return card; }

 private:
  model::Tokenizer tokenizer_ = testing::make_test_tokenizer();
};

class EmbeddingRouteTest : public ::testing::Test {
 protected:
  EmbeddingRouteTest() {
    state_.model.id = "M";
    engine_.card.backend = "cuda";
    engine_.card.prompt_outputs = true;
    engine_.card.info.embedding_length = 4;
    engine_.vectors = {{3, 4, 0, 0}, {0, 0, 0, 2}};
    config_.embedding_matryoshka = true;
    add_openai_routes(router_, engine_, state_, config_);
  }
  HttpResponse post(std::string body) {
    HttpRequest r;
    r.method = "POST";
    r.target = "/v1/embeddings";
    r.body = std::move(body);
    r.headers.emplace_back("Content-Type", "application/json");
    return router_.handle(r);
  }

  EmbeddingEngine engine_;
  ServerState state_;
  OpenAiApiConfig config_;
  Router router_;
};

TEST_F(EmbeddingRouteTest, AnswersOneNormalizedVectorPerInput) {
  const HttpResponse r = post(R"({"input":["a","b"],"user":"u"})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":)"
                    R"([0.6,0.8,0,0]},{"object":"embedding","index":1,"embedding":[0,0,0,1]}],)"
                    R"("model":"M","usage":{"prompt_tokens":6,"total_tokens":6}})");
  ASSERT_EQ(engine_.submitted.size(), 1u);
  const engine::GenerateRequest& g = engine_.submitted[0];
  EXPECT_EQ(g.n, 2);
  ASSERT_TRUE(g.embedding);
  EXPECT_EQ(g.embedding->inputs.size(), 2u);
  EXPECT_FALSE(g.client.empty());
  EXPECT_EQ(engine_.num_posted, 0);  // small answers are encoded inline
}

TEST_F(EmbeddingRouteTest, RefusedWhenTheBackendComputesNoEmbeddings) {
  engine_.card.prompt_outputs = false;
  const HttpResponse r = post(R"({"input":"a"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("not supported by the cuda backend"), std::string::npos) << r.body;
  EXPECT_TRUE(engine_.submitted.empty());
}

TEST_F(EmbeddingRouteTest, DimensionsAtMostTheEmbeddingLength) {
  engine_.vectors = {{3, 4, 12, 1}};
  const HttpResponse cut = post(R"({"input":"a","dimensions":2})");
  EXPECT_EQ(cut.status, 200);
  EXPECT_NE(cut.body.find(R"("embedding":[0.6,0.8])"), std::string::npos) << cut.body;
  const HttpResponse r = post(R"({"input":"a","dimensions":5})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find(R"("param":"dimensions")"), std::string::npos) << r.body;
  EXPECT_EQ(post(R"({"input":"a","dimensions":4})").status, 200);
  EXPECT_EQ(engine_.submitted.size(), 2u);
}

TEST_F(EmbeddingRouteTest, EngineErrorsKeepTheirStatusAndParam) {
  engine_.error = engine::RequestError{engine::ErrorCode::kPromptTooLong, "too long", "input[1]"};
  HttpResponse r = post(R"({"input":["a","b"]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find(R"("param":"input[1]")"), std::string::npos) << r.body;
  engine_.error = engine::RequestError{engine::ErrorCode::kQueueFull, "queue full", ""};
  r = post(R"({"input":"a"})");
  EXPECT_EQ(r.status, 429);
}

TEST_F(EmbeddingRouteTest, CancelledOrShortAnswersAreServerErrors) {
  engine_.finish_reason = "cancelled";
  engine_.vectors.clear();
  HttpResponse r = post(R"({"input":"a"})");
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find(R"("code":"cancelled")"), std::string::npos) << r.body;
  engine_.finish_reason = "stop";
  engine_.vectors = {{1, 0, 0, 0}};
  r = post(R"({"input":["a","b"]})");
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find(R"("code":"internal_error")"), std::string::npos) << r.body;
}

TEST_F(EmbeddingRouteTest, LargeAnswersAreEncodedOffTheIngressThread) {
  engine_.vectors.assign(20, std::vector<float>(4096, 0.5f));
  const HttpResponse r = post(fmt::format(R"({{"input":[{}],"encoding_format":"base64"}})",
                                          fmt::join(std::vector<std::string>(20, "[1]"), ",")));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(engine_.num_posted, 1);
  EXPECT_NE(r.body.find(R"("index":19)"), std::string::npos);
}

}  // namespace
}  // namespace troupe::net
