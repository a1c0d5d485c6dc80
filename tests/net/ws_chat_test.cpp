// Tests for net/ws_chat.cpp: the WebSocket chat protocol driven directly, without a socket.
//
// The FakeEngine calls sinks from its own thread, as the real ingress does. The connection's
// strand is stood in for by `ManualStrand`: Post queues the work and the test thread runs it
// (pump), so every WsChatConnection member runs on one thread, as the contract requires.
#include "net/ws_chat.hpp"

#include <simdjson.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/net/chat_frame.hpp"
#include "tests/net/fake_engine.hpp"

namespace troupe::net {
namespace {

using testing::FakeEngine;

using Frame = testing::ChatFrame;
using testing::parse_chat_frame;

// The connection's strand: work posted from the engine's thread waits here until the test
// thread runs it.
class ManualStrand {
 public:
  WebSocketEndpoint::Post post() {
    return [this](std::function<void()> work) {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(work));
    };
  }
  // Runs what is queued now; false when nothing was.
  bool run_queued() {
    std::deque<std::function<void()>> work;
    {
      std::lock_guard lock(mutex_);
      work.swap(queue_);
    }
    for (auto& w : work) w();
    return !work.empty();
  }

 private:
  std::mutex mutex_;
  std::deque<std::function<void()>> queue_;
};

class WsChatTest : public ::testing::Test {
 protected:
  std::shared_ptr<WsChatConnection> connect(WsChatConfig config = {}, std::string key_name = {}) {
    config.served_model_id = "test-model";
    return std::make_shared<WsChatConnection>(engine_, std::move(config), strand_.post(),
                                              [this] { ++num_wakes_; }, metrics_,
                                              std::move(key_name));
  }

  // Runs posted work and collects output until `done(frames)` holds (or 5 s pass).
  template <typename Done>
  bool pump_until(WsChatConnection& connection, Done done,
                  std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return FakeEngine::eventually(
        [&] {
          strand_.run_queued();
          for (std::string& raw : connection.take_output()) frames_.push_back(parse_chat_frame(raw));
          return done(frames_);
        },
        timeout);
  }
  // Collects what is already there (runs queued work once).
  void drain(WsChatConnection& connection) {
    strand_.run_queued();
    for (std::string& raw : connection.take_output()) frames_.push_back(parse_chat_frame(raw));
  }

  static size_t count(const std::vector<Frame>& frames, std::string_view type,
                      std::string_view id) {
    return static_cast<size_t>(std::count_if(frames.begin(), frames.end(), [&](const Frame& f) {
      return f.type == type && f.id == id;
    }));
  }
  static const Frame* find(const std::vector<Frame>& frames, std::string_view type,
                           std::string_view id) {
    for (const Frame& f : frames) {
      if (f.type == type && f.id == id) return &f;
    }
    return nullptr;
  }
  static std::string text_of(const std::vector<Frame>& frames, std::string_view id) {
    std::string text;
    for (const Frame& f : frames) {
      if (f.type == "delta" && f.id == id) text += f.text;
    }
    return text;
  }
  auto done_for(std::vector<std::string> ids) {
    return [ids = std::move(ids)](const std::vector<Frame>& frames) {
      return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) {
        return count(frames, "done", id) + count(frames, "error", id) > 0;
      });
    };
  }

  static std::string chat(std::string_view id, std::string_view extra = "") {
    return fmt::format(
        R"({{"type":"chat","id":"{}","messages":[{{"role":"user","content":"hi"}}]{}}})", id,
        extra);
  }
  static std::string cancel(std::string_view id) {
    return fmt::format(R"({{"type":"cancel","id":"{}"}})", id);
  }

  std::shared_ptr<ServingMetrics> metrics_ = std::make_shared<ServingMetrics>();
  FakeEngine engine_;
  ManualStrand strand_;
  std::vector<Frame> frames_;
  int num_wakes_ = 0;
};

