// Fuzzes the /v1/batch codec (net/batch_codec.*): JSONL and {"requests":[...]} bodies in, batch
// output lines out; and the durable batch's line check (net/batch_item_runner.hpp). Input: one byte choosing the Content-Type, then the body.
// Properties: an error is a 400 or 413 with a JSON body; at most max_batch_items items; every
// item is exactly one of a request, a response error or a line error; a decoded item is not
// streamed and carries its custom_id; every output line (failed or answered) is valid JSON on
// one line, whatever bytes the custom_id held.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "net/batch_codec.hpp"
#include "net/batch_item_runner.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  static constexpr std::array<std::string_view, 6> kContentTypes = {
      "application/jsonl", "application/json", "application/x-ndjson", "",
      "text/plain", "application/json; charset=utf-8"};
  const std::string_view content_type = kContentTypes[data[0] % kContentTypes.size()];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  net::OpenAiApiConfig config;
  config.max_batch_items = 64;  // the limit is reachable within -max_len

  // The durable batch's file check (net/batch_item_runner.hpp) on every line: a non-empty
  // custom_id that the item decoder agrees with, or a problem with a code and a message.
  for (std::string_view rest = body; !rest.empty();) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    auto checked = net::check_batch_input_line(line, "/v1/chat/completions");
    if (const auto* problem = std::get_if<batch::LineProblem>(&checked)) {
      TROUPE_FUZZ_CHECK(!problem->code.empty() && !problem->message.empty(), "an unnamed problem");
      continue;
    }
    const std::string& custom_id = std::get<std::string>(checked);
    TROUPE_FUZZ_CHECK(!custom_id.empty(), "an empty custom_id passed");
    const net::BatchItem item = net::decode_batch_line(line, "smollm2", config);
    TROUPE_FUZZ_CHECK(item.custom_id == custom_id, "the decoder read another custom_id");
  }

  auto parsed = net::parse_batch(body, content_type, "smollm2", config);
  if (const auto* error = std::get_if<net::ApiError>(&parsed)) {
    TROUPE_FUZZ_CHECK(error->status == 400 || error->status == 413, "status %d", error->status);
    TROUPE_FUZZ_CHECK(fuzz::is_valid_json(net::error_response(*error).body), "error body");
    return;
  }
  const net::ParsedBatch& batch = std::get<net::ParsedBatch>(parsed);
  TROUPE_FUZZ_CHECK(!batch.items.empty(), "an empty batch was accepted");
  TROUPE_FUZZ_CHECK(batch.items.size() <= static_cast<size_t>(config.max_batch_items),
                    "%zu items", batch.items.size());
  for (const net::BatchItem& item : batch.items) {
    const int kinds = int(item.request.has_value()) + int(item.response_error.has_value()) +
                      int(item.line_error.has_value());
    TROUPE_FUZZ_CHECK(kinds == 1, "item is %d things at once", kinds);
    std::string line;
    if (item.request) {
      TROUPE_FUZZ_CHECK(!item.request->stream && !item.request->include_usage, "streamed item");
      TROUPE_FUZZ_CHECK(item.request->generate.origin == engine::RequestOrigin::kBatch, "origin");
      TROUPE_FUZZ_CHECK(item.request->generate.client_label == item.custom_id, "label");
      // Items may ask for n choices (issue 18), within the same bound as the HTTP endpoints.
      TROUPE_FUZZ_CHECK(item.request->n >= 1 && item.request->n <= config.max_n, "n %d in a batch",
                        item.request->n);
      line = net::batch_result_json(item, 200, "cmpl-1", R"({"ok":true})");
    } else {
      line = net::batch_failed_item_json(item);
    }
    TROUPE_FUZZ_CHECK(line.find('\n') == std::string::npos, "output line holds a newline");
    TROUPE_FUZZ_CHECK(fuzz::is_valid_json(line), "output line is not JSON: %s", line.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("parse_batch", size, 10.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
