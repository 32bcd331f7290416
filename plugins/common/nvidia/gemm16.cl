// What the OpenCL plugin's two 16-bit GEMM kernels share (gemm_mma.cl: mma.sync; gemm_wgmma.cl:
// Hopper's wgmma), built between ptx.cl and each (../../opencl/programs.cpp): the contract of the
// launches "gemm_coopmat" (f16, TK_BF16 0) and "gemm_coopmat_bf16" (TK_BF16 1) of
// ../../common/ops_gemm.cpp, which is the Vulkan plugin's matrix-unit GEMM's
// (../../vulkan/shaders/gemm_coopmat.comp): 128 x 128 tiles of 256 invocations, split K in parts of
// P(19) (a multiple of 64), f32 sums. Bindings: 0 a, 1 b, 2 c [batch, M, N], 3 bias [N] (V0 & 16;
// else a again, unread). Words (gemm.tk's MODE 0): P(0) M, P(1) N, P(2) K, P(3) tiles across N,
// P(4) tiles per matrix, P(5) batch rank, P(6..9) batch extents, P(10..13) a's and P(14..17) b's
// matrix strides, P(18) matrices, P(19) split K's part. V0: 1 a stored [K, M], 2 b stored [N, K], 4
// split K (each part stores its f32 sums to c [parts, matrices, M, N]; M and N multiples of 128), 8
// c in f32, 16 an f32 bias added to every row. The host guarantees: every operand's rows, C's rows
// and each binding's offset are multiples of 8 elements (16-byte copies and 4-byte stores).
#ifndef V0
#define V0 0
#endif
#ifndef TK_BF16
#define TK_BF16 0
#endif
#define TRANS_A ((V0 & 1) != 0)
#define TRANS_B ((V0 & 2) != 0)
#define SPLIT ((V0 & 4) != 0)
#define WIDE ((V0 & 8) != 0)
#define BIAS ((V0 & 16) != 0)
#define BM 128
// The tile's width: 128, or 256 in gemm_wgmma.cl (each warpgroup's product then m64n256k16), a
// build option of the Vulkan plugin's PTX modules, whose host side launches tiles as wide
// (GpuTraits::coop_tile_n).
#ifndef BN
#define BN 128
#endif
#define THREADS 256

// K slices in flight (STAGES, 2 to 4 as shared memory allows), a build option for tuning; 2 was
// the fastest for both kernels through OpenCL (docs/bench/h100-opencl-mma.txt,
// h200-opencl-wgmma.txt); the Vulkan plugin builds gemm_wgmma.cl with 4 (its own wait, see there).
// CP_WAIT() waits for the oldest slice's copies.
#ifndef STAGES
#define STAGES 2
#endif
#if STAGES == 2
#define CP_WAIT() __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory")
#elif STAGES == 3
#define CP_WAIT() __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory")
#elif STAGES == 4
#define CP_WAIT() __asm__ __volatile__("cp.async.wait_group 2;" ::: "memory")
#else
#error "STAGES must be 2, 3 or 4"
#endif

// The operand type in PTX's product names, and the conversion of two f32 sums to it.
#if TK_BF16
#define MMA_TYPES "bf16.bf16"
#define CVT_PACK "cvt.rn.bf16x2.f32"
#else
#define MMA_TYPES "f16.f16"
#define CVT_PACK "cvt.rn.f16x2.f32"
#endif

// The two kernels' opening: GEMM_OPENING (ptx.cl) with BM x BN tiles, then split K's |part| (this
// part's slices are [s0, s1)) and the first 16-byte chunks of this tile's matrices of a (|a|) and
// b (|b|).
#define GEMM16_OPENING()                                                         \
  GEMM_OPENING(BM, BN);                                                          \
  const int part = SPLIT ? batch / P(18) : 0;                                    \
  const int2 off = matrix_offsets(tk_p.w, SPLIT ? batch - part * P(18) : batch); \
  __global const uint4* a = (__global const uint4*)t0 + (tk_p.w[0] + off.x) / 8; \
  __global const uint4* b = (__global const uint4*)t1 + (tk_p.w[1] + off.y) / 8

// Two sums rounded to the 16-bit type, |lo| in the low half.
uint pack2(float lo, float hi) {
  uint r;
  __asm__("" CVT_PACK " %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The sums |v| of output elements |at| and |at| + 1 of c (binding 2; column n of their row, the
// f32 bias's element |bias_at| = the bias binding's offset + n): f32 with the bias where split K or
// f32 out (V0), else rounded to the 16-bit type.
void store_pair(__global uchar* c, __global const uchar* bias, int at, int bias_at, float2 v) {
  if (SPLIT || WIDE) {
    if (BIAS) v += ((__global const float2*)bias)[bias_at / 2];
    ((__global float2*)c)[at / 2] = v;
  } else {
    ((__global uint*)c)[at / 2] = pack2(v.x, v.y);
  }
}
