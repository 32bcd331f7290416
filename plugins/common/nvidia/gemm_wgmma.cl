// C = op(A) op(B) for f16 or bf16 A and B on Hopper's warpgroup tensor-core products (wgmma), in
// OpenCL C with inline PTX: the form of gemm_mma.cl's launches ("gemm_coopmat",
// "gemm_coopmat_bf16") that the plugin takes on NVIDIA GPUs of compute capability 9.0, where this
// program builds (../../opencl/device.cpp). Built after ptx.cl and gemm16.cl (the contract it
// shares with gemm_mma.cl: bindings, words, V0 flags, 128 x BN tiles of 256 invocations, split K,
// the operand type, the stores). The Vulkan plugin runs this file too, on the same GPUs: compiled
// by clang at build time for the CUDA kernel ABI and loaded through VK_NVX_binary_import
// (ptx_module.cmake, CuKernels), so a change here reaches both plugins, and the OpenCL built-ins it
// calls must be among those workitems.cl defines.
//
// wgmma is PTX for the sm_90a target, and NVIDIA's OpenCL compiler emits sm_90 PTX, whose
// assembler refuses it. So the plugin builds this file with TK_WGMMA_COMMENTED defined, which
// writes each wgmma instruction as a PTX comment ("//@" and the instruction, its operands filled
// in by the compiler like any inline asm), then removes the marks and names sm_90a in the PTX the
// driver returns, and builds that as the program's binary (../../opencl/programs.cpp,
// Programs::kernel with Retarget::sm_90a). The asm statements are volatile: they keep their order,
// and the "+f" operands tie the sums to the instructions that read and write them.
//
// Each of the two warpgroups (4 subgroups, 128 invocations) multiplies 64 rows of the tile by its
// BN columns: wgmma.mma_async.m64nBNk16, both operands read from shared memory through matrix
// descriptors, the 64 x BN f32 sums in BN / 2 registers of each invocation. A K slice of BK
// elements reaches shared memory by cp.async, one shared row of BK elements (RB bytes) for each
// row of the operand in memory along M or N (a as it is, b stored [N, K]: K-major to wgmma), or BK
// rows a block of BK columns where the operand's rows run along K; rows swizzled as the
// descriptors' 128-byte (BK 64), 64-byte (BK 32) or 32-byte (BK 16) mode reads them, so that each
// subgroup's 32 copies fill whole 128-byte lines of shared memory. (Without swizzling, in the
// canonical layout of 128-byte core matrices, the same kernel ran at half the speed on an H200.)
// STAGES slices in flight; one barrier a slice; each slice's products are waited for before the
// barrier that lets its stage be refilled (WG_IN_FLIGHT below); fence.proxy.async between the
// copies and the tensor cores' reads. Chunks of 8 elements past an edge are zeros.
// docs/bench/h200-opencl-wgmma.txt has the probe that established the descriptors' fields.
//
// Two builds (the macros BN, BK, STAGES, WG_IN_FLIGHT, SMEM_LIMIT):
// - NVIDIA's OpenCL, whose work-groups declare at most 47 KiB: 128 x 128 tiles, BK 32, two stages
//   (gemm16.cl's default; docs/bench/h200-opencl-wgmma.txt).
// - The Vulkan plugin's CUDA modules, whose static shared memory the driver's compiler takes past
//   CUDA C's 48 KiB: 128 x 256 tiles (BN 256: 128 sums an invocation, about 210 registers, one
//   work-group an SM), BK 64, four stages (192 KiB), the products of one slice left in flight
//   (WG_IN_FLIGHT 1). Against the 128 x 128 tiles with BK 32 and three stages in 48 KiB, bf16
//   4096^3 and 8192^3 ran 1.2x and 1.4x as fast on the H200: each slice of the operands feeds
//   twice the products, a barrier four times as many (docs/performance.md).
//
// The K slices' length (BK, 16, 32 or 64).
#ifndef BK
#define BK 32
#endif
#define A_CHUNKS (BM * BK / 8)  // 16-byte chunks of A's slice, of B's
#define B_CHUNKS (BN * BK / 8)
#if BN != 128 && BN != 256
#error "BN must be 128 or 256"
#endif
// Shared rows of BK elements (RB bytes), swizzled: chunk c of row r sits at chunk c ^ (bits 7.. of
// the row's byte offset), the descriptors' 128-, 64- or 32-byte swizzle (LAYOUT 1, 2 or 3) for
// rows of 128, 64 or 32 bytes.
#define RB (BK * 2)
#define LAYOUT (BK == 64 ? 1 : BK == 32 ? 2 : 3)
#if BK != 16 && BK != 32 && BK != 64
#error "BK must be 16, 32 or 64"
#endif
#define STAGE_CHUNKS (A_CHUNKS + B_CHUNKS)
// The static shared memory a work-group may declare: 47 KiB through NVIDIA's OpenCL; where the
// Vulkan plugin loads the kernel as a CUDA module, what its build says (192 KiB: ../../vulkan/
// CMakeLists.txt).
#ifndef SMEM_LIMIT
#define SMEM_LIMIT (47 * 1024)
#endif
#if STAGES * STAGE_CHUNKS * 16 > SMEM_LIMIT
#error "the stages exceed the shared memory a work-group gets (SMEM_LIMIT)"
#endif
// Groups of products left in flight across the next slice's barrier (WG_IN_FLIGHT, 0 or 1): with
// 1, each warpgroup waits for the previous slice's products, not this one's, so the tensor cores
// run while the warpgroups meet at the barrier and issue the next copies; a stage is then refilled
// one slice later, so the copies run STAGES - 2 slices ahead (STAGES - 1 with 0). With 128 x 128
// tiles of BK 32 on the H200, 1 with three stages ran at the speed of two stages with 0 (the
// copies' latency, not the products' drain, is what those slices wait for); with 128 x 256 tiles
// and four stages, 1 made bf16 4096^3 1.25x as fast as 0.
#ifndef WG_IN_FLIGHT
#define WG_IN_FLIGHT 0
#endif
#if WG_IN_FLIGHT != 0 && WG_IN_FLIGHT != 1
#error "WG_IN_FLIGHT must be 0 or 1"
#endif
#define AHEAD (STAGES - 1 - WG_IN_FLIGHT)
#if AHEAD < 1
#error "STAGES must exceed WG_IN_FLIGHT + 1"
#endif
// Waits for the oldest slice's copies: all but the AHEAD - 1 groups committed after it.
#if AHEAD == 1
#define CP_WAIT_SLICE "cp.async.wait_group 0;"
#elif AHEAD == 2
#define CP_WAIT_SLICE "cp.async.wait_group 1;"
#elif AHEAD == 3
#define CP_WAIT_SLICE "cp.async.wait_group 2;"
#else
#error "at most 3 slices ahead"
#endif

