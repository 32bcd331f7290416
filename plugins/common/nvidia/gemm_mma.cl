// C = op(A) op(B) for f16 or bf16 A and B on NVIDIA's tensor cores, in OpenCL C with inline PTX:
// the OpenCL plugin's own kernel for the launches "gemm_coopmat" and "gemm_coopmat_bf16" of
// ../../common/ops_gemm.cpp, where the device took this program when it opened
// (../../opencl/device.cpp). Built after ptx.cl (the parameter words, cp.async, ldmatrix, the
// tile's place) and gemm16.cl (the contract it shares with gemm_wgmma.cl: bindings, words, V0
// flags, 128 x 128 tiles, 256 invocations, the operand type, the stores), with K slices of 32.
//
// Each of the 8 subgroups multiplies a 64 x 32 block of the tile as 4 x 4 products
// mma.sync.m16n8k16 (16-bit operands, f32 sums), its fragments loaded from shared memory by
// ldmatrix (.trans where the operand's rows run the other way). K slices reach shared memory by
// cp.async, STAGES slices in flight: no registers hold the next slice, and one barrier a slice.
// Shared tiles keep the operand's layout in memory (rows of K for A, of N for B; transposed
// operands' rows of M and K), rows padded by 16 bytes so that the 8 rows of an ldmatrix fall in
// distinct banks; chunks of 8 elements past an edge are filled with zeros (cp.async's source
// size 0).
//
// The K slices' length (BK, a divisor of 32) as a build option for tuning: 32 was the fastest on
// the H100 (docs/bench/h100-opencl-mma.txt).
#ifndef BK
#define BK 32
#endif
// Padded rows in 16-byte chunks: [BM][BK] and [BN][BK] tiles have rows of BK + 8 elements,
// [BK][BM] and [BK][BN] of BM + 8 and BN + 8.
#define RK ((BK + 8) / 8)
#define RM ((BM + 8) / 8)
#define RN ((BN + 8) / 8)
#define TILE (BM * RK > BK * RM ? BM * RK : BK * RM)  // chunks of one operand's tile (BM == BN)
#if BN != BM
#error "gemm_mma.cl's tiles are square (BN 128)"
#endif
#define STAGE_CHUNKS (2 * TILE)

// d += a b for one 16 x 8 x 16 product (a: 4 registers of 2 elements, b: 2, d: 4 floats).
void mma(float* d, const uint* a, uint b0, uint b1) {
  __asm__ __volatile__("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPES
                       ".f32 {%0,%1,%2,%3}, "
                       "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                       : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Chunk c (16 bytes) of a slice of a tile |width| elements wide, the tile at row r0, column c0
// of a matrix of |rows| x |cols| at chunk |base|: into shared memory at |tile|, zeros past the
// edges.
void fetch(__local uint4* tile, __global const uint4* base, int c, int r0, int c0, int rows,
           int cols, int width) {
  const int per = width / 8;
  const int r = r0 + c / per, col = c0 + (c % per) * 8;
  const bool in = r < rows && col < cols;
  copy16(tile + (c / per) * (per + 1) + c % per, in ? base + (r * cols + col) / 8 : base, in);
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void tk_main(
    __global const uchar* t0, __global const uchar* t1, __global uchar* t2,
    __global const uchar* t3, __global uchar* t4, __global uchar* t5, __global uchar* t6,
    __global uchar* t7, const TkParams tk_p, __local float4* tk_shm) {
  __local uint4 sm[STAGES * STAGE_CHUNKS];
  GEMM16_OPENING();

  // Slice s into stage |st|: BM * BK / 8 chunks of A and as many of B, spread over the
  // invocations.
#define LOAD(s, st)                                                     \
  {                                                                     \
    __local uint4* ta = sm + (st)*STAGE_CHUNKS;                         \
    __local uint4* tb = ta + TILE;                                      \
    const int k0 = (s)*BK;                                              \
    _Pragma("unroll") for (int q = 0; q < BM * BK / 8 / THREADS; ++q) { \
      const int c = lid + q * THREADS;                                  \
      if (TRANS_A)                                                      \
        fetch(ta, a, c, k0, m0, K, M, BM);                              \
      else                                                              \
        fetch(ta, a, c, m0, k0, M, K, BK);                              \
      if (TRANS_B)                                                      \
        fetch(tb, b, c, n0, k0, N, K, BK);                              \
      else                                                              \
        fetch(tb, b, c, k0, n0, K, N, BN);                              \
    }                                                                   \
  }

  const int lane = lid % 32, warp = lid / 32;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;  // this subgroup's 64 x 32 block
  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int s0 = SPLIT ? part * (P(19) / BK) : 0;
  const int slices = SPLIT ? min((K + BK - 1) / BK, s0 + P(19) / BK) : (K + BK - 1) / BK;
  for (int p = 0; p < STAGES - 1; ++p) {
    if (s0 + p < slices) LOAD(s0 + p, p)
    CP_COMMIT();
  }
  // ldmatrix's row addresses: lane l gives a row of matrix l / 8 (see the fragment layouts in
  // PTX's mma.m16n8k16): row l % 16, column (l / 16) * 8 where the tile's rows are the
  // fragment's; row (l % 8) + (l / 16) * 8, column ((l / 8) % 2) * 8 where they are transposed.
  const int ra = lane % 16, ca = (lane / 16) * 8;
  const int rt = lane % 8 + (lane / 16) * 8, ct = ((lane / 8) % 2) * 8;
  for (int s = s0; s < slices; ++s) {
    CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE);
    const int next = s + STAGES - 1;
    if (next < slices) LOAD(next, (next - s0) % STAGES)
    CP_COMMIT();
    __local const uint4* ta = sm + ((s - s0) % STAGES) * STAGE_CHUNKS;
    __local const uint4* tb = ta + TILE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint fb[2][4];  // B's fragments: n blocks of 16, each two 16 x 8 operands
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = wn + j * 16;
        if (TRANS_B)  // [BN][BK]: rows of n
          ldsm4(fb[j], tb + (n + rt) * RK + (kk + ct) / 8);
        else  // [BK][BN]: rows of k
          ldsm4_trans(fb[j], tb + (kk + ra) * RN + (n + ca) / 8);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint fa[4];
        const int m = wm + i * 16;
        if (TRANS_A)  // [BK][BM]: rows of k
          ldsm4_trans(fa, ta + (kk + rt) * RM + (m + ct) / 8);
        else  // [BM][BK]: rows of m
          ldsm4(fa, ta + (m + ra) * RK + (kk + ca) / 8);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mma(acc[i][j], fa, fb[j / 2][(j % 2) * 2], fb[j / 2][(j % 2) * 2 + 1]);
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
        const int m = m0 + wm + i * 16 + lane / 4 + h * 8;
        const int n = n0 + wn + j * 8 + (lane % 4) * 2;
        if (m >= M || n >= N) continue;
        store_pair(t2, t3, c_at + m * N + n, tk_p.w[3] + n,
                   (float2)(acc[i][j][2 * h], acc[i][j][2 * h + 1]));
      }
}
