#include <string_view>

#include <fmt/format.h>

#include "../common/env_switch.h"
#include "../common/limits.h"
#include "../common/ops.h"
#include "opencl.h"
#include "tessera/log.h"

namespace tessera::opencl {

std::string error_name(cl_int err) {
  const char* name = "unknown error";
  switch (err) {
#define CASE(x) \
  case x:       \
    name = #x;  \
    break;
    CASE(CL_DEVICE_NOT_FOUND)
    CASE(CL_DEVICE_NOT_AVAILABLE)
    CASE(CL_COMPILER_NOT_AVAILABLE)
    CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    CASE(CL_OUT_OF_RESOURCES)
    CASE(CL_OUT_OF_HOST_MEMORY)
    CASE(CL_BUILD_PROGRAM_FAILURE)
    CASE(CL_INVALID_VALUE)
    CASE(CL_INVALID_DEVICE)
    CASE(CL_INVALID_BINARY)
    CASE(CL_INVALID_BUILD_OPTIONS)
    CASE(CL_INVALID_PROGRAM)
    CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    CASE(CL_INVALID_KERNEL_NAME)
    CASE(CL_INVALID_KERNEL_ARGS)
    CASE(CL_INVALID_ARG_INDEX)
    CASE(CL_INVALID_ARG_VALUE)
    CASE(CL_INVALID_ARG_SIZE)
    CASE(CL_INVALID_MEM_OBJECT)
    CASE(CL_INVALID_WORK_GROUP_SIZE)
    CASE(CL_INVALID_WORK_ITEM_SIZE)
    CASE(CL_INVALID_GLOBAL_WORK_SIZE)
    CASE(CL_INVALID_BUFFER_SIZE)
    CASE(CL_INVALID_COMMAND_QUEUE)
    CASE(CL_INVALID_CONTEXT)
    CASE(CL_INVALID_OPERATION)
    CASE(CL_INVALID_EVENT_WAIT_LIST)
    CASE(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    CASE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
#undef CASE
    default:
      break;
  }
  return fmt::format("{} ({})", name, err);
}

void check(cl_int err, std::string_view what, std::string_view device) {
  if (err != CL_SUCCESS)
    throw BackendError(fmt::format("{} on {} failed: {}", what, device, error_name(err)));
}

std::string device_string(cl_device_id d, cl_device_info what) {
  std::size_t size = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string s(size, '\0');
  clGetDeviceInfo(d, what, size, s.data(), nullptr);
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

namespace {

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  std::size_t size = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string s(size, '\0');
  clGetPlatformInfo(p, what, size, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

DeviceType type_of(cl_device_id d) {
  const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
  if (type & CL_DEVICE_TYPE_CPU) return DeviceType::cpu;
  if (type & CL_DEVICE_TYPE_GPU)
    return device_value<cl_bool>(d, CL_DEVICE_HOST_UNIFIED_MEMORY) ? DeviceType::integrated_gpu
                                                                   : DeviceType::discrete_gpu;
  return DeviceType::other;
}

bool has_extension(const std::string& list, std::string_view ext) {
  std::size_t at = 0;
  while ((at = list.find(ext, at)) != std::string::npos) {
    const std::size_t end = at + ext.size();
    if ((at == 0 || list[at - 1] == ' ') && (end == list.size() || list[end] == ' ')) return true;
    at = end;
  }
  return false;
}

}  // namespace

bool wgmma_allowed() {
  return common::env_switch("TESSERA_OPENCL_WGMMA",
                            "the OpenCL plugin's 16-bit GEMMs on compute capability 9.0 use "
                            "mma.sync instead of wgmma");
}

OpenclDevice::OpenclDevice(cl_platform_id platform, cl_device_id device, int index) {
  const std::string id = fmt::format("opencl:{}", index);
  cl_int err = CL_SUCCESS;
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                         reinterpret_cast<cl_context_properties>(platform), 0};
  context_ = clCreateContext(props, 1, &device, nullptr, nullptr, &err);
  check(err, "clCreateContext", id);

  const std::string extensions = device_string(device, CL_DEVICE_EXTENSIONS);
  const auto global = device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE);
  const auto local = device_value<cl_ulong>(device, CL_DEVICE_LOCAL_MEM_SIZE);
  const auto max_wg = device_value<std::size_t>(device, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  const bool unified = device_value<cl_bool>(device, CL_DEVICE_HOST_UNIFIED_MEMORY);
  const std::string platform_name = platform_string(platform, CL_PLATFORM_NAME);
  const std::string platform_version = platform_string(platform, CL_PLATFORM_VERSION);
  info_.name = device_string(device, CL_DEVICE_NAME);
  info_.type = type_of(device);
  info_.vendor = device_string(device, CL_DEVICE_VENDOR);
  info_.driver = device_string(device, CL_DRIVER_VERSION);
  info_.compute_units =
      static_cast<int>(device_value<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS));
  info_.score = 10;
  info_.properties = {
      {"platform", fmt::format("{} ({})", platform_name, platform_version)},
      {"opencl version", device_string(device, CL_DEVICE_VERSION)},
      {"opencl c version", device_string(device, CL_DEVICE_OPENCL_C_VERSION)},
      {"global memory", format_bytes(global)},
      {"local memory", format_bytes(local)},
      {"max work-group size", std::to_string(max_wg)},
      {"host unified memory", unified ? "yes" : "no"},
      {"fp16", has_extension(extensions, "cl_khr_fp16") ? "yes" : "no"},
      {"fp64", has_extension(extensions, "cl_khr_fp64") ? "yes" : "no"},
  };

  // Devices that share the host's memory use host allocations in place (zero copy).
  const bool host_memory = info_.type == DeviceType::cpu || unified;
  queue_ = std::make_unique<OpenclQueue>(context_, device, id);
  allocator_ =
      std::make_unique<OpenclAllocator>(context_, device, id, info_.name, host_memory, *queue_);
  info_.properties.push_back(
      {"largest buffer",
       fmt::format("{} (CL_DEVICE_MAX_MEM_ALLOC_SIZE)", format_bytes(allocator_->max_alloc()))});
  programs_ = std::make_unique<Programs>(
      context_, device, id, fmt::format("{}|{}|{}", info_.name, info_.driver, platform_version));

  ctx_ = std::make_unique<Context>(Context{*programs_, *queue_, launch_mu_});
  common::GpuTraits traits;
  traits.vendor_id = device_value<cl_uint>(device, CL_DEVICE_VENDOR_ID);
  traits.subgroup_size = traits.vendor_id == 0x10de ? 32 : 1;
  traits.max_group_size = static_cast<std::int32_t>(std::min<std::size_t>(max_wg, 1024));
  // NVIDIA's driver keeps 1 KiB of each work-group's shared memory for itself (CUDA's "reserved
  // shared memory per block" since Ampere) but reports the whole 48 KiB as
  // CL_DEVICE_LOCAL_MEM_SIZE: a kernel asking for all of it fails to launch with
  // CL_OUT_OF_RESOURCES (seen on an H100).
  traits.max_shared_bytes =
      static_cast<std::int64_t>(local) - (traits.vendor_id == 0x10de ? 1024 : 0);
  traits.is_cpu = info_.type == DeviceType::cpu;
  traits.compute_units = info_.compute_units;
  // The register-tiled attention kernels (kernels/flash_*.tk) run on GPUs; CPU drivers keep the
  // general ones: PoCL 3.1 miscompiles the tiled kernels when it specialises a work-group function
  // (a causal row now and then attends to masked keys; POCL_WORK_GROUP_SPECIALIZATION=0 or
  // -cl-opt-disable make them pass; oclgrind finds no invalid access, race or divergence).
  traits.tiled_attention = !traits.is_cpu;
  // 16-bit GEMMs on tensor cores (../common/nvidia/gemm_mma.cl) where NVIDIA's compiler builds its
  // inline PTX; elsewhere (and where it fails) they compute in f32 (gemm.tk). One build decides for
  // both operand types, for the f32 GEMM on TF32 products (../common/nvidia/gemm_tf32.cl, for
  // float32_matmul_precision high and medium) and for the f32 GEMM through cp.async
  // (../common/nvidia/gemm_ffma.cl): the bf16 forms of mma.sync and cvt, and TF32's, need the same
  // compute capability (8.0) as cp.async and the f16 ones; the other variants and the f32 kernels
  // are built when first launched.
  if (traits.vendor_id == 0x10de && !traits.is_cpu) {
    try {
      (void)programs_->kernel(kMmaGemm, "tk_main", mma_gemm_options(0, false));
      traits.coop_f16 = traits.coop_bf16 = traits.tf32_gemm = true;
      traits.ffma_gemm = common::ffma_gemm_allowed();
      // The other layouts through it where the copies cost at most one element per 256
      // multiply-adds, as through the Vulkan plugin: with the kernel's PTX module the GPT's f32
      // step ran 0.3-0.6% faster on the H200 than with one per 1024 (two pairs of runs), its thin
      // NT products up to 3% (docs/bench/h200-opencl-ffma-ptx.txt).
      traits.ffma_copy_share = traits.ffma_gemm ? 256 : 0;
      traits.coop_groups_per_unit = 2;
      // Above the Vulkan plugin's 20, so that `auto` takes this plugin on such a GPU: on the H100
      // it trains every built-in model sooner than vulkan:0 (10 epochs: CNN 7.4 against 10.7 s,
      // ResNet-20 31.0 against 35.9 s, 27.8 against 33.3 s in bf16-mixed; 1000 GPT steps 42-48
      // against 54-61 s, 24-30 against 38-42 s in bf16-mixed; docs/performance.md, "Which
      // plugin auto takes on an NVIDIA GPU"). Elsewhere 10: Vulkan first.
      info_.score = 30;
    } catch (const BackendError& e) {
      log().debug("{}: no tensor-core GEMM: {}", id, e.what());
    }
  }
  // On compute capability 9.0 (Hopper) the 16-bit GEMMs take the warpgroup products instead
  // (../common/nvidia/gemm_wgmma.cl: sm_90a PTX, which runs on 9.0 alone), where it builds;
  // TESSERA_OPENCL_WGMMA=0 keeps mma.sync (for comparisons).
  bool wgmma = false;
  if (traits.coop_f16 && has_extension(extensions, "cl_nv_device_attribute_query") &&
      device_value<cl_uint>(device, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV) == 9 &&
      device_value<cl_uint>(device, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV) == 0) {
    if (!wgmma_allowed()) {
      log().debug("{}: TESSERA_OPENCL_WGMMA=0: the 16-bit GEMMs keep mma.sync", id);
    } else {
      try {
        (void)programs_->kernel(kWgmmaGemm, "tk_main", mma_gemm_options(0, false),
                                Programs::Retarget::sm_90a);
        wgmma = true;
      } catch (const BackendError& e) {
        log().debug("{}: no warpgroup GEMM (mma.sync instead): {}", id, e.what());
      }
    }
  }
  info_.properties.push_back(
      {"matrix units",
       !traits.coop_f16 ? "no"
       : wgmma          ? "yes: f16 and bf16 GEMMs on them (inline PTX for sm_90a: wgmma, cp.async)"
                        : "yes: f16 and bf16 GEMMs on them (inline PTX: mma.sync, cp.async)"});
  info_.properties.push_back(
      {"f32 GEMM on tensor cores",
       traits.tf32_gemm ? "yes: float32_matmul_precision high (3 TF32 products), medium (1)"
                        : "no: f32 arithmetic at every float32_matmul_precision"});
  launcher_ = std::make_unique<OpenclLauncher>(*this, *ctx_, traits, wgmma);
  common::install_portable_ops(kernels_, *launcher_);
  log().debug("{}: {} ({}), {} compute units", id, info_.name, platform_name, info_.compute_units);
}

Support OpenclDevice::supports(const OpCall& call) const {
  if (Support s = Device::supports(call); !s) return s;
  return common::within_buffer_limit(call, allocator_->max_alloc(), "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
}

OpenclDevice::~OpenclDevice() {
  // Devices live until exit; the driver may already be unloading, so nothing is released here
  // beyond what the members release themselves.
}

}  // namespace tessera::opencl
