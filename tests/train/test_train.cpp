// autograd semantics, layers, optimizers, safetensors, checkpoints and the Trainer, on cpu:0.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/tessera.h"
#include "tessera/train/train.h"

using namespace tessera;
using namespace tessera::train;
namespace fs = std::filesystem;

namespace {

Device& cpu() {
  return device("cpu");
}

std::vector<float> random_values(std::int64_t n, std::uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = g.normal();
  return v;
}

Tensor random_tensor(const Shape& s, std::uint64_t seed) {
  return Tensor::from(random_values(s.numel(), seed), s, &cpu());
}

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("tessera-{}-{}", name, ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Bytes of every tensor, for bit-exact comparisons.
std::vector<std::vector<float>> values(Module& m) {
  std::vector<std::vector<float>> out;
  for (const NamedParameter& p : m.named_parameters())
    out.push_back(p.variable->value().to_vector<float>());
  return out;
}

}  // namespace

TEST(Autograd, AccumulatesUntilZeroGradAndFreesTheGraph) {
  DeviceGuard guard(cpu());
  Variable x(random_tensor({3, 4}, 1), true);
  const auto xv = x.value().to_vector<float>();
  for (int round = 1; round <= 2; ++round) {
    sum(sum(mul_scalar(x, 2.0), 0), 0).backward();
    const auto g = x.grad().to_vector<float>();
    for (float v : g) EXPECT_FLOAT_EQ(v, 2.0f * round);
  }
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  // x used twice: the gradients of both uses add up (d(x*x)/dx = 2x).
  const Variable y = sum(sum(mul(x, x), 0), 0);
  y.backward();
  const auto g = x.grad().to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], 2 * xv[i], 1e-6);
  EXPECT_THROW(y.backward(), InvalidArgument);  // the graph was freed
}

TEST(Autograd, NoGradScopeRecordsNothing) {
  DeviceGuard guard(cpu());
  Variable x(random_tensor({5}, 2), true);
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_enabled());
    const Variable y = mul_scalar(x, 3.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_THROW(sum(y, 0).backward(), InvalidArgument);
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE(mul_scalar(x, 3.0).requires_grad());
  EXPECT_THROW(mul_scalar(x, 3.0).backward(), InvalidArgument);  // not one element, no gradient
}

TEST(Layers, NamesLikePyTorchAndComputeLinear) {
  DeviceGuard guard(cpu());
  Generator gen(3);
  auto mlp = make_mlp(gen);
  std::vector<std::string> names;
  for (const auto& p : mlp->named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "5.weight",
                                             "5.bias"}));
  EXPECT_EQ(mlp->num_parameters(), 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  // torch_default init: weights within +-1/sqrt(fan_in).
  for (float w : mlp->named_parameters()[0].variable->value().to_vector<float>())
    EXPECT_LE(std::abs(w), 1.0f / std::sqrt(784.0f));

  Linear lin(3, 2, gen);
  const Tensor x = random_tensor({4, 3}, 4);
  const auto y = lin(Variable(x)).value().to_vector<float>();
  const auto xv = x.to_vector<float>(), w = lin.weight.value().to_vector<float>(),
             b = lin.bias.value().to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 2; ++o) {
      double s = b[o];
      for (int k = 0; k < 3; ++k) s += double(xv[i * 3 + k]) * w[o * 3 + k];
      EXPECT_NEAR(y[i * 2 + o], s, 1e-5);
    }
  EXPECT_THROW(lin(Variable(random_tensor({4, 5}, 5))), InvalidArgument);
}

TEST(Layers, DropoutMasksInTrainingOnlyAndRepeatsPerStep) {
  DeviceGuard guard(cpu());
  Dropout drop(0.25f, 0);
  const Tensor x = Tensor::full({4000}, 1.0);
  set_dropout_step(11, 5);
  const auto a = drop(Variable(x)).value().to_vector<float>();
  const auto again = drop(Variable(x)).value().to_vector<float>();
  EXPECT_EQ(a, again);
  std::size_t kept = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6);
    kept += v != 0;
  }
  EXPECT_NEAR(double(kept) / 4000, 0.75, 0.05);
  set_dropout_step(11, 6);
  EXPECT_NE(drop(Variable(x)).value().to_vector<float>(), a);
  drop.eval();
  EXPECT_EQ(drop(Variable(x)).value().to_vector<float>(), std::vector<float>(4000, 1.0f));
  EXPECT_THROW(Dropout(1.0f), InvalidArgument);
}

