// The portable kernel layer: GPU ops written once for every GPU plugin.
//
// An op's launch geometry is one host function, `void run(const OpCall&, Launcher&)`, in
// plugins/common/ops_*.cpp; its kernel body is one file, plugins/common/kernels/NAME.tk, written
// in a dialect that compiles as GLSL 450 (Vulkan, at build time) and as OpenCL C 1.2 (at run time)
// through a prelude per language (kernels/README.md describes the dialect). A GPU plugin
// implements Launcher once (how to bind tensors, pass parameter words and dispatch a grid) and
// installs every PortableOp as a kernel: adding an op touches no plugin.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/kernel.h"

namespace tessera::common {

inline constexpr int kMaxBindings = 8;  // tensors of one launch: bindings 0..7
inline constexpr int kMaxWords = 23;    // parameter words P(0)..P(22)
inline constexpr int kMaxVariants = 4;  // compile-time constants V0..V3
// Words 0..7 carry the bindings' element offsets, word 8 the number of work-groups; the
// parameters follow.
inline constexpr int kWordsOffset = 9;
inline constexpr std::int64_t kMaxGroupsX = 65535;  // the minimum maxComputeWorkGroupCount[0]

// What a launch function may ask of the device it runs on.
struct GpuTraits {
  std::uint32_t vendor_id = 0;            // PCI vendor (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel)
  std::int32_t subgroup_size = 32;        // SIMD width (warp, wavefront); 1 when unknown
  std::int32_t max_group_size = 256;      // invocations per work-group
  std::int64_t max_shared_bytes = 16384;  // shared (local) memory per work-group
  bool is_cpu = false;                    // a CPU driver (lavapipe, PoCL)
  std::int32_t compute_units = 0;         // SMs, CUs or cores; 0 when the API does not say
  // The register-tiled attention kernels (kernels/flash_*.tk) run correctly through this
  // device's compiler (Vulkan, OpenCL GPUs; the opencl plugin's device.cpp says why not PoCL).
  bool tiled_attention = false;
  // Kernels may store 16-bit elements (Vulkan's storageBuffer16BitAccess; always in OpenCL C):
  // without it, no call with an f16 or bf16 tensor runs (PortableKernel::supports).
  bool storage16 = true;
  // An f16 GEMM on matrix units runs here, launched as "gemm_coopmat" (ops_gemm.cpp's coop_gemm
  // says its contract): the Vulkan plugin's shaders/gemm_coopmat.comp (VK_NV_cooperative_matrix,
  // 16 x 16 x 16 f16 products, subgroups of 32), or the OpenCL plugin's nvidia/gemm_mma.cl
  // (mma.sync through inline PTX, on NVIDIA GPUs whose compiler takes it); on Hopper
  // nvidia/gemm_wgmma.cl, which both plugins run there (the Vulkan plugin as PTX through
  // VK_NVX_binary_import: its CuKernels).
  bool coop_f16 = false;
  // And its bf16 form, launched as "gemm_coopmat_bf16" (Vulkan: the same kernel's SPIR-V
  // rewritten for VK_KHR_cooperative_matrix with bf16 fragments, the plugin's spirv_bf16.h).
  bool coop_bf16 = false;
  // The Vulkan plugin's attention kernels on matrix units (its shaders/attention_coopmat.comp,
  // which also needs subgroup shuffles) run here for f16, and for bf16 (launched as
  // "attention_coopmat_bf16", rewritten as the GEMM's).
  bool coop_attention_f16 = false;
  bool coop_attention_bf16 = false;
  // How many of the matrix-unit GEMM's work-groups run at once on a compute unit (its registers
  // and shared memory allow): split K makes as many parts as fill one such wave. The Vulkan
  // kernel: 1 (229 registers); the OpenCL plugin's nvidia/gemm_mma.cl: 2 (124 registers, 40 KiB),
  // and nvidia/gemm_wgmma.cl's 128 x 128 tiles: 2; its 128 x 256 tiles (the Vulkan plugin's PTX
  // modules): 1.
  std::int32_t coop_groups_per_unit = 1;
  // The matrix-unit GEMM's tile width (its tiles are 128 x coop_tile_n): 128, or 256 where the
  // Vulkan plugin's PTX modules were built with nvidia/gemm16.cl's BN 256 (the default).
  std::int32_t coop_tile_n = 128;
  // f32 GEMMs on tensor cores where float32_matmul_precision() allows (MatmulAttrs::precision high:
  // each operand as two TF32 numbers, three products; medium: one), launched as "gemm_tf32"
  // (ops_gemm.cpp's tf32_gemm says its contract): the OpenCL plugin's nvidia/gemm_tf32.cl on
  // NVIDIA GPUs whose compiler takes its PTX.
  bool tf32_gemm = false;
  // The f32 GEMM whose operands both run along M and N in memory (a stored [K, M], b [K, N]: a
  // weight's gradient) on the 128 x 128 tiles through cp.async, launched as "gemm_ffma"
  // (ops_gemm.cpp's ffma_gemm says its contract): nvidia/gemm_ffma.cl, the OpenCL plugin's on
  // NVIDIA GPUs whose compiler takes its PTX, the Vulkan plugin's PTX modules; off with
  // TESSERA_GEMM_FFMA=0.
  bool ffma_gemm = false;
  // The other layouts of an unbatched f32 product take that kernel too, their operands stored
  // along K (a [M, K], b [N, K]) first copied transposed, where the product has at least this
  // many multiply-adds for every element copied (M N K >= share * the copies' elements); 0
  // never. What the copies cost against what the kernel gains over gemm.tk differs per plugin
  // (ops_gemm.cpp's ffma_gemm gives the H200's figures).
  std::int32_t ffma_copy_share = 0;
  // The GEMM's largest tiles (128 x 128) stage K through one shared buffer instead of two: the
  // device's compiler gives the two-buffer kernel registers enough that fewer work-groups share
  // a compute unit (NVIDIA's Vulkan compiler: 157 registers against 116, so one 256-invocation
  // work-group an SM instead of two; 30 against 37 TFLOP/s at 8192^3 on the H100).
  bool gemm_one_buffer = false;
};

class Launcher;

// One dispatch of a portable kernel, built by chaining and issued by run() or groups():
//
//   Launch(l, "layer_norm", {V0, V1}).in(x).in(w).out(y).i(rows).f(eps).shared(256).groups(rows);
//
// Tensors become bindings 0, 1, ... in the order given (their element offsets are passed for the
// kernel, which adds them in LDF/STF); i()/f()/words() append parameter words P(0), P(1), ...
// Throws BackendError (a programming error) past kMaxBindings tensors or kMaxWords words.
class Launch {
 public:
  Launch(Launcher& launcher, std::string_view kernel,
         std::initializer_list<std::int32_t> variant = {});

