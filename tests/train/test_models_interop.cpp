// The built-in ResNet and GPT against their PyTorch twins (bench/models_peer.py), both ways:
// Tessera's weights load into the twins with load_state_dict(strict=True) and give the same
// outputs and loss; the twins' weights (torch-initialised, saved by torch) load into Tessera and
// give the same outputs. models_interop.py is the torch half. Also: the Python twin of the text
// split (bench/text_peer.py) agrees with split_text and TextBatchLoader.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "tessera/train/gpt.h"
#include "tessera/train/language_model.h"
#include "tessera/train/resnet.h"
#include "tessera/train/safetensors.h"
#include "tessera/train/serialize.h"
#include "tessera/train/text_data.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

std::string python() {
  const char* p = std::getenv("TESSERA_TEST_TORCH_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

// Runs a shell command, returning its exit status and stdout.
std::pair<int, std::string> sh(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / (name + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

double nerr(const Tensor& got, const Tensor& want) {
  const std::vector<float> a = got.to_vector<float>(), b = want.to_vector<float>();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-60));
}

Tensor randn(const Shape& s, Generator& g, Device& dev) {
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (float& x : v) x = g.normal();
  return Tensor::from(v, s, &dev);
}

Tensor tokens(const Shape& s, std::int64_t vocab, Generator& g, Device& dev) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = static_cast<std::int64_t>(g.below(static_cast<std::uint64_t>(vocab)));
  return Tensor::from<std::int64_t>(v, s, &dev);
}

const ResNetOptions kResNet{.depth = 8, .num_classes = 10, .in_channels = 1, .width = 4};
const GPTConfig kGpt{.vocab_size = 11,
                     .block_size = 16,
                     .n_layer = 2,
                     .n_head = 2,
                     .n_embd = 16,
                     .dropout = 0.0,
                     .bias = true};

std::map<std::string, std::string> resnet_meta() {
  return {{"depth", std::to_string(kResNet.depth)},
          {"num_classes", std::to_string(kResNet.num_classes)},
          {"in_channels", std::to_string(kResNet.in_channels)},
          {"width", std::to_string(kResNet.width)}};
}

std::map<std::string, std::string> gpt_meta() {
  return {{"vocab_size", std::to_string(kGpt.vocab_size)},
          {"block_size", std::to_string(kGpt.block_size)},
          {"n_layer", std::to_string(kGpt.n_layer)},
          {"n_head", std::to_string(kGpt.n_head)},
          {"n_embd", std::to_string(kGpt.n_embd)},
          {"bias", "true"}};
}

Tensor find(const SafetensorsContents& c, const std::string& name) {
  for (const auto& [n, t] : c.tensors)
    if (n == name) return t;
  ADD_FAILURE() << "no tensor " << name;
  return Tensor();
}

TEST(ModelsInterop, ResNetAndGptLoadIntoPyTorchAndBack) {
  Device& cpu = device("cpu");
  DeviceGuard guard(cpu);
  const fs::path d = fresh_dir("tessera_models_interop");
  Generator g(0x5eed);

  // Tessera -> PyTorch. The ResNet's BatchNorm statistics are moved by one training forward.
  ResNet resnet(kResNet, &g);
  resnet.train();
  (void)resnet.forward(Variable(randn({6, 1, 12, 12}, g, cpu)));
  resnet.eval();
  const Tensor x = randn({4, 1, 12, 12}, g, cpu);
  {
    NoGradGuard ng;
    save(resnet, d / "tessera_resnet.safetensors");
    save_safetensors(d / "tessera_resnet_io.safetensors",
                     {{"x", x}, {"out", resnet.forward(Variable(x)).value()}}, resnet_meta());
  }
  GPT gpt(kGpt, &g);
  gpt.eval();
  const Tensor idx = tokens({3, 10}, kGpt.vocab_size, g, cpu);
  const Tensor targets = tokens({3, 10}, kGpt.vocab_size, g, cpu);
  {
    NoGradGuard ng;
    const Variable logits = gpt.forward(idx);
    save(gpt, d / "tessera_gpt.safetensors");
    save_safetensors(d / "tessera_gpt_io.safetensors",
                     {{"idx", idx},
                      {"targets", targets},
                      {"out", logits.value()},
                      {"loss", cross_entropy(logits, targets).value()}},
                     gpt_meta());
  }
  const auto [code, out] =
      sh(python() + " '" TESSERA_SOURCE_DIR "/tests/train/models_interop.py' '" + d.string() + "'");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("ok   resnet: Tessera's weights in PyTorch, outputs"), std::string::npos)
      << out;
  EXPECT_NE(out.find("ok   gpt: Tessera's weights in PyTorch, loss"), std::string::npos) << out;

  // PyTorch -> Tessera: fresh models (other random weights) take torch's.
  {
    ResNet r2(kResNet);
    const LoadResult lr = load(r2, d / "torch_resnet.safetensors");
    EXPECT_TRUE(lr.missing_keys.empty() && lr.unexpected_keys.empty());
    r2.eval();
    const SafetensorsContents io = load_safetensors(d / "torch_resnet_io.safetensors", &cpu);
    NoGradGuard ng;
    EXPECT_LT(nerr(r2.forward(Variable(find(io, "x"))).value(), find(io, "out")), 1e-4);
  }
  {
    GPT g2(kGpt);
    load(g2, d / "torch_gpt.safetensors");
    g2.eval();
    EXPECT_EQ(g2.lm_head->weight.node(), g2.wte->weight.node());
    const SafetensorsContents io = load_safetensors(d / "torch_gpt_io.safetensors", &cpu);
    NoGradGuard ng;
    const Variable logits = g2.forward(find(io, "idx"));
    EXPECT_LT(nerr(logits.value(), find(io, "out")), 1e-4);
    EXPECT_LT(nerr(cross_entropy(logits, find(io, "targets")).value(), find(io, "loss")), 1e-4);
  }
  fs::remove_all(d);
}

