#include "net/batch_runner.hpp"

#include <chrono>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "net/batch_codec.hpp"
#include "net/client_key.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {
namespace {

// The results of one batch, emitted in input order.
class BatchRun {
 public:
  BatchRun(std::shared_ptr<ResponseStream> out, bool jsonl, size_t num_items)
      : out_(std::move(out)), jsonl_(jsonl), results_(num_items) {}

  ResponseStream& out() { return *out_; }

  void complete(size_t index, std::string line) {
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

// Each item is a request of its own for the access log and the metrics.
std::shared_ptr<RequestRecord> item_record(const OpenAiContext& context, std::string id,
                                           const BatchItem& item, std::string key_name) {
  return std::make_shared<RequestRecord>(
      context.metrics,
      RequestLabel{"batch", "/v1/batch", std::move(id),
                   fmt::format("custom_id={}", item.custom_id), std::move(key_name),
                   item.embedding ? engine::RequestKind::kEmbedding
                   : item.request ? item.request->generate.kind()
                                  : engine::RequestKind::kGenerate});
}

// An item the engine refused or failed: its record and its output line.
void complete_with_error(BatchRun& run, size_t index, const BatchItem& item, RequestRecord& record,
                         engine::RequestId request_id, const ApiError& api,
                         std::string_view response_id) {
  record.note_request_id(request_id);
  record.fail(api, run.out().client_gone());
  run.complete(index, batch_result_json(item, api.status, response_id, error_response(api).body));
}

// One item's sink: collects the whole answer, then hands its output line to the run.
class BatchItemSink final : public engine::RequestSink {
 public:
  BatchItemSink(std::shared_ptr<OpenAiContext> context, std::shared_ptr<BatchRun> run, size_t index,
                BatchItem item, std::string key_name, model::ToolCallFormat tool_format)
      : context_(std::move(context)),
        run_(std::move(run)),
        index_(index),
        item_(std::move(item)),
        token_text_(context_->token_text()),
        collected_(item_.request->n, logprobs_output(*item_.request), tool_format,
                   echo_options(*item_.request)) {
    identity_.kind = item_.request->kind;
    identity_.id = make_response_id(identity_.kind);
    identity_.created = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    identity_.model = context_->state.model.id;
    record_ = item_record(*context_, identity_.id, item_, std::move(key_name));
  }

  bool on_delta(engine::RequestId, engine::TokenDelta delta) override {
    collected_.add(delta);
    return !run_->out().client_gone();
  }
  void on_choice_end(engine::RequestId, const engine::ChoiceEnd& end) override { collected_.end(end); }
  void on_finish(engine::RequestId request_id, engine::Completion completion) override {
    record_->note_request_id(request_id);
    record_->finish(completion, run_->out().client_gone());
    run_->complete(index_, batch_result_json(item_, 200, identity_.id,
                                             collected_.body_json(identity_, completion, token_text_)));
  }
  void on_error(engine::RequestId request_id, engine::RequestError error) override {
    complete_with_error(*run_, index_, item_, *record_, request_id,
                        api_error_for(identity_.kind, error), identity_.id);
  }

 private:
  std::shared_ptr<OpenAiContext> context_;
  std::shared_ptr<BatchRun> run_;
  size_t index_;
  BatchItem item_;
  TokenTextFn token_text_;
  ResponseIdentity identity_;
  std::shared_ptr<RequestRecord> record_;
  CollectedChoices collected_;
};

// An embeddings item's sink: the vectors, shaped as the item asked, in its output line.
class BatchEmbeddingSink final : public engine::RequestSink {
 public:
  // num_inputs: the item's (its request was moved into the engine).
  BatchEmbeddingSink(std::shared_ptr<OpenAiContext> context, std::shared_ptr<BatchRun> run,
                     size_t index, BatchItem item, size_t num_inputs, std::string key_name)
      : context_(std::move(context)),
        run_(std::move(run)),
        index_(index),
        item_(std::move(item)),
        num_inputs_(num_inputs) {
    record_ = item_record(*context_, "-", item_, std::move(key_name));
  }

  bool on_delta(engine::RequestId, engine::TokenDelta) override { return !run_->out().client_gone(); }
  void on_finish(engine::RequestId request_id, engine::Completion completion) override {
    record_->note_request_id(request_id);
    record_->finish(completion, run_->out().client_gone());
    if (completion.embeddings.size() != num_inputs_) {
      // Cancelled (the client left): no vectors to write.
      const ApiError api{500, "the request ended before its embeddings were computed", "server_error",
                         "", "cancelled"};
      run_->complete(index_, batch_result_json(item_, api.status, "", error_response(api).body));
      return;
    }
    run_->complete(index_, batch_result_json(item_, 200, "",
                                             encode_embedding_response(context_->state.model.id,
                                                                       item_.embedding->output,
                                                                       completion)));
  }
  void on_error(engine::RequestId request_id, engine::RequestError error) override {
    complete_with_error(*run_, index_, item_, *record_, request_id, api_error_for_embedding(error), "");
  }

 private:
  std::shared_ptr<OpenAiContext> context_;
  std::shared_ptr<BatchRun> run_;
  size_t index_;
  BatchItem item_;
  size_t num_inputs_;
  std::shared_ptr<RequestRecord> record_;
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
  // Failed items first, so that only the engine's thread completes items afterwards.
  std::vector<size_t> valid;
  for (size_t i = 0; i < num_items; ++i) {
    if (batch.items[i].request || batch.items[i].embedding) {
      valid.push_back(i);
    } else {
      const BatchItem& item = batch.items[i];
      const ApiError fallback{400, "invalid batch item"};
      item_record(*context, "-", item, request.api_key_name)
          ->fail(item.response_error ? *item.response_error
                                     : item.line_error ? *item.line_error : fallback);
      run->complete(i, batch_failed_item_json(item));
    }
  }
  auto ids = std::make_shared<std::vector<engine::RequestId>>();
  ids->reserve(valid.size());
  for (const size_t i : valid) {
    if (batch.items[i].embedding) {
      engine::GenerateRequest generate = std::move(batch.items[i].embedding->generate);
      const size_t num_inputs = generate.embedding->inputs.size();
      generate.client = client_key(request.api_key_name, request.header("Authorization"),
                                   batch.items[i].embedding->user,
                                   http_connection_label(request.connection_id));
      auto sink = std::make_shared<BatchEmbeddingSink>(context, run, i, std::move(batch.items[i]),
                                                       num_inputs, request.api_key_name);
      ids->push_back(context->engine.submit(std::move(generate), std::move(sink)));
      continue;
    }
    // Before the move: the sink parses the answer for tool calls when the item asks for them.
    const model::ToolCallFormat tool_format = context->tool_format(batch.items[i].request->generate);
    engine::GenerateRequest generate = std::move(batch.items[i].request->generate);
    generate.client = client_key(request.api_key_name, request.header("Authorization"),
                                 batch.items[i].request->user,
                                 http_connection_label(request.connection_id));
    auto sink = std::make_shared<BatchItemSink>(context, run, i, std::move(batch.items[i]),
                                                request.api_key_name, tool_format);
    ids->push_back(context->engine.submit(std::move(generate), std::move(sink)));
  }
  // Not an access line: each item gets its own when it ends.
  spdlog::info("batch /v1/batch received items={} submitted={}", num_items, valid.size());
  out->on_client_gone([context, ids] {
    for (const engine::RequestId id : *ids) context->engine.cancel(id);
  });
}

}  // namespace troupe::net
