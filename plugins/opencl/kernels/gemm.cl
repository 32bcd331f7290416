// C[M,N] = op(A) op(B), row-major, tiled and register-blocked (the scheme of CLBlast's xgemm and
// of the well-known CUDA SGEMM walk-throughs): a work-group computes a TM x TN tile of C, staging
// TK-deep slices of A and B in local memory (k-major, as float4); each work-item accumulates a
// WM x WN block in registers.
//
// Compile-time options (-D), chosen per device by the host:
//   TM, TN, TK  the work-group tile;  WM, WN  the work-item block (multiples of 4)
//   VEC         4: global loads and stores as float4 (the host checks the contiguous extents and
//               offsets are multiples of 4), 1: scalar
//   TRANS_A     A is stored [K, M];  TRANS_B  B is stored [N, K]
// Work-group size: (TN / WN, TM / WM). Any M, N, K: out-of-range elements load as zero.

#define LX (TN / WN)
#define LY (TM / WM)
#define THREADS (LX * LY)

__kernel __attribute__((reqd_work_group_size(LX, LY, 1))) void gemm(
    __global const float* A, int oa, __global const float* B, int ob, __global float* C, int oc,
    int M, int N, int K) {
  // k-major tiles, read as float4 by the inner loop.
  __local float4 As4[TK * TM / 4];
  __local float4 Bs4[TK * TN / 4];
  __local float* As = (__local float*)As4;
  __local float* Bs = (__local float*)Bs4;
  const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * LX + tx;
  const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
  A += oa;
  B += ob;
  float4 acc[WM][WN / 4];
  for (int i = 0; i < WM; ++i)
    for (int j = 0; j < WN / 4; ++j) acc[i][j] = (float4)(0.0f);

  for (int k0 = 0; k0 < K; k0 += TK) {
    // A's tile: TM x TK elements in vectors of VEC along A's contiguous dimension.
#if TRANS_A
    for (int e = tid; e < TK * TM / VEC; e += THREADS) {  // A[k][m], contiguous in m
      const int k = e / (TM / VEC), m = (e % (TM / VEC)) * VEC;
      const int gk = k0 + k, gm = m0 + m;
#if VEC == 4
      const float4 v = (gk < K && gm < M) ? vload4(0, A + gk * M + gm) : (float4)(0.0f);
      As4[(k * TM + m) / 4] = v;
#else
      As[(k) * TM + m] = (gk < K && gm < M) ? A[gk * M + gm] : 0.0f;
#endif
    }
#else
    for (int e = tid; e < TM * TK / VEC; e += THREADS) {  // A[m][k], contiguous in k
      const int m = e / (TK / VEC), k = (e % (TK / VEC)) * VEC;
      const int gm = m0 + m, gk = k0 + k;
#if VEC == 4
      const float4 v = (gm < M && gk < K) ? vload4(0, A + gm * K + gk) : (float4)(0.0f);
      As[(k) * TM + m] = v.x;
      As[(k + 1) * TM + m] = v.y;
      As[(k + 2) * TM + m] = v.z;
      As[(k + 3) * TM + m] = v.w;
#else
      As[(k) * TM + m] = (gm < M && gk < K) ? A[gm * K + gk] : 0.0f;
#endif
    }
#endif
    // B's tile: TK x TN.
#if TRANS_B
    for (int e = tid; e < TN * TK / VEC; e += THREADS) {  // B[n][k], contiguous in k
      const int n = e / (TK / VEC), k = (e % (TK / VEC)) * VEC;
      const int gn = n0 + n, gk = k0 + k;
#if VEC == 4
      const float4 v = (gn < N && gk < K) ? vload4(0, B + gn * K + gk) : (float4)(0.0f);
      Bs[(k) * TN + n] = v.x;
      Bs[(k + 1) * TN + n] = v.y;
      Bs[(k + 2) * TN + n] = v.z;
      Bs[(k + 3) * TN + n] = v.w;
#else
      Bs[(k) * TN + n] = (gn < N && gk < K) ? B[gn * K + gk] : 0.0f;
#endif
    }
#else
    for (int e = tid; e < TK * TN / VEC; e += THREADS) {  // B[k][n], contiguous in n
      const int k = e / (TN / VEC), n = (e % (TN / VEC)) * VEC;
      const int gk = k0 + k, gn = n0 + n;
#if VEC == 4
      const float4 v = (gk < K && gn < N) ? vload4(0, B + gk * N + gn) : (float4)(0.0f);
      Bs4[(k * TN + n) / 4] = v;
#else
      Bs[(k) * TN + n] = (gk < K && gn < N) ? B[gk * N + gn] : 0.0f;
#endif
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);

#pragma unroll
    for (int k = 0; k < TK; ++k) {
      float4 a[WM / 4], b[WN / 4];
#pragma unroll
      for (int i = 0; i < WM / 4; ++i) a[i] = As4[k * (TM / 4) + ty * (WM / 4) + i];
#pragma unroll
      for (int j = 0; j < WN / 4; ++j) b[j] = Bs4[k * (TN / 4) + tx * (WN / 4) + j];
#pragma unroll
      for (int i = 0; i < WM; ++i) {
        const float ai = ((float*)a)[i];
#pragma unroll
        for (int j = 0; j < WN / 4; ++j) acc[i][j] = fma((float4)(ai), b[j], acc[i][j]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  C += oc;
  for (int i = 0; i < WM; ++i) {
    const int gm = m0 + ty * WM + i;
    if (gm >= M) break;
    for (int j = 0; j < WN / 4; ++j) {
      const int gn = n0 + tx * WN + j * 4;
#if VEC == 4
      if (gn < N) vstore4(acc[i][j], 0, C + gm * N + gn);
#else
      const float* v = (const float*)&acc[i][j];
      for (int jj = 0; jj < 4; ++jj)
        if (gn + jj < N) C[gm * N + gn + jj] = v[jj];
#endif
    }
  }
}
