// Fuzzes the WebSocket chat protocol (net/ws_chat.*) without a socket: a sequence of client
// frames goes to one WsChatConnection backed by the synchronous FuzzEngine.
// Input: byte 0 scripts how generations end (FuzzEngine::script); byte 1 holds flags (bit 0:
// the engine runs after every frame instead of only at the end; bit 1: the socket closes
// before the engine finishes; bits 4-7: the frame after which the server starts shutting
// down); the rest is frames separated by 0x1E (an empty frame stands for a binary frame).
// Properties: every frame the server sends is valid JSON (text frames must be UTF-8) with a
// string "type"; once the engine has finished every generation, the connection is idle; the
// engine never sees more live generations than max_live_generations.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "net/ws_chat.hpp"
#include "tests/fuzz/fuzz_engine.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

void check_frames(std::deque<std::string> frames) {
  simdjson::dom::parser parser;
  for (const std::string& frame : frames) {
    simdjson::dom::element root;
    TROUPE_FUZZ_CHECK(parser.parse(simdjson::padded_string(frame)).get(root) == simdjson::SUCCESS,
                      "frame is not JSON: %s", frame.c_str());
    std::string_view type;
    TROUPE_FUZZ_CHECK(root["type"].get(type) == simdjson::SUCCESS, "frame without a type: %s",
                      frame.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

namespace {

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size < 2) return;
  fuzz::FuzzEngine engine;
  engine.script = data[0];
  const uint8_t flags = data[1];
  const bool run_each_frame = flags & 1;
  const bool close_early = flags & 2;
  const size_t shutdown_after = flags >> 4;
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);

  net::WsChatConfig config;
  config.served_model_id = "smollm2";
  config.max_live_generations = 4;  // reachable within a few frames
  config.max_pending_bytes = 512;   // ... and so is the slow-reader cut-off
  std::deque<std::function<void()>> posted;
  auto connection = std::make_shared<net::WsChatConnection>(
      engine, config, [&posted](std::function<void()> work) { posted.push_back(std::move(work)); },
      [] {});
  auto run_posted = [&posted] {
    while (!posted.empty()) {
      auto work = std::move(posted.front());
      posted.pop_front();
      work();
    }
  };

  size_t frame_index = 0;
  while (true) {
    const size_t end = rest.find('\x1e');
    const std::string_view frame = rest.substr(0, end);
    if (frame.empty()) {
      connection->on_binary();
    } else {
      connection->on_text(frame);
    }
    TROUPE_FUZZ_CHECK(connection->num_live_generations() <= config.max_live_generations,
                      "%zu live generations", connection->num_live_generations());
    if (++frame_index == shutdown_after) connection->on_shutdown();
    if (run_each_frame) {
      engine.run_until_idle();
      run_posted();
    }
    check_frames(connection->take_output());
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  if (close_early) connection->on_closed();
  engine.run_until_idle();
  run_posted();
  TROUPE_FUZZ_CHECK(engine.num_pending() == 0, "the engine still has work");
  TROUPE_FUZZ_CHECK(connection->idle(), "%zu generations never ended",
                    connection->num_live_generations());
  check_frames(connection->take_output());
  connection->on_closed();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("ws_chat", size, 20.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
