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

// Runs one(i, split) for every output matrix i: on the pool, or with fewer matrices than threads
// one after another, each cut over the pool (split).
template <typename One>
void each_matrix(Context& ctx, std::int64_t count, std::int64_t macs, One one) {
  if (count < ctx.pool.size()) {
    for (std::int64_t i = 0; i < count; ++i) one(i, true);
    return;
  }
  ctx.pool.parallel_for(
      count, std::max<std::int64_t>(1, kBatchGrainMacs / std::max<std::int64_t>(macs, 1)),
      [&](std::int64_t s, std::int64_t e) {
        for (std::int64_t i = s; i < e; ++i) one(i, false);
      });
}

void bmm_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<MatmulAttrs>();
  const Shape& ys = call.out(0).shape();
  const std::int64_t m = ys[ys.rank() - 2], n = ys[ys.rank() - 1];
  const Shape& as = call.in(0).shape();
  const std::int64_t k = at.trans_a ? as[as.rank() - 2] : as[as.rank() - 1];
  const std::int64_t lda = at.trans_a ? m : k, ldb = at.trans_b ? k : n;
  const common::BatchDims g = common::batch_dims(call);
  const std::int64_t macs = m * n * std::max<std::int64_t>(k, 1);
  const DType t = call.in(0).dtype();
  // f32 operands: |a| and |b| (the inputs, or f16/bf16 inputs widened) into |y|.
  auto f32_bmm = [&](const float* a, const float* b, float* y) {
    each_matrix(ctx, g.count, macs, [&](std::int64_t i, bool split) {
      const float *ai = a + g.offset_a(i), *bi = b + g.offset_b(i);
      float* yi = y + i * m * n;
      if (split)
        gemm(ctx, at.trans_a, at.trans_b, m, n, k, ai, lda, bi, ldb, 0.0f, yi, n);
      else
        gemm_serial(ctx.blas, at.trans_a, at.trans_b, m, n, k, ai, lda, bi, ldb, 0.0f, yi, n);
    });
  };
  if (t == DType::f32) return f32_bmm(in_ptr(call, 0), in_ptr(call, 1), out_ptr(call, 0));
  // f16, bf16: f32 accumulators, rounded once (or, with out_dtype f32, the result itself).
  const auto* a = in_ptr<std::uint16_t>(call, 0);
  const auto* b = in_ptr<std::uint16_t>(call, 1);
  const bool wide = call.out(0).dtype() == DType::f32;
  std::vector<float> scratch(wide ? 0 : static_cast<std::size_t>(g.count * m * n));
  float* acc = wide ? out_ptr(call, 0) : scratch.data();
  if (t == DType::bf16 && ctx.blas.has_gemm_bf16() && k > 0) {
    each_matrix(ctx, g.count, macs, [&](std::int64_t i, bool split) {
      const std::uint16_t *ai = a + g.offset_a(i), *bi = b + g.offset_b(i);
      float* yi = acc + i * m * n;
      if (split)
        gemm_half(ctx, t, at.trans_a, at.trans_b, m, n, k, ai, lda, bi, ldb, 0.0f, yi, n);
      else
        ctx.blas.gemm_bf16(at.trans_a, at.trans_b, m, n, k, ai, lda, bi, ldb, 0.0f, yi, n);
    });
  } else {
    const std::vector<float> wa = widen(ctx, t, a, call.in(0).numel());
    const std::vector<float> wb = widen(ctx, t, b, call.in(1).numel());
    f32_bmm(wa.data(), wb.data(), acc);
  }
  if (!wide) narrow(ctx, t, acc, out_ptr<std::uint16_t>(call, 0), g.count * m * n);
}

Support bmm_supports(const OpCall& call) {
  for (int i = 0; i < 2; ++i) {
    const Shape& s = call.in(i).shape();
    if (s[s.rank() - 1] > std::numeric_limits<int>::max() ||
        s[s.rank() - 2] > std::numeric_limits<int>::max())
      return Support::no("a matrix dimension exceeds the GEMM library's 32-bit limit");
  }
  const DType t = call.in(0).dtype();
  return is_16bit_float(t) ? Support::yes() : f32_only(call);
}

}  // namespace

void register_bmm(KernelTable& t, Context& ctx) {
  t[static_cast<std::size_t>(OpId::bmm)] =
      std::make_unique<CpuKernel>(ctx, bmm_kernel, bmm_supports);
}

}  // namespace tessera::cpu
