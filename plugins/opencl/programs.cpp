#include <utility>

#include <fmt/format.h>

#include "opencl.h"
#include "ptx_retarget.h"
#include "tessera/embedded.h"
#include "tessera/file.h"
#include "tessera/log.h"

namespace tessera::opencl {
namespace {

constexpr std::string_view kMagic = "TESSERA-OPENCL-BINARY-1\n";

std::string build_log(cl_program program, cl_device_id device) {
  std::size_t size = 0;
  clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
  std::string log(size, '\0');
  if (size) clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

std::string program_binary(cl_program program) {
  std::size_t size = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) !=
          CL_SUCCESS ||
      size == 0)
    return {};
  std::string bin(size, '\0');
  unsigned char* ptr = reinterpret_cast<unsigned char*>(bin.data());
  if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS)
    return {};
  return bin;
}

std::string_view embedded_text(std::string_view file) {
  const auto data = embedded_file(file);
  if (data.empty())
    throw BackendError(fmt::format("kernels/{} is not embedded in the opencl plugin", file));
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

// The program text of |file|: an OpenCL C file as it is, or a portable kernel (NAME.tk) after
// the definitions the build wrote for it (NAME.tk.defs: TK_SHM4, TK_READONLY_<b>, as the Vulkan
// build defines them; ../common/portable.cmake), the portable prelude and common functions
// (../common/kernels/README.md).
std::string source_of(std::string_view file) {
  // The NVIDIA GPUs' kernels (../common/nvidia/*.cl) after what they share (ptx.cl) and, for the
  // two 16-bit GEMMs, their contract (gemm16.cl).
  if (!file.ends_with(".tk")) {
    const bool gemm16 = file == kMmaGemm || file == kWgmmaGemm;
    return fmt::format("{}\n{}#line 1 \"{}\"\n{}", embedded_text("ptx.cl"),
                       gemm16 ? fmt::format("{}\n", embedded_text("gemm16.cl")) : "", file,
                       embedded_text(file));
  }
  const auto defs = embedded_file(fmt::format("{}.defs", file));
  return fmt::format("{}{}\n{}\n#line 1 \"{}\"\n{}",
                     std::string_view(reinterpret_cast<const char*>(defs.data()), defs.size()),
                     embedded_text("prelude.cl"), embedded_text("common.tk"), file,
                     embedded_text(file));
}

}  // namespace

Programs::Programs(cl_context context, cl_device_id device, std::string id, std::string cache_key)
    : context_(context), device_(device), id_(std::move(id)), cache_key_(std::move(cache_key)) {
  // At log level debug, NVIDIA's compiler reports each kernel's registers and spills
  // (-cl-nv-verbose), and build() logs what it says.
  std::size_t size = 0;
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, nullptr, &size);
  std::string ext(size, '\0');
  if (size) clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, ext.data(), nullptr);
  if (log().should_log(spdlog::level::debug) &&
      ext.find("cl_nv_compiler_options") != std::string::npos)
    verbose_ = " -cl-nv-verbose";
}

Programs::~Programs() = default;  // devices live until exit; the driver may be unloading

cl_kernel Programs::kernel(std::string_view file, std::string_view name, const std::string& options,
                           Retarget retarget) {
  const std::string program_key =
      fmt::format("{}\n{}{}", file, options, retarget == Retarget::sm_90a ? "\nsm_90a" : "");
  const std::string kernel_key = fmt::format("{}\n{}", program_key, name);
  std::lock_guard lock(mu_);
  if (auto it = kernels_.find(kernel_key); it != kernels_.end()) return it->second;
  auto it = programs_.find(program_key);
  if (it == programs_.end())
    it = programs_.emplace(program_key, build(file, options, retarget)).first;
  return create_kernel(it->second, kernel_key, name);
}

cl_kernel Programs::create_kernel(cl_program program, const std::string& kernel_key,
                                  std::string_view name) {
  cl_int err = CL_SUCCESS;
  const std::string kernel_name(name);
  cl_kernel k = clCreateKernel(program, kernel_name.c_str(), &err);
  check(err, fmt::format("clCreateKernel({})", name), id_);
  kernels_.emplace(kernel_key, k);
  return k;
}

