// The Module base (registration, traversal, state_dict, load_state_dict, train/eval, to,
// zero_grad, printing), the containers, layer construction and weights-only files, on cpu:0 (and
// vulkan:0 / opencl:0 for to()).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

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

Tensor randn(const Shape& s, std::uint64_t seed, Device* d = nullptr) {
  Generator g(seed);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (float& x : v) x = g.normal();
  return Tensor::from(v, s, d ? d : &cpu());
}

std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no exception)";
}

// A user module written LibTorch-style: no train() or parameter-listing override.
struct ResBlock : Module {
  explicit ResBlock(std::int64_t c) {
    body = register_module("body", std::make_shared<Sequential>());
    body->emplace<Conv2d>(c, c, 3, 1, 1).emplace<BatchNorm2d>(c).emplace<ReLU>();
    extra = register_module("extra", std::make_shared<ModuleList>());
    extra->emplace_back<Dropout>(0.5f);
    gain = register_parameter("gain", Tensor::full({c}, 1.0));
    seen = &register_buffer("seen", Tensor::full({}, 0.0, DType::i64));
  }
  Variable forward(const Variable& x) override {
    Variable y = (*body)(x);
    return (*extra)[0](mul(y, reshape(gain, Shape{1, gain.shape()[0], 1, 1})));
  }
  std::shared_ptr<Sequential> body;
  std::shared_ptr<ModuleList> extra;
  Variable gain;
  Tensor* seen;
};

std::vector<std::string> keys(const StateDict& s) {
  std::vector<std::string> out;
  for (const auto& [k, t] : s) out.push_back(k);
  return out;
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("tessera-modules-{}-{}", ::getpid(), name);
}

}  // namespace

TEST(Modules, RegistrationRulesAndErrors) {
  DeviceGuard guard(cpu());
  Module m;
  Variable& w = m.register_parameter("w", Tensor::full({2}, 1.0));
  m.register_buffer("b", Tensor::full({2}, 0.0));
  m.register_module("child", std::make_shared<ReLU>());
  for (const char* bad : {"", "a.b"})
    EXPECT_NE(message([&] {
                m.register_parameter(bad, Tensor::full({1}, 0.0));
              }).find("must be non-empty and must not contain '.'"),
              std::string::npos);
  EXPECT_EQ(message([&] { m.register_buffer("w", Tensor::full({1}, 0.0)); }),
            "Module.register_buffer: 'w' is already registered as a parameter");
  EXPECT_EQ(message([&] { m.register_module("b", std::make_shared<ReLU>()); }),
            "Module.register_module: 'b' is already registered as a buffer");
  EXPECT_EQ(message([&] { m.register_parameter("child", Tensor::full({1}, 0.0)); }),
            "Module.register_parameter: 'child' is already registered as a module");
  EXPECT_THROW(m.register_module("null", std::shared_ptr<Module>()), InvalidArgument);
  // Stable references: many more registrations later, the first one is the same object.
  for (int i = 0; i < 100; ++i) m.register_parameter(fmt::format("p{}", i), Tensor::full({1}, 0.0));
  EXPECT_EQ(&w, m.named_parameters().front().variable);
  EXPECT_TRUE(w.requires_grad());
  // A None parameter or buffer is listed nowhere.
  Module n;
  n.register_parameter("none", Tensor());
  n.register_buffer("none_buf", Tensor());
  EXPECT_TRUE(n.state_dict().empty());
  EXPECT_EQ(message([&] { ModuleList().forward(Variable(Tensor::full({1}, 0.0))); }),
            "ModuleList has no forward(Variable); call its own forward");
}

