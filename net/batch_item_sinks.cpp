#include "net/batch_item_sinks.hpp"

#include <chrono>

#include <fmt/format.h>

#include "net/client_key.hpp"

namespace troupe::net {
namespace {

std::shared_ptr<RequestRecord> item_record(const OpenAiContext& context, std::string id,
                                           const BatchItem& item, const BatchItemOrigin& origin) {
  return std::make_shared<RequestRecord>(
      context.metrics,
      RequestLabel{"batch", origin.route, std::move(id), fmt::format("custom_id={}", item.custom_id),
                   origin.key_name,
                   item.embedding ? engine::RequestKind::kEmbedding
                   : item.request ? item.request->generate.kind()
                                  : engine::RequestKind::kGenerate});
}

// An item the engine refused or failed: its record and its output line.
void complete_with_error(BatchItemDestination& destination, size_t index, const BatchItem& item,
                         RequestRecord& record, engine::RequestId request_id, const ApiError& api,
                         std::string_view response_id) {
  record.note_request_id(request_id);
  record.fail(api, destination.abandoned());
  destination.complete(index, batch_result_json(item, api.status, response_id, error_response(api).body),
                       api.status, false);
}

// A completion item's sink: collects the whole answer, then hands its output line on.
class BatchItemSink final : public engine::RequestSink {
 public:
  BatchItemSink(std::shared_ptr<OpenAiContext> context,
                std::shared_ptr<BatchItemDestination> destination, size_t index, BatchItem item,
                const BatchItemOrigin& origin, model::ToolCallFormat tool_format)
      : context_(std::move(context)),
        destination_(std::move(destination)),
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
    record_ = item_record(*context_, identity_.id, item_, origin);
  }

  bool on_delta(engine::RequestId, engine::TokenDelta delta) override {
    collected_.add(delta);
    return !destination_->abandoned();
  }
  void on_choice_end(engine::RequestId, const engine::ChoiceEnd& end) override { collected_.end(end); }
  void on_finish(engine::RequestId request_id, engine::Completion completion) override {
    record_->note_request_id(request_id);
    record_->finish(completion, destination_->abandoned());
    const bool cancelled = completion.finish_reason == "cancelled";
    destination_->complete(index_,
                           batch_result_json(item_, 200, identity_.id,
                                             collected_.body_json(identity_, completion, token_text_)),
                           200, cancelled);
  }
  void on_error(engine::RequestId request_id, engine::RequestError error) override {
    complete_with_error(*destination_, index_, item_, *record_, request_id,
                        api_error_for(identity_.kind, error), identity_.id);
  }

 private:
  std::shared_ptr<OpenAiContext> context_;
  std::shared_ptr<BatchItemDestination> destination_;
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
  BatchEmbeddingSink(std::shared_ptr<OpenAiContext> context,
                     std::shared_ptr<BatchItemDestination> destination, size_t index,
                     BatchItem item, size_t num_inputs, const BatchItemOrigin& origin)
      : context_(std::move(context)),
        destination_(std::move(destination)),
        index_(index),
        item_(std::move(item)),
        num_inputs_(num_inputs) {
    record_ = item_record(*context_, "-", item_, origin);
  }

  bool on_delta(engine::RequestId, engine::TokenDelta) override { return !destination_->abandoned(); }
  void on_finish(engine::RequestId request_id, engine::Completion completion) override {
    record_->note_request_id(request_id);
    record_->finish(completion, destination_->abandoned());
    if (completion.embeddings.size() != num_inputs_) {
      // Cancelled (the client left): no vectors to write.
      const ApiError api{500, "the request ended before its embeddings were computed", "server_error",
                         "", "cancelled"};
      destination_->complete(index_, batch_result_json(item_, api.status, "", error_response(api).body),
                             api.status, true);
      return;
    }
    destination_->complete(index_,
                           batch_result_json(item_, 200, "",
                                             encode_embedding_response(context_->state.model.id,
                                                                       item_.embedding->output, completion)),
                           200, false);
  }
  void on_error(engine::RequestId request_id, engine::RequestError error) override {
    complete_with_error(*destination_, index_, item_, *record_, request_id,
                        api_error_for_embedding(error), "");
  }

 private:
  std::shared_ptr<OpenAiContext> context_;
  std::shared_ptr<BatchItemDestination> destination_;
  size_t index_;
  BatchItem item_;
  size_t num_inputs_;
  std::shared_ptr<RequestRecord> record_;
};

}  // namespace

engine::RequestId submit_batch_item(const std::shared_ptr<OpenAiContext>& context,
                                    std::shared_ptr<BatchItemDestination> destination, size_t index,
                                    BatchItem item, const BatchItemOrigin& origin,
                                    std::optional<Priority> priority) {
  if (item.embedding) {
    engine::GenerateRequest generate = std::move(item.embedding->generate);
    const size_t num_inputs = generate.embedding->inputs.size();
    generate.client = client_key(origin.key_name, origin.authorization, item.embedding->user,
                                 origin.connection_label);
    if (priority) generate.priority = *priority;
    auto sink = std::make_shared<BatchEmbeddingSink>(context, std::move(destination), index,
                                                     std::move(item), num_inputs, origin);
    return context->engine.submit(std::move(generate), std::move(sink));
  }
  // Before the move: the sink parses the answer for tool calls when the item asks for them.
  const model::ToolCallFormat tool_format = context->tool_format(item.request->generate);
  engine::GenerateRequest generate = std::move(item.request->generate);
  generate.client = client_key(origin.key_name, origin.authorization, item.request->user,
                               origin.connection_label);
  if (priority) generate.priority = *priority;
  auto sink = std::make_shared<BatchItemSink>(context, std::move(destination), index,
                                              std::move(item), origin, tool_format);
  return context->engine.submit(std::move(generate), std::move(sink));
}

void fail_batch_item(const OpenAiContext& context, BatchItemDestination& destination, size_t index,
                     const BatchItem& item, const BatchItemOrigin& origin) {
  const ApiError fallback{400, "invalid batch item"};
  const ApiError& error = item.response_error ? *item.response_error
                          : item.line_error   ? *item.line_error
                                              : fallback;
  item_record(context, "-", item, origin)->fail(error);
  destination.complete(index, batch_failed_item_json(item), error.status, false);
}

}  // namespace troupe::net
