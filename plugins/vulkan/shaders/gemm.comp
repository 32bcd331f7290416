#version 450
// C[M,N] = op(A) op(B), row-major, tiled and register-blocked: a work-group computes a TM x TN
// tile of C, staging TK-deep slices of A and B in shared memory (as vec4, k-major); each
// invocation accumulates a WM x WN block in registers. Tile sizes are specialization constants
// chosen per device by the host; shared memory is TK * (TM + TN) * 4 bytes (16 KiB at 128/128/16).
// VEC: global loads and stores as vec4 (the host checks extents and offsets are multiples of 4).
// Any M, N, K: out-of-range elements load as zero and are not stored.
// Push: oa, ob, oc, M, N, K.
#include "common.glsl"

layout(local_size_y_id = 1) in;
layout(constant_id = 2) const int TM = 128;
layout(constant_id = 3) const int TN = 128;
layout(constant_id = 4) const int TK = 16;
layout(constant_id = 5) const int WM = 8;
layout(constant_id = 6) const int WN = 8;
layout(constant_id = 7) const bool VEC = false;
layout(constant_id = 8) const bool TRANS_A = false;  // A stored [K, M]
layout(constant_id = 9) const bool TRANS_B = false;  // B stored [N, K]

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(binding = 2) writeonly buffer C { float c[]; };
layout(binding = 2) writeonly buffer C4 { vec4 c4[]; };

const int LX = TN / WN, LY = TM / WM, THREADS = LX * LY;
shared vec4 As[TK * TM / 4];
shared vec4 Bs[TK * TN / 4];

void put_a(int k, int m, float v) {
  As[k * (TM / 4) + m / 4][m % 4] = v;
}
void put_b(int k, int n, float v) {
  Bs[k * (TN / 4) + n / 4][n % 4] = v;
}

void main() {
  const int oa = pc.w[0], ob = pc.w[1], oc = pc.w[2];
  const int M = pc.w[3], N = pc.w[4], K = pc.w[5];
  const int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
  const int tid = ty * LX + tx;
  const int m0 = int(gl_WorkGroupID.y) * TM, n0 = int(gl_WorkGroupID.x) * TN;
  const int V = VEC ? 4 : 1;

  vec4 acc[WM][WN / 4];
  for (int i = 0; i < WM; ++i)
    for (int j = 0; j < WN / 4; ++j) acc[i][j] = vec4(0.0);

  for (int k0 = 0; k0 < K; k0 += TK) {
    if (TRANS_A) {  // A[k][m], contiguous in m
      for (int e = tid; e < TK * TM / V; e += THREADS) {
        const int k = e / (TM / V), m = (e % (TM / V)) * V;
        const int gk = k0 + k, gm = m0 + m;
        if (VEC) {
          As[k * (TM / 4) + m / 4] = (gk < K && gm < M) ? a4[(oa + gk * M + gm) / 4] : vec4(0.0);
        } else {
          put_a(k, m, (gk < K && gm < M) ? a[oa + gk * M + gm] : 0.0);
        }
      }
    } else {  // A[m][k], contiguous in k
      for (int e = tid; e < TM * TK / V; e += THREADS) {
        const int m = e / (TK / V), k = (e % (TK / V)) * V;
        const int gm = m0 + m, gk = k0 + k;
        if (VEC) {
          const vec4 v = (gm < M && gk < K) ? a4[(oa + gm * K + gk) / 4] : vec4(0.0);
          for (int j = 0; j < 4; ++j) put_a(k + j, m, v[j]);
        } else {
          put_a(k, m, (gm < M && gk < K) ? a[oa + gm * K + gk] : 0.0);
        }
      }
    }
    if (TRANS_B) {  // B[n][k], contiguous in k
      for (int e = tid; e < TN * TK / V; e += THREADS) {
        const int n = e / (TK / V), k = (e % (TK / V)) * V;
        const int gn = n0 + n, gk = k0 + k;
        if (VEC) {
          const vec4 v = (gn < N && gk < K) ? b4[(ob + gn * K + gk) / 4] : vec4(0.0);
          for (int j = 0; j < 4; ++j) put_b(k + j, n, v[j]);
        } else {
          put_b(k, n, (gn < N && gk < K) ? b[ob + gn * K + gk] : 0.0);
        }
      }
    } else {  // B[k][n], contiguous in n
      for (int e = tid; e < TK * TN / V; e += THREADS) {
        const int k = e / (TN / V), n = (e % (TN / V)) * V;
        const int gk = k0 + k, gn = n0 + n;
        if (VEC) {
          Bs[k * (TN / 4) + n / 4] = (gk < K && gn < N) ? b4[(ob + gk * N + gn) / 4] : vec4(0.0);
        } else {
          put_b(k, n, (gk < K && gn < N) ? b[ob + gk * N + gn] : 0.0);
        }
      }
    }
    barrier();

    for (int k = 0; k < TK; ++k) {
      vec4 av[WM / 4], bv[WN / 4];
      for (int i = 0; i < WM / 4; ++i) av[i] = As[k * (TM / 4) + ty * (WM / 4) + i];
      for (int j = 0; j < WN / 4; ++j) bv[j] = Bs[k * (TN / 4) + tx * (WN / 4) + j];
      for (int i = 0; i < WM; ++i) {
        const float ai = av[i / 4][i % 4];
        for (int j = 0; j < WN / 4; ++j) acc[i][j] = fma(vec4(ai), bv[j], acc[i][j]);
      }
    }
    barrier();
  }

  for (int i = 0; i < WM; ++i) {
    const int gm = m0 + ty * WM + i;
    if (gm >= M) break;
    for (int j = 0; j < WN / 4; ++j) {
      const int gn = n0 + tx * WN + j * 4;
      if (VEC) {
        if (gn < N) c4[(oc + gm * N + gn) / 4] = acc[i][j];
      } else {
        for (int jj = 0; jj < 4; ++jj)
          if (gn + jj < N) c[oc + gm * N + gn + jj] = acc[i][j][jj];
      }
    }
  }
}
