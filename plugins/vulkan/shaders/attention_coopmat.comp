#version 450
// Scaled dot-product attention of f16 tensors on matrix units (VK_NV_cooperative_matrix, 16 x 16
// x 16 products summed in f32): the Vulkan plugin's own kernels for the fused op and its backward
// where the device has them (../../common/ops_attention.cpp launches them as "attention_coopmat"
// with the register-tiled kernels' parameter words). The bf16 kernels ("attention_coopmat_bf16")
// are this module's SPIR-V with its fragments retyped bf16 (../spirv_bf16.h), as the GEMM's: f16
// appears here in the matrix types alone, values move as raw 16-bit words, and the rounding to
// 16 bits is integer code (BF16) or packHalf2x16.
//
// Three kernels, chosen by V0 & 3, each a work-group of four subgroups of 32 over a block of 64
// rows (16 a subgroup) and head dims up to 64 (shorter rows are zero-padded in shared memory):
// - 0, forward (as flash_fwd.tk): per block of 64 query rows, the keys in tiles of 64: S = q k^T
//   on matrix units; the online softmax (dropout as the op's mask) in scalar code, two lanes a
//   row, on S staged in shared memory; P rounded to 16 bits; P v on matrix units, staged, added
//   into the lanes' output rows (32 floats a lane), rescaled as the row maximum grows.
// - 1, backward, key side (as flash_bwd_kv.tk): per block of 64 keys, the query tiles at or after
//   it (causal) or all: S^T = k q^T, P^T, dv += P^T grad_out, dP^T = v grad_out^T,
//   dS^T = P (dP - delta) scale, dk += dS^T q; every dS tile is also stored (16-bit,
//   [keys][queries], zeros outside the matrix and the mask) for the third kernel.
// - 2, backward, dq = dS k from those tiles (as flash_bwd_dq.tk).
// Sums are f32 throughout; the products' operands (q, k, v, P, grad_out, dS) are 16-bit.
//
// Bindings (16-bit tensors' offsets and row lengths E, Ev multiples of 8 elements; f32 ones' of 4):
//   0: 0 q, 1 k, 2 v, 3 out, 4 lse (f32)
//   1: 0 q, 1 k, 2 v, 3 grad_out, 4 [lse, delta] per query row (f32), 5 dk, 6 dv, 7 dS tiles
//   2: 0 k, 1 dS tiles, 2 dq
// out, grad_out and the gradients are f32 with V0 & 8 (out_dtype f32), else 16-bit; V0 & 4: the
// 16-bit type is bf16 (the host sets it for the bf16 module).
// Words as the register-tiled kernels' (ops_attention.cpp, block_words()): P(0) L, P(1) S, P(2) E,
// P(3) Ev, PF(4) scale, P(5) causal, PF(6) dropout p, P(7) dropout key, PF(8) 1/(1-p), P(9) query
// blocks nq, P(10) key blocks nk per batch*head, P(11) the launch's heads, P(12) the first.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

layout(local_size_x = 128) in;
layout(constant_id = 2) const int V0 = 0;

layout(push_constant) uniform AtPush {
  int w[32];
} pc;

// Each binding as 16-byte chunks, read-only and write-only views apart (the kernels never read
// and write one binding), and as floats for the row statistics.
layout(binding = 0) readonly restrict buffer R0 { uvec4 v[]; } r0;
layout(binding = 1) readonly restrict buffer R1 { uvec4 v[]; } r1;
layout(binding = 2) readonly restrict buffer R2 { uvec4 v[]; } r2;
layout(binding = 3) readonly restrict buffer R3 { uvec4 v[]; } r3;
layout(binding = 4) readonly restrict buffer R4 { float v[]; } r4;
layout(binding = 2) writeonly restrict buffer W2 { uvec4 v[]; } w2;
layout(binding = 3) writeonly restrict buffer W3 { uvec4 v[]; } w3;
layout(binding = 4) writeonly restrict buffer W4 { float v[]; } w4;
layout(binding = 5) writeonly restrict buffer W5 { uvec4 v[]; } w5;
layout(binding = 6) writeonly restrict buffer W6 { uvec4 v[]; } w6;
layout(binding = 7) writeonly restrict buffer W7 { uvec4 v[]; } w7;

