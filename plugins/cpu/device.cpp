#include "device.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera::cpu {

// The pool's size and where it came from.
struct Threads {
  int count;
  const char* from;
};

namespace {

// The widest vector instructions this CPU and OS support, for tessera-devices: the level that
// also picks OpenBLAS's kernels.
std::string simd_level() {
  const std::string core = core_type_for_this_cpu();
  if (core == "Cooperlake") return "AVX-512 (with BF16)";
  if (core == "SkylakeX") return "AVX-512";
  if (core == "Haswell") return "AVX2";
  if (core == "SandyBridge") return "AVX";
  return "baseline";
}

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

// TESSERA_CPU_THREADS when set, else the CPUs this process may run on (its affinity mask, which
// taskset and container CPU sets narrow), else the machine's count.
Threads thread_count() {
  constexpr int kMaxThreads = 1024;
  if (const char* env = std::getenv("TESSERA_CPU_THREADS"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > kMaxThreads)
      throw ConfigError(fmt::format(
          "TESSERA_CPU_THREADS='{}' is not a thread count: give a whole number from 1 to {}, or "
          "unset it to use one thread per CPU this process may run on",
          env, kMaxThreads));
    return {static_cast<int>(n), "TESSERA_CPU_THREADS"};
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return {std::min(CPU_COUNT(&set), kMaxThreads), "one per CPU this process may run on"};
  const unsigned n = std::thread::hardware_concurrency();
  return {n ? static_cast<int>(std::min<unsigned>(n, kMaxThreads)) : 1, "one per CPU"};
}

}  // namespace

CpuDevice::CpuDevice() : CpuDevice(thread_count()) {}

void CpuKernel::launch(const OpCall& call, Queue&) const {
  if (!ctx_.queue.profiling()) return launch_(call, ctx_);
  const auto t0 = std::chrono::steady_clock::now();
  launch_(call, ctx_);
  ctx_.queue.record(op_name(call.op),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

CpuDevice::CpuDevice(Threads threads)
    : pool_(threads.count), ctx_{pool_, blas(), scratch_, queue_} {
  const auto [model, vendor] = cpu_model();
  const Blas& b = ctx_.blas;
  info_.name = model;
  info_.type = DeviceType::cpu;
  info_.vendor = vendor;
  info_.driver = fmt::format("{} ({})", b.version, b.kernels);
  info_.compute_units = pool_.size();
  info_.score = 100;  // the native CPU plugin beats Vulkan or OpenCL drivers that run on the CPU
  info_.properties = {
      {"threads", fmt::format("{} ({})", pool_.size(), threads.from)},
      {"gemm library", fmt::format("{}, {}", b.version, b.file)},
      {"gemm kernels", fmt::format("{} ({})", b.kernels, b.why)},
      {"simd", simd_level()},
  };
  register_elementwise(kernels_, ctx_);
  register_reductions(kernels_, ctx_);
  register_nn(kernels_, ctx_);
  register_optim(kernels_, ctx_);

  // --- tensor API: casts, factories, indexing ---
  register_tensor(kernels_, ctx_);

  // --- element-wise math, comparisons, selection ---
  register_pointwise(kernels_, ctx_);

  // --- reductions, normalisation, losses, optimizers ---
  register_reduce(kernels_, ctx_);
  register_norms(kernels_, ctx_);
  register_losses(kernels_, ctx_);

  // --- nn: batched matmul, embedding, pooling, attention ---

  // attention
  register_attention(kernels_, ctx_);
  register_bmm(kernels_, ctx_);
  register_embedding(kernels_, ctx_);
  register_avg_pool(kernels_, ctx_);
}

}  // namespace tessera::cpu
