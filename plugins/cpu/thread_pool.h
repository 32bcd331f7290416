// A fixed pool of worker threads for element-wise work and reductions.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
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
  // calling thread, and returns when all are done. Runs inline when one chunk covers n. Calls
  // from several threads are serialised. The first exception thrown by fn is rethrown here.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

 private:
  void worker();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex job_mu_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0, chunk_ = 0, chunks_ = 0;
  std::atomic<std::int64_t> next_{0};
  int active_ = 0;  // workers that have not finished the current job
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace tessera::cpu