#define P(i) pc.w[9 + (i)]
#define PF(i) intBitsToFloat(pc.w[9 + (i)])
#define NGROUPS pc.w[8]
#define KIND (V0 & 3)
#define BF16 ((V0 & 4) != 0)
#define WIDE ((V0 & 8) != 0)
#define MASKED -3.0e38f

// Shared memory in 16-byte chunks: 16-bit tiles of 64 rows x 64 (rows of 72 halves, R16 chunks:
// the padding against bank conflicts), and per subgroup an area of 16 x 64 f32 (rows of 68
// floats) that takes, in turn, a product's sums, then the 16-bit operand made from them (16 x 64,
// rows of R16 chunks) and the next product's sums: each subgroup owns its rows (its softmax
// needs no other's), so only the tiles all four read are fenced by work-group barriers.
const int R16 = 9, TILE16 = 64 * R16, R32 = 17, SUB32 = 16 * R32;
// Forward: A (q's tile, then k's), B (v's), F (the subgroups' areas: S, P, P v).
// Key side: A (k's tile, then q's), B (v's tile, then grad_out's), F (S^T, P^T, dP^T, dS^T, the
// results), ST (lse and delta of the tile's 64 rows).
// dq: A (k's tiles), F (the result).
const int AREA_A = 0, AREA_B = TILE16, AREA_F = 2 * TILE16, AREA_ST = AREA_F + 4 * SUB32;
shared uvec4 sm[AREA_ST + 32];

// The subgroup's invocations past this point once all reached it, their shared memory accesses
// before it done (each subgroup's own area).
void subgroup_sync() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// Chunk i of binding b's 16-bit or f32 view.
uvec4 load_chunk(int b, int i) {
  if (b == 0) return r0.v[i];
  if (b == 1) return r1.v[i];
  if (b == 2) return r2.v[i];
  return r3.v[i];
}

