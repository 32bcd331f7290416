// Launch geometry of the GEMM (kernels/gemm.tk) for matmul, addmm and bmm, and for the
// convolutions as implicit GEMMs: the tiles are chosen per problem, so that a small output still
// has work-groups for every compute unit.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "batch.h"
#include "env_switch.h"
#include "geometry.h"
#include "ops.h"
#include "tessera/errors.h"

namespace tessera::common {
namespace {

constexpr int kFlagTransA = 1, kFlagTransB = 2, kFlagVec = 4, kFlagBias = 8, kFlagTwoBuffers = 16,
              kModeShift = 5, kFlagUnitStride = 128, kDTypeShift = 8;
// gemm_coopmat's V0: split K; c in f32 (out_dtype f32); an f32 bias at binding 3 (with f32 c).
constexpr int kFlagCoopSplit = 4, kFlagCoopWide = 8, kFlagCoopBias = 16;
constexpr int kFlagBiasF32 = 1024;  // gemm.tk's V3: the bias in f32 whatever the inputs' dtype

// The GPU tile sets, largest first (docs/performance.md has the sweeps that chose them): the
// portable default, and NVIDIA's, measured on the H100, where the smaller sets keep 256
// invocations a work-group (4 x 8 and 4 x 4 blocks: at 1024^3 one 64 x 128 set gave 29 TFLOP/s
// through OpenCL against 26 for 64 x 64 of 8 x 8).
constexpr GemmTiles kGpuTiles[] = {
    {128, 128, 16, 8, 8, 2}, {128, 64, 16, 8, 8, 2}, {64, 64, 16, 8, 8, 2}, {32, 32, 16, 4, 4, 1}};
constexpr GemmTiles kNvidiaTiles[] = {
    {128, 128, 16, 8, 8, 2}, {64, 128, 16, 4, 8, 2}, {64, 64, 16, 4, 4, 2}, {32, 32, 16, 4, 4, 1}};

// The device's tile sets, largest first; the largest with one buffer where the device's
// compiler asks it (GpuTraits::gemm_one_buffer).
std::span<const GemmTiles> gpu_tiles(const GpuTraits& traits) {
  if (traits.vendor_id == 0x10de) return kNvidiaTiles;
  return kGpuTiles;
}

GemmTiles with_buffers(GemmTiles t, const GpuTraits& traits) {
  if (traits.gemm_one_buffer && t.tm * t.tn >= 128 * 128) t.buffers = 1;
  return t;
}

// Why |t| can not run on a device with |traits|, or empty.
std::string unfit(const GemmTiles& t, const GpuTraits& traits) {
  if ((t.wm != 4 && t.wm != 8) || (t.wn != 4 && t.wn != 8))
    return "the invocation's block (WM x WN) must be 4 or 8 each way";
  if (t.tm < 4 * t.wm || t.tm % t.wm || t.tn < 4 * t.wn || t.tn % t.wn || t.tm % 4 || t.tn % 4)
    return "TM and TN must be multiples of WM and WN and of 4, at least 4 * WM and 4 * WN";
  if (t.tk < 4 || t.tk % 4) return "TK must be a positive multiple of 4";
  const std::int64_t threads = t.threads();
  if (threads > traits.max_group_size)
    return fmt::format("{} invocations per work-group, more than the device's {}", threads,
                       traits.max_group_size);
  if ((t.tm / 4) * (t.tk / 4) + (t.tn / 4) * (t.tk / 4) > 2 * threads)
    return "a slice has more than two 4 x 4 loading tasks per invocation";
  if (t.shared_floats() * 4 > traits.max_shared_bytes)
    return fmt::format("{} bytes of shared memory, more than the device's {}",
                       t.shared_floats() * 4, traits.max_shared_bytes);
  return {};
}

// TESSERA_GEMM_TILES=TM,TN,TK,WM,WN,BUFFERS: every GEMM of the GPU plugins takes these tiles
// (for tuning; docs/user-guide.md). Unset: nullopt. Each value is an integer in [1, 4096].
std::optional<GemmTiles> tiles_from_environment() {
  static const std::optional<GemmTiles> parsed = []() -> std::optional<GemmTiles> {
    const char* env = std::getenv("TESSERA_GEMM_TILES");
    if (!env || !*env) return std::nullopt;
    const std::string_view s(env);
    int v[6] = {};
    std::size_t at = 0;
    bool ok = true;
    for (int i = 0; i < 6 && ok; ++i) {
      const char* first = s.data() + at;
      const auto [end, ec] = std::from_chars(first, s.data() + s.size(), v[i]);
      ok = ec == std::errc() && end != first && v[i] >= 1 && v[i] <= 4096;
      at = static_cast<std::size_t>(end - s.data());
      if (ok && i < 5) ok = at < s.size() && s[at++] == ',';
    }
    if (!ok || at != s.size() || (v[5] != 1 && v[5] != 2))
      throw ConfigError(fmt::format(
          "TESSERA_GEMM_TILES='{}' is not TM,TN,TK,WM,WN,BUFFERS (six integers from 1 to 4096, "
          "BUFFERS 1 or 2; for instance 128,128,16,8,8,2); unset it for the tiles chosen per call",
          s));
    return GemmTiles{v[0], v[1], v[2], v[3], v[4], v[5]};
  }();
  return parsed;
}

// K in |want| parts, each a multiple of |tk| long: the length of a part and how many there are
// (fewer than |want| where rounding up covers K sooner).
struct KParts {
  std::int64_t per, parts;
};
KParts split_k(std::int64_t k, std::int64_t want, int tk) {
  const std::int64_t per = ((k + want - 1) / want + tk - 1) / tk * tk;
  return {per, (k + per - 1) / per};
}

// The work-groups that run at once on the device, |per_unit| a compute unit (4 units where the
// API does not say).
std::int64_t wave_slots(const GpuTraits& traits, std::int64_t per_unit) {
  return (traits.compute_units > 0 ? traits.compute_units : 4) * per_unit;
}

// K of a product with |groups| output tiles split to fill one wave of |slots| work-groups (a part
// more would start a second wave, as long as the first): as many parts as the wave holds, each at
// least |least| long and a multiple of |slice|. K below 2048 (and a wave the tiles already fill)
// stays whole: {k, 1}.
KParts wave_split(std::int64_t k, std::int64_t groups, std::int64_t slots, std::int64_t least,
                  int slice) {
  const std::int64_t want = k >= 2048 ? std::min(slots / groups, k / least) : 1;
  return want > 1 ? split_k(k, want, slice) : KParts{k, 1};
}

// Appends the words both GEMM kernels read first (gemm.tk's MODE 0, gemm_coopmat.comp): P(0) M,
// P(1) N, P(2) K, P(3) tiles across N, P(4) tiles per matrix, P(5) batch rank, P(6..9) batch
// extents, P(10..17) a's and b's matrix strides, P(18) matrices.
void gemm_words(Launch& launch, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t across,
                std::int64_t tiles, const BatchDims& g) {
  launch.i(m).i(n).i(k).i(across).i(tiles).i(g.rank);
  for (int d = 0; d < kBatchRank; ++d) launch.i(d < g.rank ? g.shape[d] : 1);
  for (int d = 0; d < kBatchRank; ++d) launch.i(d < g.rank ? g.stride_a[d] : 0);
  for (int d = 0; d < kBatchRank; ++d) launch.i(d < g.rank ? g.stride_b[d] : 0);
  launch.i(g.count);
}

// A launch of kernels/gemm.tk with tiles |t| and |flags| (V3), its shared memory and work-group
// size set: the caller binds the tensors, appends the parameters and dispatches the groups.
Launch gemm_launch(Launcher& l, const GemmTiles& t, int flags) {
  Launch launch(l, "gemm", {t.tm, t.tn, t.wm | t.wn << 4 | t.tk << 8, flags});
  launch.shared(static_cast<std::int32_t>(t.shared_floats()))
      .group(static_cast<std::int32_t>(t.threads()));
  return launch;
}

}  // namespace

void check_gemm_environment() {
  (void)tiles_from_environment();
  (void)ffma_gemm_allowed();
}

bool ffma_gemm_allowed() {
  return env_switch("TESSERA_GEMM_FFMA", "the f32 GEMMs keep the portable kernel gemm.tk");
}

GemmTiles gemm_tiles(const GpuTraits& traits, std::int64_t m, std::int64_t n, std::int64_t batch) {
  if (const auto forced = tiles_from_environment()) {
    if (const std::string why = unfit(*forced, traits); !why.empty())
      throw ConfigError(fmt::format("TESSERA_GEMM_TILES={},{},{},{},{},{} can not run here: {}",
                                    forced->tm, forced->tn, forced->tk, forced->wm, forced->wn,
                                    forced->buffers, why));
    return *forced;
  }
  // CPU drivers (lavapipe, PoCL): 64 invocations of 8 x 8, one buffer, the fastest of the sets
  // tried on both at 256^3 and 512^3 (docs/performance.md).
  if (traits.is_cpu) return {64, 64, 16, 8, 8, 1};
  // Largest first; the first that gives every compute unit a work-group (all but one in 16:
  // 128 work-groups of 64 x 128 for a 1024^3 product on 132 compute units beat 256 of 64 x 64),
  // else the one that gives the most work-groups.
  std::optional<GemmTiles> best;
  for (const GemmTiles& set : gpu_tiles(traits)) {
    const GemmTiles t = with_buffers(set, traits);
    if (!unfit(t, traits).empty()) continue;
    best = t;
    const std::int64_t groups = batch * ((m + t.tm - 1) / t.tm) * ((n + t.tn - 1) / t.tn);
    if (traits.compute_units <= 0 || groups >= traits.compute_units - traits.compute_units / 16)
      break;
  }
  if (!best) throw BackendError("no GEMM tiles fit this device's work-groups and shared memory");
  return *best;
}

namespace {

// f16 and bf16 GEMMs on matrix units, launched as "gemm_coopmat" and "gemm_coopmat_bf16": the
// Vulkan plugin's shaders/gemm_coopmat.comp (bf16 through the same kernel's SPIR-V rewritten for
// VK_KHR_cooperative_matrix) and nvidia/gemm_mma.cl, the OpenCL plugin's (NVIDIA's tensor cores
// through inline PTX) keep one contract: 128 x 128 tiles of 256 invocations, 16-byte loads and
// stores (the Vulkan plugin's PTX modules on Hopper: 128 x 256 tiles, GpuTraits::coop_tile_n).
// Where the device has them and the operands fit those loads: every row (and each binding's
// offset, and every matrix stride) a multiple of 8 elements. c in the inputs' dtype, or in f32
// (out_dtype f32: the sums as they are), then with an f32 bias where addmm has one (its offset a
// multiple of 4). A grid smaller than the work-groups that run at once with K >= 2048 (a weight
// gradient) splits K as gemm() does (one wave), where M and N are whole 128 x 128 tiles (the
// SPIR-V kernel stores whole tiles of its parts; the PTX kernels check their rows and columns)
// and there is no bias: f32 parts of K a multiple of 64 (every kernel's K slice divides it),
// added up into c (rounded where c is 16-bit).
bool coop_gemm(Launcher& l, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor* bias,
               bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const BatchDims& g) {
  const bool bf16 = a.dtype() == DType::bf16, wide = c.dtype() == DType::f32;
  if (k == 0 || !(bf16 ? l.traits().coop_bf16 : l.traits().coop_f16 && a.dtype() == DType::f16))
    return false;
  if (bias && !wide) return false;  // a 16-bit bias: gemm.tk
  bool fits =
      multiples_of(8, {trans_a ? m : k, trans_b ? k : n, n, a.offset(), b.offset(), c.offset()}) &&
      (!bias || bias->offset() % 4 == 0);
  for (int d = 0; d < g.rank; ++d) fits = fits && g.stride_a[d] % 8 == 0 && g.stride_b[d] % 8 == 0;
  if (!fits) return false;
  // The kernels' output tile (128 x coop_tile_n), a multiple of their K slices (32 or 64), their
  // invocations, and the whole tiles split K asks for (the SPIR-V kernel's).
  constexpr std::int64_t kTileM = 128, kSlice = 64, kWholeTile = 128;
  const std::int64_t tile_n = l.traits().coop_tile_n;
  constexpr int kThreads = 256;
  const std::int64_t across = (n + tile_n - 1) / tile_n,
                     tiles = across * ((m + kTileM - 1) / kTileM);
  // One wave of the work-groups that run at once (coop_groups_per_unit a compute unit).
  const KParts split =
      !bias && m % kWholeTile == 0 && n % kWholeTile == 0
          ? wave_split(k, g.count * tiles,
                       wave_slots(l.traits(), std::max(l.traits().coop_groups_per_unit, 1)), 1024,
                       kSlice)
          : KParts{k, 1};
  const std::int64_t count = g.count * m * n;
  const Tensor partial =
      split.parts > 1 ? Tensor::empty({split.parts, count}, DType::f32, &l.device()) : Tensor();
  Launch launch(l, bf16 ? "gemm_coopmat_bf16" : "gemm_coopmat",
                {(trans_a ? kFlagTransA : 0) | (trans_b ? kFlagTransB : 0) |
                 (split.parts > 1 ? kFlagCoopSplit : 0) | (wide ? kFlagCoopWide : 0) |
                 (bias ? kFlagCoopBias : 0)});
  // Binding 3 is unread without a bias.
  launch.in(a).in(b).out(split.parts > 1 ? partial : c).in(bias ? *bias : a);
  gemm_words(launch, m, n, k, across, tiles, g);
  launch.i(split.per).group(kThreads).groups(split.parts * g.count * tiles);
  if (split.parts > 1) {
    const Tensor sums = wide ? c : Tensor::empty(c.shape(), DType::f32, &l.device());
    sum_lines(l, partial, sums, 1, split.parts, count, 1.0f);
    if (!wide) cast_into(l, sums, c);
  }
  return true;
}

// Whether the f32 GEMMs' 16-byte loads fit a product (gemm_tf32.cl's, gemm_ffma.cl's, gemm.tk's
// VEC): M, N, K, each binding's offset (c's |c_offset|) and every matrix stride multiples of 4.
bool fits_four(std::int64_t m, std::int64_t n, std::int64_t k, const Tensor& a, const Tensor& b,
               std::int64_t c_offset, const Tensor* bias, const BatchDims& g) {
  bool fits = multiples_of_4({m, n, k, a.offset(), b.offset(), c_offset}) &&
              (!bias || bias->offset() % 4 == 0);
  for (int d = 0; d < g.rank; ++d) fits = fits && g.stride_a[d] % 4 == 0 && g.stride_b[d] % 4 == 0;
  return fits;
}

// The NVIDIA f32 kernels' tiles (gemm_tf32.cl, gemm_ffma.cl: 128 x 128, 256 invocations) and
// their launch: |kernel| with |variant|, gemm.tk's bindings and words (MODE 0), K in |split|'s
// parts, whose f32 sums go to a scratch and are added into c afterwards.
constexpr std::int64_t kF32Tile = 128;
void launch_f32_tiles(Launcher& l, std::string_view kernel,
                      std::initializer_list<std::int32_t> variant, const Tensor& a, const Tensor& b,
                      const Tensor& c, const Tensor* bias, std::int64_t m, std::int64_t n,
                      std::int64_t k, const BatchDims& g, const KParts& split) {
  const std::int64_t across = (n + kF32Tile - 1) / kF32Tile,
                     tiles = across * ((m + kF32Tile - 1) / kF32Tile);
  const std::int64_t count = g.count * m * n;
  const Tensor partial =
      split.parts > 1 ? Tensor::empty({split.parts, count}, DType::f32, &l.device()) : Tensor();
  Launch launch(l, kernel, variant);
  // Binding 3 is unread without a bias.
  launch.in(a).in(b).out(split.parts > 1 ? partial : c).in(bias ? *bias : a);
  gemm_words(launch, m, n, k, across, tiles, g);
  launch.i(0).i(0).i(split.per).group(256).groups(split.parts * g.count * tiles);
  if (split.parts > 1) sum_lines(l, partial, c, 1, split.parts, count, 1.0f);
}

// f32 GEMMs on tensor cores where the caller's precision allows (high: 3 TF32 products, medium:
// 1), launched as "gemm_tf32" (nvidia/gemm_tf32.cl, the OpenCL plugin's): gemm.tk's bindings,
// words (MODE 0) and split K, its flags 1 (a stored [K, M]), 2 (b stored [N, K]) and 8 (bias) in
// V0, the products in V1; 128 x 128 tiles of 256 invocations, K slices of 16 (split K's parts
// multiples of 16), 16-byte copies: M, N, K, every matrix stride and each binding's offset a
// multiple of 4 floats, as gemm.tk's 4-float loads need.
bool tf32_gemm(Launcher& l, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor* bias,
               bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const BatchDims& g, MatmulPrecision precision) {
  if (precision == MatmulPrecision::highest || !l.traits().tf32_gemm || k == 0 ||
      a.dtype() != DType::f32 || c.dtype() != DType::f32)
    return false;
  if (!fits_four(m, n, k, a, b, c.offset(), bias, g)) return false;
  constexpr std::int64_t kSlice = 16;
  const std::int64_t tiles = ((n + kF32Tile - 1) / kF32Tile) * ((m + kF32Tile - 1) / kF32Tile);
  // K split as gemm() splits it for its largest tiles: one wave of two work-groups a compute unit.
  const KParts split = wave_split(k, g.count * tiles, wave_slots(l.traits(), 2), 512, kSlice);
  launch_f32_tiles(
      l, "gemm_tf32",
      {(trans_a ? kFlagTransA : 0) | (trans_b ? kFlagTransB : 0) | (bias ? kFlagBias : 0),
       precision == MatmulPrecision::high ? 3 : 1},
      a, b, c, bias, m, n, k, g, split);
  return true;
}

// f32 GEMMs on the kernel for a stored [K, M] and b [K, N] (trans_a, not trans_b: a weight's
// gradient, x^T dy) where the device has it and the plan takes the largest tiles (128 x 128; not
// where TESSERA_GEMM_TILES forces them: the portable kernel's tuning), launched as "gemm_ffma"
// (nvidia/gemm_ffma.cl): gemm.tk's bindings, words (MODE 0) and the plan's split K (parts of a
// multiple of 16), V0 1 | 8 (bias); 256 invocations; 16-byte copies: M, N, K, every matrix stride
// and each binding's offset a multiple of 4 floats. On the H200 1.13-1.21x as fast as gemm.tk
// through the Vulkan plugin (docs/bench/h200-ffma.txt), 1.13x at 4096^3 through the OpenCL plugin
// (clang's PTX module of it: docs/bench/h200-opencl-ffma-ptx.txt).
// The other layouts of an unbatched product take it too where their operands stored along K (a
// [M, K], b [N, K]) are first copied transposed (transpose_copy) into scratch, and the product has
// at least GpuTraits::ffma_copy_share multiply-adds for every element copied. On the H200 through
// the Vulkan plugin (share 256) NN 2048^3 / 4096^3 / 8192^3 ran 44.9 / 48.4 / 49.6 TFLOP/s against
// gemm.tk's 38.2 / 40.8 / 41.8 (the copy 1.4% of the time at 4096^3, 3.4 TB/s), and the GPT's f32
// step 1.10x as fast; through the OpenCL plugin (share 256 too) NN 46.4 / 48.4 / 48.7
// (docs/performance.md).
bool ffma_gemm(Launcher& l, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor* bias,
               bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const BatchDims& g, const GemmPlan& plan) {
  if (!l.traits().ffma_gemm || tiles_from_environment() || k == 0 || a.dtype() != DType::f32 ||
      c.dtype() != DType::f32 || (bias && bias->dtype() != DType::f32) ||
      plan.tiles.tm != kF32Tile || plan.tiles.tn != kF32Tile ||
      (plan.parts > 1 && plan.per % 16 != 0))
    return false;
  if (!fits_four(m, n, k, a, b, c.offset(), bias, g)) return false;
  const bool copy_a = !trans_a, copy_b = trans_b;
  // The copies' views are [K, M] and [K, N] (rows along K).
  if ((copy_a || copy_b) &&
      (l.traits().ffma_copy_share <= 0 || g.rank != 0 || (copy_a && !transpose_fits(l, k, m)) ||
       (copy_b && !transpose_fits(l, k, n)) ||
       ((copy_a ? m : 0) + (copy_b ? n : 0)) * l.traits().ffma_copy_share > m * n))
    return false;
  // a stored [M, K] and b [N, K]: their transposed views copied into [K, M] and [K, N].
  const auto along_k = [&](const Tensor& t, std::int64_t cols) {
    const Tensor kept = Tensor::empty({k, cols}, DType::f32, &l.device());
    if (!transpose_copy(l, t.t(), kept))
      throw BackendError("gemm_ffma: transpose_copy refused an operand's transposed view");
    return kept;
  };
  launch_f32_tiles(l, "gemm_ffma", {kFlagTransA | (bias ? kFlagBias : 0)},
                   copy_a ? along_k(a, m) : a, copy_b ? along_k(b, n) : b, c, bias, m, n, k, g,
                   {plan.per, plan.parts});
  return true;
}

}  // namespace

GemmPlan gemm_plan(const GpuTraits& traits, std::int64_t m, std::int64_t n, std::int64_t k,
                   std::int64_t count) {
  GemmTiles t = gemm_tiles(traits, m, n, count);
  // A small output with a long K (a weight gradient: K is the batch's tokens) leaves compute
  // units idle with any tiles: K is split in parts of at least 512, on GPUs with the largest
  // tiles, their sums added afterwards in a fixed order. As many parts as fill one wave of two
  // work-groups a compute unit (as many as run at once there; a second, partial wave would
  // take as long as the first): the GPT's weight gradients on the H100 went from 20-25 to 31-42
  // TFLOP/s against one work-group a compute unit (docs/performance.md).
  KParts split{k, 1};
  const GemmTiles largest = with_buffers(gpu_tiles(traits)[0], traits);
  // Whether the split may take the largest tiles: a GPU (not a CPU driver) whose tiles are not
  // forced by TESSERA_GEMM_TILES and that fits them.
  const bool largest_free =
      !tiles_from_environment() && !traits.is_cpu && unfit(largest, traits).empty();
  const std::int64_t units = traits.compute_units;  // 0 where the API does not say
  // The work-groups of the product with tiles |s|.
  const auto groups_of = [&](const GemmTiles& s) {
    return count * ((m + s.tm - 1) / s.tm) * ((n + s.tn - 1) / s.tn);
  };
  // K in |want| parts of the largest tiles (fewer where rounding covers K sooner).
  const auto split_largest = [&](std::int64_t want) {
    split = split_k(k, want, largest.tk);
    if (split.parts > 1) t = largest;
  };
  if (k >= 2048) {
    const GemmTiles big = largest_free ? largest : t;
    split = wave_split(k, groups_of(big), wave_slots(traits, 2), 512, big.tk);
    if (split.parts > 1) t = big;
  } else if (k >= 1024 && largest_free && units > 0 && 2 * groups_of(largest) <= units) {
    // A grid that leaves half the compute units idle even at the largest tiles (1024^3: 64 on
    // 132): the largest tiles with K in parts of at least 512, one work-group a unit, instead of
    // smaller tiles over the whole K (1024^3 on the H200 6-10% faster; docs/performance.md).
    split_largest(std::min(units / groups_of(largest), k / 512));
  }
  if (split.parts == 1 && k >= 1024 && largest_free && traits.vendor_id == 0x10de && units > 0) {
    // A ragged last wave (1536^3: 144 tiles on 132 units run as two waves, the second of 12):
    // K in p parts (at most 4, each at least 512) where that cuts the waves a part's length
    // takes by a fifth or more, counting one work-group a unit (as the largest tiles run through
    // the Vulkan plugin's modules; the OpenCL build's two share the unit's issue slots). On the
    // H200 1536^3 ran 26-33% faster, 1536 x 1536 x 4096 47-52% (docs/performance.md). NVIDIA
    // GPUs only, where it was measured: other APIs count their compute units otherwise.
    const std::int64_t groups = groups_of(largest);
    const auto waves = [&](std::int64_t p) {
      return static_cast<double>((groups * p + units - 1) / units) / static_cast<double>(p);
    };
    std::int64_t best = 1;
    for (std::int64_t p = 2; p <= std::min<std::int64_t>(4, k / 512); ++p)
      if (waves(p) < waves(best)) best = p;
    if (groups > units && best > 1 && waves(best) <= 0.8 * waves(1)) split_largest(best);
  }
  return {t, split.per, split.parts};
}

void gemm(Launcher& l, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor* bias,
          bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          const BatchDims& g, MatmulPrecision precision) {
  if (m == 0 || n == 0 || g.count == 0) return;
  if (coop_gemm(l, a, b, c, bias, trans_a, trans_b, m, n, k, g)) return;
  if (tf32_gemm(l, a, b, c, bias, trans_a, trans_b, m, n, k, g, precision)) return;
  const GemmPlan plan = gemm_plan(l.traits(), m, n, k, g.count);
  if (ffma_gemm(l, a, b, c, bias, trans_a, trans_b, m, n, k, g, plan)) return;
  const GemmTiles t = plan.tiles;
  const KParts split{plan.per, plan.parts};
  // f16 and bf16 inputs load 4 at a time as two 32-bit words where aligned (as f32's 4-float
  // loads); the sums stay f32 (a scratch for c) and are rounded into c afterwards (cast_into),
  // or are c itself with out_dtype f32 (whose bias is f32 too).
  const int dtype = float_code(a.dtype());
  const bool wide = c.dtype() == DType::f32;
  const bool vec = fits_four(m, n, k, a, b, wide ? c.offset() : 0, bias, g);
  const int flags = (trans_a ? kFlagTransA : 0) | (trans_b ? kFlagTransB : 0) |
                    (vec ? kFlagVec : 0) | (bias ? kFlagBias : 0) |
                    (t.buffers == 2 ? kFlagTwoBuffers : 0) | dtype << kDTypeShift |
                    (dtype != 0 && bias && bias->dtype() == DType::f32 ? kFlagBiasF32 : 0);
  const std::int64_t across = (n + t.tn - 1) / t.tn, tiles = across * ((m + t.tm - 1) / t.tm);
  const std::int64_t count = g.count * m * n;
  const Tensor partial =
      split.parts > 1 ? Tensor::empty({split.parts, count}, DType::f32, &l.device()) : Tensor();
  const Tensor sums = wide ? c : Tensor::empty(c.shape(), DType::f32, &l.device());
  Launch launch = gemm_launch(l, t, flags);
  // Binding 3 is unread without a bias.
  launch.in(a).in(b).out(split.parts > 1 ? partial : sums).in(bias ? *bias : a);
  gemm_words(launch, m, n, k, across, tiles, g);
  launch.i(0).i(0).i(split.per).groups(split.parts * g.count * tiles);
  if (split.parts > 1) sum_lines(l, partial, sums, 1, split.parts, count, 1.0f);
  if (!wide) cast_into(l, sums, c);
}

ConvGemm conv_gemm_shape(const Conv& g, int mode) {
  const std::int64_t cg = g.c / g.groups, og = g.o / g.groups, taps = std::int64_t{g.kh} * g.kw;
  const std::int64_t out = std::int64_t{g.n} * g.ho * g.wo, in = std::int64_t{g.n} * g.h * g.w;
  switch (mode) {
    case 1:
      return {og, out, cg * taps};
    case 2:
      return {cg, in, og * taps};
    default:
      return {og, cg * taps, out};
  }
}

GemmTiles conv_tiles(const GpuTraits& traits, std::int64_t m, std::int64_t n, std::int64_t count) {
  // The channels of a group are the short side (16 to 64 in a ResNet-20): up to 64 of them take
  // 32 x 128 tiles, the fastest of six sets on the H100 for ResNet-20's training step (3.9 ms of
  // GEMM a step, against 4.9 with 64 x 128 and 7.8 with 16 x 128; docs/performance.md). More
  // channels, CPU drivers and a forced set take the GEMM's choice.
  constexpr GemmTiles kConv{32, 128, 16, 4, 8, 2};
  if (tiles_from_environment() || traits.is_cpu || m > 64 || !unfit(kConv, traits).empty())
    return gemm_tiles(traits, m, n, count);
  return kConv;
}

void conv_gemm(Launcher& l, const Conv& g, int mode, const Tensor& a, const Tensor& b,
               const Tensor& out) {
  const ConvGemm s = conv_gemm_shape(g, mode);
  if (s.m == 0 || s.n == 0) return;
  const GemmTiles t = conv_tiles(l.traits(), s.m, s.n, g.groups);
  const std::int64_t across = (s.n + t.tn - 1) / t.tn, tiles = across * ((s.m + t.tm - 1) / t.tm);
  // MODE 3 splits K (batch x output pixels, the long side) so that every compute unit has work:
  // parts of at least 256, their partial sums added afterwards in a fixed order.
  KParts split{s.k, 1};
  if (mode == 3 && s.k > 0) {
    const std::int64_t want = l.traits().compute_units > 0 ? 2 * l.traits().compute_units : 4;
    split = split_k(s.k,
                    std::clamp<std::int64_t>((want + g.groups * tiles - 1) / (g.groups * tiles), 1,
                                             (s.k + 255) / 256),
                    t.tk);
  }
  const std::int64_t plane = std::int64_t{g.ho} * g.wo, iplane = std::int64_t{g.h} * g.w;
  // 4-float groups: MODE 1 reads w's rows (K of them a multiple of 4) and stores y's planes;
  // MODE 2 stores dx's planes; MODE 3 reads gy's planes and stores dw's rows (N).
  bool vec = out.offset() % 4 == 0;
  if (mode == 1) vec = vec && multiples_of_4({s.k, a.offset(), plane});
  if (mode == 2) vec = vec && iplane % 4 == 0;
  if (mode == 3) vec = vec && multiples_of_4({plane, a.offset(), s.n});
  const int flags = (vec ? kFlagVec : 0) | (t.buffers == 2 ? kFlagTwoBuffers : 0) |
                    mode << kModeShift |
                    (mode == 2 && g.sh == 1 && g.sw == 1 ? kFlagUnitStride : 0);
  // Where K is split, the parts go to a scratch [parts, groups, M, N], then add up into |out|.
  const Tensor partial = split.parts > 1
                             ? Tensor::empty({split.parts, out.numel()}, DType::f32, &l.device())
                             : Tensor();
  gemm_launch(l, t, flags)
      .in(a)
      .in(b)
      .out(split.parts > 1 ? partial : out)
      .in(a)
      .i(s.m)
      .i(s.n)
      .i(s.k)
      .i(across)
      .i(tiles)
      .words(g)
      .i(split.per)
      .groups(split.parts * g.groups * tiles);
  if (split.parts > 1) sum_lines(l, partial, out, 1, split.parts, out.numel(), 1.0f);
}

namespace {

void matmul(const OpCall& call, Launcher& l) {
  const auto& at = call.attr<MatmulAttrs>();
  const Tensor &a = call.in(0), &b = call.in(1), &y = call.out(0);
  const std::int64_t k = at.trans_a ? a.dim(0) : a.dim(1);
  gemm(l, a, b, y, call.op == OpId::addmm ? &call.in(2) : nullptr, at.trans_a, at.trans_b, y.dim(0),
       y.dim(1), k, BatchDims{}, at.precision);
}

void bmm(const OpCall& call, Launcher& l) {
  const auto& at = call.attr<MatmulAttrs>();
  const Shape& ys = call.out(0).shape();
  const Shape& as = call.in(0).shape();
  const std::int64_t k = at.trans_a ? as[as.rank() - 2] : as[as.rank() - 1];
  gemm(l, call.in(0), call.in(1), call.out(0), nullptr, at.trans_a, at.trans_b, ys[ys.rank() - 2],
       ys[ys.rank() - 1], k, batch_dims(call), at.precision);
}

}  // namespace

void add_gemm_ops(PortableOps& ops) {
  ops.add(OpId::matmul, matmul, gpu_half_supports);
  ops.add(OpId::addmm, matmul, gpu_half_supports);
  ops.add(OpId::bmm, bmm, gpu_half_supports);
}

}  // namespace tessera::common
