#version 450
// C = op(A) op(B) in f16 on matrix units (VK_NV_cooperative_matrix), f32 sums rounded once: the
// Vulkan plugin's own kernel for matmul and bmm of f16 tensors where the device has them
// (../../common/ops_gemm.cpp launches it as "gemm_coopmat" with gemm.tk's parameter words).
// Debian 12's glslang (11.13) compiles GL_NV_cooperative_matrix but not the KHR extension nor
// bf16 types, so bf16 and devices without the NV extension take gemm.tk.
//
// A work-group of 256 invocations (8 subgroups of 32) computes a 128 x 128 tile of one output
// matrix; subgroup s a 64 x 32 part of it (2 x 4 subgroups), as 4 x 4 fragments of 16 x 8 from
// 16 x 16 fragments of A and 16 x 8 of B (the m16n8k16 shape of NVIDIA's tensor cores). K goes in
// slices of 32 halves, two shared-memory buffers: while the subgroups multiply one slice, each
// invocation holds its four 16-byte chunks of the next in registers. Shared tiles keep the layout
// of the operand in memory (rows of K for A, of N for B; transposed operands' rows of M and K):
// the fragments load transposed where needed (column-major), so the copy is always row by row,
// 16 bytes at a time. Rows are padded by 16 bytes against bank conflicts.
// The host guarantees: every operand's rows (K, or M and N where transposed) and C's (N) are
// multiples of 8 halves, and each binding's offset is too (16-byte loads and stores).
// Bindings: 0 a, 1 b, 2 c [batch, M, N]. Words as gemm.tk's (MODE 0): P(0) M, P(1) N, P(2) K,
// P(3) tiles across N, P(4) tiles per matrix, P(5) batch rank, P(6..9) batch extents,
// P(10..13) a's and P(14..17) b's matrix strides, P(18) matrices. V0: 1 a stored [K, M], 2 b
// stored [N, K].
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 2) const int V0 = 0;

layout(push_constant) uniform CmPush {
  int w[32];
} pc;

layout(binding = 0) readonly restrict buffer CmA { uvec4 v[]; } cm_a;
layout(binding = 1) readonly restrict buffer CmB { uvec4 v[]; } cm_b;
layout(binding = 2) writeonly restrict buffer CmC { uvec4 v[]; } cm_c;

#define P(i) pc.w[9 + (i)]
#define NGROUPS pc.w[8]
#define TRANS_A ((V0 & 1) != 0)
#define TRANS_B ((V0 & 2) != 0)

const int BM = 128, BN = 128, BK = 32;
// Padded rows, in uvec4s (8 halves): [BM][BK] and [BN][BK] tiles have rows of BK + 8 halves,
// [BK][BM] and [BK][BN] of BM + 8.
const int RK = (BK + 8) / 8, RM = (BM + 8) / 8;
const int TILE = 640;  // uvec4s of one operand's tile: max(BM * RK, BK * RM)
shared uvec4 sm[4 * TILE];  // two buffers of A's tile then B's (40 KiB)

// Chunk c (of 512) of a slice: A's tile starts at row r0, column c0 of a matrix with |cols|
// columns (and |rows| rows) at uvec4 |base|; zero past the rows. Tiles of 128 x 32 or 32 x 128.
uvec4 fetch_a(int c, int base, int r0, int c0, int rows, int cols, bool wide) {
  const int per = wide ? BM / 8 : BK / 8;  // chunks per tile row
  const int r = r0 + c / per, col = c0 + (c % per) * 8;
  if (r >= rows || col >= cols) return uvec4(0u);
  return cm_a.v[base + (r * cols + col) / 8];
}
uvec4 fetch_b(int c, int base, int r0, int c0, int rows, int cols, bool wide) {
  const int per = wide ? BN / 8 : BK / 8;
  const int r = r0 + c / per, col = c0 + (c % per) * 8;
  if (r >= rows || col >= cols) return uvec4(0u);
  return cm_b.v[base + (r * cols + col) / 8];
}
// Where chunk c of a tile goes in shared memory (uvec4 index within the tile).
int place(int c, bool wide) {
  return wide ? (c / (BM / 8)) * RM + c % (BM / 8) : (c / (BK / 8)) * RK + c % (BK / 8);
}

