// Modules against PyTorch (python3-torch): state_dict names, shapes and dtypes and the printed
// tree of the same net, and the forward results of layers loaded with a state_dict that torch
// wrote (safetensors), on fresh random inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/tessera.h"
#include "tessera/train/train.h"

using namespace tessera;
using namespace tessera::train;
namespace fs = std::filesystem;

namespace {

// What modules_torch.py wrote, run once per process with a fresh seed.
struct TorchRef {
  fs::path dir;
  StateDict tensors;
  nlohmann::json net;
  std::string error;
};

const TorchRef& torch_ref() {
  static const TorchRef ref = [] {
    TorchRef r;
    r.dir = fs::temp_directory_path() / fmt::format("tessera-modules-torch-{}", ::getpid());
    fs::remove_all(r.dir);
    fs::create_directories(r.dir);
    const char* py = std::getenv("TESSERA_TEST_TORCH_PYTHON");
    const unsigned seed = std::random_device{}();
    const std::string cmd =
        fmt::format("\"{}\" \"{}\" \"{}\" {}", py && *py ? py : "/usr/bin/python3",
                    TESSERA_MODULES_TORCH_PY, r.dir.string(), seed);
    if (std::system(cmd.c_str()) != 0) {
      r.error = "failed (needs python3-torch): " + cmd;
      return r;
    }
    r.tensors = load_state_dict_file(r.dir / "ref.safetensors", &device("cpu"));
    std::ifstream(r.dir / "net.json") >> r.net;
    fs::remove_all(r.dir);
    return r;
  }();
  return ref;
}

// The entries "CASE.key" as a state dict of keys.
StateDict state_of(const std::string& name) {
  StateDict out;
  for (const auto& [k, t] : torch_ref().tensors)
    if (k.rfind(name + ".", 0) == 0) out.emplace_back(k.substr(name.size() + 1), t);
  return out;
}

Tensor torch_out(const std::string& name) {
  for (const auto& [k, t] : torch_ref().tensors)
    if (k == name) return t;
  throw std::runtime_error("no reference tensor " + name);
}

// ||a - b|| / ||b||.
double nerr(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape().str(), b.shape().str());
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  if (x.size() != y.size()) return 1e9;
  double d = 0, n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    d += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    n += double(y[i]) * y[i];
  }
  return std::sqrt(d / n);
}

constexpr double kTol = 1e-5;

#define REQUIRE_TORCH() \
  if (!torch_ref().error.empty()) FAIL() << torch_ref().error

// The torch net of modules_torch.py, registered as LibTorch does.
struct Net : Module {
  Net() {
    features = register_module("features", std::make_shared<Sequential>());
    features->emplace<Conv2d>(3, 8, 3, 1, 1)
        .emplace<BatchNorm2d>(8)
        .emplace<ReLU>()
        .emplace<MaxPool2d>(2)
        .emplace<Dropout>(0.25f);
    blocks = register_module("blocks", std::make_shared<ModuleList>());
    blocks->emplace_back<Linear>(8, 8);
    blocks->emplace_back<LayerNorm>(8);
    blocks->emplace_back<GELU>("tanh");
    attn = register_module("attn", std::make_shared<MultiheadAttention>(8, 2, 0.0, true, true));
    emb = register_module("emb", std::make_shared<Embedding>(10, 8, 0));
    heads = register_module("heads", std::make_shared<ModuleDict>());
    heads->insert("cls", std::make_shared<Linear>(8, 3));
    heads->insert("aux", std::make_shared<Linear>(8, 1, false));
    register_module("pool", std::make_shared<AdaptiveAvgPool2d>(1, 1));
    register_module("flat", std::make_shared<Flatten>());
    scale = register_parameter("scale", Tensor::full({1}, 1.0));
    register_buffer("steps", Tensor::full({}, 0.0, DType::i64));
  }
  std::shared_ptr<Sequential> features;
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<Embedding> emb;
  std::shared_ptr<ModuleDict> heads;
  Variable scale;
};

}  // namespace

