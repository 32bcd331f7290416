// MpiProcessGroup's collectives at the job's size (ctest runs this at 2 and 3 ranks).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "dist_test_util.h"
#include "tessera/dist/dist.h"

namespace {

using tessera::dist::MpiProcessGroup;

using tessera::dist::testing::group;
using tessera::dist::testing::job_seed;

// Rank |r|'s values for a test: fresh random numbers (rank 0's seed for the run, broadcast)
// that every rank can generate for every other rank.
template <class T>
std::vector<T> values_of(int r, std::size_t n, std::uint64_t salt) {
  std::mt19937_64 gen(job_seed() + 1000 * salt + static_cast<std::uint64_t>(r));
  std::normal_distribution<double> dist(0, 1);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

TEST(Collectives, RanksSizesAndHosts) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_NE(size, nullptr) << "run under mpirun";
  EXPECT_EQ(group().size(), std::atoi(size));
  EXPECT_GE(group().rank(), 0);
  EXPECT_LT(group().rank(), group().size());
  // One machine: every rank is local.
  EXPECT_EQ(group().local_size(), group().size());
  EXPECT_EQ(group().local_rank(), group().rank());
  EXPECT_FALSE(group().host().empty());
  const auto hosts = group().all_gather(group().host());
  for (const auto& h : hosts) EXPECT_EQ(h, group().host());
  EXPECT_EQ(group().num_hosts(), 1);
  EXPECT_TRUE(tessera::dist::launched());
  EXPECT_EQ(tessera::dist::launch_description(), "mpirun -np " + std::string(size));
}

TEST(Collectives, AllReduceSumFloatAndDouble) {
  const std::size_t n = 1000 + 7;
  std::vector<float> mine = values_of<float>(group().rank(), n, 1);
  std::vector<double> mine64 = values_of<double>(group().rank(), n, 2);
  std::vector<double> want(n, 0), want64(n, 0);
  for (int r = 0; r < group().size(); ++r) {
    const auto f = values_of<float>(r, n, 1);
    const auto d = values_of<double>(r, n, 2);
    for (std::size_t i = 0; i < n; ++i) {
      want[i] += f[i];
      want64[i] += d[i];
    }
  }
  group().all_reduce_sum(std::span<float>(mine));
  group().all_reduce_sum(std::span<double>(mine64));
  double err = 0, ref = 0, err64 = 0, ref64 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    err += (mine[i] - want[i]) * (mine[i] - want[i]);
    ref += want[i] * want[i];
    err64 += (mine64[i] - want64[i]) * (mine64[i] - want64[i]);
    ref64 += want64[i] * want64[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 1e-6);
  EXPECT_LT(std::sqrt(err64 / ref64), 1e-14);
  std::vector<float> empty;
  group().all_reduce_sum(std::span<float>(empty));  // nothing to do, but collective
}

TEST(Collectives, AllReduceMax) {
  std::vector<double> mine = values_of<double>(group().rank(), 64, 3);
  std::vector<double> want(64, -INFINITY);
  for (int r = 0; r < group().size(); ++r) {
    const auto v = values_of<double>(r, 64, 3);
    for (std::size_t i = 0; i < v.size(); ++i) want[i] = std::max(want[i], v[i]);
  }
  group().all_reduce_max(std::span<double>(mine));
  EXPECT_EQ(mine, want);
}

TEST(Collectives, BroadcastFromTheLastRank) {
  const int root = group().size() - 1;
  std::vector<std::byte> bytes(333);
  const auto payload = values_of<float>(root, bytes.size() / 4, 4);
  if (group().rank() == root) std::memcpy(bytes.data(), payload.data(), payload.size() * 4);
  group().broadcast(bytes, root);
  EXPECT_EQ(std::memcmp(bytes.data(), payload.data(), payload.size() * 4), 0);
}

TEST(Collectives, BroadcastRootOutsideTheJobIsRefused) {
  std::vector<std::byte> bytes(4);
  try {
    group().broadcast(bytes, group().size());
    FAIL() << "no error";
  } catch (const tessera::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("root " + std::to_string(group().size())),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(group().broadcast(bytes, -1), tessera::InvalidArgument);
}

TEST(Collectives, AllGatherValuesOfDifferentLengths) {
  const int r = group().rank();
  const auto all = group().all_gather(std::string(static_cast<std::size_t>(3 * r), 'a' + r));
  ASSERT_EQ(all.size(), static_cast<std::size_t>(group().size()));
  for (int i = 0; i < group().size(); ++i)
    EXPECT_EQ(all[static_cast<std::size_t>(i)],
              std::string(static_cast<std::size_t>(3 * i), 'a' + i));
}

TEST(Collectives, PostRunsOnTheCommunicationThreadInOrder) {
  std::vector<int> order;
  std::thread::id where;
  auto a = group().post([&] {
    order.push_back(1);
    where = std::this_thread::get_id();
  });
  // A collective from a posted task runs there directly.
  std::vector<double> one{1.0};
  auto b = group().post([&] {
    group().all_reduce_sum(std::span<double>(one));
    order.push_back(2);
  });
  auto c = group().post([] { throw tessera::train::DistributedError("from the task"); });
  a.get();
  b.get();
  EXPECT_THROW(c.get(), tessera::train::DistributedError);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_NE(where, std::this_thread::get_id());
  EXPECT_EQ(one[0], group().size());
  group().barrier();
}

TEST(Collectives, TheDdpStrategyIsRegisteredAndChosenUnderALauncher) {
  const auto names = tessera::train::registered_strategies();
  EXPECT_NE(std::find(names.begin(), names.end(), "ddp"), names.end());
  EXPECT_EQ(tessera::train::make_strategy("auto")->name(), "ddp");
  auto s = tessera::train::make_strategy("ddp");
  EXPECT_EQ(s->world_size(), group().size());
  EXPECT_EQ(s->global_rank(), group().rank());
}

}  // namespace
