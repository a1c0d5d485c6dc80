// The disaggregated prefill/decode JSON (net/disagg_codec): vLLM's kv_transfer_params as its
// proxies send them, the KV metadata handshake, and the prefill request body, checked by
// troupe's own request parser.
#include "net/disagg_codec.hpp"

#include <simdjson.h>

#include <string>

#include <gtest/gtest.h>

#include "net/openai_request.hpp"

namespace troupe::net {
namespace {

template <class T>
T value_of(DisaggParsed<T> parsed) {
  if (auto* error = std::get_if<std::string>(&parsed)) {
    ADD_FAILURE() << "unexpected error: " << *error;
    return T{};
  }
  return std::get<T>(std::move(parsed));
}

template <class T>
std::string error_of(const DisaggParsed<T>& parsed) {
  if (const auto* error = std::get_if<std::string>(&parsed)) return *error;
  ADD_FAILURE() << "expected an error";
  return {};
}

// --- kv_transfer_params ----------------------------------------------------------------------

TEST(DisaggCodec, VllmToyProxyRequestWithNullsParses) {
  const auto params = value_of(parse_kv_transfer_params_json(
      R"({"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
          "remote_block_ids": null, "remote_host": null, "remote_port": null})"));
  EXPECT_TRUE(params.do_remote_decode);
  EXPECT_FALSE(params.do_remote_prefill);
  EXPECT_EQ(params.remote_engine_id, "");
  EXPECT_TRUE(params.remote_block_ids.empty());
  EXPECT_EQ(params.remote_host, "");
  EXPECT_EQ(params.remote_port, 0);
  EXPECT_FALSE(params.first_token_id.has_value());
}

TEST(DisaggCodec, EmptyObjectIsAllDefaults) {
  const auto params = value_of(parse_kv_transfer_params_json("{}"));
  EXPECT_FALSE(params.do_remote_decode);
  EXPECT_FALSE(params.do_remote_prefill);
  EXPECT_EQ(params.remote_num_tokens, 0);
}

TEST(DisaggCodec, UnknownKeysOfOtherConnectorsAreIgnored) {
  const auto params = value_of(parse_kv_transfer_params_json(
      R"({"do_remote_prefill": true, "tp_size": 4, "remote_dp_size": {"x": [1]}, "foo": null})"));
  EXPECT_TRUE(params.do_remote_prefill);
}

TEST(DisaggCodec, FullDecodeSideParamsParse) {
  const auto params = value_of(parse_kv_transfer_params_json(
      R"({"do_remote_prefill": true, "remote_engine_id": "eng-1", "remote_block_ids": [3, 0, 7],
          "remote_request_id": "req-9", "remote_host": "10.0.0.2", "remote_port": 8001,
          "remote_num_tokens": 40, "first_token_id": 1234})"));
  EXPECT_TRUE(params.do_remote_prefill);
  EXPECT_EQ(params.remote_engine_id, "eng-1");
  EXPECT_EQ(params.remote_block_ids, (std::vector<int32_t>{3, 0, 7}));
  EXPECT_EQ(params.remote_request_id, "req-9");
  EXPECT_EQ(params.remote_host, "10.0.0.2");
  EXPECT_EQ(params.remote_port, 8001);
  EXPECT_EQ(params.remote_num_tokens, 40);
  EXPECT_EQ(params.first_token_id, 1234);
}

TEST(DisaggCodec, WrongTypesAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"remote_port": "8001"})", "kv_transfer_params.remote_port must be an integer"},
      {R"({"remote_port": 80.5})", "kv_transfer_params.remote_port must be an integer"},
      {R"({"do_remote_decode": "yes"})", "kv_transfer_params.do_remote_decode must be a boolean"},
      {R"({"do_remote_prefill": 1})", "kv_transfer_params.do_remote_prefill must be a boolean"},
      {R"({"remote_engine_id": 5})", "kv_transfer_params.remote_engine_id must be a string"},
      {R"({"remote_request_id": []})", "kv_transfer_params.remote_request_id must be a string"},
      {R"({"remote_host": false})", "kv_transfer_params.remote_host must be a string"},
      {R"({"remote_num_tokens": "3"})", "kv_transfer_params.remote_num_tokens must be an integer"},
      {R"({"first_token_id": "1"})", "kv_transfer_params.first_token_id must be an integer"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_EQ(error_of(parse_kv_transfer_params_json(json)), message) << json;
  }
}

