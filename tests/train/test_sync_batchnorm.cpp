// Synchronised BatchNorm2d (convert_sync_batchnorm): two ranks (threads of a ThreadProcessGroup)
// on the halves of a batch compute what one process computes on the whole batch: outputs,
// running statistics and gradients (the input's per sample; the weight's and bias's summed over
// the ranks), on cpu:0.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/tessera.h"
#include "tessera/train/train.h"
#include "thread_process_group.h"

using namespace tessera;
using namespace tessera::train;
using namespace tessera::train::testing;

namespace {

Tensor random_tensor(const Shape& s, std::uint64_t seed, float scale = 1, float shift = 0) {
  Generator g(seed);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (float& x : v) x = g.normal() * scale + shift;
  return Tensor::from(v, s, &device("cpu"));
}

double normalised_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
    den += double{y[i]} * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Result {
  Tensor y, dx, dw, db, running_mean, running_var;
};

// Two steps of BatchNorm2d(3) on |x| with loss sum(y * r): the second step's results.
Result run(const Tensor& x, const Tensor& r, ProcessGroup* group) {
  BatchNorm2d bn(3, 1e-5, 0.3);
  copy_(bn.weight.value(), random_tensor({3}, 7, 0.5f, 1.0f));
  copy_(bn.bias.value(), random_tensor({3}, 8));
  EXPECT_EQ(convert_sync_batchnorm(bn, group), 1);
  Result out;
  for (int step = 0; step < 2; ++step) {
    bn.weight.zero_grad();
    bn.bias.zero_grad();
    Variable xv(x, true);
    const Variable y = bn(xv);
    sum(mul(y, Variable(r)), std::vector<int>{}).backward();
    out = {y.value(),      xv.grad(),         bn.weight.grad(),
           bn.bias.grad(), bn.running_mean(), bn.running_var()};
  }
  return out;
}

}  // namespace

TEST(SyncBatchNorm, TwoRanksOnHalvesEqualOneProcessOnTheBatch) {
  const Tensor x = random_tensor({8, 3, 4, 5}, 1, 2.0f, 3.0f);
  const Tensor r = random_tensor({8, 3, 4, 5}, 2);
  const Result one = run(x, r, nullptr);
  auto world = std::make_shared<ThreadWorld>(2);
  std::vector<Result> ranks(2);
  run_ranks(2, [&](int rank) {
    ThreadProcessGroup group(world, rank);
    // Halves of unequal size: 3 and 5 samples.
    const std::int64_t begin = rank == 0 ? 0 : 3, n = rank == 0 ? 3 : 5;
    ranks[static_cast<std::size_t>(rank)] =
        run(x.narrow(0, begin, n).contiguous(), r.narrow(0, begin, n).contiguous(), &group);
  });
  EXPECT_LT(normalised_error(cat({ranks[0].y, ranks[1].y}, 0), one.y), 1e-5);
  EXPECT_LT(normalised_error(cat({ranks[0].dx, ranks[1].dx}, 0), one.dx), 1e-5);
  EXPECT_LT(normalised_error(add(ranks[0].dw, ranks[1].dw), one.dw), 1e-5);
  EXPECT_LT(normalised_error(add(ranks[0].db, ranks[1].db), one.db), 1e-5);
  for (const Result& mine : ranks) {
    EXPECT_LT(normalised_error(mine.running_mean, one.running_mean), 1e-5);
    EXPECT_LT(normalised_error(mine.running_var, one.running_var), 1e-5);
  }
  // The ranks' own gradients differ (each from its half): a synchronisation that did nothing
  // would not pass the checks above, and each rank's weight gradient is its own.
  EXPECT_GT(normalised_error(ranks[0].dw, one.dw), 1e-3);
}

TEST(SyncBatchNorm, ConvertSetsEveryLayerAndNullTurnsItOff) {
  Sequential s;
  s.emplace<BatchNorm2d>(2).emplace<ReLU>().emplace<BatchNorm2d>(2);
  auto world = std::make_shared<ThreadWorld>(1);
  ThreadProcessGroup group(world, 0);
  EXPECT_EQ(convert_sync_batchnorm(s, &group), 2);
  EXPECT_EQ(dynamic_cast<BatchNorm2d&>(s[0]).process_group(), &group);
  EXPECT_EQ(dynamic_cast<BatchNorm2d&>(s[2]).process_group(), &group);
  // A group of one process normalises as without one.
  const Tensor x = random_tensor({4, 2, 3, 3}, 3);
  const Tensor with = s(Variable(x)).value();
  EXPECT_EQ(convert_sync_batchnorm(s, nullptr), 2);
  EXPECT_EQ(dynamic_cast<BatchNorm2d&>(s[0]).process_group(), nullptr);
  Linear no_bn(2, 2);
  EXPECT_EQ(convert_sync_batchnorm(no_bn, &group), 0);
  EXPECT_TRUE(with.defined());
}

TEST(SyncBatchNorm, AJobBatchOfOneValuePerChannelIsRefused) {
  auto world = std::make_shared<ThreadWorld>(2);
  std::vector<std::string> errors(2);
  run_ranks(2, [&](int rank) {
    ThreadProcessGroup group(world, rank);
    BatchNorm2d bn(3);
    convert_sync_batchnorm(bn, &group);
    // One sample of 1x1 on rank 0, none on rank 1: one value per channel in the job.
    const Tensor x = random_tensor({rank == 0 ? 1 : 0, 3, 1, 1}, 4);
    try {
      (void)bn(Variable(x));
    } catch (const InvalidArgument& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("more than 1 value per channel"), std::string::npos) << e;
}
