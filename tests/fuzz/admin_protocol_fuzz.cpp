// Fuzzes the admin socket protocol (net/admin_protocol.*): the lines a client sends, parsed and
// executed the way AdminServer does (split at '\n', trimmed, parsed, run against the engine).
// Input: byte 0 (bit 0: the TCP listener, which requires the token "s3cret"); the rest is the
// byte stream of one connection.
// Properties: every reply is valid JSON on one line; without the right token nothing but
// "unauthorized" comes back and nothing runs; a watch interval is within its bounds; a cancel
// reaches the engine with the id it named.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "net/admin_protocol.hpp"
#include "tests/fuzz/fuzz_engine.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

// AdminServer's trim (net/admin_server.cpp): surrounding ASCII whitespace.
std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

void check_reply(const std::string& reply) {
  TROUPE_FUZZ_CHECK(reply.find('\n') == std::string::npos, "reply spans lines: %s", reply.c_str());
  TROUPE_FUZZ_CHECK(fuzz::is_valid_json(reply), "reply is not JSON: %s", reply.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

namespace {

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::optional<std::string> token =
      (data[0] & 1) ? std::optional<std::string>("s3cret") : std::nullopt;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  fuzz::FuzzEngine engine;
  engine.odd_label = std::string(stream.substr(0, 64));  // arbitrary bytes in `requests`

  while (!stream.empty()) {
    const size_t end = stream.find('\n');
    const std::string_view line = trim(stream.substr(0, end));
    stream = end == std::string_view::npos ? std::string_view{} : stream.substr(end + 1);
    if (line.empty()) continue;

    auto parsed = net::parse_admin_command(line, token);
    if (const auto* error = std::get_if<net::AdminError>(&parsed)) {
      check_reply(net::admin_error_reply(error->message));
      if (error->kind == net::AdminErrorKind::kUnauthorized) {
        TROUPE_FUZZ_CHECK(token.has_value(), "unauthorized without a token to check");
        TROUPE_FUZZ_CHECK(error->message == "unauthorized", "reveals '%s'", error->message.c_str());
        break;  // the server closes a TCP connection here
      }
      continue;
    }
    const auto& command = std::get<net::AdminCommand>(parsed);
    if (const auto* watch = std::get_if<net::AdminWatch>(&command)) {
      TROUPE_FUZZ_CHECK(watch->interval >= net::kMinWatchInterval &&
                            watch->interval <= std::chrono::hours(1),
                        "watch interval %lld ms", static_cast<long long>(watch->interval.count()));
      continue;  // a stream of stats replies, run by the server
    }
    const net::AdminOutcome outcome = net::execute_admin_command(command, engine);
    check_reply(outcome.reply);
    TROUPE_FUZZ_CHECK(outcome.drain_requested == std::holds_alternative<net::AdminDrain>(command),
                      "drain_requested mismatch");
    if (std::holds_alternative<net::AdminLogLevel>(command)) {
      spdlog::set_level(spdlog::level::off);  // keep the run quiet
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("admin_protocol", size, 20.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
