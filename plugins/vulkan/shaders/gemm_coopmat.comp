#version 450
// C = op(A) op(B) in f16 on matrix units (VK_NV_cooperative_matrix), f32 sums rounded once (or
// kept, with a bias added: out_dtype f32): the Vulkan plugin's own kernel for matmul, bmm and
// addmm of f16 tensors where the device has them (../../common/ops_gemm.cpp launches it as
// "gemm_coopmat" with gemm.tk's parameter words).
// Debian 12's glslang (11.13) compiles GL_NV_cooperative_matrix but not the KHR extension nor
// bf16 types: the bf16 kernel ("gemm_coopmat_bf16") is this module's SPIR-V with its f16
// fragments retyped bf16 and its matrix instructions in their KHR form (../spirv_bf16.h). So
// f16 appears here in the matrix types alone: operands move as raw 16-bit words, and the sums
// are rounded by converting the f32 accumulators (to bf16 in the rewritten module). Devices
// without the extensions take gemm.tk.
//
// A work-group computes a BM x BN tile of one output matrix: WARPS_M x WARPS_N subgroups of 32,
// each FM x FN fragments of 16 x FW (from 16 x 16 fragments of A and 16 x FW of B; FW 16: the
// shape NVIDIA offers bf16 in, 8: its m16n8k16). K goes in slices of 32 halves, two shared
// buffers: while the subgroups multiply one slice, each invocation holds its 16-byte chunks of
// the next in registers. Shared tiles keep the layout of the operand in memory (rows of K for A,
// of N for B; transposed operands' rows of M and K): the fragments load transposed where needed
// (column-major), so the copy is always row by row, 16 bytes at a time. Rows are padded by 16
// bytes against bank conflicts.
// The host guarantees: every operand's rows (K, or M and N where transposed) and C's (N) are
// multiples of 8 halves, and each binding's offset is too (16-byte loads and stores).
// Bindings: 0 a, 1 b, 2 c [batch, M, N], 3 bias [N] (V0 & 16; else a again, unread). Words as
// gemm.tk's (MODE 0): P(0) M, P(1) N, P(2) K, P(3) tiles across N, P(4) tiles per matrix, P(5)
// batch rank, P(6..9) batch extents, P(10..13) a's and P(14..17) b's matrix strides, P(18)
// matrices. V0: 1 a stored [K, M], 2 b stored [N, K], 4 split K: work-group batch part *
// matrices + matrix sums K in [part * P(19), (part + 1) * P(19)) (P(19) a multiple of 32) and
// stores its f32 sums to c [parts, matrices, M, N] (M and N multiples of the tile: whole tiles,
// stored straight from the fragments); the host adds the parts up. 8: c in f32 (out_dtype f32:
// the sums, not rounded), 16: with an f32 bias added to every row (the bias's offset a multiple
// of 4 floats).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

// The subgroups' layout (kTileM x kTileN and kThreads in ops_gemm.cpp must match): WARPS_M x
// WARPS_N subgroups, each FM x FN fragments of 16 x FW.
#ifndef WARPS_M
#define WARPS_M 2
#define WARPS_N 4
#define FM 4
#define FN 2
#endif
#ifndef FW  // fragment columns: 16 (16 x 16 x 16 products, the shape bf16 is offered in), or 8
#define FW 16
#endif
#define THREADS (32 * WARPS_M * WARPS_N)
layout(local_size_x = THREADS) in;
layout(constant_id = 2) const int V0 = 0;

layout(push_constant) uniform CmPush {
  int w[32];
} pc;

layout(binding = 0) readonly restrict buffer CmA { uvec4 v[]; } cm_a;
layout(binding = 1) readonly restrict buffer CmB { uvec4 v[]; } cm_b;
layout(binding = 2) writeonly restrict buffer CmC { uvec4 v[]; } cm_c;
layout(binding = 2) writeonly restrict buffer CmCF { float v[]; } cm_cf;  // split K's f32 parts
layout(binding = 3) readonly restrict buffer CmBias { vec4 v[]; } cm_bias;

#define P(i) pc.w[9 + (i)]
#define NGROUPS pc.w[8]
#define TRANS_A ((V0 & 1) != 0)
#define TRANS_B ((V0 & 2) != 0)
#define SPLIT ((V0 & 4) != 0)
#define WIDE ((V0 & 8) != 0)
#define BIAS ((V0 & 16) != 0)

