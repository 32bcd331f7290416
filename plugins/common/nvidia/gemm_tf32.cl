// C = op(A) op(B) (+ bias on every row) for f32 A and B on NVIDIA's tensor cores, in OpenCL C with
// inline PTX: the OpenCL plugin's own kernel for the launch "gemm_tf32" of
// ../../common/ops_gemm.cpp (f32 products where float32_matmul_precision() is high or medium),
// where the device took this program when it opened (../../opencl/device.cpp). With V1 = 3 (high)
// each operand is split into its TF32 rounding and the TF32 rounding of what that leaves (x = big +
// small, about 22 significant bits between them) and a b is summed as small*big + big*small +
// big*big (the small*small term is below the sums' rounding); with V1 = 1 (medium), big*big alone.
// Each product is mma.sync.m16n8k8 with TF32 operands and f32 sums. Its contract is the portable
// GEMM's MODE 0 (../../common/kernels/gemm.tk): the same bindings and parameter words, split K
// (P(21), a multiple of 16), 128 x 128 tiles of 256 invocations; V0: 1 a stored [K, M], 2 b stored
// [N, K], 8 bias. Built after ptx.cl (the parameter words, cp.async, ldmatrix, the tile's place).
//
// Each of the 8 subgroups multiplies a 64 x 32 block of the tile as 4 x 4 products of 16 x 8 x 8.
// K slices of 16 floats reach shared memory by cp.async (16 bytes a copy, zeros past the edges),
// the next slice in flight while this one is multiplied; shared tiles keep the operand's layout
// in memory. Fragments of an operand whose rows run along K (A stored [M, K], B stored [N, K]) are
// read by ldmatrix (an 8 x 8 matrix of 16-bit elements is an 8 x 4 block of floats, each lane's
// word the fragment's element), rows padded by 4 floats so that its 8 rows fall in distinct
// banks; those of an operand whose rows run along M or N by single loads from rows padded by 8
// floats (the 32 lanes' (k, x) in distinct banks).
// Bindings: 0 a, 1 b, 2 c [batch, M, N], 3 bias [N] (V0 & 8; else a again, unread). Words:
// P(0) M, P(1) N, P(2) K, P(3) tiles across N, P(4) tiles per matrix, P(5) batch rank, P(6..9)
// batch extents, P(10..13) a's and P(14..17) b's matrix strides, P(18) matrices, P(21) K per part,
// where work-group batch part * matrices + matrix sums its part into c [parts, matrices, M, N]
// (the first part adds the bias). The host guarantees: M, N, K, every matrix stride and each
// binding's offset are multiples of 4 floats.
#ifndef V0
#define V0 0
#endif
#ifndef V1
#define V1 3
#endif
#define TRANS_A ((V0 & 1) != 0)
#define TRANS_B ((V0 & 2) != 0)
#define BIAS ((V0 & 8) != 0)

#define BM 128
#define BN 128
#define BK 16
#define THREADS 256
// Row lengths in floats: tiles with rows of K ([BM][BK], [BN][BK]) and with rows of M or N
// ([BK][BM], [BK][BN]).
#define RK (BK + 4)
#define RX (BM + 8)
#define TILE (BM * RK > BK * RX ? BM * RK : BK * RX)  // floats of one operand's tile (BM == BN)
#define STAGE (2 * TILE)

#define CP_WAIT() __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory")