  Launch& in(const Tensor& t) { return bind(t, false); }
  Launch& out(const Tensor& t) { return bind(t, true); }
  Launch& i(std::int64_t v);  // v must fit 32 bits
  Launch& f(float v) {
    std::int32_t w;
    std::memcpy(&w, &v, 4);
    return i(w);
  }
  template <typename T>
  Launch& words(const T& s) {  // a struct of 32-bit fields, in order
    static_assert(sizeof(T) % 4 == 0);
    std::int32_t w[sizeof(T) / 4];
    std::memcpy(w, &s, sizeof(T));
    for (const std::int32_t x : w) i(x);
    return *this;
  }
  // Floats of shared scratch, SHM(0..n) in the kernel.
  Launch& shared(std::int32_t floats) {
    shared_floats_ = floats;
    return *this;
  }
  // The name profiles give this dispatch (Profiler, tessera-bench --profile): the kernel's unless
  // set, for a kernel whose variants are different kernels. |name| must outlive the launch (a
  // literal).
  Launch& label(std::string_view name) {
    label_ = name;
    return *this;
  }
  // Invocations per work-group (GSIZE); 256 unless set.
  Launch& group(std::int32_t size) {
    group_size_ = size;
    return *this;
  }
  // Dispatches one invocation per index GID in [0, n) (rounded up to whole work-groups: a kernel
  // checks GID against its bound). Nothing to do for n <= 0.
  void run(std::int64_t n);
  // Dispatches |count| work-groups: GROUP in [0, count), LID in [0, GSIZE).
  void groups(std::int64_t count);

