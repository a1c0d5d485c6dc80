// /v1/batch wire format: parses OpenAI batch-input JSONL (one
// {"custom_id","method","url","body"} per line) or JSON {"requests":[...]} into items, each a
// decoded CompletionRequest or its own error, and writes batch-output lines
// ({"id","custom_id","response":{"status_code","request_id","body"},"error"}).
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/openai_embeddings.hpp"
#include "net/openai_request.hpp"

namespace troupe::net {

struct BatchItem {
  std::string custom_id;
  std::optional<CompletionRequest> request;  // set when the item is a valid completion
  std::optional<EmbeddingRequest> embedding;  // ... or a valid /v1/embeddings request
  // Invalid items: an HTTP-level error (status_code + error body) ...
  std::optional<ApiError> response_error;
  // ... or a line that is not a request at all (bad JSON, no custom_id): OpenAI's `error`.
  std::optional<ApiError> line_error;
};

struct ParsedBatch {
  bool jsonl = true;  // answer in kind: JSONL streamed line by line, or one JSON object
  std::vector<BatchItem> items;
};

// 400 for an empty batch or an unreadable JSON body, 413 above config.max_batch_items.
std::variant<ParsedBatch, ApiError> parse_batch(std::string_view body,
                                                std::string_view content_type,
                                                std::string_view served_model_id,
                                                const OpenAiApiConfig& config);

// One line of a batch input file (the durable /v1/batches reads its items one at a time): the
// decoded item, or its own error as parse_batch() would give it.
BatchItem decode_batch_line(std::string_view line, std::string_view served_model_id,
                            const OpenAiApiConfig& config);

// One output line (no newline). `body_json`: the response body for a status_code answer.
std::string batch_result_json(const BatchItem& item, int status_code, std::string_view request_id,
                              std::string_view body_json);
// The result of an item that failed before it ran.
std::string batch_failed_item_json(const BatchItem& item);

}  // namespace troupe::net
