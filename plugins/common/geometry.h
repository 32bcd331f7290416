// Host-side launch geometry shared by the plugins (the portable GPU ops of plugins/common/ops_*.cpp
// and the GEMM launches of vulkan and opencl; the cpu plugin uses merge_dims): how an op call maps
// onto the flat index spaces their kernels walk. Header-only; a kernel reads the structs below
// field by field in this order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "tessera/kernel.h"

namespace tessera::common {

inline constexpr int kRank = kMaxDims;  // every strided kernel takes this many dimensions

// An element-wise call over a contiguous output of |n| elements whose inputs are strided views:
// output index i has coordinates in |shape| (row-major, leading dims padded with 1) and reads
// input k at offset[k] + sum(coord[d] * stride[k][d]). Adjacent dimensions that every input walks
// contiguously are merged first, so a contiguous call has rank 1.
struct Strided {
  std::int32_t n = 0;
  std::int32_t rank = 0;
  std::int32_t shape[kRank] = {};
  std::int32_t stride[2][kRank] = {};
};

// |shape| with every run of adjacent dimensions that all |count| inputs walk as one merged into
// one dimension, size-1 dimensions dropped (outermost first, 64-bit): a contiguous call has rank
// 1, a [N,C,H,W] + [C,1,1] bias add is [N, C, H*W].
struct MergedDims {
  Shape shape;
  Strides stride[2];
};

inline MergedDims merge_dims(const Shape& shape, const Tensor* inputs, int count) {
  MergedDims m;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    const int last = m.shape.rank() - 1;
    bool merge = last >= 0;
    for (int k = 0; k < count && merge; ++k)
      merge = m.stride[k][last] == inputs[k].strides()[d] * shape[d];
    if (merge) {
      m.shape[last] *= shape[d];
      for (int k = 0; k < count; ++k) m.stride[k][last] = inputs[k].strides()[d];
      continue;
    }
    m.shape.push_back(shape[d]);
    for (int k = 0; k < count; ++k) m.stride[k].push_back(inputs[k].strides()[d]);
  }
  return m;
}

inline Strided strided(const Shape& shape, const Tensor* inputs, int count) {
  const MergedDims m = merge_dims(shape, inputs, count);
  Strided g;
  g.n = static_cast<std::int32_t>(shape.numel());
  g.rank = m.shape.rank();
  for (int i = 0; i < g.rank; ++i) {
    g.shape[i] = static_cast<std::int32_t>(m.shape[i]);
    for (int k = 0; k < count; ++k) g.stride[k][i] = static_cast<std::int32_t>(m.stride[k][i]);
  }
  return g;
}

// True when merged dimensions (merge_dims, strided) of |rank| with an input's strides |stride|
// walk the second-to-last contiguously and the last with a stride: a transposed matrix, or a
// batch of them (the views a transposing copy takes).
template <class S>
bool walks_transposed(int rank, const S& stride) {
  return rank >= 2 && stride[rank - 2] == 1 && stride[rank - 1] != 1;
}

// True when every input of |g| is read contiguously (rank <= 1 with unit strides).
inline bool is_flat(const Strided& g, int count) {
  if (g.rank == 0) return true;
  if (g.rank > 1) return false;
  for (int k = 0; k < count; ++k)
    if (g.stride[k][0] != 1) return false;
  return true;
}

// A contiguous tensor reduced along |axis| is [outer, n, inner].
struct AxisSplit {
  std::int32_t outer = 1, n = 1, inner = 1;
};

inline AxisSplit split_axis(const Shape& s, int axis) {
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  return {static_cast<std::int32_t>(outer), static_cast<std::int32_t>(s[axis]),
          static_cast<std::int32_t>(inner)};
}

// One conv2d: x [n,c,h,w], w [o,c/groups,kh,kw], y [n,o,ho,wo], with dilation dh x dw.
struct Conv {
  std::int32_t n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw, groups;
};

inline Conv conv(const Shape& x, const Shape& w, const Shape& y, const Conv2dAttrs& a) {
  auto i = [](std::int64_t v) { return static_cast<std::int32_t>(v); };
  return {i(x[0]), i(x[1]),    i(x[2]),    i(x[3]), i(w[0]), i(w[2]),      i(w[3]),      i(y[2]),
          i(y[3]), a.stride_h, a.stride_w, a.pad_h, a.pad_w, a.dilation_h, a.dilation_w, a.groups};
}

