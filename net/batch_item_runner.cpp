#include "net/batch_item_runner.hpp"

#include <limits>

#include <fmt/format.h>
#include <simdjson.h>

#include "net/batch_codec.hpp"
#include "net/batch_item_sinks.hpp"
#include "net/json_input.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;

// No engine request behind the item (it failed before it was submitted).
constexpr uint64_t kNoRequest = std::numeric_limits<uint64_t>::max();

// An item's line goes to the batch actor, sorted by how it ended.
class DurableItem final : public BatchItemDestination {
 public:
  explicit DurableItem(std::function<void(batch::ItemResult)> done) : done_(std::move(done)) {}

  // Cancelling is explicit (OpenAiItemRunner::cancel), never a vanished client.
  bool abandoned() const override { return false; }
  void complete(size_t, std::string line, int status, bool cancelled) override {
    batch::ItemEnd end = batch::ItemEnd::kFailed;
    if (cancelled) {
      end = batch::ItemEnd::kCancelled;
    } else if (status == 200) {
      end = batch::ItemEnd::kSucceeded;
    } else if (status == 429 || status == 503) {
      end = batch::ItemEnd::kRetry;  // the queue was full, or the server is draining
    }
    done_(batch::ItemResult{end, std::move(line)});
  }

 private:
  std::function<void(batch::ItemResult)> done_;
};

}  // namespace

std::variant<std::string, batch::LineProblem> check_batch_input_line(std::string_view line,
                                                                    std::string_view endpoint) {
  dom::parser parser;
  dom::element entry;
  if (const auto error = parser.parse(simdjson::padded_string(line)).get(entry)) {
    return batch::LineProblem{"invalid_json", describe_bad_json(line, simdjson::error_message(error)), ""};
  }
  if (!entry.is_object()) {
    return batch::LineProblem{"invalid_json", "Each line must be a JSON object.", ""};
  }
  const dom::object object(entry);
  for (const auto field : object) {
    const std::string_view key = field.key;
    if (key != "custom_id" && key != "method" && key != "url" && key != "body") {
      return batch::LineProblem{"unknown_parameter", fmt::format("'{}' is not a field of a batch request line.", key),
                                std::string(key)};
    }
  }
  std::string_view custom_id;
  if (object["custom_id"].get(custom_id) != simdjson::SUCCESS || custom_id.empty()) {
    return batch::LineProblem{"missing_required_parameter", "'custom_id' (a non-empty string) is required.",
                              "custom_id"};
  }
  std::string_view method;
  if (object["method"].get(method) != simdjson::SUCCESS || method != "POST") {
    return batch::LineProblem{"invalid_value", "'method' must be \"POST\".", "method"};
  }
  std::string_view url;
  if (object["url"].get(url) != simdjson::SUCCESS || url != endpoint) {
    return batch::LineProblem{"invalid_value",
                              fmt::format("'url' must be the batch's endpoint, {}.", endpoint), "url"};
  }
  dom::object body;
  if (object["body"].get(body) != simdjson::SUCCESS) {
    return batch::LineProblem{"missing_required_parameter", "'body' (an object) is required.", "body"};
  }
  return std::string(custom_id);
}

uint64_t OpenAiItemRunner::start(const batch::BatchRecord& batch, int64_t index, std::string_view line,
                                 std::function<void(batch::ItemResult)> done) {
  // The owner's requests per minute: over it, the item waits (the actor retries it next tick)
  // instead of failing; it is not a request yet, so it leaves no access line.
  if (!context_->metrics->rate_limits.admit(batch.owner, steady_now_s(), /*counted=*/false).admitted) {
    done(batch::ItemResult{batch::ItemEnd::kRetry, {}});
    return kNoRequest;
  }
  auto destination = std::make_shared<DurableItem>(std::move(done));
  BatchItem item = decode_batch_line(line, context_->state.model.id, context_->config);
  if (item.embedding) {
    if (auto error = check_embedding_support(*item.embedding, context_->engine.model_card())) {
      item.response_error = std::move(*error);
      item.embedding.reset();
    }
  }
  // The owner's key name, and the batch as the "connection": the fairness key of all its items.
  const BatchItemOrigin origin{"/v1/batches", batch.owner, "", fmt::format("batch:{}", batch.id)};
  if (!item.request && !item.embedding) {
    fail_batch_item(*context_, *destination, static_cast<size_t>(index), item, origin);
    return kNoRequest;
  }
  return submit_batch_item(context_, destination, static_cast<size_t>(index), std::move(item), origin,
                           Priority::kLow);
}

void OpenAiItemRunner::cancel(uint64_t handle) {
  if (handle != kNoRequest) context_->engine.cancel(handle);
}

std::string OpenAiItemRunner::expired_line(std::string_view custom_id) {
  JsonWriter w;
  w.begin_object().field("id", "batch_req_expired").field("custom_id", custom_id);
  w.key("response").null().key("error").begin_object();
  w.field("code", "batch_expired");
  w.field("message", "This request could not be executed before the completion window expired.");
  w.end_object().end_object();
  return w.take();
}

std::string OpenAiItemRunner::errors_json(const std::vector<batch::BatchError>& errors) {
  JsonWriter w;
  w.begin_array();
  for (const batch::BatchError& error : errors) {
    w.begin_object().field("code", error.code).field("message", error.message);
    w.key("param");
    error.param.empty() ? w.null() : w.value(error.param);
    w.key("line");
    error.line ? w.value(*error.line) : w.null();
    w.end_object();
  }
  w.end_array();
  return w.take();
}

}  // namespace troupe::net