// a, b rounded to the 16-bit type, a in the low half.
uint pack2(float a, float b) {
  if (!BF16) return packHalf2x16(vec2(a, b));
  uint x = floatBitsToUint(a), y = floatBitsToUint(b);
  x = (x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  y = (y & 0x7fffffffu) > 0x7f800000u ? (y >> 16) | 0x40u : (y + 0x7fffu + ((y >> 16) & 1u)) >> 16;
  return x | (y << 16);
}

// A 64-row tile of binding b into shared memory at |dst|, 16-bit: rows r0 .. r0 + rows of a
// matrix of |cols| elements a row whose first element is element |base|, zeros past |rows| and
// |cols| (to 64). With |wide| the binding is f32, rounded to 16 bits here.
void stage(int b, int base, int rows, int cols, int dst, bool wide) {
  [[unroll]] for (int t = 0; t < 4; ++t) {
    const int c = int(gl_LocalInvocationID.x) + t * 128;  // of 64 rows x 8 chunks of 8
    const int r = c >> 3, ch = c & 7;
    uvec4 v = uvec4(0u);
    if (r < rows && ch * 8 < cols) {
      if (wide) {
        const int at = (base + r * cols + ch * 8) >> 2;
        const vec4 x = uintBitsToFloat(load_chunk(b, at));
        const vec4 y = uintBitsToFloat(load_chunk(b, at + 1));
        v = uvec4(pack2(x.x, x.y), pack2(x.z, x.w), pack2(y.x, y.y), pack2(y.z, y.w));
      } else {
        v = load_chunk(b, (base + r * cols + ch * 8) >> 3);
      }
    }
    sm[dst + r * R16 + ch] = v;
  }
}

// 32 values of a row into binding b (columns c0 .. c0 + 32 of a row starting at element |at|,
// those below |cols|), f32 with |wide|, else rounded to 16 bits.
void store_row(int b, int at, int c0, int cols, float x[32], bool wide) {
  if (wide) {
    [[unroll]] for (int t = 0; t < 8; ++t) {
      if (c0 + t * 4 >= cols) break;
      const uvec4 v = floatBitsToUint(vec4(x[t * 4], x[t * 4 + 1], x[t * 4 + 2], x[t * 4 + 3]));
      const int i = (at + c0 + t * 4) >> 2;
      if (b == 3) w3.v[i] = v;
      else if (b == 5) w5.v[i] = v;
      else if (b == 6) w6.v[i] = v;
      else w2.v[i] = v;
    }
  } else {
    [[unroll]] for (int t = 0; t < 4; ++t) {
      if (c0 + t * 8 >= cols) break;
      const uvec4 v = uvec4(pack2(x[t * 8], x[t * 8 + 1]), pack2(x[t * 8 + 2], x[t * 8 + 3]),
                            pack2(x[t * 8 + 4], x[t * 8 + 5]), pack2(x[t * 8 + 6], x[t * 8 + 7]));
      const int i = (at + c0 + t * 8) >> 3;
      if (b == 3) w3.v[i] = v;
      else if (b == 5) w5.v[i] = v;
      else if (b == 6) w6.v[i] = v;
      else w2.v[i] = v;
    }
  }
}

// The lane's 32 floats of row |row|, half |h|, of the subgroup's f32 area at |area|.
void read_row(int area, int row, int h, inout float x[32]) {
  [[unroll]] for (int t = 0; t < 8; ++t) {
    const vec4 v = uintBitsToFloat(sm[area + row * R32 + h * 8 + t]);
    x[t * 4] = v.x;
    x[t * 4 + 1] = v.y;
    x[t * 4 + 2] = v.z;
    x[t * 4 + 3] = v.w;
  }
}

// The lane's 32 values rounded to 16 bits into row |row|, half |h|, of a 16-bit area.
void write_row16(int area, int row, int h, float x[32]) {
  [[unroll]] for (int t = 0; t < 4; ++t)
    sm[area + row * R16 + h * 4 + t] =
        uvec4(pack2(x[t * 8], x[t * 8 + 1]), pack2(x[t * 8 + 2], x[t * 8 + 3]),
              pack2(x[t * 8 + 4], x[t * 8 + 5]), pack2(x[t * 8 + 6], x[t * 8 + 7]));
}

// The dropout mask's factor for element n of the op's [..., L, S] probabilities: 0 where
// dropout_uniform (op.h; kernels/common.tk's tk_uniform: the hash's top 24 bits u as u / 2^24) is
// below p, else 1/(1-p). |bound| is drop_bound(p): u / 2^24 >= p exactly where u >= bound, so the
// test stays in integers (no conversion an element).
float keep_factor(uint key, uint n, uint bound, float keep) {
  uint x = n ^ key;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return (x >> 8) >= bound ? keep : 0.0f;
}

// ceil(p * 2^24) for p in [0, 1) (exact: p * 2^24 is), keep_factor's bound.
uint drop_bound(float p) {
  return uint(ceil(p * 16777216.0f));
}

#define F16M fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32M fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

void forward(int group) {
  const int L = P(0), S = P(1), E = P(2), EV = P(3), causal = P(5), nb = P(9), nbh = P(11);
  const float scale = PF(4), drop = PF(6), keep = PF(8);
  const uint key = uint(P(7)), bound = drop_bound(drop);
  // The longest causal blocks first, across all heads.
  const int i0 = (nb - 1 - group / nbh) * 64, bh = group % nbh;
  const int lid = int(gl_LocalInvocationID.x), sg = lid >> 5, lane = lid & 31;
  const int lr = lane >> 1, h = lane & 1;  // the lane's row of the subgroup's 16, and half
  const int row = i0 + sg * 16 + lr;
  const int rows = min(64, L - i0);
  const int kend = causal == 1 ? min(S, i0 + rows) : S;
  const int fs = AREA_F + sg * SUB32;

  stage(0, pc.w[0] + (bh * L + i0) * E, rows, E, AREA_A, false);
  barrier();
  F16M qf[4];
  [[unroll]] for (int kk = 0; kk < 4; ++kk)
    coopMatLoadNV(qf[kk], sm, uint(AREA_A + sg * 16 * R16 + kk * 2), uint(R16), false);
  float o[32], x[32];
  [[unroll]] for (int c = 0; c < 32; ++c) o[c] = 0.0f;
  float m = MASKED, lsum = 0.0f;
  for (int j0 = 0; j0 < kend; j0 += 64) {
    barrier();  // the last tile's reads of k and v (and the first tile's of q) done
    stage(1, pc.w[1] + (bh * S + j0) * E, min(64, S - j0), E, AREA_A, false);
    stage(2, pc.w[2] + (bh * S + j0) * EV, min(64, S - j0), EV, AREA_B, false);
    barrier();
    [[unroll]] for (int n = 0; n < 4; ++n) {  // S's 16 keys n * 16 ..
      F32M acc = F32M(0.0);
      [[unroll]] for (int kk = 0; kk < 4; ++kk) {
        F16M kb;  // k^T: element (d, key) at key * R16 + d
        coopMatLoadNV(kb, sm, uint(AREA_A + n * 16 * R16 + kk * 2), uint(R16), true);
        acc = coopMatMulAddNV(qf[kk], kb, acc);
      }
      coopMatStoreNV(acc, sm, uint(fs + n * 4), uint(R32), false);
    }
    subgroup_sync();
    read_row(fs, lr, h, x);
    float mx = m;
    [[unroll]] for (int c = 0; c < 32; ++c) {
      const int j = j0 + h * 32 + c;
      const bool ok = j < S && (causal == 0 || j <= row);
      x[c] = ok ? x[c] * scale : MASKED;
      mx = max(mx, x[c]);
    }
    mx = max(mx, subgroupShuffleXor(mx, 1));
    const float al = exp(m - mx);
    m = mx;
    float sum = 0.0f;
    [[unroll]] for (int c = 0; c < 32; ++c) {
      float p = x[c] > -1.0e38f ? exp(x[c] - mx) : 0.0f;
      sum += p;
      if (drop > 0.0f)
        p *= keep_factor(key, uint(bh * L + row) * uint(S) + uint(j0 + h * 32 + c), bound, keep);
      x[c] = p;
      o[c] *= al;
    }
    lsum = lsum * al + sum;
    subgroup_sync();  // S read: the area takes P
    write_row16(fs, lr, h, x);
    subgroup_sync();
    F16M pf[4];
    [[unroll]] for (int kk = 0; kk < 4; ++kk)
      coopMatLoadNV(pf[kk], sm, uint(fs + kk * 2), uint(R16), false);
    subgroup_sync();  // P read: the area takes P v
    [[unroll]] for (int n = 0; n < 4; ++n) {  // output columns n * 16 ..
      F32M acc = F32M(0.0);
      [[unroll]] for (int kk = 0; kk < 4; ++kk) {
        F16M vb;  // v: element (key, d) at key * R16 + d
        coopMatLoadNV(vb, sm, uint(AREA_B + kk * 16 * R16 + n * 2), uint(R16), false);
        acc = coopMatMulAddNV(pf[kk], vb, acc);
      }
      coopMatStoreNV(acc, sm, uint(fs + n * 4), uint(R32), false);
    }
    subgroup_sync();
    read_row(fs, lr, h, x);
    [[unroll]] for (int c = 0; c < 32; ++c) o[c] += x[c];
    subgroup_sync();  // P v read: the area takes the next S
  }
  const float l = lsum + subgroupShuffleXor(lsum, 1);
  if (row < L) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    [[unroll]] for (int c = 0; c < 32; ++c) o[c] *= inv;
    store_row(3, pc.w[3] + (bh * L + row) * EV, h * 32, EV, o, WIDE);
    if (h == 0)
      w4.v[pc.w[4] + bh * L + row] = l > 0.0f ? m + log(l) : -uintBitsToFloat(0x7f800000u);
  }
}

