#include "thread_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::cpu {
namespace {

// How long an idle worker polls for the next job before it sleeps. A training step issues its
// loops back to back with a few microseconds between them: a worker that slept would be woken by
// the kernel each time (tens of microseconds, and a system call on both sides).
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) {
    workers_.emplace_back([this] { worker(); });
    worker_ids_.push_back(workers_.back().get_id());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::in_worker() const {
  const std::thread::id me = std::this_thread::get_id();
  return owner_.load(std::memory_order_relaxed) == me ||
         std::find(worker_ids_.begin(), worker_ids_.end(), me) != worker_ids_.end();
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
    // Poll, then sleep until the generation moves on (a new job, or the destructor).
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
      cpu_relax();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) {
        std::unique_lock lock(mu_);
        sleeping_.fetch_add(1);  // seq_cst: pairs with parallel_for's bump-then-read
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleeping_.fetch_sub(1);
        break;
      }
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    run_chunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  if (workers_.empty() || n <= grain || in_worker()) {
    fn(0, n);
    return;
  }
  std::lock_guard job(job_mu_);
  owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  const std::int64_t max_chunks = std::min<std::int64_t>(size() * 4, (n + grain - 1) / grain);
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + max_chunks - 1) / max_chunks;
  chunks_ = (n + chunk_ - 1) / chunk_;
  next_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job; then read sleeping_ (Dekker with worker)
  if (sleeping_.load() > 0) {
    { std::lock_guard lock(mu_); }  // a worker between its check and wait() is now waiting
    wake_.notify_all();
  }
  run_chunks();
  // Every worker checks out of every job, so that none still reads fn_ when it is reused.
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 4096)
      cpu_relax();
    else
      std::this_thread::yield();  // a worker was descheduled: give it the core
  }
  fn_ = nullptr;
  owner_.store(std::thread::id(), std::memory_order_relaxed);
  std::exception_ptr error;
  {
    std::lock_guard lock(mu_);
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::run_parts(int max_parts, const std::function<void(int, int)>& fn) {
  const int parts = std::max(1, std::min(size(), max_parts));
  parallel_for(parts, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t p = b; p < e; ++p) fn(static_cast<int>(p), parts);
  });
}

}  // namespace tessera::cpu
