// ExecutorThreads: one io_context run by N named threads, with a clean, bounded shutdown.
//
// This is what "the engine thread" (scheduler + kv-cache actors, one thread), "the net io
// threads" (N threads) and similar are: an executor handed to actors at wiring time. The
// context is kept alive by a work guard until join() releases it, so an idle context does not
// return from run() early.
//
// Thread-safety: executor(), context() and is_current_thread() from any thread. join() and the
// destructor from any thread that is NOT one of these threads (it would wait for itself).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

namespace troupe::actors::runtime {

// How a join ended. kForced: the deadline passed with work still pending (an actor that did not
// stop, a parked wait nobody woke), so the context was stopped and that work abandoned.
enum class JoinOutcome { kFinished, kForced };

std::string_view to_string(JoinOutcome outcome);

class ExecutorThreads {
 public:
  using Executor = boost::asio::io_context::executor_type;

  // Starts `num_threads` (>= 1) threads named "<name>-<i>" (truncated to 15 characters, the
  // kernel's limit) that run the context.
  ExecutorThreads(std::string name, int num_threads);
  ExecutorThreads(const ExecutorThreads&) = delete;
  ExecutorThreads& operator=(const ExecutorThreads&) = delete;
  // Joins with a short deadline if join() was not called; see join().
  ~ExecutorThreads();

  Executor executor() { return context_.get_executor(); }
  boost::asio::io_context& context() { return context_; }
  const std::string& name() const { return name_; }
  int num_threads() const { return static_cast<int>(threads_.size()); }
  bool is_current_thread() { return context_.get_executor().running_in_this_thread(); }

  // Lets run() return once no work is queued or pending (stop your actors first), waiting until
  // `deadline`; past it, stops the context (pending handlers are abandoned) and joins anyway.
  // Idempotent: a second call returns the first one's outcome.
  JoinOutcome join(std::chrono::steady_clock::time_point deadline);

 private:
  void run_one_thread();

  std::string name_;
  boost::asio::io_context context_;
  std::optional<boost::asio::executor_work_guard<Executor>> keep_alive_;
  std::vector<std::thread> threads_;

  std::mutex exit_mutex_;
  std::condition_variable exit_signal_;
  int num_running_ = 0;  // guarded by exit_mutex_
  std::optional<JoinOutcome> join_outcome_;
};

}  // namespace troupe::actors::runtime