TEST_F(WsChatTest, ChatStreamsDeltasThenDone) {
  auto connection = connect();
  connection->on_text(chat("c1", R"(,"max_tokens":7,"temperature":0.5,"priority":"high")"));
  ASSERT_TRUE(pump_until(*connection, done_for({"c1"})));

  ASSERT_EQ(frames_.size(), 4u);
  EXPECT_EQ(frames_[0].raw, R"({"type":"delta","id":"c1","text":"Hel"})");
  EXPECT_EQ(frames_[1].text, "lo");
  EXPECT_EQ(frames_[2].text, " world");
  EXPECT_EQ(frames_[3].type, "done");
  EXPECT_EQ(frames_[3].id, "c1");
  EXPECT_EQ(frames_[3].finish_reason, "stop");
  EXPECT_EQ(frames_[3].completion_tokens, 3);
  EXPECT_EQ(connection->num_live_generations(), 0u);
  EXPECT_GT(num_wakes_, 0);

  const auto submitted = engine_.submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].origin, engine::RequestOrigin::kWebSocket);
  EXPECT_EQ(submitted[0].client_label, "c1");
  ASSERT_EQ(submitted[0].messages.size(), 1u);
  EXPECT_EQ(submitted[0].messages[0].content, "hi");
  EXPECT_EQ(submitted[0].stop.max_tokens, 7);
  EXPECT_FLOAT_EQ(submitted[0].sampling.temperature, 0.5f);
}

// n > 1 (issue 18): the chat's frames name their choice, each choice ends with a choice_done
// frame, and one done frame (summed usage) ends the chat.
TEST_F(WsChatTest, NChoicesAreIndexedAndEndOneByOne) {
  auto connection = connect();
  connection->on_text(chat("c1", R"(,"n":2)"));
  ASSERT_TRUE(pump_until(*connection, done_for({"c1"})));
  ASSERT_EQ(frames_.size(), 3u * 2 + 2 + 1);
  EXPECT_EQ(frames_[0].raw, R"({"type":"delta","id":"c1","index":0,"text":"Hel"})");
  EXPECT_EQ(frames_[1].raw, R"({"type":"delta","id":"c1","index":1,"text":"Hel"})");
  EXPECT_EQ(count(frames_, "choice_done", "c1"), 2u);
  EXPECT_EQ(frames_.back().type, "done");
  EXPECT_EQ(frames_.back().completion_tokens, 6);
  ASSERT_EQ(engine_.submitted().size(), 1u);
  EXPECT_EQ(engine_.submitted()[0].n, 2);
}

TEST_F(WsChatTest, EmptyDeltasAreNotSent) {
  engine_.script.pieces = {"a", "", "b"};
  auto connection = connect();
  connection->on_text(chat("c1"));
  ASSERT_TRUE(pump_until(*connection, done_for({"c1"})));
  EXPECT_EQ(count(frames_, "delta", "c1"), 2u);
  EXPECT_EQ(text_of(frames_, "c1"), "ab");
}

TEST_F(WsChatTest, TwoIdsAreMultiplexedOnOneConnection) {
  auto connection = connect();
  connection->on_text(chat("a"));
  connection->on_text(chat("b"));
  EXPECT_EQ(connection->num_live_generations(), 2u);
  ASSERT_TRUE(pump_until(*connection, done_for({"a", "b"})));

  EXPECT_EQ(text_of(frames_, "a"), "Hello world");
  EXPECT_EQ(text_of(frames_, "b"), "Hello world");
  EXPECT_EQ(count(frames_, "done", "a"), 1u);
  EXPECT_EQ(count(frames_, "done", "b"), 1u);
  // Each id's done comes after all of its deltas.
  for (const std::string id : {"a", "b"}) {
    bool seen_done = false;
    for (const Frame& f : frames_) {
      if (f.id != id) continue;
      EXPECT_FALSE(seen_done) << "frame after done: " << f.raw;
      seen_done = seen_done || f.type == "done";
    }
  }
  EXPECT_EQ(connection->num_live_generations(), 0u);
}

