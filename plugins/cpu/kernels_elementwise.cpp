// Element-wise kernels: binary ops with broadcasting, scalar ops, activations, copy and fill.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "../common/geometry.h"
#include "kernels.h"
#include "tessera/half.h"

namespace tessera::cpu {
namespace {

template <typename F>
void unary(const OpCall& call, Context& ctx, F f) {
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

// Output is contiguous with shape S; both inputs are views of shape S (stride 0 where broadcast).
template <typename F>
void binary(const OpCall& call, Context& ctx, F f) {
  const Tensor &a = call.in(0), &b = call.in(1);
  const float* pa = a.host_data<float>();
  const float* pb = b.host_data<float>();
  float* y = out_ptr(call, 0);
  const std::int64_t n = call.out(0).numel();
  if (a.is_contiguous() && b.is_contiguous()) {
    ctx.pool.parallel_for(n, kElementGrain, [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t i = s; i < e; ++i) y[i] = f(pa[i], pb[i]);
    });
    return;
  }
  // Dimensions both views step through as one are merged (common::merge_dims): a [N,C,H,W] +
  // [C,1,1] bias add runs over rows of H*W elements, not of W.
  const common::MergedDims merged = common::merge_dims(call.out(0).shape(), call.inputs.data(), 2);
  const Shape& shape = merged.shape;
  const Strides &st_a = merged.stride[0], &st_b = merged.stride[1];
  const int rank = shape.rank();
  const std::int64_t inner = rank ? shape[rank - 1] : 1;
  const std::int64_t sa = rank ? st_a[rank - 1] : 0, sb = rank ? st_b[rank - 1] : 0;
  const std::int64_t rows = inner ? n / inner : 0;
  ctx.pool.parallel_for(rows, row_grain(inner), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * inner;
      const float* ra = pa + row_offset(shape, st_a, r);
      const float* rb = pb + row_offset(shape, st_b, r);
      if (sa == 1 && sb == 1) {  // e.g. a bias row added to every row
        for (std::int64_t i = 0; i < inner; ++i) yr[i] = f(ra[i], rb[i]);
      } else if (sa == 1 && sb == 0) {
        const float vb = *rb;
        for (std::int64_t i = 0; i < inner; ++i) yr[i] = f(ra[i], vb);
      } else if (sa == 0 && sb == 1) {
        const float va = *ra;
        for (std::int64_t i = 0; i < inner; ++i) yr[i] = f(va, rb[i]);
      } else {
        for (std::int64_t i = 0; i < inner; ++i) yr[i] = f(ra[i * sa], rb[i * sb]);
      }
    }
  });
}

float scalar(const OpCall& call) {
  return static_cast<float>(call.attr<ScalarAttrs>().value);
}

// A copy of a view whose dimensions, adjacent ones merged, walk the second-to-last contiguously
// and the last with a stride (a transposed matrix, a batch of them), in blocks of 32 x 32: the
// block's 32 source lines stay in cache while y's rows are written in order (the row loop of
// strided_copy reads one cache line per element there). A task is a band of 32 of y's rows.
template <typename T>
bool transposed_copy(const T* src, T* dst, const common::MergedDims& m, Context& ctx) {
  const int r = m.shape.rank();
  if (!common::walks_transposed(r, m.stride[0])) return false;
  constexpr std::int64_t kBlock = 32;
  const std::int64_t rows = m.shape[r - 2], cols = m.shape[r - 1], step = m.stride[0][r - 1];
  // The batch: dimensions 0 .. r - 3, as rows of a view whose last dimension is 1.
  Shape outer;
  Strides outer_strides;
  for (int d = 0; d + 2 < r; ++d) {
    outer.push_back(m.shape[d]);
    outer_strides.push_back(m.stride[0][d]);
  }
  outer.push_back(1);
  outer_strides.push_back(0);
  const std::int64_t bands = (rows + kBlock - 1) / kBlock, batch = outer.numel();
  // Band t: rows r0 .. r0 + 32 of y's matrix b.
  const auto copy_bands = [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t b = t / bands, r0 = (t % bands) * kBlock;
      const std::int64_t r1 = std::min(rows, r0 + kBlock);
      const T* s = src + row_offset(outer, outer_strides, b);
      T* o = dst + b * rows * cols;
      for (std::int64_t c0 = 0; c0 < cols; c0 += kBlock) {
        const std::int64_t c1 = std::min(cols, c0 + kBlock);
        for (std::int64_t i = r0; i < r1; ++i)
          for (std::int64_t j = c0; j < c1; ++j) o[i * cols + j] = s[j * step + i];
      }
    }
  };
  ctx.pool.parallel_for(batch * bands, row_grain(kBlock * cols), copy_bands);
  return true;
}

// Strided copy of elements of type T (any dtype of that size).
template <typename T>
void strided_copy(const OpCall& call, Context& ctx) {
  const Tensor& x = call.in(0);
  const T* src = x.host_data<T>();
  T* dst = out_ptr<T>(call, 0);
  const Shape& shape = x.shape();
  const int rank = shape.rank();
  const std::int64_t n = x.numel();
  if (rank == 0 || x.is_contiguous()) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    return;
  }
  if (transposed_copy(src, dst, common::merge_dims(shape, &x, 1), ctx)) return;
  const std::int64_t inner = shape[rank - 1], step = x.strides()[rank - 1];
  const std::int64_t rows = inner ? n / inner : 0;
  ctx.pool.parallel_for(rows, row_grain(inner), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* s = src + row_offset(shape, x.strides(), r);
      T* o = dst + r * inner;
      for (std::int64_t i = 0; i < inner; ++i) o[i] = s[i * step];
    }
  });
}

