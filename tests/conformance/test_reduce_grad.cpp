// Gradient checks of the reductions, normalisation and losses group: each backward rule
// (train/src/autograd_reduce.cpp) against central finite differences, on every device (the
// method of test_grad.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "cases.h"
#include "tessera/tessera.h"
#include "tessera/train/autograd.h"

using namespace tessera;
using namespace tessera::conformance;
namespace tt = tessera::train;

namespace {

struct Input {
  Shape shape;
  Vec values;
};

using Fn = std::function<tt::Variable(const std::vector<tt::Variable>&)>;

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Values spaced at least |gap| apart in random order: no ties for max and max_pool2d, and no
// input within reach of relu's kink once shifted away from zero.
Vec separated(std::int64_t n, float gap) {
  Vec v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  std::shuffle(v.begin(), v.end(), rng());
  const float mid = static_cast<float>(n) / 2;
  for (float& x : v) x = (x - mid + 0.5f) * gap;
  return v;
}

void gradcheck(Device& d, const std::vector<Input>& inputs, const Fn& f, double eps = 1e-3,
               double tol = 1e-2) {
  DeviceGuard guard(d);
  auto make = [&](const std::vector<Vec>& values, bool grad) {
    std::vector<tt::Variable> vars;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      vars.emplace_back(Tensor::from(values[i], inputs[i].shape, &d), grad);
    return vars;
  };
  std::vector<Vec> x;
  for (const Input& in : inputs) x.push_back(in.values);

  std::vector<tt::Variable> leaves = make(x, true);
  const tt::Variable y = f(leaves);
  const Vec w = randn(y.value().numel());
  y.backward(Tensor::from(w, y.shape(), &d));

  auto loss = [&](const std::vector<Vec>& at) {
    tt::NoGradGuard no_grad;
    return dot(f(make(at, false)).value().to_vector<float>(), w);
  };
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(leaves[i].grad().defined()) << "input " << i << " got no gradient";
    ASSERT_EQ(leaves[i].grad().shape(), inputs[i].shape) << "input " << i;
    const Vec v = randn(inputs[i].shape.numel());
    const Vec g = leaves[i].grad().to_vector<float>();
    const double analytic = dot(g, v);
    std::vector<Vec> plus = x, minus = x;
    for (std::size_t k = 0; k < v.size(); ++k) {
      plus[i][k] += static_cast<float>(eps) * v[k];
      minus[i][k] -= static_cast<float>(eps) * v[k];
    }
    const double numeric = (loss(plus) - loss(minus)) / (2 * eps);
    // Relative to the typical size of <g, v> for a standard normal v, which is ||g||.
    const double scale =
        std::max({std::abs(analytic), std::abs(numeric), std::sqrt(dot(g, g)), 1e-6});
    const double err = std::abs(analytic - numeric) / scale;
    EXPECT_LT(err, tol) << "input " << i << ": analytic " << analytic << ", numeric " << numeric;
  }
}

Case grad_case(const std::string& name, OpId op, std::vector<Input> (*inputs)(), Fn f,
               double tol = 1e-2) {
  return {"grad_" + name, op, [=](Device& d) { gradcheck(d, inputs(), f, 1e-3, tol); }};
}

std::vector<Input> x3457() {
  return {{{3, 4, 5, 7}, randn(420)}};
}
std::vector<Input> x345() {
  return {{{3, 4, 5}, randn(60)}};
}
std::vector<Input> x345_separated() {
  return {{{3, 4, 5}, separated(60, 0.05f)}};
}
std::vector<Input> x345_positive() {
  return {{{3, 4, 5}, uniform(60, 0.5f, 1.5f)}};
}
std::vector<Input> ln_inputs() {
  return {{{6, 3, 5}, randn(90)}, {{3, 5}, randn(15)}, {{3, 5}, randn(15)}};
}
std::vector<Input> bn_inputs() {
  return {{{4, 3, 5}, randn(60)}, {{3}, randn(3)}, {{3}, randn(3)}};
}
std::vector<Input> logits_ntc() {
  return {{{2, 3, 5}, randn(30, 2.0f)}};
}
std::vector<Input> two_345() {
  return {{{3, 4, 5}, randn(60)}, {{3, 4, 5}, randn(60)}};
}

}  // namespace

