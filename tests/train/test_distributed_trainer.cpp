// The Trainer's data-parallel wiring, with the ranks of a job as threads (thread_process_group.h)
// on cpu:0: sharded loaders and averaged gradients give the weights and metrics of one process
// with the global batch; no_sync within gradient accumulation; a NaN loss or should_stop on one
// rank stops all; rank_zero_only callbacks and checkpoints on rank 0 alone; resuming with another
// number of processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>

#include <fmt/format.h>

#include "tessera/tessera.h"
#include "tessera/train/train.h"
#include "thread_process_group.h"

using namespace tessera;
using namespace tessera::train;
using namespace tessera::train::testing;
namespace fs = std::filesystem;

namespace {

Dataset random_images(std::int64_t n, std::uint64_t seed) {
  Generator g(seed);
  Dataset d;
  d.name = "random";
  d.size = n;
  d.rows = d.cols = 4;
  for (std::int64_t i = 0; i < n * 16; ++i)
    d.images.push_back(static_cast<std::uint8_t>(g.below(256)));
  for (std::int64_t i = 0; i < n; ++i) d.labels.push_back(static_cast<std::uint8_t>(g.below(10)));
  return d;
}

LoaderOptions loader(std::int64_t batch, bool shuffle = true) {
  LoaderOptions o;
  o.batch_size = batch;
  o.seed = 3;
  o.shuffle = shuffle;
  return o;
}

// Flatten, Linear 16-10 with cross-entropy; SGD (momentum 0.9).
struct Net : ImageClassifier {
  explicit Net(std::function<void(Net&, std::int64_t)> hook = nullptr, bool bn = false)
      : ImageClassifier(make(bn),
                        [](Module& m) {
                          OptimizerConfig c;
                          SgdOptions o;
                          o.lr = 0.2f;
                          o.momentum = 0.9f;
                          c.optimizer = std::make_shared<SGD>(m.named_parameters(), o);
                          return c;
                        }),
        on_step(std::move(hook)) {}
  static std::shared_ptr<Module> make(bool bn) {
    Generator g(42);
    auto s = std::make_shared<Sequential>();
    if (bn) s->emplace<BatchNorm2d>(1);
    s->emplace<Flatten>().add(std::make_shared<Linear>(16, 10, g));
    return s;
  }
  Variable training_step(const TensorBatch& batch, std::int64_t i) override {
    Variable loss = ImageClassifier::training_step(batch, i);
    if (on_step) on_step(*this, i);
    return nan_now ? mul_scalar(loss, std::nan("")) : loss;
  }
  std::function<void(Net&, std::int64_t)> on_step;
  bool nan_now = false;
};

double normalised_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = cast(a, DType::f32).to_vector<float>(),
                           y = cast(b, DType::f32).to_vector<float>();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
    den += double{y[i]} * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Counts its calls; rank_zero_only as asked.
struct Recorder final : Callback {
  explicit Recorder(bool zero_only) : zero_only_(zero_only) {}
  void on_fit_start(Trainer&) override { ++starts; }
  void on_train_epoch_end(Trainer&) override { ++epochs; }
  bool rank_zero_only() const override { return zero_only_; }
  int starts = 0, epochs = 0;
  bool zero_only_;
};

TrainerOptions options(std::int64_t epochs) {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.max_epochs = epochs;
  o.enable_progress_bar = false;
  o.log_every_n_steps = 1;
  return o;
}

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("tessera-{}-{}", name, ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Whether fit_ranks and fit_one train the net with a BatchNorm2d in front.
bool g_bn_net = false;

struct RankResult {
  std::vector<Tensor> weights;              // parameters, then buffers
  std::map<std::string, double> validated;  // Trainer::validate after the fit
  std::map<std::string, double> metrics;
  std::int64_t global_step = 0;
  int synced = 0, local = 0, teardowns = 0;
};

// Trains on |n| thread ranks with |per_rank| samples a batch per rank.
std::vector<RankResult> fit_ranks(int n, std::int64_t per_rank, const Dataset& train,
                                  const Dataset& val,
                                  const std::function<void(TrainerOptions&, int)>& edit = {},
                                  const fs::path& resume = {}) {
  auto world = std::make_shared<ThreadWorld>(n);
  std::vector<RankResult> out(static_cast<std::size_t>(n));
  run_ranks(n, [&](int rank) {
    auto strategy = std::make_shared<ThreadDDPStrategy>(world, rank);
    TrainerOptions o = options(2);
    o.strategy = strategy;
    if (edit) edit(o, rank);
    Trainer t(o);
    EXPECT_EQ(t.world_size(), n);
    EXPECT_EQ(t.global_rank(), rank);
    EXPECT_EQ(t.is_global_zero(), rank == 0);
    Net net(nullptr, g_bn_net);
    ImageDataLoader tl(train, loader(per_rank)), vl(val, loader(5, false));
    t.fit(net, tl, &vl, resume);
    out[static_cast<std::size_t>(rank)].validated = t.validate(net, vl);
    // The loaders are back to one process.
    EXPECT_EQ(tl.num_samples(), train.size);
    RankResult& r = out[static_cast<std::size_t>(rank)];
    for (const Variable& p : net.parameters()) r.weights.push_back(p.value());
    for (const auto& b : net.named_buffers()) r.weights.push_back(*b.tensor);
    r.metrics = t.callback_metrics();
    r.global_step = t.global_step();
    r.synced = strategy->synced;
    r.local = strategy->local;
    r.teardowns = strategy->teardowns;
  });
  return out;
}

RankResult fit_one(std::int64_t batch, const Dataset& train, const Dataset& val,
                   const std::function<void(TrainerOptions&)>& edit = {}) {
  TrainerOptions o = options(2);
  if (edit) edit(o);
  Trainer t(o);
  EXPECT_EQ(t.world_size(), 1);
  EXPECT_TRUE(t.is_global_zero());
  EXPECT_EQ(t.strategy().name(), "single_device");
  Net net(nullptr, g_bn_net);
  ImageDataLoader tl(train, loader(batch)), vl(val, loader(5, false));
  t.fit(net, tl, &vl);
  RankResult r;
  r.validated = t.validate(net, vl);
  for (const Variable& p : net.parameters()) r.weights.push_back(p.value());
  for (const auto& b : net.named_buffers()) r.weights.push_back(*b.tensor);
  r.metrics = t.callback_metrics();
  r.global_step = t.global_step();
  return r;
}

void expect_same(const RankResult& a, const RankResult& ref) {
  ASSERT_EQ(a.weights.size(), ref.weights.size());
  for (std::size_t i = 0; i < a.weights.size(); ++i)
    EXPECT_LT(normalised_error(a.weights[i], ref.weights[i]), 1e-5) << "parameter " << i;
  ASSERT_TRUE(ref.metrics.count("train_loss"));
  for (const char* m : {"train_loss", "train_acc", "val_loss", "val_acc"}) {
    if (!ref.metrics.count(m)) continue;  // no validation ran
    ASSERT_TRUE(a.metrics.count(m)) << m;
    EXPECT_NEAR(a.metrics.at(m), ref.metrics.at(m),
                1e-5 * std::max(1.0, std::abs(ref.metrics.at(m))))
        << m;
  }
  EXPECT_EQ(a.global_step, ref.global_step);
  for (const char* m : {"val_loss", "val_acc"})
    if (ref.validated.count(m)) {
      ASSERT_TRUE(a.validated.count(m)) << m;
      EXPECT_NEAR(a.validated.at(m), ref.validated.at(m), 1e-5) << m;
    }
}

// What each of 2 thread ranks saw in fit_hooked.
struct HookedFit {
  std::vector<std::string> errors = std::vector<std::string>(2);  // what fit threw, "" if nothing
  std::vector<std::int64_t> steps = std::vector<std::int64_t>(2);
  std::vector<int> teardowns = std::vector<int>(2);
};

// Fits the net for |epochs| on 2 thread ranks (48 random images, 6 a batch per rank), calling
// |hook|(net, rank, batch) before each batch.
HookedFit fit_hooked(std::int64_t epochs,
                     const std::function<void(Net&, int, std::int64_t)>& hook) {
  const Dataset train = random_images(48, 1);
  auto world = std::make_shared<ThreadWorld>(2);
  HookedFit out;
  run_ranks(2, [&](int rank) {
    const auto r = static_cast<std::size_t>(rank);
    TrainerOptions o = options(epochs);
    auto strategy = std::make_shared<ThreadDDPStrategy>(world, rank);
    o.strategy = strategy;
    Trainer t(o);
    Net net([&hook, rank](Net& self, std::int64_t i) { hook(self, rank, i); });
    ImageDataLoader tl(train, loader(6));
    try {
      t.fit(net, tl);
    } catch (const std::exception& e) {
      out.errors[r] = e.what();
    }
    out.steps[r] = t.global_step();
    out.teardowns[r] = strategy->teardowns;
  });
  return out;
}

}  // namespace

TEST(DistributedTrainer, RanksWithTheGlobalBatchEqualOneProcess) {
  const Dataset train = random_images(48, 1), val = random_images(23, 2);
  const RankResult one = fit_one(12, train, val);
  for (const int n : {2, 3}) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    const std::vector<RankResult> ranks = fit_ranks(n, 12 / n, train, val);
    for (const RankResult& r : ranks) {
      expect_same(r, one);
      EXPECT_EQ(r.synced, 8);  // 2 epochs of 4 batches
      EXPECT_EQ(r.local, 0);
      EXPECT_EQ(r.teardowns, 1);
    }
  }
}

