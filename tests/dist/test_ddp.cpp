// DDPStrategy driven by a manual training loop (as the Trainer drives it): after k steps the
// weights of every rank equal those of one process trained on the global batch (the union of
// the ranks' batches). The device comes from TESSERA_DIST_TEST_DEVICE (cpu:0 by default).
#include <cmath>
#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

#include "dist_test_util.h"
#include "tessera/dist/dist.h"
#include "tessera/runtime.h"
#include "tessera/train/train.h"

namespace {

using namespace tessera;
using namespace tessera::train;
using tessera::dist::DDPOptions;
using tessera::dist::DDPStrategy;
using tessera::dist::MpiProcessGroup;

using tessera::dist::testing::group;
using tessera::dist::testing::job_seed;

Device& test_device() {
  const char* v = std::getenv("TESSERA_DIST_TEST_DEVICE");
  return tessera::device(v && *v ? v : "cpu:0");
}

// Two Linear layers, a parameter that never gets a gradient, and a buffer.
struct Net : Module {
  Net(std::int64_t in, std::int64_t hidden, std::int64_t out, std::uint64_t seed) {
    Generator gen(seed);
    fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden, gen));
    fc2 = register_module("fc2", std::make_shared<Linear>(hidden, out, gen));
    unused = register_parameter("unused", Tensor::full(Shape({3}), 0.5));
    register_buffer("stat", Tensor::full(Shape({2}), 0));
  }
  Variable forward(const Variable& x) override { return fc2->forward(relu(fc1->forward(x))); }
  Tensor& stat() { return *named_buffers(false).front().tensor; }
  std::shared_ptr<Linear> fc1, fc2;
  Variable unused;
};

constexpr std::int64_t kIn = 8, kHidden = 16, kOut = 4, kPerRank = 4;

// Batch |step| of the global batch of kPerRank x world samples: rank |rank|'s share is the rows
// rank, rank + world, ... (DistributedSampler's order); rank -1 gives the whole batch.
std::pair<Tensor, Tensor> batch(int step, int rank, Device& dev) {
  const int world = group().size();
  const std::int64_t global = kPerRank * world;
  std::mt19937_64 gen(job_seed() + static_cast<std::uint64_t>(step));
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> x(static_cast<std::size_t>(global * kIn));
  std::vector<std::int64_t> y(static_cast<std::size_t>(global));
  for (float& v : x) v = normal(gen);
  for (auto& v : y) v = static_cast<std::int64_t>(gen() % kOut);
  if (rank < 0)
    return {Tensor::from(x, Shape({global, kIn}), &dev),
            Tensor::from<std::int64_t>(y, Shape({global}), &dev)};
  std::vector<float> xs;
  std::vector<std::int64_t> ys;
  for (std::int64_t i = rank; i < global; i += world) {
    xs.insert(xs.end(), x.begin() + i * kIn, x.begin() + (i + 1) * kIn);
    ys.push_back(y[static_cast<std::size_t>(i)]);
  }
  return {Tensor::from(xs, Shape({kPerRank, kIn}), &dev),
          Tensor::from<std::int64_t>(ys, Shape({kPerRank}), &dev)};
}

double normalised_error(Module& a, Module& b) {
  double err = 0, ref = 0;
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].variable->value().to_vector<float>();
    const auto vb = pb[i].variable->value().to_vector<float>();
    for (std::size_t k = 0; k < va.size(); ++k) {
      err += (va[k] - vb[k]) * (va[k] - vb[k]);
      ref += vb[k] * vb[k];
    }
  }
  return std::sqrt(err / ref);
}

