// The finite-difference gradient check every gradient case of the conformance suite uses.
#pragma once

#include <functional>
#include <vector>

#include "cases.h"
#include "tessera/train/autograd.h"

namespace tessera::conformance {

// One input of a checked function: its shape and values (the check perturbs the values).
struct GradInput {
  Shape shape;
  Vec values;
};

using GradFn = std::function<train::Variable(const std::vector<train::Variable>&)>;

double dot(const Vec& a, const Vec& b);

// |n| values (k - n/2 + 1/2) * gap + shift in random order: any two at least |gap| apart (no ties
// for max, min and the pools) and none within gap/2 of |shift| (away from relu's and abs's kink).
Vec separated(std::int64_t n, float gap, float shift = 0);

// For L = <f(x), w> with a random w and a random direction v per input, checks <dL/dx, v> from
// backward() against the central difference (L(x + eps v) - L(x - eps v)) / (2 eps) on |d|,
// relative to max(|analytic|, |numeric|, ||dL/dx||) < |tol|. Adds a gtest failure naming the
// input otherwise.
void gradcheck(Device& d, const std::vector<GradInput>& inputs, const GradFn& f, double eps = 1e-3,
               double tol = 1e-2);

}  // namespace tessera::conformance