void backward_kv(int group) {
  const int L = P(0), S = P(1), E = P(2), EV = P(3), causal = P(5), nq = P(9), nk = P(10),
            nbh = P(11);
  const float scale = PF(4), drop = PF(6), keep = PF(8);
  const uint key = uint(P(7)), bound = drop_bound(drop);
  // The longest causal blocks (the first keys) first, across all heads.
  const int j0 = (group / nbh) * 64, hl = group % nbh, bh = P(12) + hl;
  const int lid = int(gl_LocalInvocationID.x), sg = lid >> 5, lane = lid & 31;
  const int lr = lane >> 1, h = lane & 1;
  const int kr = j0 + sg * 16 + lr;  // the lane's key
  const int keys = min(64, S - j0);
  const int fs = AREA_F + sg * SUB32;

  stage(1, pc.w[1] + (bh * S + j0) * E, keys, E, AREA_A, false);
  stage(2, pc.w[2] + (bh * S + j0) * EV, keys, EV, AREA_B, false);
  barrier();
  F16M kf[4], vf[4];
  [[unroll]] for (int kk = 0; kk < 4; ++kk) {
    coopMatLoadNV(kf[kk], sm, uint(AREA_A + sg * 16 * R16 + kk * 2), uint(R16), false);
    coopMatLoadNV(vf[kk], sm, uint(AREA_B + sg * 16 * R16 + kk * 2), uint(R16), false);
  }
  F32M dk[4], dv[4];
  [[unroll]] for (int n = 0; n < 4; ++n) {
    dk[n] = F32M(0.0);
    dv[n] = F32M(0.0);
  }
  float p[32], x[32];
  const int ibegin = causal == 1 ? j0 : 0;
  for (int i0 = ibegin; i0 < L; i0 += 64) {
    const int rows = min(64, L - i0);
    barrier();  // the last tile's reads (and the fragments' of k and v) done
    stage(0, pc.w[0] + (bh * L + i0) * E, rows, E, AREA_A, false);
    stage(3, pc.w[3] + (bh * L + i0) * EV, rows, EV, AREA_B, WIDE);
    {
      const int r = lid >> 1;  // lse (lid even) and delta of row i0 + r
      sm[AREA_ST + (lid >> 2)][lid & 3] =
          floatBitsToUint(r < rows ? r4.v[pc.w[4] + 2 * (bh * L + i0) + lid] : 0.0f);
    }
    barrier();
    [[unroll]] for (int n = 0; n < 4; ++n) {  // S^T's 16 queries n * 16 ..
      F32M acc = F32M(0.0);
      [[unroll]] for (int kk = 0; kk < 4; ++kk) {
        F16M qb;  // q^T: element (d, query) at query * R16 + d
        coopMatLoadNV(qb, sm, uint(AREA_A + n * 16 * R16 + kk * 2), uint(R16), true);
        acc = coopMatMulAddNV(kf[kk], qb, acc);
      }
      coopMatStoreNV(acc, sm, uint(fs + n * 4), uint(R32), false);
    }
    subgroup_sync();
    read_row(fs, lr, h, x);
    uint kept = 0xffffffffu;  // bit c: the dropout mask keeps the lane's element c
    [[unroll]] for (int c = 0; c < 32; ++c) {
      const int q = h * 32 + c, i = i0 + q;
      const bool ok = i < L && kr < S && (causal == 0 || kr <= i);
      const float lse = uintBitsToFloat(sm[AREA_ST + (q >> 1)][(q & 1) * 2]);
      p[c] = ok ? exp(x[c] * scale - lse) : 0.0f;
      x[c] = p[c];
      if (drop > 0.0f) {
        const float z = keep_factor(key, uint(bh * L + i) * uint(S) + uint(kr), bound, keep);
        x[c] *= z;
        if (z == 0.0f) kept &= ~(1u << c);
      }
    }
    subgroup_sync();  // S^T read: the area takes P^T
    write_row16(fs, lr, h, x);
    subgroup_sync();
    {
      F16M pa[4];
      [[unroll]] for (int kk = 0; kk < 4; ++kk)
        coopMatLoadNV(pa[kk], sm, uint(fs + kk * 2), uint(R16), false);
      [[unroll]] for (int n = 0; n < 4; ++n)
        [[unroll]] for (int kk = 0; kk < 4; ++kk) {
          F16M gb;  // grad_out: element (query, d) at query * R16 + d
          coopMatLoadNV(gb, sm, uint(AREA_B + kk * 16 * R16 + n * 2), uint(R16), false);
          dv[n] = coopMatMulAddNV(pa[kk], gb, dv[n]);
        }
    }
    subgroup_sync();  // P^T read: the area takes dP^T
    [[unroll]] for (int n = 0; n < 4; ++n) {  // dP^T's 16 queries n * 16 ..
      F32M acc = F32M(0.0);
      [[unroll]] for (int kk = 0; kk < 4; ++kk) {
        F16M gt;  // grad_out^T: element (d, query) at query * R16 + d
        coopMatLoadNV(gt, sm, uint(AREA_B + n * 16 * R16 + kk * 2), uint(R16), true);
        acc = coopMatMulAddNV(vf[kk], gt, acc);
      }
      coopMatStoreNV(acc, sm, uint(fs + n * 4), uint(R32), false);
    }
    subgroup_sync();
    read_row(fs, lr, h, x);
    [[unroll]] for (int c = 0; c < 32; ++c) {
      const int q = h * 32 + c, i = i0 + q;
      const float delta = uintBitsToFloat(sm[AREA_ST + (q >> 1)][(q & 1) * 2 + 1]);
      const float dp = drop > 0.0f ? ((kept >> c) & 1u) != 0u ? x[c] * keep : 0.0f : x[c];
      x[c] = p[c] * (dp - delta) * scale;
    }
    subgroup_sync();  // dP^T read: the area takes dS^T
    write_row16(fs, lr, h, x);
    {
      // This tile of dS^T for dq: tile ((hl * nq + i0 / 64) * nk + j0 / 64), [64 keys][64].
      const int at = (pc.w[7] + (((hl * nq + i0 / 64) * nk + j0 / 64) * 64 + sg * 16 + lr) * 64 +
                      h * 32) >> 3;
      [[unroll]] for (int t = 0; t < 4; ++t) w7.v[at + t] = sm[fs + lr * R16 + h * 4 + t];
    }
    subgroup_sync();
    {
      F16M da[4];
      [[unroll]] for (int kk = 0; kk < 4; ++kk)
        coopMatLoadNV(da[kk], sm, uint(fs + kk * 2), uint(R16), false);
      [[unroll]] for (int n = 0; n < 4; ++n)
        [[unroll]] for (int kk = 0; kk < 4; ++kk) {
          F16M qb;  // q: element (query, d) at query * R16 + d
          coopMatLoadNV(qb, sm, uint(AREA_A + kk * 16 * R16 + n * 2), uint(R16), false);
          dk[n] = coopMatMulAddNV(da[kk], qb, dk[n]);
        }
    }
    subgroup_sync();  // dS^T read: the area takes the next S^T
  }
  [[unroll]] for (int n = 0; n < 4; ++n)
    coopMatStoreNV(dk[n], sm, uint(fs + n * 4), uint(R32), false);
  subgroup_sync();
  read_row(fs, lr, h, x);
  if (kr < S) store_row(5, pc.w[5] + (bh * S + kr) * E, h * 32, E, x, WIDE);
  subgroup_sync();
  [[unroll]] for (int n = 0; n < 4; ++n)
    coopMatStoreNV(dv[n], sm, uint(fs + n * 4), uint(R32), false);
  subgroup_sync();
  read_row(fs, lr, h, x);
  if (kr < S) store_row(6, pc.w[6] + (bh * S + kr) * EV, h * 32, EV, x, WIDE);
}