TEST(DisaggCodec, OutOfRangeValuesAreNamed) {
  EXPECT_NE(error_of(parse_kv_transfer_params_json(R"({"remote_port": 70000})"))
                .find("kv_transfer_params.remote_port must be an integer in [0, 65535]"),
            std::string::npos);
  EXPECT_NE(error_of(parse_kv_transfer_params_json(R"({"first_token_id": -1})"))
                .find("kv_transfer_params.first_token_id"),
            std::string::npos);
  EXPECT_NE(
      error_of(parse_kv_transfer_params_json(R"({"remote_num_tokens": 18446744073709551615})"))
          .find("kv_transfer_params.remote_num_tokens"),
      std::string::npos);
}

TEST(DisaggCodec, BlockIdsMustBeAnArrayOfNonNegativeIntegers) {
  for (const char* json : {R"({"remote_block_ids": 3})", R"({"remote_block_ids": [1, "2"]})",
                           R"({"remote_block_ids": [1, -2]})", R"({"remote_block_ids": [1.5]})",
                           R"({"remote_block_ids": [4294967296]})"}) {
    EXPECT_EQ(error_of(parse_kv_transfer_params_json(json))
                  .rfind("kv_transfer_params.remote_block_ids must be an array", 0),
              0u)
        << json;
  }
}

// troupe's KV groups (a sliding-window model): one array per sliding group, -1 for a freed page.
TEST(DisaggCodec, SlidingBlockIdsAreArraysOfBlockIdsOrMinusOne) {
  const auto params = value_of(
      parse_kv_transfer_params_json(R"({"remote_sliding_block_ids": [[-1, 4], [-1, 9]]})"));
  EXPECT_EQ(params.remote_sliding_block_ids, (std::vector<std::vector<int32_t>>{{-1, 4}, {-1, 9}}));
  EXPECT_TRUE(value_of(parse_kv_transfer_params_json(R"({"remote_sliding_block_ids": null})"))
                  .remote_sliding_block_ids.empty());
  for (const char* json : {R"({"remote_sliding_block_ids": [1, 2]})",
                           R"({"remote_sliding_block_ids": [[1, -2]]})",
                           R"({"remote_sliding_block_ids": {"a": [1]}})",
                           R"({"remote_sliding_block_ids": [["1"]]})"}) {
    EXPECT_EQ(error_of(parse_kv_transfer_params_json(json))
                  .rfind("kv_transfer_params.remote_sliding_block_ids must be an array of arrays", 0),
              0u)
        << json;
  }
}

TEST(DisaggCodec, NonObjectsAndBadJsonAreErrors) {
  EXPECT_EQ(error_of(parse_kv_transfer_params_json("[]")), "kv_transfer_params must be an object");
  EXPECT_EQ(error_of(parse_kv_transfer_params_json("true")),
            "kv_transfer_params must be an object");
  EXPECT_NE(error_of(parse_kv_transfer_params_json("{\"a\": ")).find("kv_transfer_params"),
            std::string::npos);
}

TEST(DisaggCodec, ParsesAnElementOfALargerDocument) {
  simdjson::dom::parser parser;
  const simdjson::padded_string body(
      std::string_view(R"({"prompt": "x", "kv_transfer_params": {"do_remote_decode": true}})"));
  const simdjson::dom::element root = parser.parse(body);
  const auto params = value_of(parse_kv_transfer_params(root["kv_transfer_params"]));
  EXPECT_TRUE(params.do_remote_decode);
}

disagg::KvTransferParams full_params() {
  disagg::KvTransferParams params;
  params.do_remote_prefill = true;
  params.remote_engine_id = "engine-\"quoted\"";
  params.remote_block_ids = {5, 6, 0, 2147483647};
  params.remote_request_id = "cmpl-abc";
  params.remote_host = "::1";
  params.remote_port = 65535;
  params.remote_num_tokens = 63;
  params.first_token_id = 0;
  return params;
}

