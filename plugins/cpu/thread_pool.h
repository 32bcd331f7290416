// A fixed pool of worker threads: every parallel loop of the CPU plugin, GEMMs included, runs on
// it (the GEMM library is kept single-threaded, see blas.h), so the process has one set of
// threads that never compete with each other for the cores.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class ThreadPool {
 public:
  // |threads| workers in all, the calling thread included (at least 1).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in chunks of at least |grain| items, on the pool and the
  // calling thread, and returns when all are done. Runs inline when one chunk covers n, and when
  // called from inside a chunk of this pool (nested loops run serially, never deadlock). Calls from
  // several other threads are serialised. The first exception thrown by fn is rethrown here, after
  // every chunk has finished.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

  // Calls fn(part, parts) once for each part in [0, parts) with parts = min(size(), |max_parts|),
  // one part per thread: for work split by hand (a GEMM cut into column blocks). Same rules as
  // parallel_for.
  void run_parts(int max_parts, const std::function<void(int, int)>& fn);

  // Whether the calling thread is running a chunk of this pool (a worker, or the thread whose
  // parallel_for is running).
  bool in_worker() const;

 private:
  void worker();
  void run_chunks();

  // No thread_local state: LeakSanitizer (GCC 12's, on glibc 2.36) crashes at exit walking the
  // dynamic TLS of a dlopen'ed module touched by several threads.
  std::vector<std::thread> workers_;
  std::vector<std::thread::id> worker_ids_;  // fixed after construction
  std::atomic<std::thread::id> owner_{};     // the thread running parallel_for, while it does
  std::mutex job_mu_;                        // one parallel_for at a time
  // Job state: written by the caller before generation_ is bumped, read by workers after.
  const std::function<void(std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0, chunk_ = 0, chunks_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};   // workers that have not finished the current job
  std::atomic<int> sleeping_{0};  // workers blocked on wake_
  std::mutex mu_;                 // guards sleeping on wake_ and error_
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};  // set before the destructor's last generation bump
  std::exception_ptr error_;
};

}  // namespace tessera::cpu
