// Element-wise math, comparisons and selection: unary ops over contiguous f32, and binary/ternary
// ops over strided (broadcast) inputs, walked row by row after merging the dimensions every input
// steps through as one.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "kernels.h"

namespace tessera::cpu {
namespace {

constexpr int kMaxWalked = 3;  // where: cond, a, b

// The output's shape with adjacent dimensions that every input walks as one merged (size-1
// dimensions dropped), and each input's strides over it: common::merge_dims for up to 3 inputs.
struct Walk {
  Shape shape;
  Strides stride[kMaxWalked];
};

Walk merge(const OpCall& call, int count) {
  const Shape& shape = call.out(0).shape();
  Walk w;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    const int last = w.shape.rank() - 1;
    bool merge = last >= 0;
    for (int k = 0; k < count && merge; ++k)
      merge = w.stride[k][last] == call.in(k).strides()[d] * shape[d];
    if (merge) {
      w.shape[last] *= shape[d];
      for (int k = 0; k < count; ++k) w.stride[k][last] = call.in(k).strides()[d];
      continue;
    }
    w.shape.push_back(shape[d]);
    for (int k = 0; k < count; ++k) w.stride[k].push_back(call.in(k).strides()[d]);
  }
  return w;
}

// Calls row(first output index, element offset of each input, each input's step, length) for
// every row (the innermost merged dimension) of the output, rows split over the pool.
template <int N, typename Row>
void for_rows(const OpCall& call, Context& ctx, Row row) {
  const Walk w = merge(call, N);
  const int rank = w.shape.rank();
  const std::int64_t inner = rank ? w.shape[rank - 1] : 1;
  const std::int64_t n = call.out(0).numel();
  const std::int64_t rows = inner ? n / inner : 0;
  std::int64_t step[N];
  for (int k = 0; k < N; ++k) step[k] = rank ? w.stride[k][rank - 1] : 0;
  ctx.pool.parallel_for(rows, row_grain(inner), [&](std::int64_t r0, std::int64_t r1) {
    std::int64_t off[N];
    for (std::int64_t r = r0; r < r1; ++r) {
      for (int k = 0; k < N; ++k) off[k] = row_offset(w.shape, w.stride[k], r);
      row(r * inner, off, step, inner);
    }
  });
}

template <typename F>
void unary(const OpCall& call, Context& ctx, F f) {
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

// (grad, x) -> grad * f(x), both contiguous.
template <typename F>
void backward(const OpCall& call, Context& ctx, F f) {
  const float* g = in_ptr(call, 0);
  const float* x = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = g[i] * f(x[i]);
  });
}

// out = f(a, b) over broadcast views; the common step patterns get loops the compiler vectorises.
template <typename Out, typename A, typename B, typename F>
void binary(const OpCall& call, Context& ctx, F f) {
  const A* pa = in_ptr<A>(call, 0);
  const B* pb = in_ptr<B>(call, 1);
  Out* y = out_ptr<Out>(call, 0);
  for_rows<2>(
      call, ctx,
      [&](std::int64_t y0, const std::int64_t* off, const std::int64_t* step, std::int64_t inner) {
        const A* ra = pa + off[0];
        const B* rb = pb + off[1];
        Out* yr = y + y0;
        if (step[0] == 1 && step[1] == 1) {
          for (std::int64_t i = 0; i < inner; ++i) yr[i] = static_cast<Out>(f(ra[i], rb[i]));
        } else if (step[0] == 1 && step[1] == 0) {
          const B vb = *rb;
          for (std::int64_t i = 0; i < inner; ++i) yr[i] = static_cast<Out>(f(ra[i], vb));
        } else if (step[0] == 0 && step[1] == 1) {
          const A va = *ra;
          for (std::int64_t i = 0; i < inner; ++i) yr[i] = static_cast<Out>(f(va, rb[i]));
        } else {
          const std::int64_t sa = step[0], sb = step[1];
          for (std::int64_t i = 0; i < inner; ++i)
            yr[i] = static_cast<Out>(f(ra[i * sa], rb[i * sb]));
        }
      });
}