// K slices of BK halves in BUFFERS shared buffers (two: the next slice is stored while this one
// is multiplied, one barrier a slice; one: stored after it, two barriers).
#ifndef BK_HALVES
#define BK_HALVES 32
#define BUFFERS 2
#endif
const int BM = WARPS_M * FM * 16, BN = WARPS_N * FN * FW, BK = BK_HALVES;
// Padded rows, in uvec4s (8 halves): [BM][BK] and [BN][BK] tiles have rows of BK + 8 halves,
// [BK][BM] and [BK][BN] of BM + 8 and BN + 8.
const int RK = (BK + 8) / 8, RM = (BM + 8) / 8, RN = (BN + 8) / 8;
// uvec4s of one buffer's A tile and B tile (either layout), and of the output staging.
const int TILE_A = max(BM * RK, BK * RM), TILE_B = max(BN * RK, BK * RN);
// The epilogue stages PER subgroups' outputs at a time (SUB uvec4s each: rows of FN * FW
// elements, 16-bit or, larger, f32, and a uvec4 of padding) in the buffers' space.
const int NSUB = WARPS_M * WARPS_N, SUB = FM * 16 * (FN * FW / 8 + 1);
const int SUB_F32 = FM * 16 * (FN * FW / 4 + 1);
const int AREA = BUFFERS * (TILE_A + TILE_B), PER_16 = min(NSUB, max(1, AREA / SUB)),
          PER_F32 = min(NSUB, max(1, AREA / SUB_F32));
shared uvec4 sm[max(AREA, max(PER_16 * SUB, PER_F32 * SUB_F32))];
// 16-byte chunks of a slice per invocation: A's, B's.
const int CHUNKS_A = BM * BK / 8 / THREADS, CHUNKS_B = BN * BK / 8 / THREADS;

