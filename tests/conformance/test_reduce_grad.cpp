// Gradient checks of the reductions, normalisation and losses group: each backward rule
// (train/src/autograd_reduce.cpp) against central finite differences, on every device (the
// method of test_grad.cpp).
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
