// The conformance suite's cases: each runs on one device and checks it against float64
// references (test_ops.cpp: every op) or finite differences (test_grad.cpp: every gradient).
// main.cpp registers every case for every device found.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/device.h"
#include "tessera/op.h"
#include "tessera/tensor.h"

namespace tessera::conformance {

struct Case {
  std::string name;
  OpId op;  // skipped, with the reason, on a device without a kernel for it
  std::function<void(Device&)> run;
};

std::vector<Case> op_cases();
std::vector<Case> grad_cases();

// --- tensor API: casts, factories, indexing ---
std::vector<Case> tensor_cases();       // test_tensor.cpp
std::vector<Case> tensor_grad_cases();  // test_tensor_grad.cpp
std::vector<Case> half_cases();         // test_half.cpp: f16, bf16

// --- element-wise math, comparisons, selection ---
// test_pointwise.cpp (values) and test_grad_pointwise.cpp (gradients).
std::vector<Case> pointwise_cases();
std::vector<Case> pointwise_grad_cases();

// --- reductions, normalisation, losses, optimizers ---
std::vector<Case> reduce_op_cases();    // test_reduce.cpp
std::vector<Case> reduce_grad_cases();  // test_reduce_grad.cpp

// --- nn: batched matmul, embedding, pooling, attention ---

// attention
std::vector<Case> attention_op_cases();
std::vector<Case> attention_grad_cases();
std::vector<Case> nn_op_cases();    // test_nn.cpp
std::vector<Case> nn_grad_cases();  // test_nn.cpp

// Fresh random inputs on every run (the seed is printed by main.cpp for reproduction).
std::mt19937& rng();

using Vec = std::vector<float>;
using Ref = std::vector<double>;  // float64 references

// ||out - ref|| / ||ref||, with ||ref||^2 floored at 1e-30 so that an all-zero reference still
// compares. The sizes must match (callers assert it).
inline double normalised_error(const Vec& out, const Ref& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// A tensor on |d| holding |v|.
inline Tensor on(Device& d, const Vec& v, const Shape& s) {
  return Tensor::from(v, s, &d);
}

// Expects |out| (a device's values) within normalised error |tol| of |ref|, the error finite.
inline void expect_close(const Vec& out, const Ref& ref, double tol = 1e-5) {
  ASSERT_EQ(out.size(), ref.size());
  const double err = normalised_error(out, ref);
  EXPECT_LT(err, tol) << "normalised error " << err;
  EXPECT_TRUE(std::isfinite(err));
}

inline Vec randn(std::int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng());
  return v;
}

inline Vec uniform(std::int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng());
  return v;
}

inline std::vector<std::int32_t> labels(std::int64_t n, int classes) {
  std::uniform_int_distribution<int> d(0, classes - 1);
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng());
  return v;
}

}  // namespace tessera::conformance
