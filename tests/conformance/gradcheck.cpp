#include "gradcheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/tessera.h"

namespace tessera::conformance {

namespace tt = tessera::train;

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

Vec separated(std::int64_t n, float gap, float shift) {
  Vec v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  std::shuffle(v.begin(), v.end(), rng());
  const float mid = static_cast<float>(n) / 2;
  for (float& x : v) x = (x - mid + 0.5f) * gap + shift;
  return v;
}

void gradcheck(Device& d, const std::vector<GradInput>& inputs, const GradFn& f, double eps,
               double tol) {
  DeviceGuard guard(d);
  auto make = [&](const std::vector<Vec>& values, bool grad) {
    std::vector<tt::Variable> vars;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      vars.emplace_back(Tensor::from(values[i], inputs[i].shape, &d), grad);
    return vars;
  };
  std::vector<Vec> x;
  for (const GradInput& in : inputs) x.push_back(in.values);

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

}  // namespace tessera::conformance
