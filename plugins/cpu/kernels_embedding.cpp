// Embedding: a gather of weight rows, and its backward as a scatter-add of gradient rows that is
// the same bits on every run: each output row is owned by one thread, which adds that row's
// positions in position order.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels.h"

namespace tessera::cpu {
namespace {

// Index |p| of an i32 or i64 index tensor.
struct Indices {
  const void* data;
  bool wide;
  std::int64_t operator[](std::int64_t p) const {
    return wide ? static_cast<const std::int64_t*>(data)[p]
                : static_cast<const std::int32_t*>(data)[p];
  }
};

Indices indices_of(const Tensor& t) {
  return t.dtype() == DType::i64 ? Indices{t.host_data<std::int64_t>(), true}
                                 : Indices{t.host_data<std::int32_t>(), false};
}

void embedding_kernel(const OpCall& call, Context& ctx) {
  const Tensor& weight = call.in(0);
  const std::int64_t v = weight.dim(0), d = weight.dim(1), n = call.in(1).numel();
  const float* w = in_ptr(call, 0);
  const Indices idx = indices_of(call.in(1));
  float* y = out_ptr(call, 0);
  ctx.pool.parallel_for(n, row_grain(d), [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t p = s; p < e; ++p) {
      const std::int64_t i = idx[p];
      if (i >= 0 && i < v)
        std::memcpy(y + p * d, w + i * d, static_cast<std::size_t>(d) * sizeof(float));
      else
        std::fill_n(y + p * d, d, std::numeric_limits<float>::quiet_NaN());
    }
  });
}

// Thread t owns rows [V*t/T, V*(t+1)/T): it reads every index and adds the gradient rows of its
// own, in position order, so the sums do not depend on the thread count.
void embedding_backward_kernel(const OpCall& call, Context& ctx) {
  const std::int64_t v = call.out(0).dim(0), d = call.out(0).dim(1), n = call.in(1).numel();
  const std::int64_t pad = call.attr<EmbeddingAttrs>().padding_idx;
  const float* g = in_ptr(call, 0);
  const Indices idx = indices_of(call.in(1));
  float* dw = out_ptr(call, 0);
  const int parts = static_cast<int>(std::clamp<std::int64_t>(
      std::min<std::int64_t>(v, (n * d) / kElementGrain + 1), 1, ctx.pool.size()));
  ctx.pool.run_parts(parts, [&](int part, int count) {
    const std::int64_t lo = v * part / count, hi = v * (part + 1) / count;
    std::fill(dw + lo * d, dw + hi * d, 0.0f);
    for (std::int64_t p = 0; p < n; ++p) {
      const std::int64_t i = idx[p];
      if (i < lo || i >= hi || i == pad) continue;
      float* row = dw + i * d;
      const float* src = g + p * d;
      for (std::int64_t c = 0; c < d; ++c) row[c] += src[c];
    }
  });
}

}  // namespace

void register_embedding(KernelTable& t, Context& ctx) {
  t[static_cast<std::size_t>(OpId::embedding)] =
      std::make_unique<CpuKernel>(ctx, embedding_kernel, f32_only);
  t[static_cast<std::size_t>(OpId::embedding_backward)] =
      std::make_unique<CpuKernel>(ctx, embedding_backward_kernel, f32_only);
}

}  // namespace tessera::cpu