void expect_same(const disagg::KvTransferParams& a, const disagg::KvTransferParams& b) {
  EXPECT_EQ(a.do_remote_decode, b.do_remote_decode);
  EXPECT_EQ(a.do_remote_prefill, b.do_remote_prefill);
  EXPECT_EQ(a.remote_engine_id, b.remote_engine_id);
  EXPECT_EQ(a.remote_block_ids, b.remote_block_ids);
  EXPECT_EQ(a.remote_request_id, b.remote_request_id);
  EXPECT_EQ(a.remote_host, b.remote_host);
  EXPECT_EQ(a.remote_port, b.remote_port);
  EXPECT_EQ(a.remote_num_tokens, b.remote_num_tokens);
  EXPECT_EQ(a.first_token_id, b.first_token_id);
  EXPECT_EQ(a.remote_sliding_block_ids, b.remote_sliding_block_ids);
}

std::string params_json(const disagg::KvTransferParams& params) {
  JsonWriter out;
  write_kv_transfer_params(out, params);
  return out.take();
}

TEST(DisaggCodec, ParamsRoundTrip) {
  const auto params = full_params();
  expect_same(value_of(parse_kv_transfer_params_json(params_json(params))), params);
  auto without_token = params;
  without_token.first_token_id.reset();
  expect_same(value_of(parse_kv_transfer_params_json(params_json(without_token))), without_token);
  auto grouped = params;
  grouped.remote_sliding_block_ids = {{-1, 7, 8, 9}, {-1, 10, 11, 12}};
  expect_same(value_of(parse_kv_transfer_params_json(params_json(grouped))), grouped);
  EXPECT_EQ(params_json(params).find("remote_sliding_block_ids"), std::string::npos)
      << "without groups the field is not written (vLLM's shape)";
}

TEST(DisaggCodec, WrittenParamsCarryEveryFieldAndTpSize) {
  auto params = full_params();
  params.first_token_id.reset();
  simdjson::dom::parser parser;
  const std::string json = params_json(params);
  const simdjson::padded_string padded(json);
  const simdjson::dom::element root = parser.parse(padded);
  for (const char* key : {"do_remote_decode", "do_remote_prefill", "remote_engine_id",
                          "remote_block_ids", "remote_request_id", "remote_host", "remote_port",
                          "remote_num_tokens", "first_token_id", "tp_size"}) {
    EXPECT_EQ(root[key].error(), simdjson::SUCCESS) << key;
  }
  EXPECT_TRUE(root["first_token_id"].is_null());
  EXPECT_EQ(int64_t(root["tp_size"]), 1);
}

TEST(DisaggCodec, WrittenParamsNestInsideAResponse) {
  JsonWriter out;
  out.begin_object().field("id", "cmpl-1").key("kv_transfer_params");
  write_kv_transfer_params(out, full_params());
  out.field("object", "text_completion").end_object();
  expect_same(value_of(parse_prefill_response(out.str())), full_params());
}

// --- base64 ----------------------------------------------------------------------------------

TEST(DisaggCodec, Base64MatchesRfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded), std::optional<std::string>(plain));
  }
}

TEST(DisaggCodec, Base64RoundTripsEveryByteValue) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  for (size_t length = 0; length <= bytes.size(); length += 37) {
    const std::string part = bytes.substr(bytes.size() - length);
    EXPECT_EQ(base64_decode(base64_encode(part)), part);
  }
  EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes);
}

TEST(DisaggCodec, Base64RejectsWhatIsNotCanonical) {
  for (const char* text : {"Zg=", "Zg", "Z===", "====", "Zh==", "Zm9=", "Zm 9v", "Zm9v\n",
                           "Zg==Zg==", "Zm-v", "=Zm9"}) {
    EXPECT_FALSE(base64_decode(text).has_value()) << text;
  }
}

// --- KV metadata -----------------------------------------------------------------------------