TEST(ModelsInterop, TextSplitAndWindowsMatchThePythonTwin) {
  const fs::path d = fresh_dir("tessera_text_peer");
  Generator g(77);
  std::string text;
  const std::string alphabet = "abc de\nfg.\x80";
  for (int i = 0; i < 50000; ++i) text += alphabet[g.below(alphabet.size())];
  {
    std::ofstream(d / "b.txt", std::ios::binary) << text.substr(0, 20000);
    std::ofstream(d / "a.txt", std::ios::binary) << text.substr(20000);
    std::ofstream(d / "a.dat", std::ios::binary) << "index";
  }
  const std::uint64_t seed = 12345;
  const TextCorpus corpus = load_text(d);
  TextSplitOptions so;
  so.block_size = 1000;
  so.seed = seed;
  const TextSplit split = split_text(corpus, so);
  TextLoaderOptions lo;
  lo.batch_size = 5;
  lo.context = 32;
  lo.seed = seed;
  const TextBatchLoader train(split, lo);
  lo.part = TextPart::val;
  const TextBatchLoader val(split, lo);

  const auto [code, out] =
      sh(python() + " '" TESSERA_SOURCE_DIR "/bench/text_peer.py' --dump '" + d.string() +
         "' --seed 12345 --block-size 1000 --context 32 --batch-size 5 "
         "--batches 3");
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["bytes"].get<std::size_t>(), corpus.text.size());
  std::string vocab;
  for (int c : j["vocab"]) vocab += static_cast<char>(c);
  EXPECT_EQ(vocab, corpus.vocab);
  EXPECT_EQ(j["val_blocks"].get<std::vector<std::int64_t>>(), split.val_blocks);
  EXPECT_EQ(j["train_len"].get<std::size_t>(), split.train->size());
  EXPECT_EQ(j["val_len"].get<std::size_t>(), split.val->size());
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(j["train_windows"][k].get<std::vector<std::int64_t>>(), train.window_starts(1, k));
  std::vector<std::int64_t> val_starts;
  for (std::int64_t b = 0; b < val.num_batches(); ++b)
    for (std::int64_t s : val.window_starts(1, b)) val_starts.push_back(s);
  EXPECT_EQ(j["val_windows"].get<std::vector<std::int64_t>>(), val_starts);
  fs::remove_all(d);
}

}  // namespace
}  // namespace tessera::train