// The shapes of x, w and y in a conv2d, conv2d_backward_input or conv2d_backward_weight call,
// whichever of its tensors holds them.
struct ConvShapes {
  const Shape &x, &w, &y;
};

inline ConvShapes conv_shapes(const OpCall& call) {
  switch (call.op) {
    case OpId::conv2d:  // (x, w) -> y
      return {call.in(0).shape(), call.in(1).shape(), call.out(0).shape()};
    case OpId::conv2d_backward_input:  // (gy, w) -> dx
      return {call.out(0).shape(), call.in(1).shape(), call.in(0).shape()};
    default:  // conv2d_backward_weight: (gy, x) -> dw
      return {call.in(1).shape(), call.out(0).shape(), call.in(0).shape()};
  }
}

// The geometry of one of those calls.
inline Conv conv(const OpCall& call) {
  const ConvShapes s = conv_shapes(call);
  return conv(s.x, s.w, s.y, call.attr<Conv2dAttrs>());
}

// One max_pool2d or max_pool2d_backward: |planes| = n * c planes of h x w pooled to ho x wo.
struct Pool {
  std::int32_t planes, h, w, ho, wo, kh, kw, sh, sw;
};

inline Pool pool(const OpCall& call) {
  const bool forward = call.op == OpId::max_pool2d;  // (x) -> y, else (gy, indices) -> dx
  const Shape& x = forward ? call.in(0).shape() : call.out(0).shape();
  const Shape& y = forward ? call.out(0).shape() : call.in(0).shape();
  const Pool2dAttrs& a = call.attr<Pool2dAttrs>();
  auto i = [](std::int64_t v) { return static_cast<std::int32_t>(v); };
  return {i(x[0] * x[1]), i(x[2]),    i(x[3]),    i(y[2]),   i(y[3]),
          a.kernel_h,     a.kernel_w, a.stride_h, a.stride_w};
}

// The SGD variant as the kernels take it: 0 no momentum, 1 first step (v = d), 2 momentum; plus 4
// for Nesterov.
inline std::int32_t sgd_mode(const SgdAttrs& a) {
  return (a.momentum == 0 ? 0 : a.first_step ? 1 : 2) | (a.nesterov ? 4 : 0);
}

// The scalar of add_scalar and mul_scalar; 0 for the other element-wise ops.
inline float scalar_of(const OpCall& call) {
  return call.op == OpId::add_scalar || call.op == OpId::mul_scalar
             ? static_cast<float>(call.attr<ScalarAttrs>().value)
             : 0.0f;
}

// Whether extents and element offsets are all multiples of |q|: of 4 so that kernels may read and
// write them as 4-float vectors, of 8 for 16-byte groups of halves.
inline bool multiples_of(std::int64_t q, std::initializer_list<std::int64_t> values) {
  for (const std::int64_t v : values)
    if (v % q) return false;
  return true;
}
inline bool multiples_of_4(std::initializer_list<std::int64_t> values) {
  return multiples_of(4, values);
}

// Sums over long contiguous rows use a work-group per row instead of an invocation per line.
inline bool group_per_row(const AxisSplit& sp) {
  return sp.inner == 1 && sp.n >= 256;
}

// The per-step constants of one Adam update, as the CPU plugin computes them.
struct AdamStep {
  float lr_corrected;  // lr / (1 - beta1^step)
  float inv_bc2_sqrt;  // 1 / sqrt(1 - beta2^step)
};

inline AdamStep adam_step(const AdamAttrs& a) {
  const auto step = static_cast<double>(a.step);
  const float bc1 = static_cast<float>(1 - std::pow(static_cast<double>(a.beta1), step));
  const float bc2 = static_cast<float>(1 - std::pow(static_cast<double>(a.beta2), step));
  return {a.lr / bc1, 1 / std::sqrt(bc2)};
}

