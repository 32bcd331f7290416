// Host-side geometry of a bmm call, shared by the plugins: which matrix of a and of b each output
// matrix reads. Header-only.
#pragma once

#include <cstdint>

#include "tessera/op.h"

namespace tessera::common {

inline constexpr int kBatchRank = kMaxDims - 2;

// The output's batch dimensions (all but the last two), adjacent ones that both operands walk
// alike merged and extents of 1 dropped; output matrix i (row-major over |shape|) reads a's
// matrix at element offset sum(coord[d] * stride_a[d]) and b's likewise, a stride 0 where the
// operand broadcasts.
struct BatchDims {
  std::int64_t count = 1;  // output matrices
  int rank = 0;
  std::int64_t shape[kBatchRank] = {};
  std::int64_t stride_a[kBatchRank] = {};
  std::int64_t stride_b[kBatchRank] = {};

  std::int64_t offset_a(std::int64_t i) const { return offset(i, stride_a); }
  std::int64_t offset_b(std::int64_t i) const { return offset(i, stride_b); }

 private:
  std::int64_t offset(std::int64_t i, const std::int64_t* stride) const {
    std::int64_t at = 0;
    for (int d = rank - 1; d >= 0; --d) {
      at += (i % shape[d]) * stride[d];
      i /= shape[d];
    }
    return at;
  }
};

// The batch of a bmm call (contiguous a and b, batch dimensions broadcast to the output's).
inline BatchDims batch_dims(const OpCall& call) {
  const Shape& y = call.out(0).shape();
  const int batch = y.rank() - 2;
  // Element strides of an operand's batch dimensions, aligned with the output's: 0 where the
  // operand has extent 1 or lacks the dimension.
  auto strides_of = [&](const Shape& s, std::int64_t* out) {
    std::int64_t step = s[s.rank() - 1] * s[s.rank() - 2];
    for (int d = batch - 1; d >= 0; --d) {
      const int sd = s.rank() - 2 - batch + d;
      const std::int64_t extent = sd >= 0 ? s[sd] : 1;
      out[d] = extent == 1 ? 0 : step;
      step *= extent;
    }
  };
  std::int64_t sa[kBatchRank] = {}, sb[kBatchRank] = {};
  strides_of(call.in(0).shape(), sa);
  strides_of(call.in(1).shape(), sb);
  BatchDims g;
  for (int d = 0; d < batch; ++d) {
    g.count *= y[d];
    if (y[d] == 1) continue;
    const int last = g.rank - 1;
    if (last >= 0 && g.stride_a[last] == sa[d] * y[d] && g.stride_b[last] == sb[d] * y[d]) {
      g.shape[last] *= y[d];
      g.stride_a[last] = sa[d];
      g.stride_b[last] = sb[d];
      continue;
    }
    g.shape[g.rank] = y[d];
    g.stride_a[g.rank] = sa[d];
    g.stride_b[g.rank] = sb[d];
    ++g.rank;
  }
  return g;
}

}  // namespace tessera::common
