#include "net/ws_chat.hpp"

#include <simdjson.h>

#include <fmt/format.h>

#include "net/client_key.hpp"
#include "net/json_writer.hpp"
#include "net/request_record.hpp"

namespace troupe::net {
namespace {

// The engine's view of one WebSocket generation. Called on the ingress thread: it only checks
// the connection's closed flag and posts the work to the connection's strand.
// The generation's record is ended here, on the ingress thread, not on the strand: a socket
// that is gone has no strand work left to do, and its generations must still be accounted for.
class WsSink final : public engine::RequestSink {
 public:
  WsSink(std::weak_ptr<WsChatConnection> connection, WsChatConnection::Post post,
         std::string client_id, std::shared_ptr<RequestRecord> record, int32_t num_choices)
      : connection_(std::move(connection)),
        post_(std::move(post)),
        client_id_(std::move(client_id)),
        record_(std::move(record)),
        indexed_(num_choices > 1) {}

  bool on_delta(engine::RequestId request_id, engine::TokenDelta delta) override {
    record_->note_request_id(request_id);
    auto connection = connection_.lock();
    if (!connection || connection->closed()) return false;
    post_([connection, id = client_id_, delta = std::move(delta), indexed = indexed_]() mutable {
      connection->emit_delta(id, std::move(delta), indexed);
    });
    return true;
  }
  void on_choice_end(engine::RequestId, const engine::ChoiceEnd& end) override {
    if (!indexed_) return;  // one choice: the done frame says it all
    auto connection = connection_.lock();
    if (!connection) return;
    post_([connection, id = client_id_, end] { connection->emit_choice_done(id, end); });
  }
  void on_finish(engine::RequestId request_id, engine::Completion completion) override {
    auto connection = connection_.lock();
    record_->note_request_id(request_id);
    record_->finish(completion, !connection || connection->closed());
    if (!connection) return;
    post_([connection, id = client_id_, completion = std::move(completion)] {
      connection->emit_done(id, completion);
    });
  }
  void on_error(engine::RequestId request_id, engine::RequestError error) override {
    auto connection = connection_.lock();
    record_->note_request_id(request_id);
    record_->fail(api_error_from(error), !connection || connection->closed());
    if (!connection) return;
    post_([connection, id = client_id_, error = std::move(error)] { connection->emit_error(id, error); });
  }

