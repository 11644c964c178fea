// ThreadPool: the CPU backend's compute threads. One process-wide pool (sized once from
// DEEPINFER_NUM_THREADS, else the hardware concurrency) shared by every CPU kernel, so there is
// a single set of threads (BLAS runs single-threaded inside it). Idle workers block on a
// condition variable after a short spin: on a loaded machine they do not burn the cores the
// engine's scheduling thread needs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  static ThreadPool& Default();
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in chunks of at least `grain` items, on the pool and the
  // calling thread; returns when all are done. Runs inline when there is one chunk or when
  // called from inside another ParallelFor.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunChunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;       // guarded by mu_
  bool stop_ = false;             // guarded by mu_
  int active_ = 0;                // workers still inside the current job; guarded by mu_
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::mutex call_mu_;            // one ParallelFor at a time
};

// ParallelFor on the default pool.
inline void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::Default().ParallelFor(n, grain, fn);
}

}  // namespace deepinfer
