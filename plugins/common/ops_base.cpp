// Launch geometry of the first ops, moved into the portable layer from both GPU plugins.
#include <algorithm>

#include "geometry.h"
#include "ops.h"

namespace tessera::common {
namespace {

// kOp: the V0 of kernels/unary.tk.
template <int kOp>
void unary(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  const bool backward = kOp == 7;  // relu_backward: (grad, x)
  const Tensor& x = backward ? call.in(1) : call.in(0);
  const bool pairs = word_pairs(y.dtype(), y.numel(),
                                {x.offset(), y.offset(), backward ? call.in(0).offset() : 0});
  Launch(l, "unary", {kOp, float_code(y.dtype()), pairs ? 1 : 0})
      .in(x)
      .out(y)
      .in(backward ? call.in(0) : x)
      .i(y.numel())
      .f(scalar_of(call))
      .run(pairs ? y.numel() / 2 : y.numel());
}

// kOp: the V0 of kernels/binary.tk.
template <int kOp>
void binary(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  const Strided g = strided(y.shape(), call.inputs.data(), 2);
  const bool flat = is_flat(g, 2);
  const bool vec4 = flat && y.dtype() == DType::f32 &&
                    multiples_of_4({g.n, call.in(0).offset(), call.in(1).offset(), y.offset()});
  const bool pairs =
      flat && word_pairs(y.dtype(), g.n, {call.in(0).offset(), call.in(1).offset(), y.offset()});
  Launch(l, "binary",
         {kOp,
          vec4    ? 2
          : pairs ? 3
          : flat  ? 1
                  : 0,
          float_code(y.dtype())})
      .in(call.in(0))
      .in(call.in(1))
      .out(y)
      .i(g.n)
      .i(g.rank)
      .words(g.shape)
      .words(g.stride[0])
      .words(g.stride[1])
      .run(vec4    ? g.n / 4
           : pairs ? g.n / 2
           : flat  ? (std::int64_t{g.n} + 3) / 4
                   : g.n);
}

// copy.tk's and transpose.tk's bindings and first words: x and y; n, rank, shape and x's strides.
Launch& copy_words(Launch& launch, const Tensor& x, const Tensor& y, const Strided& g) {
  return launch.in(x).out(y).i(g.n).i(g.rank).words(g.shape).words(g.stride[0]);
}

// A strided f32 copy whose last extent and destination offset are multiples of 4 moves 4
// elements per invocation (a GPT's head permutes: a quarter of the index arithmetic and of the
// stores); with a unit last stride and 4-aligned source, one 4-float load too. One that
// transposes the last two dimensions goes through tiles (transpose_copy).
void copy(const OpCall& call, Launcher& l) {
  const Tensor &x = call.in(0), &y = call.out(0);
  if (dtype_size(x.dtype()) == 2) return copy_views(l, x, y);  // f16, bf16
  const Strided g = strided(x.shape(), &x, 1);
  if (transpose_tiles(l, x, y, g)) return;
  const bool four =
      x.dtype() == DType::f32 && g.rank > 0 && g.shape[g.rank - 1] % 4 == 0 && y.offset() % 4 == 0;
  bool vec = four && g.stride[0][g.rank - 1] == 1 && x.offset() % 4 == 0;
  for (int d = 0; d + 1 < g.rank; ++d) vec = vec && g.stride[0][d] % 4 == 0;
  Launch launch(l, "copy", {four ? 3 : 0, vec ? 1 : 0});
  copy_words(launch, x, y, g).run(four ? g.n / 4 : g.n);
}

void fill(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  // f16, bf16: the value as one f32, then cast to every element (rounded as a cast rounds it).
  const bool half = dtype_size(y.dtype()) == 2;
  const Tensor target = half ? Tensor::empty({1}, DType::f32, &l.device()) : y;
  Launch(l, "copy", {1})
      .out(target)
      .out(target)
      .i(target.numel())
      .i(fill_bits(call))
      .run(target.numel());
  if (half) {
    Shape ones;
    for (int d = 0; d < y.rank(); ++d) ones.push_back(1);
    cast_into(l, target.reshape(ones).expand(y.shape()), y);
  }
}

void dropout_mask(const OpCall& call, Launcher& l) {
  const auto& a = call.attr<DropoutAttrs>();
  const Tensor& y = call.out(0);
  Launch(l, "copy", {2})
      .out(y)
      .out(y)
      .i(y.numel())
      .i(dropout_key(a.seed))
      .f(a.p)
      .f(1.0f / (1.0f - a.p))
      .run(y.numel());
}

// The largest power of two <= 256 that the device runs as one work-group.
std::int32_t reduce_group(const Launcher& l) {
  std::int32_t g = 256;
  while (g > l.traits().max_group_size) g /= 2;
  return g;
}

}  // namespace

bool transpose_fits(const Launcher& l, std::int64_t rows, std::int64_t cols) {
  // Below half a tile either way most of a tile's invocations would idle: copy.tk.
  return l.traits().max_group_size >= 256 && rows >= 32 && cols >= 32;
}

bool transpose_copy(Launcher& l, const Tensor& x, const Tensor& y) {
  return transpose_tiles(l, x, y, strided(x.shape(), &x, 1));
}

bool transpose_tiles(Launcher& l, const Tensor& x, const Tensor& y, const Strided& g) {
  if (x.dtype() != DType::f32 || !walks_transposed(g.rank, g.stride[0])) return false;
  const std::int64_t rows = g.shape[g.rank - 2], cols = g.shape[g.rank - 1];
  if (!transpose_fits(l, rows, cols)) return false;
  const std::int64_t down = (rows + 63) / 64, across = (cols + 63) / 64;
  Launch launch(l, "transpose");
  copy_words(launch, x, y, g)
      .i(down)
      .i(across)
      .shared(64 * 65)
      .group(256)
      .groups(g.n / (rows * cols) * down * across);
  return true;
}

void sum_lines(Launcher& l, const Tensor& x, const Tensor& y, std::int64_t outer, std::int64_t n,
               std::int64_t inner, float scale) {
  // Lines enough to fill the device (2048 invocations per compute unit) run one invocation each;
  // fewer, long ones are split in parts of at least 64 (a column sum of [16384, 1536] in 176
  // parts on an H100), and the parts summed the same way (the 256 parts of a [16384, 384] column
  // sum in 4 of 64, then those 4): no invocation walks hundreds of partial sums in a row.
  const std::int64_t units = l.traits().compute_units > 0 ? l.traits().compute_units : 4;
  const std::int64_t lines = outer * inner;
  const std::int64_t parts = lines > 0 ? std::clamp<std::int64_t>(units * 2048 / lines, 1,
                                                                  std::max<std::int64_t>(1, n / 64))
                                       : 1;
  auto launch = [&](const Tensor& from, const Tensor& to, std::int64_t length, std::int64_t count,
                    std::int64_t chunk, float s) {
    Launch(l, "reduce", {0, float_code(from.dtype()), float_code(to.dtype())})
        .in(from)
        .out(to)
        .in(from)
        .i(outer)
        .i(length)
        .i(inner)
        .f(s)
        .i(count)
        .i(chunk)
        .run(outer * count * inner);
  };
  if (parts <= 1) {
    launch(x, y, n, 1, n, scale);
    return;
  }
  const std::int64_t chunk = (n + parts - 1) / parts;
  const std::int64_t used = (n + chunk - 1) / chunk;
  const Tensor partial = Tensor::empty({outer, used, inner}, DType::f32, &l.device());
  launch(x, partial, n, used, chunk, 1.0f);
  sum_lines(l, partial, y, outer, used, inner, scale);
}

namespace {

// kOp: the V0 of kernels/reduce.tk.
template <int kOp>
void lines(const OpCall& call, Launcher& l) {
  const bool backward = kOp == 5;  // max_backward: (grad, x)
  const Tensor& x = backward ? call.in(1) : call.in(0);
  const Tensor& y = call.out(0);
  const AxisSplit sp = split_axis(x.shape(), call.attr<AxisAttrs>().axis);
  const float scale = call.op == OpId::mean ? 1.0f / static_cast<float>(sp.n) : 1.0f;
  if (kOp == 0 && group_per_row(sp)) {
    const std::int32_t g = reduce_group(l);
    Launch(l, "sum_rows", {float_code(x.dtype()), float_code(y.dtype())})
        .in(x)
        .out(y)
        .i(sp.n)
        .f(scale)
        .shared(g)
        .group(g)
        .groups(sp.outer);
    return;
  }
  if (kOp == 0) {
    sum_lines(l, x, y, sp.outer, sp.n, sp.inner, scale);
    return;
  }
  Launch(l, "reduce", {kOp, float_code(x.dtype()), float_code(y.dtype())})
      .in(x)
      .out(y)
      .in(backward ? call.in(0) : x)
      .i(sp.outer)
      .i(sp.n)
      .i(sp.inner)
      .f(scale)
      .run(std::int64_t{sp.outer} * sp.inner);
}

void max_pool2d(const OpCall& call, Launcher& l) {
  Launch(l, "max_pool", {0})
      .in(call.in(0))
      .out(call.out(0))
      .out(call.out(1))
      .words(pool(call))
      .run(call.out(0).numel());
}

void max_pool2d_backward(const OpCall& call, Launcher& l) {
  Launch(l, "max_pool", {1})
      .in(call.in(0))
      .in(call.in(1))
      .out(call.out(0))
      .words(pool(call))
      .run(call.out(0).numel());
}

void sgd_update(const OpCall& call, Launcher& l) {
  const auto& a = call.attr<SgdAttrs>();
  const Tensor& p = call.out(0);
  Launch(l, "optim", {0})
      .in(call.in(0))
      .out(p)
      .out(call.out(1))
      .i(p.numel())
      .f(a.lr)
      .f(a.momentum)
      .f(a.dampening)
      .f(a.weight_decay)
      .i(sgd_mode(a))
      .run(p.numel());
}

void adam_update(const OpCall& call, Launcher& l) {
  const auto& a = call.attr<AdamAttrs>();
  const AdamStep s = adam_step(a);
  const Tensor& p = call.out(0);
  Launch(l, "optim", {1})
      .in(call.in(0))
      .out(p)
      .out(call.out(1))
      .out(call.out(2))
      .i(p.numel())
      .f(s.lr_corrected)
      .f(a.beta1)
      .f(a.beta2)
      .f(a.eps)
      .f(a.weight_decay)
      .f(s.inv_bc2_sqrt)
      .run(p.numel());
}

}  // namespace

void add_base_ops(PortableOps& ops) {
  ops.add(OpId::add, binary<0>, gpu_one_float_supports);
  ops.add(OpId::sub, binary<1>, gpu_one_float_supports);
  ops.add(OpId::mul, binary<2>, gpu_one_float_supports);
  ops.add(OpId::div, binary<3>, gpu_one_float_supports);
  ops.add(OpId::copy, copy, copy_fill_supports);
  ops.add(OpId::fill, fill, copy_fill_supports);
  ops.add(OpId::dropout_mask, dropout_mask);
  ops.add(OpId::sum, lines<0>, gpu_one_float_supports);
  ops.add(OpId::mean, lines<0>, gpu_one_float_supports);
  ops.add(OpId::max, lines<1>, gpu_one_float_supports);
  ops.add(OpId::argmax, lines<2>);
  ops.add(OpId::softmax, lines<3>, gpu_one_float_supports);
  ops.add(OpId::log_softmax, lines<4>, gpu_one_float_supports);
  ops.add(OpId::max_backward, lines<5>, gpu_one_float_supports);
  ops.add(OpId::max_pool2d, max_pool2d);
  ops.add(OpId::max_pool2d_backward, max_pool2d_backward);
  ops.add(OpId::sgd_update, sgd_update);
  ops.add(OpId::adam_update, adam_update);
  ops.add(OpId::add_scalar, unary<0>, gpu_one_float_supports);
  ops.add(OpId::mul_scalar, unary<1>, gpu_one_float_supports);
  ops.add(OpId::relu, unary<2>, gpu_one_float_supports);
  ops.add(OpId::exp, unary<3>, gpu_one_float_supports);
  ops.add(OpId::log, unary<4>, gpu_one_float_supports);
  ops.add(OpId::tanh, unary<5>, gpu_one_float_supports);
  ops.add(OpId::sigmoid, unary<6>, gpu_one_float_supports);
  ops.add(OpId::relu_backward, unary<7>, gpu_one_float_supports);
}

}  // namespace tessera::common