// Chunk c of a slice of a tile of |width| halves a row: the tile starts at row r0, column c0 of
// a matrix with |cols| columns (and |rows| rows) at uvec4 |base|; zero past the edges.
uvec4 fetch_a(int c, int base, int r0, int c0, int rows, int cols, int width) {
  const int r = r0 + c / (width / 8), col = c0 + (c % (width / 8)) * 8;
  if (r >= rows || col >= cols) return uvec4(0u);
  return cm_a.v[base + (r * cols + col) / 8];
}
uvec4 fetch_b(int c, int base, int r0, int c0, int rows, int cols, int width) {
  const int r = r0 + c / (width / 8), col = c0 + (c % (width / 8)) * 8;
  if (r >= rows || col >= cols) return uvec4(0u);
  return cm_b.v[base + (r * cols + col) / 8];
}
// Where chunk c of such a tile goes in shared memory (uvec4 index within the tile).
int place(int c, int width) {
  return (c / (width / 8)) * ((width + 8) / 8) + c % (width / 8);
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
  const int part = SPLIT ? batch / P(18) : 0;  // split K: this part's slices [s0, s1)
  int rest = SPLIT ? batch - part * P(18) : batch;
  for (int d = P(5) - 1; d >= 0; --d) {
    const int e = P(6 + d);
    const int c = rest % e;
    rest = rest / e;
    oa += c * P(10 + d);
    ob += c * P(14 + d);
  }
  const int base_a = (pc.w[0] + oa) / 8, base_b = (pc.w[1] + ob) / 8;

  const int sg = lid / 32;  // subgroup: rows (sg / WARPS_N) * FM * 16, columns ... * FN * FW
  const int wm = (sg / WARPS_N) * FM * 16, wn = (sg % WARPS_N) * FN * FW;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, FW> acc[FM][FN];
  [[unroll]] for (int i = 0; i < FM; ++i)
    [[unroll]] for (int j = 0; j < FN; ++j)
      acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, FW>(0.0);

  // This invocation's chunks of a slice at k0: A's, then B's.
  uvec4 pre[CHUNKS_A + CHUNKS_B];
#define FETCH(k0)                                                                          \
  [[unroll]] for (int q = 0; q < CHUNKS_A; ++q)                                            \
    pre[q] = TRANS_A ? fetch_a(lid + q * THREADS, base_a, (k0), m0, K, M, BM)              \
                     : fetch_a(lid + q * THREADS, base_a, m0, (k0), M, K, BK);             \
  [[unroll]] for (int q = 0; q < CHUNKS_B; ++q)                                            \
    pre[CHUNKS_A + q] = TRANS_B ? fetch_b(lid + q * THREADS, base_b, n0, (k0), N, K, BK)   \
                                : fetch_b(lid + q * THREADS, base_b, (k0), n0, K, N, BN);
#define STORE(buf)                                                                         \
  [[unroll]] for (int q = 0; q < CHUNKS_A; ++q)                                            \
    sm[(buf) * (TILE_A + TILE_B) + place(lid + q * THREADS, TRANS_A ? BM : BK)] = pre[q];  \
  [[unroll]] for (int q = 0; q < CHUNKS_B; ++q)                                            \
    sm[(buf) * (TILE_A + TILE_B) + TILE_A + place(lid + q * THREADS, TRANS_B ? BK : BN)] = \
        pre[CHUNKS_A + q];

  const int s0 = SPLIT ? part * (P(19) / BK) : 0;
  const int slices = SPLIT ? min((K + BK - 1) / BK, s0 + P(19) / BK) : (K + BK - 1) / BK;
  FETCH(s0 * BK)
  STORE(0)
  barrier();
  for (int s = s0; s < slices; ++s) {
    const int buf = BUFFERS == 2 ? (s - s0) & 1 : 0;
    if (s + 1 < slices) FETCH((s + 1) * BK)
    const int ta = buf * (TILE_A + TILE_B), tb = ta + TILE_A;
    [[unroll]] for (int kk = 0; kk < BK; kk += 16) {
      // B's fragments of this step, then A's one at a time (fewer registers live).
      fcoopmatNV<16, gl_ScopeSubgroup, 16, FW> fb[FN];
      [[unroll]] for (int j = 0; j < FN; ++j) {
        if (TRANS_B)  // [BN][BK]: B's element (k, n) at n * RK + k
          coopMatLoadNV(fb[j], sm, uint(tb + (wn + j * FW) * RK + kk / 8), uint(RK), true);
        else  // [BK][BN]
          coopMatLoadNV(fb[j], sm, uint(tb + kk * RN + (wn + j * FW) / 8), uint(RN), false);
      }
      [[unroll]] for (int i = 0; i < FM; ++i) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa;
        if (TRANS_A)  // [BK][BM]: A's element (m, k) at k * RM + m
          coopMatLoadNV(fa, sm, uint(ta + kk * RM + (wm + i * 16) / 8), uint(RM), true);
        else  // [BM][BK]
          coopMatLoadNV(fa, sm, uint(ta + (wm + i * 16) * RK + kk / 8), uint(RK), false);
        [[unroll]] for (int j = 0; j < FN; ++j) acc[i][j] = coopMatMulAddNV(fa, fb[j], acc[i][j]);
      }
    }
    if (BUFFERS == 2) {
      if (s + 1 < slices) STORE(buf ^ 1)
      barrier();
    } else {
      barrier();
      if (s + 1 < slices) {
        STORE(0)
        barrier();
      }
    }
  }

  if (SPLIT) {  // whole tiles: each fragment's f32 sums straight to this part's c
    const int at = pc.w[2] + batch * M * N + (m0 + wm) * N + n0 + wn;
    [[unroll]] for (int i = 0; i < FM; ++i)
      [[unroll]] for (int j = 0; j < FN; ++j)
        coopMatStoreNV(acc[i][j], cm_cf.v, uint(at + i * 16 * N + j * FW), uint(N), false);
    return;
  }
  // Rounded to the 16-bit type (or kept in f32: WIDE) and staged through shared memory (each
  // subgroup's FM * 16 x FN * FW as rows of RS uvec4s; PER subgroups a round), then stored 16
  // bytes at a time within C's edges, the bias added to f32 sums on the way. (Whole f32 tiles
  // stored straight from the fragments, the bias loaded into the sums first, were 3% slower on
  // the GPT's step: docs/performance.md.)
  const int E = WIDE ? 4 : 8;               // C's elements in a uvec4
  const int CH = FN * FW / E, RS = CH + 1;  // a staged row's chunks of E columns; its uvec4s
  const int PER = WIDE ? PER_F32 : PER_16;
  const int stage = (sg % PER) * (WIDE ? SUB_F32 : SUB);
  const int lane = lid % 32;
  const int base_c = (pc.w[2] + batch * M * N) / E;
  for (int round = 0; round < (NSUB + PER - 1) / PER; ++round) {
    if (sg / PER == round) {
      [[unroll]] for (int i = 0; i < FM; ++i)
        [[unroll]] for (int j = 0; j < FN; ++j) {
          if (WIDE) {
            coopMatStoreNV(acc[i][j], sm, uint(stage + i * 16 * RS + j * FW / 4), uint(RS), false);
          } else {
            fcoopmatNV<16, gl_ScopeSubgroup, 16, FW> h =
                fcoopmatNV<16, gl_ScopeSubgroup, 16, FW>(acc[i][j]);
            coopMatStoreNV(h, sm, uint(stage + i * 16 * RS + j * FW / 8), uint(RS), false);
          }
        }
    }
    barrier();
    if (sg / PER == round) {
      [[unroll]] for (int it = 0; it < FM * 16 * CH / 32; ++it) {
        const int c = lane + it * 32;  // of the subgroup's FM * 16 rows x CH chunks
        const int r = c / CH, col = c % CH;
        const int m = m0 + wm + r, n = n0 + wn + col * E;
        if (m < M && n < N) {
          uvec4 v = sm[stage + r * RS + col];
          if (BIAS) v = floatBitsToUint(uintBitsToFloat(v) + cm_bias.v[pc.w[3] / 4 + n / 4]);
          cm_c.v[base_c + (m * N + n) / E] = v;
        }
      }
    }
    barrier();
  }
}