TEST_F(WsChatTest, DuplicateLiveIdIsAnErrorForThatMessageOnly) {
  engine_.script.endless = true;
  auto connection = connect();
  connection->on_text(chat("c1"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) { return count(f, "delta", "c1") > 0; }));
  connection->on_text(chat("c1"));
  drain(*connection);

  const Frame* error = find(frames_, "error", "c1");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, "duplicate_id");
  EXPECT_EQ(engine_.submitted().size(), 1u);
  EXPECT_EQ(engine_.num_cancelled(), 0u);  // the first generation goes on
  EXPECT_EQ(connection->num_live_generations(), 1u);
  const size_t deltas_before = count(frames_, "delta", "c1");
  ASSERT_TRUE(pump_until(*connection,
                         [&](const auto& f) { return count(f, "delta", "c1") > deltas_before; }));

  connection->on_text(cancel("c1"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) { return count(f, "done", "c1") > 0; }));
  EXPECT_EQ(find(frames_, "done", "c1")->finish_reason, "cancelled");

  // Once done, the id may be used again.
  engine_.script.endless = false;
  frames_.clear();
  connection->on_text(chat("c1"));
  ASSERT_TRUE(pump_until(*connection, done_for({"c1"})));
  EXPECT_EQ(find(frames_, "done", "c1")->finish_reason, "stop");
  EXPECT_EQ(find(frames_, "error", "c1"), nullptr);
}

TEST_F(WsChatTest, CancelEndsWithDoneCancelledAndOthersContinue) {
  engine_.script.endless = true;
  auto connection = connect();
  connection->on_text(chat("stay"));
  connection->on_text(chat("go"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) { return count(f, "delta", "go") > 0; }));
  connection->on_text(cancel("go"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) { return count(f, "done", "go") > 0; }));

  const Frame* done = find(frames_, "done", "go");
  EXPECT_EQ(done->finish_reason, "cancelled");
  EXPECT_GE(done->completion_tokens, 1);
  EXPECT_EQ(engine_.num_cancelled(), 1u);
  EXPECT_EQ(connection->num_live_generations(), 1u);
  const size_t stay_before = count(frames_, "delta", "stay");
  ASSERT_TRUE(pump_until(*connection,
                         [&](const auto& f) { return count(f, "delta", "stay") > stay_before; }));
  EXPECT_EQ(find(frames_, "done", "stay"), nullptr);
  connection->on_closed();
}

TEST_F(WsChatTest, CancelOfAnUnknownIdIsAnError) {
  auto connection = connect();
  connection->on_text(cancel("nope"));
  drain(*connection);
  ASSERT_EQ(frames_.size(), 1u);
  EXPECT_EQ(frames_[0].type, "error");
  EXPECT_EQ(frames_[0].id, "nope");
  EXPECT_EQ(frames_[0].code, "unknown_id");
  EXPECT_EQ(engine_.num_cancelled(), 0u);
}

TEST_F(WsChatTest, BadFramesGetErrorFramesAndTheConnectionStaysUsable) {
  auto connection = connect();
  connection->on_text("{not json");
  connection->on_text(R"({"type":"chat","messages":[{"role":"user","content":"hi"}]})");  // no id
  connection->on_text(R"({"type":"chat","id":"","messages":[]})");  // empty id
  connection->on_text(R"({"type":"chat","id":42})");                // id not a string
  connection->on_text(R"({"id":"x"})");                             // no type
  connection->on_text(R"({"type":"hello","id":"x"})");
  connection->on_text(R"([1,2,3])");
  connection->on_text(R"({"type":"chat","id":")" + std::string(300, 'i') + R"("})");  // id too long
  connection->on_binary();
  connection->on_text(R"({"type":"chat","id":"bad"})");  // no messages
  drain(*connection);

  ASSERT_EQ(frames_.size(), 10u);
  for (const Frame& f : frames_) EXPECT_EQ(f.type, "error") << f.raw;
  EXPECT_EQ(frames_[0].code, "invalid_json");
  EXPECT_EQ(frames_[0].id, "");
  EXPECT_NE(frames_[0].raw.find(R"("id":null)"), std::string::npos);
  EXPECT_EQ(frames_[1].code, "invalid_message");
  EXPECT_EQ(frames_[2].code, "invalid_message");
  EXPECT_EQ(frames_[3].code, "invalid_message");
  EXPECT_EQ(frames_[4].code, "invalid_message");
  EXPECT_EQ(frames_[5].code, "unknown_type");
  EXPECT_EQ(frames_[5].id, "x");
  EXPECT_EQ(frames_[6].code, "invalid_message");
  EXPECT_EQ(frames_[7].code, "invalid_message");
  EXPECT_EQ(frames_[8].code, "unsupported_frame");
  EXPECT_EQ(frames_[9].id, "bad");
  EXPECT_FALSE(frames_[9].code.empty());
  EXPECT_FALSE(frames_[9].message.empty());
  EXPECT_TRUE(engine_.submitted().empty());
  EXPECT_EQ(connection->num_live_generations(), 0u);

  frames_.clear();
  connection->on_text(chat("ok"));
  ASSERT_TRUE(pump_until(*connection, done_for({"ok"})));
  EXPECT_EQ(find(frames_, "done", "ok")->finish_reason, "stop");
}

