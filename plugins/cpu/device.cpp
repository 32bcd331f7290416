#include "device.h"

#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace tessera::cpu {
namespace {

// "model name" and "vendor_id" of the first processor in /proc/cpuinfo.
std::pair<std::string, std::string> cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "CPU", vendor;
  auto value = [](const std::string& l) {
    const auto colon = l.find(':');
    return colon == std::string::npos ? std::string()
                                      : l.substr(l.find_first_not_of(" \t", colon + 1));
  };
  while (std::getline(in, line)) {
    if (line.starts_with("model name") && model == "CPU") model = value(line);
    if (line.starts_with("vendor_id") && vendor.empty()) vendor = value(line);
  }
  return {model, vendor};
}

int thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

}  // namespace

CpuDevice::CpuDevice() : pool_(thread_count()), ctx_{pool_, blas(), scratch_} {
  const auto [model, vendor] = cpu_model();
  const Blas& b = ctx_.blas;
  info_.name = model;
  info_.type = DeviceType::cpu;
  info_.vendor = vendor;
  info_.driver = fmt::format("{} ({})", b.version.empty() ? "OpenBLAS" : b.version, b.core);
  info_.compute_units = pool_.size();
  info_.score = 100;  // the native CPU plugin beats Vulkan or OpenCL drivers that run on the CPU
  info_.properties = {
      {"threads", std::to_string(pool_.size())},
      {"blas library", b.library},
      {"blas kernels", fmt::format("{} ({})", b.core, b.core_from)},
      {"simd", core_type_for_this_cpu().empty() ? "baseline" : core_type_for_this_cpu()},
  };
  register_elementwise(kernels_, ctx_);
  register_reductions(kernels_, ctx_);
  register_nn(kernels_, ctx_);
  register_optim(kernels_, ctx_);
}

}  // namespace tessera::cpu