void main() {
  const int group = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
  if (group >= NGROUPS) return;
  const int lid = int(gl_LocalInvocationID.x);
  const int M = P(0), N = P(1), K = P(2);
  const int tiles = P(4);
  const int batch = group / tiles;
  const int tile = group - batch * tiles;
  const int m0 = (tile / P(3)) * BM;
  const int n0 = (tile - (tile / P(3)) * P(3)) * BN;
  int oa = 0, ob = 0;
  int rest = batch;
  for (int d = P(5) - 1; d >= 0; --d) {
    const int e = P(6 + d);
    const int c = rest % e;
    rest = rest / e;
    oa += c * P(10 + d);
    ob += c * P(14 + d);
  }
  const int base_a = (pc.w[0] + oa) / 8, base_b = (pc.w[1] + ob) / 8;

  const int sg = lid / 32;  // subgroup: rows (sg / 4) * 64, columns (sg % 4) * 32 of the tile
  const int wm = (sg / 4) * 64, wn = (sg % 4) * 32;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 8> acc[4][4];
  [[unroll]] for (int i = 0; i < 4; ++i)
    [[unroll]] for (int j = 0; j < 4; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>(0.0);

  // This invocation's chunks of a slice at k0: A's (2), then B's (2).
  uvec4 pre[4];
#define FETCH(k0)                                                                          \
  [[unroll]] for (int q = 0; q < 2; ++q) {                                                 \
    const int c = lid + q * 256;                                                           \
    pre[q] = TRANS_A ? fetch_a(c, base_a, (k0), m0, K, M, true)                            \
                     : fetch_a(c, base_a, m0, (k0), M, K, false);                          \
    pre[2 + q] = TRANS_B ? fetch_b(c, base_b, n0, (k0), N, K, false)                       \
                         : fetch_b(c, base_b, (k0), n0, K, N, true);                       \
  }
#define STORE(buf)                                                                         \
  [[unroll]] for (int q = 0; q < 2; ++q) {                                                 \
    const int c = lid + q * 256;                                                           \
    sm[(buf) * 2 * TILE + place(c, TRANS_A)] = pre[q];                                     \
    sm[(buf) * 2 * TILE + TILE + place(c, !TRANS_B)] = pre[2 + q];                         \
  }

  const int slices = (K + BK - 1) / BK;
  FETCH(0)
  STORE(0)
  barrier();
  for (int s = 0; s < slices; ++s) {
    const int buf = s & 1;
    if (s + 1 < slices) FETCH((s + 1) * BK)
    const int ta = buf * 2 * TILE, tb = ta + TILE;
    [[unroll]] for (int kk = 0; kk < BK; kk += 16) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[4];
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 8> fb[4];
      [[unroll]] for (int i = 0; i < 4; ++i) {
        if (TRANS_A)  // [BK][BM]: A's element (m, k) at k * RM + m
          coopMatLoadNV(fa[i], sm, uint(ta + kk * RM + (wm + i * 16) / 8), uint(RM), true);
        else  // [BM][BK]
          coopMatLoadNV(fa[i], sm, uint(ta + (wm + i * 16) * RK + kk / 8), uint(RK), false);
      }
      [[unroll]] for (int j = 0; j < 4; ++j) {
        if (TRANS_B)  // [BN][BK]: B's element (k, n) at n * RK + k
          coopMatLoadNV(fb[j], sm, uint(tb + (wn + j * 8) * RK + kk / 8), uint(RK), true);
        else  // [BK][BN]
          coopMatLoadNV(fb[j], sm, uint(tb + kk * RM + (wn + j * 8) / 8), uint(RM), false);
      }
      [[unroll]] for (int i = 0; i < 4; ++i)
        [[unroll]] for (int j = 0; j < 4; ++j) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
    }
    if (s + 1 < slices) STORE(buf ^ 1)
    barrier();
  }

  // Rounded to f16 and staged through shared memory (each subgroup's 64 x 32 as rows of 5
  // uvec4s), then stored 16 bytes at a time within C's edges.
  const int stage = sg * 64 * 5;
  [[unroll]] for (int i = 0; i < 4; ++i)
    [[unroll]] for (int j = 0; j < 4; ++j) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 8> h = fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>(acc[i][j]);
      coopMatStoreNV(h, sm, uint(stage + i * 16 * 5 + j), 5u, false);
    }
  barrier();
  const int lane = lid % 32;
  const int base_c = (pc.w[2] + batch * M * N) / 8;
  [[unroll]] for (int it = 0; it < 8; ++it) {
    const int c = lane + it * 32;  // of the subgroup's 64 rows x 4 chunks
    const int r = c / 4, col = c % 4;
    const int m = m0 + wm + r, n = n0 + wn + col * 8;
    if (m < M && n < N) cm_c.v[base_c + (m * N + n) / 8] = sm[stage + r * 5 + col];
  }
}