TEST(DistributedTrainer, AccumulationSynchronisesOnlyTheStepsLastBatch) {
  const Dataset train = random_images(48, 1), val = random_images(23, 2);
  const RankResult one =
      fit_one(12, train, val, [](TrainerOptions& o) { o.accumulate_grad_batches = 3; });
  const auto ranks =
      fit_ranks(2, 6, train, val, [](TrainerOptions& o, int) { o.accumulate_grad_batches = 3; });
  for (const RankResult& r : ranks) {
    expect_same(r, one);
    EXPECT_EQ(r.synced, 4);  // batches 3 and 4 of each epoch (the epoch's last is a step)
    EXPECT_EQ(r.local, 4);
  }
}

TEST(DistributedTrainer, RankZeroOnlyCallbacksAndCheckpointsOnRankZero) {
  const Dataset train = random_images(24, 1), val = random_images(10, 2);
  const fs::path dir = temp_dir("ddp-ckpt");
  std::vector<std::shared_ptr<Recorder>> zero(2), all(2);
  EXPECT_TRUE(ProgressBar().rank_zero_only());
  EXPECT_TRUE(CsvLogger(dir / "log.csv").rank_zero_only());
  fit_ranks(2, 6, train, val, [&](TrainerOptions& o, int rank) {
    const auto r = static_cast<std::size_t>(rank);
    zero[r] = std::make_shared<Recorder>(true);
    all[r] = std::make_shared<Recorder>(false);
    o.callbacks = {zero[r], all[r],
                   std::make_shared<CsvLogger>(dir / fmt::format("log{}.csv", rank)),
                   std::make_shared<ModelCheckpoint>(dir / fmt::format("rank{}", rank))};
  });
  EXPECT_EQ(zero[0]->starts, 1);
  EXPECT_EQ(zero[0]->epochs, 2);
  EXPECT_EQ(zero[1]->starts, 0);
  EXPECT_EQ(zero[1]->epochs, 0);
  for (const auto& a : all) EXPECT_EQ(a->epochs, 2);
  EXPECT_TRUE(fs::exists(dir / "log0.csv"));
  EXPECT_FALSE(fs::exists(dir / "log1.csv"));
  EXPECT_TRUE(fs::exists(dir / "rank0" / checkpoint_name(2)));
  EXPECT_FALSE(fs::exists(dir / "rank1" / checkpoint_name(2)));
  fs::remove_all(dir);
}