TEST(ModulesTorch, StateDictKeysShapesDtypesAndReprAreTorchs) {
  REQUIRE_TORCH();
  DeviceGuard guard(device("cpu"));
  Net net;
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& [k, t] : net.state_dict()) {
    std::vector<std::int64_t> shape;
    for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
    mine.push_back({k, shape, std::string(dtype_name(t.dtype()))});
  }
  EXPECT_EQ(mine.dump(), torch_ref().net["keys"].dump());
  EXPECT_EQ(repr(net), torch_ref().net["repr"].get<std::string>());
}

TEST(ModulesTorch, LinearOverLeadingDimsConvGroupsDilationLayerNormEmbedding) {
  REQUIRE_TORCH();
  DeviceGuard guard(device("cpu"));
  Linear lin(5, 7);
  lin.load_state_dict(state_of("linear"));
  EXPECT_LT(nerr(lin(Variable(torch_out("linear:x"))).value(), torch_out("linear:y")), kTol);

  Conv2d conv(4, 6, 3, 2, 2, 2, 2);
  conv.load_state_dict(state_of("conv"));
  EXPECT_LT(nerr(conv(Variable(torch_out("conv:x"))).value(), torch_out("conv:y")), kTol);

  LayerNorm ln(Shape{4, 6});
  ln.load_state_dict(state_of("ln"));
  EXPECT_LT(nerr(ln(Variable(torch_out("ln:x"))).value(), torch_out("ln:y")), kTol);

  Embedding emb(10, 4, 2);
  emb.load_state_dict(state_of("emb"));
  EXPECT_LT(nerr(emb.forward(torch_out("emb:idx")).value(), torch_out("emb:y")), kTol);
}

TEST(ModulesTorch, BatchNormTrainsAndEvaluatesAsTorch) {
  REQUIRE_TORCH();
  DeviceGuard guard(device("cpu"));
  BatchNorm2d bn(3);
  bn.load_state_dict(state_of("bn"));
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{5});
  EXPECT_LT(nerr(bn(Variable(torch_out("bn:x"))).value(), torch_out("bn:y_train")), kTol);
  EXPECT_LT(nerr(bn.running_mean(), torch_out("bn:mean_after")), kTol);
  EXPECT_LT(nerr(bn.running_var(), torch_out("bn:var_after")), kTol);
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(),
            torch_out("bn:count_after").to_vector<std::int64_t>());
  bn.eval();
  EXPECT_LT(nerr(bn(Variable(torch_out("bn:x2"))).value(), torch_out("bn:y_eval")), kTol);
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{6});
}

TEST(ModulesTorch, MultiheadAttentionSelfCausalAndCrossAsTorch) {
  REQUIRE_TORCH();
  DeviceGuard guard(device("cpu"));
  for (const bool batch_first : {true, false}) {
    const std::string c = batch_first ? "mha" : "mha_seq";
    MultiheadAttention mha(8, 2, 0.0, true, batch_first);
    mha.load_state_dict(state_of(c));
    const Variable x(torch_out(c + ":x")), kv(torch_out(c + ":kv"));
    EXPECT_LT(nerr(mha(x).value(), torch_out(c + ":y_self")), kTol) << c;
    EXPECT_LT(nerr(mha.forward(x, x, x, Tensor(), true).value(), torch_out(c + ":y_causal")), kTol)
        << c;
    EXPECT_LT(
        nerr(mha.forward(x, x, x, torch_out(c + ":causal")).value(), torch_out(c + ":y_causal")),
        kTol)
        << c;
    EXPECT_LT(nerr(mha.forward(x, kv, kv).value(), torch_out(c + ":y_cross")), kTol) << c;
  }
}

TEST(ModulesTorch, CausalSelfAttentionAsNanoGpt) {
  REQUIRE_TORCH();
  DeviceGuard guard(device("cpu"));
  CausalSelfAttention csa(12, 3);
  std::vector<std::string> keys;
  for (const auto& [k, t] : csa.state_dict()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"c_attn.weight", "c_attn.bias", "c_proj.weight",
                                            "c_proj.bias"}));
  csa.load_state_dict(state_of("csa"));
  EXPECT_LT(nerr(csa(Variable(torch_out("csa:x"))).value(), torch_out("csa:y")), kTol);
}
