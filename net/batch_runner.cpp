#include "net/batch_runner.hpp"

#include <chrono>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "net/batch_codec.hpp"
#include "net/batch_item_sinks.hpp"
#include "net/client_key.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {
namespace {

// The results of one batch, emitted in input order.
class BatchRun final : public BatchItemDestination {
 public:
  BatchRun(std::shared_ptr<ResponseStream> out, bool jsonl, size_t num_items)
      : out_(std::move(out)), jsonl_(jsonl), results_(num_items) {}

  bool abandoned() const override { return out_->client_gone(); }

  // Every item has a line in the answer, cancelled ones too (the client that left never reads it).
  void complete(size_t index, std::string line, int /*status*/, bool /*cancelled*/) override {
    {
      std::lock_guard lock(mutex_);
      results_[index] = std::move(line);
      ++num_done_;
    }
    flush();
  }

 private:
  // NOTE: writing may re-enter complete() on this thread (a write that finds the client gone
  // cancels the other items, whose sinks may finish at once), so lines are collected under the
  // lock and written outside it, and only one thread writes at a time (`flushing_`).
  void flush() {
    {
      std::lock_guard lock(mutex_);
      flush_due_ = true;
      if (flushing_) return;
      flushing_ = true;
    }
    while (true) {
      std::string lines;
      bool all_done = false;
      {
        std::lock_guard lock(mutex_);
        if (!flush_due_) {
          flushing_ = false;
          return;
        }
        flush_due_ = false;
        if (jsonl_) {
          while (next_ < results_.size() && results_[next_]) {
            lines += *results_[next_];
            lines += '\n';
            results_[next_++].reset();
          }
          all_done = next_ == results_.size() && !ended_;
        } else {
          all_done = num_done_ == results_.size() && !ended_;
          if (all_done) lines = whole_json();
        }
        ended_ = ended_ || all_done;
      }
      emit(std::move(lines), all_done);
    }
  }

  void emit(std::string lines, bool all_done) {
    if (!jsonl_) {
      if (all_done) out_->respond(json_response(200, std::move(lines)));
      return;
    }
    if (!lines.empty()) out_->write(std::move(lines));
    if (all_done) out_->end();
  }

  std::string whole_json() const {
    JsonWriter w;
    w.begin_object().field("object", "list").key("data").begin_array();
    for (const auto& result : results_) w.raw(*result);
    w.end_array().end_object();
    return w.take();
  }

  std::shared_ptr<ResponseStream> out_;
  const bool jsonl_;
  std::mutex mutex_;
  std::vector<std::optional<std::string>> results_;
  size_t num_done_ = 0;
  size_t next_ = 0;  // JSONL: the first line not yet written
  bool flushing_ = false;
  bool flush_due_ = false;
  bool ended_ = false;
};

// Embedding items the served model cannot answer (no backend support, too many dimensions)
// fail like any other invalid item.
void check_embedding_items(const OpenAiContext& context, ParsedBatch& batch) {
  for (BatchItem& item : batch.items) {
    if (!item.embedding) continue;
    if (auto error = check_embedding_support(*item.embedding, context.engine.model_card())) {
      item.response_error = std::move(*error);
      item.embedding.reset();
    }
  }
}

}  // namespace

void handle_batch(const std::shared_ptr<OpenAiContext>& context, const HttpRequest& request,
                  const std::shared_ptr<ResponseStream>& out) {
  auto parsed = parse_batch(request.body, request.header("Content-Type"),
                            context->state.model.id, context->config);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    context->record("/v1/batch", "-", {}, request.api_key_name)->fail(*error);
    out->respond(error_response(*error));
    return;
  }
  ParsedBatch& batch = std::get<ParsedBatch>(parsed);
  check_embedding_items(*context, batch);
  const size_t num_items = batch.items.size();
  auto run = std::make_shared<BatchRun>(out, batch.jsonl, num_items);
  if (batch.jsonl) {
    HttpResponse head;
    head.content_type = "application/jsonl";
    out->begin_stream(std::move(head));
  }
  const BatchItemOrigin origin{"/v1/batch", request.api_key_name, std::string(request.header("Authorization")),
                               http_connection_label(request.connection_id)};
  // Failed items first, so that only the engine's thread completes items afterwards.
  // Each item is a request of the key's requests per minute: one over the limit fails alone.
  std::vector<size_t> valid;
  for (size_t i = 0; i < num_items; ++i) {
    BatchItem& item = batch.items[i];
    if (item.request || item.embedding) {
      if (auto refused = context->admit(origin.key_name)) {
        item.response_error = std::move(*refused);
        item.request.reset();
        item.embedding.reset();
      }
    }
    if (item.request || item.embedding) {
      valid.push_back(i);
    } else {
      fail_batch_item(*context, *run, i, item, origin);
    }
  }
  auto ids = std::make_shared<std::vector<engine::RequestId>>();
  ids->reserve(valid.size());
  for (const size_t i : valid) {
    ids->push_back(submit_batch_item(context, run, i, std::move(batch.items[i]), origin));
  }
  // Not an access line: each item gets its own when it ends.
  spdlog::info("batch /v1/batch received items={} submitted={}", num_items, valid.size());
  out->on_client_gone([context, ids] {
    for (const engine::RequestId id : *ids) context->engine.cancel(id);
  });
}

}  // namespace troupe::net
