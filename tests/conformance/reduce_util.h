// Helpers shared by the conformance cases of the reductions, normalisation and losses group.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "cases.h"
#include "tessera/tensor.h"

namespace tessera::conformance::reduce {

using Idx = std::vector<std::int64_t>;

inline Vec values(const Tensor& t) {
  return t.to_vector<float>();
}

inline Vec add_offset(Vec v, float offset) {
  for (float& x : v) x += offset;
  return v;
}

}  // namespace tessera::conformance::reduce
