// The Trainer's loop on LightningModules (cpu:0): custom steps and batches, max_steps, gradient
// accumulation, clipping, schedulers, validation within epochs, ModelCheckpoint, EarlyStopping,
// the CSV log, resuming bit for bit, and the errors of bad options.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>

#include "tessera/tessera.h"
#include "tessera/train/train.h"

using namespace tessera;
using namespace tessera::train;
namespace fs = std::filesystem;

namespace {

Device& cpu() {
  return device("cpu");
}

Tensor random_tensor(const Shape& s, std::uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (float& x : v) x = g.normal();
  return Tensor::from(v, s, &cpu());
}

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("tessera-{}-{}", name, ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Batches of rows of |tensors| (all [N, ...]) in order, |batch| rows each (the last may be
// shorter).
class TensorLoader final : public DataLoader {
 public:
  TensorLoader(std::vector<Tensor> tensors, std::int64_t batch)
      : tensors_(std::move(tensors)), batch_(batch) {}
  std::int64_t num_batches() const override { return (rows() + batch_ - 1) / batch_; }
  std::int64_t num_samples() const override { return rows(); }
  void begin_epoch(std::int64_t) override { next_ = 0; }
  bool next(TensorBatch& out) override {
    if (next_ >= num_batches()) return false;
    const std::int64_t start = next_ * batch_, n = std::min(batch_, rows() - start);
    out.tensors.clear();
    for (const Tensor& t : tensors_) out.tensors.push_back(t.narrow(0, start, n).contiguous());
    out.size = n;
    out.index = next_++;
    return true;
  }

 private:
  std::int64_t rows() const { return tensors_.front().shape()[0]; }
  std::vector<Tensor> tensors_;
  std::int64_t batch_, next_ = 0;
};

// x [n, 4], y [n, 1] = (x @ w* + noise) * scale, per-sample weights [n, 1]: three tensors a
// batch.
std::vector<Tensor> regression_data(std::int64_t n, std::uint64_t seed, double scale = 1.0) {
  const Tensor x = random_tensor({n, 4}, seed);
  const Tensor w = Tensor::from(std::vector<float>{1.5f, -2.f, 0.5f, 1.f}, {4, 1}, &cpu());
  const Tensor y =
      mul_scalar(add(matmul(x, w), mul_scalar(random_tensor({n, 1}, seed + 1), 0.1)), scale);
  const Tensor weights = add_scalar(abs(random_tensor({n, 1}, seed + 2)), 0.5);
  return {x, y, weights};
}

using Configure = std::function<OptimizerConfig(Module&)>;

Configure sgd(double lr) {
  return [=](Module& m) {
    OptimizerConfig c;
    SgdOptions o;
    o.lr = static_cast<float>(lr);
    c.optimizer = std::make_shared<SGD>(m.named_parameters(), o);
    return c;
  };
}

// Linear regression with a per-sample weighted squared error (a loss of its own), and a scripted
// validation metric "score" (scores[current_epoch - 1]) for the callbacks.
struct WeightedRegression : LightningModule {
  explicit WeightedRegression(Configure c, std::uint64_t seed = 1) : configure(std::move(c)) {
    Generator g(seed);
    fc = register_module("fc", std::make_shared<Linear>(4, 1, g));
  }
  Variable forward(const Variable& x) override { return (*fc)(x); }
  Variable training_step(const TensorBatch& batch, std::int64_t) override {
    const Variable d = sub(forward(Variable(batch[0])), Variable(batch[1]));
    const Variable loss = mean(mul(mul(d, d), Variable(batch[2])), std::vector<int>{0, 1});
    LogOptions both;
    both.on_epoch = true;
    log("both", loss, both);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const TensorBatch& batch, std::int64_t batch_idx) override {
    if (batch_idx == 0) val_steps.push_back(trainer()->global_step());
    ++val_batches;
    const Variable d = sub(forward(Variable(batch[0])), Variable(batch[1]));
    log("val_loss", mean(mul(d, d), std::vector<int>{0, 1}));
    if (!scores.empty()) {
      const auto e =
          static_cast<std::size_t>(std::max<std::int64_t>(trainer()->current_epoch(), 1));
      log("score", scores[std::min(e, scores.size()) - 1]);
    }
  }
  OptimizerConfig configure_optimizers() override { return configure(*this); }

  Configure configure;
  std::shared_ptr<Linear> fc;
  std::vector<double> scores;
  std::vector<std::int64_t> val_steps;  // global_step at each validation run
  int val_batches = 0;
};

TrainerOptions quiet_options() {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.enable_progress_bar = false;
  return o;
}

// A ModelCheckpoint writing every checkpoint to |dir| as |filename|, none removed.
std::shared_ptr<ModelCheckpoint> keep_every_checkpoint(const fs::path& dir,
                                                       const std::string& filename) {
  ModelCheckpointOptions mo;
  mo.dirpath = dir;
  mo.filename = filename;
  mo.save_top_k = -1;
  return std::make_shared<ModelCheckpoint>(mo);
}

std::vector<float> flat_weights(Module& m) {
  std::vector<float> out;
  for (const auto& [name, t] : m.state_dict()) {
    if (t.dtype() != DType::f32) continue;
    const auto v = t.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double normalised_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> csv_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST(TrainerLoop, CustomModuleWithThreeTensorBatchesTrains) {
  TensorLoader train(regression_data(64, 1), 16), val(regression_data(32, 9), 16);
  WeightedRegression m(sgd(0.05));
  TrainerOptions o = quiet_options();
  o.max_epochs = 8;
  Trainer t(o);
  const double before = t.validate(m, val).at("val_loss");
  t.fit(m, train, &val);
  EXPECT_EQ(t.global_step(), 8 * 4);
  EXPECT_EQ(t.current_epoch(), 8);
  const auto& metrics = t.callback_metrics();
  EXPECT_LT(metrics.at("val_loss"), 0.1 * before);
  // Lightning's names: a metric logged on step only keeps its name; on step and on epoch it
  // becomes NAME_step and NAME_epoch.
  for (const char* key : {"train_loss", "both_step", "both_epoch", "val_loss"})
    EXPECT_TRUE(metrics.count(key)) << key;
  EXPECT_FALSE(metrics.count("both"));
  // Outside a fit, log() does nothing; a tensor of several elements is refused.
  m.log("free", 1.0);
  EXPECT_THROW(m.log("vector", Tensor::full({3}, 1.0)), InvalidArgument);
}

TEST(TrainerLoop, MaxStepsStopsWithinAnEpoch) {
  TensorLoader train(regression_data(80, 1), 8);  // 10 batches an epoch
  WeightedRegression m([](Module& mod) {
    OptimizerConfig c;
    c.optimizer = std::make_shared<Adam>(mod.named_parameters(), AdamOptions{});
    return c;
  });
  TrainerOptions o = quiet_options();
  o.max_epochs = -1;
  o.max_steps = 13;
  Trainer t(o);
  t.fit(m, train);
  EXPECT_EQ(t.global_step(), 13);
  EXPECT_EQ(t.current_epoch(), 1);
  EXPECT_EQ(t.progress().epoch_batch, 3);
  EXPECT_EQ(t.optimizer().state().values.at("step"), "13");
  ASSERT_EQ(t.progress().history.size(), 2u);
  EXPECT_EQ(t.progress().history.back().step, 13);
  EXPECT_EQ(t.progress().history.back().epoch, 2);
}

TEST(TrainerLoop, AccumulatedBatchesEqualOneLargeBatch) {
  const std::vector<Tensor> data = regression_data(32, 3);
  auto run = [&](std::int64_t batch, std::int64_t accumulate, std::int64_t steps = 3) {
    TensorLoader train(data, batch);
    WeightedRegression m(sgd(0.1), 7);
    TrainerOptions o = quiet_options();
    o.max_epochs = 3;
    o.accumulate_grad_batches = accumulate;
    Trainer t(o);
    t.fit(m, train);
    EXPECT_EQ(t.global_step(), steps);
    return flat_weights(m);
  };
  const std::vector<float> one = run(32, 1), four = run(8, 4);
  EXPECT_LT(normalised_error(four, one), 1e-5);
  // Without the 1/k scaling the step would be four times larger.
  EXPECT_GT(normalised_error(run(8, 1, 12), one), 1e-3);
}

TEST(TrainerLoop, GradientClippingTakesEffect) {
  TensorLoader train(regression_data(16, 5), 16);
  auto step = [&](const std::string& algorithm, double clip) {
    WeightedRegression m(sgd(1.0), 3);
    const std::vector<float> before = flat_weights(m);
    TrainerOptions o = quiet_options();
    o.max_steps = 1;
    o.gradient_clip_val = clip;
    o.gradient_clip_algorithm = algorithm;
    Trainer(o).fit(m, train);
    std::vector<float> delta = flat_weights(m);
    for (std::size_t i = 0; i < delta.size(); ++i) delta[i] -= before[i];
    return delta;
  };
  auto norm = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s);
  };
  const std::vector<float> free = step("norm", 0);
  ASSERT_GT(norm(free), 0.5);
  EXPECT_NEAR(norm(step("norm", 0.25)), 0.25, 1e-4);  // lr 1: the step is the clipped gradient
  EXPECT_NEAR(norm(step("norm", 1e6)), norm(free), 1e-6);
  double largest = 0;
  for (float d : step("value", 0.01)) largest = std::max(largest, std::abs(static_cast<double>(d)));
  EXPECT_NEAR(largest, 0.01, 1e-7);
}

TEST(TrainerLoop, SchedulerStepsPerStepOrPerEpoch) {
  TensorLoader train(regression_data(40, 1), 8);  // 5 batches an epoch
  auto run = [&](const std::string& interval) {
    WeightedRegression m([&](Module& mod) {
      OptimizerConfig c;
      SgdOptions so;
      so.lr = 0.1f;
      c.optimizer = std::make_shared<SGD>(mod.named_parameters(), so);
      c.lr_scheduler = std::make_shared<StepLR>(*c.optimizer, 1, 0.5);
      c.interval = interval;
      return c;
    });
    const fs::path dir = temp_dir("sched-" + interval);
    TrainerOptions o = quiet_options();
    o.max_epochs = 2;
    o.callbacks = {std::make_shared<CsvLogger>(dir / "m.csv")};
    Trainer t(o);
    t.fit(m, train);
    const double lr = t.lr();
    const auto lines = csv_lines(dir / "m.csv");
    fs::remove_all(dir);
    return std::pair{lr, lines};
  };
  const auto [per_step, step_csv] = run("step");
  EXPECT_NEAR(per_step, 0.1 * std::pow(0.5, 10), 1e-7 * per_step);
  const auto [per_epoch, epoch_csv] = run("epoch");
  EXPECT_NEAR(per_epoch, 0.1 * 0.25, 1e-7);
  // The CSV's lr is the one the epoch trained with.
  ASSERT_EQ(epoch_csv.size(), 3u);
  EXPECT_EQ(epoch_csv[0].substr(0, 14), "epoch,step,lr,");
  EXPECT_TRUE(epoch_csv[1].starts_with("1,5,0.1,")) << epoch_csv[1];
  EXPECT_TRUE(epoch_csv[2].starts_with("2,10,0.05,")) << epoch_csv[2];
}

// Lightning's estimated_stepping_batches, as configure_optimizers sees it: max_epochs x the
// epoch's batches (after limit_train_batches) / accumulate_grad_batches rounded up, or max_steps.
TEST(TrainerLoop, EstimatedSteppingBatchesCountsTheFitsOptimizerSteps) {
  TensorLoader train(regression_data(40, 1), 8);  // 5 batches an epoch
  auto seen = [&](std::int64_t epochs, std::int64_t steps, std::int64_t limit, std::int64_t k) {
    TrainerOptions o = quiet_options();
    o.max_epochs = epochs;
    o.max_steps = steps;
    o.limit_train_batches = limit;
    o.accumulate_grad_batches = k;
    Trainer t(o);
    if (steps < 1) {  // before fit, only max_steps is known
      EXPECT_THROW((void)t.estimated_stepping_batches(), ConfigError);
    }
    std::int64_t count = -1;
    WeightedRegression m([&](Module& mod) {
      count = t.estimated_stepping_batches();
      return sgd(0.01)(mod);
    });
    t.fit(m, train);
    return count;
  };
  EXPECT_EQ(seen(3, -1, 0, 1), 15);
  EXPECT_EQ(seen(3, -1, 0, 2), 9);  // 3 steps an epoch: 2 + 2 + 1 batches
  EXPECT_EQ(seen(3, -1, 4, 1), 12);
  EXPECT_EQ(seen(3, 7, 0, 1), 7);
}

TEST(TrainerLoop, ValCheckIntervalCounts) {
  TensorLoader train(regression_data(80, 1), 8), val(regression_data(16, 2), 8);  // 10, 2
  auto steps = [&](double interval, std::int64_t every_n_epochs, std::int64_t accumulate) {
    WeightedRegression m(sgd(0.01));
    TrainerOptions o = quiet_options();
    o.max_epochs = 2;
    o.val_check_interval = interval;
    o.check_val_every_n_epoch = every_n_epochs;
    o.accumulate_grad_batches = accumulate;
    o.limit_val_batches = 1;
    Trainer(o).fit(m, train, &val);
    EXPECT_EQ(m.val_batches, static_cast<int>(m.val_steps.size()));  // one batch each
    return m.val_steps;
  };
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(steps(1.0, 1, 1), (V{10, 20}));
  EXPECT_EQ(steps(0.25, 1, 1), (V{2, 4, 6, 8, 10, 12, 14, 16, 18, 20}));
  EXPECT_EQ(steps(3, 1, 1), (V{3, 6, 9, 13, 16, 19}));  // Lightning: not at the epoch's end
  EXPECT_EQ(steps(1.0, 2, 1), (V{20}));
  // Rounded up to whole optimizer steps: 3 batches -> 4 (2 steps of 2 batches).
  EXPECT_EQ(steps(3, 1, 2), (V{2, 4, 7, 9}));
  TrainerOptions o = quiet_options();
  o.val_check_interval = 11;
  WeightedRegression m(sgd(0.01));
  const std::string msg = error_of<ConfigError>([&] { Trainer(o).fit(m, train, &val); });
  EXPECT_NE(msg.find("val_check_interval=11 must be less than or equal to the number of training "
                     "batches per epoch (10)"),
            std::string::npos)
      << msg;
}

TEST(TrainerLoop, ModelCheckpointKeepsTheTopKAndResumes) {
  TensorLoader train(regression_data(32, 1), 16), val(regression_data(16, 2), 16);
  const std::vector<double> scores = {5, 3, 4, 1, 2};
  auto fit = [&](const fs::path& dir, std::int64_t epochs, const fs::path& from,
                 const std::string& mode) {
    WeightedRegression m(sgd(0.01));
    m.scores = scores;
    ModelCheckpointOptions mo;
    mo.dirpath = dir;
    mo.filename = "ep{epoch}-{score:.1f}";
    mo.monitor = "score";
    mo.mode = mode;
    mo.save_top_k = 2;
    mo.best_weights = "best.safetensors";
    auto ckpt = std::make_shared<ModelCheckpoint>(mo);
    TrainerOptions o = quiet_options();
    o.max_epochs = epochs;
    o.callbacks = {ckpt};
    Trainer(o).fit(m, train, &val, from);
    return ckpt;
  };
  auto files = [](const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
  };
  const fs::path straight = temp_dir("topk-a"), resumed = temp_dir("topk-b");
  auto a = fit(straight, 5, {}, "min");
  EXPECT_EQ(files(straight), (std::set<std::string>{"ep4-1.0.safetensors", "ep5-2.0.safetensors",
                                                    "best.safetensors"}));
  EXPECT_EQ(a->best_model_path(), straight / "ep4-1.0.safetensors");
  EXPECT_EQ(a->best_model_score(), 1);
  // The weights file loads into the module alone.
  WeightedRegression fresh(sgd(0.01), 99);
  load(fresh, straight / "best.safetensors");

  // Three epochs, then on to five from the third's checkpoint: the same two are kept.
  fit(resumed, 3, {}, "min");
  EXPECT_EQ(files(resumed), (std::set<std::string>{"ep2-3.0.safetensors", "ep3-4.0.safetensors",
                                                   "best.safetensors"}));
  auto b = fit(resumed, 5, resumed / "ep3-4.0.safetensors", "min");
  std::map<fs::path, double> expected = {{resumed / "ep4-1.0.safetensors", 1},
                                         {resumed / "ep5-2.0.safetensors", 2}};
  EXPECT_EQ(b->best_k_models(), expected);
  EXPECT_EQ(b->best_model_path(), resumed / "ep4-1.0.safetensors");
  EXPECT_FALSE(fs::exists(resumed / "ep2-3.0.safetensors"));
  fs::remove_all(straight);
  fs::remove_all(resumed);

  // Without monitor: the latest save_top_k; save_last keeps last.safetensors besides.
  const fs::path latest = temp_dir("topk-latest");
  {
    WeightedRegression m(sgd(0.01));
    ModelCheckpointOptions mo;
    mo.dirpath = latest;
    mo.save_top_k = 2;
    mo.save_last = true;
    TrainerOptions o = quiet_options();
    o.max_epochs = 4;
    o.callbacks = {std::make_shared<ModelCheckpoint>(mo)};
    Trainer(o).fit(m, train, &val);
  }
  EXPECT_EQ(files(latest), (std::set<std::string>{"epoch-0003.safetensors",
                                                  "epoch-0004.safetensors", "last.safetensors"}));
  EXPECT_EQ(load_safetensors(latest / "last.safetensors", &cpu()).metadata.at("epoch"), "4");
  fs::remove_all(latest);

  const fs::path maxed = temp_dir("topk-max");
  auto c = fit(maxed, 5, {}, "max");
  EXPECT_EQ(files(maxed), (std::set<std::string>{"ep1-5.0.safetensors", "ep3-4.0.safetensors",
                                                 "best.safetensors"}));
  EXPECT_EQ(c->best_model_score(), 5);
  fs::remove_all(maxed);
}

TEST(TrainerLoop, MonitoringAMetricNeverLoggedIsAClearError) {
  TensorLoader train(regression_data(32, 1), 16), val(regression_data(16, 2), 16);
  const fs::path dir = temp_dir("monitor");
  ModelCheckpointOptions mo;
  mo.dirpath = dir;
  mo.monitor = "val_acc";
  EarlyStoppingOptions eo;
  eo.monitor = "val_acc";
  for (const std::shared_ptr<Callback>& cb :
       {std::shared_ptr<Callback>(std::make_shared<ModelCheckpoint>(mo)),
        std::shared_ptr<Callback>(std::make_shared<EarlyStopping>(eo))}) {
    WeightedRegression m(sgd(0.01));
    TrainerOptions o = quiet_options();
    o.max_epochs = 1;
    o.callbacks = {cb};
    const std::string msg = error_of<ConfigError>([&] { Trainer(o).fit(m, train, &val); });
    EXPECT_NE(msg.find("(monitor='val_acc') could not find the monitored key in the logged "
                       "metrics: ["),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("'val_loss'"), std::string::npos) << msg;
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(TrainerLoop, EarlyStoppingStopsAtTheRightEpochAndResumesItsCount) {
  TensorLoader train(regression_data(32, 1), 16), val(regression_data(16, 2), 16);
  const std::vector<double> scores = {5, 4, 4.5, 4.2, 4.1, 3};
  auto fit = [&](std::int64_t epochs, const fs::path& dir, const fs::path& from) {
    WeightedRegression m(sgd(0.01));
    m.scores = scores;
    EarlyStoppingOptions eo;
    eo.monitor = "score";
    eo.patience = 2;
    auto stop = std::make_shared<EarlyStopping>(eo);
    TrainerOptions o = quiet_options();
    o.max_epochs = epochs;
    o.callbacks = {stop};
    if (!dir.empty()) o.callbacks.push_back(std::make_shared<ModelCheckpoint>(dir));
    Trainer t(o);
    t.fit(m, train, &val, from);
    return std::pair{t.current_epoch(), stop};
  };
  const auto [epochs, stop] = fit(10, {}, {});
  EXPECT_EQ(epochs, 4);  // 4.5 and 4.2 do not beat 4
  EXPECT_EQ(stop->stopped_epoch(), 4);
  EXPECT_EQ(stop->wait_count(), 2);
  EXPECT_EQ(stop->best_score(), 4);
  // Three epochs (one check without improvement), then on: the count goes on from 1.
  const fs::path dir = temp_dir("early");
  fit(3, dir, {});
  const auto [resumed_epochs, resumed] = fit(10, dir, dir / checkpoint_name(3));
  EXPECT_EQ(resumed_epochs, 4);
  EXPECT_EQ(resumed->stopped_epoch(), 4);
  fs::remove_all(dir);
}

TEST(TrainerLoop, CsvHasTheLrAndEveryLoggedMetric) {
  TensorLoader train(regression_data(32, 1), 8), val(regression_data(16, 2), 16);
  const fs::path dir = temp_dir("csv");
  WeightedRegression m(sgd(0.01));
  m.scores = {1, 2};
  TrainerOptions o = quiet_options();
  o.max_epochs = 2;
  o.val_check_interval = 0.5;
  o.callbacks = {std::make_shared<CsvLogger>(dir / "m.csv")};
  Trainer(o).fit(m, train, &val);
  const auto lines = csv_lines(dir / "m.csv");
  ASSERT_EQ(lines.size(), 5u) << fmt::format("{}", fmt::join(lines, "\n"));  // 2 validations/epoch
  EXPECT_EQ(lines[0], "epoch,step,lr,both_epoch,score,val_loss,seconds,samples_per_second");
  EXPECT_EQ(lines[1].substr(0, 11), "1,2,0.01,,1");  // a validation within the epoch
  EXPECT_EQ(lines[4].substr(0, 8), "2,8,0.01");
  fs::remove_all(dir);
}

namespace {

// BatchNorm (buffers), Dropout and a scheduler: x [B, 1, 2, 2] -> BatchNorm2d -> Dropout ->
// Linear(4, 1).
struct NormNet : WeightedRegression {
  explicit NormNet(Configure c) : WeightedRegression(std::move(c), 5) {
    bn = register_module("bn", std::make_shared<BatchNorm2d>(1));
    drop = register_module("drop", std::make_shared<Dropout>(0.25f, 0));
  }
  Variable forward(const Variable& x) override {
    return (*fc)(flatten((*drop)((*bn)(reshape(x, {x.shape()[0], 1, 2, 2}))), 1));
  }
  std::shared_ptr<BatchNorm2d> bn;
  std::shared_ptr<Dropout> drop;
};

Configure adam_with_schedule() {
  return [](Module& m) {
    OptimizerConfig c;
    c.optimizer = std::make_shared<Adam>(m.named_parameters(), AdamOptions{});
    c.lr_scheduler = std::make_shared<StepLR>(*c.optimizer, 3, 0.5);
    return c;
  };
}

}  // namespace

TEST(TrainerLoop, ResumesBitIdenticallyWithinAnEpochWithSchedulerAndBatchNorm) {
  TensorLoader train(regression_data(64, 1), 8), val(regression_data(16, 2), 8);  // 8 batches
  const fs::path dir = temp_dir("resume-mid");
  TrainerOptions o = quiet_options();
  o.seed = 11;
  o.max_epochs = 2;
  o.val_check_interval = 0.25;
  NormNet straight(adam_with_schedule());
  Trainer a(o);
  a.fit(straight, train, &val);

  // Stop at step 5 (within epoch 1; a checkpoint is written at the stop), then a new module
  // resumes from it.
  o.callbacks = {keep_every_checkpoint(dir, "e{epoch}-s{step}")};
  o.max_steps = 5;
  NormNet first(adam_with_schedule());
  Trainer(o).fit(first, train, &val);
  ASSERT_TRUE(fs::exists(dir / "e1-s5.safetensors"));
  o.max_steps = -1;
  NormNet resumed(adam_with_schedule());
  Trainer b(o);
  b.fit(resumed, train, &val, dir / "e1-s5.safetensors");

  const StateDict sa = straight.state_dict(), sb = resumed.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  EXPECT_EQ(sa.size(), 5u + 2u);  // bn weight, bias, running_mean, running_var, count; fc
  for (std::size_t i = 0; i < sa.size(); ++i) {
    ASSERT_EQ(sa[i].first, sb[i].first);
    if (sa[i].second.dtype() == DType::i64)
      EXPECT_EQ(sa[i].second.to_vector<std::int64_t>(), sb[i].second.to_vector<std::int64_t>());
    else
      EXPECT_EQ(sa[i].second.to_vector<float>(), sb[i].second.to_vector<float>()) << sa[i].first;
  }
  EXPECT_EQ(a.lr(), b.lr());
  EXPECT_EQ(a.lr_scheduler()->last_epoch(), 16);
  EXPECT_EQ(b.lr_scheduler()->last_epoch(), 16);
  EXPECT_EQ(a.optimizer().state().values, b.optimizer().state().values);
  // The history is the straight run's, plus the row of the interrupted run's stop at step 5
  // (where it validated and wrote the checkpoint).
  std::vector<MetricsRow> rows = b.progress().history;
  std::erase_if(rows, [](const MetricsRow& r) { return r.step == 5; });
  ASSERT_EQ(rows.size(), a.progress().history.size());
  EXPECT_EQ(b.progress().history.size(), rows.size() + 1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].step, a.progress().history[i].step);
    EXPECT_EQ(rows[i].metrics, a.progress().history[i].metrics) << "row " << i;
  }

  // A run without the scheduler can not resume from it (and changes nothing).
  NormNet other([](Module& m) {
    OptimizerConfig c;
    c.optimizer = std::make_shared<Adam>(m.named_parameters(), AdamOptions{});
    return c;
  });
  const std::vector<float> before = flat_weights(other);
  const std::string msg = error_of<InvalidArgument>(
      [&] { Trainer(o).fit(other, train, &val, dir / "e1-s5.safetensors"); });
  EXPECT_NE(msg.find("written with a learning-rate scheduler and this run has none"),
            std::string::npos)
      << msg;
  EXPECT_EQ(flat_weights(other), before);
  fs::remove_all(dir);
}

TEST(TrainerLoop, BadOptionsNameTheOptionAndTheValidRange) {
  auto message = [](auto edit) {
    TrainerOptions o = quiet_options();
    edit(o);
    return error_of<ConfigError>([&] { Trainer{o}; });
  };
  const std::vector<std::pair<std::function<void(TrainerOptions&)>, std::string>> cases = {
      {[](TrainerOptions& o) { o.max_epochs = 0; }, "max_epochs=0 is not valid: pass 1 or more"},
      {[](TrainerOptions& o) { o.max_steps = 0; }, "max_steps=0 is not valid: pass 1 or more"},
      {[](TrainerOptions& o) { o.max_epochs = -1; }, "max_epochs=-1 (unbounded) needs max_steps"},
      {[](TrainerOptions& o) { o.val_check_interval = 0; },
       "val_check_interval=0 is not valid: pass a fraction of the training epoch in (0, 1]"},
      {[](TrainerOptions& o) { o.val_check_interval = 2.5; }, "val_check_interval=2.5 is not"},
      {[](TrainerOptions& o) { o.accumulate_grad_batches = 0; },
       "accumulate_grad_batches=0 is not valid: pass 1 or more"},
      {[](TrainerOptions& o) { o.gradient_clip_val = -1; }, "gradient_clip_val=-1 is not valid"},
      {[](TrainerOptions& o) { o.gradient_clip_algorithm = "l2"; },
       "gradient_clip_algorithm='l2' is not valid: pass 'norm' or 'value'"},
      {[](TrainerOptions& o) { o.log_every_n_steps = 0; }, "log_every_n_steps=0 is not valid"},
      {[](TrainerOptions& o) { o.check_val_every_n_epoch = 0; },
       "check_val_every_n_epoch=0 is not valid"},
      {[](TrainerOptions& o) {
         o.enable_checkpointing = false;
         o.callbacks = {std::make_shared<ModelCheckpoint>(fs::temp_directory_path())};
       },
       "enable_checkpointing=false but found a ModelCheckpoint"},
  };
  for (const auto& [edit, says] : cases) {
    const std::string msg = message(edit);
    EXPECT_NE(msg.find(says), std::string::npos) << "expected '" << says << "' in: " << msg;
  }
  EarlyStoppingOptions eo;
  EXPECT_THROW(EarlyStopping{eo}, ConfigError);  // no monitor
  eo.monitor = "val_loss";
  eo.mode = "least";
  EXPECT_THROW(EarlyStopping{eo}, ConfigError);
  ModelCheckpointOptions mo;
  mo.save_top_k = -2;
  EXPECT_THROW(ModelCheckpoint{mo}, ConfigError);
  mo.save_top_k = 1;
  mo.filename = "ep{epoch";
  EXPECT_THROW(ModelCheckpoint{mo}, ConfigError);

  // A module's mistakes: no optimizer, an unknown interval, a loss that is no loss.
  TensorLoader train(regression_data(16, 1), 8);
  WeightedRegression none([](Module&) { return OptimizerConfig{}; });
  EXPECT_THROW(Trainer(quiet_options()).fit(none, train), ConfigError);
  WeightedRegression batchwise([](Module& m) {
    OptimizerConfig c = sgd(0.1)(m);
    c.interval = "batch";
    return c;
  });
  EXPECT_NE(error_of<ConfigError>([&] {
              Trainer(quiet_options()).fit(batchwise, train);
            }).find("interval='batch' is not valid: pass 'step' or 'epoch'"),
            std::string::npos);
  struct Detached : WeightedRegression {
    using WeightedRegression::WeightedRegression;
    Variable training_step(const TensorBatch& b, std::int64_t) override {
      return Variable(mean(b[1], std::vector<int>{0, 1}));
    }
  } detached(sgd(0.1));
  EXPECT_NE(error_of<InvalidArgument>([&] {
              Trainer(quiet_options()).fit(detached, train);
            }).find("that requires no grad"),
            std::string::npos);
  struct Diverging : WeightedRegression {
    using WeightedRegression::WeightedRegression;
    Variable training_step(const TensorBatch& b, std::int64_t i) override {
      return mul_scalar(WeightedRegression::training_step(b, i), std::nan(""));
    }
  } diverging(sgd(0.1));
  const std::string diverged =
      error_of<Error>([&] { Trainer(quiet_options()).fit(diverging, train); });
  EXPECT_NE(diverged.find("the training loss became nan in epoch 1 (step 2); lower the learning "
                          "rate"),
            std::string::npos)
      << diverged;
}

// precision: "bf16-mixed" trains the regression as far as "32-true" (within bf16's rounding of the
// Linear's GEMM), not to the same bits. "16-mixed" starts with a loss scale (65536) that
// overflows f16 where the backward casts the output's gradient to f16 (the targets scaled 16
// times, so that the first errors are large): its first steps are skipped and counted
// (skipped_steps), the scale halves until they fit, and it then trains.
TEST(TrainerLoop, MixedPrecisionTrainsLikeF32) {
  TensorLoader train(regression_data(64, 1, 16), 16), val(regression_data(32, 9, 16), 16);
  auto run = [&](const std::string& precision) {
    WeightedRegression m(sgd(0.05));
    TrainerOptions o = quiet_options();
    o.max_epochs = 6;
    o.precision = precision;
    Trainer t(o);
    t.fit(m, train, &val);
    EXPECT_EQ(t.global_step(), 6 * 4) << precision;
    return std::pair{flat_weights(m), t.callback_metrics()};
  };
  const auto [w32, m32] = run("32-true");
  const auto [wb, mb] = run("bf16-mixed");
  const double e = normalised_error(wb, w32);
  EXPECT_LT(e, 3e-2);
  EXPECT_GT(e, 0.0) << "bf16-mixed trained in f32";
  EXPECT_LT(mb.at("val_loss"), 1.2 * m32.at("val_loss") + 1e-3);
  EXPECT_EQ(mb.count("skipped_steps"), 0u);
  const auto [wh, mh] = run("16-mixed");
  ASSERT_EQ(mh.count("skipped_steps"), 1u);
  EXPECT_GT(mh.at("skipped_steps"), 0.0);
  EXPECT_LT(mh.at("skipped_steps"), 8.0);
  EXPECT_LT(mh.at("val_loss"), 2.0 * m32.at("val_loss") + 1e-3);
}

// A 16-mixed run resumed from a checkpoint continues with the loss scale where it stood (the
// checkpoint holds the scaler's state): the same weights, bit for bit, as the run without the
// interruption; had the scaler started again at its initial scale, the resumed run would skip its
// first steps again.
TEST(TrainerLoop, MixedPrecisionResumesWithTheLossScale) {
  TensorLoader train(regression_data(64, 1, 16), 16), val(regression_data(32, 9, 16), 16);
  const fs::path dir = temp_dir("resume-16-mixed");
  TrainerOptions o = quiet_options();
  o.precision = "16-mixed";
  o.max_epochs = 4;
  WeightedRegression straight(sgd(0.05));
  Trainer a(o);
  a.fit(straight, train, &val);
  ASSERT_GT(a.callback_metrics().at("skipped_steps"), 0.0);

  o.callbacks = {keep_every_checkpoint(dir, "e{epoch}")};
  o.max_epochs = 2;
  WeightedRegression first(sgd(0.05));
  Trainer(o).fit(first, train, &val);
  ASSERT_TRUE(fs::exists(dir / "e1.safetensors"));
  o.max_epochs = 4;
  WeightedRegression resumed(sgd(0.05));
  Trainer b(o);
  b.fit(resumed, train, &val, dir / "e1.safetensors");
  EXPECT_EQ(flat_weights(resumed), flat_weights(straight));
  EXPECT_EQ(b.callback_metrics().at("skipped_steps"), a.callback_metrics().at("skipped_steps"));

  // The same checkpoint resumes a 32-true run (no scaler: the state is not used).
  o.precision = "32-true";
  WeightedRegression plain(sgd(0.05));
  Trainer(o).fit(plain, train, &val, dir / "e1.safetensors");
  fs::remove_all(dir);
}
