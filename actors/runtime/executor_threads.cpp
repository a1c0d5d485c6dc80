// ExecutorThreads: thread start-up, naming and the deadline-bounded join.
#include "actors/runtime/executor_threads.hpp"

#include "model/enum_names.hpp"

#include <pthread.h>

#include <stdexcept>

namespace troupe::actors::runtime {

constexpr EnumNames<JoinOutcome, 2> kJoinOutcomeNames{{{
    {JoinOutcome::kFinished, "finished"}, {JoinOutcome::kForced, "forced"}}}, "?"};
static_assert(kJoinOutcomeNames.dense());

std::string_view to_string(JoinOutcome outcome) { return kJoinOutcomeNames.name(outcome); }

ExecutorThreads::ExecutorThreads(std::string name, int num_threads)
    : name_(std::move(name)), context_(num_threads) {
  if (num_threads < 1) throw std::invalid_argument("ExecutorThreads needs at least one thread");
  keep_alive_.emplace(context_.get_executor());
  num_running_ = num_threads;
  threads_.reserve(static_cast<std::size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this] { run_one_thread(); });
    std::string thread_name = name_ + "-" + std::to_string(i);
    thread_name.resize(std::min<std::size_t>(thread_name.size(), 15));
    pthread_setname_np(threads_.back().native_handle(), thread_name.c_str());
  }
}

ExecutorThreads::~ExecutorThreads() {
  join(std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

void ExecutorThreads::run_one_thread() {
  // An exception escaping a handler is a bug (actors report failures as values); let it
  // terminate the process with its message rather than lose a thread silently.
  context_.run();
  std::lock_guard lock(exit_mutex_);
  --num_running_;
  exit_signal_.notify_all();
}

JoinOutcome ExecutorThreads::join(std::chrono::steady_clock::time_point deadline) {
  if (join_outcome_) return *join_outcome_;
  if (is_current_thread()) throw std::logic_error("ExecutorThreads::join from one of its own threads");
  keep_alive_.reset();
  JoinOutcome outcome = JoinOutcome::kFinished;
  {
    std::unique_lock lock(exit_mutex_);
    if (!exit_signal_.wait_until(lock, deadline, [this] { return num_running_ == 0; })) {
      outcome = JoinOutcome::kForced;
      context_.stop();
    }
  }
  for (std::thread& thread : threads_) thread.join();
  join_outcome_ = outcome;
  return outcome;
}

}  // namespace troupe::actors::runtime
