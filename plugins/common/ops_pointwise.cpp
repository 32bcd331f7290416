// Launch geometry of the element-wise math, comparison and selection ops on the GPU plugins:
// kernels/pointwise_unary.tk (contiguous unary ops and the backwards of gelu and silu) and
// kernels/pointwise_strided.tk (every op with broadcast inputs, through one index walk).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "geometry.h"
#include "ops.h"

namespace tessera::common {
namespace {

// ----- unary -----

// The V0 codes of pointwise_unary.tk.
enum UnaryCode : std::int32_t {
  kNeg,
  kAbs,
  kSign,
  kSqrt,
  kRsqrt,
  kPow,
  kClamp,
  kGelu,
  kGeluTanh,
  kSilu,
  kErf,
  kGeluBackward,
  kGeluTanhBackward,
  kSiluBackward,
  kDropout,
};

void launch_unary(const OpCall& call, Launcher& l, std::int32_t code, std::int32_t mode = 0,
                  float a = 0, float b = 0, std::int64_t e = 0) {
  const bool backward = code >= kGeluBackward && code <= kSiluBackward;  // (grad, x)
  const Tensor& x = backward ? call.in(1) : call.in(0);
  const Tensor& y = call.out(0);
  const std::int64_t g_offset = backward ? call.in(0).offset() : 0;
  // Two 16-bit elements an invocation, or four f32 ones, where the sizes and offsets allow.
  const bool pairs = word_pairs(y.dtype(), y.numel(), {x.offset(), y.offset(), g_offset});
  const bool quads =
      y.dtype() == DType::f32 && multiples_of_4({y.numel(), x.offset(), y.offset(), g_offset});
  const std::int32_t form = quads ? 2 : pairs ? 1 : 0;  // V3
  const std::int64_t per = std::int64_t{1} << form;     // elements an invocation
  Launch(l, "pointwise_unary", {code, mode, float_code(y.dtype()), form})
      .in(x)
      .out(y)
      .in(backward ? call.in(0) : x)
      .i(y.numel())
      .f(a)
      .f(b)
      .i(e)
      .run(y.numel() / per);
}

template <std::int32_t kCode>
void unary(const OpCall& call, Launcher& l) {
  launch_unary(call, l, kCode);
}

bool tanh_form(const OpCall& call) {
  return call.attr<GeluAttrs>().approximate == GeluApproximate::tanh;
}

void gelu(const OpCall& call, Launcher& l) {
  launch_unary(call, l, tanh_form(call) ? kGeluTanh : kGelu);
}

void gelu_backward(const OpCall& call, Launcher& l) {
  launch_unary(call, l, tanh_form(call) ? kGeluTanhBackward : kGeluBackward);
}

void dropout(const OpCall& call, Launcher& l) {
  const auto& a = call.attr<DropoutAttrs>();
  launch_unary(call, l, kDropout, 0, a.p, 1.0f / (1.0f - a.p), dropout_key(a.seed));
}

void clamp(const OpCall& call, Launcher& l) {
  const auto& a = call.attr<ClampAttrs>();
  launch_unary(call, l, kClamp, 0, static_cast<float>(a.min), static_cast<float>(a.max));
}

// Integer exponents (negative bases included) by squaring, 1/2 and -1/2 through sqrt, others
// through the kernel's pow for positive bases.
void pow(const OpCall& call, Launcher& l) {
  const double p = call.attr<ScalarAttrs>().value;
  if (p == std::floor(p) && std::abs(p) < 1 << 30)
    return launch_unary(call, l, kPow, 1, 0, 0, static_cast<std::int64_t>(p));
  if (p == 0.5) return launch_unary(call, l, kPow, 2);
  if (p == -0.5) return launch_unary(call, l, kPow, 3);
  launch_unary(call, l, kPow, 0, static_cast<float>(p));
}

// ----- strided -----

// The V0 codes of pointwise_strided.tk.
enum StridedCode : std::int32_t {
  kMinimum,
  kMaximum,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kWhere,
  kMaskedFill,
  kWhereSecond,
  kCopy,
};

inline constexpr int kStridedWords = 3;  // n, rank, value before the extents and strides

// The output's shape with adjacent dimensions that every input walks as one merged (size-1
// dimensions dropped), and each input's strides over it: geometry.h's merge_dims for up to 3.
struct Walk {
  Shape shape;
  Strides stride[3];
};

Walk walk(const Shape& shape, std::initializer_list<const Tensor*> inputs) {
  Walk w;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    const int last = w.shape.rank() - 1;
    bool merge = last >= 0;
    int k = 0;
    for (const Tensor* t : inputs)
      merge = merge && w.stride[k++][last] == t->strides()[d] * shape[d];
    k = 0;
    if (merge) {
      w.shape[last] *= shape[d];
      for (const Tensor* t : inputs) w.stride[k++][last] = t->strides()[d];
      continue;
    }
    w.shape.push_back(shape[d]);
    for (const Tensor* t : inputs) w.stride[k++].push_back(t->strides()[d]);
  }
  return w;
}

// The widest walk one launch takes: its words are kStridedWords + rank * (1 + inputs).
bool fits_one_launch(int rank, int inputs) {
  return kStridedWords + rank * (1 + inputs) <= kMaxWords;
}

// One launch over strided |inputs| (views of the output's shape) into the output.
void launch_strided(const OpCall& call, Launcher& l, std::int32_t code,
                    std::initializer_list<const Tensor*> inputs, float value = 0) {
  const Tensor& y = call.out(0);
  const Walk w = walk(y.shape(), inputs);
  const int rank = w.shape.rank(), count = static_cast<int>(inputs.size());
  Launch launch(l, "pointwise_strided", {code, count});
  const Tensor* bound[3] = {};
  int k = 0;
  for (const Tensor* t : inputs) bound[k++] = t;
  for (int b = 0; b < 3; ++b) launch.in(*bound[b < count ? b : 0]);
  launch.out(y).i(y.numel()).i(rank).f(value);
  for (int d = 0; d < rank; ++d) launch.i(w.shape[d]);
  for (int j = 0; j < count; ++j)
    for (int d = 0; d < rank; ++d) launch.i(w.stride[j][d]);
  launch.run(y.numel());
}

template <std::int32_t kCode>
void binary(const OpCall& call, Launcher& l) {
  launch_strided(call, l, kCode, {&call.in(0), &call.in(1)});
}

void where(const OpCall& call, Launcher& l) {
  const Walk w = walk(call.out(0).shape(), {&call.in(0), &call.in(1), &call.in(2)});
  if (fits_one_launch(w.shape.rank(), 3))
    return launch_strided(call, l, kWhere, {&call.in(0), &call.in(1), &call.in(2)});
  // Six dimensions that do not merge: y = b, then y = a where cond.
  launch_strided(call, l, kCopy, {&call.in(2)});
  launch_strided(call, l, kWhereSecond, {&call.in(0), &call.in(1)});
}

void masked_fill(const OpCall& call, Launcher& l) {
  launch_strided(call, l, kMaskedFill, {&call.in(0), &call.in(1)},
                 static_cast<float>(call.attr<ScalarAttrs>().value));
}

// gpu_supports for calls with bool tensors: the float operand |k| must be f32, and every tensor
// must fit the kernels' 32-bit indices.
template <int K>
Support with_masks(const OpCall& call) {
  const DType t = call.in(K).dtype();
  if (t != DType::f32)
    return Support::no(fmt::format("dtype {} is not supported (f32 only)", dtype_name(t)));
  constexpr std::int64_t kLimit = std::numeric_limits<std::int32_t>::max();
  auto fits = [&](const Tensor& x) {
    std::int64_t reach = x.offset() + 1;
    for (int d = 0; d < x.rank(); ++d) reach += (x.shape()[d] - 1) * std::abs(x.strides()[d]);
    return x.numel() <= kLimit && reach <= kLimit;
  };
  for (int i = 0; i < call.num_inputs; ++i)
    if (!fits(call.in(i)))
      return Support::no("a tensor of more than 2^31 elements (32-bit indices in the kernels)");
  if (!fits(call.out(0)))
    return Support::no("a tensor of more than 2^31 elements (32-bit indices in the kernels)");
  return Support::yes();
}

}  // namespace

