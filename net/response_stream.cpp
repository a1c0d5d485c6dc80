#include "net/response_stream.hpp"

namespace troupe::net {

void ResponseStream::wake(std::unique_lock<std::mutex>& lock) {
  std::function<void()> wakeup = wakeup_;
  lock.unlock();
  if (wakeup) wakeup();
}

void ResponseStream::set_gone(std::unique_lock<std::mutex>& lock) {
  // NOTE: the callback (engine.cancel) may call back into write()/end() synchronously, so it
  // must run without the lock held.
  gone_ = true;
  std::function<void()> callback = std::move(on_gone_);
  on_gone_ = nullptr;
  std::function<void()> wakeup = wakeup_;
  lock.unlock();
  if (callback) callback();
  if (wakeup) wakeup();
}

void ResponseStream::respond(HttpResponse response) {
  std::unique_lock lock(mutex_);
  if (phase_ != Phase::kNotStarted) return;
  phase_ = Phase::kComplete;
  response.headers.insert(response.headers.end(), extra_headers_.begin(), extra_headers_.end());
  head_ = std::move(response);
  wake(lock);
}

void ResponseStream::add_headers(std::vector<std::pair<std::string, std::string>> headers) {
  std::unique_lock lock(mutex_);
  extra_headers_.insert(extra_headers_.end(), std::make_move_iterator(headers.begin()),
                        std::make_move_iterator(headers.end()));
}

bool ResponseStream::begin_stream(HttpResponse head) {
  std::unique_lock lock(mutex_);
  if (phase_ != Phase::kNotStarted || gone_) return false;
  phase_ = Phase::kStreaming;
  streamed_ = true;
  head.body.clear();
  head.headers.insert(head.headers.end(), extra_headers_.begin(), extra_headers_.end());
  head_ = std::move(head);
  wake(lock);
  return true;
}

bool ResponseStream::write(std::string bytes) {
  std::unique_lock lock(mutex_);
  if (phase_ != Phase::kStreaming || gone_) return false;
  if (data_.size() + bytes.size() > max_pending_bytes_) {
    set_gone(lock);
    return false;
  }
  const bool was_empty = data_.empty();
  data_ += bytes;
  if (was_empty) {
    wake(lock);
  }
  return true;
}

void ResponseStream::end() {
  std::unique_lock lock(mutex_);
  if (phase_ != Phase::kStreaming) return;
  phase_ = Phase::kComplete;
  wake(lock);
}

bool ResponseStream::client_gone() const {
  std::lock_guard lock(mutex_);
  return gone_;
}

void ResponseStream::on_client_gone(std::function<void()> callback) {
  std::unique_lock lock(mutex_);
  if (!gone_) {
    on_gone_ = std::move(callback);
    return;
  }
  lock.unlock();
  callback();
}

void ResponseStream::attach(std::function<void()> wakeup) {
  std::lock_guard lock(mutex_);
  wakeup_ = std::move(wakeup);
}

void ResponseStream::detach() {
  std::lock_guard lock(mutex_);
  wakeup_ = nullptr;
}

ResponseStream::Pending ResponseStream::take() {
  std::lock_guard lock(mutex_);
  Pending pending;
  if (head_ && !head_taken_) {
    head_taken_ = true;
    pending.head = std::move(head_);
    head_.reset();
  }
  pending.streaming = streamed_;
  pending.data = std::move(data_);
  data_.clear();
  if (phase_ == Phase::kComplete && !finished_taken_) {
    finished_taken_ = true;
    pending.finished = true;
  }
  return pending;
}

void ResponseStream::mark_client_gone() {
  std::unique_lock lock(mutex_);
  if (gone_ || (phase_ == Phase::kComplete && finished_taken_)) return;
  set_gone(lock);
}

}  // namespace troupe::net