// Trains a DDP copy (initialised differently on every rank: rank 0's weights must win) and a
// one-process reference on the global batch for |steps| steps, |micro| batches per step.
void train_and_compare(DDPOptions options, int steps, int micro) {
  Device& dev = test_device();
  DeviceGuard guard(dev);
  Net ddp_net(kIn, kHidden, kOut, 7 + static_cast<std::uint64_t>(group().rank()));
  Net ref_net(kIn, kHidden, kOut, 7);
  ddp_net.to(dev);
  ref_net.to(dev);
  DDPStrategy ddp(options);
  ddp.setup_module(ddp_net);
  Adam ddp_opt(ddp_net.named_parameters(), AdamOptions{.lr = 0.01});
  Adam ref_opt(ref_net.named_parameters(), AdamOptions{.lr = 0.01});
  int batch_no = 0;
  for (int step = 0; step < steps; ++step) {
    for (int m = 0; m < micro; ++m, ++batch_no) {
      const bool sync = m == micro - 1;
      auto [x, y] = batch(batch_no, group().rank(), dev);
      ddp.before_backward(sync);
      mul_scalar(cross_entropy(ddp_net(Variable(x)), y), 1.0 / micro).backward();
      ddp.after_backward(sync);
      auto [gx, gy] = batch(batch_no, -1, dev);
      mul_scalar(cross_entropy(ref_net(Variable(gx)), gy), 1.0 / micro).backward();
    }
    ddp_opt.step();
    ref_opt.step();
    ddp_opt.zero_grad();
    ref_opt.zero_grad();
  }
  EXPECT_LT(normalised_error(ddp_net, ref_net), 1e-5) << "on " << dev.id();
  // The parameter without gradients counted as zeros: Adam left it as it was.
  EXPECT_EQ(ddp_net.unused.value().to_vector<float>(), std::vector<float>(3, 0.5f));
  const auto c = ddp.counters();
  EXPECT_EQ(c.syncs, steps);
  const std::int64_t params = kIn * kHidden + kHidden + kHidden * kOut + kOut + 3;
  EXPECT_EQ(c.bytes_all_reduced, params * 4 * steps);
  EXPECT_GT(c.all_reduce_seconds, 0);
  ddp.teardown();
}

TEST(DDP, MatchesOneProcessWithTheGlobalBatch) {
  train_and_compare({}, 3, 1);
}

TEST(DDP, OneBucketPerParameterMatchesToo) {
  DDPOptions o;
  o.bucket_cap_mb = 1e-6;  // every parameter in a bucket of its own
  train_and_compare(o, 2, 1);
}

TEST(DDP, GradientAccumulationSynchronisesOnlyTheLastBatch) {
  train_and_compare({}, 2, 3);
}

TEST(DDP, BucketsAreLaunchedDuringBackward) {
  Device& dev = test_device();
  DeviceGuard guard(dev);
  Net net(kIn, kHidden, kOut, 3);
  net.to(dev);
  DDPOptions o;
  o.bucket_cap_mb = 1e-6;
  DDPStrategy ddp(o);
  ddp.setup_module(net);
  // fc1.weight's gradient is the last one backward produces; by then the buckets of fc2 (the
  // first ones) have been handed to the communication thread.
  std::int64_t posted_before_last = -1;
  auto h = net.fc1->weight.register_post_accumulate_grad_hook([&](Variable&) {
    // A task posted now runs after the buckets launched so far.
    group().post([] {}).get();
    posted_before_last = ddp.counters().buckets;
  });
  auto [x, y] = batch(0, group().rank(), dev);
  ddp.before_backward(true);
  cross_entropy(net(Variable(x)), y).backward();
  ddp.after_backward(true);
  h.remove();
  EXPECT_GE(posted_before_last, 2);  // fc2.bias, fc2.weight (and fc1.bias) already reduced
  EXPECT_EQ(ddp.counters().buckets, 5);
  ddp.teardown();
}

TEST(DDP, RankZerosBuffersAreBroadcastAfterEachSynchronisedBackward) {
  for (bool broadcast : {true, false}) {
    Device& dev = test_device();
    DeviceGuard guard(dev);
    Net net(kIn, kHidden, kOut, 3);
    net.to(dev);
    DDPOptions o;
    o.broadcast_buffers = broadcast;
    DDPStrategy ddp(o);
    net.stat().copy_from_host(std::vector<float>{1.0f * group().rank(), 5}.data(), 8);
    ddp.setup_module(net);  // rank 0's buffer everywhere
    EXPECT_EQ(net.stat().to_vector<float>(), (std::vector<float>{0, 5}));
    const float mine = 10.0f + static_cast<float>(group().rank());
    net.stat().copy_from_host(std::vector<float>{mine, mine}.data(), 8);
    auto [x, y] = batch(0, group().rank(), dev);
    ddp.before_backward(true);
    cross_entropy(net(Variable(x)), y).backward();
    ddp.after_backward(true);
    const float want = broadcast ? 10.0f : mine;
    EXPECT_EQ(net.stat().to_vector<float>(), (std::vector<float>{want, want}))
        << "broadcast_buffers=" << broadcast;
    ddp.teardown();
  }
}

