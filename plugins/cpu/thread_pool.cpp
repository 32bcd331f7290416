#include "thread_pool.h"

#include <algorithm>

namespace tessera::cpu {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (std::int64_t c = next_++; c < chunks_; c = next_++) {
    const std::int64_t begin = c * chunk_, end = std::min(n_, begin + chunk_);
    try {
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker() {
  std::uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard lock(mu_);
      if (--active_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  std::lock_guard job(job_mu_);
  const std::int64_t max_chunks = std::min<std::int64_t>(size() * 4, (n + grain - 1) / grain);
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + max_chunks - 1) / max_chunks;
    chunks_ = (n + chunk_ - 1) / chunk_;
    next_ = 0;
    error_ = nullptr;
    active_ = static_cast<int>(workers_.size());  // every worker checks out of every job
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::exception_ptr error;
  {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tessera::cpu
