// What the OpenCL plugin's own kernels for NVIDIA GPUs (gemm_mma.cl, gemm_tf32.cl) share, built in
// front of each (../../opencl/programs.cpp): the launch's parameter words, shared-memory addresses
// as PTX takes them, cp.async, ldmatrix, and where a GEMM work-group's tile and matrix are (the
// portable GEMM's words, ../../common/ops_gemm.cpp's gemm_words).

// Words 0..7: element offsets of bindings 0..7; word 8: the number of work-groups; then P(i).
typedef struct {
  int w[32];
} TkParams;
#define P(i) tk_p.w[9 + (i)]
#define NGROUPS tk_p.w[8]

#define CP_COMMIT() __asm__ __volatile__("cp.async.commit_group;" ::: "memory")

// The address of a shared-memory location as the PTX instructions take it (the __local window).
uint smem(__local const void* p) {
  return (uint)(size_t)p;
}

// 16 bytes from |src| into shared memory at |dst|, asynchronously; |in| false fills zeros.
void copy16(__local void* dst, __global const void* src, bool in) {
  __asm__ __volatile__("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem(dst)), "l"(src),
                       "r"(in ? 16u : 0u)
                       : "memory");
}

// Four 8 x 8 matrices of 16-bit elements (or 8 x 4 of 32-bit ones), lane l giving the address of a
// row of matrix l / 8; lane l receives word l % 4 of row l / 4 of each (.trans: of the matrix
// transposed, in 16-bit elements).
void ldsm4(uint* r, __local const void* p) {
  __asm__ __volatile__("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                       : "r"(smem(p))
                       : "memory");
}
void ldsm4_trans(uint* r, __local const void* p) {
  __asm__ __volatile__("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                       : "r"(smem(p))
                       : "memory");
}

// Work-group |group|'s place in a GEMM launch with words |w| (TkParams::w) and |bm| x |bn| tiles:
// x its batch index (part * P(18) + matrix where K is split), y and z the first row and column of
// its tile (P(3) tiles across N, P(4) tiles a matrix).
// GROUP_M > 1 (a tuning macro) walks the tiles in bands of GROUP_M rows of tiles, column by
// column within a band, so that the work-groups running together share more of their operands'
// slices in L2; 1, row by row, is the default (no gain measured outside noise on the H200:
// docs/bench/h200-vulkan-ptx-stages.txt).
#ifndef GROUP_M
#define GROUP_M 1
#endif
int3 gemm_tile(const int* w, int group, int bm, int bn) {
  const int across = w[9 + 3], tiles = w[9 + 4];
  const int batch = group / tiles;
  const int tile = group - batch * tiles;
#if GROUP_M > 1
  const int in_group = GROUP_M * across, g = tile / in_group, t = tile - g * in_group;
  const int height = min(tiles / across - g * GROUP_M, GROUP_M);
  return (int3)(batch, (g * GROUP_M + t % height) * bm, (t / height) * bn);
#else
  return (int3)(batch, (tile / across) * bm, (tile - (tile / across) * across) * bn);
#endif
}

// The opening every GEMM kernel here shares, in tk_main after its shared arrays: |group| this
// work-group's number (one past the launch's work-groups returns), |lid| the invocation, M, N, K
// (P(0..2)), and the tile's |batch|, first row |m0| and first column |n0| (gemm_tile with |bm| x
// |bn| tiles). A macro, not a function: the statements stay in tk_main as written, so both
// compilers see the kernel's text unchanged.
#define GEMM_OPENING(bm, bn)                                                      \
  const int group = (int)(get_group_id(1) * get_num_groups(0) + get_group_id(0)); \
  if (group >= NGROUPS) return;                                                   \
  const int lid = (int)get_local_id(0);                                           \
  const int M = P(0), N = P(1), K = P(2);                                         \
  const int3 at = gemm_tile(tk_p.w, group, bm, bn);                               \
  const int batch = at.x, m0 = at.y, n0 = at.z

// What the f32 GEMMs (gemm_tf32.cl, gemm_ffma.cl) open with after GEMM_OPENING, whose words split
// K: the work-group's |part| of K (batch = part * P(18) + the matrix), its range [kb, ke) (P(21)
// long), and its matrix's operands |a| and |b| (bindings 0 and 1 at their element offsets and the
// matrix's strides: matrix_offsets below).
#define GEMM_F32_OPERANDS                                        \
  const int part = batch / P(18);                                \
  const int kb = part * P(21), ke = min(K, kb + P(21));          \
  const int2 off = matrix_offsets(tk_p.w, batch - part * P(18)); \
  __global const float* a = t0 + tk_p.w[0] + off.x;              \
  __global const float* b = t1 + tk_p.w[1] + off.y

// The element offsets of matrix |matrix| (< P(18)) of a launch with words |w| in a (x) and b (y):
// P(5) batch dimensions of extents P(6..9), a's matrix strides P(10..13), b's P(14..17).
int2 matrix_offsets(const int* w, int matrix) {
  int2 at = (int2)(0, 0);
  int rest = matrix;
  for (int d = w[9 + 5] - 1; d >= 0; --d) {
    const int e = w[9 + 6 + d];
    const int c = rest % e;
    rest = rest / e;
    at += (int2)(c * w[9 + 10 + d], c * w[9 + 14 + d]);
  }
  return at;
}