void add_pointwise_ops(PortableOps& ops) {
  ops.add(OpId::neg, unary<kNeg>, gpu_one_float_supports);
  ops.add(OpId::abs, unary<kAbs>, gpu_one_float_supports);
  ops.add(OpId::sign, unary<kSign>, gpu_one_float_supports);
  ops.add(OpId::sqrt, unary<kSqrt>, gpu_one_float_supports);
  ops.add(OpId::rsqrt, unary<kRsqrt>, gpu_one_float_supports);
  ops.add(OpId::pow, pow, gpu_one_float_supports);
  ops.add(OpId::clamp, clamp, gpu_one_float_supports);
  ops.add(OpId::gelu, gelu, gpu_one_float_supports);
  ops.add(OpId::dropout, dropout, gpu_one_float_supports);
  ops.add(OpId::gelu_backward, gelu_backward, gpu_one_float_supports);
  ops.add(OpId::silu, unary<kSilu>, gpu_one_float_supports);
  ops.add(OpId::silu_backward, unary<kSiluBackward>, gpu_one_float_supports);
  ops.add(OpId::erf, unary<kErf>, gpu_one_float_supports);
  ops.add(OpId::minimum, binary<kMinimum>);
  ops.add(OpId::maximum, binary<kMaximum>);
  ops.add(OpId::eq, binary<kEq>, with_masks<0>);
  ops.add(OpId::ne, binary<kNe>, with_masks<0>);
  ops.add(OpId::lt, binary<kLt>, with_masks<0>);
  ops.add(OpId::le, binary<kLe>, with_masks<0>);
  ops.add(OpId::gt, binary<kGt>, with_masks<0>);
  ops.add(OpId::ge, binary<kGe>, with_masks<0>);
  ops.add(OpId::where, where, with_masks<1>);
  ops.add(OpId::masked_fill, masked_fill, with_masks<0>);
}

}  // namespace tessera::common
