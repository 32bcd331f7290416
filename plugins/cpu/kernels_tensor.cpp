// The tensor API's kernels: cast, copy_into (writing through a strided view), arange, rand,
// randn, randint, index_select and its backward.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <fmt/format.h>

#include "kernels.h"
#include "tessera/half.h"

namespace tessera::cpu {
namespace {

// The 16-bit floats as host types: their bits, converted through f32 (tessera/half.h).
struct F16 {
  std::uint16_t bits;
};
struct BF16 {
  std::uint16_t bits;
};

// Calls f(T{}) with T the host type of |t| (bool as std::uint8_t holding 0 or 1).
template <typename F>
void visit_dtype(DType t, F f) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::i32:
      return f(std::int32_t{});
    case DType::i64:
      return f(std::int64_t{});
    case DType::u8:
      return f(std::uint8_t{});
    case DType::boolean:
      return f(bool{});
    default:
      return;
  }
}

// visit_dtype with the 16-bit floats too (as their bits: only casts convert them).
template <typename F>
void visit_cast_dtype(DType t, F f) {
  if (t == DType::f16) return f(F16{});
  if (t == DType::bf16) return f(BF16{});
  visit_dtype(t, f);
}

// One value converted as Tensor::to(DType) promises: float to integer truncates (saturating, NaN
// to 0), anything to bool is != 0, integers wrap; f16 and bf16 go through f32 and round to
// nearest even.
template <typename D, typename S>
D convert(S v) {
  if constexpr (std::is_same_v<S, F16>) {
    return convert<D>(f16_to_f32(v.bits));
  } else if constexpr (std::is_same_v<S, BF16>) {
    return convert<D>(bf16_to_f32(v.bits));
  } else if constexpr (std::is_same_v<D, F16>) {
    return F16{f32_to_f16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, BF16>) {
    return BF16{f32_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S{};
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    if (std::isnan(v)) return D{};
    constexpr double lo = static_cast<double>(std::numeric_limits<D>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<D>::max());
    const double t = std::trunc(static_cast<double>(v));
    if (t <= lo) return std::numeric_limits<D>::min();
    if (t >= hi) return std::numeric_limits<D>::max();
    return static_cast<D>(t);
  } else {
    return static_cast<D>(v);
  }
}

// Host storage type of T (bool lives in one byte).
template <typename T>
using Stored = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

// Calls f(row, src_offset, dst_offset, inner, src_step, dst_step) for each row (all dimensions
// but the last) of the views |src| and |dst| of one shape, on the pool.
template <typename F>
void for_rows(Context& ctx, const Tensor& src, const Tensor& dst, F f) {
  const Shape& shape = dst.shape();
  const int rank = shape.rank();
  const std::int64_t n = dst.numel();
  const std::int64_t inner = rank ? shape[rank - 1] : 1;
  if (n == 0) return;
  const std::int64_t ss = rank ? src.strides()[rank - 1] : 0;
  const std::int64_t ds = rank ? dst.strides()[rank - 1] : 0;
  ctx.pool.parallel_for(n / inner, row_grain(inner), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      f(row_offset(shape, src.strides(), r), row_offset(shape, dst.strides(), r), inner, ss, ds);
  });
}

void cast_kernel(const OpCall& call, Context& ctx) {
  const Tensor &x = call.in(0), &y = call.out(0);
  visit_cast_dtype(x.dtype(), [&]<typename S>(S) {
    visit_cast_dtype(y.dtype(), [&]<typename D>(D) {
      const auto* src = x.host_data<Stored<S>>();
      auto* dst = y.host_data<Stored<D>>();
      for_rows(ctx, x, y,
               [&](std::int64_t so, std::int64_t dof, std::int64_t inner, std::int64_t ss,
                   std::int64_t ds) {
                 for (std::int64_t i = 0; i < inner; ++i) {
                   const S v = static_cast<S>(src[so + i * ss]);
                   dst[dof + i * ds] = static_cast<Stored<D>>(convert<D>(v));
                 }
               });
    });
  });
}

template <typename T>
void copy_into_typed(const OpCall& call, Context& ctx) {
  const Tensor &x = call.in(0), &y = call.out(0);
  const T* src = x.host_data<T>();
  T* dst = y.host_data<T>();
  for_rows(
      ctx, x, y,
      [&](std::int64_t so, std::int64_t dof, std::int64_t inner, std::int64_t ss, std::int64_t ds) {
        for (std::int64_t i = 0; i < inner; ++i) dst[dof + i * ds] = src[so + i * ss];
      });
}

void copy_into_kernel(const OpCall& call, Context& ctx) {
  switch (dtype_size(call.out(0).dtype())) {
    case 1:
      return copy_into_typed<std::uint8_t>(call, ctx);
    case 2:
      return copy_into_typed<std::uint16_t>(call, ctx);
    case 4:
      return copy_into_typed<std::uint32_t>(call, ctx);
    default:
      return copy_into_typed<std::uint64_t>(call, ctx);
  }
}

void arange_kernel(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<RangeAttrs>();
  const Tensor& y = call.out(0);
  visit_dtype(y.dtype(), [&]<typename T>(T) {
    auto* out = y.host_data<Stored<T>>();
    ctx.pool.parallel_for(y.numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        if constexpr (std::is_integral_v<T>)  // whole start and step (the shape rule)
          out[i] = static_cast<Stored<T>>(static_cast<std::int64_t>(a.start) +
                                          i * static_cast<std::int64_t>(a.step));
        else
          out[i] = static_cast<T>(a.start + static_cast<double>(i) * a.step);
      }
    });
  });
}

