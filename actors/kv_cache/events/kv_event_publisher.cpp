// KvEventPublisher: the queue, the publisher thread and its PUB/ROUTER sockets (see the header).
#include "actors/kv_cache/events/kv_event_publisher.hpp"

#include <array>
#include <deque>
#include <stdexcept>
#include <utility>
#include <vector>

#include <boost/lockfree/spsc_queue.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "actors/kv_cache/events/kv_event_codec.hpp"

namespace troupe::kv_cache {

bool kv_event_endpoint_binds(std::string_view endpoint) {
  return endpoint.find('*') != std::string_view::npos ||
         endpoint.find("::") != std::string_view::npos || endpoint.starts_with("ipc://") ||
         endpoint.starts_with("inproc://");
}

namespace {

std::array<uint8_t, 8> seq_bytes(int64_t seq) {
  std::array<uint8_t, 8> bytes{};
  const auto u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(u >> (8 * (7 - i)));
  return bytes;
}

zmq::const_buffer buffer_of(const std::array<uint8_t, 8>& bytes) {
  return zmq::const_buffer(bytes.data(), bytes.size());
}

}  // namespace

struct KvEventPublisher::Impl {
  Impl(const KvEventsConfig& c, std::string m)
      : config(c),
        medium(std::move(m)),
        queue(static_cast<size_t>(std::max(1, c.max_queue_batches))),
        wake_address(fmt::format("inproc://troupe-kv-events-wake-{}", static_cast<void*>(this))) {}

  KvEventsConfig config;
  std::string medium;
  boost::lockfree::spsc_queue<KvEventBatch*> queue;  // owns what it holds
  std::string wake_address;
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t replay{context, zmq::socket_type::router};
  bool has_replay = false;
  zmq::socket_t wake_rx{context, zmq::socket_type::pull};  // publisher thread
  zmq::socket_t wake_tx{context, zmq::socket_type::push};  // the publishing (engine) thread
  std::deque<std::pair<int64_t, std::string>> ring;        // (seq, payload) for replay
  int64_t next_seq = 0;

