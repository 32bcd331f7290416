// Writable gradients (Variable::set_grad, mutable_grad) and gradient clipping against
// torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (PyTorch 1.13) on every device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/tessera.h"
#include "tessera/train/train.h"
#include "torch_peer.h"

using namespace tessera;
using namespace tessera::train;
using nlohmann::json;

namespace {

Device& cpu() {
  return tessera::device("cpu");
}

std::vector<float> random_values(std::int64_t n, std::uint64_t seed, float scale = 1) {
  Generator g(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = scale * g.normal();
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Variable, SetGradChecksShapeDtypeDeviceAndLeaf) {
  Variable x(Tensor::from(random_values(6, 1), {2, 3}, &cpu()), true);
  const Tensor g = Tensor::from(random_values(6, 2), {2, 3}, &cpu());
  x.set_grad(g);
  EXPECT_EQ(x.grad().to_vector<float>(), g.to_vector<float>());
  EXPECT_NE(error_of([&] {
              x.set_grad(Tensor::full({3, 2}, 0.0, DType::f32, &cpu()));
            }).find("set_grad: gradient shape [3,2] differs from the value's [2,3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              x.set_grad(Tensor::full({2, 3}, 0.0, DType::i32, &cpu()));
            }).find("gradient dtype i32 differs from the value's f32"),
            std::string::npos);
  for (Device* d : tessera::devices()) {
    if (d == &cpu()) continue;
    EXPECT_NE(error_of([&] {
                x.set_grad(Tensor::full({2, 3}, 0.0, DType::f32, d));
              }).find(fmt::format("gradient on {} but the value is on cpu:0", d->id())),
              std::string::npos);
  }
  Variable y = mul_scalar(x, 2.0);
  EXPECT_NE(error_of([&] { y.set_grad(g); }).find("set_grad: only a leaf"), std::string::npos);
  EXPECT_NE(error_of([&] { y.mutable_grad(); }).find("mutable_grad: only a leaf"),
            std::string::npos);
  EXPECT_EQ(x.grad().to_vector<float>(), g.to_vector<float>());  // unchanged by the errors
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Variable, MutableGradIsTheGradientBackwardAccumulatesInto) {
  Variable x(Tensor::from(random_values(4, 1), {4}, &cpu()), true);
  EXPECT_FALSE(x.mutable_grad().defined());
  x.mutable_grad() = Tensor::full({4}, 1.0, DType::f32, &cpu());
  sum(mul_scalar(x, 3.0), 0).backward();  // adds 3 to the gradient written above
  EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(4, 4.0f));
  Variable copy = x;  // copies share the gradient
  fill_(copy.mutable_grad(), 0.5);
  EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(4, 0.5f));
}

namespace {

// Each case clips the gradients of three parameters (the third without one); prints the total
// norm and the clipped gradients.
const char* kPeer = R"PY(
import json, sys
import torch
cases = json.load(open(sys.argv[1]))
out = {}
for c in cases:
    ps = [torch.nn.Parameter(torch.zeros(len(g))) for g in c["grads"]] + \
         [torch.nn.Parameter(torch.zeros(3))]
    for p, g in zip(ps, c["grads"]):
        p.grad = torch.tensor(g, dtype=torch.float32)
    if c["kind"] == "norm":
        norm = float(torch.nn.utils.clip_grad_norm_(ps, c["max_norm"], float(c["norm_type"])))
    else:
        torch.nn.utils.clip_grad_value_(ps, c["clip_value"])
        norm = 0.0
    out[c["name"]] = {"norm": norm, "grads": [p.grad.tolist() for p in ps[:-1]]}
print(json.dumps(out))
)PY";

struct ClipCase {
  std::string name, kind;
  double limit, norm_type;
};

const std::vector<ClipCase> kClipCases{
    {"norm2", "norm", 1.0, 2.0},         {"norm2_unclipped", "norm", 1e3, 2.0},
    {"norm_inf", "norm", 0.5, INFINITY}, {"norm_1_5", "norm", 2.0, 1.5},
    {"value", "value", 0.3, 0},
};

std::vector<float> clip_grad(int i) {
  return random_values(i == 0 ? 50 : 17, 300 + i, 2.0f);
}

const json& peer() {
  static const json result = [] {
    json input = json::array();
    for (const ClipCase& c : kClipCases) {
      json j{{"name", c.name}, {"kind", c.kind}, {"grads", {clip_grad(0), clip_grad(1)}}};
      if (c.kind == "norm") {
        j["max_norm"] = c.limit;
        j["norm_type"] = std::isinf(c.norm_type) ? json("inf") : json(c.norm_type);
      } else {
        j["clip_value"] = c.limit;
      }
      input.push_back(j);
    }
    // JSON has no inf: the peer reads "inf" with Python's float().
    return torch_peer::run_torch(kPeer, input);
  }();
  return result;
}

