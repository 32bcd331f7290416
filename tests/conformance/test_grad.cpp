// Gradient checks: every differentiable op's backward rule (train/autograd) against central
// finite differences, on every device. For L = <f(x), w> with random w and a random direction v,
// <dL/dx, v> must match (L(x + eps v) - L(x - eps v)) / (2 eps).
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

Case unary(const std::string& name, OpId op, tt::Variable (*fn)(const tt::Variable&), float lo,
           float hi) {
  return {"grad_" + name, op, [=](Device& d) {
            gradcheck(d, {{{4, 9}, uniform(36, lo, hi)}}, [fn](auto& v) { return fn(v[0]); });
          }};
}

}  // namespace

std::vector<Case> tessera::conformance::grad_cases() {
  std::vector<Case> c;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    c.push_back({fmt::format("grad_matmul_{}{}", ta ? "T" : "N", tb ? "T" : "N"), OpId::matmul,
                 [=](Device& d) {
                   const std::int64_t m = 5, n = 7, k = 6;
                   gradcheck(d,
                             {{ta ? Shape{k, m} : Shape{m, k}, randn(m * k)},
                              {tb ? Shape{n, k} : Shape{k, n}, randn(n * k)}},
                             [=](auto& v) { return tt::matmul(v[0], v[1], ta, tb); });
                 }});
  }
  using Binary = tt::Variable (*)(const tt::Variable&, const tt::Variable&);
  const std::pair<const char*, std::pair<OpId, Binary>> binaries[] = {
      {"add", {OpId::add, &tt::add}},
      {"sub", {OpId::sub, &tt::sub}},
      {"mul", {OpId::mul, &tt::mul}},
      {"div", {OpId::div, &tt::div}}};
  for (const auto& [name, op_fn] : binaries) {
    const auto [op, fn] = op_fn;
    // Same shapes, then b broadcast along rows ([3,5] with [1,5]) and as a vector ([5]).
    for (const Shape& bs : {Shape{3, 5}, Shape{1, 5}, Shape{5}}) {
      c.push_back({fmt::format("grad_{}_{}", name, bs.str()), op, [=, fn = fn](Device& d) {
                     // Denominators kept away from zero for div.
                     gradcheck(d, {{{3, 5}, randn(15)}, {bs, uniform(bs.numel(), 0.5f, 2.0f)}},
                               [fn](auto& v) { return fn(v[0], v[1]); });
                   }});
    }
  }
  c.push_back(
      {"grad_add_scalar", OpId::add_scalar, [](Device& d) {
         gradcheck(d, {{{17}, randn(17)}}, [](auto& v) { return tt::add_scalar(v[0], 0.7); });
       }});
  c.push_back(
      {"grad_mul_scalar", OpId::mul_scalar, [](Device& d) {
         gradcheck(d, {{{17}, randn(17)}}, [](auto& v) { return tt::mul_scalar(v[0], -1.3); });
       }});
  c.push_back(
      {"grad_relu", OpId::relu, [](Device& d) {
         // Spaced 0.1 apart around zero: no element near the kink.
         gradcheck(d, {{{4, 9}, separated(36, 0.1f)}}, [](auto& v) { return tt::relu(v[0]); });
       }});
  c.push_back(unary("exp", OpId::exp, &tt::exp, -2, 2));
  c.push_back(unary("log", OpId::log, &tt::log, 0.5f, 3));
  c.push_back(unary("tanh", OpId::tanh, &tt::tanh, -2, 2));
  c.push_back(unary("sigmoid", OpId::sigmoid, &tt::sigmoid, -3, 3));
  for (int axis : {0, 1, 2}) {
    for (bool keepdim : {false, true}) {
      c.push_back({fmt::format("grad_sum_axis{}{}", axis, keepdim ? "_keepdim" : ""), OpId::sum,
                   [=](Device& d) {
                     gradcheck(d, {{{3, 4, 5}, randn(60)}},
                               [=](auto& v) { return tt::sum(v[0], axis, keepdim); });
                   }});
      c.push_back({fmt::format("grad_mean_axis{}{}", axis, keepdim ? "_keepdim" : ""), OpId::mean,
                   [=](Device& d) {
                     gradcheck(d, {{{3, 4, 5}, randn(60)}},
                               [=](auto& v) { return tt::mean(v[0], axis, keepdim); });
                   }});
    }
    c.push_back({fmt::format("grad_max_axis{}", axis), OpId::max, [=](Device& d) {
                   gradcheck(d, {{{3, 4, 5}, separated(60, 0.05f)}},
                             [=](auto& v) { return tt::max(v[0], axis); });
                 }});
    c.push_back(
        {fmt::format("grad_softmax_axis{}", axis), OpId::softmax, [=](Device& d) {
           gradcheck(d, {{{3, 4, 5}, randn(60)}}, [=](auto& v) { return tt::softmax(v[0], axis); });
         }});
    c.push_back({fmt::format("grad_log_softmax_axis{}", axis), OpId::log_softmax, [=](Device& d) {
                   gradcheck(d, {{{3, 4, 5}, randn(60)}},
                             [=](auto& v) { return tt::log_softmax(v[0], axis); });
                 }});
  }
  c.push_back({"grad_cross_entropy", OpId::cross_entropy, [](Device& d) {
                 const Tensor y = Tensor::from<std::int32_t>(labels(6, 10), {6}, &d);
                 gradcheck(d, {{{6, 10}, randn(60, 2.0f)}},
                           [y](auto& v) { return tt::cross_entropy(v[0], y); });
               }});
  c.push_back({"grad_conv2d", OpId::conv2d, [](Device& d) {
                 const Conv2dAttrs a{2, 1, 1, 0};
                 gradcheck(d, {{{2, 3, 7, 6}, randn(252)}, {{4, 3, 3, 2}, randn(72)}},
                           [a](auto& v) { return tt::conv2d(v[0], v[1], a); });
               }});
  c.push_back({"grad_max_pool2d", OpId::max_pool2d, [](Device& d) {
                 gradcheck(d, {{{2, 3, 6, 8}, separated(288, 0.05f)}}, [](auto& v) {
                   return tt::max_pool2d(v[0], Pool2dAttrs{2, 2, 2, 2});
                 });
               }});
  c.push_back({"grad_copy_transposed", OpId::copy, [](Device& d) {
                 gradcheck(d, {{{4, 6}, randn(24)}}, [](auto& v) {
                   // A transposed view made contiguous, then reshaped: gradients flow back
                   // through reshape, copy and transpose.
                   return tt::reshape(tt::copy(tt::transpose(v[0], 0, 1)), {24});
                 });
               }});
  c.push_back({"grad_linear", OpId::addmm, [](Device& d) {
                 gradcheck(d, {{{5, 8}, randn(40)}, {{3, 8}, randn(24)}, {{3}, randn(3)}},
                           [](auto& v) { return tt::linear(v[0], v[1], v[2]); });
               }});
  c.push_back({"grad_dropout", OpId::dropout, [](Device& d) {
                 const std::uint64_t seed = rng()();
                 gradcheck(d, {{{6, 7}, randn(42)}},
                           [seed](auto& v) { return tt::dropout(v[0], 0.3f, seed); });
               }});
  return c;
}