TEST(Modules, OrderNamesChildrenAndTiedParametersAsTorch) {
  DeviceGuard guard(cpu());
  ResBlock b(2);
  EXPECT_EQ(keys(b.state_dict()),
            (std::vector<std::string>{"gain", "seen", "body.0.weight", "body.0.bias",
                                      "body.1.weight", "body.1.bias", "body.1.running_mean",
                                      "body.1.running_var", "body.1.num_batches_tracked"}));
  std::vector<std::string> mods;
  for (const auto& [n, m] : b.named_modules()) mods.push_back(n + "=" + m->name());
  EXPECT_EQ(mods, (std::vector<std::string>{"=ResBlock", "body=Sequential", "body.0=Conv2d",
                                            "body.1=BatchNorm2d", "body.2=ReLU", "extra=ModuleList",
                                            "extra.0=Dropout"}));
  EXPECT_EQ(b.named_children().size(), 2u);
  EXPECT_EQ(b.named_parameters(false).size(), 1u);
  EXPECT_EQ(b.named_buffers().size(), 4u);
  EXPECT_EQ(b.num_parameters(), 2 + (2 * 2 * 9 + 2) + 2 + 2);

  // A weight shared by two modules: one parameter, two state_dict keys (nanoGPT's tied head).
  Module tied;
  auto emb = tied.register_module("wte", std::make_shared<Embedding>(5, 3));
  auto head = tied.register_module("lm_head", std::make_shared<Linear>(3, 5, false));
  head->weight = emb->weight;
  // (re-registering the head's parameter would be the LibTorch way; here the member is tied)
  Module tied2;
  Variable shared(Tensor::full({2}, 1.0), true);
  auto a = tied2.register_module("a", std::make_shared<Module>());
  auto c = tied2.register_module("c", std::make_shared<Module>());
  a->register_parameter("w", shared.value());
  Variable& aw = *a->named_parameters().front().variable;
  c->register_parameter("w", Tensor::full({2}, 2.0));
  *c->named_parameters().front().variable = aw;
  EXPECT_EQ(tied2.named_parameters().size(), 1u);
  EXPECT_EQ(keys(tied2.state_dict()), (std::vector<std::string>{"a.w", "c.w"}));
}

TEST(Modules, LoadStateDictListsEveryProblemAndChangesNothing) {
  DeviceGuard guard(cpu());
  Sequential s;
  s.emplace<Linear>(4, 3).emplace<BatchNorm2d>(3);
  const StateDict before = s.state_dict();
  std::vector<std::vector<float>> old;
  for (const auto& [k, t] : before) old.push_back(t.to(DType::f32).to_vector<float>());

  StateDict bad;
  bad.emplace_back("0.weight", randn({3, 5}, 1));                    // size
  bad.emplace_back("1.weight", randn({3}, 2));                       // fine
  bad.emplace_back("1.num_batches_tracked", Tensor::full({}, 3.0));  // dtype
  bad.emplace_back("2.weight", randn({3}, 3));                       // unexpected
  const std::string msg = message([&] { s.load_state_dict(bad); });
  EXPECT_EQ(msg,
            "Error(s) in loading state_dict for Sequential:\n"
            "\tMissing key(s) in state_dict: \"0.bias\", \"1.bias\", \"1.running_mean\", "
            "\"1.running_var\".\n"
            "\tUnexpected key(s) in state_dict: \"2.weight\".\n"
            "\tsize mismatch for 0.weight: copying a param with shape [3, 5] from checkpoint, the "
            "shape in current model is [3, 4].\n"
            "\tdtype mismatch for 1.num_batches_tracked: copying a param of dtype f32 from "
            "checkpoint, the dtype in current model is i64.");
  // Non-strict still refuses mismatched entries; a repeated key is refused too.
  EXPECT_NE(message([&] { s.load_state_dict(bad, false); }).find("size mismatch"),
            std::string::npos);
  StateDict twice{{"1.weight", randn({3}, 4)}, {"1.weight", randn({3}, 5)}};
  EXPECT_NE(message([&] {
              s.load_state_dict(twice, false);
            }).find("Repeated key(s) in state_dict: \"1.weight\"."),
            std::string::npos);
  std::size_t i = 0;
  for (const auto& [k, t] : s.state_dict())
    EXPECT_EQ(t.to(DType::f32).to_vector<float>(), old[i++]) << k;

  // Non-strict: loads what fits, reports the rest; the loaded value is a copy.
  Tensor w = randn({3}, 6);
  const IncompatibleKeys r = s.load_state_dict({{"1.weight", w}, {"extra", w}}, false);
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"extra"});
  EXPECT_EQ(r.missing_keys.size(), 6u);
  auto& bn = dynamic_cast<BatchNorm2d&>(s[1]);
  EXPECT_EQ(bn.weight.value().to_vector<float>(), w.to_vector<float>());
  EXPECT_FALSE(bn.weight.value().shares_storage(w));
  // Strict load of a full state dict: members holding the Variable see the values.
  Sequential t;
  t.emplace<Linear>(4, 3).emplace<BatchNorm2d>(3);
  const IncompatibleKeys ok = t.load_state_dict(s.state_dict());
  EXPECT_TRUE(ok.missing_keys.empty() && ok.unexpected_keys.empty());
  EXPECT_EQ(dynamic_cast<Linear&>(t[0]).weight.value().to_vector<float>(),
            dynamic_cast<Linear&>(s[0]).weight.value().to_vector<float>());
}

