#include "tessera/ops.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "ops_nn.h"
#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/runtime.h"

namespace tessera {
namespace {

Device* common_device(const OpCall& call) {
  const std::string_view name = op_name(call.op);
  Device* dev = nullptr;
  auto check = [&](const Tensor& t, const char* kind, int i) {
    if (!t.defined()) throw InvalidArgument(fmt::format("{}: {} {} is undefined", name, kind, i));
    if (dev && &t.device() != dev)
      throw InvalidArgument(fmt::format(
          "{}: tensors are on different devices ({} and {}); move one with .to(device) first", name,
          dev->id(), t.device().id()));
    dev = &t.device();
  };
  for (int i = 0; i < call.num_inputs; ++i) check(call.in(i), "input", i);
  for (int i = 0; i < call.num_outputs; ++i)
    if (call.out(i).defined() || op_def(call.op).inplace) check(call.out(i), "output", i);
  return dev;
}

Tensor run1(OpId op, std::initializer_list<Tensor> inputs, OpAttrs attrs = NoAttrs{}) {
  OpCall call = make_call(op, inputs, attrs);
  run_op(call);
  return call.outputs[0];
}

AxisAttrs axis_attrs(const Tensor& x, int axis, bool keepdim) {
  if (!x.defined()) throw InvalidArgument("reduction of an undefined tensor");
  return AxisAttrs{x.shape().normalize_axis(axis), keepdim};
}

}  // namespace

void run_op(OpCall& call) {
  const OpDef& def = op_def(call.op);
  Device* dev = common_device(call);
  if (!dev) throw InvalidArgument(fmt::format("{}: the call has no tensor", def.name));

  if (!def.strided_inputs)
    for (int i = 0; i < call.num_inputs; ++i)
      if (!call.in(i).is_contiguous()) call.inputs[static_cast<std::size_t>(i)] = copy(call.in(i));

  if (call.num_inputs != def.num_inputs || call.num_outputs != def.num_outputs)
    throw InvalidArgument(fmt::format("{}: expects {} inputs and {} outputs, got {} and {}",
                                      def.name, def.num_inputs, def.num_outputs, call.num_inputs,
                                      call.num_outputs));
  const auto nout = static_cast<std::size_t>(std::clamp(def.num_outputs, 0, kMaxOpOutputs));
  std::array<TensorSpec, kMaxOpOutputs> specs{};
  for (std::size_t i = 0; i < nout; ++i)
    if (call.outputs[i].defined()) specs[i] = {call.outputs[i].shape(), call.outputs[i].dtype()};
  def.infer(call, std::span(specs.data(), nout));

  for (int i = 0; i < call.num_outputs; ++i) {
    const TensorSpec& s = specs[static_cast<std::size_t>(i)];
    Tensor& out = call.outputs[static_cast<std::size_t>(i)];
    if (!out.defined()) {
      out = Tensor::empty(s.shape, s.dtype, dev);
    } else if ((!def.strided_outputs && !out.is_contiguous()) || out.dtype() != s.dtype) {
      throw InvalidArgument(fmt::format("{}: output {} must be a {}{} tensor", def.name, i,
                                        def.strided_outputs ? "" : "contiguous ",
                                        dtype_name(s.dtype)));
    }
  }
  if (def.strided_inputs && def.num_outputs == 1)
    for (int i = 0; i < call.num_inputs; ++i)
      if (!(call.in(i).shape() == call.out(0).shape()))
        call.inputs[static_cast<std::size_t>(i)] = call.in(i).expand(call.out(0).shape());

  dispatcher().run(*dev, call);
}

namespace {

// A transposed view of a contiguous matrix runs as a transposed GEMM, without a copy.
Tensor fold_transpose(const Tensor& t, bool& trans) {
  if (t.defined() && t.rank() == 2 && !t.is_contiguous() && t.t().is_contiguous()) {
    trans = !trans;
    return t.t();
  }
  return t;
}

// set_float32_matmul_precision's setting, read by every matmul, addmm and bmm call.
std::atomic<MatmulPrecision> g_matmul_precision{MatmulPrecision::highest};

}  // namespace

void set_float32_matmul_precision(MatmulPrecision precision) {
  g_matmul_precision.store(precision, std::memory_order_relaxed);
}

void set_float32_matmul_precision(std::string_view precision) {
  for (MatmulPrecision p :
       {MatmulPrecision::highest, MatmulPrecision::high, MatmulPrecision::medium})
    if (precision == matmul_precision_name(p)) return set_float32_matmul_precision(p);
  throw InvalidArgument(fmt::format(
      "set_float32_matmul_precision: '{}' is not a precision; pass \"highest\", \"high\" or "
      "\"medium\"",
      precision));
}

MatmulPrecision float32_matmul_precision() {
  return g_matmul_precision.load(std::memory_order_relaxed);
}

std::string_view matmul_precision_name(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::high:
      return "high";
    case MatmulPrecision::medium:
      return "medium";
    default:
      return "highest";
  }
}

