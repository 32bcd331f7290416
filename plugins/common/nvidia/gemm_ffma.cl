// C = A^T B (+ bias on every row) for f32 A stored [K, M] and B stored [K, N], in f32 arithmetic
// (fused multiply-adds) on NVIDIA GPUs (compute capability 8.0+), in OpenCL C with inline PTX: the
// f32 GEMM both GPU plugins launch as "gemm_ffma" (../ops_gemm.cpp's ffma_gemm) where the device
// has it, in place of the portable kernel's 128 x 128 tiles (../kernels/gemm.tk), for the products
// whose operands both run along M and N in memory (a weight's gradient, x^T dy). Its contract is
// gemm_tf32.cl's with V0 1 (a stored [K, M]) or 9 (and a bias): the portable GEMM's MODE 0
// bindings and parameter words, split K (P(21), a multiple of BK), 128 x 128 tiles of 256
// invocations. Built after ptx.cl (the parameter words, cp.async, the tile's place).
//
// What differs from the portable kernel: the K slices reach shared memory by cp.async, 16 bytes a
// copy straight into the layout the products read ([BK][128]: element (k, x) at k * 128 + x),
// STAGES of them in flight, instead of through registers: no registers held for the next slice,
// no stores to shared memory in the loop, one barrier a slice. The other layouts stay with the
// portable kernel: an operand whose rows run along K must be transposed on the way, and every way
// tried (through registers, by the invocations in shared memory, or read along K) gave back the
// gain on the H200 (docs/bench/h200-ffma.txt). Elements past an edge (M, N or the part's end of K)
// are zeros. Each subgroup computes a 32 x 64 block of the tile, each invocation 8 x 8 sums: rows
// tr + i * 16 + r and columns tc + j * 32 + c (i, j < 2; r, c < 4), so that a subgroup's 4-float
// reads of A touch 4 groups and of B 8, each read whole in one pass of shared memory. The
// bindings, words and what the host guarantees (M, N, K, every matrix stride and each binding's
// offset multiples of 4 floats) are gemm_tf32.cl's.
//
// Tuning macros: BK (the K slices' length, 8, 16 or 32), STAGES (2 to 5), SMEM_LIMIT (the static
// shared memory a work-group may declare: 47 KiB by default; 48 KiB, all NVIDIA's OpenCL gives a
// work-group, with TK_NO_SHM_ARG; more where the Vulkan plugin loads it as a CUDA module).
// TK_NO_SHM_ARG: tk_main takes no __local argument (the OpenCL plugin's builds, which set none).
#ifndef V0
#define V0 1
#endif
#ifndef BK
#define BK 16
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef SMEM_LIMIT
#define SMEM_LIMIT (47 * 1024)
#endif
#if (V0 & ~8) != 1
#error "V0 must be 1 (a stored [K, M], b [K, N]) or 9 (and a bias)"
#endif
#define BIAS ((V0 & 8) != 0)

#define BM 128
#define BN 128
#define THREADS 256
#if BK != 8 && BK != 16 && BK != 32
#error "BK must be 8, 16 or 32"
#endif
#if STAGES < 2 || STAGES > 5
#error "STAGES must be 2 to 5"
#endif
// A stage: A's slice, then B's, each as the products read it: [BK][128], element (k, x) at
// k * 128 + x.
#define TILE (BK * BM)
#define STAGE (2 * TILE)
#if STAGES * STAGE * 4 > SMEM_LIMIT
#error "the stages exceed the shared memory a work-group gets (SMEM_LIMIT)"
#endif

// Waits until the copies of all but the newest STAGES - 2 slices have landed.
#if STAGES == 2
#define CP_WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory")
#elif STAGES == 3
#define CP_WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory")
#elif STAGES == 4
#define CP_WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 2;" ::: "memory")
#else
#define CP_WAIT_OLDEST() __asm__ __volatile__("cp.async.wait_group 3;" ::: "memory")
#endif