disagg::KvMetadata sample_metadata() {
  disagg::KvMetadata m;
  m.engine_id = "troupe-1234-abcd";
  m.descriptor.transport = "ucx";
  m.descriptor.worker_address = std::string("\x00\x01\xff\x00worker\x00", 11);
  m.descriptor.rkey = std::string("\x00\x00\x80\x7f", 4);
  m.descriptor.base_address = 0xffff'8000'0000'1000ull;  // above int64's range
  m.layout = {.num_layers = 2,
              .num_kv_heads = 4,
              .head_dim = 64,
              .block_size = 16,
              .num_blocks = 10,
              .dtype = "f16",
              .block_bytes = 8192,
              .kv_stride = 81920,
              .layer_stride = 163840};
  m.descriptor.region_bytes = 2 * 163840;
  m.compatibility_hash = std::string(64, 'a');
  return m;
}

void expect_same(const disagg::KvMetadata& a, const disagg::KvMetadata& b) {
  EXPECT_EQ(a.engine_id, b.engine_id);
  EXPECT_EQ(a.descriptor.transport, b.descriptor.transport);
  EXPECT_EQ(a.descriptor.worker_address, b.descriptor.worker_address);
  EXPECT_EQ(a.descriptor.rkey, b.descriptor.rkey);
  EXPECT_EQ(a.descriptor.base_address, b.descriptor.base_address);
  EXPECT_EQ(a.descriptor.region_bytes, b.descriptor.region_bytes);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.compatibility_hash, b.compatibility_hash);
}

TEST(DisaggCodec, MetadataRoundTripsBinaryBytesAndLargeAddresses) {
  const auto m = sample_metadata();
  const std::string json = kv_metadata_json(m);
  EXPECT_NE(json.find("\"base_address\":18446603336221200384"), std::string::npos) << json;
  EXPECT_NE(json.find(base64_encode(m.descriptor.rkey)), std::string::npos);
  expect_same(value_of(parse_kv_metadata(json)), m);
}

// Replaces the first occurrence of `from` in the metadata JSON.
std::string metadata_with(std::string_view from, std::string_view to) {
  std::string json = kv_metadata_json(sample_metadata());
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) json.replace(at, from.size(), to);
  return json;
}

TEST(DisaggCodec, MetadataErrorsNameTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {metadata_with(R"("engine_id":"troupe-1234-abcd")", R"("engine_id":null)"),
       "kv_metadata.engine_id is missing"},
      {metadata_with(R"("engine_id":"troupe-1234-abcd")", R"("engine_id":"")"),
       "kv_metadata.engine_id must be a non-empty string"},
      {metadata_with(R"("transport":"ucx")", R"("transport":7)"),
       "kv_metadata.transport must be a string"},
      {metadata_with(R"("rkey":")", R"("rkey":"!)"),
       "kv_metadata.rkey must be base64 (RFC 4648, padded)"},
      {metadata_with(R"("base_address":)", R"("base_address":-1,"x":)"),
       "kv_metadata.base_address must be a non-negative integer"},
      {metadata_with(R"("region_bytes":)", R"("region_bytes":"1","x":)"),
       "kv_metadata.region_bytes must be a non-negative integer"},
      {metadata_with(R"("num_layers":2)", R"("num_layers":0)"),
       "kv_metadata.layout.num_layers must be an integer in [1, 2147483647]"},
      {metadata_with(R"("block_size":16)", R"("block_size":"16")"),
       "kv_metadata.layout.block_size must be an integer"},
      {metadata_with(R"("dtype":"f16")", R"("dtype":["f16"])"),
       "kv_metadata.layout.dtype must be a string"},
      {metadata_with(R"("block_bytes":8192)", R"("block_bytes":0)"),
       "kv_metadata.layout.block_bytes must be positive"},
      {metadata_with(R"("layer_stride":163840)", R"("layer_stride":1.5)"),
       "kv_metadata.layout.layer_stride must be a non-negative integer"},
      {metadata_with(R"("layout":{)", R"("layout":[],"x":{)"),
       "kv_metadata.layout must be an object"},
      {metadata_with(R"("compatibility_hash":)", R"("x":)"),
       "kv_metadata.compatibility_hash is missing"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_EQ(error_of(parse_kv_metadata(json)), message) << json;
  }
  EXPECT_EQ(error_of(parse_kv_metadata("[1]")), "kv_metadata must be a JSON object");
  EXPECT_EQ(error_of(parse_kv_metadata("garbage")).rfind("kv_metadata: ", 0), 0u);
}

