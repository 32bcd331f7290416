// The PyTorch oracle's cases: each named case draws its inputs, calls one Tessera op (through
// train::Variable, so that its backward runs too) and is recomputed by torch in compare.py under
// the same name. README.md says how to add one.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessera/op.h"
#include "tessera/shape.h"
#include "tessera/train/autograd.h"

namespace tessera::oracle {

// How an input's values are drawn (fresh on every run; the seed is printed).
enum class Draw {
  normal,    // f32 N(0, 1)
  positive,  // f32 uniform [0.5, 2): log, sqrt, divisors
  labels,    // i32 uniform [0, classes)
  labels64,  // i64 uniform [0, classes)
};

struct Input {
  Shape shape;
  Draw draw = Draw::normal;
  int classes = 0;   // Draw::labels and labels64 only
  bool grad = true;  // a leaf that requires grad (f32 inputs only)
};

inline Input randn(Shape s) {
  return {std::move(s), Draw::normal, 0, true};
}
inline Input positive(Shape s) {
  return {std::move(s), Draw::positive, 0, true};
}
// f32 values that are not differentiated (e.g. an op's constant operand).
inline Input constant(Shape s) {
  return {std::move(s), Draw::normal, 0, false};
}
inline Input labels(Shape s, int classes) {
  return {std::move(s), Draw::labels, classes, false};
}
inline Input labels64(Shape s, int classes) {
  return {std::move(s), Draw::labels64, classes, false};
}

using Vars = std::vector<train::Variable>;

struct Case {
  std::string name;  // the key of compare.py's CASES: one entry there for each one here
  OpId op;           // the op under test: skipped, with the reason, on a device without its kernel
  std::vector<Input> inputs;
  // The call, on leaves made from |inputs| on the device. A result that requires grad is
  // back-propagated with a random upstream gradient; an integer or constant result is compared
  // as a value only (wrap a core op's Tensor in a Variable for a forward-only case).
  std::function<train::Variable(const Vars&)> run;
};

// The table, in groups (cases.cpp; one file per group of ops as it grows).
std::vector<Case> base_cases();
std::vector<Case> tensor_cases();     // cases_tensor.cpp
std::vector<Case> pointwise_cases();  // cases_pointwise.cpp
std::vector<Case> reduce_cases();     // cases_reduce.cpp
std::vector<Case> nn_cases();         // cases_nn.cpp
std::vector<Case> attention_cases();  // cases_attention.cpp

}  // namespace tessera::oracle
