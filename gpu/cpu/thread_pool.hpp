// A small fork-join pool for the CPU kernels: the calling thread plus (num_threads - 1) workers
// run one parallel_for at a time.
//
// Work is handed out in contiguous chunks claimed from an atomic counter by the caller and
// whichever workers show up, so which thread runs which range depends on timing: on a shared,
// oversubscribed host a descheduled worker's share is picked up by the others instead of
// stalling the job, and a worker that arrives after the job is done skips it. Chunks shrink as
// the job drains (each claims 1 / (2 * num_threads) of what is left, at least one item and at
// most 1 / (4 * num_threads) of the job, the most a descheduled thread can hold up), so the
// last ones are single items and the threads finish together: fixed chunks of an eighth of the
// job left one thread waiting for the other's last chunk, 4.5 % of a batch-16 decode's CPU
// samples (perf, cpu_forward_bench; 1.7 % with shrinking chunks). Results never
// depend on the split: each kernel splits over independent outputs (matmul output tiles,
// attention (token, head) pairs, rows), never over a reduction, so they are bit-identical
// whatever the thread count or timing.
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

  // Calls fn(begin, end, thread_index) on disjoint ranges covering [0, num_items), each range
  // on one thread; thread_index (< num_threads, 0 for the caller) identifies the thread, so fn
  // may use per-thread scratch. Returns when every range is done.
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread_index)>;
  void parallel_for(int64_t num_items, const RangeFn& fn);

 private:
  void worker_loop(int thread_index);
  // Claims and runs chunks of the open job until none is left.
  void run_chunks(int thread_index);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  // The job: read by a worker only while it is registered in active_ for the open generation.
  std::atomic<const RangeFn*> job_{nullptr};
  std::atomic<int64_t> job_items_{0};
  std::atomic<int64_t> next_item_{0};   // first unclaimed item
  std::atomic<int64_t> done_items_{0};  // items whose chunk has finished
  std::atomic<int> active_{0};          // workers registered in the open job
  std::atomic<uint64_t> open_{0};       // generation still accepting workers; 0: none
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace troupe::gpu::cpu
