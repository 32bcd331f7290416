// The conformance suite's cases: each runs on one device and checks it against float64
// references (test_ops.cpp: every op) or finite differences (test_grad.cpp: every gradient).
// main.cpp registers every case for every device found.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/op.h"

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