TEST(Modules, TrainEvalReachesEveryDescendantWithoutOverrides) {
  DeviceGuard guard(cpu());
  Module root;
  auto list = root.register_module("list", std::make_shared<ModuleList>());
  auto block = std::make_shared<ResBlock>(2);
  list->push_back(block);
  auto& drop = (*block->extra)[0];
  auto& bn = dynamic_cast<BatchNorm2d&>((*block->body)[1]);
  const Variable x(randn({2, 2, 4, 4}, 1));
  EXPECT_TRUE(drop.is_training());
  root.eval();
  for (Module* m : root.modules()) EXPECT_FALSE(m->is_training()) << m->name();
  set_dropout_step(1, 1);
  const auto a = root.named_modules().size();
  EXPECT_EQ(a, 9u);
  // Eval: Dropout is the identity and BatchNorm uses (and keeps) its running statistics.
  const auto y1 = (*block)(x).value().to_vector<float>();
  EXPECT_EQ((*block)(x).value().to_vector<float>(), y1);
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{0});
  root.train();
  for (Module* m : root.modules()) EXPECT_TRUE(m->is_training()) << m->name();
  (*block)(x);
  (*block)(x);
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{2});
  EXPECT_NE(bn.running_mean().to_vector<float>(), std::vector<float>(2, 0.0f));
}

TEST(Modules, ZeroGradToNoneOrZeros) {
  DeviceGuard guard(cpu());
  Linear lin(3, 2);
  sum(sum(lin(Variable(randn({4, 3}, 1))), 0), 0).backward();
  ASSERT_TRUE(lin.weight.grad().defined());
  lin.zero_grad(false);
  EXPECT_EQ(lin.weight.grad().to_vector<float>(), std::vector<float>(6, 0.0f));
  lin.zero_grad();
  EXPECT_FALSE(lin.weight.grad().defined());
}

TEST(Modules, ToMovesParametersAndBuffersInPlace) {
  Device* gpu = nullptr;
  for (Device* d : devices())
    if (d->id() == "vulkan:0" || d->id() == "opencl:0") gpu = d;
  if (!gpu) GTEST_SKIP() << "no vulkan:0 or opencl:0";
  DeviceGuard guard(cpu());
  ResBlock b(2);
  Variable gain = b.gain;  // a member copy sees the move
  auto& bn = dynamic_cast<BatchNorm2d&>((*b.body)[1]);
  b.to(*gpu);
  for (const auto& [k, t] : b.state_dict()) EXPECT_EQ(&t.device(), gpu) << k;
  EXPECT_EQ(&gain.value().device(), gpu);
  EXPECT_EQ(&b.seen->device(), gpu);
  EXPECT_EQ(&bn.running_var().device(), gpu);
  // Training on the device counts batches there.
  try {
    DeviceGuard on(*gpu);
    b(Variable(randn({2, 2, 4, 4}, 2, gpu)));
    EXPECT_EQ(&bn.num_batches_tracked().device(), gpu);
    EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{1});
  } catch (const UnsupportedOperation& e) {
    GTEST_LOG_(INFO) << gpu->id() << " can not run the block: " << e.what();
  }
  b.to(cpu());
  for (const auto& [k, t] : b.state_dict()) EXPECT_EQ(&t.device(), &cpu()) << k;
}

