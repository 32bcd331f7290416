// The OpenCL half of the portable kernel layer (../common/portable.h): a portable kernel is the
// program prelude.cl + common.tk + NAME.tk built with -DV0..-DV3, entry point tk_main, taking
// eight buffers, the parameter words as one struct and the shared scratch as a __local argument.
// The matrix-unit GEMM launches ("gemm_coopmat", "gemm_coopmat_bf16", made only where the traits
// say so) run this plugin's ../common/nvidia/gemm_mma.cl (../common/nvidia/gemm_wgmma.cl on
// Hopper), "gemm_tf32" its ../common/nvidia/gemm_tf32.cl and "gemm_ffma" its
// ../common/nvidia/gemm_ffma.cl (clang's PTX module of it where the plugin has one); all take the
// same arguments, but gemm_ffma no __local scratch.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "opencl.h"
#include "tessera/embedded.h"
#include "tessera/log.h"

namespace tessera::opencl {

std::string mma_gemm_options(std::int32_t v0, bool bf16) {
  return fmt::format("-DV0={} -DTK_BF16={}", v0, bf16 ? 1 : 0);
}

std::string tf32_gemm_options(std::int32_t v0, std::int32_t v1) {
  // At most 128 registers, so that two work-groups share an SM (the kernel declares no
  // reqd_work_group_size: NVIDIA's compiler ignores the cap on kernels that do).
  return fmt::format("-DV0={} -DV1={} -cl-nv-maxrregcount=128", v0, v1);
}

std::string ffma_ptx_module(std::int32_t v0) {
  return fmt::format("gemm_ffma_{}.ptx", v0);
}

std::string ffma_gemm_options(std::int32_t v0) {
  // K slices of 8, four in flight (32 KiB); at most 128 registers, so that two work-groups share
  // an SM.
  return fmt::format("-DV0={} -DBK=8 -DSTAGES=4 -DTK_NO_SHM_ARG -cl-nv-maxrregcount=128", v0);
}

OpenclLauncher::OpenclLauncher(Device& device, Context& ctx, common::GpuTraits traits, bool wgmma)
    : device_(device), ctx_(ctx), traits_(traits), wgmma_(wgmma) {}

void OpenclLauncher::launch(const common::Launch& l) {
  const auto v = l.variant();
  const std::string options =
      fmt::format("-DV0={} -DV1={} -DV2={} -DV3={}", v[0], v[1], v[2], v[3]);
  struct Params {
    cl_int w[32];
  } params{};
  const auto words = l.words();
  std::memcpy(params.w, words.data(), words.size_bytes());
  params.w[common::kWordsOffset - 1] = static_cast<cl_int>(l.group_count());

  std::lock_guard lock(ctx_.launch_mu);
  // The tensor-core GEMMs (only launched where the traits offer them) are the plugin's own
  // kernels.
  const cl_kernel k =
      l.kernel().starts_with("gemm_coopmat")
          ? ctx_.programs.kernel(wgmma_ ? kWgmmaGemm : kMmaGemm, "tk_main",
                                 mma_gemm_options(v[0], l.kernel().ends_with("_bf16")),
                                 wgmma_ ? Programs::Retarget::sm_90a : Programs::Retarget::none)
      : l.kernel() == "gemm_tf32"
          ? ctx_.programs.kernel(kTf32Gemm, "tk_main", tf32_gemm_options(v[0], v[1]))
      : l.kernel() == "gemm_ffma"
          ? ffma_kernel(v[0])
          : ctx_.programs.kernel(fmt::format("{}.tk", l.kernel()), "tk_main", options);
  const auto bindings = l.bindings();
  for (cl_uint b = 0; b < common::kMaxBindings; ++b) {
    const Tensor& t = *bindings[b < bindings.size() ? b : 0].tensor;
    const cl_mem mem = static_cast<const OpenclBuffer&>(t.buffer()).mem();
    check(clSetKernelArg(k, b, sizeof mem, &mem), "clSetKernelArg", ctx_.queue.id());
  }
  check(clSetKernelArg(k, common::kMaxBindings, sizeof params, &params), "clSetKernelArg",
        ctx_.queue.id());
  // Every kernel but gemm_ffma's forms (TK_NO_SHM_ARG) takes the __local scratch last.
  if (l.kernel() != "gemm_ffma") {
    const std::size_t shared = static_cast<std::size_t>(std::max(l.shared_floats(), 1)) * 4;
    check(clSetKernelArg(k, common::kMaxBindings + 1, shared, nullptr), "clSetKernelArg",
          ctx_.queue.id());
  }
  const auto grid = l.grid();
  const auto group = static_cast<std::size_t>(l.group_size());
  const std::size_t global[2] = {grid[0] * group, grid[1]};
  const std::size_t local[2] = {group, 1};
  ctx_.queue.enqueue_kernel(l.label(), k, global, local);
}

cl_kernel OpenclLauncher::ffma_kernel(std::int32_t v0) {
  if (ffma_ptx_) {
    const std::string module = ffma_ptx_module(v0);
    if (!embedded_file(module).empty()) {
      try {
        return ctx_.programs.ptx_kernel(module, "tk_main");
      } catch (const BackendError& e) {
        log().warn("{}: the f32 GEMM's PTX module was refused; building its source instead: {}",
                   ctx_.queue.id(), e.what());
      }
    } else {
      log().debug("{}: built without {}: the f32 GEMM builds its source", ctx_.queue.id(), module);
    }
    ffma_ptx_ = false;
  }
  return ctx_.programs.kernel(kFfmaGemm, "tk_main", ffma_gemm_options(v0));
}

}  // namespace tessera::opencl
