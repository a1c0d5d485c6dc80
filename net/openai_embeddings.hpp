// OpenAI's POST /v1/embeddings (issue 37): the request codec, the output vectors, the response
// body, and the handler with its RequestSink.
//
// The engine pools one raw vector per input (engine::Completion::embeddings); everything the
// client chose about its shape happens here, after the engine: `dimensions` truncates first
// (Matryoshka models keep their meaning in a prefix), then the vector is normalized with
// llama.cpp's numbers and arithmetic (common_embd_normalize), so that a request written for
// llama-server gets the same floats here. Request fields are OpenAI's (`input`, `model`,
// `encoding_format`, `dimensions`, `user`) plus vLLM's `pooling` / `normalize`, llama.cpp's
// `embd_normalize` and troupe's `priority`; any other field is a 400 naming it, since silently
// ignoring e.g. `truncate_prompt_tokens` would answer a different question than was asked.
//
// Thread-safety: the parse/check/shape/encode functions are pure (a thread_local simdjson parser
// inside) and callable from any thread; handle_embeddings runs on the io thread that dispatched
// the request; EmbeddingSink is called by the engine on its ingress thread (RequestSink's
// contract) and may hand the encoding to the engine's tokenizer thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/engine/engine.hpp"
#include "net/http_types.hpp"
#include "net/openai_request.hpp"
#include "net/request_record.hpp"
#include "net/response_stream.hpp"

namespace troupe::net {

struct OpenAiContext;  // net/openai_sink.hpp

enum class EmbeddingEncoding : uint8_t {
  kFloat,   // a JSON array of numbers
  kBase64,  // standard base64 of the little-endian float32 bytes (what the openai client asks for)
};

// llama.cpp's `embd_normalize` numbers, kept as they are so that its requests mean the same here.
// Any p > 2 is the p-norm; vLLM's `normalize` maps to kEmbeddingNormEuclidean / kEmbeddingNormNone.
inline constexpr int32_t kEmbeddingNormNone = -1;
inline constexpr int32_t kEmbeddingNormMaxAbsInt16 = 0;  // scaled so that max |x| is 32760
inline constexpr int32_t kEmbeddingNormTaxicab = 1;
inline constexpr int32_t kEmbeddingNormEuclidean = 2;  // the default (OpenAI's vectors are unit)

// What net does to each raw pooled vector before it goes on the wire.
struct EmbeddingOutput {
  EmbeddingEncoding encoding = EmbeddingEncoding::kFloat;
  std::optional<int32_t> dimensions;  // keep only the first N values (then normalize)
  int32_t norm = kEmbeddingNormEuclidean;
};

struct EmbeddingRequest {
  std::string model;  // as sent ("" when absent)
  // embedding set (pooling, one input per item), n = the number of inputs, origin kHttp;
  // client_label = `user`, client left for the handler (it needs the connection).
  engine::GenerateRequest generate;
  EmbeddingOutput output;
  std::string user;
};

using ParsedEmbedding = std::variant<EmbeddingRequest, ApiError>;

// `served_model_id`: the only model name accepted (absent or empty means it too); any other name
// is a 404, as on the completion routes. Token ids are checked to be >= 0 here; the vocabulary
// bound and each input's length are the engine's to check.
ParsedEmbedding parse_embedding_request(std::string_view body, std::string_view served_model_id,
                                        const OpenAiApiConfig& config);

// What only the served model can answer: whether its backend computes embeddings at all, and
// `dimensions` at most its embedding length. nullopt: the request may be submitted.
std::optional<ApiError> check_embedding_support(const EmbeddingRequest& request,
                                                const engine::ModelCard& card);

// llama.cpp's common_embd_normalize, in place and with its arithmetic (float products summed in
// double, one float scale), so the results match llama-server's bit for bit. A zero norm leaves
// zeros (never NaN).
void normalize_embedding(std::span<float> vector, int32_t norm);

// One output vector: `pooled` truncated to output.dimensions (when given), then normalized.
std::vector<float> shape_embedding(std::span<const float> pooled, const EmbeddingOutput& output);

// The response body: {"object":"list","data":[{"object":"embedding","index":i,"embedding":...}],
// "model":..,"usage":{"prompt_tokens":N,"total_tokens":N}}, one item per vector of
// `completion.embeddings`, in order. Floats are written in their shortest round-trip form.
std::string encode_embedding_response(std::string_view model_id, const EmbeddingOutput& output,
                                      const engine::Completion& completion);

// An engine error as the client sees it; a too-long input the engine did not name is "input".
ApiError api_error_for_embedding(const engine::RequestError& error);

// The sink of one /v1/embeddings request: there are no deltas to stream, so it answers once, from
// the engine's final call, and ends the request's RequestRecord there.
class EmbeddingSink final : public engine::RequestSink {
 public:
  EmbeddingSink(std::shared_ptr<OpenAiContext> context, std::shared_ptr<ResponseStream> out,
                EmbeddingOutput output, size_t num_inputs, std::shared_ptr<RequestRecord> record);

  bool on_delta(engine::RequestId request_id, engine::TokenDelta delta) override;
  void on_finish(engine::RequestId request_id, engine::Completion completion) override;
  void on_error(engine::RequestId request_id, engine::RequestError error) override;

 private:
  std::shared_ptr<OpenAiContext> context_;
  std::shared_ptr<ResponseStream> out_;
  EmbeddingOutput output_;
  size_t num_inputs_;
  std::shared_ptr<RequestRecord> record_;
};

// POST /v1/embeddings: parse, check against the model card, submit, cancel when the client goes.
void handle_embeddings(const std::shared_ptr<OpenAiContext>& context, const HttpRequest& request,
                       const std::shared_ptr<ResponseStream>& out);

}  // namespace troupe::net