#ifdef TK_WGMMA_COMMENTED
#define WG "//@"
#else
#define WG ""
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

// wgmma's operand layouts, as the literals its instruction takes: 0 K-major (rows along K), 1 M- or
// N-major. B is N x K to wgmma: b stored [N, K] (V0 & 2) is K-major.
#if (V0 & 1) != 0
#define MAJOR_A 1
#else
#define MAJOR_A 0
#endif
#if (V0 & 2) != 0
#define MAJOR_B 0
#else
#define MAJOR_B 1
#endif

// The shared-memory matrix descriptor of the operand at |p|: its address, the byte distances |lbo|
// and |sbo| (see LOAD), the swizzle; in 16-byte units.
ulong descriptor(__local const void* p, uint lbo, uint sbo) {
  return (ulong)((smem(p) & 0x3FFFF) >> 4) | ((ulong)(lbo >> 4) << 16) | ((ulong)(sbo >> 4) << 32) |
         ((ulong)LAYOUT << 62);
}

// The byte offset of chunk c of shared row r.
uint swizzled(int r, int c) {
  return (uint)(r * RB + ((c ^ ((r * RB >> 7) & (RB / 16 - 1))) << 4));
}

#define D8(i)                                                                                 \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// The instruction's operands: the sums %0 .. %(BN / 2 - 1) (WG_SUMS, each invocation's BN / 2 of
// the warpgroup's 64 x BN block), then the two descriptors (WG_DESCS) and the scale-d flag
// (WG_FLAG). Both widths' sums start with the first 64 (WG_SUMS_64, WG_SUM_REGS_64).
#define WG_SUMS_64                                                   \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"           \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_SUM_REGS_64 D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56)
#if BN == 128
#define WG_SUMS "{" WG_SUMS_64 "}"
#define WG_DESCS "%64, %65"
#define WG_FLAG "%66"
#define WG_SUM_REGS WG_SUM_REGS_64
#else
#define WG_SUMS                                                                  \
  "{" WG_SUMS_64                                                                 \
  ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"            \
  "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"             \
  "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
  "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define WG_DESCS "%128, %129"
