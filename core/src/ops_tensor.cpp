// The tensor API's front-end: casts, copy_ into views, cat/stack, index_select, factories.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"

namespace tessera {
namespace {

// Runs |op| with |inputs| into the given |out| (allocated by the caller).
void run_into(OpId op, std::initializer_list<Tensor> inputs, const Tensor& out,
              OpAttrs attrs = NoAttrs{}) {
  OpCall call = make_call(op, inputs, std::move(attrs));
  for (int i = 0; i < call.num_inputs; ++i)
    if (!call.in(i).defined())
      throw InvalidArgument(fmt::format("{}: input {} is undefined", op_name(op), i));
  call.outputs[0] = out;
  run_op(call);
}

void require_defined(const Tensor& t, const char* call, const char* what) {
  if (!t.defined()) throw InvalidArgument(fmt::format("{}: {} is undefined", call, what));
}

// Element |dim| of rank |rank| (or rank + 1 for a new dimension) made non-negative.
int wrap(const char* call, int dim, int count, const Shape& shape) {
  if (dim < -count || dim >= count || count == 0)
    throw InvalidArgument(fmt::format("{}: dim {} is out of range for {} (expected {} to {})", call,
                                      dim, shape.str(), -count, count - 1));
  return dim < 0 ? dim + count : dim;
}

Tensor random_op(OpId op, const Shape& shape, DType dtype, RandomAttrs attrs, TensorGenerator* gen,
                 Device* device) {
  Tensor out = Tensor::empty(shape, dtype, device);
  attrs.seed = (gen ? *gen : default_generator()).next_stream();
  OpCall call;
  call.op = op;
  call.num_outputs = 1;
  call.outputs[0] = out;
  call.attrs = attrs;
  run_op(call);
  return out;
}

}  // namespace

Tensor Tensor::to(DType dtype) const {
  require_defined(*this, "to", "the tensor");
  return dtype == dtype_ ? *this : cast(*this, dtype);
}

Tensor cast(const Tensor& x, DType dtype) {
  require_defined(x, "cast", "x");
  Tensor out = Tensor::empty(x.shape(), dtype, &x.device());
  run_into(OpId::cast, {x}, out);
  return out;
}

void copy_(const Tensor& dst, const Tensor& src) {
  require_defined(dst, "copy_", "dst");
  require_defined(src, "copy_", "src");
  if (dst.numel() == 0) {
    (void)broadcast_shapes(src.shape(), dst.shape());
    return;
  }
  Tensor s = src.dtype() == dst.dtype() ? src : cast(src, dst.dtype());
  // A source that shares dst's storage is read whole before dst is written.
  if (s.shares_storage(dst)) s = copy(s);
  run_into(OpId::copy_into, {s}, dst);
}

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  if (tensors.empty()) throw InvalidArgument("cat: expects a non-empty list of tensors");
  std::vector<const Tensor*> parts;
  for (const Tensor& t : tensors) {
    require_defined(t, "cat", "a tensor");
    if (!(t.rank() == 1 && t.numel() == 0)) parts.push_back(&t);
  }
  if (parts.empty()) return copy(tensors.front());
  const Tensor& first = *parts.front();
  const int d = wrap("cat", dim, first.rank(), first.shape());
  Shape shape = first.shape();
  shape[d] = 0;
  for (const Tensor* t : parts) {
    bool ok = t->rank() == first.rank();
    for (int k = 0; ok && k < first.rank(); ++k) ok = k == d || t->dim(k) == first.dim(k);
    if (!ok)
      throw InvalidArgument(
          fmt::format("cat: tensors {} and {} must have the same shape except in dimension {}",
                      first.shape().str(), t->shape().str(), d));
    if (t->dtype() != first.dtype())
      throw InvalidArgument(fmt::format("cat: tensors must have one dtype, got {} and {}",
                                        dtype_name(first.dtype()), dtype_name(t->dtype())));
    if (&t->device() != &first.device())
      throw InvalidArgument(fmt::format("cat: tensors are on different devices ({} and {})",
                                        first.device().id(), t->device().id()));
    shape[d] += t->dim(d);
  }
  Tensor out = Tensor::empty(shape, first.dtype(), &first.device());
  std::int64_t at = 0;
  for (const Tensor* t : parts) {
    copy_(out.narrow(d, at, t->dim(d)), *t);
    at += t->dim(d);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  if (tensors.empty()) throw InvalidArgument("stack: expects a non-empty list of tensors");
  require_defined(tensors.front(), "stack", "a tensor");
  const Shape& shape = tensors.front().shape();
  const int d = wrap("stack", dim, shape.rank() + 1, shape);
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    require_defined(t, "stack", "a tensor");
    if (!(t.shape() == shape))
      throw InvalidArgument(fmt::format("stack: expects tensors of one shape, got {} and {}",
                                        shape.str(), t.shape().str()));
    parts.push_back(t.unsqueeze(d));
  }
  return cat(parts, d);
}

Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
  require_defined(x, "index_select", "x");
  const int d = wrap("index_select", dim, x.rank(), x.shape());
  OpCall call;
  call.op = OpId::index_select;
  call.num_inputs = 2;
  call.num_outputs = 1;
  call.inputs[0] = x;
  call.inputs[1] = index;
  call.attrs = AxisAttrs{d, false};
  run_op(call);
  return call.outputs[0];
}

