// The server side of one HTTP exchange whose response is produced later, possibly on another
// thread and possibly in pieces (SSE, JSONL). A handler (the producer) either responds once or
// begins a stream, writes to it and ends it; the HTTP session (the consumer) takes what is
// pending, writes it to the socket, and reports a client that went away. Beast-free, so handlers
// and their tests never compile Beast.
//
// Thread-safety: every method may be called from any thread. Producer methods never block (they
// append to a bounded buffer and ring the consumer's wake-up); callbacks run outside the lock.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "net/http_types.hpp"

namespace troupe::net {

class ResponseStream {
 public:
  // Above this many unsent bytes the client is too slow: it is treated as gone.
  explicit ResponseStream(size_t max_pending_bytes = 8u << 20)
      : max_pending_bytes_(max_pending_bytes) {}

  // ---- producer side -------------------------------------------------------------------
  // Headers every response on this stream carries, whoever answers it (the x-ratelimit-*
  // headers an admission decided, before the answer is known). Before respond()/begin_stream().
  void add_headers(std::vector<std::pair<std::string, std::string>> headers);
  // The whole response. Ignored after a stream began or a response was given.
  void respond(HttpResponse response);
  // Sends `head` (status, content type, headers; its body is ignored) and starts a streamed
  // body. False when the client is gone or a response was already given.
  bool begin_stream(HttpResponse head);
  // Appends body bytes. False when the client is gone, or too slow (the pending bytes passed
  // the limit, which also counts as gone): stop producing and cancel the work.
  bool write(std::string bytes);
  // Ends the streamed body.
  void end();
  bool client_gone() const;
  // `callback` runs once when the client goes away before the response is complete (at once,
  // on this thread, when it already has). Set it after starting the work it cancels.
  void on_client_gone(std::function<void()> callback);

  // ---- consumer side (the HTTP session) ------------------------------------------------
  struct Pending {
    std::optional<HttpResponse> head;  // the full response, or the stream's head (once)
    bool streaming = false;            // head is a stream's head; data follows
    std::string data;                  // stream bytes produced since the last take()
    bool finished = false;             // respond() or end() happened: nothing more comes
    bool empty() const { return !head && data.empty() && !finished; }
  };
  // `wakeup` is called (from any thread, outside the lock) whenever something new is pending.
  void attach(std::function<void()> wakeup);
  // The session is gone: no more wake-ups.
  void detach();
  Pending take();
  // The socket failed or reached EOF: runs the on_client_gone callback (once) unless the
  // response was already complete.
  void mark_client_gone();

 private:
  enum class Phase { kNotStarted, kStreaming, kComplete };
  void wake(std::unique_lock<std::mutex>& lock);
  void set_gone(std::unique_lock<std::mutex>& lock);

  const size_t max_pending_bytes_;
  mutable std::mutex mutex_;
  Phase phase_ = Phase::kNotStarted;
  bool gone_ = false;
  bool streamed_ = false;
  bool head_taken_ = false;
  bool finished_taken_ = false;
  std::optional<HttpResponse> head_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;
  std::string data_;
  std::function<void()> wakeup_;
  std::function<void()> on_gone_;
};

}  // namespace troupe::net