TEST(DisaggCodec, MetadataWhoseLayoutLeavesTheRegionIsRefused) {
  auto m = sample_metadata();
  m.descriptor.region_bytes -= 1;  // the last block of the last layer's V ends one byte past the region
  EXPECT_EQ(error_of(parse_kv_metadata(kv_metadata_json(m))).rfind("kv_metadata.region_bytes", 0),
            0u);
  m = sample_metadata();
  m.layout.layer_stride = ~uint64_t{0};  // overflows 64 bits
  m.descriptor.region_bytes = ~uint64_t{0};
  EXPECT_EQ(error_of(parse_kv_metadata(kv_metadata_json(m))).rfind("kv_metadata.region_bytes", 0),
            0u);
}

// --- prefill request -------------------------------------------------------------------------

CompletionRequest parse_as_troupe(const std::string& body) {
  const ParsedCompletion parsed =
      parse_completion_request(ApiKind::kCompletion, body, "served-model", OpenAiApiConfig{});
  if (const auto* error = std::get_if<ApiError>(&parsed)) {
    ADD_FAILURE() << "troupe refuses the prefill body: " << error->message << " (" << error->param
                  << ")\n"
                  << body;
    return {};
  }
  return std::get<CompletionRequest>(parsed);
}

TEST(DisaggCodec, DefaultPrefillBodyCarriesOnlyTheEssentials) {
  disagg::PrefillCall call;
  call.prompt_token_ids = {1, 15043, 29892};
  const std::string body = prefill_request_json(call);
  EXPECT_EQ(body, R"({"prompt":[1,15043,29892],"max_tokens":1,"stream":false,)"
                  R"("kv_transfer_params":{"do_remote_decode":true}})");
  const CompletionRequest request = parse_as_troupe(body);
  EXPECT_EQ(request.generate.prompt_token_ids, call.prompt_token_ids);
  EXPECT_EQ(request.generate.stop.max_tokens, 1);
  EXPECT_FALSE(request.stream);
  EXPECT_FALSE(request.has_seed);
  EXPECT_EQ(request.generate.priority, Priority::kNormal);
}

TEST(DisaggCodec, PrefillBodyCarriesEverySamplingKnobTroupeParses) {
  disagg::PrefillCall call;
  call.prompt_token_ids = {7, 8};
  call.sampling.temperature = 0.7f;
  call.sampling.top_p = 0.9f;
  call.sampling.top_k = 40;
  call.sampling.min_p = 0.05f;
  call.sampling.seed = 18446744073709551615ull;
  call.sampling.repetition_penalty = 1.1f;
  call.sampling.presence_penalty = -0.5f;
  call.sampling.frequency_penalty = 0.25f;
  call.sampling.logit_bias = {{.token_id = 3, .bias = -100.0f}, {.token_id = 50, .bias = 2.5f}};
  call.sampling.min_tokens = 5;
  call.stop_token_ids = {2, 32000};
  call.ignore_eos = true;
  call.priority = Priority::kHigh;
  call.client = "tenant-\"a\"";
  const std::string body = prefill_request_json(call);
  EXPECT_NE(body.find(R"("temperature":0.7,)"), std::string::npos) << body;

  const CompletionRequest request = parse_as_troupe(body);
  const model::SamplingParams& s = request.generate.sampling;
  EXPECT_EQ(s.temperature, call.sampling.temperature);
  EXPECT_EQ(s.top_p, call.sampling.top_p);
  EXPECT_EQ(s.top_k, call.sampling.top_k);
  EXPECT_EQ(s.min_p, call.sampling.min_p);
  EXPECT_EQ(s.seed, call.sampling.seed);
  EXPECT_TRUE(request.has_seed);
  EXPECT_EQ(s.repetition_penalty, call.sampling.repetition_penalty);
  EXPECT_EQ(s.presence_penalty, call.sampling.presence_penalty);
  EXPECT_EQ(s.frequency_penalty, call.sampling.frequency_penalty);
  EXPECT_EQ(s.logit_bias, call.sampling.logit_bias);
  EXPECT_EQ(s.min_tokens, 1);  // capped at max_tokens, which is 1 there
  EXPECT_EQ(request.generate.stop.stop_token_ids, call.stop_token_ids);
  EXPECT_TRUE(request.generate.stop.ignore_eos);
  EXPECT_EQ(request.generate.priority, Priority::kHigh);
  EXPECT_EQ(request.user, call.client);
  EXPECT_EQ(request.generate.stop.max_tokens, 1);

  simdjson::dom::parser parser;
  const simdjson::padded_string padded(body);
  const auto params =
      value_of(parse_kv_transfer_params(parser.parse(padded)["kv_transfer_params"]));
  EXPECT_TRUE(params.do_remote_decode);
  EXPECT_FALSE(params.do_remote_prefill);
}