 private:
  std::weak_ptr<WsChatConnection> connection_;
  WsChatConnection::Post post_;
  std::string client_id_;
  std::shared_ptr<RequestRecord> record_;
  bool indexed_;
};

ApiError ws_refusal(int status, std::string_view code, std::string message,
                    std::string param = {}) {
  return ApiError{status, std::move(message), "invalid_request_error", std::move(param),
                  std::string(code)};
}

}  // namespace

std::string ws_delta_frame(std::string_view id, std::string_view text,
                           std::optional<int32_t> index) {
  JsonWriter w;
  w.begin_object().field("type", "delta").field("id", id);
  if (index) w.field("index", *index);
  w.field("text", text).end_object();
  return w.take();
}

std::string ws_choice_done_frame(std::string_view id, const engine::ChoiceEnd& end) {
  JsonWriter w;
  w.begin_object().field("type", "choice_done").field("id", id).field("index", end.index);
  w.field("finish_reason", end.finish_reason).field("completion_tokens", end.completion_tokens);
  w.end_object();
  return w.take();
}

std::string ws_done_frame(std::string_view id, const engine::Completion& completion) {
  JsonWriter w;
  w.begin_object().field("type", "done").field("id", id);
  w.field("finish_reason", completion.finish_reason);
  w.key("usage").begin_object();
  w.field("prompt_tokens", completion.usage.prompt_tokens);
  w.field("completion_tokens", completion.usage.completion_tokens);
  w.field("total_tokens", completion.usage.prompt_tokens + completion.usage.completion_tokens);
  w.field("cached_tokens", completion.usage.cached_prompt_tokens);
  w.end_object();
  w.key("timings").begin_object();
  w.field("ttft_ms", completion.timings.time_to_first_token_ms);
  w.field("tokens_per_s", completion.timings.decode_tokens_per_s);
  w.field("queue_ms", completion.timings.queue_ms);
  w.field("total_ms", completion.timings.total_ms);
  w.end_object();
  w.end_object();
  return w.take();
}

std::string ws_error_frame(std::string_view id, std::string_view code, std::string_view message) {
  JsonWriter w;
  w.begin_object().field("type", "error");
  w.key("id");
  id.empty() ? w.null() : w.value(id);
  w.field("code", code).field("message", message).end_object();
  return w.take();
}

static std::string next_ws_label() {
  static std::atomic<uint64_t> next{1};
  return fmt::format("ws:{}", next.fetch_add(1, std::memory_order_relaxed));
}

WsChatConnection::WsChatConnection(engine::Engine& engine, WsChatConfig config, Post post,
                                   Wake wake, std::shared_ptr<ServingMetrics> metrics,
                                   std::string key_name)
    : engine_(engine),
      config_(std::move(config)),
      post_(std::move(post)),
      wake_(std::move(wake)),
      metrics_(metrics ? std::move(metrics) : std::make_shared<ServingMetrics>()),
      connection_label_(next_ws_label()),
      key_name_(std::move(key_name)) {}

std::shared_ptr<RequestRecord> WsChatConnection::record(std::string_view client_id) const {
  return std::make_shared<RequestRecord>(
      metrics_, RequestLabel{"ws", "/v1/chat/ws", client_id.empty() ? "-" : std::string(client_id),
                             connection_label_, key_name_});
}

void WsChatConnection::push(std::string frame) {
  pending_bytes_ += frame.size();
  output_.push_back(std::move(frame));
  if (pending_bytes_ > config_.max_pending_bytes && !live_.empty()) {
    // The reader cannot keep up: stop producing for it (its own generations only).
    for (const auto& [client_id, request_id] : live_) engine_.cancel(request_id);
  }
  wake_();
}

// Every error frame answers something the client sent, so each is a refused request for the
// access log and the metrics.
void WsChatConnection::refuse(std::string_view client_id, const ApiError& error) {
  record(client_id)->fail(error);
  const std::string message = error.param.empty()
                                  ? error.message
                                  : fmt::format("{} (field '{}')", error.message, error.param);
  push(ws_error_frame(client_id, error.code, message));
}

void WsChatConnection::on_binary() {
  refuse({}, ws_refusal(400, "unsupported_frame",
                        "binary frames are not supported; send JSON text frames"));
}

void WsChatConnection::on_text(std::string_view frame) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto error = parser.parse(frame.data(), frame.size()).get(root); error) {
    refuse({}, ws_refusal(400, "invalid_json",
                          fmt::format("invalid JSON: {}", simdjson::error_message(error))));
    return;
  }
  std::string_view type;
  std::string_view id;
  if (root["type"].get_string().get(type) != simdjson::SUCCESS) {
    refuse({}, ws_refusal(400, "invalid_message",
                          "'type' must be a string (\"chat\" or \"cancel\")"));
    return;
  }
  if (root["id"].get_string().get(id) != simdjson::SUCCESS || id.empty() || id.size() > 256) {
    refuse({}, ws_refusal(400, "invalid_message",
                          "'id' must be a non-empty string of at most 256 bytes"));
    return;
  }
  const std::string client_id(id);
  if (type == "chat") {
    start_chat(frame, client_id);
  } else if (type == "cancel") {
    cancel_chat(client_id);
  } else {
    refuse(client_id,
           ws_refusal(400, "unknown_type", fmt::format("unknown message type '{}'", type)));
  }
}

