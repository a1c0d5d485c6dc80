#include "net/request_record.hpp"

#include <spdlog/spdlog.h>

namespace troupe::net {

RequestRecord::RequestRecord(std::shared_ptr<ServingMetrics> metrics, RequestLabel label)
    : metrics_(std::move(metrics)), label_(std::move(label)) {}

RequestRecord::~RequestRecord() {
  if (ended()) return;
  // Every path ends its record; one that did not is a bug, but the request still counts.
  spdlog::warn("{} {} id={} ended without a final event (a bug): counted as failed", label_.surface,
               label_.route, label_.id);
  const ApiError abandoned{500, "no final event", "server_error", "", "abandoned"};
  (void)fail(abandoned);
}

void RequestRecord::note_request_id(engine::RequestId request_id) {
  engine::RequestId unknown = 0;
  request_id_.compare_exchange_strong(unknown, request_id, std::memory_order_relaxed);
}

void RequestRecord::observe(const engine::Completion& completion) {
  metrics_->observe_latencies(completion);
  if (completion.usage.completion_tokens <= 0) return;
  const double ttft_ms = completion.timings.time_to_first_token_ms;
  double seen = first_token_ms_.load(std::memory_order_relaxed);
  while ((seen < 0 || ttft_ms < seen) &&
         !first_token_ms_.compare_exchange_weak(seen, ttft_ms, std::memory_order_relaxed)) {
  }
}

bool RequestRecord::finish(std::string_view finish_reason, const engine::Usage& usage,
                           bool client_gone) {
  if (ended_.exchange(true, std::memory_order_acq_rel)) return false;
  metrics_->count_finished(finish_reason);
  metrics_->count_kind(label_.kind);
  // The key's tokens per minute are spent as requests end, when their usage is known.
  if (!label_.key_name.empty()) {
    metrics_->rate_limits.charge_tokens(
        label_.key_name, int64_t{usage.prompt_tokens} + usage.completion_tokens, steady_now_s());
  }
  write_line(200, finish_reason, usage, nullptr, client_gone);
  return true;
}

bool RequestRecord::finish(const engine::Completion& completion, bool client_gone) {
  if (ended()) return false;
  observe(completion);
  return finish(completion.finish_reason, completion.usage, client_gone);
}

bool RequestRecord::fail(const ApiError& error, bool client_gone) {
  if (ended_.exchange(true, std::memory_order_acq_rel)) return false;
  metrics_->count_failed();
  metrics_->count_kind(label_.kind);
  write_line(error.status, error.code.empty() ? std::string_view("error") : error.code, {}, &error,
             client_gone);
  return true;
}

void RequestRecord::write_line(int status, std::string_view finish, const engine::Usage& usage,
                               const ApiError* error, bool client_gone) const {
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_time_)
          .count();
  const bool has_param = error != nullptr && !error->param.empty();
  spdlog::info(
      "{} {} id={}{}{}{}{} kind={} request={} status={} prompt_tokens={} completion_tokens={} "
      "ttft_ms={:.1f} total_ms={:.1f} finish={}{}{}{}{}",
      label_.surface, label_.route, label_.id, label_.detail.empty() ? "" : " ", label_.detail,
      label_.key_name.empty() ? "" : " key=", label_.key_name, engine::to_string(label_.kind),
      request_id_.load(std::memory_order_relaxed), status, usage.prompt_tokens,
      usage.completion_tokens, first_token_ms_.load(std::memory_order_relaxed), total_ms, finish,
      has_param ? " param=" : "", has_param ? std::string_view(error->param) : "",
      client_gone ? " client_gone" : "",
      error != nullptr ? fmt::format(": {}", error->message) : std::string());
}

}  // namespace troupe::net