MatmulAttrs matmul_attrs(bool trans_a, bool trans_b, std::optional<DType> out_dtype) {
  return MatmulAttrs{trans_a, trans_b, out_dtype, float32_matmul_precision()};
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
              std::optional<DType> out_dtype) {
  if (a.defined() && b.defined() && (a.rank() != 2 || b.rank() != 2))
    return matmul_nd(a, b, trans_a, trans_b, out_dtype);
  const Tensor fa = fold_transpose(a, trans_a), fb = fold_transpose(b, trans_b);
  return run1(OpId::matmul, {fa, fb}, matmul_attrs(trans_a, trans_b, out_dtype));
}

Tensor addmm(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
             std::optional<DType> out_dtype) {
  const Tensor fa = fold_transpose(a, trans_a), fb = fold_transpose(b, trans_b);
  OpCall call = make_call(OpId::addmm, {fa, fb, bias}, matmul_attrs(trans_a, trans_b, out_dtype));
  Device* dev = common_device(call);
  if (dev && !dev->kernel(OpId::addmm)) {
    // The same contract without the fused kernel: the shape rule first (its messages name
    // addmm), then matmul and add on the device itself.
    std::array<TensorSpec, 1> spec{};
    op_def(OpId::addmm).infer(call, spec);
    return add(matmul(fa, fb, trans_a, trans_b, out_dtype), bias);
  }
  run_op(call);
  return call.outputs[0];
}

Tensor add(const Tensor& a, const Tensor& b) {
  return run1(OpId::add, {a, b});
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return run1(OpId::sub, {a, b});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return run1(OpId::mul, {a, b});
}
Tensor div(const Tensor& a, const Tensor& b) {
  return run1(OpId::div, {a, b});
}
Tensor add_scalar(const Tensor& a, double s) {
  return run1(OpId::add_scalar, {a}, ScalarAttrs{s});
}
Tensor mul_scalar(const Tensor& a, double s) {
  return run1(OpId::mul_scalar, {a}, ScalarAttrs{s});
}
Tensor relu(const Tensor& x) {
  return run1(OpId::relu, {x});
}
Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  return run1(OpId::relu_backward, {grad, x});
}
Tensor exp(const Tensor& x) {
  return run1(OpId::exp, {x});
}
Tensor log(const Tensor& x) {
  return run1(OpId::log, {x});
}
Tensor tanh(const Tensor& x) {
  return run1(OpId::tanh, {x});
}
Tensor sigmoid(const Tensor& x) {
  return run1(OpId::sigmoid, {x});
}
Tensor sum(const Tensor& x, int axis, bool keepdim) {
  return run1(OpId::sum, {x}, axis_attrs(x, axis, keepdim));
}
Tensor mean(const Tensor& x, int axis, bool keepdim) {
  return run1(OpId::mean, {x}, axis_attrs(x, axis, keepdim));
}
Tensor max(const Tensor& x, int axis, bool keepdim) {
  return run1(OpId::max, {x}, axis_attrs(x, axis, keepdim));
}
Tensor argmax(const Tensor& x, int axis, bool keepdim) {
  return run1(OpId::argmax, {x}, axis_attrs(x, axis, keepdim));
}
Tensor softmax(const Tensor& x, int axis) {
  return run1(OpId::softmax, {x}, axis_attrs(x, axis, false));
}
Tensor log_softmax(const Tensor& x, int axis) {
  return run1(OpId::log_softmax, {x}, axis_attrs(x, axis, false));
}
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyAttrs attrs) {
  return run1(OpId::cross_entropy, {logits, labels}, attrs);
}
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& grad,
                              CrossEntropyAttrs attrs) {
  return run1(OpId::cross_entropy_backward, {logits, labels, grad}, attrs);
}
Tensor conv2d(const Tensor& x, const Tensor& w, Conv2dAttrs attrs) {
  return run1(OpId::conv2d, {x, w}, attrs);
}