  void send_batch(KvEventBatch& batch, KvEventPublisher& owner) {
    const std::string payload = encode_kv_event_batch(batch, config.format, medium);
    const int64_t seq = next_seq++;
    const auto seq_frame = seq_bytes(seq);
    // PUB never blocks: a subscriber past its high-water mark loses the message (and can
    // replay it).
    pub.send(zmq::buffer(config.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub.send(buffer_of(seq_frame), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    owner.published_batches_.fetch_add(1, std::memory_order_relaxed);
    owner.published_events_.fetch_add(batch.events.size(), std::memory_order_relaxed);
    if (has_replay) {
      ring.emplace_back(seq, payload);
      while (ring.size() > static_cast<size_t>(std::max(1, config.buffer_steps))) ring.pop_front();
    }
  }

  // Every waiting replay request: [identity, "", start seq] -> the batches from it, then the end.
  void serve_replays(KvEventPublisher& owner) {
    for (;;) {
      std::vector<zmq::message_t> frames;
      zmq::message_t frame;
      do {
        if (!replay.recv(frame, zmq::recv_flags::dontwait)) return;
        frames.push_back(std::move(frame));
      } while (frames.back().more());
      if (frames.size() != 3 || frames[2].size() != 8) {
        spdlog::warn("kv events: malformed replay request ({} frames)", frames.size());
        continue;
      }
      owner.replay_requests_.fetch_add(1, std::memory_order_relaxed);
      uint64_t start = 0;
      const auto* b = static_cast<const uint8_t*>(frames[2].data());
      for (int i = 0; i < 8; ++i) start = (start << 8) | b[i];
      const std::string identity = frames[0].to_string();
      auto reply = [&](const std::array<uint8_t, 8>& seq, std::string_view payload) {
        // ROUTER drops replies to a peer that does not read (it never blocks).
        replay.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        replay.send(zmq::const_buffer(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        replay.send(buffer_of(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        replay.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      };
      for (const auto& [seq, payload] : ring) {
        if (static_cast<uint64_t>(seq) >= start) reply(seq_bytes(seq), payload);
      }
      reply(seq_bytes(-1), "");
    }
  }
};

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config, std::string medium)
    : impl_(std::make_unique<Impl>(config, std::move(medium))) {
  Impl& s = *impl_;
  try {
    s.pub.set(zmq::sockopt::sndhwm, std::max(1, config.hwm));
    s.pub.set(zmq::sockopt::linger, 0);
    if (kv_event_endpoint_binds(config.endpoint)) {
      s.pub.bind(config.endpoint);
    } else {
      // An indexer that binds may start after troupe or restart mid-run (issue 41 item 6), and
      // nothing more is needed for it: ZeroMQ retries a refused or dropped connection every
      // reconnect_ivl (100 ms; -1 would end the endpoint at the first refusal), and the PUB
      // keeps its pipe, so events flow again once the indexer's subscription is in. What was
      // sent before that is dropped by the PUB and lies in the replay ring. The indexer's SUB,
      // bound, sends its subscription only when its own thread next enters the socket: a
      // subscriber that binds and does not poll hears nothing, whichever starts first.
      s.pub.connect(config.endpoint);
    }
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format("kv_events.endpoint {}: {}", config.endpoint, e.what()));
  }
  if (!config.replay_endpoint.empty()) {
    try {
      s.replay.set(zmq::sockopt::linger, 0);
      s.replay.bind(config.replay_endpoint);
      s.has_replay = true;
    } catch (const zmq::error_t& e) {
      throw std::runtime_error(
          fmt::format("kv_events.replay_endpoint {}: {}", config.replay_endpoint, e.what()));
    }
  }
  s.wake_rx.bind(s.wake_address);
  // One pending wake-up is enough: the thread drains the whole queue after each.
  s.wake_tx.set(zmq::sockopt::sndhwm, 1);
  s.wake_tx.set(zmq::sockopt::linger, 0);
  s.wake_tx.connect(s.wake_address);
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  stopping_.store(true, std::memory_order_release);
  // Blocking is fine here: the engine has stopped publishing, and the thread is reading.
  (void)impl_->wake_tx.send(zmq::str_buffer("x"), zmq::send_flags::none);
  thread_.join();
  KvEventBatch* left = nullptr;
  while (impl_->queue.pop(left)) delete left;
}

bool KvEventPublisher::publish(KvEventBatch batch) {
  const size_t num_events = batch.events.size();
  auto owned = std::make_unique<KvEventBatch>(std::move(batch));
  if (!impl_->queue.push(owned.get())) {
    dropped_events_.fetch_add(num_events, std::memory_order_relaxed);
    return false;
  }
  (void)owned.release();
  // EAGAIN: a wake-up is already pending, and the thread will drain this batch with it.
  (void)impl_->wake_tx.send(zmq::str_buffer("x"), zmq::send_flags::dontwait);
  return true;
}

KvEventStats KvEventPublisher::stats() const {
  KvEventStats s;
  s.published_batches = published_batches_.load(std::memory_order_relaxed);
  s.published_events = published_events_.load(std::memory_order_relaxed);
  s.dropped_events = dropped_events_.load(std::memory_order_relaxed);
  s.replay_requests = replay_requests_.load(std::memory_order_relaxed);
  return s;
}

void KvEventPublisher::run() {
  Impl& s = *impl_;
  std::vector<zmq::pollitem_t> items{{s.wake_rx.handle(), 0, ZMQ_POLLIN, 0}};
  if (s.has_replay) items.push_back({s.replay.handle(), 0, ZMQ_POLLIN, 0});
  for (;;) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
      zmq::message_t wake;
      while (s.wake_rx.recv(wake, zmq::recv_flags::dontwait)) {
      }
      KvEventBatch* next = nullptr;
      while (s.queue.pop(next)) {
        std::unique_ptr<KvEventBatch> batch(next);
        s.send_batch(*batch, *this);
      }
      if (s.has_replay) s.serve_replays(*this);
    } catch (const zmq::error_t& e) {
      spdlog::error("kv events: {}", e.what());
    }
    if (stopping_.load(std::memory_order_acquire) && s.queue.read_available() == 0) return;
  }
}

}  // namespace troupe::kv_cache