#define WG_FLAG "%130"
#define WG_SUM_REGS \
  WG_SUM_REGS_64, D8(64), D8(72), D8(80), D8(88), D8(96), D8(104), D8(112), D8(120)
#endif
#define WG_MMA "wgmma.mma_async.sync.aligned.m64n" STR(BN) "k16.f32." MMA_TYPES

// d += a b for this warpgroup's 64 x BN x 16 product (d: BN / 2 sums an invocation).
void wgmma(float* d, ulong da, ulong db) {
  __asm__ __volatile__("{\n.reg .pred p;\nsetp.ne.b32 p, " WG_FLAG ", 0;\n" WG WG_MMA " " WG_SUMS
                       ", " WG_DESCS ", p, 1, 1, " STR(MAJOR_A) ", " STR(MAJOR_B) ";\n}\n"
                       : WG_SUM_REGS
                       : "l"(da), "l"(db), "r"(1));
}

// Chunk q (16 bytes) of a slice of rows [r0, ...) and columns [c0, c0 + |width| or BK) of a
// [rows][cols] matrix at chunk |base|, into |tile| (|width| the tile's rows or columns: BM for a,
// BN for b). |k_rows| false: the rows run along M or N (a as it is, b stored [N, K]: K-major to
// wgmma), one shared row each, of BK elements. |k_rows|: they run along K (BK of them) with
// |width| elements each, which go to blocks of BK columns, BK shared rows a block. Zeros past the
// edges.
void fetch(__local uchar* tile, __global const uint4* base, int q, int r0, int c0, int rows,
           int cols, bool k_rows, int width) {
  const int per = k_rows ? width / 8 : BK / 8;  // chunks of a global row in the slice
  const int row = q / per, chunk = q % per;
  const int r = r0 + row, col = c0 + chunk * 8;
  const int c = chunk % (BK / 8), shared_row = k_rows ? (chunk / (BK / 8)) * BK + row : row;
  const bool in = r < rows && col < cols;
  copy16(tile + swizzled(shared_row, c), in ? base + (r * cols + col) / 8 : base, in);
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void tk_main(
    __global const uchar* t0, __global const uchar* t1, __global uchar* t2,
    __global const uchar* t3, __global uchar* t4, __global uchar* t5, __global uchar* t6,
    __global uchar* t7, const TkParams tk_p, __local float4* tk_shm) {
  __local uint4 sm[STAGES * STAGE_CHUNKS] __attribute__((aligned(1024)));
  GEMM16_OPENING();

  // Slice s into stage |st|: A_CHUNKS chunks of A's and B_CHUNKS of B's, spread over the
  // invocations; each subgroup's 32 copies fill 512 bytes of shared memory, four whole 128-byte
  // lines.
#define LOAD(s, st)                                                  \
  {                                                                  \
    __local uchar* ta = (__local uchar*)(sm + (st)*STAGE_CHUNKS);    \
    __local uchar* tb = ta + A_CHUNKS * 16;                          \
    const int k0 = (s)*BK;                                           \
    _Pragma("unroll") for (int i = 0; i < B_CHUNKS / THREADS; ++i) { \
      const int q = lid + i * THREADS;                               \
      if (i < A_CHUNKS / THREADS) {                                  \
        if (TRANS_A)                                                 \
          fetch(ta, a, q, k0, m0, K, M, true, BM);                   \
        else                                                         \
          fetch(ta, a, q, m0, k0, M, K, false, BM);                  \
      }                                                              \
      if (TRANS_B)                                                   \
        fetch(tb, b, q, n0, k0, N, K, false, BN);                    \
      else                                                           \
        fetch(tb, b, q, k0, n0, K, N, true, BN);                     \
    }                                                                \
  }

  // The descriptors: K-major operands (rows along M or N), SBO the 8 rows of a swizzle atom (8 RB
  // bytes), LBO unused (1); the others (rows along K), LBO the distance between blocks of BK
  // columns (BK RB bytes) and SBO between groups of 8 rows along K (8 RB).
  const uint mn_lbo = BK * RB, mn_sbo = 8 * RB;
  const uint a_lbo = TRANS_A ? mn_lbo : 16, a_sbo = TRANS_A ? mn_sbo : 8 * RB;
  const uint b_lbo = TRANS_B ? 16 : mn_lbo, b_sbo = TRANS_B ? 8 * RB : mn_sbo;
  // Where a K step of 16 starts, from the tile's start: 32 bytes into each row, or 16 rows on.
  const uint a_k16 = TRANS_A ? 16 * RB : 32, b_k16 = TRANS_B ? 32 : 16 * RB;
  const int wg = lid / 128;  // this warpgroup's rows: [64 wg, 64 wg + 64) of the tile
  // Its first row's byte offset in A's tile: 64 rows, or 64 / BK blocks of BK columns.
  const uint a_rows = TRANS_A ? (uint)(wg * 64 / BK) * BK * RB : (uint)(wg * 64) * RB;
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;

  const int s0 = SPLIT ? part * (P(19) / BK) : 0;
  const int slices = SPLIT ? min((K + BK - 1) / BK, s0 + P(19) / BK) : (K + BK - 1) / BK;
  for (int p = 0; p < AHEAD; ++p) {
    if (s0 + p < slices) LOAD(s0 + p, p)
    CP_COMMIT();
  }
  for (int s = s0; s < slices; ++s) {
    __asm__ __volatile__(CP_WAIT_SLICE ::: "memory");
    // The slice's copies (ordinary shared-memory writes) become visible to the tensor cores'
    // reads; the barrier then also says every warpgroup finished the products of slice
    // s - 1 - WG_IN_FLIGHT, whose stage the next copies refill.
    __asm__ __volatile__("fence.proxy.async.shared::cta;" ::: "memory");
    barrier(CLK_LOCAL_MEM_FENCE);
    const int next = s + AHEAD;
    if (next < slices) LOAD(next, (next - s0) % STAGES)
    CP_COMMIT();
    __local const uchar* ta = (__local const uchar*)(sm + ((s - s0) % STAGES) * STAGE_CHUNKS);
    __local const uchar* tb = ta + A_CHUNKS * 16;
    __asm__ __volatile__(WG "wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      wgmma(d, descriptor(ta + a_rows + kk * a_k16, a_lbo, a_sbo),
            descriptor(tb + kk * b_k16, b_lbo, b_sbo));
    }
    __asm__ __volatile__(WG "wgmma.commit_group.sync.aligned;" ::: "memory");
    __asm__ __volatile__(WG "wgmma.wait_group.sync.aligned " STR(WG_IN_FLIGHT) ";" ::: "memory");
  }
#if WG_IN_FLIGHT
  __asm__ __volatile__(WG "wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif

  // Invocation l of subgroup w (of its warpgroup) holds sums (4j + 2h + e) at row 16w + l / 4 +
  // 8h and column 8j + 2 (l % 4) + e of the warpgroup's 64 x BN block.
  const int c_at = tk_p.w[2] + batch * M * N;
  const int lane = lid % 32, w = (lid / 32) % 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + wg * 64 + 16 * w + lane / 4 + 8 * h;
      const int n = n0 + 8 * j + (lane % 4) * 2;
      if (m >= M || n >= N) continue;
      store_pair(t2, t3, c_at + m * N + n, tk_p.w[3] + n,
                 (float2)(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]));
    }
}