TEST(DistributedTrainer, ANanLossOnOneRankStopsEveryRank) {
  const HookedFit f = fit_hooked(
      2, [](Net& self, int rank, std::int64_t i) { self.nan_now = rank == 1 && i == 2; });
  for (const std::string& e : f.errors)
    EXPECT_NE(e.find("training loss became"), std::string::npos) << e;
  EXPECT_NE(f.errors[0].find("on rank 1"), std::string::npos) << f.errors[0];
}

TEST(DistributedTrainer, ShouldStopOnOneRankStopsEveryRankAtTheSameBatch) {
  const HookedFit f = fit_hooked(3, [](Net& self, int rank, std::int64_t i) {
    if (rank == 1 && i == 1) self.trainer()->should_stop = true;
  });
  EXPECT_EQ(f.errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(f.steps[0], 2);
  EXPECT_EQ(f.steps[1], 2);
}

TEST(DistributedTrainer, AFailingRankEndsTheOthers) {
  const HookedFit f = fit_hooked(2, [](Net&, int rank, std::int64_t i) {
    if (rank == 1 && i == 2) throw std::runtime_error("boom");
  });
  EXPECT_EQ(f.teardowns, (std::vector<int>{1, 1}));
  EXPECT_EQ(f.errors[1], "boom");
  EXPECT_NE(f.errors[0].find("rank 1 (host localhost) failed: boom"), std::string::npos)
      << f.errors[0];
}

TEST(DistributedTrainer, ResumeWithAnotherNumberOfProcesses) {
  const Dataset train = random_images(48, 1), val = random_images(10, 2);
  const fs::path dir = temp_dir("ddp-resume");
  // 2 ranks of 6 write a checkpoint after every validation, twice an epoch (4 batches).
  auto keep_all = [&](TrainerOptions& o, int rank) {
    ModelCheckpointOptions m;
    m.dirpath = dir / fmt::format("r{}", rank);
    m.filename = "step-{step}";
    m.save_top_k = -1;
    o.callbacks = {std::make_shared<ModelCheckpoint>(m)};
    o.val_check_interval = 0.5;
  };
  const auto two = fit_ranks(2, 6, train, val, keep_all);
  const fs::path within = dir / "r0" / "step-2.safetensors",
                 end = dir / "r0" / "step-4.safetensors";
  ASSERT_TRUE(fs::exists(within));
  ASSERT_FALSE(fs::exists(dir / "r1" / "step-2.safetensors"));
  {
    Net net;
    SGD opt(net.named_parameters(), SgdOptions{});
    const TrainingProgress p = load_checkpoint(within, net, opt);
    EXPECT_EQ(p.world_size, 2);
    EXPECT_EQ(p.epoch_batch, 2);
    EXPECT_EQ(p.epoch_sample, 24);
  }
  // Same N from within the epoch: the uninterrupted run's result.
  expect_same(fit_ranks(2, 6, train, val, {}, within)[0], two[0]);
  // 3 ranks of 4 (the same global batch) from within the epoch and from its end: the same
  // global batches follow, so the same weights.
  expect_same(fit_ranks(3, 4, train, val, {}, within)[1], two[0]);
  expect_same(fit_ranks(3, 4, train, val, {}, end)[2], two[0]);
  // One process of 12 from the 2-rank checkpoint.
  {
    TrainerOptions o = options(2);
    Trainer t(o);
    Net net;
    ImageDataLoader tl(train, loader(12)), vl(val, loader(5, false));
    t.fit(net, tl, &vl, within);
    EXPECT_EQ(t.global_step(), two[0].global_step);
    for (std::size_t i = 0; i < two[0].weights.size(); ++i)
      EXPECT_LT(normalised_error(net.parameters()[i].value(), two[0].weights[i]), 1e-5);
  }
  // 2 ranks of 5 (a global batch of 10, 5 batches an epoch) from 24 samples into the epoch: on
  // at its batch 4 (samples 30 on), skipping 6: 2 more steps in it, then 5 in the next.
  const auto other = fit_ranks(2, 5, train, val, {}, within);
  EXPECT_EQ(other[0].global_step, 2 + 2 + 5);
  EXPECT_EQ(other[1].global_step, 2 + 2 + 5);
  fs::remove_all(dir);
}

TEST(DistributedTrainer, ResumeWithinAnEpochNeedsTheLoadersBatchSize) {
  // A loader that shards but does not say its batch size.
  struct Quiet final : DataLoader {
    explicit Quiet(const Dataset& d) : l(d, loader(6)) {}
    std::int64_t num_batches() const override { return l.num_batches(); }
    std::int64_t num_samples() const override { return l.num_samples(); }
    void begin_epoch(std::int64_t e) override { l.begin_epoch(e); }
    bool next(TensorBatch& b) override { return l.next(b); }
    void set_distributed(int r, int n, bool pad) override { l.set_distributed(r, n, pad); }
    ImageDataLoader l;
  };
  const Dataset train = random_images(48, 1), val = random_images(10, 2);
  const fs::path dir = temp_dir("ddp-quiet");
  fit_ranks(2, 6, train, val, [&](TrainerOptions& o, int rank) {
    ModelCheckpointOptions m;
    m.dirpath = dir / fmt::format("r{}", rank);
    m.filename = "step-{step}";
    m.save_top_k = -1;
    o.callbacks = {std::make_shared<ModelCheckpoint>(m)};
    o.val_check_interval = 0.5;
    o.max_epochs = 1;
  });
  Trainer t(options(1));
  Net net;
  Quiet q(train);
  try {
    t.fit(net, q, nullptr, dir / "r0" / "step-2.safetensors");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("batch_size()"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(DistributedTrainer, OptionsAreChecked) {
  TrainerOptions o = options(1);
  o.num_nodes = 0;
  EXPECT_THROW(Trainer{o}, ConfigError);
  o.num_nodes = 2;  // one process on one machine
  try {
    Trainer t(o);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num_nodes=2"), std::string::npos) << e.what();
  }
  o.num_nodes = 1;
  o.devices = 2;
  try {
    Trainer t(o);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("strategy='ddp'"), std::string::npos) << e.what();
  }
  o.devices = 1;
  o.strategy = "no_such_strategy";
  EXPECT_THROW(Trainer{o}, ConfigError);
  // num_nodes against the hosts of the ranks: two hosts.
  auto world = std::make_shared<ThreadWorld>(2, std::vector<std::string>{"a", "b"});
  // One bool object a rank: std::vector<bool> packs both into one word, and the two ranks' writes
  // to it raced (one lost, seen once under ASan).
  std::array<bool, 2> ok{};
  run_ranks(2, [&](int rank) {
    TrainerOptions p = options(1);
    p.strategy = std::make_shared<ThreadDDPStrategy>(world, rank);
    p.num_nodes = 2;
    Trainer t(p);
    ok[static_cast<std::size_t>(rank)] = t.world_size() == 2;
  });
  EXPECT_TRUE(ok[0] && ok[1]);
}

TEST(DistributedTrainer, CheckpointWorldSizeAndSamplePosition) {
  const Dataset train = random_images(24, 1);
  const fs::path dir = temp_dir("ddp-fields");
  Trainer t(options(1));
  Net net;
  ImageDataLoader tl(train, loader(6));
  t.fit(net, tl);
  const fs::path good = dir / "good.safetensors", bad = dir / "bad.safetensors";
  t.save_checkpoint(good);
  const SafetensorsContents c = load_safetensors(good, &device("cpu"));
  EXPECT_EQ(c.metadata.at("world_size"), "1");
  EXPECT_EQ(c.metadata.at("epoch_sample"), "0");
  SGD opt(net.named_parameters(), SgdOptions{});
  auto load_with = [&](const std::map<std::string, std::string>& changes) {
    SafetensorsContents e = c;
    for (const auto& [k, v] : changes)
      if (v.empty())
        e.metadata.erase(k);
      else
        e.metadata[k] = v;
    save_safetensors(bad, e.tensors, e.metadata);
    return load_checkpoint(bad, net, opt);
  };
  // Files without the keys (one process): world_size 1.
  EXPECT_EQ(load_with({{"world_size", ""}, {"epoch_sample", ""}}).world_size, 1);
  EXPECT_EQ(load_with({{"world_size", "3"}}).world_size, 3);
  for (const char* v : {"0", "-1", "x", "99999999999"}) {
    try {
      load_with({{"world_size", v}});
      FAIL() << v;
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find("world_size"), std::string::npos) << e.what();
    }
  }
  // A sample position at an epoch's end is malformed.
  EXPECT_THROW(load_with({{"epoch_sample", "12"}}), FileError);
  TrainingProgress p;
  p.world_size = 0;
  EXPECT_THROW(save_checkpoint(bad, net, opt, p), InvalidArgument);
  fs::remove_all(dir);
}

TEST(DistributedTrainer, SyncBatchnormGivesTheGlobalBatchsStatistics) {
  const Dataset train = random_images(48, 1), val = random_images(10, 2);
  g_bn_net = true;
  const RankResult one = fit_one(12, train, val);
  const auto ranks =
      fit_ranks(2, 6, train, val, [](TrainerOptions& o, int) { o.sync_batchnorm = true; });
  // Without it each rank normalises by its own batch: the running statistics differ.
  const auto local = fit_ranks(2, 6, train, val);
  g_bn_net = false;
  for (const RankResult& r : ranks) expect_same(r, one);
  ASSERT_EQ(local[0].weights.size(), one.weights.size());
  const std::size_t running_mean = one.weights.size() - 3;  // buffers: mean, var, count
  EXPECT_GT(normalised_error(local[0].weights[running_mean], one.weights[running_mean]), 1e-4);
}