void copy_kernel(const OpCall& call, Context& ctx) {
  switch (dtype_size(call.in(0).dtype())) {
    case 1:
      return strided_copy<std::uint8_t>(call, ctx);
    case 2:
      return strided_copy<std::uint16_t>(call, ctx);
    case 4:
      return strided_copy<std::uint32_t>(call, ctx);
    default:
      return strided_copy<std::uint64_t>(call, ctx);
  }
}

template <typename T>
void fill_typed(const OpCall& call, Context& ctx, T v) {
  T* y = out_ptr<T>(call, 0);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = v;
  });
}

void fill_kernel(const OpCall& call, Context& ctx) {
  const double v = call.attr<ScalarAttrs>().value;
  switch (call.out(0).dtype()) {
    case DType::f32:
      return fill_typed(call, ctx, static_cast<float>(v));
    case DType::f64:
      return fill_typed(call, ctx, v);
    case DType::f16:  // through f32, as a cast rounds (the GPUs store the same bits)
      return fill_typed(call, ctx, f32_to_f16(static_cast<float>(v)));
    case DType::bf16:
      return fill_typed(call, ctx, f32_to_bf16(static_cast<float>(v)));
    case DType::i32:
      return fill_typed(call, ctx, static_cast<std::int32_t>(v));
    case DType::u8:
      return fill_typed(call, ctx, static_cast<std::uint8_t>(v));
    case DType::i64:
      return fill_typed(call, ctx, static_cast<std::int64_t>(v));
    case DType::boolean:  // torch.full(..., True): any non-zero value is 1
      return fill_typed(call, ctx, static_cast<bool>(v));
    default:
      break;
  }
}

void dropout_mask_kernel(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<DropoutAttrs>();
  float* y = out_ptr(call, 0);
  const float keep = 1.0f / (1.0f - a.p);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      y[i] = dropout_uniform(a.seed, static_cast<std::uint32_t>(i)) >= a.p ? keep : 0.0f;
  });
}

// x * the mask of dropout_mask_kernel, as x * (0 or 1/(1-p)): the same values and NaNs.
void dropout_kernel(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<DropoutAttrs>();
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  const float keep = 1.0f / (1.0f - a.p);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      y[i] = x[i] * (dropout_uniform(a.seed, static_cast<std::uint32_t>(i)) >= a.p ? keep : 0.0f);
  });
}

Support any_dtype(const OpCall&) {
  return Support::yes();
}

Support fill_dtypes(const OpCall& call) {
  const DType t = call.out(0).dtype();
  if (t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16 ||
      t == DType::i32 || t == DType::u8 || t == DType::i64 || t == DType::boolean)
    return Support::yes();
  return Support::no(fmt::format("fill of {} is not implemented", dtype_name(t)));
}

}  // namespace

Support f32_only(const OpCall& call) {
  const Tensor& first = call.num_inputs ? call.in(0) : call.out(0);
  if (first.dtype() != DType::f32)
    return Support::no(
        fmt::format("dtype {} is not supported (f32 only)", dtype_name(first.dtype())));
  for (int i = 0; i < call.num_outputs; ++i)
    if (call.out(i).dtype() != DType::f32 && call.out(i).dtype() != DType::i32)
      return Support::no(
          fmt::format("output dtype {} is not supported", dtype_name(call.out(i).dtype())));
  return Support::yes();
}

void register_elementwise(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn, SupportFn s = f32_only) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, s);
  };
  set(OpId::add,
      [](const OpCall& c, Context& x) { binary(c, x, [](float a, float b) { return a + b; }); });
  set(OpId::sub,
      [](const OpCall& c, Context& x) { binary(c, x, [](float a, float b) { return a - b; }); });
  set(OpId::mul,
      [](const OpCall& c, Context& x) { binary(c, x, [](float a, float b) { return a * b; }); });
  set(OpId::div,
      [](const OpCall& c, Context& x) { binary(c, x, [](float a, float b) { return a / b; }); });
  set(OpId::add_scalar, [](const OpCall& c, Context& x) {
    const float s = scalar(c);
    unary(c, x, [s](float v) { return v + s; });
  });
  set(OpId::mul_scalar, [](const OpCall& c, Context& x) {
    const float s = scalar(c);
    unary(c, x, [s](float v) { return v * s; });
  });
  set(OpId::relu,
      [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return v > 0 ? v : 0.0f; }); });
  set(OpId::relu_backward, [](const OpCall& c, Context& x) {
    const float* g = in_ptr(c, 0);
    const float* in = in_ptr(c, 1);
    float* y = out_ptr(c, 0);
    x.pool.parallel_for(c.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
      // Both loads unconditional: the select vectorises; a branch on the sign would mispredict
      // half the time on real activations.
      for (std::int64_t i = b; i < e; ++i) {
        const float gi = g[i];
        y[i] = in[i] > 0 ? gi : 0.0f;
      }
    });
  });
  set(OpId::exp,
      [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return std::exp(v); }); });
  set(OpId::log,
      [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return std::log(v); }); });
  set(OpId::tanh,
      [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return std::tanh(v); }); });
  set(OpId::sigmoid, [](const OpCall& c, Context& x) {
    unary(c, x, [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
  });
  set(OpId::copy, copy_kernel, any_dtype);
  set(OpId::fill, fill_kernel, fill_dtypes);
  set(OpId::dropout_mask, dropout_mask_kernel);
  set(OpId::dropout, dropout_kernel);
}

}  // namespace tessera::cpu
