#include "base/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace deepinfer {

namespace {
thread_local bool tls_inside_pool = false;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(num_threads, 1); ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool pool([] {
    const char* env = std::getenv("DEEPINFER_NUM_THREADS");
    if (env != nullptr && std::atoi(env) > 0) return std::atoi(env);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    const int64_t begin = c * job_chunk_;
    if (begin >= job_n_) return;
    (*job_)(begin, std::min(job_n_, begin + job_chunk_));
  }
}

void ThreadPool::WorkerLoop() {
  tls_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunChunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = static_cast<int64_t>(num_threads()) * 4;
  const int64_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  if (workers_.empty() || chunk >= n || tls_inside_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    next_chunk_.store(0, std::memory_order_relaxed);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  tls_inside_pool = true;
  RunChunks();
  tls_inside_pool = false;
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
}

}  // namespace deepinfer