TEST(DisaggCodec, GreedyAndLowPriorityPrefillBodiesParse) {
  disagg::PrefillCall call;
  call.prompt_token_ids = {9};
  call.sampling.temperature = 0.0f;
  call.sampling.top_k = -1;  // off, as 0 is: not sent
  call.priority = Priority::kLow;
  const std::string body = prefill_request_json(call);
  EXPECT_EQ(body.find("top_k"), std::string::npos);
  const CompletionRequest request = parse_as_troupe(body);
  EXPECT_TRUE(request.generate.sampling.greedy());
  EXPECT_EQ(request.generate.priority, Priority::kLow);
}

// --- prefill response ------------------------------------------------------------------------

TEST(DisaggCodec, PrefillResponseNeedsUsableParams) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"choices": []})", "prefill response has no kv_transfer_params"},
      {R"({"kv_transfer_params": null})", "prefill response has no kv_transfer_params"},
      {R"({"kv_transfer_params": {"do_remote_prefill": false, "remote_engine_id": "e",
           "remote_request_id": "r", "remote_block_ids": [1]}})",
       "prefill response: kv_transfer_params.do_remote_prefill is not true"},
      {R"({"kv_transfer_params": {"do_remote_prefill": true, "remote_engine_id": "",
           "remote_request_id": "r", "remote_block_ids": [1]}})",
       "prefill response: kv_transfer_params.remote_engine_id is missing or empty"},
      {R"({"kv_transfer_params": {"do_remote_prefill": true, "remote_engine_id": "e",
           "remote_block_ids": [1]}})",
       "prefill response: kv_transfer_params.remote_request_id is missing or empty"},
      {R"({"kv_transfer_params": {"do_remote_prefill": true, "remote_engine_id": "e",
           "remote_request_id": "r"}})",
       "prefill response: kv_transfer_params.remote_block_ids is missing"},
      {R"({"kv_transfer_params": {"do_remote_prefill": true, "remote_port": "x"}})",
       "prefill response: kv_transfer_params.remote_port must be an integer"},
      {R"([])", "prefill response is not a JSON object"},
  };
  for (const auto& [body, message] : cases) {
    EXPECT_EQ(error_of(parse_prefill_response(body)), message) << body;
  }
  EXPECT_EQ(error_of(parse_prefill_response("<html>")).rfind("prefill response: ", 0), 0u);
}

TEST(DisaggCodec, PrefillResponseTakesTheTopLevelParams) {
  const auto params = value_of(parse_prefill_response(
      R"({"id": "cmpl-1", "choices": [{"text": "x", "kv_transfer_params": {"bogus": 1}}],
          "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false,
          "remote_engine_id": "e", "remote_request_id": "r", "remote_block_ids": [4, 5],
          "remote_host": "h", "remote_port": 1, "remote_num_tokens": 20, "first_token_id": null,
          "tp_size": 1}})"));
  EXPECT_EQ(params.remote_block_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(params.remote_num_tokens, 20);
  EXPECT_FALSE(params.first_token_id.has_value());
}

}  // namespace
}  // namespace troupe::net
