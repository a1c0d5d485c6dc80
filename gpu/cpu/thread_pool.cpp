// Fork-join pool, see thread_pool.hpp.
#include "gpu/cpu/thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TROUPE_CPU_RELAX() _mm_pause()
#else
#define TROUPE_CPU_RELAX() std::this_thread::yield()
#endif

#include <pthread.h>

#include <algorithm>
#include <string>

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
  for (int t = 1; t < num_threads_; ++t) {
    workers_.emplace_back([this, t] { worker_loop(t); });
    // Named for per-thread CPU accounts (bench/serve_bench.py --server-pid).
    const std::string name = "cpu-pool-" + std::to_string(t);
    pthread_setname_np(workers_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::run_chunks(int thread_index) {
  const RangeFn& fn = *job_.load(std::memory_order_relaxed);
  const int64_t items = job_items_.load(std::memory_order_relaxed);
  const int64_t share = 2 * static_cast<int64_t>(num_threads_);
  // No chunk above 1 / (2 share) of the job: what a descheduled thread can hold up.
  const int64_t largest = std::max<int64_t>(1, items / (2 * share));
  for (;;) {
    // 1 / share of what is left (thread_pool.hpp: the threads finish together).
    int64_t begin = next_item_.load(std::memory_order_relaxed);
    int64_t end = 0;
    do {
      if (begin >= items) return;
      end = begin + std::clamp<int64_t>((items - begin) / share, 1, largest);
    } while (!next_item_.compare_exchange_weak(begin, end, std::memory_order_relaxed));
    fn(begin, end, thread_index);
    done_items_.fetch_add(end - begin, std::memory_order_release);
  }
}

namespace {

// Spin briefly, then yield: on an oversubscribed box a spinning waiter would hold the core the
// thread it waits for needs.
template <typename Done>
void wait_until(Done&& done) {
  for (int spin = 0; !done(); ++spin) {
    if (spin < kSpinIterations) {
      TROUPE_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace

void ThreadPool::parallel_for(int64_t num_items, const RangeFn& fn) {
  if (num_items <= 0) return;
  if (num_threads_ == 1 || num_items == 1) {
    fn(0, num_items, 0);
    return;
  }
  job_.store(&fn, std::memory_order_relaxed);
  job_items_.store(num_items, std::memory_order_relaxed);
  next_item_.store(0, std::memory_order_relaxed);
  done_items_.store(0, std::memory_order_relaxed);
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  open_.store(gen, std::memory_order_relaxed);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  run_chunks(0);
  wait_until([&] { return done_items_.load(std::memory_order_acquire) == num_items; });
  // Close the job, then wait out workers that registered before the close (they find nothing
  // left to claim). NOTE: seq_cst on open_ and active_ is what makes a worker either see the
  // close or be seen here.
  open_.store(0, std::memory_order_seq_cst);
  wait_until([&] { return active_.load(std::memory_order_seq_cst) == 0; });
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
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (open_.load(std::memory_order_seq_cst) == gen) run_chunks(thread_index);
    active_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace troupe::gpu::cpu
