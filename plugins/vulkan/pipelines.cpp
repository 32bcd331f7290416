#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "tessera/config.h"
#include "tessera/embedded.h"
#include "tessera/file.h"
#include "tessera/log.h"
#include "vulkan.h"

namespace tessera::vulkan {
namespace {

// A cache entry, one per pipeline: this header, the pipeline's key (shader and specialization
// constants), then the driver's VkPipelineCache data of that pipeline alone. One entry a pipeline,
// written once when the pipeline is first compiled, so that a new pipeline costs one write of its
// own however many are cached (NVIDIA's driver caches 0.2-0.8 MB a pipeline: one file rewritten
// whole at each new pipeline grew to hundreds of MB a write after the conformance suite), and
// processes sharing the directory never drop each other's entries.
struct CacheHeader {
  char magic[16];          // "tessera-vkcache2"
  std::uint64_t checksum;  // FNV-1a of the key and the data
  std::uint64_t key_size;  // bytes of the key
  std::uint64_t size;      // bytes of data
};
constexpr char kMagic[16] = {'t', 'e', 's', 's', 'e', 'r', 'a', '-',
                             'v', 'k', 'c', 'a', 'c', 'h', 'e', '2'};

}  // namespace

Pipelines::Pipelines(VulkanDevice& device) : dev_(device) {
  std::array<VkDescriptorSetLayoutBinding, kBindings> b{};
  for (std::uint32_t i = 0; i < kBindings; ++i)
    b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  li.bindingCount = kBindings;
  li.pBindings = b.data();
  check(vkCreateDescriptorSetLayout(dev_.handle(), &li, nullptr, &set_layout_),
        "vkCreateDescriptorSetLayout", dev_.name());
  const VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushWords * 4};
  VkPipelineLayoutCreateInfo pi{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pi.setLayoutCount = 1;
  pi.pSetLayouts = &set_layout_;
  pi.pushConstantRangeCount = 1;
  pi.pPushConstantRanges = &push;
  check(vkCreatePipelineLayout(dev_.handle(), &pi, nullptr, &layout_), "vkCreatePipelineLayout",
        dev_.name());
  const auto& p = dev_.properties();
  std::string uuid;
  for (const std::uint8_t c : p.pipelineCacheUUID) uuid += fmt::format("{:02x}", c);
  cache_prefix_ =
      fmt::format("vulkan-{:04x}-{:04x}-{}-{}", p.vendorID, p.deviceID, uuid, p.driverVersion);
  // Earlier builds kept every pipeline of this device in one file, PREFIX.bin, no longer read
  // (hundreds of MB on NVIDIA's driver after the conformance suite): removed where found.
  std::error_code ec;
  const std::filesystem::path legacy = cache_directory_from_env() / (cache_prefix_ + ".bin");
  if (std::filesystem::remove(legacy, ec))
    log().debug("{}: removed the old pipeline cache file {}", dev_.name(), legacy.string());
}

Pipelines::~Pipelines() = default;  // never destroyed before exit (see ~VulkanDevice)

std::string Pipelines::cache_name(const std::string& key) const {
  return fmt::format("{}-{:016x}.bin", cache_prefix_, cache_hash(key));
}

std::string Pipelines::load_cache(const std::string& key, const std::string& name) const {
  auto cached = cache_read(name);
  if (!cached) return {};
  // Ours, whole, this very pipeline's, and for this very device and driver; anything else is
  // ignored (and replaced once the pipeline is compiled).
  const auto& p = dev_.properties();
  CacheHeader h{};
  bool ok = cached->size() >= sizeof h;
  if (ok) std::memcpy(&h, cached->data(), sizeof h);
  const std::size_t rest = ok ? cached->size() - sizeof h : 0;
  ok = ok && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.key_size == key.size() &&
       h.size <= rest && h.key_size == rest - h.size &&
       h.checksum == cache_hash(std::string_view(*cached).substr(sizeof h, rest)) &&
       h.size >= 16 + VK_UUID_SIZE &&
       std::memcmp(cached->data() + sizeof h, key.data(), key.size()) == 0;
  const char* d = ok ? cached->data() + sizeof h + h.key_size : nullptr;
  if (ok) {
    std::uint32_t vendor, device;
    std::memcpy(&vendor, d + 8, 4);
    std::memcpy(&device, d + 12, 4);
    ok = vendor == p.vendorID && device == p.deviceID &&
         std::memcmp(d + 16, p.pipelineCacheUUID, VK_UUID_SIZE) == 0;
  }
  if (!ok) {
    log().debug(
        "{}: pipeline cache entry {} is corrupt, another pipeline's or from another "
        "device; ignoring it",
        dev_.name(), name);
    return {};
  }
  return std::string(d, h.size);
}

void Pipelines::save_cache(const std::string& key, const std::string& name,
                           VkPipelineCache cache) const {
  std::size_t size = 0;
  if (vkGetPipelineCacheData(dev_.handle(), cache, &size, nullptr) != VK_SUCCESS || !size) return;
  std::string out(sizeof(CacheHeader) + key.size() + size, '\0');
  char* data = out.data() + sizeof(CacheHeader) + key.size();
  if (vkGetPipelineCacheData(dev_.handle(), cache, &size, data) != VK_SUCCESS) return;
  out.resize(sizeof(CacheHeader) + key.size() + size);
  std::memcpy(out.data() + sizeof(CacheHeader), key.data(), key.size());
  CacheHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.key_size = key.size();
  h.size = size;
  h.checksum = cache_hash(std::string_view(out).substr(sizeof h, key.size() + size));
  std::memcpy(out.data(), &h, sizeof h);
  cache_write(name, out);
}

void Pipelines::log_statistics(const std::string& key, VkPipeline pipeline) const {
  auto get = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(dev_.handle(), "vkGetPipelineExecutableStatisticsKHR"));
  if (!get) return;
  VkPipelineExecutableInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
  info.pipeline = pipeline;
  info.executableIndex = 0;
  std::uint32_t n = 0;
  if (get(dev_.handle(), &info, &n, nullptr) != VK_SUCCESS || n == 0) return;
  std::vector<VkPipelineExecutableStatisticKHR> stats(
      n, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
  if (get(dev_.handle(), &info, &n, stats.data()) != VK_SUCCESS) return;
  std::string line;
  for (std::uint32_t i = 0; i < n; ++i) {
    const VkPipelineExecutableStatisticKHR& st = stats[i];
    std::string v;
    switch (st.format) {
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
        v = st.value.b32 ? "yes" : "no";
        break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
        v = std::to_string(st.value.i64);
        break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
        v = std::to_string(st.value.u64);
        break;
      default:
        v = fmt::format("{:g}", st.value.f64);
        break;
    }
    line += fmt::format("{}{} = {}", line.empty() ? "" : "; ", st.name, v);
  }
  log().debug("{}: pipeline {} compiled: {}", dev_.name(), key, line);
}

VkPipeline Pipelines::get(std::string_view shader, std::span<const std::int32_t> spec) {
  std::string key(shader);
  for (const std::int32_t v : spec) key += fmt::format(",{}", v);
  std::lock_guard lock(mu_);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;

  auto module = modules_.find(shader);
  if (module == modules_.end()) {
    auto code = embedded_file(fmt::format("{}.spv", shader));
    // A kernel the portable layer launches that this plugin writes itself (shaders/NAME.comp,
    // embedded as NAME.spv): the matrix-unit GEMM and attention; their bf16 forms (NAME_bf16),
    // rewritten from their SPIR-V when the device opened (spirv_bf16.h).
    if (shader.ends_with("_bf16.tk")) {
      const auto words = dev_.coop_bf16_spirv(std::string(shader.substr(0, shader.size() - 8)));
      code = {reinterpret_cast<const unsigned char*>(words.data()), words.size_bytes()};
    }
    if (code.empty() && shader.ends_with(".tk"))
      code = embedded_file(fmt::format("{}.spv", shader.substr(0, shader.size() - 3)));
    if (code.empty())
      throw BackendError(fmt::format("{}.spv is not embedded in the vulkan plugin", shader));
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = code.size();
    mi.pCode = reinterpret_cast<const std::uint32_t*>(code.data());
    VkShaderModule m;
    check(vkCreateShaderModule(dev_.handle(), &mi, nullptr, &m), "vkCreateShaderModule",
          dev_.name());
    module = modules_.emplace(std::string(shader), m).first;
  }
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (std::uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo si{static_cast<std::uint32_t>(entries.size()), entries.data(),
                          spec.size_bytes(), spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module->second;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = &si;
  ci.layout = layout_;
  if (dev_.pipeline_statistics()) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  // A pipeline cache of this pipeline alone: its entry's data where there is a valid one (a
  // driver that refuses the data gets an empty cache), written back when there was none.
  const std::string entry = cache_name(key);
  const std::string cached = load_cache(key, entry);
  bool from_entry = !cached.empty();
  VkPipelineCacheCreateInfo pci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  pci.initialDataSize = cached.size();
  pci.pInitialData = from_entry ? cached.data() : nullptr;
  VkPipelineCache cache = VK_NULL_HANDLE;
  if (vkCreatePipelineCache(dev_.handle(), &pci, nullptr, &cache) != VK_SUCCESS) {
    from_entry = false;
    pci.initialDataSize = 0;
    pci.pInitialData = nullptr;
    check(vkCreatePipelineCache(dev_.handle(), &pci, nullptr, &cache), "vkCreatePipelineCache",
          dev_.name());
  }
  VkPipeline pipeline;
  const VkResult r = vkCreateComputePipelines(dev_.handle(), cache, 1, &ci, nullptr, &pipeline);
  if (r == VK_SUCCESS && !from_entry) save_cache(key, entry, cache);
  vkDestroyPipelineCache(dev_.handle(), cache, nullptr);
  check(r, fmt::format("creating the pipeline of {}", shader), dev_.name());
  if (dev_.pipeline_statistics()) log_statistics(key, pipeline);
  pipelines_.emplace(std::move(key), pipeline);
  return pipeline;
}

}  // namespace tessera::vulkan