// The BK rows from |k0| (zeros from |ke|) of an operand stored [K, xs] (|xs| M or N), columns
// x0 .. x0 + 127, into |tile| by cp.async.
inline __attribute__((always_inline)) void copy_slice(__local float* tile,
                                                      __global const float* src, int lid, int k0,
                                                      int ke, int x0, int xs) {
#pragma unroll
  for (int q = 0; q < BK * BM / 4 / THREADS; ++q) {
    const int c = lid + q * THREADS, k = c / (BM / 4), x = (c % (BM / 4)) * 4;
    const bool in = k0 + k < ke && x0 + x < xs;
    copy16(tile + k * BM + x, in ? src + (k0 + k) * xs + x0 + x : src, in);
  }
}

__kernel void tk_main(__global const float* t0, __global const float* t1, __global float* t2,
                      __global const float* t3, __global float* t4, __global float* t5,
                      __global float* t6, __global float* t7, const TkParams tk_p
#ifndef TK_NO_SHM_ARG
                      , __local float* tk_shm
#endif
                      ) {
  __local float4 sm4[STAGES * STAGE / 4];
  __local float* sm = (__local float*)sm4;
  GEMM_OPENING(BM, BN);
  GEMM_F32_OPERANDS;

  // The copies of slice s (from kb) into stage |st|.
#define COPY(s, st)                               \
  {                                               \
    __local float* ta = sm + (st)*STAGE;          \
    const int k0 = kb + (s)*BK;                   \
    copy_slice(ta, a, lid, k0, ke, m0, M);        \
    copy_slice(ta + TILE, b, lid, k0, ke, n0, N); \
  }

  const int lane = lid % 32, warp = lid / 32;
  const int tr = (warp / 2) * 32 + (lane / 8) * 4;  // rows tr + i * 16 + r
  const int tc = (warp % 2) * 64 + (lane % 8) * 4;  // columns tc + j * 32 + c
  float4 acc[8][2];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = (float4)(0.0f);

  const int slices = (ke - kb + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) COPY(s, s)
    CP_COMMIT();
  }
  for (int s = 0; s < slices; ++s) {
    // Slice s has landed and every invocation is done with slice s - 1, whose stage the copies
    // of slice s + STAGES - 1 now refill.
    CP_WAIT_OLDEST();
    barrier(CLK_LOCAL_MEM_FENCE);
    if (s + STAGES - 1 < slices) COPY(s + STAGES - 1, (s + STAGES - 1) % STAGES)
    CP_COMMIT();
    __local const float* ta = sm + (s % STAGES) * STAGE;
    __local const float* tb = ta + TILE;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *(__local const float4*)(ta + k * BM + tr);
      const float4 a1 = *(__local const float4*)(ta + k * BM + tr + 16);
      const float4 b0 = *(__local const float4*)(tb + k * BM + tc);
      const float4 b1 = *(__local const float4*)(tb + k * BM + tc + 32);
      acc[0][0] += a0.x * b0;
      acc[0][1] += a0.x * b1;
      acc[1][0] += a0.y * b0;
      acc[1][1] += a0.y * b1;
      acc[2][0] += a0.z * b0;
      acc[2][1] += a0.z * b1;
      acc[3][0] += a0.w * b0;
      acc[3][1] += a0.w * b1;
      acc[4][0] += a1.x * b0;
      acc[4][1] += a1.x * b1;
      acc[5][0] += a1.y * b0;
      acc[5][1] += a1.y * b1;
      acc[6][0] += a1.z * b0;
      acc[6][1] += a1.z * b1;
      acc[7][0] += a1.w * b0;
      acc[7][1] += a1.w * b1;
    }
  }

  // Row tr + i * 16 + r is acc[i * 4 + r]; its columns tc .. tc + 3 and tc + 32 .. tc + 35.
  const int c_at = tk_p.w[2] + batch * M * N;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = m0 + tr + (i / 4) * 16 + i % 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = n0 + tc + j * 32;
      if (m >= M || n >= N) continue;
      float4 v = acc[i][j];
      if (BIAS && batch < P(18)) v += ((__global const float4*)(t3 + tk_p.w[3]))[n / 4];
      ((__global float4*)t2)[(c_at + m * N + n) / 4] = v;
    }
  }
}
