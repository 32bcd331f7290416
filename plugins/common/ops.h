// The groups of portable ops (portable.h): each ops_*.cpp adds its ops to the table that both GPU
// plugins install. A new group declares its function here and calls it from portable_ops().
#pragma once

#include "portable.h"

namespace tessera::common {

// The first ops, moved here from the plugins' own kernels.
void add_base_ops(PortableOps& ops);

// --- GEMM: matmul, addmm, bmm (ops_gemm.cpp, kernels/gemm.tk) ---
struct BatchDims;
struct Conv;

// One GEMM's tiles: a TM x TN tile of C per work-group, K in slices of TK, a WM x WN block per
// invocation, one or two shared-memory buffers.
struct GemmTiles {
  int tm = 64, tn = 64, tk = 16, wm = 4, wn = 4, buffers = 1;
  std::int64_t threads() const { return std::int64_t{tm / wm} * (tn / wn); }
  std::int64_t shared_floats() const { return std::int64_t{buffers} * tk * (tm + tn); }
};

// The tiles of an [m, n] output (|batch| of them) on a device with |traits|: TESSERA_GEMM_TILES
// where set (ConfigError if it is malformed or does not fit the device), else per problem.
GemmTiles gemm_tiles(const GpuTraits& traits, std::int64_t m, std::int64_t n, std::int64_t batch);

// How gemm() runs an f32 (or 16-bit, off matrix units) product of an [m, n] output, depth k,
// |count| matrices, on a device with |traits|: the kernel's tiles, and K in |parts| parts of |per|
// (a multiple of the tiles' TK; parts 1, per k where K stays whole), whose sums are added
// afterwards in a fixed order. Pure: the tests check the choices for a device's traits.
struct GemmPlan {
  GemmTiles tiles;
  std::int64_t per = 0, parts = 1;
};
GemmPlan gemm_plan(const GpuTraits& traits, std::int64_t m, std::int64_t n, std::int64_t k,
                   std::int64_t count);

// Reads TESSERA_GEMM_TILES and TESSERA_GEMM_FFMA; throws ConfigError if one is set and malformed.
// The GPU plugins call it when they load, so that a typo fails the plugin (and device selection)
// with the reason.
void check_gemm_environment();
// TESSERA_GEMM_FFMA: unset or 1, the f32 GEMMs of a stored [K, M] and b [K, N] take
// nvidia/gemm_ffma.cl where the device offers it (GpuTraits::ffma_gemm); 0, the portable kernel
// (for comparisons). Throws ConfigError for any other value; checked by check_gemm_environment.
bool ffma_gemm_allowed();

// Reads TESSERA_ATTENTION_SCRATCH_MIB (the memory the attention backward may take for its dS
// tiles); throws ConfigError if it is set and malformed. Called with check_gemm_environment.
void check_attention_environment();

// c = op(a) op(b) (+ bias [n] on every row) for the |g.count| matrices of |g|: a, b contiguous
// matrices (op(a) is [m, k], op(b) [k, n]), c contiguous [count, m, n]; all f32, or all f16 or
// all bf16 (summed in f32, rounded once into c), or f16 or bf16 a and b with c and the bias in
// f32 (out_dtype f32: the sums, not rounded). f32 products take |precision|'s tensor-core
// kernel where the device has one (GpuTraits::tf32_gemm), else f32 arithmetic.
void gemm(Launcher& l, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor* bias,
          bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          const BatchDims& g, MatmulPrecision precision = MatmulPrecision::highest);

// The convolutions as implicit GEMMs (kernels/gemm.tk, MODE 1-3): [m, n] outputs of depth k per
// conv group. |mode| 1 forward (m out channels, n batch * output pixels, k in channels * taps),
// 2 input gradient (m in channels, n batch * input pixels, k out channels * taps), 3 weight
// gradient (m out channels, n in channels * taps, k batch * output pixels).
struct ConvGemm {
  std::int64_t m, n, k;
};
ConvGemm conv_gemm_shape(const Conv& g, int mode);

// The tiles of conv_gemm's [m, n] outputs, |count| of them: as gemm_tiles, with TM fitted to the
// channels.
GemmTiles conv_tiles(const GpuTraits& traits, std::int64_t m, std::int64_t n, std::int64_t count);

// One convolution pass as an implicit GEMM: |mode| 1 (a w, b x, out y), 2 (a w, b gy, out dx),
// 3 (a gy, b x, out dw). Contiguous tensors whose element counts fit 32 bits (gpu_supports);
// the weight gradient splits its long K over the compute units, adding the parts in a fixed
// order (the same bits on every run).
void conv_gemm(Launcher& l, const Conv& g, int mode, const Tensor& a, const Tensor& b,
               const Tensor& out);

void add_gemm_ops(PortableOps& ops);

// y = scale * the sums of the lines of x, a contiguous [outer, n, inner], over n
// (kernels/reduce.tk; ops_base.cpp): one invocation per line where there are lines enough for the
// device, else each line in parts whose sums are added in a second pass, in a fixed order (the same
// bits on every run). x and y must not overlap.
void sum_lines(Launcher& l, const Tensor& x, const Tensor& y, std::int64_t outer, std::int64_t n,
               std::int64_t inner, float scale);

// y = x for an f32 x whose dimensions, adjacent ones merged (Strided), walk the second-to-last
// contiguously and the last with a stride (a transposed matrix, a batch of them), both at least
// 32 long; y contiguous, x's shape, not overlapping x (kernels/transpose.tk: 64 x 64 tiles
// through shared memory, loads and stores consecutive across a subgroup). Returns false, and
// launches nothing, for any other view.
bool transpose_copy(Launcher& l, const Tensor& x, const Tensor& y);
// The same for x's merged dimensions |g| (geometry.h: strided(x.shape(), &x, 1)), which the
// caller has.
struct Strided;
bool transpose_tiles(Launcher& l, const Tensor& x, const Tensor& y, const Strided& g);
// Whether transpose_copy takes such a view of |rows| x |cols| (its last two merged dimensions)
// on |l|'s device.
bool transpose_fits(const Launcher& l, std::int64_t rows, std::int64_t cols);

// --- tensor API: casts, factories, indexing ---
void add_tensor_ops(PortableOps& ops);
// dst = src element by element (kernels/tensor_copy.tk): views of one shape and dtype of 1, 2, 4
// or 8 bytes, any strides (dst writes each location once); copy_into's and, for 16-bit
// elements, copy's launch.
void copy_views(Launcher& l, const Tensor& src, const Tensor& dst);
// y = x converted to y's dtype (kernels/tensor_cast.tk): x strided (strides 0 broadcast), y
// contiguous of x's shape; f32, f16, bf16, i32, i64 (within 32 bits) and bool.
void cast_into(Launcher& l, const Tensor& x, const Tensor& y);

// --- element-wise math, comparisons, selection ---
// Element-wise math, comparisons, where and masked_fill (ops_pointwise.cpp).
void add_pointwise_ops(PortableOps& ops);

// --- reductions, normalisation, losses, optimizers ---
void add_reduce_ops(PortableOps& ops);  // ops_reduce.cpp

// --- nn: batched matmul, embedding, pooling, attention ---
void add_nn_ops(PortableOps& ops);  // ops_nn.cpp

// attention
void add_attention_ops(PortableOps& ops);

}  // namespace tessera::common
