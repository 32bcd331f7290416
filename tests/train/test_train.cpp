// autograd semantics, layers, optimizers, safetensors, checkpoints and the Trainer, on cpu:0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

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

std::unique_ptr<Sequential> small_model(std::uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_unique<Sequential>();
  m->emplace<Flatten>()
      .emplace<Linear>(64, 32, gen)
      .emplace<ReLU>()
      .emplace<Dropout>(0.2f, 0)
      .emplace<Linear>(32, 4, gen);
  return m;
}

struct Recorder : Callback {
  std::vector<EpochMetrics> epochs;
  void on_epoch_end(Trainer&, const EpochMetrics& m) override { epochs.push_back(m); }
};
}  // namespace

TEST(Trainer, LearnsAndResumesBitIdentically) {
  const Dataset train = quadrants(512, 1), test = quadrants(256, 2);
  const fs::path dir = temp_dir("resume");
  TrainerOptions o;
  o.accelerator = "cpu";
  o.batch_size = 32;
  o.seed = 5;

  // Two epochs straight.
  o.max_epochs = 2;
  auto straight = small_model(9);
  SGD sgd_a(straight->named_parameters(), SgdOptions{0.05f, 0.9f});
  auto rec = std::make_shared<Recorder>();
  o.callbacks = {rec};
  Trainer(o).fit(*straight, sgd_a, train, &test);
  ASSERT_EQ(rec->epochs.size(), 2u);
  EXPECT_GT(rec->epochs.back().test_accuracy, 0.9);

  // One epoch with checkpoints, then a new process-like start that resumes for the second.
  o.max_epochs = 1;
  o.callbacks = {std::make_shared<ModelCheckpoint>(dir),
                 std::make_shared<CsvLogger>(dir / "m.csv")};
  auto first = small_model(9);
  SGD sgd_b(first->named_parameters(), SgdOptions{0.05f, 0.9f});
  Trainer(o).fit(*first, sgd_b, train, &test);
  const auto ckpt = latest_checkpoint(dir);
  ASSERT_TRUE(ckpt);
  EXPECT_EQ(ckpt->filename(), "epoch-0001.safetensors");

  o.max_epochs = 2;
  auto resumed = small_model(123);  // other initial weights: the checkpoint replaces them
  SGD sgd_c(resumed->named_parameters(), SgdOptions{0.05f, 0.9f});
  Trainer t(o);
  t.fit(*resumed, sgd_c, train, &test, *ckpt);
  EXPECT_EQ(values(*resumed), values(*straight));
  EXPECT_EQ(t.progress().global_step, 2u * 16u);
  EXPECT_EQ(t.progress().history.size(), 2u);
  std::ifstream csv(dir / "m.csv");
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 3);  // header and two epochs, the first restored from the checkpoint

  // A checkpoint of another model or optimizer is refused and changes nothing.
  auto other = make_mlp(*std::make_unique<Generator>(1));
  Adam adam(other->named_parameters(), AdamOptions{});
  const auto before = values(*other);
  EXPECT_THROW(load_checkpoint(*ckpt, *other, adam), InvalidArgument);
  SGD sgd_other(other->named_parameters(), SgdOptions{});
  EXPECT_THROW(load_checkpoint(*ckpt, *other, sgd_other), InvalidArgument);
  EXPECT_EQ(values(*other), before);
  fs::remove_all(dir);
}
