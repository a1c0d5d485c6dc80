// The ZeroMQ publisher with real sockets: a subscriber gets [topic, seq, payload] with vLLM's
// framing, and a replay client gets the buffered batches from a sequence number on, then the end
// marker. With a connected endpoint (an indexer that binds), the subscriber may bind before or
// after troupe starts, or restart mid-run (issue 41 item 6).
#include "actors/kv_cache/events/kv_event_publisher.hpp"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
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

// A TCP endpoint nothing listens at: kv_event_endpoint_binds() says connect for it.
std::string free_tcp_endpoint() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("no free TCP port");
  }
  ::close(fd);
  return "tcp://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
}

// An indexer as llm-d runs it: a SUB that binds, with its own context so that closing it frees
// the port (a restart). It must keep entering its socket: a bound SUB sends its subscription to a
// newly connected PUB only when its own thread processes the connection (ZeroMQ runs a socket's
// commands on its owner's thread), and the PUB drops everything until the subscription is in.
struct BoundSubscriber {
  explicit BoundSubscriber(const std::string& endpoint) {
    socket.set(zmq::sockopt::subscribe, "");
    socket.set(zmq::sockopt::rcvtimeo, 100);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(endpoint);
  }
  zmq::context_t context;
  zmq::socket_t socket{context, zmq::socket_type::sub};
};

// Publishes batch_of(key), batch_of(key + 1), ... (batch n has sequence number n - 100 when the
// first was 100) and reads between them until a batch numbered min_seq or later arrives; its
// sequence number, or nothing after 100 tries (10 s).
std::optional<uint64_t> publish_until_received(KvEventPublisher& publisher, BoundSubscriber& sub,
                                               uint64_t& key, uint64_t min_seq) {
  for (int tries = 0; tries < 100; ++tries) {
    if (!publisher.publish(batch_of(key++))) return std::nullopt;
    for (auto frames = recv_all(sub.socket); !frames.empty(); frames = recv_all(sub.socket)) {
      if (frames.size() != 3 || frames[1].size() != 8) return std::nullopt;
      const uint64_t seq = be64(frames[1]);
      EXPECT_EQ(frames[2].to_string(),
                encode_kv_event_batch(batch_of(100 + seq), KvEventFormat::kArray, "CPU"));
      if (seq >= min_seq) return seq;
    }
  }
  return std::nullopt;
}

// Every batch the replay socket holds from `start` on, as sequence numbers in the order sent.
std::vector<uint64_t> replay_from(const std::string& endpoint, uint64_t start) {
  zmq::context_t context;
  zmq::socket_t replay(context, zmq::socket_type::dealer);
  replay.set(zmq::sockopt::rcvtimeo, 5000);
  replay.set(zmq::sockopt::linger, 0);
  replay.connect(endpoint);
  std::array<uint8_t, 8> start_frame{};
  for (int i = 0; i < 8; ++i) {
    start_frame[static_cast<size_t>(i)] = static_cast<uint8_t>(start >> (8 * (7 - i)));
  }
  replay.send(zmq::const_buffer(), zmq::send_flags::sndmore);
  replay.send(zmq::buffer(start_frame), zmq::send_flags::none);
  std::vector<uint64_t> seqs;
  for (;;) {
    auto reply = recv_all(replay);
    if (reply.size() != 3 || be64(reply[1]) == UINT64_MAX) return seqs;
    seqs.push_back(be64(reply[1]));
  }
}

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

// An indexer that binds after troupe connected: the first connect was refused, and ZeroMQ keeps
// retrying it, so events reach the indexer once its subscription is in.
TEST_F(KvEventPublisherTest, ASubscriberThatBindsAfterThePublisherStartsGetsEvents) {
  KvEventsConfig config;
  config.endpoint = free_tcp_endpoint();
  config.format = KvEventFormat::kArray;
  KvEventPublisher publisher(config, "CPU");
  uint64_t key = 100;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(publisher.publish(batch_of(key++)));  // nobody listens
  // Long enough for the first connect to be refused and retried a few times (every 100 ms).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  BoundSubscriber sub(config.endpoint);
  EXPECT_TRUE(publish_until_received(publisher, sub, key, 0));
}

TEST_F(KvEventPublisherTest, ASubscriberBoundBeforeThePublisherStartsGetsEvents) {
  KvEventsConfig config;
  config.endpoint = free_tcp_endpoint();
  config.format = KvEventFormat::kArray;
  BoundSubscriber sub(config.endpoint);
  KvEventPublisher publisher(config, "CPU");
  uint64_t key = 100;
  EXPECT_TRUE(publish_until_received(publisher, sub, key, 0));
}

// An indexer restarts (routine in Kubernetes): the batches sent after it is back arrive live, and
// the replay socket has every one it missed in between.
TEST_F(KvEventPublisherTest, ARestartedSubscriberGetsNewEventsAndReplayFillsTheGap) {
  KvEventsConfig config;
  config.endpoint = free_tcp_endpoint();
  config.replay_endpoint = path("restart-replay");
  config.format = KvEventFormat::kArray;
  KvEventPublisher publisher(config, "CPU");
  uint64_t key = 100;
  std::optional<uint64_t> last_before;
  {
    BoundSubscriber sub(config.endpoint);
    last_before = publish_until_received(publisher, sub, key, 0);
    ASSERT_TRUE(last_before);
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(publisher.publish(batch_of(key++)));  // nobody listens
  const uint64_t first_after_restart = key - 100;
  BoundSubscriber restarted(config.endpoint);
  const std::optional<uint64_t> live =
      publish_until_received(publisher, restarted, key, first_after_restart);
  ASSERT_TRUE(live);

  std::vector<uint64_t> expected;
  for (uint64_t seq = *last_before + 1; seq <= *live; ++seq) expected.push_back(seq);
  std::vector<uint64_t> replayed = replay_from(config.replay_endpoint, *last_before + 1);
  ASSERT_GE(replayed.size(), expected.size());
  replayed.resize(expected.size());  // batches sent after `live` may be there too
  EXPECT_EQ(replayed, expected);
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
