// The ZeroMQ publisher with real sockets (ipc://): a subscriber gets [topic, seq, payload] with
// vLLM's framing, and a replay client gets the buffered batches from a sequence number on,
// then the end marker.
#include "actors/kv_cache/events/kv_event_publisher.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <zmq.hpp>

#include "actors/kv_cache/events/kv_event_codec.hpp"

namespace troupe::kv_cache {
namespace {

uint64_t be64(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

std::vector<zmq::message_t> recv_all(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t m;
    if (!s.recv(m)) break;
    frames.push_back(std::move(m));
  } while (frames.back().more());
  return frames;
}

KvEventBatch batch_of(uint64_t key) { return KvEventBatch{1.0, {BlockRemoved{{key}}}}; }

class KvEventPublisherTest : public ::testing::Test {
 protected:
  std::string path(const char* name) const {
    return "ipc:///tmp/troupe-kv-events-test-" + std::to_string(::getpid()) + "-" + name;
  }
};

TEST_F(KvEventPublisherTest, SubscriberGetsTopicSequenceAndPayloadAndReplayFillsGaps) {
  KvEventsConfig config;
  config.enabled = true;
  config.endpoint = path("pub");
  config.replay_endpoint = path("replay");
  config.topic = "kv@pod@model";
  config.format = KvEventFormat::kArray;
  KvEventPublisher publisher(config, "CPU");

  zmq::context_t context;
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 200);
  sub.connect(config.endpoint);
  // A subscription reaches the publisher some time after connect (ZeroMQ's slow joiner):
  // publish until one arrives, each batch naming its own key.
  std::vector<zmq::message_t> frames;
  uint64_t key = 100;
  for (; key < 200 && frames.empty(); ++key) {
    ASSERT_TRUE(publisher.publish(batch_of(key)));
    frames = recv_all(sub);
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].to_string(), "kv@pod@model");
  ASSERT_EQ(frames[1].size(), 8u);
  const uint64_t seq = be64(frames[1]);
  EXPECT_EQ(frames[2].to_string(), encode_kv_event_batch(batch_of(100 + seq), KvEventFormat::kArray, "CPU"));
  const uint64_t last_seq = key - 100 - 1;

  // Replay from 0: every batch so far, in order, then [-1, ""].
  zmq::socket_t replay(context, zmq::socket_type::dealer);
  replay.set(zmq::sockopt::rcvtimeo, 5000);
  replay.connect(config.replay_endpoint);
  const uint8_t start[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  replay.send(zmq::const_buffer(), zmq::send_flags::sndmore);
  replay.send(zmq::buffer(start, 8), zmq::send_flags::none);
  for (uint64_t expected = 0;; ++expected) {
    auto reply = recv_all(replay);
    ASSERT_EQ(reply.size(), 3u);  // "", seq, payload
    EXPECT_EQ(reply[0].size(), 0u);
    if (be64(reply[1]) == UINT64_MAX) {
      EXPECT_EQ(reply[2].size(), 0u);
      EXPECT_EQ(expected, last_seq + 1);
      break;
    }
    EXPECT_EQ(be64(reply[1]), expected);
    EXPECT_EQ(reply[2].to_string(),
              encode_kv_event_batch(batch_of(100 + expected), KvEventFormat::kArray, "CPU"));
  }
  EXPECT_EQ(publisher.stats().replay_requests, 1u);
  EXPECT_EQ(publisher.stats().published_batches, last_seq + 1);
  EXPECT_EQ(publisher.stats().dropped_events, 0u);
}

TEST_F(KvEventPublisherTest, AnEndpointThatCannotBeBoundIsAnErrorNamingIt) {
  KvEventsConfig config;
  config.endpoint = "tcp://*:not-a-port";
  try {
    KvEventPublisher publisher(config, "CPU");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_events.endpoint tcp://*:not-a-port"), std::string::npos);
  }
}

TEST(KvEventEndpoint, BindsLikeVllm) {
  EXPECT_TRUE(kv_event_endpoint_binds("tcp://*:5557"));
  EXPECT_TRUE(kv_event_endpoint_binds("tcp://[::]:5557"));
  EXPECT_TRUE(kv_event_endpoint_binds("ipc:///tmp/x"));
  EXPECT_FALSE(kv_event_endpoint_binds("tcp://indexer:5557"));
}

}  // namespace
}  // namespace troupe::kv_cache