TEST(Modules, ContainersAndPrinting) {
  DeviceGuard guard(cpu());
  ModuleDict d;
  d.insert("a", std::make_shared<Tanh>());
  d.insert("b", std::make_shared<SiLU>());
  EXPECT_TRUE(d.contains("a"));
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(message([&] { d["c"]; }), "ModuleDict: no module 'c' (keys: a, b)");
  EXPECT_THROW(d.insert("a", std::make_shared<Identity>()), InvalidArgument);
  EXPECT_THROW(d.insert("x.y", std::make_shared<Identity>()), InvalidArgument);
  ModuleList l;
  l.emplace_back<Identity>();
  EXPECT_EQ(l.size(), 1u);
  EXPECT_THROW(l[1], std::out_of_range);
  Sequential s;
  s.emplace<Linear>(4, 3).push_back(std::make_shared<Identity>());
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(),
            "Sequential(\n  (0): Linear(in_features=4, out_features=3, bias=True)\n  (1): "
            "Identity()\n)");
  EXPECT_EQ(Sequential().describe(), "Sequential()");
  EXPECT_EQ(AvgPool2d(3, 2, 1).describe(), "AvgPool2d(kernel_size=3, stride=2, padding=1)");
  EXPECT_EQ(Conv2d(4, 6, 3, 1, 0, 1, 1, false).describe(),
            "Conv2d(4, 6, kernel_size=(3, 3), stride=(1, 1), bias=False)");
}

TEST(Modules, LayerArgumentErrors) {
  DeviceGuard guard(cpu());
  EXPECT_THROW(Conv2d(3, 4, 3, 1, 0, 1, 2), InvalidArgument);  // groups does not divide 3
  EXPECT_THROW(GELU("fast"), InvalidArgument);
  EXPECT_THROW(Embedding(5, 2, 5), InvalidArgument);
  EXPECT_THROW(MultiheadAttention(10, 3), InvalidArgument);
  EXPECT_THROW(CausalSelfAttention(10, 3), InvalidArgument);
  EXPECT_THROW(AvgPool2d(2, 2, 0, true), InvalidArgument);
  EXPECT_THROW(BatchNorm2d(0), InvalidArgument);
  EXPECT_THROW(LayerNorm(Shape{}), InvalidArgument);
  EXPECT_NE(message([&] {
              BatchNorm2d(3)(Variable(randn({2, 3, 4}, 1)));
            }).find("expects input [N, 3, H, W], got [2,3,4]"),
            std::string::npos);
  Linear lin(3, 2);
  EXPECT_THROW(lin(Variable(randn({4, 5}, 1))), InvalidArgument);
  EXPECT_EQ(lin(Variable(randn({3}, 1))).shape().str(), "[2]");
  EXPECT_EQ(lin(Variable(randn({2, 5, 4, 3}, 1))).shape().str(), "[2,5,4,2]");
  MultiheadAttention mha(4, 2, 0.0, true, true);
  const Variable x(randn({2, 3, 4}, 2));
  EXPECT_THROW(mha.forward(x, x, x, Tensor::full({3, 3}, 0.0), true), InvalidArgument);
  EXPECT_THROW(mha.forward(x, x, x, Tensor::full({2, 3}, 0.0)), InvalidArgument);
  EXPECT_THROW(mha.forward(x, x, x, Tensor::full({3, 3}, 0.0, DType::i32)), InvalidArgument);
  EXPECT_EQ(mha(Variable(randn({3, 4}, 3))).shape().str(), "[3,4]");  // unbatched
}

