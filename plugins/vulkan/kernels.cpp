// The op kernels: each launch picks a pipeline (shader + specialization constants), binds its
// tensors as push descriptors, pushes offsets and sizes as push constants, and records one
// dispatch on the device's queue; nothing waits.
#include <algorithm>
#include <cstring>

#include "../common/geometry.h"
#include "../common/ops.h"
#include "vulkan.h"

namespace tessera::vulkan {
namespace {

using common::numel_of;
using common::offset_of;

constexpr std::int32_t kGroup = 256;          // invocations per work-group of 1-D launches
constexpr std::uint32_t kMaxGroupsX = 65535;  // the minimum maxComputeWorkGroupCount[0]

std::int32_t bits(float f) {
  std::int32_t v;
  std::memcpy(&v, &f, 4);
  return v;
}

class Dispatch {
 public:
  Dispatch(VulkanDevice& dev, std::string_view shader, std::initializer_list<std::int32_t> spec,
           std::int32_t group = kGroup)
      : dev_(dev), shader_(shader), group_(group) {
    spec_.push_back(group);
    spec_.insert(spec_.end(), spec.begin(), spec.end());
  }
  Dispatch& in(const Tensor& t) { return bind(t, false); }
  Dispatch& out(const Tensor& t) { return bind(t, true); }
  // A binding the shader declares but this variant does not use.
  Dispatch& unused() {
    bindings_.push_back({bindings_.front().alloc, false, false});
    return *this;
  }
  Dispatch& i(std::int64_t v) {
    push_.push_back(static_cast<std::int32_t>(v));
    return *this;
  }
  Dispatch& f(float v) {
    push_.push_back(bits(v));
    return *this;
  }
  Dispatch& offset(const Tensor& t) { return i(offset_of(t)); }
  template <typename T>
  Dispatch& words(const T& s) {  // a struct of 32-bit fields
    const auto* p = reinterpret_cast<const std::int32_t*>(&s);
    push_.insert(push_.end(), p, p + sizeof(T) / 4);
    return *this;
  }
  // One invocation per element of [0, n).
  void run(std::int64_t n) { groups((n + group_ - 1) / group_); }
  // |count| work-groups, split over x and y when there are more than kMaxGroupsX.
  void groups(std::int64_t count) {
    if (count <= 0) return;
    const auto x = static_cast<std::uint32_t>(std::min<std::int64_t>(count, kMaxGroupsX));
    const auto y = static_cast<std::uint32_t>((count + x - 1) / x);
    grid({x, y, 1});
  }
  void grid(std::array<std::uint32_t, 3> g) {
    const VkPipeline p = dev_.pipelines().get(shader_, spec_);
    dev_.vk_queue_object().dispatch(shader_, p, bindings_, push_, g);
  }

 private:
  Dispatch& bind(const Tensor& t, bool write) {
    bindings_.push_back({&static_cast<const VulkanBuffer&>(t.buffer()).allocation(), write, true});
    return *this;
  }
  VulkanDevice& dev_;
  std::string_view shader_;
  std::int32_t group_;
  std::vector<std::int32_t> spec_;
  std::vector<Binding> bindings_;
  std::vector<std::int32_t> push_;
};

using VulkanKernel = FunctionKernel<VulkanDevice>;

// --- losses ---

// --- nn ---

void matmul(const OpCall& call, VulkanDevice& dev) {
  const auto& at = call.attr<MatmulAttrs>();
  const Tensor &a = call.in(0), &b = call.in(1), &y = call.out(0);
  const std::int64_t m = y.dim(0), n = y.dim(1), k = at.trans_a ? a.dim(0) : a.dim(1);
  if (m == 0 || n == 0) return;
  const GemmTiles& t = dev.tiles();
  const bool vec = common::multiples_of_4({m, n, k, a.offset(), b.offset(), y.offset()});
  Dispatch d(dev, "gemm", {t.tm / t.wm, t.tm, t.tn, t.tk, t.wm, t.wn, vec, at.trans_a, at.trans_b},
             t.tn / t.wn);
  d.in(a).in(b).out(y).offset(a).offset(b).offset(y).i(m).i(n).i(k);
  d.grid({static_cast<std::uint32_t>((n + t.tn - 1) / t.tn),
          static_cast<std::uint32_t>((m + t.tm - 1) / t.tm), 1});
}

// addmm: the GEMM, then the bias added in place over the output (two dispatches, as matmul and
// add would be; a bias epilogue in the GEMM shader is the next step).
void addmm(const OpCall& call, VulkanDevice& dev) {
  matmul(call, dev);
  common::bias_add(call, dev.launcher());
}

}  // namespace

void register_kernels(KernelTable& t, VulkanDevice& dev) {
  auto set = [&](OpId op, VulkanKernel::LaunchFn fn,
                 VulkanKernel::SupportFn rule = common::gpu_supports) {
    t[static_cast<std::size_t>(op)] = std::make_unique<VulkanKernel>(dev, fn, rule);
  };
  set(OpId::matmul, matmul);
  set(OpId::addmm, addmm);
}

}  // namespace tessera::vulkan
