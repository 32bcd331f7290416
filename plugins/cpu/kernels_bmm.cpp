// Batched matmul: one call of the GEMM library per output matrix, matrices spread over the pool
// (or, with fewer matrices than threads, each GEMM cut over the pool).
#include <algorithm>
#include <limits>

#include "../common/batch.h"
#include "kernels.h"

namespace tessera::cpu {
namespace {

// Below this many multiply-adds per chunk of matrices, a chunk grows rather than split further.
constexpr std::int64_t kBatchGrainMacs = 1 << 18;

void bmm_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<MatmulAttrs>();
  const Shape& ys = call.out(0).shape();
  const std::int64_t m = ys[ys.rank() - 2], n = ys[ys.rank() - 1];
  const Shape& as = call.in(0).shape();
  const std::int64_t k = at.trans_a ? as[as.rank() - 2] : as[as.rank() - 1];
  const std::int64_t lda = at.trans_a ? m : k, ldb = at.trans_b ? k : n;
  const common::BatchDims g = common::batch_dims(call);
  const float* a = in_ptr(call, 0);
  const float* b = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  auto one = [&](std::int64_t i, bool split) {
    const float *ai = a + g.offset_a(i), *bi = b + g.offset_b(i);
    float* yi = y + i * m * n;
    if (split)
      gemm(ctx, at.trans_a, at.trans_b, m, n, k, ai, lda, bi, ldb, 0.0f, yi, n);
    else
      gemm_serial(ctx.blas, at.trans_a, at.trans_b, m, n, k, ai, lda, bi, ldb, 0.0f, yi, n);
  };
  if (g.count < ctx.pool.size()) {
    for (std::int64_t i = 0; i < g.count; ++i) one(i, true);
    return;
  }
  const std::int64_t macs = std::max<std::int64_t>(1, m * n * std::max<std::int64_t>(k, 1));
  ctx.pool.parallel_for(g.count, std::max<std::int64_t>(1, kBatchGrainMacs / macs),
                        [&](std::int64_t s, std::int64_t e) {
                          for (std::int64_t i = s; i < e; ++i) one(i, false);
                        });
}

Support bmm_supports(const OpCall& call) {
  for (int i = 0; i < 2; ++i) {
    const Shape& s = call.in(i).shape();
    if (s[s.rank() - 1] > std::numeric_limits<int>::max() ||
        s[s.rank() - 2] > std::numeric_limits<int>::max())
      return Support::no("a matrix dimension exceeds the GEMM library's 32-bit limit");
  }
  return f32_only(call);
}

}  // namespace

void register_bmm(KernelTable& t, Context& ctx) {
  t[static_cast<std::size_t>(OpId::bmm)] =
      std::make_unique<CpuKernel>(ctx, bmm_kernel, bmm_supports);
}

}  // namespace tessera::cpu
