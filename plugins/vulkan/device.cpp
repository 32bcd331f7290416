#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "../common/env_switch.h"
#include "../common/limits.h"
#include "../common/ops.h"
#include "queue_family.h"
#include "spirv_bf16.h"
#include "tessera/embedded.h"
#include "tessera/log.h"
#include "vulkan.h"

namespace tessera::vulkan {

std::string result_name(VkResult r) {
  const char* name = "unknown result";
  switch (r) {
#define CASE(x) \
  case x:       \
    name = #x;  \
    break;
    CASE(VK_NOT_READY)
    CASE(VK_TIMEOUT)
    CASE(VK_INCOMPLETE)
    CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    CASE(VK_ERROR_INITIALIZATION_FAILED)
    CASE(VK_ERROR_DEVICE_LOST)
    CASE(VK_ERROR_MEMORY_MAP_FAILED)
    CASE(VK_ERROR_LAYER_NOT_PRESENT)
    CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    CASE(VK_ERROR_TOO_MANY_OBJECTS)
    CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    CASE(VK_ERROR_FRAGMENTED_POOL)
    CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    CASE(VK_ERROR_INVALID_SHADER_NV)
#undef CASE
    default:
      break;
  }
  return fmt::format("{} ({})", name, static_cast<int>(r));
}

void check(VkResult r, std::string_view what, std::string_view device) {
  if (r != VK_SUCCESS)
    throw BackendError(fmt::format("{} on {} failed: {}", what, device, result_name(r)));
}

namespace {

bool has_extension(VkPhysicalDevice pd, const char* name) {
  std::uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  return std::any_of(exts.begin(), exts.end(), [&](const VkExtensionProperties& e) {
    return std::strcmp(e.extensionName, name) == 0;
  });
}

DeviceType type_of(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return DeviceType::discrete_gpu;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return DeviceType::integrated_gpu;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return DeviceType::virtual_gpu;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return DeviceType::cpu;
    default:
      return DeviceType::other;
  }
}

// The memory type for tensors: device-local; on CPUs and integrated GPUs also host-visible and
// coherent (zero copy); on discrete GPUs preferably not host-visible (the small BAR window).
std::uint32_t pick_type(const VkPhysicalDeviceMemoryProperties& mp, bool want_host) {
  int best = -1, best_score = -1;
  for (std::uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    const bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const bool host =
        (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    int score = local ? 4 : 0;
    score += want_host == host ? 2 : 0;
    if (score > best_score) best = static_cast<int>(i), best_score = score;
  }
  return static_cast<std::uint32_t>(best);
}

// Host-visible, coherent (cached when possible) memory for staging.
std::uint32_t pick_staging(const VkPhysicalDeviceMemoryProperties& mp) {
  int best = -1, best_score = -1;
  for (std::uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) || !(f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
      continue;
    const int score = (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 2 : 1;
    if (score > best_score) best = static_cast<int>(i), best_score = score;
  }
  return static_cast<std::uint32_t>(best);
}

// The matrix shapes a cooperative-matrix extension offers, through its |function|
// (vkGetPhysicalDeviceCooperativeMatrixPropertiesNV or ...KHR), each filled into a copy of
// |blank|: none where the driver lacks the function or fails.
template <typename Shape>
std::vector<Shape> coop_shapes(VkInstance instance, VkPhysicalDevice physical, const char* function,
                               const Shape& blank) {
  using Get = VkResult(VKAPI_PTR*)(VkPhysicalDevice, std::uint32_t*, Shape*);
  const auto get = reinterpret_cast<Get>(vkGetInstanceProcAddr(instance, function));
  std::uint32_t n = 0;
  if (!get || get(physical, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<Shape> shapes(n, blank);
  if (get(physical, &n, shapes.data()) != VK_SUCCESS) return {};
  shapes.resize(n);
  return shapes;
}

// Whether VK_NV_cooperative_matrix offers the shape shaders/gemm_coopmat.comp uses: 16 x 16 x 16,
// A and B f16, C and D f32, per subgroup.
bool has_coop_shape(VkInstance instance, VkPhysicalDevice physical) {
  for (const auto& s : coop_shapes(
           instance, physical, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
           VkCooperativeMatrixPropertiesNV{VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV}))
    if (s.MSize == 16 && s.NSize == 16 && s.KSize == 16 &&
        s.AType == VK_COMPONENT_TYPE_FLOAT16_NV && s.BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
        s.CType == VK_COMPONENT_TYPE_FLOAT32_NV && s.DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
        s.scope == VK_SCOPE_SUBGROUP_NV)
      return true;
  return false;
}

// VK_KHR_cooperative_matrix and VK_KHR_shader_bfloat16, which Debian 12's Vulkan headers
// (1.3.239) predate: their structures and values as the Vulkan registry defines them.
constexpr auto kCoopFeaturesKHR = static_cast<VkStructureType>(1000506000);
constexpr auto kCoopPropertiesKHR = static_cast<VkStructureType>(1000506001);
constexpr auto kBFloat16FeaturesKHR = static_cast<VkStructureType>(1000141000);
constexpr std::uint32_t kComponentFloat32 = 1, kComponentBFloat16 = 1000141000, kScopeSubgroup = 3;
struct CoopFeaturesKHR {
  VkStructureType sType = kCoopFeaturesKHR;
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE;
  VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};
struct CoopPropertiesKHR {
  VkStructureType sType = kCoopPropertiesKHR;
  void* pNext = nullptr;
  std::uint32_t MSize = 0, NSize = 0, KSize = 0;
  std::uint32_t AType = 0, BType = 0, CType = 0, ResultType = 0;
  VkBool32 saturatingAccumulation = VK_FALSE;
  std::uint32_t scope = 0;
};
struct BFloat16FeaturesKHR {
  VkStructureType sType = kBFloat16FeaturesKHR;
  void* pNext = nullptr;
  VkBool32 shaderBFloat16Type = VK_FALSE;
  VkBool32 shaderBFloat16DotProduct = VK_FALSE;
  VkBool32 shaderBFloat16CooperativeMatrix = VK_FALSE;
};

// Whether VK_KHR_cooperative_matrix offers the bf16 form of the same shape (spirv_bf16.h): 16 x
// 16 x 16, A and B bf16, C and the result f32, per subgroup. Logs the bf16 shapes it offers.
bool has_bf16_coop_shape(VkInstance instance, VkPhysicalDevice physical) {
  bool found = false;
  for (const auto& s :
       coop_shapes(instance, physical, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
                   CoopPropertiesKHR{})) {
    if (s.AType != kComponentBFloat16) continue;
    log().debug("VK_KHR_cooperative_matrix bf16 shape {} x {} x {}, C {} result {}, scope {}",
                s.MSize, s.NSize, s.KSize, s.CType, s.ResultType, s.scope);
    found = found || (s.MSize == 16 && s.NSize == 16 && s.KSize == 16 &&
                      s.BType == kComponentBFloat16 && s.CType == kComponentFloat32 &&
                      s.ResultType == kComponentFloat32 && s.scope == kScopeSubgroup);
  }
  return found;
}

// A matrix-unit kernel's SPIR-V (shaders/NAME.comp, f16) rewritten for bf16 (spirv_bf16.h), or
// nothing where the rewrite refuses it (it does not for the kernels this plugin embeds: the test
// suite checks; this keeps a refusal from reaching a user's op, which then takes the portable
// kernels). Made once, when the device opens; Pipelines takes it from there.
std::vector<std::uint32_t> bf16_kernel(std::string_view name) {
  const auto f16 = embedded_file(fmt::format("{}.spv", name));
  std::vector<std::uint32_t> words(f16.size() / 4);
  std::memcpy(words.data(), f16.data(), words.size() * 4);
  try {
    return coopmat_nv_to_khr(words, true);
  } catch (const BackendError& e) {
    log().debug("{} has no bf16 form: {}", name, e.what());
    return {};
  }
}

}  // namespace

bool ptx_allowed() {
  return common::env_switch("TESSERA_VULKAN_PTX",
                            "the Vulkan plugin's GEMMs stay on cooperative matrix (f16, bf16) "
                            "and SPIR-V (f32) where PTX kernels could run them through "
                            "VK_NVX_binary_import");
}

VulkanDevice::VulkanDevice(VkInstance instance, VkPhysicalDevice physical, int index)
    : id_(fmt::format("vulkan:{}", index)), physical_(physical) {
  vkGetPhysicalDeviceProperties(physical, &props_);
  if (VK_API_VERSION_MINOR(props_.apiVersion) < 2 && VK_API_VERSION_MAJOR(props_.apiVersion) == 1)
    throw DeviceUnavailable(fmt::format("{} supports Vulkan {}.{} only (1.2 is needed)",
                                        props_.deviceName, VK_API_VERSION_MAJOR(props_.apiVersion),
                                        VK_API_VERSION_MINOR(props_.apiVersion)));
  if (!has_extension(physical, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
    throw DeviceUnavailable(
        fmt::format("{} lacks {}", props_.deviceName, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME));
  std::uint32_t nf = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &nf, nullptr);
  std::vector<VkQueueFamilyProperties> families(nf);
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &nf, families.data());
  family_ = compute_queue_family(families);
  if (family_ == nf)
    throw DeviceUnavailable(fmt::format("{} has no compute queue", props_.deviceName));

  timestamp_bits_ = families[family_].timestampValidBits;
  budget_ext_ = has_extension(physical, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  const bool coop = has_extension(physical, "VK_KHR_cooperative_matrix");
  std::vector<const char*> exts = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  if (budget_ext_) exts.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  // At log level debug, every pipeline's compiler statistics (registers, spills) are logged
  // (pipelines.cpp), where the driver offers them.
  exec_stats_ = log().should_log(spdlog::level::debug) &&
                has_extension(physical, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  if (exec_stats_) exts.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);

  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, &f11};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV fcm{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  const bool coop_nv = has_extension(physical, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  if (coop_nv) f11.pNext = &fcm;
  CoopFeaturesKHR fck;
  BFloat16FeaturesKHR fbf;
  const bool bf16_khr = coop && has_extension(physical, "VK_KHR_shader_bfloat16");
  if (bf16_khr) {
    fck.pNext = f11.pNext;
    fbf.pNext = &fck;
    f11.pNext = &fbf;
  }
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f12, {}};
  vkGetPhysicalDeviceFeatures2(physical, &f2);
  // Matrix units for f16 GEMMs (shaders/gemm_coopmat.comp): VK_NV_cooperative_matrix offering
  // 16 x 16 x 16 products of f16 summed in f32 over a subgroup, with f16 arithmetic types and
  // 16-bit storage. (Debian 12's glslang compiles the kernel for the NV extension alone.)
  coop_f16_ = coop_nv && fcm.cooperativeMatrix && f12.shaderFloat16 &&
              f11.storageBuffer16BitAccess && has_coop_shape(instance, physical);
  if (coop_f16_) exts.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  // bf16 GEMMs on the same matrix units: the f16 kernel's SPIR-V rewritten for
  // VK_KHR_cooperative_matrix with bf16 fragments (spirv_bf16.h), where the device offers the
  // same shape in bf16.
  if (coop_f16_ && bf16_khr && fck.cooperativeMatrix && fbf.shaderBFloat16Type &&
      fbf.shaderBFloat16CooperativeMatrix && has_bf16_coop_shape(instance, physical))
    for (const char* name : {"gemm_coopmat", "attention_coopmat"})
      if (auto words = bf16_kernel(name); !words.empty()) coop_bf16_spirv_[name] = std::move(words);
  const bool coop_bf16 = coop_bf16_spirv_.contains("gemm_coopmat");
  if (bf16_khr)
    log().debug(
        "{}: bf16 matrix units: cooperativeMatrix {}, shaderBFloat16Type {}, "
        "shaderBFloat16CooperativeMatrix {}: {}",
        id_, fck.cooperativeMatrix, fbf.shaderBFloat16Type, fbf.shaderBFloat16CooperativeMatrix,
        coop_bf16 ? "used" : "not used");
  if (coop_bf16) {
    exts.push_back("VK_KHR_cooperative_matrix");
    exts.push_back("VK_KHR_shader_bfloat16");
  }
  // PTX kernels (CuKernels: the 16-bit GEMMs on Hopper's warpgroup products) where an NVIDIA
  // driver takes PTX modules and buffers have device addresses; whether this GPU runs them is
  // known once the first module builds (below). Why not, for tessera-devices.
  std::string ptx_status;
  if (props_.vendorID != 0x10de)
    ptx_status = "no (NVIDIA GPUs only)";
  else if (!CuKernels::built())
    ptx_status =
        "no (the plugin was built without them: no clang for NVPTX, or TESSERA_EMBED_PTX=OFF)";
  else if (!has_extension(physical, VK_NVX_BINARY_IMPORT_EXTENSION_NAME))
    ptx_status = "no (the driver lacks VK_NVX_binary_import)";
  else if (!f12.bufferDeviceAddress)
    ptx_status = "no (the driver lacks bufferDeviceAddress)";
  else if (!ptx_allowed())
    ptx_status = "not used (TESSERA_VULKAN_PTX=0)";
  const bool nvx = ptx_status.empty();
  if (nvx) exts.push_back(VK_NVX_BINARY_IMPORT_EXTENSION_NAME);

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = family_;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  // 8-bit storage lets portable kernels read and write bool masks (kernels/README.md).
  VkPhysicalDeviceVulkan12Features enable12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  enable12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
  // 16-bit storage lets them store f16 and bf16 elements.
  VkPhysicalDeviceVulkan11Features enable11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  enable11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
  enable12.shaderFloat16 = coop_f16_ ? VK_TRUE : VK_FALSE;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV enable_cm{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  enable_cm.cooperativeMatrix = VK_TRUE;
  storage16_ = f11.storageBuffer16BitAccess == VK_TRUE;
  // Timeline semaphores let a read wait for its batch without holding the queue (queue.cpp).
  enable12.timelineSemaphore = f12.timelineSemaphore;
  timeline_ = f12.timelineSemaphore == VK_TRUE;
  enable12.bufferDeviceAddress = nvx ? VK_TRUE : VK_FALSE;
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  exec.pipelineExecutableInfo = VK_TRUE;
  enable11.pNext = exec_stats_ ? &exec : nullptr;
  if (coop_f16_) {
    enable_cm.pNext = enable11.pNext;
    enable11.pNext = &enable_cm;
  }
  CoopFeaturesKHR enable_ck;
  BFloat16FeaturesKHR enable_bf;
  if (coop_bf16) {
    enable_ck.cooperativeMatrix = VK_TRUE;
    enable_bf.shaderBFloat16Type = VK_TRUE;
    enable_bf.shaderBFloat16CooperativeMatrix = VK_TRUE;
    enable_ck.pNext = enable11.pNext;
    enable_bf.pNext = &enable_ck;
    enable11.pNext = &enable_bf;
  }
  enable12.pNext = &enable11;
  di.pNext = &enable12;
  di.enabledExtensionCount = static_cast<std::uint32_t>(exts.size());
  di.ppEnabledExtensionNames = exts.data();
  check(vkCreateDevice(physical, &di, nullptr, &device_), "vkCreateDevice", id_);
  vkGetDeviceQueue(device_, family_, 0, &vk_queue_);
  push_descriptor = reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(
      vkGetDeviceProcAddr(device_, "vkCmdPushDescriptorSetKHR"));
  if (!push_descriptor) throw DeviceUnavailable("vkCmdPushDescriptorSetKHR is missing");

  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, &sub};
  VkPhysicalDeviceMaintenance3Properties m3{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, &drv};
  // Compute units, where a vendor extension tells them (the GEMM's tiles: ops_gemm.cpp).
  VkPhysicalDeviceShaderSMBuiltinsPropertiesNV nv_sm{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
  VkPhysicalDeviceShaderCorePropertiesAMD amd_cores{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD};
  void* chain = &m3;
  if (has_extension(physical, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
    nv_sm.pNext = chain;
    chain = &nv_sm;
  }
  if (has_extension(physical, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME)) {
    amd_cores.pNext = chain;
    chain = &amd_cores;
  }
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, chain, {}};
  vkGetPhysicalDeviceProperties2(physical, &p2);
  max_buffer_ =
      std::min<VkDeviceSize>(m3.maxMemoryAllocationSize, props_.limits.maxStorageBufferRange);
  if (m3.maxMemoryAllocationSize < props_.limits.maxStorageBufferRange)
    max_buffer_limit_ = "maxMemoryAllocationSize";

  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(physical, &mp);
  info_.name = props_.deviceName;
  info_.type = type_of(props_.deviceType);
  info_.vendor = fmt::format("{} ({:#06x})", drv.driverName, props_.vendorID);
  info_.driver =
      drv.driverInfo[0] ? std::string(drv.driverInfo) : std::to_string(props_.driverVersion);
  info_.compute_units = static_cast<int>(
      nv_sm.shaderSMCount > 0 ? nv_sm.shaderSMCount
                              : amd_cores.shaderEngineCount * amd_cores.shaderArraysPerEngineCount *
                                    amd_cores.computeUnitsPerShaderArray);
  info_.score = 20;
  const bool host_memory =
      info_.type == DeviceType::cpu || info_.type == DeviceType::integrated_gpu;
  const std::uint32_t type = pick_type(mp, host_memory);
  const std::uint32_t staging = pick_staging(mp);
  std::string heaps;
  for (std::uint32_t h = 0; h < mp.memoryHeapCount; ++h)
    heaps +=
        fmt::format("{}{}{}", h ? ", " : "", format_bytes(mp.memoryHeaps[h].size),
                    (mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) ? " local" : "");
  const bool mapped = mp.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;

  info_.properties = {
      {"api version", fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(props_.apiVersion),
                                  VK_API_VERSION_MINOR(props_.apiVersion),
                                  VK_API_VERSION_PATCH(props_.apiVersion))},
      {"driver", fmt::format("{} {}", drv.driverName, drv.driverInfo)},
      {"memory heaps", heaps},
      {"tensor memory", fmt::format("type {}{}", type, mapped ? ", host-visible (zero copy)" : "")},
      {"subgroup size", std::to_string(sub.subgroupSize)},
      {"shared memory per workgroup", format_bytes(props_.limits.maxComputeSharedMemorySize)},
      {"max workgroup invocations", std::to_string(props_.limits.maxComputeWorkGroupInvocations)},
      {"largest buffer", fmt::format("{} ({})", format_bytes(max_buffer_), max_buffer_limit_)},
      {"f16", f12.shaderFloat16 ? "yes" : "no"},
      {"8-bit storage", f12.storageBuffer8BitAccess ? "yes" : "no (bool kernels can not run)"},
      {"16-bit storage", storage16_ ? "yes" : "no (f16 and bf16 can not run)"},
      {"cooperative matrix",
       coop_bf16   ? "yes: f16 GEMMs and attention on it (VK_NV_cooperative_matrix), bf16 ones "
                     "(VK_KHR_cooperative_matrix, VK_KHR_shader_bfloat16)"
       : coop_f16_ ? "yes: f16 GEMMs and attention on it (VK_NV_cooperative_matrix; no bf16 "
                     "matrix units)"
       : coop      ? "VK_KHR_cooperative_matrix only (unused: the GEMM is compiled for the NV "
                     "extension)"
                   : "no"},
  };

  device_pool_ =
      std::make_unique<MemoryPool>(*this, type, mp.memoryTypes[type].heapIndex, mapped, nvx);
  staging_pool_ =
      std::make_unique<MemoryPool>(*this, staging, mp.memoryTypes[staging].heapIndex, true);
  if (nvx) {
    // The driver compiles the f16 GEMM's plainest module now: a GPU other than compute capability
    // 9.0 refuses its sm_90a code, and the GEMMs stay on cooperative matrix.
    try {
      auto cu = std::make_unique<CuKernels>(*this);
      (void)cu->function(CuKernels::gemm_module(false, 0));
      cu_kernels_ = std::move(cu);
      ptx_status =
          "yes: f16 and bf16 GEMMs on warpgroup products (wgmma, sm_90a), not on cooperative "
          "matrix";
      if (CuKernels::has_portable("gemm"))
        ptx_status += "; the f32 GEMM's main variants as PTX, not SPIR-V";
      if (CuKernels::has_ffma())
        ptx_status += "; the f32 GEMM of a weight's gradient (x^T dy) through cp.async";
      // The GEMMs left cooperative matrix: its line names what stays there.
      if (coop_f16_)
        for (auto& [key, value] : info_.properties)
          if (key == "cooperative matrix")
            value =
                "yes: attention on it (VK_NV_cooperative_matrix); the f16 and bf16 GEMMs run "
                "the PTX kernels";
    } catch (const BackendError& e) {
      log().debug("{}: no PTX GEMM: {}", id_, e.what());
      ptx_status = fmt::format("no (the driver refused the sm_90a GEMM: {})", e.what());
    }
  }
  info_.properties.push_back({"PTX kernels (VK_NVX_binary_import)", ptx_status});
  queue_ = std::make_unique<VulkanQueue>(*this);
  pipelines_ = std::make_unique<Pipelines>(*this);
  common::GpuTraits traits;
  traits.vendor_id = props_.vendorID;
  traits.subgroup_size = static_cast<std::int32_t>(std::max(sub.subgroupSize, 1u));
  traits.max_group_size =
      static_cast<std::int32_t>(std::min(props_.limits.maxComputeWorkGroupInvocations, 1024u));
  traits.max_shared_bytes = props_.limits.maxComputeSharedMemorySize;
  traits.tiled_attention = true;
  traits.is_cpu = info_.type == DeviceType::cpu;
  traits.compute_units = info_.compute_units;
  traits.storage16 = storage16_;
  traits.coop_f16 = (coop_f16_ && sub.subgroupSize == 32) || cu_kernels_;
  traits.coop_bf16 = (coop_bf16 && sub.subgroupSize == 32) || cu_kernels_;
  // The attention kernels also exchange row statistics between lanes (subgroupShuffleXor).
  const bool shuffle = (sub.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0 &&
                       (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  traits.coop_attention_f16 = coop_f16_ && sub.subgroupSize == 32 && shuffle;
  traits.coop_attention_bf16 = coop_bf16 && sub.subgroupSize == 32 && shuffle &&
                               coop_bf16_spirv_.contains("attention_coopmat");
  // The PTX GEMM: 128 x 256 tiles as built by default (TESSERA_PTX_GEMM_DEFINES), 128 sums an
  // invocation and 192 KiB of shared memory, one work-group an SM; 128 x 128 tiles in 48 KiB take
  // two, as the OpenCL plugin's.
#ifdef TESSERA_PTX_GEMM_TILE_N
  if (cu_kernels_) {
    traits.coop_tile_n = TESSERA_PTX_GEMM_TILE_N;
    traits.coop_groups_per_unit = TESSERA_PTX_GEMM_TILE_N == 128 ? 2 : 1;
  }
#endif
  // NVIDIA's Vulkan compiler gives the SPIR-V GEMM's largest tiles with two buffers too many
  // registers for two work-groups an SM, so they take one; the PTX modules take two, as the
  // OpenCL plugin does (one work-group an SM at 186 registers, still 1.12-1.15x the SPIR-V's
  // speed with one: docs/performance.md).
  traits.gemm_one_buffer =
      props_.vendorID == 0x10de && !(cu_kernels_ && CuKernels::has_portable("gemm"));
  // The f32 GEMM of a stored [K, M] and b [K, N] through cp.async (ops_gemm.cpp's ffma_gemm), where
  // the sm_90a module loaded (the device takes the modules' sm_80 code too) and TESSERA_GEMM_FFMA
  // allows.
  traits.ffma_gemm = cu_kernels_ && CuKernels::has_ffma() && common::ffma_gemm_allowed();
  // The other layouts through it where copying the operands stored along K costs at most one
  // element per 256 multiply-adds (all the GPT's products but its head's then take it: its f32
  // step 0.654 s against 0.664 s with one per 1024, 20 steps on the H200; docs/performance.md).
  traits.ffma_copy_share = traits.ffma_gemm ? 256 : 0;
  launcher_ = std::make_unique<VulkanLauncher>(*this, traits);
  common::install_portable_ops(kernels_, *launcher_);
  log().debug("{}: {} ({}), memory type {}", id_, info_.name, info_.driver, type);
}

VulkanDevice::~VulkanDevice() {
  // Devices live until exit, when the driver may already be unloading: nothing is destroyed.
  (void)queue_.release();
  (void)pipelines_.release();
  (void)device_pool_.release();
  (void)staging_pool_.release();
}

Support VulkanDevice::supports(const OpCall& call) const {
  if (Support s = Device::supports(call); !s) return s;
  return common::within_buffer_limit(call, max_buffer_, max_buffer_limit_);
}

InvalidArgument VulkanDevice::buffer_limit_error(std::size_t bytes) const {
  return common::buffer_limit_error(id_, info_.name, bytes, max_buffer_, max_buffer_limit_);
}

std::int64_t VulkanDevice::heap_budget(std::uint32_t heap) const {
  if (!budget_ext_) return -1;
  VkPhysicalDeviceMemoryBudgetPropertiesEXT b{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 mp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, &b};
  vkGetPhysicalDeviceMemoryProperties2(physical_, &mp);
  return static_cast<std::int64_t>(b.heapBudget[heap]) -
         static_cast<std::int64_t>(b.heapUsage[heap]);
}

}  // namespace tessera::vulkan