TEST(Optim, SgdMomentumMatchesTheFormulaAndStateRoundTrips) {
  DeviceGuard guard(cpu());
  Variable p(random_tensor({6}, 6), true);
  const auto p0 = p.value().to_vector<float>();
  SGD opt({{"p", &p}}, SgdOptions{0.1f, 0.9f, 0, 0, false});
  const auto g = random_values(6, 7);
  std::vector<double> ref(p0.begin(), p0.end()), v(6);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    sum(mul(p, Variable(Tensor::from(g, {6}))), 0).backward();  // dL/dp = g
    opt.step();
    for (int i = 0; i < 6; ++i) {
      v[i] = step == 0 ? g[i] : 0.9 * v[i] + g[i];
      ref[i] -= 0.1 * v[i];
    }
  }
  const auto got = p.value().to_vector<float>();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], ref[i], 1e-5);
  const OptimizerState s = opt.state();
  ASSERT_EQ(s.tensors.size(), 1u);
  EXPECT_EQ(s.tensors[0].first, "p.momentum_buffer");

  Adam adam({{"p", &p}}, AdamOptions{});
  OptimizerState bad;
  bad.values["step"] = "3";  // but no exp_avg
  EXPECT_THROW(adam.load_state(bad), InvalidArgument);
  EXPECT_EQ(adam.state().values.at("step"), "0");  // unchanged
  EXPECT_THROW(SGD({{"p", &p}}, SgdOptions{-1.0f}), InvalidArgument);
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  const fs::path dir = temp_dir("st");
  const Tensor f = random_tensor({2, 3, 4}, 8);
  const Tensor i = Tensor::from<std::int32_t>(std::vector<std::int32_t>{-1, 5, 7}, {3}, &cpu());
  const Tensor scalar = Tensor::full({}, 2.5, DType::f32, &cpu());
  save_safetensors(dir / "a.safetensors", {{"w", f}, {"i", i}, {"s", scalar}}, {{"k", "v"}});
  const auto c = load_safetensors(dir / "a.safetensors", &cpu());
  ASSERT_EQ(c.tensors.size(), 3u);
  EXPECT_EQ(c.tensors[0].first, "w");
  EXPECT_EQ(c.tensors[0].second.shape(), f.shape());
  EXPECT_EQ(c.tensors[0].second.to_vector<float>(), f.to_vector<float>());
  EXPECT_EQ(c.tensors[1].second.to_vector<std::int32_t>(), i.to_vector<std::int32_t>());
  EXPECT_EQ(c.tensors[2].second.rank(), 0);
  EXPECT_EQ(c.metadata.at("k"), "v");
  // The data starts 8-byte aligned and no temporary file is left behind.
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "a.safetensors");
  EXPECT_THROW(save_safetensors(dir / "b.safetensors", {{"w", f}, {"w", f}}), InvalidArgument);
  fs::remove_all(dir);
}