// The WS chat message shares the OpenAI parser: logit_bias and min_tokens reach the engine, and
// the same validation answers with an error frame naming the field.
TEST_F(WsChatTest, LogitBiasAndMinTokensAreParsedAndValidated) {
  auto connection = connect();
  connection->on_text(chat("bad1", R"(,"logit_bias":{"5":101})"));
  connection->on_text(chat("bad2", R"(,"max_tokens":3,"min_tokens":4)"));
  drain(*connection);
  ASSERT_EQ(frames_.size(), 2u);
  EXPECT_EQ(frames_[0].type, "error");
  EXPECT_NE(frames_[0].message.find("'logit_bias'"), std::string::npos) << frames_[0].raw;
  EXPECT_NE(frames_[1].message.find("'min_tokens'"), std::string::npos) << frames_[1].raw;
  EXPECT_TRUE(engine_.submitted().empty());

  frames_.clear();
  connection->on_text(chat("ok", R"(,"max_tokens":9,"min_tokens":2,"logit_bias":{"3":-100})"));
  ASSERT_TRUE(pump_until(*connection, done_for({"ok"})));
  const auto submitted = engine_.submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].sampling.min_tokens, 2);
  EXPECT_EQ(submitted[0].sampling.logit_bias, (std::vector<model::LogitBias>{{3, -100.0f}}));
}

TEST_F(WsChatTest, EngineErrorsBecomeErrorFramesAndFreeTheId) {
  engine_.script.error =
      engine::RequestError{engine::ErrorCode::kPromptTooLong, "prompt is too long", ""};
  auto connection = connect();
  connection->on_text(chat("c1"));
  ASSERT_TRUE(pump_until(*connection, done_for({"c1"})));
  const Frame* error = find(frames_, "error", "c1");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, "context_length_exceeded");
  EXPECT_EQ(error->message, "prompt is too long");
  EXPECT_EQ(connection->num_live_generations(), 0u);
}

TEST_F(WsChatTest, ClosingCancelsEveryLiveGenerationAndSendsNothingMore) {
  engine_.script.endless = true;
  auto connection = connect();
  for (const char* id : {"a", "b", "c"}) connection->on_text(chat(id));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) {
    return count(f, "delta", "a") > 0 && count(f, "delta", "b") > 0 && count(f, "delta", "c") > 0;
  }));
  connection->on_closed();
  EXPECT_TRUE(connection->closed());
  EXPECT_EQ(engine_.num_cancelled(), 3u);
  ASSERT_TRUE(FakeEngine::eventually([&] {
    strand_.run_queued();
    return engine_.num_active() == 0;
  }));
  strand_.run_queued();
  EXPECT_TRUE(connection->take_output().empty());
  EXPECT_EQ(connection->num_live_generations(), 0u);
}

TEST_F(WsChatTest, GenerationsEndWhenTheConnectionObjectIsGone) {
  engine_.script.endless = true;
  auto connection = connect();
  connection->on_text(chat("a"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) { return count(f, "delta", "a") > 0; }));
  connection->on_closed();
  connection.reset();
  ASSERT_TRUE(FakeEngine::eventually([&] {
    strand_.run_queued();
    return engine_.num_active() == 0;
  }));
}

