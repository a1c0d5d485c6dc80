// Fork-join pool, see thread_pool.hpp.
#include "gpu/cpu/thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TROUPE_CPU_RELAX() _mm_pause()
#else
#define TROUPE_CPU_RELAX() std::this_thread::yield()
#endif

namespace troupe::gpu::cpu {
namespace {
// ~10-20 us of spinning, then some yields, before a worker sleeps: longer than the gap between the jobs of one
// step, far shorter than the gap between steps when idle.
constexpr int kSpinIterations = 4000;
constexpr int kYieldIterations = 200;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads_ = num_threads < 1 ? 1 : num_threads;
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::parallel_for(int64_t num_items, const RangeFn& fn) {
  if (num_items <= 0) return;
  if (num_threads_ == 1 || num_items == 1) {
    fn(0, num_items, 0);
    return;
  }
  job_ = &fn;
  job_items_ = num_items;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  const int64_t end = split_point(num_items, 1, num_threads_);
  if (end > 0) fn(0, end, 0);
  // Spin briefly, then yield: on an oversubscribed box a spinning waiter would hold the core the
  // worker it waits for needs.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      TROUPE_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations + kYieldIterations; ++spin) {
      if (spin < kSpinIterations) {
        TROUPE_CPU_RELAX();
      } else {
        std::this_thread::yield();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    const int64_t begin = split_point(job_items_, thread_index, num_threads_);
    const int64_t end = split_point(job_items_, thread_index + 1, num_threads_);
    if (end > begin) (*job_)(begin, end, thread_index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace troupe::gpu::cpu