TEST(Safetensors, MalformedFilesGiveFileErrorsAndNeverCrash) {
  const fs::path dir = temp_dir("st-bad");
  const fs::path p = dir / "bad.safetensors";
  auto write = [&](const std::string& header, const std::string& data = "") {
    std::string s(8, '\0');
    for (int b = 0; b < 8; ++b) s[b] = static_cast<char>(header.size() >> (8 * b));
    std::ofstream(p, std::ios::binary) << s << header << data;
  };
  auto expect = [&](const std::string& what) {
    try {
      load_safetensors(p, &cpu());
      ADD_FAILURE() << "no error for " << what;
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
  };
  std::ofstream(p) << "abc";
  expect("shorter than the 8-byte header length");
  write("{not json");
  expect("header is not JSON");
  write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234");
  expect("outside the 4-byte data");
  write(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678");
  expect("needs 12 bytes");
  write(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", "12345678");
  expect("unsupported dtype 'Q7'");
  write(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
      "12345678");
  expect("overlap");
  write(R"({"a":{"dtype":"F32"}})");
  expect("entry 'a' is malformed");
  {
    std::string s(8, '\xff');
    std::ofstream(p, std::ios::binary) << s;
  }
  expect("runs past the end");
  EXPECT_THROW(load_safetensors(dir / "missing.safetensors"), FileError);
  fs::remove_all(dir);
}

TEST(Trainer, AcceleratorErrorsAreThoseOfLightning) {
  auto message = [](const std::string& acc, int devices) -> std::string {
    try {
      resolve_accelerator(acc, devices);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(&resolve_accelerator("cpu", 1), &cpu());
  EXPECT_EQ(&resolve_accelerator("cpu:0", 1), &cpu());
  const std::string unknown = message("tpu", 1);
  EXPECT_NE(unknown.find("You selected an invalid accelerator name: accelerator='tpu'. Available "
                         "names are: auto, cpu,"),
            std::string::npos)
      << unknown;
  EXPECT_THROW(resolve_accelerator("tpu", 1), ConfigError);
  if (!is_available("vulkan")) {
    const std::string unavailable = message("vulkan", 1);
    EXPECT_NE(unavailable.find("'vulkan' accelerator can not run on your system since the "
                               "accelerator is not available"),
              std::string::npos)
        << unavailable;
    EXPECT_NE(unavailable.find("'cpu'"), std::string::npos) << unavailable;
    EXPECT_THROW(resolve_accelerator("vulkan", 1), DeviceUnavailable);
  }
  const std::string too_many = message("cpu", 4);
  EXPECT_NE(too_many.find("You requested devices=4 with accelerator='cpu', but your system only "
                          "has 1 cpu device(s)."),
            std::string::npos)
      << too_many;
  EXPECT_THROW(resolve_accelerator("cpu", 0), ConfigError);
  EXPECT_THROW(resolve_accelerator("cpu:7", 1), ConfigError);
}

namespace {
// Four classes of 8x8 images, each a bright quadrant with noise: learnable in one epoch.
Dataset quadrants(std::int64_t n, std::uint64_t seed) {
  Dataset d;
  d.name = "quadrants";
  d.size = n;
  d.rows = d.cols = 8;
  Generator g(seed);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::uint8_t>(g.below(4));
    d.labels.push_back(label);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        const bool lit = (r / 4) * 2 + c / 4 == label;
        d.images.push_back(static_cast<std::uint8_t>((lit ? 150 : 0) + g.below(100)));
      }
  }
  return d;
}

std::shared_ptr<Sequential> small_model(std::uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<Sequential>();
  m->emplace<Flatten>()
      .emplace<Linear>(64, 32, gen)
      .emplace<ReLU>()
      .emplace<Dropout>(0.2f, 0)
      .emplace<Linear>(32, 4, gen);
  return m;
}

ImageClassifier::Configure sgd(float lr, float momentum) {
  return [=](Module& m) {
    OptimizerConfig c;
    c.optimizer = std::make_shared<SGD>(m.named_parameters(), SgdOptions{lr, momentum});
    return c;
  };
}

ImageClassifier::Configure adam() {
  return [](Module& m) {
    OptimizerConfig c;
    c.optimizer = std::make_shared<Adam>(m.named_parameters(), AdamOptions{});
    return c;
  };
}

LoaderOptions loader_options(std::int64_t batch, std::uint64_t seed = 0, bool shuffle = true) {
  LoaderOptions lo;
  lo.batch_size = batch;
  lo.seed = seed;
  lo.shuffle = shuffle;
  return lo;
}

struct Recorder : Callback {
  std::vector<MetricsRow> epochs;
  void on_train_epoch_end(Trainer& t) override { epochs.push_back(t.progress().history.back()); }
};
}  // namespace

TEST(Trainer, LearnsAndResumesBitIdentically) {
  const Dataset train = quadrants(512, 1), test = quadrants(256, 2);
  ImageDataLoader train_loader(train, loader_options(32, 5));
  ImageDataLoader test_loader(test, loader_options(32, 0, false));
  const fs::path dir = temp_dir("resume");
  TrainerOptions o;
  o.accelerator = "cpu";
  o.seed = 5;
  o.enable_progress_bar = false;

  // Two epochs straight.
  o.max_epochs = 2;
  auto straight = small_model(9);
  ImageClassifier a(straight, sgd(0.05f, 0.9f));
  auto rec = std::make_shared<Recorder>();
  o.callbacks = {rec};
  Trainer(o).fit(a, train_loader, &test_loader);
  ASSERT_EQ(rec->epochs.size(), 2u);
  EXPECT_GT(rec->epochs.back().metrics.at("val_acc"), 0.9);

  // One epoch with checkpoints, then a new process-like start that resumes for the second.
  o.max_epochs = 1;
  o.callbacks = {std::make_shared<ModelCheckpoint>(dir),
                 std::make_shared<CsvLogger>(dir / "m.csv")};
  ImageClassifier b(small_model(9), sgd(0.05f, 0.9f));
  Trainer(o).fit(b, train_loader, &test_loader);
  const auto ckpt = latest_checkpoint(dir);
  ASSERT_TRUE(ckpt);
  EXPECT_EQ(ckpt->filename(), "epoch-0001.safetensors");

  o.max_epochs = 2;
  auto resumed = small_model(123);  // other initial weights: the checkpoint replaces them
  ImageClassifier c(resumed, sgd(0.05f, 0.9f));
  Trainer t(o);
  t.fit(c, train_loader, &test_loader, *ckpt);
  EXPECT_EQ(values(*resumed), values(*straight));
  EXPECT_EQ(t.global_step(), 2 * 16);
  EXPECT_EQ(t.progress().history.size(), 2u);
  // The second epoch's metrics are the uninterrupted run's (time aside).
  EXPECT_EQ(t.progress().history[1].metrics, rec->epochs[1].metrics);
  std::ifstream csv(dir / "m.csv");
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 3);  // header and two epochs, the first restored from the checkpoint

  // A checkpoint of another model or optimizer is refused and changes nothing.
  auto other = make_mlp(*std::make_unique<Generator>(1));
  Adam adam_other(other->named_parameters(), AdamOptions{});
  const auto before = values(*other);
  EXPECT_THROW(load_checkpoint(*ckpt, *other, adam_other), InvalidArgument);
  SGD sgd_other(other->named_parameters(), SgdOptions{});
  EXPECT_THROW(load_checkpoint(*ckpt, *other, sgd_other), InvalidArgument);
  EXPECT_EQ(values(*other), before);
  fs::remove_all(dir);
}

namespace {

// A checkpoint after one epoch of Adam on quadrants, in |dir|/epoch-0001.safetensors.
fs::path adam_checkpoint(const fs::path& dir, const Dataset& train) {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.max_epochs = 1;
  o.enable_progress_bar = false;
  o.callbacks = {std::make_shared<ModelCheckpoint>(dir)};
  ImageClassifier model(small_model(9), adam());
  ImageDataLoader loader(train, loader_options(64));
  Trainer(o).fit(model, loader);
  return dir / checkpoint_name(1);
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The message of what |f| throws (of type E), or "" when it throws nothing.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Checkpoint, EveryFieldIsCheckedAndNothingChangesOnError) {
  const fs::path dir = temp_dir("ckpt-fields");
  const fs::path good = adam_checkpoint(dir, quadrants(256, 1));
  const SafetensorsContents c = load_safetensors(good, &cpu());
  const fs::path bad = dir / "crafted.safetensors";
  auto model = small_model(4);
  Adam adam(model->named_parameters(), AdamOptions{});
  const auto before = values(*model);
  // |edit| changes the good checkpoint's metadata and tensors; loading the result fails with
  // an error of type E naming the file and containing |what|.
  auto expect = [&]<typename E>(E, const std::string& what, auto edit) {
    SafetensorsContents e = c;
    edit(e.metadata, e.tensors);
    save_safetensors(bad, e.tensors, e.metadata);
    const std::string msg = error_of<E>([&] { load_checkpoint(bad, *model, adam); });
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
    EXPECT_NE(msg.find(bad.string()), std::string::npos) << msg;
    EXPECT_EQ(values(*model), before) << what;
    EXPECT_EQ(adam.state().values.at("step"), "0") << what;
  };
  using Meta = std::map<std::string, std::string>;
  using Tensors = std::vector<std::pair<std::string, Tensor>>;
  auto set = [](std::string key, std::string value) {
    return [=](Meta& m, Tensors&) { m[key] = value; };
  };
  const FileError file_error("");
  const InvalidArgument invalid("");
  // Observed on main: an epoch past any max_epochs looped forever, a negative one trained
  // negative epochs; the first now disagrees with the steps taken.
  expect(file_error, "global_step is 4 after 2147483647 epochs", set("epoch", "2147483647"));
  expect(file_error, "metadata 'epoch' is '-5'", set("epoch", "-5"));
  expect(file_error, "metadata 'epoch' is '1abc'", set("epoch", "1abc"));  // stoi took it
  expect(file_error, "metadata 'epoch' is ' 1'", set("epoch", " 1"));
  expect(file_error, "metadata 'epoch' is '99999999999999999999'",
         set("epoch", "99999999999999999999"));
  expect(file_error, "metadata 'epoch_batch' is 'x'", set("epoch_batch", "x"));
  expect(file_error, "batches_seen is 3 for 4 steps", set("batches_seen", "3"));
  expect(file_error, "epoch sums are given at an epoch's end",
         set("epoch_sums", R"({"train_loss": [1.0, 2.0]})"));
  expect(file_error, "metadata 'epoch_sums' 'a' is [1]", [](Meta& m, Tensors&) {
    m["epoch_batch"] = "1";
    m["epoch_sums"] = R"({"a": [1]})";
  });
  expect(file_error, "metadata 'epoch_loss' is", set("epoch_loss", "[1, -2]"));
  expect(file_error, "the history has rows of epoch 1 after 0 epoch(s) and 0 batch(es) done",
         [](Meta& m, Tensors&) { m["epoch"] = "0"; });
  expect(file_error, "metadata 'lr_scheduler' is 'maybe'", set("lr_scheduler", "maybe"));
  expect(file_error, "metadata 'lr_scheduler' is none but scheduler state is present",
         set("scheduler.last_epoch", "3"));
  expect(file_error, "metadata 'callback.X' is not a JSON object", set("callback.X", "[1]"));
  expect(file_error, "metadata 'callback.X' entry 'a' is not a string",
         set("callback.X", R"({"a": 1})"));
  expect(file_error, "metadata 'grad_scaler' is not a JSON object", set("grad_scaler", "[1]"));
  expect(file_error, "metadata 'grad_scaler' entry 'scale' is not a string",
         set("grad_scaler", R"({"scale": 2})"));
  expect(file_error, "metadata 'grad_scaler': scale is -2; pass a positive number",
         set("grad_scaler", R"({"scale": "-2", "growth_factor": "2", "backoff_factor": "0.5",
                                "growth_interval": "2000", "growth_tracker": "0",
                                "skipped_steps": "0"})"));
  expect(file_error, "metadata 'grad_scaler': 'growth_factor' is missing",
         set("grad_scaler", R"({"scale": "2"})"));
  expect(file_error, "metadata 'global_step' is '-1'", set("global_step", "-1"));  // wrapped
  expect(file_error, "global_step is 0 after 1 epochs", [](Meta& m, Tensors&) {
    m["global_step"] = "0";
    m["optimizer.step"] = "0";
  });
  expect(file_error, "metadata 'seed' is '18446744073709551616'",
         set("seed", "18446744073709551616"));
  expect(file_error, "metadata 'optimizer.step' is '0' but global_step is 4",
         set("optimizer.step", "0"));
  expect(file_error, "metadata 'lr' is 'fast'", set("lr", "fast"));
  expect(file_error, "metadata 'lr' is '-0.1'", set("lr", "-0.1"));
  expect(file_error, "metadata 'note' is not part of a checkpoint", set("note", "hi"));
  expect(file_error, "checkpoint format 'tessera-checkpoint-0'",
         set("format", "tessera-checkpoint-0"));
  expect(file_error, "'history' is not JSON", set("history", "[{"));
  expect(file_error, "'history' row 0 'epoch' is 0; epochs count from 1", [](Meta& m, Tensors&) {
    auto h = nlohmann::json::parse(m["history"]);
    h[0]["epoch"] = 0;
    m["history"] = h.dump();
  });
  expect(file_error, "'history' row 1 (epoch 1, step 4) does not follow", [](Meta& m, Tensors&) {
    auto h = nlohmann::json::parse(m["history"]);
    h.push_back(h[0]);
    m["history"] = h.dump();
  });
  expect(file_error, "'history' row 0 metric 'train_loss' is \"x\"", [](Meta& m, Tensors&) {
    auto h = nlohmann::json::parse(m["history"]);
    h[0]["metrics"]["train_loss"] = "x";
    m["history"] = h.dump();
  });
  expect(file_error, "metadata 'model' is missing", [](Meta& m, Tensors&) { m.erase("model"); });
  expect(invalid, "optimizer value 'step' is 'abc'",
         [](Meta& m, Tensors&) { m["optimizer.step"] = "abc"; });
  expect(invalid, "optimizer value 'momentum' is not a value of this optimizer",
         set("optimizer.momentum", "0.9"));
  expect(invalid, "optimizer state '1.weight.exp_avg' is i32 [32,64], its parameter f32 [32,64]",
         [](Meta&, Tensors& t) {
           for (auto& [name, tensor] : t)
             if (name == "optimizer.1.weight.exp_avg")
               tensor = Tensor::full(tensor.shape(), 0.0, DType::i32, &cpu());
         });
  expect(invalid, "optimizer state '1.weight.exp_avg' is f32 [2048]", [](Meta&, Tensors& t) {
    for (auto& [name, tensor] : t)
      if (name == "optimizer.1.weight.exp_avg") tensor = Tensor::full({2048}, 0.0);
  });
  expect(
      invalid, "optimizer state '1.weight.velocity' is not a state of this optimizer",
      [](Meta&, Tensors& t) { t.emplace_back("optimizer.1.weight.velocity", t.front().second); });
  expect(invalid, "optimizer state '4.bias.exp_avg_sq' is missing", [](Meta&, Tensors& t) {
    std::erase_if(t, [](const auto& p) { return p.first == "optimizer.4.bias.exp_avg_sq"; });
  });
  expect(invalid, "tensor 'extra' is not a parameter or buffer of the model",
         [](Meta&, Tensors& t) { t.emplace_back("extra", t.front().second); });
  expect(invalid, "tensor '1.bias' is f32 [31] in the checkpoint, f32 [32] in the model",
         [](Meta&, Tensors& t) {
           for (auto& [name, tensor] : t)
             if (name == "1.bias") tensor = Tensor::full({31}, 0.0);
         });
  // The good file loads, and a state that took steps without moments, or moments without a
  // step, is refused by the optimizer itself.
  EXPECT_EQ(load_checkpoint(good, *model, adam).epoch, 1);
  EXPECT_NE(values(*model), before);
  Adam fresh(model->named_parameters(), AdamOptions{});
  OptimizerState s = adam.state();
  s.values["step"] = "0";
  EXPECT_NE(error_of<InvalidArgument>([&] { fresh.load_state(s); }).find("'step' is 0 but"),
            std::string::npos);
  s.values["step"] = "+4";
  EXPECT_THROW(fresh.load_state(s), InvalidArgument);
  fs::remove_all(dir);
}

TEST(Checkpoint, LatestCheckpointNamesTheFileItCanNotRead) {
  const fs::path dir = temp_dir("ckpt-latest");
  EXPECT_FALSE(latest_checkpoint(dir / "missing"));
  std::ofstream(dir / "epoch-0002.safetensors") << "x";
  std::ofstream(dir / "epoch-10.safetensors") << "x";
  std::ofstream(dir / "epoch-0010.safetensors") << "x";
  EXPECT_EQ(latest_checkpoint(dir)->filename(), "epoch-0010.safetensors");
  // Observed on main: "stol" and nothing else.
  const fs::path huge = dir / "epoch-99999999999999999999.safetensors";
  std::ofstream(huge) << "x";
  const std::string msg = error_of<FileError>([&] { latest_checkpoint(dir); });
  EXPECT_NE(msg.find(huge.string() + ": the epoch number in the file name is more than"),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of<FileError>([&] { latest_checkpoint(huge); }).find("not a directory"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, NextSaveRemovesTemporariesOfDeadWritersOnly) {
  const fs::path dir = temp_dir("ckpt-tmp");
  const fs::path target = dir / checkpoint_name(1);
  // A process id that no longer exists: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child), live = std::to_string(::getpid());
  const std::string base = target.filename().string();
  const std::vector<std::string> stale = {base + ".tmp." + dead + ".123.0"};
  const std::vector<std::string> kept = {
      base + ".tmp." + live + ".1.0",                // this process: a live writer
      base + ".tmp.1.0.0",                           // init: alive
      checkpoint_name(2) + ".tmp." + dead + ".1.0",  // another target
      base + ".tmp." + dead + ".x",                  // not a name replace_file_atomic makes
      base + ".tmp." + dead + ".1.0.bak"};
  for (const auto& n : stale) std::ofstream(dir / n) << "partial";
  for (const auto& n : kept) std::ofstream(dir / n) << "partial";
  fs::create_directory(dir / (base + ".tmp." + dead + ".9.9"));  // not a regular file
  adam_checkpoint(dir, quadrants(64, 1));  // saves epoch-0001.safetensors into |dir|
  for (const auto& n : stale) EXPECT_FALSE(fs::exists(dir / n)) << n;
  for (const auto& n : kept) EXPECT_TRUE(fs::exists(dir / n)) << n;
  EXPECT_TRUE(fs::is_directory(dir / (base + ".tmp." + dead + ".9.9")));
  EXPECT_TRUE(fs::exists(target));
  fs::remove_all(dir);
}

TEST(Trainer, ResumingAtMaxEpochsTrainsNothingAndSaysSo) {
  const fs::path dir = temp_dir("ckpt-done");
  const Dataset train = quadrants(128, 1);
  const fs::path ckpt = adam_checkpoint(dir, train);
  const std::string bytes = file_bytes(ckpt);
  {
    TrainerOptions o;
    o.accelerator = "cpu";
    o.max_epochs = 1;
    auto rec = std::make_shared<Recorder>();
    o.callbacks = {rec, std::make_shared<ModelCheckpoint>(dir)};
    ImageClassifier model(small_model(9), adam());
    ImageDataLoader loader(train, loader_options(64));
    Trainer t(o);
    ::testing::internal::CaptureStdout();
    t.fit(model, loader, nullptr, ckpt);
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_TRUE(rec->epochs.empty());
    EXPECT_EQ(t.progress().epoch, 1);
    EXPECT_NE(out.find("Nothing to train: 1 epoch(s) done, max_epochs=1 reached"),
              std::string::npos)
        << out;
  }
  EXPECT_EQ(file_bytes(ckpt), bytes);
  fs::remove_all(dir);
}

TEST(Trainer, NeverWritesOverTheCheckpointItResumedFrom) {
  const fs::path dir = temp_dir("ckpt-over");
  const Dataset train = quadrants(128, 1);
  // A checkpoint of epoch 1 named as epoch 2's: training epoch 2 would write over it.
  const fs::path ckpt = dir / checkpoint_name(2);
  fs::rename(adam_checkpoint(dir, train), ckpt);
  const std::string bytes = file_bytes(ckpt);
  TrainerOptions o;
  o.accelerator = "cpu";
  o.max_epochs = 3;
  o.enable_progress_bar = false;
  auto rec = std::make_shared<Recorder>();
  o.callbacks = {rec, std::make_shared<ModelCheckpoint>(dir)};
  ImageClassifier model(small_model(9), adam());
  ImageDataLoader loader(train, loader_options(64));
  const std::string msg =
      error_of<FileError>([&] { Trainer(o).fit(model, loader, nullptr, ckpt); });
  EXPECT_NE(msg.find(ckpt.string() + ": this run resumes from it, but it holds epoch 1 while its "
                                     "name says epoch 2"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(rec->epochs.empty());  // refused before training
  EXPECT_EQ(file_bytes(ckpt), bytes);
  EXPECT_FALSE(fs::exists(dir / checkpoint_name(3)));
  fs::remove_all(dir);
}

TEST(Trainer, EmptyEvaluationSetIsAnErrorBeforeTraining) {
  const Dataset train = quadrants(64, 1);
  Dataset empty = quadrants(0, 2);
  empty.name = "quadrants/t10k";
  // Observed on main: "Test accuracy: 0.00%".
  const std::string msg =
      error_of<InvalidArgument>([&] { ImageDataLoader(empty, loader_options(32)); });
  EXPECT_NE(msg.find("the dataset 'quadrants/t10k' has no samples"), std::string::npos) << msg;
  // A loader of no batches (any DataLoader) is refused before training.
  struct Empty final : DataLoader {
    std::int64_t num_batches() const override { return 0; }
    std::int64_t num_samples() const override { return 0; }
    void begin_epoch(std::int64_t) override {}
    bool next(TensorBatch&) override { return false; }
  } none;
  TrainerOptions o;
  o.accelerator = "cpu";
  o.max_epochs = 1;
  o.enable_progress_bar = false;
  auto rec = std::make_shared<Recorder>();
  o.callbacks = {rec};
  ImageClassifier model(small_model(9), sgd(0.01f, 0));
  ImageDataLoader loader(train, loader_options(32));
  Trainer t(o);
  EXPECT_NE(error_of<InvalidArgument>([&] {
              t.fit(model, loader, &none);
            }).find("the validation loader has no batches"),
            std::string::npos);
  EXPECT_TRUE(rec->epochs.empty());
  EXPECT_THROW(t.validate(model, none), InvalidArgument);
  EXPECT_THROW(t.fit(model, none), InvalidArgument);
  o.limit_val_batches = -1;
  EXPECT_THROW(Trainer{o}, ConfigError);
}

TEST(Trainer, ShowsProgressByDefaultAsLightningDoes) {
  const Dataset train = quadrants(128, 1), test = quadrants(64, 2);
  auto fit = [&](TrainerOptions o) {
    o.accelerator = "cpu";
    o.max_epochs = 1;
    ImageClassifier model(small_model(9), adam());
    ImageDataLoader train_loader(train, loader_options(32));
    ImageDataLoader test_loader(test, loader_options(32, 0, false));
    Trainer t(o);
    ::testing::internal::CaptureStdout();
    t.fit(model, train_loader, &test_loader);
    return ::testing::internal::GetCapturedStdout();
  };
  // Observed on main: the README's example printed nothing.
  const std::string shown = fit(TrainerOptions{});
  EXPECT_NE(shown.find("Training on cpu:0"), std::string::npos) << shown;
  EXPECT_NE(shown.find("epoch 1: train_acc "), std::string::npos) << shown;
  EXPECT_NE(shown.find(" val_loss "), std::string::npos) << shown;
  EXPECT_NE(shown.find("| lr 0.001 |"), std::string::npos) << shown;
  TrainerOptions quiet;
  quiet.enable_progress_bar = false;
  EXPECT_EQ(fit(quiet), "");
  // One progress bar: the caller's replaces the default one.
  TrainerOptions own;
  own.callbacks = {std::make_shared<ProgressBar>(stdout)};
  const std::string once = fit(own);
  EXPECT_EQ(once.find("Training on"), once.rfind("Training on")) << once;
  own.enable_progress_bar = false;
  own.accelerator = "cpu";
  EXPECT_THROW(Trainer{own}, ConfigError);
}

TEST(Callbacks, BadOutputPathsAreFoundWhenConstructed) {
  const fs::path dir = temp_dir("cb-paths");
  const fs::path file = dir / "a-file";
  std::ofstream(file) << "x";
  // Observed on main: found only after the first epoch had trained.
  std::string msg = error_of<FileError>([&] { ModelCheckpoint{file}; });
  EXPECT_NE(msg.find("checkpoint directory " + file.string() + ": not a directory"),
            std::string::npos)
      << msg;
  EXPECT_THROW(ModelCheckpoint{file / "sub"}, FileError);
  msg = error_of<FileError>([&] { CsvLogger{dir}; });
  EXPECT_NE(msg.find("metrics file " + dir.string() + ": is a directory"), std::string::npos)
      << msg;
  EXPECT_THROW(CsvLogger{file / "m.csv"}, FileError);
  if (::geteuid() != 0) {  // root writes anywhere
    const fs::path ro = dir / "read-only";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    msg = error_of<FileError>([&] { ModelCheckpoint{ro}; });
    EXPECT_NE(msg.find(ro.string() + ": can not write files in this directory"), std::string::npos)
        << msg;
    EXPECT_THROW(CsvLogger{ro / "m.csv"}, FileError);
    fs::permissions(ro, fs::perms::owner_all);
  }
  // A good directory is created, and the probe leaves nothing in it.
  ModelCheckpoint ok(dir / "new" / "ckpt");
  EXPECT_TRUE(fs::is_directory(dir / "new" / "ckpt"));
  EXPECT_TRUE(fs::is_empty(dir / "new" / "ckpt"));
  fs::remove_all(dir);
}