template <typename F>
void generate(const OpCall& call, Context& ctx, F f) {
  const Tensor& y = call.out(0);
  const std::uint64_t seed = call.attr<RandomAttrs>().seed;
  const std::uint32_t k0 = random_key(seed, 0), k1 = random_key(seed, 1);
  visit_dtype(y.dtype(), [&]<typename T>(T) {
    auto* out = y.host_data<Stored<T>>();
    ctx.pool.parallel_for(y.numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const auto idx = static_cast<std::uint32_t>(i);
        out[i] = static_cast<Stored<T>>(f(random_bits(k0, idx), random_bits(k1, idx)));
      }
    });
  });
}

void rand_kernel(const OpCall& call, Context& ctx) {
  generate(call, ctx, [](std::uint32_t a, std::uint32_t) { return random_uniform(a); });
}

void randn_kernel(const OpCall& call, Context& ctx) {
  generate(call, ctx, [](std::uint32_t a, std::uint32_t b) { return random_normal(a, b); });
}

void randint_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<RandomAttrs>();
  const auto range = static_cast<std::uint32_t>(static_cast<std::uint64_t>(at.high) -
                                                static_cast<std::uint64_t>(at.low));
  const std::int64_t low = at.low;
  generate(call, ctx, [=](std::uint32_t a, std::uint32_t) {
    return low + static_cast<std::int64_t>(random_below(a, range));
  });
}

// The index values as int64 (i32 or i64 input).
std::vector<std::int64_t> indices(const Tensor& index) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(index.numel()));
  if (v.empty()) return v;  // an empty index may have no storage behind it (memcpy of null)
  if (index.dtype() == DType::i64) {
    std::memcpy(v.data(), index.host_data<std::int64_t>(), v.size() * sizeof(std::int64_t));
  } else {
    const auto* p = index.host_data<std::int32_t>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  }
  return v;
}

// outer x size x inner: the layout of a contiguous tensor around |axis|.
struct AxisLayout {
  std::int64_t outer = 1, inner = 1;
};
AxisLayout layout(const Shape& s, int axis) {
  AxisLayout l;
  for (int d = 0; d < axis; ++d) l.outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) l.inner *= s[d];
  return l;
}

void index_select_kernel(const OpCall& call, Context& ctx) {
  const Tensor &x = call.in(0), &y = call.out(0);
  const int axis = call.attr<AxisAttrs>().axis;
  const std::vector<std::int64_t> idx = indices(call.in(1));
  const AxisLayout l = layout(x.shape(), axis);
  const std::int64_t n = x.dim(axis), k = static_cast<std::int64_t>(idx.size());
  const std::size_t es = dtype_size(x.dtype());
  const auto* src = x.host_data<unsigned char>();
  auto* dst = y.host_data<unsigned char>();
  const auto row = static_cast<std::size_t>(l.inner) * es;
  ctx.pool.parallel_for(l.outer * k, row_grain(l.inner), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t o = r / k, j = idx[static_cast<std::size_t>(r % k)];
      unsigned char* out = dst + static_cast<std::size_t>(r) * row;
      if (j < 0 || j >= n)
        std::memset(out, 0, row);
      else
        std::memcpy(out, src + static_cast<std::size_t>(o * n + j) * row, row);
    }
  });
}

void index_select_backward_kernel(const OpCall& call, Context& ctx) {
  const Tensor &g = call.in(0), &y = call.out(0);
  const int axis = call.attr<AxisAttrs>().axis;
  const std::vector<std::int64_t> idx = indices(call.in(1));
  const AxisLayout l = layout(y.shape(), axis);
  const std::int64_t n = y.dim(axis), k = static_cast<std::int64_t>(idx.size());
  // For each output slice j, the k with index[k] == j in increasing order (a counting sort):
  // every slice sums its matches in index order, whatever the thread count.
  std::vector<std::int64_t> start(static_cast<std::size_t>(n + 1), 0), order;
  for (std::int64_t j : idx)
    if (j >= 0 && j < n) ++start[static_cast<std::size_t>(j + 1)];
  for (std::int64_t j = 0; j < n; ++j)
    start[static_cast<std::size_t>(j + 1)] += start[static_cast<std::size_t>(j)];
  order.resize(static_cast<std::size_t>(start.back()));
  {
    std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t j = idx[static_cast<std::size_t>(i)];
      if (j >= 0 && j < n) order[static_cast<std::size_t>(fill[static_cast<std::size_t>(j)]++)] = i;
    }
  }
  const float* src = g.host_data<float>();
  float* dst = y.host_data<float>();
  ctx.pool.parallel_for(l.outer * n, row_grain(l.inner), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t o = r / n, j = r % n;
      float* out = dst + r * l.inner;
      std::fill_n(out, l.inner, 0.0f);
      for (std::int64_t p = start[static_cast<std::size_t>(j)];
           p < start[static_cast<std::size_t>(j + 1)]; ++p) {
        const float* in = src + (o * k + order[static_cast<std::size_t>(p)]) * l.inner;
        for (std::int64_t i = 0; i < l.inner; ++i) out[i] += in[i];
      }
    }
  });
}

Support yes(const OpCall&) {
  return Support::yes();
}

}  // namespace

void register_tensor(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn, SupportFn s = yes) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, s);
  };
  // The shape rules admit only the dtypes these kernels handle.
  set(OpId::cast, cast_kernel);
  set(OpId::copy_into, copy_into_kernel);
  set(OpId::arange, arange_kernel);
  set(OpId::rand, rand_kernel);
  set(OpId::randn, randn_kernel);
  set(OpId::randint, randint_kernel);
  set(OpId::index_select, index_select_kernel);
  set(OpId::index_select_backward, index_select_backward_kernel);
}

}  // namespace tessera::cpu