// Issue 14: each chat is counted once whatever ends it, including chats whose socket went
// away before their done frame (the WebSocket chat counted nothing at all before).
TEST_F(WsChatTest, EveryChatIsCountedOnceWhateverEndsIt) {
  auto connection = connect();
  connection->on_text(chat("done"));
  connection->on_text(chat("bad", R"(,"max_tokens":-1)"));
  ASSERT_TRUE(pump_until(*connection, done_for({"done", "bad"})));
  engine_.script.endless = true;
  connection->on_text(chat("x"));
  connection->on_text(chat("y"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) {
    return count(f, "delta", "x") > 0 && count(f, "delta", "y") > 0;
  }));
  connection->on_closed();
  connection.reset();  // the sinks end their records without the connection
  ASSERT_TRUE(FakeEngine::eventually([&] {
    strand_.run_queued();
    return engine_.num_active() == 0;
  }));
  EXPECT_EQ(metrics_->finished_stop.load(), 1u);
  EXPECT_EQ(metrics_->finished_cancelled.load(), 2u);
  EXPECT_EQ(metrics_->failed.load(), 1u);
  EXPECT_EQ(metrics_->finished_length.load(), 0u);
}

// A chat is one request of its key's requests per minute, as on HTTP: over it, an error frame
// that says when to try again, and nothing reaches the engine.
TEST_F(WsChatTest, AKeysRequestsPerMinuteApplyToChats) {
  metrics_->rate_limits.set_limits({{"alice", {2, 0}}}, steady_now_s());
  auto connection = connect({}, "alice");
  for (const char* id : {"a", "b", "c"}) connection->on_text(chat(id));
  ASSERT_TRUE(pump_until(*connection, done_for({"a", "b", "c"})));
  const Frame* error = find(frames_, "error", "c");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, "rate_limit_exceeded");
  EXPECT_EQ(engine_.submitted().size(), 2u);
  EXPECT_EQ(count(frames_, "done", "a") + count(frames_, "done", "b"), 2u);
}

TEST_F(WsChatTest, TooManyLiveGenerationsIsAnError) {
  engine_.script.endless = true;
  WsChatConfig config;
  config.max_live_generations = 2;
  auto connection = connect(config);
  connection->on_text(chat("a"));
  connection->on_text(chat("b"));
  connection->on_text(chat("c"));
  drain(*connection);
  const Frame* error = find(frames_, "error", "c");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, "too_many_generations");
  EXPECT_EQ(engine_.submitted().size(), 2u);

  connection->on_text(cancel("a"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) { return count(f, "done", "a") > 0; }));
  connection->on_text(chat("c"));
  EXPECT_EQ(engine_.submitted().size(), 3u);
  EXPECT_EQ(connection->num_live_generations(), 2u);
  connection->on_closed();
}

TEST_F(WsChatTest, ShutdownRefusesNewChatsAndIdleWaitsForRunningOnes) {
  engine_.script.endless = true;
  auto connection = connect();
  EXPECT_TRUE(connection->idle());
  connection->on_text(chat("a"));
  EXPECT_FALSE(connection->idle());

  connection->on_shutdown();
  connection->on_text(chat("b"));
  drain(*connection);
  const Frame* refused = find(frames_, "error", "b");
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->code, "draining");
  EXPECT_EQ(engine_.submitted().size(), 1u);
  EXPECT_FALSE(connection->idle());  // "a" still runs, and keeps streaming

  connection->on_text(cancel("a"));
  ASSERT_TRUE(pump_until(*connection, [](const auto& f) { return count(f, "done", "a") > 0; }));
  EXPECT_TRUE(connection->idle());
}

