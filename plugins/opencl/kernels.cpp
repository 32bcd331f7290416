// The op kernels: each launch sets its cl_kernel's arguments and enqueues it on the device's
// in-order queue; nothing waits.
#include <fmt/format.h>

#include "../common/geometry.h"
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
      : ctx_(ctx), lock_(ctx.launch_mu) {
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
    check(clEnqueueNDRangeKernel(ctx_.queue.handle(), kernel_, 2, nullptr, global.data(),
                                 local.data(), 0, nullptr, nullptr),
          "clEnqueueNDRangeKernel", ctx_.queue.id());
  }

 private:
  static std::size_t round_up(std::int64_t n, std::size_t m) {
    return (static_cast<std::size_t>(n) + m - 1) / m * m;
  }
  Context& ctx_;
  std::lock_guard<std::mutex> lock_;
  cl_kernel kernel_;
  cl_uint index_ = 0;
};

using OpenclKernel = FunctionKernel<Context>;

// --- element-wise ---

template <const char* kName>
void binary(const OpCall& call, Context& ctx) {
  const Tensor& y = call.out(0);
  const common::Strided g = common::strided(y.shape(), call.inputs.data(), 2);
  if (common::is_flat(g, 2)) {
    const bool vec4 =
        common::multiples_of_4({g.n, call.in(0).offset(), call.in(1).offset(), y.offset()});
    Launch(ctx, "elementwise.cl", fmt::format("{}_flat{}", kName, vec4 ? "4" : ""))
        .tensor(call.in(0))
        .tensor(call.in(1))
        .tensor(y)
        .arg(g.n)
        .run(vec4 ? g.n / 4 : g.n);
    return;
  }
  Launch(ctx, "elementwise.cl", kName)
      .tensor(call.in(0))
      .tensor(call.in(1))
      .tensor(y)
      .arg(g)
      .run(g.n);
}

void copy(const OpCall& call, Context& ctx) {
  const common::Strided g = common::strided(call.in(0).shape(), call.inputs.data(), 1);
  Launch(ctx, "elementwise.cl", "copy_strided")
      .tensor(call.in(0))
      .tensor(call.out(0))
      .arg(g)
      .run(g.n);
}

void fill(const OpCall& call, Context& ctx) {
  Launch(ctx, "elementwise.cl", "fill")
      .tensor(call.out(0))
      .arg(numel_of(call.out(0)))
      .arg(common::fill_bits(call))
      .run(call.out(0).numel());
}

void dropout_mask(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<DropoutAttrs>();
  Launch(ctx, "elementwise.cl", "dropout_mask")
      .tensor(call.out(0))
      .arg(numel_of(call.out(0)))
      .arg(dropout_key(a.seed))
      .arg(a.p)
      .arg(1.0f / (1.0f - a.p))
      .run(call.out(0).numel());
}

// --- reductions ---