double normalised_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST(ClipGrad, EqualsTorchNnUtilsOnEveryDevice) {
  TESSERA_REQUIRE_TORCH();
  for (Device* d : tessera::devices()) {
    for (const ClipCase& c : kClipCases) {
      SCOPED_TRACE(d->id() + " " + c.name);
      Variable a(Tensor::full({50}, 0.0, DType::f32, d), true);
      Variable b(Tensor::full({17}, 0.0, DType::f32, d), true);
      Variable none(Tensor::full({3}, 0.0, DType::f32, d), true);  // no gradient: skipped
      a.set_grad(Tensor::from(clip_grad(0), {50}, d));
      b.set_grad(Tensor::from(clip_grad(1), {17}, d));
      const Tensor held = a.grad();
      const auto unclipped = held.to_vector<float>();
      const json& want = peer().at(c.name);
      if (c.kind == "norm") {
        const std::vector<NamedParameter> params{{"a", &a}, {"b", &b}, {"none", &none}};
        const Tensor norm = clip_grad_norm_(params, c.limit, c.norm_type);
        EXPECT_EQ(norm.shape().rank(), 0);
        EXPECT_EQ(&norm.device(), d);
        const double n = want["norm"].get<double>();
        EXPECT_NEAR(norm.item(), n, 1e-5 * n);
      } else {
        clip_grad_value_(std::vector<Variable>{a, b, none}, c.limit);
      }
      EXPECT_LT(normalised_error(a.grad().to_vector<float>(), want["grads"][0]), 1e-5);
      EXPECT_LT(normalised_error(b.grad().to_vector<float>(), want["grads"][1]), 1e-5);
      EXPECT_EQ(held.to_vector<float>(), unclipped);  // replaced, not written in place
      EXPECT_FALSE(none.grad().defined());
    }
  }
}

TEST(ClipGrad, ClipsAGradientSharedWithAnotherLeafOnce) {
  // backward() of a + b gives both leaves one gradient tensor: each is clipped once.
  Variable a(Tensor::full({4}, 0.0, DType::f32, &cpu()), true);
  Variable b(Tensor::full({4}, 0.0, DType::f32, &cpu()), true);
  add(a, b).backward(Tensor::full({4}, 2.0, DType::f32, &cpu()));
  const Tensor norm = clip_grad_norm_(std::vector<Variable>{a, b}, 1.0);
  EXPECT_NEAR(norm.item(), std::sqrt(32.0), 1e-5);
  const float scaled = static_cast<float>(2.0 / (std::sqrt(32.0) + 1e-6));
  for (const Variable& v : {a, b})
    for (float g : v.grad().to_vector<float>()) EXPECT_NEAR(g, scaled, 1e-6);
  clip_grad_value_(std::vector<Variable>{a}, 0.1);
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(4, 0.1f));
  for (float g : b.grad().to_vector<float>()) EXPECT_NEAR(g, scaled, 1e-6);
}

TEST(ClipGrad, NoGradientsGiveAZeroNormAndBadArgumentsThrow) {
  Variable x(Tensor::full({3}, 1.0, DType::f32, &cpu()), true);
  const Tensor zero = clip_grad_norm_(std::vector<Variable>{x}, 1.0);
  EXPECT_EQ(zero.item(), 0.0f);
  EXPECT_EQ(&zero.device(), &cpu());
  x.set_grad(Tensor::full({3}, 1.0, DType::f32, &cpu()));
  EXPECT_NE(
      error_of([&] { clip_grad_norm_(std::vector<Variable>{x}, -1.0); }).find("max_norm is -1"),
      std::string::npos);
  EXPECT_NE(
      error_of([&] { clip_grad_norm_(std::vector<Variable>{x}, 1.0, 0.0); }).find("norm_type is 0"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              clip_grad_norm_(std::vector<Variable>{x}, 1.0, -INFINITY);
            }).find("norm_type is -inf"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              clip_grad_value_(std::vector<Variable>{x}, -0.1);
            }).find("clip_value is -0.1"),
            std::string::npos);
  EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(3, 1.0f));
  // A non-finite norm: an error with error_if_nonfinite (nothing scaled), else scaled by it.
  x.set_grad(Tensor::from(std::vector<float>{1.0f, NAN, 2.0f}, {3}, &cpu()));
  EXPECT_NE(error_of([&] {
              clip_grad_norm_(std::vector<Variable>{x}, 1.0, 2.0, true);
            }).find("The total norm of order 2 for gradients from `parameters` is non-finite"),
            std::string::npos);
  EXPECT_EQ(x.grad().to_vector<float>()[0], 1.0f);
  EXPECT_TRUE(std::isnan(clip_grad_norm_(std::vector<Variable>{x}, 1.0).item()));
}
