#include <gtest/gtest.h>

#include "tessera/caching_allocator.h"
#include "tessera/errors.h"
#include "tessera/host.h"

using namespace tessera;

namespace {

// Host memory with a budget, to provoke OutOfMemory.
class BudgetAllocator : public Allocator {
 public:
  explicit BudgetAllocator(std::size_t budget) : budget_(budget) {}
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override {
    if (bytes > budget_ - used_) throw OutOfMemory("mock:0", bytes, budget_ - used_);
    used_ += bytes;
    ++calls;
    return std::make_unique<Tracked>(bytes, used_);
  }
  MemoryInfo memory() const override { return {budget_, budget_ - used_}; }
  int calls = 0;

 private:
  struct Tracked : Buffer {
    Tracked(std::size_t b, std::size_t& used) : host(b), used_(used) {}
    ~Tracked() override { used_ -= size(); }
    std::size_t size() const override { return host.size(); }
    void* host_ptr() const override { return host.host_ptr(); }
    HostBuffer host;
    std::size_t& used_;
  };
  std::size_t budget_, used_ = 0;
};

}  // namespace

TEST(CachingAllocator, RoundsToSizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(4096), 4096u);
  EXPECT_EQ(CachingAllocator::round_size(4097), 4096u + 512u);
  for (std::size_t n : {5000u, 70000u, 1000000u, 123456789u}) {
    const std::size_t r = CachingAllocator::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_LE(r, n + n / 8 + 512) << n;
  }
}

TEST(CachingAllocator, ReusesFreedBlocksAndCounts) {
  BudgetAllocator raw(1 << 20);
  CachingAllocator cache(raw, "mock:0");
  Buffer* first = nullptr;
  {
    Block b = cache.allocate(1000);
    first = b.buffer();
    EXPECT_EQ(cache.stats().allocated, 1024u);
  }
  EXPECT_EQ(cache.stats().allocated, 0u);
  EXPECT_EQ(cache.stats().reserved, 1024u);
  Block again = cache.allocate(1020);  // same size class
  EXPECT_EQ(again.buffer(), first);
  EXPECT_EQ(raw.calls, 1);
  Block other = cache.allocate(5000);
  EXPECT_EQ(raw.calls, 2);
  const AllocatorStats s = cache.stats();
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.alloc_count, 2u);
  EXPECT_EQ(s.allocated, 1024u + CachingAllocator::round_size(5000));
  EXPECT_EQ(s.peak_allocated, s.allocated);
}

TEST(CachingAllocator, EmptyCacheReleasesOnlyFreeBlocks) {
  BudgetAllocator raw(1 << 20);
  CachingAllocator cache(raw, "mock:0");
  Block held = cache.allocate(2048);
  { Block freed = cache.allocate(8192); }
  EXPECT_EQ(raw.memory().free, (1u << 20) - 2048 - 8192);
  cache.empty_cache();
  EXPECT_EQ(raw.memory().free, (1u << 20) - 2048);
  EXPECT_EQ(cache.stats().reserved, 2048u);
}

TEST(CachingAllocator, RetriesAfterEmptyingTheCacheThenThrowsOutOfMemory) {
  BudgetAllocator raw(64 * 1024);
  CachingAllocator cache(raw, "mock:0");
  { Block big = cache.allocate(40 * 1024); }  // cached, holds 40 KiB of the budget
  Block b = cache.allocate(48 * 1024);        // fits only after the cache is emptied
  EXPECT_NE(b.buffer(), nullptr);
  try {
    Block c = cache.allocate(32 * 1024);
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.device(), "mock:0");
    EXPECT_EQ(e.requested(), 32u * 1024);
    EXPECT_EQ(e.free_bytes(), 16u * 1024);
    EXPECT_NE(std::string(e.what()).find("mock:0 could not allocate 32.0 KiB"), std::string::npos)
        << e.what();
  }
  Block d = cache.allocate(8 * 1024);  // still usable afterwards
  EXPECT_NE(d.buffer(), nullptr);
}