TEST(Modules, InitialisationFollowsTorchDefaults) {
  DeviceGuard guard(cpu());
  seed_everything(7);
  Linear a(16, 4);
  seed_everything(7);
  Linear b(16, 4);
  Generator g(7);
  Linear c(16, 4, g);
  EXPECT_EQ(a.weight.value().to_vector<float>(), b.weight.value().to_vector<float>());
  EXPECT_EQ(a.weight.value().to_vector<float>(), c.weight.value().to_vector<float>());
  for (float w : a.weight.value().to_vector<float>()) EXPECT_LE(std::abs(w), 0.25f);

  MultiheadAttention mha(8, 2);
  const float xavier = std::sqrt(6.0f / (8 + 24));
  for (float w : mha.in_proj_weight.value().to_vector<float>()) EXPECT_LE(std::abs(w), xavier);
  EXPECT_EQ(mha.in_proj_bias.value().to_vector<float>(), std::vector<float>(24, 0.0f));
  EXPECT_EQ(mha.out_proj->bias.value().to_vector<float>(), std::vector<float>(8, 0.0f));

  Embedding e(1000, 8, -1);
  const auto v = e.weight.value().to_vector<float>();
  double s2 = 0;
  for (float x : v) s2 += double(x) * x;
  EXPECT_NEAR(s2 / double(v.size() - 8), 1.0, 0.1);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v[999 * 8 + i], 0.0f);  // padding_idx -1 is row 999
  EXPECT_EQ(e.describe(), "Embedding(1000, 8, padding_idx=999)");
  BatchNorm2d bn(2);
  EXPECT_EQ(bn.running_var().to_vector<float>(), std::vector<float>(2, 1.0f));
  EXPECT_EQ(bn.num_batches_tracked().dtype(), DType::i64);
  EXPECT_EQ(bn.num_batches_tracked().rank(), 0);
}

TEST(Modules, WeightsOnlyFilesRoundTripWithBuffers) {
  DeviceGuard guard(cpu());
  const fs::path path = temp_file("weights.safetensors");
  seed_everything(1);
  ResBlock a(2);
  a.register_buffer("mask", Tensor::from_mask(std::vector<std::uint8_t>{1, 0, 1}, {3}));
  const Variable x(randn({2, 2, 4, 4}, 3));
  a(x);  // a training step: running statistics and the count move
  a.eval();
  save(a, path);

  seed_everything(2);
  ResBlock b(2);
  b.register_buffer("mask", Tensor::from_mask(std::vector<std::uint8_t>{0, 0, 0}, {3}));
  b.eval();
  EXPECT_NE(b(x).value().to_vector<float>(), a(x).value().to_vector<float>());
  const IncompatibleKeys r = load(b, path);
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_EQ(b(x).value().to_vector<float>(), a(x).value().to_vector<float>());
  const StateDict sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(keys(sa), keys(sb));
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].second.dtype(), sb[i].second.dtype()) << sa[i].first;
    EXPECT_EQ(sa[i].second.to(DType::f32).to_vector<float>(),
              sb[i].second.to(DType::f32).to_vector<float>())
        << sa[i].first;
  }
  const StateDict file = load_state_dict_file(path);
  EXPECT_EQ(keys(file), keys(sa));

  // Errors name the file (and the entries); the module is unchanged.
  Linear other(3, 3);
  const auto before = other.weight.value().to_vector<float>();
  const std::string msg = message([&] { load(other, path); });
  EXPECT_NE(msg.find(path.string() + ": Error(s) in loading state_dict for Linear"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("\"body.0.weight\""), std::string::npos);
  EXPECT_EQ(other.weight.value().to_vector<float>(), before);
  EXPECT_THROW(load(other, temp_file("missing.safetensors")), FileError);
  EXPECT_NE(message([&] { load(other, temp_file("missing.safetensors")); }).find("missing"),
            std::string::npos);
  fs::remove(path);
}