Tensor index_select_backward(const Tensor& grad, int dim, const Tensor& index, std::int64_t size) {
  require_defined(grad, "index_select_backward", "grad");
  const int d = wrap("index_select_backward", dim, grad.rank(), grad.shape());
  if (size < 0)
    throw InvalidArgument(fmt::format("index_select_backward: size {} is negative", size));
  Shape shape = grad.shape();
  shape[d] = size;
  Tensor out = Tensor::empty(shape, grad.dtype(), &grad.device());
  run_into(OpId::index_select_backward, {grad, index}, out, AxisAttrs{d, false});
  return out;
}

Tensor arange(double start, double end, double step, DType dtype, Device* device) {
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step) || step == 0)
    throw InvalidArgument(fmt::format(
        "arange: start {}, end {} and step {} must be finite and step non-zero", start, end, step));
  const double count = std::ceil((end - start) / step);
  if (!(count < 9.2e18))
    throw InvalidArgument(fmt::format("arange: [{}, {}) with step {} has too many elements ({})",
                                      start, end, step, count));
  const auto n = static_cast<std::int64_t>(std::max(count, 0.0));
  Tensor out = Tensor::empty({n}, dtype, device);
  OpCall call;
  call.op = OpId::arange;
  call.num_outputs = 1;
  call.outputs[0] = out;
  call.attrs = RangeAttrs{start, step};
  run_op(call);
  return out;
}

Tensor arange(double end, DType dtype, Device* device) {
  return arange(0, end, 1, dtype, device);
}

Tensor zeros(const Shape& shape, DType dtype, Device* device) {
  return Tensor::full(shape, 0, dtype, device);
}
Tensor ones(const Shape& shape, DType dtype, Device* device) {
  return Tensor::full(shape, 1, dtype, device);
}
Tensor full(const Shape& shape, double value, DType dtype, Device* device) {
  return Tensor::full(shape, value, dtype, device);
}

Tensor rand(const Shape& shape, TensorGenerator* generator, Device* device) {
  return random_op(OpId::rand, shape, DType::f32, {}, generator, device);
}

Tensor randn(const Shape& shape, TensorGenerator* generator, Device* device) {
  return random_op(OpId::randn, shape, DType::f32, {}, generator, device);
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype,
               TensorGenerator* generator, Device* device) {
  // Checked before a draw is taken, so a bad call leaves the generator where it was.
  if (!(low < high) ||
      static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low) > 0xffffffffu)
    throw InvalidArgument(fmt::format(
        "randint: needs low < high with high - low < 2^32, got low {} and high {}", low, high));
  return random_op(OpId::randint, shape, dtype, RandomAttrs{0, low, high}, generator, device);
}

}  // namespace tessera