namespace {
// Calls |op| whose output shape the caller gives.
Tensor run_shaped(OpId op, std::initializer_list<Tensor> inputs, const Shape& out_shape,
                  OpAttrs attrs) {
  OpCall call = make_call(op, inputs, attrs);
  const Tensor& first = *inputs.begin();
  if (!first.defined()) throw InvalidArgument(fmt::format("{}: input 0 is undefined", op_name(op)));
  call.outputs[0] = Tensor::empty(out_shape, first.dtype(), &first.device());
  run_op(call);
  return call.outputs[0];
}
}  // namespace

Tensor conv2d_backward_input(const Tensor& grad, const Tensor& w, const Shape& input_shape,
                             Conv2dAttrs attrs) {
  return run_shaped(OpId::conv2d_backward_input, {grad, w}, input_shape, attrs);
}
Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape,
                              Conv2dAttrs attrs) {
  return run_shaped(OpId::conv2d_backward_weight, {grad, x}, weight_shape, attrs);
}
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, Pool2dAttrs attrs) {
  OpCall call = make_call(OpId::max_pool2d, {x}, attrs);
  run_op(call);
  return {call.outputs[0], call.outputs[1]};
}
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape,
                           Pool2dAttrs attrs) {
  return run_shaped(OpId::max_pool2d_backward, {grad, indices}, input_shape, attrs);
}
Tensor max_backward(const Tensor& grad, const Tensor& x, int axis) {
  return run1(OpId::max_backward, {grad, x}, axis_attrs(x, axis, false));
}
// Whether |dev| refuses |call| but runs copy_into into |dst| from |src|: a dtype that the device's
// copy or fill kernel does not take (the GPUs' take 4-byte elements) then goes through copy_into.
bool through_copy_into(Device& dev, const OpCall& call, const Tensor& src, const Tensor& dst) {
  if (dev.supports(call)) return false;
  OpCall into = make_call(OpId::copy_into, {src});
  into.outputs[0] = dst;
  return static_cast<bool>(dev.supports(into));
}

Tensor copy(const Tensor& x) {
  if (x.defined()) {
    Tensor out = Tensor::empty(x.shape(), x.dtype(), &x.device());
    if (through_copy_into(x.device(), make_call(OpId::copy, {x}), x, out)) {
      copy_(out, x);
      return out;
    }
    OpCall call = make_call(OpId::copy, {x});
    call.outputs[0] = out;
    run_op(call);
    return out;
  }
  return run1(OpId::copy, {x});
}

namespace {
// |value| as one element of |dtype|, in host memory (the types of the dtypes copy_into takes).
Tensor scalar_on(Device& dev, double value, DType dtype) {
  unsigned char bytes[8] = {};
  auto put = [&bytes]<typename T>(T v) { std::memcpy(bytes, &v, sizeof v); };
  switch (dtype) {
    case DType::f64:
      put(value);
      break;
    case DType::i32:
      put(static_cast<std::int32_t>(value));
      break;
    case DType::i64:
      put(static_cast<std::int64_t>(value));
      break;
    case DType::u8:
      put(static_cast<std::uint8_t>(value));
      break;
    case DType::boolean:
      put(static_cast<std::uint8_t>(value != 0));
      break;
    default:
      put(static_cast<float>(value));
      break;
  }
  return Tensor::from_bytes(bytes, dtype_size(dtype), {}, dtype, &dev);
}
}  // namespace

void fill_(Tensor& t, double value) {
  OpCall call = make_call(OpId::fill, {}, ScalarAttrs{value});
  call.outputs[0] = t;
  if (t.defined() && !is_16bit_float(t.dtype()) && !t.device().supports(call)) {
    const Tensor one = scalar_on(t.device(), value, t.dtype());
    if (through_copy_into(t.device(), call, one.expand(t.shape()), t)) {
      copy_(t, one);
      return;
    }
  }
  run_op(call);
}

void dropout_mask_(Tensor& mask, const DropoutAttrs& attrs) {
  OpCall call = make_call(OpId::dropout_mask, {}, attrs);
  call.outputs[0] = mask;
  run_op(call);
}

Tensor dropout(const Tensor& x, const DropoutAttrs& attrs) {
  return run1(OpId::dropout, {x}, attrs);
}

void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdAttrs& attrs) {
  OpCall call = make_call(OpId::sgd_update, {grad}, attrs);
  call.outputs[0] = param;
  call.outputs[1] = momentum;
  run_op(call);
}

void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamAttrs& attrs) {
  OpCall call = make_call(OpId::adam_update, {grad}, attrs);
  call.outputs[0] = param;
  call.outputs[1] = m;
  call.outputs[2] = v;
  run_op(call);
}

}  // namespace tessera
