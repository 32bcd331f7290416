// Helpers shared by the conformance cases of the reductions, normalisation and losses group.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "cases.h"
#include "tessera/tensor.h"

namespace tessera::conformance::reduce {

using Ref = std::vector<double>;
using Idx = std::vector<std::int64_t>;

inline void expect_close(const Vec& out, const Ref& ref, double tol = 1e-5) {
  ASSERT_EQ(out.size(), ref.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double err = std::sqrt(num / std::max(den, 1e-30));
  EXPECT_LT(err, tol) << "normalised error " << err;
  EXPECT_TRUE(std::isfinite(err));
}

inline Tensor on(Device& d, const Vec& v, const Shape& s) {
  return Tensor::from(v, s, &d);
}

inline Vec values(const Tensor& t) {
  return t.to_vector<float>();
}

inline Vec add_offset(Vec v, float offset) {
  for (float& x : v) x += offset;
  return v;
}

}  // namespace tessera::conformance::reduce