cl_program Programs::build(std::string_view file, const std::string& options, Retarget retarget) {
  const std::string source = source_of(file);
  const bool sm_90a = retarget == Retarget::sm_90a;
  const std::string all_options =
      options + (sm_90a ? " -DTK_WGMMA_COMMENTED" : "") + " -cl-std=CL1.2" + verbose_;
  // Everything the binary depends on: the source, the options, the device and its driver.
  const std::string key = fmt::format("{:016x}|{}|{}{}\n", cache_hash(source), all_options,
                                      cache_key_, sm_90a ? "|sm_90a" : "");
  const std::string entry = fmt::format("opencl-{:016x}.bin", cache_hash(key));

  if (const auto cached = cache_read(entry)) {
    const std::string_view c = *cached;
    if (c.starts_with(kMagic) && c.substr(kMagic.size()).starts_with(key)) {
      const std::string_view bin = c.substr(kMagic.size() + key.size());
      const auto* ptr = reinterpret_cast<const unsigned char*>(bin.data());
      const std::size_t size = bin.size();
      cl_int status = CL_SUCCESS, err = CL_SUCCESS;
      cl_program p = clCreateProgramWithBinary(context_, 1, &device_, &size, &ptr, &status, &err);
      if (p && err == CL_SUCCESS && status == CL_SUCCESS &&
          clBuildProgram(p, 1, &device_, all_options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
        log().debug("{}: kernels/{} loaded from the cache ({})", id_, file, entry);
        return p;
      }
      if (p) clReleaseProgram(p);
      log().debug("{}: cached binary {} was rejected by the driver; rebuilding", id_, entry);
    } else {
      log().debug("{}: cache entry {} is not a binary for this device; rebuilding", id_, entry);
    }
  }

  const char* text = source.data();
  const std::size_t length = source.size();
  cl_int err = CL_SUCCESS;
  cl_program p = clCreateProgramWithSource(context_, 1, &text, &length, &err);
  check(err, "clCreateProgramWithSource", id_);
  err = clBuildProgram(p, 1, &device_, all_options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const std::string compiler_log = build_log(p, device_);
    clReleaseProgram(p);
    throw BackendError(fmt::format("building kernels/{} ({}) for {} failed: {}\n{}", file,
                                   all_options, id_, error_name(err), compiler_log));
  }
  if (sm_90a) p = retarget_sm_90a(p, file, all_options);
  if (!verbose_.empty())
    log().debug("{}: kernels/{} ({}) compiled: {}", id_, file, options, build_log(p, device_));
  if (const std::string bin = program_binary(p); !bin.empty())
    cache_write(entry, fmt::format("{}{}{}", kMagic, key, bin));
  return p;
}

cl_kernel Programs::ptx_kernel(std::string_view module, std::string_view name) {
  const std::string program_key = fmt::format("ptx:{}", module);
  const std::string kernel_key = fmt::format("{}\n{}", program_key, name);
  std::lock_guard lock(mu_);
  if (auto it = kernels_.find(kernel_key); it != kernels_.end()) return it->second;
  auto it = programs_.find(program_key);
  if (it == programs_.end()) {
    const auto ptx = embedded_file(module);
    if (ptx.empty())
      throw BackendError(
          fmt::format("{}: the plugin was built without the PTX module {}", id_, module));
    const std::string what = fmt::format("{} on {}", module, id_);
    cl_program p = build_ptx(std::string(reinterpret_cast<const char*>(ptx.data()), ptx.size()),
                             what, verbose_);
    if (!verbose_.empty()) log().debug("{}: {} built: {}", id_, module, build_log(p, device_));
    it = programs_.emplace(program_key, p).first;
  }
  return create_kernel(it->second, kernel_key, name);
}

cl_program Programs::retarget_sm_90a(cl_program compiled, std::string_view file,
                                     const std::string& options) {
  std::string ptx = program_binary(compiled);
  clReleaseProgram(compiled);
  const std::string what = fmt::format("kernels/{} for sm_90a on {}", file, id_);
  return build_ptx(ptx_for_sm_90a(std::move(ptx), what), what, options);
}

cl_program Programs::build_ptx(const std::string& ptx, const std::string& what,
                               const std::string& options) {
  // The binary is the PTX text with its terminating zero.
  const auto* text = reinterpret_cast<const unsigned char*>(ptx.c_str());
  const std::size_t size = ptx.size() + 1;
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(context_, 1, &device_, &size, &text, &status, &err);
  if (err != CL_SUCCESS || status != CL_SUCCESS) {
    if (p) clReleaseProgram(p);
    check(err != CL_SUCCESS ? err : status, fmt::format("clCreateProgramWithBinary({})", what),
          id_);
  }
  err = clBuildProgram(p, 1, &device_, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const std::string compiler_log = build_log(p, device_);
    clReleaseProgram(p);
    throw BackendError(
        fmt::format("building {} failed: {}\n{}", what, error_name(err), compiler_log));
  }
  return p;
}

}  // namespace tessera::opencl