TEST_F(WsChatTest, ASlowReaderHasItsOwnGenerationsCancelled) {
  engine_.script.endless = true;
  WsChatConfig config;
  config.max_pending_bytes = 1024;
  auto slow = connect(config);
  auto fast = connect(config);
  slow->on_text(chat("s"));
  fast->on_text(chat("f"));
  // The slow connection's output is never taken; the fast one's is.
  std::vector<Frame> fast_frames;
  ASSERT_TRUE(FakeEngine::eventually([&] {
    strand_.run_queued();
    for (std::string& raw : fast->take_output()) fast_frames.push_back(parse_chat_frame(raw));
    return slow->num_live_generations() == 0;
  }));
  EXPECT_EQ(engine_.num_cancelled(), 1u);
  EXPECT_EQ(fast->num_live_generations(), 1u);
  std::vector<Frame> slow_frames;
  for (std::string& raw : slow->take_output()) slow_frames.push_back(parse_chat_frame(raw));
  ASSERT_FALSE(slow_frames.empty());
  EXPECT_EQ(slow_frames.back().type, "done");
  EXPECT_EQ(slow_frames.back().finish_reason, "cancelled");
  fast->on_closed();
}

TEST(WsChatFrames, DeltaFrameEscapesText) {
  EXPECT_EQ(ws_delta_frame("c1", "Hel"), R"({"type":"delta","id":"c1","text":"Hel"})");
  EXPECT_EQ(ws_delta_frame("q\"1", "a\"b\n\u00e9"),
            "{\"type\":\"delta\",\"id\":\"q\\\"1\",\"text\":\"a\\\"b\\n\u00e9\"}");
}

TEST(WsChatFrames, ChoiceFramesNameTheirIndex) {
  EXPECT_EQ(ws_delta_frame("c1", "a", 2), R"({"type":"delta","id":"c1","index":2,"text":"a"})");
  EXPECT_EQ(ws_choice_done_frame("c1", engine::ChoiceEnd{1, "length", 9}),
            R"({"type":"choice_done","id":"c1","index":1,"finish_reason":"length","completion_tokens":9})");
}

TEST(WsChatFrames, DoneFrameCarriesUsageAndTimings) {
  engine::Completion completion;
  completion.finish_reason = "length";
  completion.usage = {12, 5, 8};
  completion.timings.queue_ms = 1;
  completion.timings.time_to_first_token_ms = 42.5;
  completion.timings.total_ms = 100;
  completion.timings.decode_tokens_per_s = 20;
  const std::string frame = ws_done_frame("c1", completion);
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(frame);
  EXPECT_EQ(root["type"].get_string().value(), "done");
  EXPECT_EQ(root["id"].get_string().value(), "c1");
  EXPECT_EQ(root["finish_reason"].get_string().value(), "length");
  EXPECT_EQ(root["usage"]["prompt_tokens"].get_int64().value(), 12);
  EXPECT_EQ(root["usage"]["completion_tokens"].get_int64().value(), 5);
  EXPECT_EQ(root["usage"]["total_tokens"].get_int64().value(), 17);
  EXPECT_EQ(root["usage"]["cached_tokens"].get_int64().value(), 8);
  EXPECT_DOUBLE_EQ(root["timings"]["ttft_ms"].get_double().value(), 42.5);
  EXPECT_DOUBLE_EQ(root["timings"]["tokens_per_s"].get_double().value(), 20.0);
  EXPECT_DOUBLE_EQ(root["timings"]["queue_ms"].get_double().value(), 1.0);
  EXPECT_DOUBLE_EQ(root["timings"]["total_ms"].get_double().value(), 100.0);
  EXPECT_EQ(frame.rfind(R"({"type":"done","id":"c1","finish_reason":"length","usage":{)", 0), 0u);
}

TEST(WsChatFrames, ErrorFrameHasANullIdWhenThereIsNone) {
  EXPECT_EQ(ws_error_frame("c1", "duplicate_id", "busy"),
            R"({"type":"error","id":"c1","code":"duplicate_id","message":"busy"})");
  EXPECT_EQ(ws_error_frame("", "invalid_json", "bad"),
            R"({"type":"error","id":null,"code":"invalid_json","message":"bad"})");
}

}  // namespace
}  // namespace troupe::net