  // For plugins (Launcher::launch).
  struct Binding {
    const Tensor* tensor;
    bool write;
  };
  std::string_view kernel() const { return kernel_; }
  std::string_view label() const { return label_.empty() ? kernel_ : label_; }
  std::span<const std::int32_t> variant() const { return variant_; }
  std::span<const Binding> bindings() const { return {bindings_.data(), num_bindings_}; }
  // All words the kernel reads: kWordsOffset offsets, then the parameters.
  std::span<const std::int32_t> words() const { return {words_.data(), kWordsOffset + num_words_}; }
  std::int32_t group_size() const { return group_size_; }
  std::int32_t shared_floats() const { return shared_floats_; }
  std::int64_t group_count() const { return group_count_; }
  // The grid of group_count() work-groups as (x, y): x <= kMaxGroupsX, x * y >= group_count();
  // kernels see the flattened GROUP and skip the groups past the end.
  std::array<std::uint32_t, 2> grid() const;

 private:
  Launch& bind(const Tensor& t, bool write);
  Launcher& launcher_;
  std::string_view kernel_;
  std::string_view label_;
  std::array<std::int32_t, kMaxVariants> variant_{};
  std::array<Binding, kMaxBindings> bindings_{};
  std::size_t num_bindings_ = 0;
  std::array<std::int32_t, kWordsOffset + kMaxWords> words_{};
  std::size_t num_words_ = 0;
  std::int32_t group_size_ = 256;
  std::int32_t shared_floats_ = 0;
  std::int64_t group_count_ = 0;
};

// A GPU plugin's half of the layer. launch() records one dispatch of |l| on the device's queue
// in order with everything before it (nothing waits); it throws BackendError when the kernel
// can not be built (naming the kernel and the compiler's log). Thread-safe as the plugin's
// kernels are (calls come from the dispatcher, one device queue).
class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual Device& device() = 0;
  virtual const GpuTraits& traits() const = 0;
  virtual void launch(const Launch& l) = 0;
};

// One op of the layer: how to launch it, and which calls it takes (gpu_supports unless given).
struct PortableOp {
  OpId op;
  void (*run)(const OpCall& call, Launcher& launcher);
  Support (*supports)(const OpCall& call);
  // Where set, asked instead of |supports|: an op whose support depends on the device (its
  // traits).
  Support (*supports_on)(const OpCall& call, const GpuTraits& traits) = nullptr;
};

// The table every GPU plugin installs. Each group of ops adds its own (ops_*.cpp); add() throws
// BackendError for an op added twice.
class PortableOps {
 public:
  void add(OpId op, void (*run)(const OpCall&, Launcher&),
           Support (*supports)(const OpCall&) = nullptr);
  void add(OpId op, void (*run)(const OpCall&, Launcher&),
           Support (*supports_on)(const OpCall&, const GpuTraits&));
  std::span<const PortableOp> ops() const { return ops_; }

 private:
  std::vector<PortableOp> ops_;
};

// Every portable op, in the order the groups add them.
const PortableOps& portable_ops();

// A Kernel running one PortableOp through a plugin's Launcher.
class PortableKernel final : public Kernel {
 public:
  PortableKernel(const PortableOp& op, Launcher& launcher) : op_(op), launcher_(launcher) {}
  Support supports(const OpCall& call) const override;
  void launch(const OpCall& call, Queue&) const override { op_.run(call, launcher_); }

 private:
  PortableOp op_;
  Launcher& launcher_;
};

[[noreturn]] void throw_duplicate_kernel(OpId op);

// Puts a PortableKernel for every portable op into a plugin's kernel table (indexed by OpId), all
// running through |launcher|. Throws BackendError when the plugin already has a kernel of its own
// for one of them (an op lives in one place).
template <typename Table>
void install_portable_ops(Table& table, Launcher& launcher) {
  for (const PortableOp& op : portable_ops().ops()) {
    auto& slot = table[static_cast<std::size_t>(op.op)];
    if (slot) throw_duplicate_kernel(op.op);
    slot = std::make_unique<PortableKernel>(op, launcher);
  }
}
}  // namespace tessera::common