std::vector<Case> tessera::conformance::reduce_grad_cases() {
  std::vector<Case> c;
  c.push_back(grad_case("sum_dims_0_2", OpId::sum, x3457, [](auto& v) {
    return tt::sum(v[0], std::vector<int>{0, 2});
  }));
  c.push_back(grad_case("sum_dims_1_2_keepdim", OpId::sum, x3457, [](auto& v) {
    return tt::sum(v[0], {1, 2}, true);
  }));
  c.push_back(grad_case("mean_dims_0_3", OpId::mean, x3457, [](auto& v) {
    return tt::mean(v[0], {0, 3});
  }));
  c.push_back(grad_case("mean_all", OpId::mean, x3457,
                        [](auto& v) { return tt::mean(v[0], std::vector<int>{}); }));
  for (int axis : {0, 1, 2}) {
    c.push_back({fmt::format("grad_min_axis{}", axis), OpId::min, [axis](Device& d) {
                   gradcheck(d, x345_separated(), [axis](auto& v) { return tt::min(v[0], axis); });
                 }});
    c.push_back({fmt::format("grad_prod_axis{}", axis), OpId::prod, [axis](Device& d) {
                   gradcheck(d, x345_positive(),
                             [axis](auto& v) { return tt::prod(v[0], axis, true); });
                 }});
    for (double corr : {1.0, 0.0}) {
      c.push_back({fmt::format("grad_var_axis{}_c{}", axis, corr), OpId::var, [=](Device& d) {
                     gradcheck(d, x345(), [=](auto& v) { return tt::var(v[0], axis, corr); });
                   }});
      c.push_back({fmt::format("grad_std_axis{}_c{}", axis, corr), OpId::std, [=](Device& d) {
                     gradcheck(d, x345(), [=](auto& v) { return tt::std(v[0], axis, corr, true); });
                   }});
    }
  }
  c.push_back(grad_case("layer_norm", OpId::layer_norm, ln_inputs, [](auto& v) {
    return tt::layer_norm(v[0], {3, 5}, v[1], v[2], 1e-5);
  }));
  c.push_back(grad_case("layer_norm_plain", OpId::layer_norm, x345, [](auto& v) {
    return tt::layer_norm(v[0], {5}, tt::Variable(), tt::Variable(), 1e-5);
  }));
  c.push_back(grad_case("batch_norm_train", OpId::batch_norm, bn_inputs, [](auto& v) {
    return tt::batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true);
  }));
  c.push_back({"grad_batch_norm_eval", OpId::batch_norm, [](Device& d) {
                 const Tensor rm = Tensor::from(randn(3), {3}, &d);
                 const Tensor rv = Tensor::from(uniform(3, 0.5f, 2.0f), {3}, &d);
                 gradcheck(d, bn_inputs(), [rm, rv](auto& v) {
                   return tt::batch_norm(v[0], v[1], v[2], rm, rv, false);
                 });
               }});
  c.push_back({"grad_cross_entropy_ntc_smooth_ignore", OpId::cross_entropy, [](Device& d) {
                 const std::vector<std::int64_t> l = {0, 4, -100, 2, 1, -100};
                 const Tensor y = Tensor::from<std::int64_t>(l, {2, 3}, &d);
                 gradcheck(d, logits_ntc(), [y](auto& v) {
                   return tt::cross_entropy(v[0], y, CrossEntropyAttrs{-100, 0.1f});
                 });
               }});
  for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum})
    c.push_back(
        {fmt::format("grad_mse_loss_{}", static_cast<int>(red)), OpId::mse_loss, [red](Device& d) {
           gradcheck(d, two_345(), [red](auto& v) { return tt::mse_loss(v[0], v[1], red); });
         }});
  return c;
}