void where_kernel(const OpCall& call, Context& ctx) {
  const auto* pc = in_ptr<std::uint8_t>(call, 0);
  const float* pa = in_ptr(call, 1);
  const float* pb = in_ptr(call, 2);
  float* y = out_ptr(call, 0);
  for_rows<3>(
      call, ctx,
      [&](std::int64_t y0, const std::int64_t* off, const std::int64_t* step, std::int64_t inner) {
        const std::uint8_t* rc = pc + off[0];
        const float* ra = pa + off[1];
        const float* rb = pb + off[2];
        float* yr = y + y0;
        if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
          for (std::int64_t i = 0; i < inner; ++i) yr[i] = rc[i] ? ra[i] : rb[i];
        } else {
          const std::int64_t sc = step[0], sa = step[1], sb = step[2];
          for (std::int64_t i = 0; i < inner; ++i) yr[i] = rc[i * sc] ? ra[i * sa] : rb[i * sb];
        }
      });
}

// x^p with the exponents torch treats specially computed exactly as their closed forms.
void pow_kernel(const OpCall& call, Context& ctx) {
  const double p = call.attr<ScalarAttrs>().value;
  const auto pf = static_cast<float>(p);
  if (p == 2) return unary(call, ctx, [](float v) { return v * v; });
  if (p == 3) return unary(call, ctx, [](float v) { return v * v * v; });
  if (p == 1) return unary(call, ctx, [](float v) { return v; });
  if (p == 0) return unary(call, ctx, [](float) { return 1.0f; });
  if (p == 0.5) return unary(call, ctx, [](float v) { return std::sqrt(v); });
  if (p == -0.5) return unary(call, ctx, [](float v) { return 1.0f / std::sqrt(v); });
  if (p == -1) return unary(call, ctx, [](float v) { return 1.0f / v; });
  if (p == -2) return unary(call, ctx, [](float v) { return 1.0f / (v * v); });
  unary(call, ctx, [pf](float v) { return std::pow(v, pf); });
}

constexpr float kSqrtHalf = 0.70710678118654752f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

bool tanh_form(const OpCall& call) {
  return call.attr<GeluAttrs>().approximate == GeluApproximate::tanh;
}

// gelu's tanh form as x * s, s = (1 + tanh u) / 2 = 1 / (1 + e), e = exp(-2u) (capped so that
// 1 + e stays finite), u = sqrt(2/pi) (x + 0.044715 x^3): no cancellation in 1 + tanh u for
// negative x; 1 - tanh^2 u = 4 s (1 - s) and 1 - s = e s.
float gelu_tanh_e(float v) {
  return std::exp(std::min(-2.0f * kSqrt2OverPi * (v + kGeluCubic * v * v * v), 80.0f));
}

// The exact form through erfc: Phi(x) = erfc(-x / sqrt 2) / 2 keeps its relative accuracy where
// 1 + erf(x / sqrt 2) would cancel.
void gelu_kernel(const OpCall& call, Context& ctx) {
  if (tanh_form(call)) return unary(call, ctx, [](float v) { return v / (1.0f + gelu_tanh_e(v)); });
  unary(call, ctx, [](float v) { return 0.5f * v * std::erfc(-v * kSqrtHalf); });
}

void gelu_backward_kernel(const OpCall& call, Context& ctx) {
  if (tanh_form(call))
    return backward(call, ctx, [](float v) {
      const float e = gelu_tanh_e(v);
      const float s = 1.0f / (1.0f + e);
      const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      return s + 2.0f * v * s * (e * s) * dinner;
    });
  backward(call, ctx, [](float v) {
    return 0.5f * std::erfc(-v * kSqrtHalf) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
  });
}

