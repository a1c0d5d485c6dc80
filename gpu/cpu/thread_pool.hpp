// A small fork-join pool for the CPU kernels: the calling thread plus (num_threads - 1) workers
// run one parallel_for at a time.
//
// Work is split into contiguous, deterministic ranges that depend only on (num_items,
// num_threads), never on timing: each kernel splits over independent outputs (matmul output
// tiles, attention (token, head) pairs), never over a reduction, so results are bit-identical
// whatever the thread count.
//
// Workers spin briefly between jobs (a decode step issues a few hundred short jobs) and then
// sleep on an atomic wait, so an idle pool costs no CPU.
//
// Thread-safety: parallel_for is called by one thread at a time (the backend's compute thread);
// it is not re-entrant.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace troupe::gpu::cpu {

class ThreadPool {
 public:
  // num_threads <= 0: std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_index) on disjoint ranges covering [0, num_items); thread t gets
  // [num_items * t / n, num_items * (t + 1) / n). Returns when every range is done.
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread_index)>;
  void parallel_for(int64_t num_items, const RangeFn& fn);

  // The same split parallel_for uses.
  static int64_t split_point(int64_t num_items, int part, int num_parts) {
    return num_items * part / num_parts;
  }

 private:
  void worker_loop(int thread_index);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  const RangeFn* job_ = nullptr;
  int64_t job_items_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace troupe::gpu::cpu
