// Launch geometry of the tensor API's ops on the GPUs: cast, copy_into, arange, rand, randn,
// randint, index_select and its backward (kernels/tensor_*.tk). Elements of 8 bytes are moved as
// pairs of 4-byte words (Tensor::view(DType)); arithmetic on i64 values uses their low 32 bits
// (the dialect's LDL/STL), so supports() admits i64 only where values stay within 32 bits.
#include <limits>

#include "geometry.h"
#include "ops.h"

namespace tessera::common {
namespace {

constexpr std::int64_t kMax32 = std::numeric_limits<std::int32_t>::max();

// The kind of a dtype in the kernels: 0 f32, 1 i32, 2 i64, 3 bool, 4 f16, 5 bf16; -1 when not
// handled.
int kind(DType t) {
  switch (t) {
    case DType::f32:
      return 0;
    case DType::i32:
      return 1;
    case DType::i64:
      return 2;
    case DType::boolean:
      return 3;
    case DType::f16:
      return 4;
    case DType::bf16:
      return 5;
    default:
      return -1;
  }
}

// The furthest element a view reaches, within 32-bit indices.
bool fits32(const Tensor& t) {
  std::int64_t reach = t.offset() + 1;
  for (int d = 0; d < t.rank(); ++d) reach += (t.shape()[d] - 1) * t.strides()[d];
  return t.numel() <= kMax32 && reach <= kMax32 / 2;  // 8-byte elements double their indices
}

Support sizes(const OpCall& call) {
  for (int i = 0; i < call.num_inputs; ++i)
    if (!fits32(call.in(i)))
      return Support::no("a tensor of more than 2^30 elements (32-bit indices in the kernels)");
  for (int i = 0; i < call.num_outputs; ++i)
    if (!fits32(call.out(i)))
      return Support::no("a tensor of more than 2^30 elements (32-bit indices in the kernels)");
  return Support::yes();
}

Support no_dtype(const OpCall& call, DType t) {
  return Support::no(
      fmt::format("{} of {} is not implemented on GPUs (f32, f16, bf16, i32, i64, bool)",
                  op_name(call.op), dtype_name(t)));
}

bool fits_int(double v) {
  return v >= std::numeric_limits<std::int32_t>::min() && v <= kMax32;
}

// A strided geometry of up to |max_rank| dimensions: merged extents and the strides of |views|.
struct Geometry {
  std::int64_t n = 0;
  Shape shape;
  Strides stride[2];
};

Geometry geometry(const Shape& shape, const Tensor* views, int count) {
  Geometry g;
  g.n = shape.numel();
  const MergedDims m = merge_dims(shape, views, count);
  g.shape = m.shape;
  g.stride[0] = m.stride[0];
  g.stride[1] = m.stride[1];
  return g;
}

// ----- copy_into -----

// Every dtype: elements of 1, 2, 4 or 8 bytes.
Support copy_into_supports(const OpCall& call) {
  return sizes(call);
}

// A 4-byte view that starts where |t| starts: an 8-byte tensor bound as words.
Tensor words_at(Tensor t) {
  while (t.rank() >= kMaxDims) t = t.select(0, 0);
  return t.unsqueeze(-1).view(DType::i32);
}

}  // namespace

void copy_views(Launcher& l, const Tensor& src, const Tensor& dst) {
  Tensor views[2] = {src, dst};
  Geometry g = geometry(views[1].shape(), views, 2);
  if (g.n == 0) return;
  const std::size_t size = dtype_size(views[1].dtype());
  if (size == 8) {
    // Each element as two 4-byte words: one more (innermost) dimension of 2.
    for (int k = 0; k < 2; ++k) views[k] = words_at(views[k]);  // offsets in words
    g.n *= 2;
    for (int k = 0; k < 2; ++k) {
      for (int d = 0; d < g.shape.rank(); ++d) g.stride[k][d] *= 2;
      g.stride[k].push_back(1);
    }
    g.shape.push_back(2);
  }
  Launch launch(l, "tensor_copy", {size == 1 ? 1 : size == 2 ? 2 : 0});
  launch.in(views[0]).out(views[1]).i(g.n).i(g.shape.rank());
  for (int k = 0; k < 3; ++k)
    for (int d = 0; d < 7; ++d) {
      const Dims& v = k == 0 ? g.shape : g.stride[k - 1];
      launch.i(d < v.rank() ? v[d] : 0);
    }
  launch.run(g.n);
}

namespace {

void copy_into(const OpCall& call, Launcher& l) {
  copy_views(l, call.in(0), call.out(0));
}

// ----- cast -----

Support cast_supports(const OpCall& call) {
  if (kind(call.in(0).dtype()) < 0) return no_dtype(call, call.in(0).dtype());
  if (kind(call.out(0).dtype()) < 0) return no_dtype(call, call.out(0).dtype());
  return sizes(call);
}

}  // namespace

void cast_into(Launcher& l, const Tensor& x, const Tensor& y) {
  const Geometry g = geometry(x.shape(), &x, 1);
  // f32 to or from f16 or bf16 (autocast's casts), x contiguous and 4-aligned: 4 an invocation.
  const int from = kind(x.dtype()), to = kind(y.dtype());
  const bool four = ((from == 0 && to >= 4) || (from >= 4 && to == 0)) &&
                    (g.shape.rank() == 0 || (g.shape.rank() == 1 && g.stride[0][0] == 1)) &&
                    multiples_of_4({g.n, x.offset(), y.offset()});
  // f32 to 16 bits from a view whose last dimension is contiguous (a permuted projection's
  // heads, under autocast): 4 an invocation too, the other strides multiples of 4.
  const int last = g.shape.rank() - 1;
  bool rows4 = !four && from == 0 && to >= 4 && last >= 0 && g.stride[0][last] == 1 &&
               multiples_of_4({g.shape[last], x.offset(), y.offset()});
  for (int d = 0; rows4 && d < last; ++d) rows4 = g.stride[0][d] % 4 == 0;
  Launch launch(l, "tensor_cast", {from, to, four ? 1 : rows4 ? 2 : 0});
  launch.in(x).out(y).i(g.n).i(g.shape.rank());
  for (int k = 0; k < 2; ++k)
    for (int d = 0; d < kMaxDims; ++d) {
      const Dims& v = k == 0 ? g.shape : g.stride[0];
      launch.i(d < v.rank() ? v[d] : 0);
    }
  launch.run(four || rows4 ? g.n / 4 : g.n);
}

namespace {

void cast(const OpCall& call, Launcher& l) {
  cast_into(l, call.in(0), call.out(0));
}

// ----- arange -----

Support arange_supports(const OpCall& call) {
  const Tensor& y = call.out(0);
  const int k = kind(y.dtype());
  if (k < 0 || k == 3) return no_dtype(call, y.dtype());
  const auto& a = call.attr<RangeAttrs>();
  if (k > 0 && !(fits_int(a.start) && fits_int(a.step) &&
                 fits_int(a.start + a.step * static_cast<double>(y.numel()))))
    return Support::no("integer values beyond 32 bits");
  return sizes(call);
}

void arange(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  const auto& a = call.attr<RangeAttrs>();
  const int k = kind(y.dtype());
  Launch launch(l, "tensor_arange", {k});
  launch.out(y).i(y.numel());
  if (k == 0)
    launch.f(static_cast<float>(a.start)).f(static_cast<float>(a.step));
  else
    launch.i(static_cast<std::int64_t>(a.start)).i(static_cast<std::int64_t>(a.step));
  launch.run(y.numel());
}

// ----- rand, randn, randint -----

Support random_supports(const OpCall& call) {
  const Tensor& y = call.out(0);
  const int k = kind(y.dtype());
  if (k < 0 || k == 3) return no_dtype(call, y.dtype());
  if (call.op == OpId::randint) {
    const auto& a = call.attr<RandomAttrs>();
    if (!fits_int(static_cast<double>(a.low)) || !fits_int(static_cast<double>(a.high - 1)))
      return Support::no("randint bounds beyond 32 bits");
  }
  return sizes(call);
}

template <int kOp>
void random(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  const auto& a = call.attr<RandomAttrs>();
  const std::uint32_t range = static_cast<std::uint32_t>(static_cast<std::uint64_t>(a.high) -
                                                         static_cast<std::uint64_t>(a.low));
  Launch(l, "tensor_random", {kOp, kind(y.dtype())})
      .out(y)
      .i(y.numel())
      .i(random_key(a.seed, 0))
      .i(random_key(a.seed, 1))
      .i(kOp == 2 ? a.low : 0)
      .i(kOp == 2 ? range : 0)
      .run(y.numel());
}

// ----- index_select and its backward -----

struct AxisSplit {
  std::int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int axis) {
  AxisSplit a;
  for (int d = 0; d < axis; ++d) a.outer *= s[d];
  a.size = s[axis];
  for (int d = axis + 1; d < s.rank(); ++d) a.inner *= s[d];
  return a;
}

Support index_supports(const OpCall& call) {
  const DType t = call.in(0).dtype();
  if (call.op == OpId::index_select && dtype_size(t) != 1 && dtype_size(t) != 4 &&
      dtype_size(t) != 8)
    return no_dtype(call, t);
  return sizes(call);
}

void index_select(const OpCall& call, Launcher& l) {
  Tensor x = call.in(0), y = call.out(0);
  const AxisSplit a = split_at(x.shape(), call.attr<AxisAttrs>().axis);
  const std::size_t size = dtype_size(x.dtype());
  std::int64_t inner = a.inner;
  if (size == 8) {  // as pairs of 4-byte words (both contiguous)
    x = x.reshape({a.outer, a.size, inner, 1}).view(DType::i32);
    y = y.reshape({a.outer, call.in(1).numel(), inner, 1}).view(DType::i32);
    inner *= 2;
  }
  const std::int64_t k = call.in(1).numel();
  const std::int64_t n = a.outer * k * inner;
  Launch(l, "tensor_index_select", {size == 1 ? 1 : 0, call.in(1).dtype() == DType::i64 ? 1 : 0})
      .in(x)
      .in(call.in(1))
      .out(y)
      .i(n)
      .i(k)
      .i(inner)
      .i(a.size)
      .run(n);
}

void index_select_backward(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  const AxisSplit a = split_at(y.shape(), call.attr<AxisAttrs>().axis);
  const std::int64_t n = y.numel();
  Launch(l, "tensor_index_backward", {0, call.in(1).dtype() == DType::i64 ? 1 : 0})
      .in(call.in(0))
      .in(call.in(1))
      .out(y)
      .i(n)
      .i(call.in(1).numel())
      .i(a.inner)
      .i(a.size)
      .run(n);
}

}  // namespace

void add_tensor_ops(PortableOps& ops) {
  ops.add(OpId::cast, cast, cast_supports);
  ops.add(OpId::copy_into, copy_into, copy_into_supports);
  ops.add(OpId::arange, arange, arange_supports);
  ops.add(OpId::rand, random<0>, random_supports);
  ops.add(OpId::randn, random<1>, random_supports);
  ops.add(OpId::randint, random<2>, random_supports);
  ops.add(OpId::index_select, index_select, index_supports);
  ops.add(OpId::index_select_backward, index_select_backward, index_supports);
}

}  // namespace tessera::common