// |x| rounded to TF32 (the nearest, ties away from zero), as the bits mma.sync takes.
uint tf32(float x) {
  uint r;
  __asm__("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// d += a b for one 16 x 8 x 8 product (a: 4 TF32 registers, b: 2, d: 4 floats).
void mma(float* d, const uint* a, const uint* b) {
  __asm__ __volatile__(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Splits the |n| floats in |x| (as bits) into their TF32 parts |big| and |small|.
#define SPLIT(x, big, small, n)                         \
  _Pragma("unroll") for (int e = 0; e < (n); ++e) {     \
    big[e] = tf32(as_float(x[e]));                      \
    small[e] = tf32(as_float(x[e]) - as_float(big[e])); \
  }

// Chunk c (4 floats) of a slice of a tile |width| floats wide, the tile at row r0, column c0 of a
// matrix of |rows| x |cols| at |base|: into shared memory at |tile| with rows of |pitch| floats,
// zeros past the edges.
void fetch(__local float* tile, __global const float* base, int c, int r0, int c0, int rows,
           int cols, int width, int pitch) {
  const int per = width / 4;
  const int r = r0 + c / per, col = c0 + (c % per) * 4;
  const bool in = r < rows && col < cols;
  copy16(tile + (c / per) * pitch + (c % per) * 4, in ? base + r * cols + col : base, in);
}

__kernel void tk_main(__global const float* t0, __global const float* t1, __global float* t2,
                      __global const float* t3, __global float* t4, __global float* t5,
                      __global float* t6, __global float* t7, const TkParams tk_p,
                      __local float* tk_shm) {
  __local float4 sm4[2 * STAGE / 4];
  __local float* sm = (__local float*)sm4;
  GEMM_OPENING(BM, BN);
  GEMM_F32_OPERANDS;

  // Slice s (from kb) into stage |st|: BM * BK / 4 chunks of A and as many of B, two of each an
  // invocation; zeros past K (a part's slices end where the next part's begin: P(21) is a
  // multiple of BK).
#define LOAD(s, st)                                                     \
  {                                                                     \
    __local float* ta = sm + (st)*STAGE;                                \
    __local float* tb = ta + TILE;                                      \
    const int k0 = kb + (s)*BK;                                         \
    _Pragma("unroll") for (int q = 0; q < BM * BK / 4 / THREADS; ++q) { \
      const int c = lid + q * THREADS;                                  \
      if (TRANS_A)                                                      \
        fetch(ta, a, c, k0, m0, K, M, BM, RX);                          \
      else                                                              \
        fetch(ta, a, c, m0, k0, M, K, BK, RK);                          \
      if (TRANS_B)                                                      \
        fetch(tb, b, c, n0, k0, N, K, BK, RK);                          \
      else                                                              \
        fetch(tb, b, c, k0, n0, K, N, BN, RX);                          \
    }                                                                   \
  }

  const int lane = lid % 32, warp = lid / 32;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;  // this subgroup's 64 x 32 block
  const int g = lane / 4, t = lane % 4;
  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // ldmatrix's row addresses where the tile's rows run along K: lane l gives row l % 8 of block
  // l / 8. A's 16 x 8 fragment: blocks (rows 0-7, k 0-3), (rows 8-15, k 0-3), (rows 0-7, k 4-7),
  // (rows 8-15, k 4-7); B's two 8 x 8: (n 0-7, k 0-3), (n 0-7, k 4-7), (n 8-15, k 0-3), (n 8-15,
  // k 4-7).
  const int ra = (lane / 8) % 2 * 8 + lane % 8, ka = (lane / 16) * 4;
  const int rb = (lane / 16) * 8 + lane % 8, kbk = (lane / 8) % 2 * 4;
  const int slices = (ke - kb + BK - 1) / BK;
  if (slices > 0) LOAD(0, 0)
  CP_COMMIT();
  for (int s = 0; s < slices; ++s) {
    CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE);
    if (s + 1 < slices) LOAD(s + 1, (s + 1) % 2)
    CP_COMMIT();
    __local const float* ta = sm + (s % 2) * STAGE;
    __local const float* tb = ta + TILE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      // B's fragments of this step (4 of 8 columns each), split; then A's one at a time.
      uint bb[4][2], bs[4][2];
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        uint r[4];
        const int n = wn + j * 8;
        if (TRANS_B) {  // [BN][BK]: rows of n
          ldsm4(r, tb + (n + rb) * RK + kk + kbk);
        } else {  // [BK][BN]: element (k, n) at k * RX + n
          r[0] = as_uint(tb[(kk + t) * RX + n + g]);
          r[1] = as_uint(tb[(kk + t + 4) * RX + n + g]);
          r[2] = as_uint(tb[(kk + t) * RX + n + 8 + g]);
          r[3] = as_uint(tb[(kk + t + 4) * RX + n + 8 + g]);
        }
        SPLIT(r, bb[j], bs[j], 2)
        SPLIT((r + 2), bb[j + 1], bs[j + 1], 2)
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint r[4], ab[4], as[4];
        const int m = wm + i * 16;
        if (TRANS_A) {  // [BK][BM]: element (m, k) at k * RX + m
          r[0] = as_uint(ta[(kk + t) * RX + m + g]);
          r[1] = as_uint(ta[(kk + t) * RX + m + 8 + g]);
          r[2] = as_uint(ta[(kk + t + 4) * RX + m + g]);
          r[3] = as_uint(ta[(kk + t + 4) * RX + m + 8 + g]);
        } else {  // [BM][BK]: rows of m
          ldsm4(r, ta + (m + ra) * RK + kk + ka);
        }
        SPLIT(r, ab, as, 4)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#if V1 == 3
          mma(acc[i][j], as, bb[j]);
          mma(acc[i][j], ab, bs[j]);
#endif
          mma(acc[i][j], ab, bb[j]);
        }
      }
    }
  }

  // Each invocation holds, for product (i, j), the sums at rows m, m + 8 and columns n, n + 1.
  const int c_at = tk_p.w[2] + batch * M * N;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm + i * 16 + g + h * 8;
        const int n = n0 + wn + j * 8 + t * 2;
        if (m >= M || n >= N) continue;
        float2 v = (float2)(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        if (BIAS && batch < P(18)) v += ((__global const float2*)(t3 + tk_p.w[3]))[n / 2];
        ((__global float2*)t2)[(c_at + m * N + n) / 2] = v;
      }
}