// The rule every GPU kernel shares: f32 tensors (i32 where the op defines an index or label)
// whose element counts and offsets fit the kernels' 32-bit indices. With |half|, f16 and bf16
// tensors too (the op's shape rule keeps its dtypes consistent).
inline Support gpu_supports_of(const OpCall& call, bool half) {
  auto accepted = [half](DType t) { return t == DType::f32 || (half && is_16bit_float(t)); };
  const Tensor& first = call.num_inputs ? call.in(0) : call.out(0);
  if (!accepted(first.dtype()))
    return Support::no(fmt::format("dtype {} is not supported ({})", dtype_name(first.dtype()),
                                   half ? "f32, f16, bf16" : "f32 only"));
  constexpr std::int64_t kLimit = std::numeric_limits<std::int32_t>::max();
  auto check = [&](const Tensor& t) {
    std::int64_t reach = t.offset() + 1;
    for (int d = 0; d < t.rank(); ++d) reach += (t.shape()[d] - 1) * std::abs(t.strides()[d]);
    return t.numel() <= kLimit && reach <= kLimit;
  };
  for (int i = 0; i < call.num_inputs; ++i)
    if (!check(call.in(i)))
      return Support::no("a tensor of more than 2^31 elements (32-bit indices in the kernels)");
  for (int i = 0; i < call.num_outputs; ++i) {
    if (!accepted(call.out(i).dtype()) && call.out(i).dtype() != DType::i32)
      return Support::no(
          fmt::format("output dtype {} is not supported", dtype_name(call.out(i).dtype())));
    if (!check(call.out(i)))
      return Support::no("a tensor of more than 2^31 elements (32-bit indices in the kernels)");
  }
  return Support::yes();
}

inline Support gpu_supports(const OpCall& call) {
  return gpu_supports_of(call, false);
}

// gpu_supports, with f16 and bf16 accepted (matmul, addmm, bmm).
inline Support gpu_half_supports(const OpCall& call) {
  return gpu_supports_of(call, true);
}

// gpu_half_supports for the element-wise kernels that take one dtype for every tensor (LDX/STX,
// common.tk): inputs and outputs all f32, all f16 or all bf16. A mixed call is refused, and the
// core computes it in f32 (op_computes_in_f32).
inline Support gpu_one_float_supports(const OpCall& call) {
  const DType t = call.out(0).dtype();
  for (int i = 0; i < call.num_inputs; ++i)
    if (call.in(i).dtype() != t)
      return Support::no(fmt::format("inputs of {} and {} (one dtype for every tensor)",
                                     dtype_name(call.in(i).dtype()), dtype_name(t)));
  return gpu_supports_of(call, true);
}

// The DT code of LDX/STX (common.tk) for |t|: 0 f32, 1 f16, 2 bf16.
inline std::int32_t float_code(DType t) {
  return t == DType::f16 ? 1 : t == DType::bf16 ? 2 : 0;
}

// Whether an element-wise kernel may move two elements of |t| as one 32-bit word (LDS2, STX2):
// a 16-bit dtype, with the count |n| and every binding's element offset even.
inline bool word_pairs(DType t, std::int64_t n, std::initializer_list<std::int64_t> offsets) {
  if (dtype_size(t) != 2 || n % 2) return false;
  return multiples_of(2, offsets);
}

// copy and fill move elements of 4 bytes of any dtype (f32, i32) and the 16-bit floats (f16,
// bf16).
inline Support copy_fill_supports(const OpCall& call) {
  const Tensor& t = call.num_inputs ? call.in(0) : call.out(0);
  if (dtype_size(t.dtype()) != 4 && !is_16bit_float(t.dtype()))
    return Support::no(fmt::format("{} of {} is not implemented (4-byte dtypes, f16, bf16)",
                                   op_name(call.op), dtype_name(t.dtype())));
  if (t.numel() > std::numeric_limits<std::int32_t>::max())
    return Support::no("a tensor of more than 2^31 elements (32-bit indices in the kernels)");
  return Support::yes();
}

// The bits of a fill value as the output's dtype stores them.
inline std::uint32_t fill_bits(const OpCall& call) {
  const double v = call.attr<ScalarAttrs>().value;
  if (call.out(0).dtype() == DType::i32) {
    const auto i = static_cast<std::int32_t>(v);
    return static_cast<std::uint32_t>(i);
  }
  const auto f = static_cast<float>(v);
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// Element offset of a tensor, as the kernels take it.
inline std::int32_t offset_of(const Tensor& t) {
  return static_cast<std::int32_t>(t.offset());
}

inline std::int32_t numel_of(const Tensor& t) {
  return static_cast<std::int32_t>(t.numel());
}

}  // namespace tessera::common