TEST(DDP, ADifferentModelOnOneRankIsNamedOnEveryRank) {
  if (group().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int odd = group().size() - 1;
  Net net(kIn, group().rank() == odd ? kHidden + 1 : kHidden, kOut, 3);
  DDPStrategy ddp;
  try {
    ddp.setup_module(net);
    FAIL() << "no error";
  } catch (const DistributedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank " + std::to_string(odd) + " (host " + group().host() + ")"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("'parameter fc1.weight [" + std::to_string(kHidden + 1) + ",8] f32'"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("rank 0 (host"), std::string::npos) << m;
  }
}

TEST(DDP, DevicesMustMatchTheProcessesOfTheMachine) {
  DDPStrategy ddp;
  const int n = group().size();
  EXPECT_EQ(&ddp.device("cpu", 1), &tessera::device("cpu:0"));
  EXPECT_EQ(&ddp.device("cpu", n), &tessera::device("cpu:0"));
  try {
    ddp.device("cpu", n + 1);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("devices=" + std::to_string(n + 1)), std::string::npos) << m;
    EXPECT_NE(m.find("mpirun -np " + std::to_string(n)), std::string::npos) << m;
    EXPECT_NE(m.find("pass devices=" + std::to_string(n)), std::string::npos) << m;
  }
  DDPOptions two_nodes;
  two_nodes.num_nodes = 2;
  DDPStrategy ddp2(two_nodes);
  try {
    ddp2.device("cpu", 1);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("runs on 1 host(s)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ddp.device("no-such-plugin", 1), ConfigError);
}

TEST(DDP, CpuRanksShareTheCores) {
  const char* before = std::getenv("TESSERA_CPU_THREADS");
  const std::string saved = before ? before : "";
  unsetenv("TESSERA_CPU_THREADS");
  DDPStrategy ddp;
  ddp.setup_environment();
  const char* set = std::getenv("TESSERA_CPU_THREADS");
  ASSERT_NE(set, nullptr);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(std::atoi(set), std::max(1, cores / group().local_size()));
  setenv("TESSERA_CPU_THREADS", "1", 1);
  ddp.setup_environment();  // the user's value stays
  EXPECT_STREQ(std::getenv("TESSERA_CPU_THREADS"), "1");
  if (before)
    setenv("TESSERA_CPU_THREADS", saved.c_str(), 1);
  else
    unsetenv("TESSERA_CPU_THREADS");
}

TEST(DDP, BadOptionsAreRefused) {
  DDPOptions o;
  o.bucket_cap_mb = 0;
  EXPECT_THROW(DDPStrategy{o}, ConfigError);
  o.bucket_cap_mb = 25;
  o.num_nodes = -1;
  EXPECT_THROW(DDPStrategy{o}, ConfigError);
}

// The reduced GPT (no dropout) at the job's size against one process on the global batch.
TEST(DDPGpt, MatchesOneProcessWithTheGlobalBatch) {
  Device& dev = test_device();
  DeviceGuard guard(dev);
  GPTConfig cfg;
  cfg.vocab_size = 11;
  cfg.block_size = 8;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 16;
  cfg.dropout = 0;
  Generator g_ddp(5 + static_cast<std::uint64_t>(group().rank())), g_ref(5);
  GPT ddp_net(cfg, &g_ddp), ref_net(cfg, &g_ref);
  ddp_net.to(dev);
  ref_net.to(dev);
  DDPStrategy ddp;
  ddp.setup_module(ddp_net);
  AdamW ddp_opt(ddp_net.named_parameters(), AdamWOptions{.lr = 0.01});
  AdamW ref_opt(ref_net.named_parameters(), AdamWOptions{.lr = 0.01});
  const int world = group().size();
  for (int step = 0; step < 2; ++step) {
    std::mt19937_64 gen(job_seed() + 100 + static_cast<std::uint64_t>(step));
    const std::int64_t global = 2 * world, t = cfg.block_size;
    std::vector<std::int32_t> x(static_cast<std::size_t>(global * t)), y(x.size());
    for (auto& v : x) v = static_cast<std::int32_t>(gen() % 11);
    for (auto& v : y) v = static_cast<std::int32_t>(gen() % 11);
    std::vector<std::int32_t> xs, ys;
    for (std::int64_t i = group().rank(); i < global; i += world) {
      xs.insert(xs.end(), x.begin() + i * t, x.begin() + (i + 1) * t);
      ys.insert(ys.end(), y.begin() + i * t, y.begin() + (i + 1) * t);
    }
    auto shard = [&](const std::vector<std::int32_t>& v) {
      return Tensor::from<std::int32_t>(v, Shape({static_cast<std::int64_t>(v.size()) / t, t}),
                                        &dev);
    };
    ddp.before_backward(true);
    cross_entropy(ddp_net.forward(shard(xs)), shard(ys)).backward();
    ddp.after_backward(true);
    cross_entropy(ref_net.forward(shard(x)), shard(y)).backward();
    ddp_opt.step();
    ref_opt.step();
    ddp_opt.zero_grad();
    ref_opt.zero_grad();
  }
  EXPECT_LT(normalised_error(ddp_net, ref_net), 1e-5);
  ddp.teardown();
}

}  // namespace

namespace {

// SyncBatchNorm over MPI: each rank normalises its share of a batch by the statistics of the
// whole batch, as one process does on the whole batch (outputs, running statistics, gradients).
TEST(DDPSyncBatchNorm, RanksOnSharesEqualOneProcessOnTheBatch) {
  const int world = group().size(), rank = group().rank();
  const std::int64_t per = 2, c = 3, global = per * world;
  std::mt19937_64 gen(job_seed() + 77);
  std::normal_distribution<float> normal(1, 2);
  std::vector<float> x(static_cast<std::size_t>(global * c * 16));
  for (float& v : x) v = normal(gen);
  std::vector<float> mine;
  for (std::int64_t i = rank; i < global; i += world)
    mine.insert(mine.end(), x.begin() + i * c * 16, x.begin() + (i + 1) * c * 16);
  BatchNorm2d synced(c), whole(c);
  EXPECT_EQ(convert_sync_batchnorm(synced, &group()), 1);
  Variable xs(Tensor::from(mine, Shape({per, c, 4, 4})), true);
  Variable xw(Tensor::from(x, Shape({global, c, 4, 4})), true);
  Variable ys = synced.forward(xs), yw = whole.forward(xw);
  // A loss whose gradient differs per sample: sum(y * w) with w the sample's position.
  std::vector<float> w(x.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) - 3;
  std::vector<float> w_mine;
  for (std::int64_t i = rank; i < global; i += world)
    w_mine.insert(w_mine.end(), w.begin() + i * c * 16, w.begin() + (i + 1) * c * 16);
  ys.backward(Tensor::from(w_mine, Shape({per, c, 4, 4})));
  yw.backward(Tensor::from(w, Shape({global, c, 4, 4})));
  const auto out_s = ys.value().to_vector<float>(), out_w = yw.value().to_vector<float>();
  const auto gx_s = xs.grad().to_vector<float>(), gx_w = xw.grad().to_vector<float>();
  double err = 0, ref = 0, gerr = 0, gref = 0;
  for (std::int64_t k = 0; k < per; ++k) {
    const std::int64_t i = rank + k * world;  // this rank's k-th sample in the whole batch
    for (std::int64_t e = 0; e < c * 16; ++e) {
      const auto a = static_cast<std::size_t>(k * c * 16 + e),
                 b = static_cast<std::size_t>(i * c * 16 + e);
      err += std::pow(out_s[a] - out_w[b], 2);
      ref += std::pow(out_w[b], 2);
      gerr += std::pow(gx_s[a] - gx_w[b], 2);
      gref += std::pow(gx_w[b], 2);
    }
  }
  EXPECT_LT(std::sqrt(err / ref), 1e-5);
  EXPECT_LT(std::sqrt(gerr / gref), 1e-5);
  const auto rm_s = synced.running_mean().to_vector<float>(),
             rm_w = whole.running_mean().to_vector<float>();
  for (std::size_t i = 0; i < rm_s.size(); ++i) EXPECT_NEAR(rm_s[i], rm_w[i], 1e-5);
}

}  // namespace
