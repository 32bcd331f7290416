// The op kernels: each launch sets its cl_kernel's arguments and enqueues it on the device's
// in-order queue; nothing waits.
#include <fmt/format.h>

#include "../common/geometry.h"
#include "../common/ops.h"
#include "opencl.h"

namespace tessera::opencl {
namespace {

using common::numel_of;
using common::offset_of;

// Sets the arguments of one cl_kernel and enqueues it, holding the device's launch lock
// throughout (clSetKernelArg and clEnqueueNDRangeKernel on one kernel are not thread-safe).
class Launch {
 public:
  Launch(Context& ctx, std::string_view file, std::string_view name,
         const std::string& options = {})
      : ctx_(ctx), lock_(ctx.launch_mu), name_(name) {
    kernel_ = ctx.programs.kernel(file, name, options.empty() ? ctx.options : options);
  }
  // A tensor: its buffer and element offset.
  Launch& tensor(const Tensor& t) {
    const cl_mem mem = static_cast<const OpenclBuffer&>(t.buffer()).mem();
    return arg(mem).arg(offset_of(t));
  }
  template <typename T>
  Launch& arg(const T& value) {
    check(clSetKernelArg(kernel_, index_++, sizeof(T), &value), "clSetKernelArg", ctx_.queue.id());
    return *this;
  }
  // One work-item per element of [0, n), in work-groups of 64.
  void run(std::int64_t n) {
    if (n > 0) enqueue({round_up(n, 64), 1}, {64, 1});
  }
  // |groups| work-groups of |size| work-items each.
  void run_groups(std::int64_t groups, std::size_t size) {
    if (groups > 0) enqueue({static_cast<std::size_t>(groups) * size, 1}, {size, 1});
  }
  void enqueue(std::array<std::size_t, 2> global, std::array<std::size_t, 2> local) {
    ctx_.queue.enqueue_kernel(name_, kernel_, global.data(), local.data());
  }

 private:
  static std::size_t round_up(std::int64_t n, std::size_t m) {
    return (static_cast<std::size_t>(n) + m - 1) / m * m;
  }
  Context& ctx_;
  std::lock_guard<std::mutex> lock_;
  std::string_view name_;  // the kernel's entry point, a literal of the caller
  cl_kernel kernel_;
  cl_uint index_ = 0;
};

using OpenclKernel = FunctionKernel<Context>;

// --- losses ---

// --- nn ---

void matmul(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<MatmulAttrs>();
  const Tensor &a = call.in(0), &b = call.in(1), &y = call.out(0);
  const auto m = static_cast<std::int32_t>(y.dim(0)), n = static_cast<std::int32_t>(y.dim(1));
  const auto k = static_cast<std::int32_t>(at.trans_a ? a.dim(0) : a.dim(1));
  if (m == 0 || n == 0) return;
  const GemmTiles& t = ctx.tiles;
  const bool vec = common::multiples_of_4({m, n, k, a.offset(), b.offset(), y.offset()});
  const std::string options = fmt::format(
      "-DTM={} -DTN={} -DTK={} -DWM={} -DWN={} -DVEC={} -DTRANS_A={} -DTRANS_B={}", t.tm, t.tn,
      t.tk, t.wm, t.wn, vec ? 4 : 1, at.trans_a ? 1 : 0, at.trans_b ? 1 : 0);
  const std::size_t lx = static_cast<std::size_t>(t.tn / t.wn);
  const std::size_t ly = static_cast<std::size_t>(t.tm / t.wm);
  const std::size_t gx = static_cast<std::size_t>((n + t.tn - 1) / t.tn) * lx;
  const std::size_t gy = static_cast<std::size_t>((m + t.tm - 1) / t.tm) * ly;
  Launch(ctx, "gemm.cl", "gemm", options)
      .tensor(a)
      .tensor(b)
      .tensor(y)
      .arg(m)
      .arg(n)
      .arg(k)
      .enqueue({gx, gy}, {lx, ly});
}

// addmm: the GEMM, then the bias added in place over the output (two launches, as matmul and add
// would be; a bias epilogue in the GEMM kernel is the next step).
void addmm(const OpCall& call, Context& ctx) {
  matmul(call, ctx);
  common::bias_add(call, *ctx.launcher);
}

}  // namespace

void register_kernels(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, OpenclKernel::LaunchFn fn,
                 OpenclKernel::SupportFn rule = common::gpu_supports) {
    t[static_cast<std::size_t>(op)] = std::make_unique<OpenclKernel>(ctx, fn, rule);
  };
  set(OpId::matmul, matmul);
  set(OpId::addmm, addmm);
}

}  // namespace tessera::opencl
