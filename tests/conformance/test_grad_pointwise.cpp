// Gradient checks of the element-wise math and selection ops (train/src/autograd_pointwise.cpp)
// against central finite differences on every device, as test_grad.cpp does for the older ops:
// for L = <f(x), w>, <dL/dx, v> must match (L(x + eps v) - L(x - eps v)) / (2 eps). Inputs of
// abs, clamp, minimum and maximum stay away from their kinks; ties of minimum/maximum (half the
// gradient to each operand) are checked directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "cases.h"
#include "gradcheck.h"
#include "tessera/tessera.h"
#include "tessera/train/autograd.h"

using namespace tessera;
using namespace tessera::conformance;
namespace tt = tessera::train;

namespace {

using Input = GradInput;

using Fn = GradFn;

Case unary(const std::string& name, OpId op, std::function<tt::Variable(const tt::Variable&)> fn,
           std::function<Vec(std::int64_t)> values) {
  return {"grad_" + name, op, [=](Device& d) {
            gradcheck(d, {{{4, 9}, values(36)}}, [fn](auto& v) { return fn(v[0]); });
          }};
}

Tensor mask_on(Device& d, std::int64_t n, const Shape& s) {
  std::bernoulli_distribution coin(0.5);
  std::vector<std::uint8_t> m(static_cast<std::size_t>(n));
  for (auto& b : m) b = coin(rng()) ? 1 : 0;
  return Tensor::from_bytes(m.data(), m.size(), s, DType::boolean, &d);
}

}  // namespace

std::vector<Case> tessera::conformance::pointwise_grad_cases() {
  std::vector<Case> c;
  auto range = [](float lo, float hi) {
    return [=](std::int64_t n) { return uniform(n, lo, hi); };
  };
  auto normal = [](float scale) { return [=](std::int64_t n) { return randn(n, scale); }; };
  // Spaced 0.1 apart around zero: no element near the kinks at 0 and at the bounds below.
  auto spaced = [](std::int64_t n) { return separated(n, 0.1f); };

  c.push_back(unary(
      "neg", OpId::neg, [](auto& x) { return tt::neg(x); }, normal(1)));
  c.push_back(unary(
      "abs", OpId::abs, [](auto& x) { return tt::abs(x); }, spaced));
  c.push_back(unary(
      "sqrt", OpId::sqrt, [](auto& x) { return tt::sqrt(x); }, range(0.5f, 3)));
  c.push_back(unary(
      "rsqrt", OpId::rsqrt, [](auto& x) { return tt::rsqrt(x); }, range(0.5f, 3)));
  for (const double p : {2.0, 3.0, 0.5, -1.5, 2.5, 0.0}) {
    std::string name = fmt::format("pow_{}", p);
    std::replace(name.begin(), name.end(), '-', 'm');
    std::replace(name.begin(), name.end(), '.', 'p');
    c.push_back(unary(
        name, OpId::pow, [p](auto& x) { return tt::pow(x, p); }, range(0.5f, 2)));
  }
  c.push_back(unary(
      "pow_3_negative", OpId::pow, [](auto& x) { return tt::pow(x, 3.0); }, range(-2, -0.5f)));
  // Bounds halfway between the grid points (odd multiples of 0.05).
  c.push_back(unary(
      "clamp", OpId::clamp, [](auto& x) { return tt::clamp(x, -0.6, 0.8); }, spaced));
  c.push_back(unary(
      "clamp_min", OpId::clamp, [](auto& x) { return tt::clamp(x, -0.4); }, spaced));
  c.push_back(unary(
      "clamp_max", OpId::clamp, [](auto& x) { return tt::clamp(x, std::nullopt, 0.2); }, spaced));
  c.push_back(unary(
      "gelu", OpId::gelu, [](auto& x) { return tt::gelu(x); }, normal(2)));
  c.push_back(unary(
      "gelu_tanh", OpId::gelu, [](auto& x) { return tt::gelu(x, "tanh"); }, normal(2)));
  c.push_back(unary(
      "silu", OpId::silu, [](auto& x) { return tt::silu(x); }, normal(2)));
  c.push_back(unary(
      "erf", OpId::erf, [](auto& x) { return tt::erf(x); }, range(-2, 2)));

  for (const bool smaller : {true, false}) {
    const char* name = smaller ? "minimum" : "maximum";
    const OpId op = smaller ? OpId::minimum : OpId::maximum;
    for (const Shape& bs : {Shape{3, 5}, Shape{1, 5}, Shape{5}}) {
      c.push_back(
          {fmt::format("grad_{}_{}", name, bs.str()), op, [=](Device& d) {
             // a on the 0.1 grid, b on it shifted by 0.05: every pair at least 0.05 apart.
             gradcheck(d, {{{3, 5}, separated(15, 0.1f)}, {bs, separated(bs.numel(), 0.1f, 0.05f)}},
                       [smaller](auto& v) {
                         return smaller ? tt::minimum(v[0], v[1]) : tt::maximum(v[0], v[1]);
                       });
           }});
    }
    c.push_back({fmt::format("grad_{}_ties", name), op, [=](Device& d) {
                   // Equal operands: each gets half of the gradient, as in PyTorch.
                   const Vec x = randn(7), w = randn(7);
                   tt::Variable a(Tensor::from(x, {7}, &d), true),
                       b(Tensor::from(x, {7}, &d), true);
                   const tt::Variable y = smaller ? tt::minimum(a, b) : tt::maximum(a, b);
                   y.backward(Tensor::from(w, {7}, &d));
                   const Vec ga = a.grad().to_vector<float>(), gb = b.grad().to_vector<float>();
                   for (std::size_t i = 0; i < 7; ++i) {
                     EXPECT_EQ(ga[i], 0.5f * w[i]) << i;
                     EXPECT_EQ(gb[i], 0.5f * w[i]) << i;
                   }
                 }});
  }

  c.push_back({"grad_where", OpId::where, [](Device& d) {
                 // cond [3,1], a [3,5], b [5]: both gradients summed to their shapes.
                 const Tensor cond = mask_on(d, 3, {3, 1});
                 gradcheck(d, {{{3, 5}, randn(15)}, {{5}, randn(5)}},
                           [cond](auto& v) { return tt::where(cond, v[0], v[1]); });
               }});
  c.push_back({"grad_masked_fill", OpId::masked_fill, [](Device& d) {
                 // x [5] broadcast against mask [3,5].
                 const Tensor mask = mask_on(d, 15, {3, 5});
                 gradcheck(d, {{{5}, randn(5)}},
                           [mask](auto& v) { return tt::masked_fill(v[0], mask, 2.0); });
               }});
  return c;
}
