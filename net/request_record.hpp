// The one place where a request's end is accounted for. Every request any surface serves (the
// OpenAI routes streamed or not, n > 1 as one request, each WebSocket chat, each /v1/batch item)
// ends in exactly one access-log line and exactly one count:
//   troupe:request_success_total{finished_reason="stop"|"length"|"cancelled"}  a finish, whoever
//       cancelled it (the client by a cancel message or by going away, before or after its first
//       token; the admin socket; the server draining);
//   troupe:request_failure_total  an error or a refusal (invalid request, queue full, draining,
//       a failed step);
// and one count of its kind, troupe:requests_by_kind_total{kind="generate"|"embedding"|"score"};
// a finish also spends the request's tokens from its API key's tokens per minute
// (ServingMetrics::rate_limits).
// A surface creates one RequestRecord per request as soon as it knows it has one, and ends it
// from the sink's final call (the engine makes exactly one, even after the client left) or from
// its own refusal before the engine saw the request. The first end counts; later ones are
// ignored. A record destroyed without an end (a bug elsewhere) is logged as a warning and
// counted as a failure rather than lost.
//
// Access line (spdlog info):
//   <surface> <route> id=<id>[ <detail>][ key=<key name>] kind=<kind> request=<engine id> status=<s> prompt_tokens=<n>
//   completion_tokens=<n> ttft_ms=<ms> total_ms=<ms> finish=<reason or error code>
//   [ param=<field>][ client_gone][: <error message>]
//
// Thread-safety: every member may be called from any thread (an io thread refusing a request,
// the engine's ingress thread in a sink, a WebSocket strand); ending is one atomic exchange.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "actors/messages/engine_types.hpp"
#include "net/http_types.hpp"
#include "net/metrics.hpp"

namespace troupe::net {

struct RequestLabel {
  std::string surface;  // "http", "ws", "batch"
  std::string route;    // "/v1/chat/completions", "/v1/chat/ws", "/v1/batch", ...
  std::string id;       // what the client knows it by: response id, chat id ("-": none yet)
  std::string detail;   // pre-formatted extra fields ("n=2", "custom_id=x"), or empty
  std::string key_name;  // the API key's name (never the key), or empty when none was needed
  // What the request computes (issue 37): counted per kind, named on the access line.
  engine::RequestKind kind = engine::RequestKind::kGenerate;
};

class RequestRecord {
 public:
  RequestRecord(std::shared_ptr<ServingMetrics> metrics, RequestLabel label);
  ~RequestRecord();
  RequestRecord(const RequestRecord&) = delete;
  RequestRecord& operator=(const RequestRecord&) = delete;

  // The engine's id for the access line (the first one noted; n > 1 logs choice 0's).
  void note_request_id(engine::RequestId request_id);
  // The latency histograms of one finished engine request (n > 1: once per choice). Also keeps
  // the earliest time to first token for the access line.
  void observe(const engine::Completion& completion);

  // Ends the request as finished. False when it had already ended (nothing recorded).
  bool finish(std::string_view finish_reason, const engine::Usage& usage, bool client_gone);
  // observe() and finish() of a single engine request.
  bool finish(const engine::Completion& completion, bool client_gone);
  // Ends the request with an error or a refusal. False when it had already ended.
  bool fail(const ApiError& error, bool client_gone = false);

  bool ended() const { return ended_.load(std::memory_order_acquire); }

 private:
  void write_line(int status, std::string_view finish, const engine::Usage& usage,
                  const ApiError* error, bool client_gone) const;

  const std::shared_ptr<ServingMetrics> metrics_;
  const RequestLabel label_;
  const std::chrono::steady_clock::time_point start_time_ = std::chrono::steady_clock::now();
  std::atomic<engine::RequestId> request_id_{0};
  std::atomic<double> first_token_ms_{-1};
  std::atomic<bool> ended_{false};
};

}  // namespace troupe::net
