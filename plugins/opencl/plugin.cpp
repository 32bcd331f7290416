// Entry point of the OpenCL plugin: every device of every platform the ICD loader reports.
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "../common/backend.h"
#include "../common/ops.h"
#include "opencl.h"
#include "tessera/log.h"
#include "tessera/plugin.h"

namespace tessera::opencl {
namespace {

std::string platform_name(cl_platform_id p) {
  char buf[256] = {};
  clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof buf - 1, buf, nullptr);
  return buf;
}

class OpenclBackend final : public common::OwningBackend {
 public:
  OpenclBackend() {
    cl_uint count = 0;
    const cl_int err = clGetPlatformIDs(0, nullptr, &count);
    if (err != CL_SUCCESS || count == 0) {
      status_ =
          "no OpenCL platform (the ICD loader found no driver; install one, e.g. "
          "pocl-opencl-icd, or a GPU vendor's OpenCL driver)";
      return;
    }
    std::vector<cl_platform_id> platforms(count);
    clGetPlatformIDs(count, platforms.data(), nullptr);
    // The ICD loader's order follows the directory listing of its vendor files; sort by name so
    // that opencl:N means the same device from run to run.
    std::stable_sort(platforms.begin(), platforms.end(), [](cl_platform_id a, cl_platform_id b) {
      return platform_name(a) < platform_name(b);
    });
    std::vector<std::string> failures;
    for (cl_platform_id p : platforms) {
      cl_uint n = 0;
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
      std::vector<cl_device_id> ids(n);
      clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr);
      for (cl_device_id d : ids) {
        try {
          devices_.push_back(
              std::make_unique<OpenclDevice>(p, d, static_cast<int>(devices_.size())));
        } catch (const Error& e) {
          failures.push_back(fmt::format("{}: {}", device_string(d, CL_DEVICE_NAME), e.what()));
          log().warn("opencl: skipping device {}: {}", device_string(d, CL_DEVICE_NAME), e.what());
        }
      }
    }
    if (devices_.empty())
      status_ = failures.empty()
                    ? fmt::format("no OpenCL device on {} platform(s)", platforms.size())
                    : fmt::format("no usable OpenCL device: {}", fmt::join(failures, "; "));
  }

 private:
};

std::unique_ptr<Backend> create_backend() {
  common::check_gemm_environment();
  common::check_attention_environment();
  (void)wgmma_allowed();
  return std::make_unique<OpenclBackend>();
}

}  // namespace
}  // namespace tessera::opencl

TESSERA_DEFINE_PLUGIN("opencl", "0.1.0", tessera::opencl::create_backend)