void backward_dq(int group) {
  const int L = P(0), S = P(1), E = P(2), causal = P(5), nq = P(9), nk = P(10), nbh = P(11);
  const int i0 = (nq - 1 - group / nbh) * 64, hl = group % nbh, bh = P(12) + hl;
  const int lid = int(gl_LocalInvocationID.x), sg = lid >> 5, lane = lid & 31;
  const int lr = lane >> 1, h = lane & 1;
  const int row = i0 + sg * 16 + lr;
  const int rows = min(64, L - i0);
  const int kend = causal == 1 ? min(S, i0 + rows) : S;
  const int fs = AREA_F + sg * SUB32;
  F32M acc[4];
  [[unroll]] for (int n = 0; n < 4; ++n) acc[n] = F32M(0.0);
  for (int j0 = 0; j0 < kend; j0 += 64) {
    barrier();
    stage(0, pc.w[0] + (bh * S + j0) * E, min(64, S - j0), E, AREA_A, false);
    barrier();
    const int tile = pc.w[1] + ((hl * nq + i0 / 64) * nk + j0 / 64) * 4096;
    [[unroll]] for (int kk = 0; kk < 4; ++kk) {
      F16M da;  // dS: element (query, key) at key * 64 + query of the tile
      coopMatLoadNV(da, r1.v, uint((tile + kk * 16 * 64 + sg * 16) >> 3), 8u, true);
      [[unroll]] for (int n = 0; n < 4; ++n) {
        F16M kb;  // k: element (key, d) at key * R16 + d
        coopMatLoadNV(kb, sm, uint(AREA_A + kk * 16 * R16 + n * 2), uint(R16), false);
        acc[n] = coopMatMulAddNV(da, kb, acc[n]);
      }
    }
  }
  [[unroll]] for (int n = 0; n < 4; ++n)
    coopMatStoreNV(acc[n], sm, uint(fs + n * 4), uint(R32), false);
  subgroup_sync();
  float x[32];
  read_row(fs, lr, h, x);
  if (row < L) store_row(2, pc.w[2] + (bh * L + row) * E, h * 32, E, x, WIDE);
}

void main() {
  const int group = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
  if (group >= NGROUPS) return;
  if (KIND == 0)
    forward(group);
  else if (KIND == 1)
    backward_kv(group);
  else
    backward_dq(group);
}
