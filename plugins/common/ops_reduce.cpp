// Launch geometry of the reductions, normalisation, losses and optimizer group (kernels:
// reduce_line, layer_norm, batch_norm, batch_norm_backward, cross_entropy, sum_squares, adamw). A
// kernel file serves several ops through its V0; every launch binds as many tensors as the file's
// kernel names (padding with one it already has), so that no statically used binding is left
// unwritten.
#include <algorithm>
#include <cmath>

#include "geometry.h"
#include "ops.h"

namespace tessera::common {
namespace {

constexpr int kGroup = 256;

// A contiguous tensor reduced along |axis| is [outer, n, inner].
struct Lines {
  std::int64_t outer = 1, n = 1, inner = 1;
};
Lines lines_of(const Shape& s, int axis) {
  Lines r;
  for (int i = 0; i < axis; ++i) r.outer *= s[i];
  r.n = s[axis];
  for (int i = axis + 1; i < s.rank(); ++i) r.inner *= s[i];
  return r;
}

// kMode: the V0 of kernels/reduce_line.tk. Forward reductions: (x) -> out; backwards: (grad, b).
template <int kMode>
void reduce_line(const OpCall& call, Launcher& l) {
  const bool backward = kMode >= 4;
  const Tensor& shaped = backward ? call.in(1) : call.in(0);
  int axis = 0;
  float div = 0;
  if (kMode == 1 || kMode == 2) {
    const auto& at = call.attr<VarAttrs>();
    axis = at.axis;
    div = static_cast<float>(static_cast<double>(shaped.dim(axis)) - at.correction);
  } else {
    axis = call.attr<AxisAttrs>().axis;
  }
  const Lines ln = lines_of(shaped.shape(), axis);
  const std::int64_t lines = ln.outer * ln.inner;
  if (lines == 0) return;
  Launch(l, "reduce_line", {kMode, float_code(call.out(0).dtype())})
      .in(call.in(0))
      .out(call.out(0))
      .in(backward ? call.in(1) : call.in(0))
      .i(lines)
      .i(ln.n)
      .i(ln.inner)
      .f(div)
      .group(64)
      .run(lines);
}

// Rows of layer_norm: [rows, cols], cols the normalised dimensions.
std::pair<std::int64_t, std::int64_t> ln_rows(const Shape& s, int axis) {
  std::int64_t rows = 1, cols = 1;
  for (int i = 0; i < axis; ++i) rows *= s[i];
  for (int i = axis; i < s.rank(); ++i) cols *= s[i];
  return {rows, cols};
}

// Rows of layer_norm.tk's forward and grad_x in a work-group (of kGroup invocations, 32 a row),
// and columns of its column sums.
constexpr std::int64_t kNormRows = kGroup / 32;
constexpr std::int64_t kNormCols = 32;

void layer_norm(const OpCall& call, Launcher& l) {
  const auto& at = call.attr<LayerNormAttrs>();
  const auto [rows, cols] = ln_rows(call.in(0).shape(), at.axis);
  if (rows == 0) return;
  // V1: the rows read 4 floats at once.
  const bool f4 = multiples_of_4(
      {cols, call.in(0).offset(), call.in(1).offset(), call.in(2).offset(), call.out(0).offset()});
  Launch(l, "layer_norm", {0, f4 ? 1 : 0})
      .in(call.in(0))
      .in(call.in(1))
      .in(call.in(2))
      .out(call.out(0))
      .out(call.out(1))
      .out(call.out(2))
      .i(rows)
      .i(cols)
      .f(at.eps)
      .shared(2 * kGroup)
      .group(kGroup)
      .groups((rows + kNormRows - 1) / kNormRows);
}

// Rows per block of the column partials of grad_weight and grad_bias (8 a column's invocation).
constexpr std::int64_t kRowBlock = 64;

void layer_norm_backward(const OpCall& call, Launcher& l) {
  const auto& at = call.attr<LayerNormAttrs>();
  const auto [rows, cols] = ln_rows(call.in(1).shape(), at.axis);
  const Tensor &g = call.in(0), &x = call.in(1), &w = call.in(2), &mean = call.in(3),
               &rstd = call.in(4);
  const std::int64_t chunks = (cols + kNormCols - 1) / kNormCols;
  const bool f4 = multiples_of_4({cols, g.offset(), x.offset(), w.offset(), call.out(0).offset()});
  if (rows > 0)
    Launch(l, "layer_norm", {1, f4 ? 1 : 0})
        .in(g)
        .in(x)
        .in(w)
        .in(mean)
        .in(rstd)
        .out(call.out(0))
        .i(rows)
        .i(cols)
        .f(at.eps)
        .shared(2 * kGroup)
        .group(kGroup)
        .groups((rows + kNormRows - 1) / kNormRows);
  const std::int64_t blocks = std::max<std::int64_t>((rows + kRowBlock - 1) / kRowBlock, 1);
  const Tensor partial = Tensor::empty({2, blocks, cols}, DType::f32, &l.device());
  Launch(l, "layer_norm", {2})
      .in(g)
      .in(x)
      .in(mean)
      .in(rstd)
      .out(partial)
      .in(g)
      .i(rows)
      .i(cols)
      .i(kRowBlock)
      .i(blocks)
      .shared(2 * kGroup)
      .group(kGroup)
      .groups(blocks * chunks);
  Launch(l, "layer_norm", {3})
      .in(partial)
      .out(call.out(1))
      .out(call.out(2))
      .in(g)
      .in(g)
      .in(g)
      .i(rows)
      .i(cols)
      .i(kRowBlock)
      .i(blocks)
      .shared(2 * kGroup)
      .group(kGroup)
      .groups(chunks);
}

// x [N, C, S].
struct Nchw {
  std::int64_t n, c, s;
};
Nchw nchw_of(const Shape& sh) {
  Nchw r{sh[0], sh[1], 1};
  for (int i = 2; i < sh.rank(); ++i) r.s *= sh[i];
  return r;
}

// How batch_norm and its backward split a channel's N * S elements: parts of at least 1024, enough
// for two work-groups per compute unit over all channels, and never more than N * S / 2 (the
// parts' sums are kept in the output tensor until they are added).
struct BnParts {
  std::int64_t parts, length;
};
BnParts bn_parts(const GpuTraits& traits, const Nchw& d) {
  const std::int64_t count = d.n * d.s;
  const std::int64_t want = traits.compute_units > 0 ? 2 * traits.compute_units : 8;
  const std::int64_t parts = std::clamp<std::int64_t>(
      (want + d.c - 1) / d.c, 1, std::max<std::int64_t>(1, std::min(count / 1024, count / 2)));
  const std::int64_t length = (count + parts - 1) / parts;
  return {length > 0 ? (count + length - 1) / length : 1, std::max<std::int64_t>(length, 1)};
}

// (x, weight, bias, running_mean, running_var) -> (y, save_mean, save_invstd, running_mean,
// running_var): partial sums per part of a channel, the statistics per channel, then y per
// element (kernels/batch_norm.tk); eval skips the sums.
void batch_norm(const OpCall& call, Launcher& l) {
  const auto& at = call.attr<BatchNormAttrs>();
  const Nchw d = nchw_of(call.in(0).shape());
  if (d.c == 0) return;
  const BnParts p = bn_parts(l.traits(), d);
  auto launch = [&](int mode) {
    Launch b(l, "batch_norm", {mode});
    b.in(call.in(0)).in(call.in(1)).in(call.in(2));
    for (int i = 0; i < 5; ++i) b.out(call.out(i));
    b.i(d.n).i(d.c).i(d.s).f(at.momentum).f(at.eps).i(p.parts).i(p.length);
    return b;
  };
  if (at.training) launch(0).shared(2 * kGroup).group(kGroup).groups(d.c * p.parts);
  launch(at.training ? 1 : 2).run(d.c);
  launch(3).run(call.out(0).numel());
}

// (grad, x, weight, save_mean, save_invstd) -> (grad_x, grad_weight, grad_bias): partial sums per
// part of a channel, their sums per channel, then grad_x per element
// (kernels/batch_norm_backward.tk).
void batch_norm_backward(const OpCall& call, Launcher& l) {
  const auto& at = call.attr<BatchNormAttrs>();
  const Nchw d = nchw_of(call.in(1).shape());
  if (d.c == 0) return;
  const BnParts p = bn_parts(l.traits(), d);
  auto launch = [&](int mode) {
    Launch b(l, "batch_norm_backward", {mode});
    for (int i = 0; i < 5; ++i) b.in(call.in(i));
    for (int i = 0; i < 3; ++i) b.out(call.out(i));
    b.i(d.n).i(d.c).i(d.s).i(p.parts).i(p.length);
    return b;
  };
  launch(0).shared(2 * kGroup).group(kGroup).groups(d.c * p.parts);
  if (p.parts > 1) launch(1).run(d.c);
  launch(at.training ? 2 : 3).run(call.out(0).numel());
}

// Per-row losses (or, for the backward, counts) of cross_entropy into |scratch| [2 rows], then
// their reduction into |out| [1]: the mean loss, or the count when |count_only|.
void cross_entropy_rows(const OpCall& call, Launcher& l, const Tensor& scratch, const Tensor& out,
                        bool count_only) {
  const auto& at = call.attr<CrossEntropyAttrs>();
  const std::int64_t c = call.in(0).dim(-1), rows = call.in(1).numel();
  const int i64 = call.in(1).dtype() == DType::i64 ? 1 : 0;
  const auto ignore = static_cast<std::int32_t>(at.ignore_index);
  if (rows > 0)
    Launch(l, "cross_entropy", {0, i64})
        .in(call.in(0))
        .in(call.in(1))
        .out(scratch)
        .in(scratch)
        .in(scratch)
        .i(rows)
        .i(c)
        .i(ignore)
        .f(at.label_smoothing)
        .i(0)
        .run(rows);
  Launch(l, "cross_entropy", {1, i64})
      .in(call.in(0))
      .in(call.in(1))
      .in(scratch)
      .out(out)
      .in(scratch)
      .i(rows)
      .i(c)
      .i(ignore)
      .f(at.label_smoothing)
      .i(count_only ? 1 : 0)
      .shared(2 * kGroup)
      .group(kGroup)
      .groups(1);
}

Tensor ce_scratch(const OpCall& call, Launcher& l) {
  return Tensor::empty({std::max<std::int64_t>(2 * call.in(1).numel(), 1)}, DType::f32,
                       &l.device());
}

void cross_entropy(const OpCall& call, Launcher& l) {
  cross_entropy_rows(call, l, ce_scratch(call, l), call.out(0), false);
}

void cross_entropy_backward(const OpCall& call, Launcher& l) {
  const auto& at = call.attr<CrossEntropyAttrs>();
  const Tensor count = Tensor::empty({1}, DType::f32, &l.device());
  cross_entropy_rows(call, l, ce_scratch(call, l), count, true);
  const std::int64_t c = call.in(0).dim(-1), rows = call.in(1).numel();
  if (rows == 0) return;
  Launch(l, "cross_entropy", {2, call.in(1).dtype() == DType::i64 ? 1 : 0})
      .in(call.in(0))
      .in(call.in(1))
      .in(count)
      .in(call.in(2))
      .out(call.out(0))
      .i(rows)
      .i(c)
      .i(static_cast<std::int32_t>(at.ignore_index))
      .f(at.label_smoothing)
      .i(0)
      .run(rows);
}

// CE's labels may be i32 or i64 (the first input is f32); the ignore index must fit 32 bits.
Support cross_entropy_supports(const OpCall& call) {
  const std::int64_t ignore = call.attr<CrossEntropyAttrs>().ignore_index;
  if (ignore < INT32_MIN || ignore > INT32_MAX)
    return Support::no("an ignore_index outside the 32-bit range");
  return gpu_supports(call);
}

// Elements per work-group of the first stage of the sums.
constexpr std::int64_t kSumChunk = 4096;

// The sum of squares of |a| (or of a - b) times |scale| into |out| [1], in two stages; in one
// where one work-group takes every element (a model's biases and norm weights).
void sum_of_squares(Launcher& l, const Tensor& a, const Tensor& b, bool diff, float scale,
                    const Tensor& out) {
  const std::int64_t n = a.numel();
  const std::int64_t groups = (n + kSumChunk - 1) / kSumChunk;
  const bool one = groups == 1;  // the first stage's one partial is the scaled total
  const Tensor partial =
      one ? out : Tensor::empty({std::max<std::int64_t>(groups, 1)}, DType::f32, &l.device());
  if (groups > 0)
    Launch(l, "sum_squares", {0, diff ? 1 : 0})
        .in(a)
        .in(b)
        .out(partial)
        .i(n)
        .i(kSumChunk)
        .f(one ? scale : 1.0f)
        .shared(kGroup)
        .group(kGroup)
        .groups(groups);
  if (one) return;
  Launch(l, "sum_squares", {1})
      .in(partial)
      .out(out)
      .in(partial)
      .i(groups)
      .f(scale)
      .shared(kGroup)
      .group(kGroup)
      .groups(1);
}

void sum_squares(const OpCall& call, Launcher& l) {
  sum_of_squares(l, call.in(0), call.in(0), false, 1.0f, call.out(0));
}

void mse_loss(const OpCall& call, Launcher& l) {
  const Reduction red = call.attr<LossAttrs>().reduction;
  const std::int64_t n = call.in(0).numel();
  if (red == Reduction::none) {
    Launch(l, "sum_squares", {2}).in(call.in(0)).in(call.in(1)).out(call.out(0)).i(n).run(n);
    return;
  }
  const float scale = red == Reduction::mean ? 1.0f / static_cast<float>(n) : 1.0f;
  sum_of_squares(l, call.in(0), call.in(1), true, scale, call.out(0));
}

void adamw_update(const OpCall& call, Launcher& l) {
  const AdamAttrs& at = call.attr<AdamAttrs>();
  const auto step = static_cast<double>(at.step);
  const double bc1 = 1 - std::pow(static_cast<double>(at.beta1), step);
  const double bc2 = 1 - std::pow(static_cast<double>(at.beta2), step);
  const std::int64_t n = call.out(0).numel();
  Launch(l, "adamw")
      .in(call.in(0))
      .out(call.out(0))
      .out(call.out(1))
      .out(call.out(2))
      .i(n)
      .f(1 - at.lr * at.weight_decay)
      .f(static_cast<float>(at.lr / bc1))
      .f(static_cast<float>(1 / std::sqrt(bc2)))
      .f(at.beta1)
      .f(at.beta2)
      .f(at.eps)
      .run(n);
}

}  // namespace

void add_reduce_ops(PortableOps& ops) {
  ops.add(OpId::min, reduce_line<0>, gpu_one_float_supports);
  ops.add(OpId::var, reduce_line<1>, gpu_one_float_supports);
  ops.add(OpId::std, reduce_line<2>, gpu_one_float_supports);
  ops.add(OpId::prod, reduce_line<3>, gpu_one_float_supports);
  ops.add(OpId::min_backward, reduce_line<4>, gpu_one_float_supports);
  ops.add(OpId::prod_backward, reduce_line<5>);
  ops.add(OpId::softmax_backward, reduce_line<6>, gpu_one_float_supports);
  ops.add(OpId::log_softmax_backward, reduce_line<7>, gpu_one_float_supports);
  ops.add(OpId::layer_norm, layer_norm);
  ops.add(OpId::layer_norm_backward, layer_norm_backward);
  ops.add(OpId::batch_norm, batch_norm);
  ops.add(OpId::batch_norm_backward, batch_norm_backward);
  ops.add(OpId::cross_entropy, cross_entropy, cross_entropy_supports);
  ops.add(OpId::cross_entropy_backward, cross_entropy_backward, cross_entropy_supports);
  ops.add(OpId::mse_loss, mse_loss);
  ops.add(OpId::sum_squares, sum_squares);
  ops.add(OpId::adamw_update, adamw_update);
}

}  // namespace tessera::common