void WsChatConnection::start_chat(std::string_view frame, const std::string& client_id) {
  if (shutting_down_) {
    refuse(client_id, ws_refusal(503, "draining", "the server is shutting down"));
    return;
  }
  if (live_.contains(client_id)) {
    refuse(client_id,
           ws_refusal(400, "duplicate_id", "a generation with this id is still running"));
    return;
  }
  if (live_.size() >= config_.max_live_generations) {
    refuse(client_id, ws_refusal(429, "too_many_generations",
                                 fmt::format("at most {} generations may run at once on one socket",
                                             config_.max_live_generations)));
    return;
  }
  ParsedCompletion parsed =
      parse_completion_request(ApiKind::kChat, frame, config_.served_model_id, config_.api);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    if (error->code.empty()) error->code = "invalid_request";
    refuse(client_id, *error);
    return;
  }
  CompletionRequest& request = std::get<CompletionRequest>(parsed);
  // The WS frames carry text deltas only: calls would arrive as raw call text, so tools that
  // would be parsed are refused here (tool_choice "none" only renders them, which is fine).
  if (request.generate.parses_tool_calls()) {
    refuse(client_id, ws_refusal(400, "invalid_request",
                                 "'tools' is not supported on the WebSocket chat (use "
                                 "/v1/chat/completions, or tool_choice \"none\")",
                                 "tools"));
    return;
  }
  // The key's requests per minute, as on HTTP (net/rate_limits.hpp).
  if (const RateDecision admission = metrics_->rate_limits.admit(key_name_, steady_now_s());
      !admission.admitted) {
    refuse(client_id, rate_limit_error(admission, key_name_));
    return;
  }
  request.generate.origin = engine::RequestOrigin::kWebSocket;
  request.generate.client_label = client_id;
  request.generate.client = client_key(key_name_, "", request.user, connection_label_);
  auto sink = std::make_shared<WsSink>(weak_from_this(), post_, client_id, record(client_id),
                                       request.n);
  // Insert before submit: the sink may answer (and be posted back) before submit returns.
  live_[client_id] = 0;
  live_[client_id] = engine_.submit(std::move(request.generate), std::move(sink));
}

void WsChatConnection::cancel_chat(const std::string& client_id) {
  auto it = live_.find(client_id);
  if (it == live_.end()) {
    refuse(client_id, ws_refusal(404, "unknown_id", "no running generation has this id"));
    return;
  }
  engine_.cancel(it->second);  // the generation ends with a "done" frame, finish_reason cancelled
}

void WsChatConnection::on_shutdown() { shutting_down_ = true; }

void WsChatConnection::on_closed() {
  closed_.store(true, std::memory_order_release);
  for (const auto& [client_id, request_id] : live_) engine_.cancel(request_id);
}

void WsChatConnection::emit_delta(const std::string& client_id, engine::TokenDelta delta,
                                  bool indexed) {
  if (closed() || delta.text.empty()) return;
  push(ws_delta_frame(client_id, delta.text, indexed ? std::optional<int32_t>(delta.index) : std::nullopt));
}

void WsChatConnection::emit_choice_done(const std::string& client_id, const engine::ChoiceEnd& end) {
  if (!closed()) push(ws_choice_done_frame(client_id, end));
}

void WsChatConnection::emit_done(const std::string& client_id, const engine::Completion& completion) {
  live_.erase(client_id);
  if (!closed()) push(ws_done_frame(client_id, completion));
}

void WsChatConnection::emit_error(const std::string& client_id, const engine::RequestError& error) {
  live_.erase(client_id);
  if (closed()) return;
  const ApiError api = api_error_from(error);
  push(ws_error_frame(client_id, api.code.empty() ? engine::to_string(error.code) : api.code, error.message));
}

WebSocketFactory ws_chat_factory(engine::Engine& engine, WsChatConfig config,
                                 std::shared_ptr<ServingMetrics> metrics) {
  if (!metrics) metrics = std::make_shared<ServingMetrics>();
  return [&engine, config = std::move(config), metrics](
             WebSocketEndpoint::Post post, WebSocketEndpoint::Wake wake, const WebSocketPeer& peer) {
    return std::make_shared<WsChatConnection>(engine, config, std::move(post), std::move(wake),
                                              metrics, peer.key_name);
  };
}

std::deque<std::string> WsChatConnection::take_output() {
  std::deque<std::string> out;
  out.swap(output_);
  pending_bytes_ = 0;
  return out;
}

}  // namespace troupe::net