template <bool kMean>
void sum(const OpCall& call, Context& ctx) {
  const auto sp = common::split_axis(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  const float scale = kMean ? 1.0f / static_cast<float>(sp.n) : 1.0f;
  if (common::group_per_row(sp)) {
    Launch(ctx, "reduce.cl", "sum_rows")
        .tensor(call.in(0))
        .tensor(call.out(0))
        .arg(sp.n)
        .arg(scale)
        .run_groups(sp.outer, ctx.reduce_wg);
    return;
  }
  Launch(ctx, "reduce.cl", "sum_lines")
      .tensor(call.in(0))
      .tensor(call.out(0))
      .arg(sp.outer)
      .arg(sp.n)
      .arg(sp.inner)
      .arg(scale)
      .run(std::int64_t{sp.outer} * sp.inner);
}

template <const char* kName>
void lines(const OpCall& call, Context& ctx) {
  const auto sp = common::split_axis(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  Launch l(ctx, "reduce.cl", kName);
  l.tensor(call.in(0)).tensor(call.out(0)).arg(sp.outer).arg(sp.n).arg(sp.inner);
  if (call.op == OpId::softmax || call.op == OpId::log_softmax)
    l.arg(static_cast<int>(call.op == OpId::log_softmax));
  l.run(std::int64_t{sp.outer} * sp.inner);
}

void max_backward(const OpCall& call, Context& ctx) {
  const auto sp = common::split_axis(call.in(1).shape(), call.attr<AxisAttrs>().axis);
  Launch(ctx, "reduce.cl", "max_backward")
      .tensor(call.in(0))
      .tensor(call.in(1))
      .tensor(call.out(0))
      .arg(sp.outer)
      .arg(sp.n)
      .arg(sp.inner)
      .run(std::int64_t{sp.outer} * sp.inner);
}

void cross_entropy(const OpCall& call, Context& ctx) {
  const auto rows = static_cast<std::int32_t>(call.in(0).dim(0));
  const auto c = static_cast<std::int32_t>(call.in(0).dim(1));
  Launch(ctx, "reduce.cl", "cross_entropy")
      .tensor(call.in(0))
      .tensor(call.in(1))
      .tensor(call.out(0))
      .arg(rows)
      .arg(c)
      .run_groups(1, ctx.reduce_wg);
}

void cross_entropy_backward(const OpCall& call, Context& ctx) {
  const auto rows = static_cast<std::int32_t>(call.in(0).dim(0));
  const auto c = static_cast<std::int32_t>(call.in(0).dim(1));
  Launch(ctx, "reduce.cl", "cross_entropy_backward")
      .tensor(call.in(0))
      .tensor(call.in(1))
      .tensor(call.in(2))
      .tensor(call.out(0))
      .arg(rows)
      .arg(c)
      .run(rows);
}

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

// conv2d and conv2d_backward_input: one work-item per output element.
template <const char* kName>
void conv(const OpCall& call, Context& ctx) {
  Launch(ctx, "nn.cl", kName)
      .tensor(call.in(0))
      .tensor(call.in(1))
      .tensor(call.out(0))
      .arg(common::conv(call))
      .run(call.out(0).numel());
}

void conv2d_backward_weight(const OpCall& call, Context& ctx) {
  Launch(ctx, "nn.cl", "conv2d_backward_weight")
      .tensor(call.in(0))
      .tensor(call.in(1))
      .tensor(call.out(0))
      .arg(common::conv(call))
      .run_groups(call.out(0).numel(), ctx.reduce_wg);
}

void max_pool2d(const OpCall& call, Context& ctx) {
  Launch(ctx, "nn.cl", "max_pool2d")
      .tensor(call.in(0))
      .tensor(call.out(0))
      .tensor(call.out(1))
      .arg(common::pool(call))
      .run(call.out(0).numel());
}

void max_pool2d_backward(const OpCall& call, Context& ctx) {
  Launch(ctx, "nn.cl", "max_pool2d_backward")
      .tensor(call.in(0))
      .tensor(call.in(1))
      .tensor(call.out(0))
      .arg(common::pool(call))
      .run(call.out(0).numel());
}

// --- optimizers ---

void sgd_update(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<SgdAttrs>();
  Launch(ctx, "optim.cl", "sgd_update")
      .tensor(call.in(0))
      .tensor(call.out(0))
      .tensor(call.out(1))
      .arg(numel_of(call.out(0)))
      .arg(a.lr)
      .arg(a.momentum)
      .arg(a.dampening)
      .arg(a.weight_decay)
      .arg(common::sgd_mode(a))
      .run(call.out(0).numel());
}

void adam_update(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<AdamAttrs>();
  const common::AdamStep s = common::adam_step(a);
  Launch(ctx, "optim.cl", "adam_update")
      .tensor(call.in(0))
      .tensor(call.out(0))
      .tensor(call.out(1))
      .tensor(call.out(2))
      .arg(numel_of(call.out(0)))
      .arg(s.lr_corrected)
      .arg(a.beta1)
      .arg(a.beta2)
      .arg(a.eps)
      .arg(a.weight_decay)
      .arg(s.inv_bc2_sqrt)
      .run(call.out(0).numel());
}

// Kernel names as template arguments.
constexpr char kAdd[] = "add", kSub[] = "sub", kMul[] = "mul", kDiv[] = "div_";
constexpr char kMax[] = "max_lines", kArgmax[] = "argmax_lines", kSoftmax[] = "softmax_lines";
constexpr char kConv[] = "conv2d", kConvInput[] = "conv2d_backward_input";

// addmm: the GEMM, then the bias added in place over the output (two launches, as matmul and add
// would be; a bias epilogue in the GEMM kernel is the next step).
void addmm(const OpCall& call, Context& ctx) {
  matmul(call, ctx);
  binary<kAdd>(common::bias_add_of(call), ctx);
}

}  // namespace

void register_kernels(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, OpenclKernel::LaunchFn fn,
                 OpenclKernel::SupportFn rule = common::gpu_supports) {
    t[static_cast<std::size_t>(op)] = std::make_unique<OpenclKernel>(ctx, fn, rule);
  };
  set(OpId::matmul, matmul);
  set(OpId::addmm, addmm);
  set(OpId::add, binary<kAdd>);
  set(OpId::sub, binary<kSub>);
  set(OpId::mul, binary<kMul>);
  set(OpId::div, binary<kDiv>);
  set(OpId::sum, sum<false>);
  set(OpId::mean, sum<true>);
  set(OpId::max, lines<kMax>);
  set(OpId::argmax, lines<kArgmax>);
  set(OpId::softmax, lines<kSoftmax>);
  set(OpId::log_softmax, lines<kSoftmax>);
  set(OpId::cross_entropy, cross_entropy);
  set(OpId::cross_entropy_backward, cross_entropy_backward);
  set(OpId::conv2d, conv<kConv>);
  set(OpId::conv2d_backward_input, conv<kConvInput>);
  set(OpId::conv2d_backward_weight, conv2d_backward_weight);
  set(OpId::max_pool2d, max_pool2d);
  set(OpId::max_pool2d_backward, max_pool2d_backward);
  set(OpId::copy, copy, common::four_byte_supports);
  set(OpId::fill, fill, common::four_byte_supports);
  set(OpId::sgd_update, sgd_update);
  set(OpId::adam_update, adam_update);
  set(OpId::max_backward, max_backward);
  set(OpId::dropout_mask, dropout_mask);
}

}  // namespace tessera::opencl
