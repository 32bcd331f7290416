// The CPU plugin's thread pool, built from the plugin's source: every index exactly once, nested
// loops, exceptions, and many short jobs with idle gaps (the sleep/wake path).
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../../plugins/cpu/thread_pool.h"

namespace tessera::cpu {
namespace {

TEST(CpuThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (std::int64_t n : {1, 2, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    pool.parallel_for(n, 3, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
    });
    for (const auto& h : hits) ASSERT_EQ(h.load(), 1) << "n = " << n;
  }
}

TEST(CpuThreadPool, RunPartsCallsEachPartOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(4);
  std::atomic<int> seen_parts{0};
  pool.run_parts(3, [&](int p, int parts) {
    hits[static_cast<std::size_t>(p)]++;
    seen_parts = parts;
  });
  EXPECT_EQ(seen_parts.load(), 3);
  EXPECT_EQ(hits[0].load() + hits[1].load() + hits[2].load(), 3);
  EXPECT_EQ(hits[3].load(), 0);
}

TEST(CpuThreadPool, NestedLoopsRunInlineWithoutDeadlock) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> total{0};
  std::atomic<int> nested_in_worker{0};
  pool.parallel_for(64, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      pool.parallel_for(100, 1, [&](std::int64_t s, std::int64_t t) {
        if (pool.in_worker()) nested_in_worker++;
        total += t - s;
      });
  });
  EXPECT_EQ(total.load(), 64 * 100);
  EXPECT_GT(nested_in_worker.load(), 0);
  EXPECT_FALSE(pool.in_worker());
}

TEST(CpuThreadPool, RethrowsTheFirstErrorAfterAllChunksAndStaysUsable) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> done{0};
  EXPECT_THROW(pool.parallel_for(1000, 1,
                                 [&](std::int64_t b, std::int64_t e) {
                                   done += e - b;
                                   if (b == 0) throw std::runtime_error("chunk 0 failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 1000);  // the other chunks still ran to the end
  std::atomic<std::int64_t> again{0};
  pool.parallel_for(1000, 1, [&](std::int64_t b, std::int64_t e) { again += e - b; });
  EXPECT_EQ(again.load(), 1000);
}

TEST(CpuThreadPool, ManyShortJobsWithIdleGapsLoseNoWakeUp) {
  ThreadPool pool(2);
  std::int64_t total = 0;
  for (int job = 0; job < 2000; ++job) {
    // Every 100th job after a gap longer than the workers' polling: they are asleep by then.
    if (job % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::atomic<std::int64_t> sum{0};
    pool.parallel_for(8, 1, [&](std::int64_t b, std::int64_t e) { sum += e - b; });
    total += sum.load();
  }
  EXPECT_EQ(total, 2000 * 8);
}

}  // namespace
}  // namespace tessera::cpu