// The dtype rule: the operand at |k| (the first float operand) is f32; the shape rule has
// checked that the others match.
template <int K>
Support f32_operand(const OpCall& call) {
  const DType t = call.in(K).dtype();
  if (t != DType::f32)
    return Support::no(fmt::format("dtype {} is not supported (f32 only)", dtype_name(t)));
  return Support::yes();
}

}  // namespace

void register_pointwise(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn, SupportFn s = f32_operand<0>) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, s);
  };
  set(OpId::neg, [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return -v; }); });
  set(OpId::abs,
      [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return std::fabs(v); }); });
  set(OpId::sign, [](const OpCall& c, Context& x) {
    unary(c, x, [](float v) { return static_cast<float>((0.0f < v) - (v < 0.0f)); });
  });
  set(OpId::sqrt,
      [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return std::sqrt(v); }); });
  set(OpId::rsqrt, [](const OpCall& c, Context& x) {
    unary(c, x, [](float v) { return 1.0f / std::sqrt(v); });
  });
  set(OpId::pow, pow_kernel);
  set(OpId::clamp, [](const OpCall& c, Context& x) {
    const auto& a = c.attr<ClampAttrs>();
    const auto lo = static_cast<float>(a.min), hi = static_cast<float>(a.max);
    // Comparisons that leave NaN as it is; min > max gives max, as torch.clamp.
    unary(c, x, [lo, hi](float v) {
      const float m = v < lo ? lo : v;
      return m > hi ? hi : m;
    });
  });
  set(OpId::gelu, gelu_kernel);
  set(OpId::gelu_backward, gelu_backward_kernel);
  set(OpId::silu, [](const OpCall& c, Context& x) {
    unary(c, x, [](float v) { return v / (1.0f + std::exp(-v)); });
  });
  set(OpId::silu_backward, [](const OpCall& c, Context& x) {
    backward(c, x, [](float v) {
      const float s = 1.0f / (1.0f + std::exp(-v));
      return s * (1.0f + v * (1.0f - s));
    });
  });
  set(OpId::erf,
      [](const OpCall& c, Context& x) { unary(c, x, [](float v) { return std::erf(v); }); });

  // NaN when either operand is NaN, as torch.minimum and torch.maximum.
  set(OpId::minimum, [](const OpCall& c, Context& x) {
    binary<float, float, float>(c, x, [](float a, float b) { return (a < b || a != a) ? a : b; });
  });
  set(OpId::maximum, [](const OpCall& c, Context& x) {
    binary<float, float, float>(c, x, [](float a, float b) { return (a > b || a != a) ? a : b; });
  });

  using u8 = std::uint8_t;
  set(OpId::eq, [](const OpCall& c, Context& x) {
    binary<u8, float, float>(c, x, [](float a, float b) { return a == b; });
  });
  set(OpId::ne, [](const OpCall& c, Context& x) {
    binary<u8, float, float>(c, x, [](float a, float b) { return a != b; });
  });
  set(OpId::lt, [](const OpCall& c, Context& x) {
    binary<u8, float, float>(c, x, [](float a, float b) { return a < b; });
  });
  set(OpId::le, [](const OpCall& c, Context& x) {
    binary<u8, float, float>(c, x, [](float a, float b) { return a <= b; });
  });
  set(OpId::gt, [](const OpCall& c, Context& x) {
    binary<u8, float, float>(c, x, [](float a, float b) { return a > b; });
  });
  set(OpId::ge, [](const OpCall& c, Context& x) {
    binary<u8, float, float>(c, x, [](float a, float b) { return a >= b; });
  });

  set(OpId::where, where_kernel, f32_operand<1>);
  set(OpId::masked_fill, [](const OpCall& c, Context& x) {
    const auto v = static_cast<float>(c.attr<ScalarAttrs>().value);
    binary<float, float, u8>(c, x, [v](float a, u8 m) { return m ? v : a; });
  });
}

}  // namespace tessera::cpu
