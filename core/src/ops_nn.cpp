// The front-end of the nn group: batched matmul, embedding, average pooling (ops.h).
#include <fmt/format.h>

#include "ops_nn.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

Tensor run_nn(OpId op, std::initializer_list<Tensor> inputs, OpAttrs attrs,
              const Shape* out_shape = nullptr) {
  OpCall call = make_call(op, inputs, std::move(attrs));
  for (int i = 0; i < call.num_inputs; ++i)
    if (!call.in(i).defined())
      throw InvalidArgument(fmt::format("{}: input {} is undefined", op_name(op), i));
  if (out_shape) {
    const Tensor& first = *inputs.begin();
    call.outputs[0] = Tensor::empty(*out_shape, first.dtype(), &first.device());
  }
  run_op(call);
  return call.outputs[0];
}

// A view whose last two dimensions are swapped from a contiguous tensor runs as a transposed
// GEMM, without a copy.
Tensor fold_last_transpose(const Tensor& t, bool& trans) {
  const int r = t.rank();
  if (r >= 2 && !t.is_contiguous() && t.transpose(r - 2, r - 1).is_contiguous()) {
    trans = !trans;
    return t.transpose(r - 2, r - 1);
  }
  return t;
}

}  // namespace

Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
           std::optional<DType> out_dtype) {
  if (!a.defined() || !b.defined()) throw InvalidArgument("bmm: an input is undefined");
  const Tensor fa = fold_last_transpose(a, trans_a), fb = fold_last_transpose(b, trans_b);
  return run_nn(OpId::bmm, {fa, fb}, matmul_attrs(trans_a, trans_b, out_dtype));
}

Tensor matmul_nd(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                 std::optional<DType> out_dtype) {
  const int ra = a.rank(), rb = b.rank();
  if (ra == 0 || rb == 0)
    throw InvalidArgument(
        fmt::format("matmul: both arguments need at least one dimension, got {} and {}",
                    a.shape().str(), b.shape().str()));
  // torch.matmul: a vector a is a row [1,K] and b a column [K,1], the added dimension removed
  // from the result.
  if (ra == 1 || rb == 1) {
    const Tensor a2 = ra == 1 ? a.reshape({1, a.dim(0)}) : a;
    const Tensor b2 = rb == 1 ? b.reshape({b.dim(0), 1}) : b;
    const Tensor y =
        matmul(a2, b2, ra == 1 ? false : trans_a, rb == 1 ? false : trans_b, out_dtype);
    Shape s;
    for (int d = 0; d < y.rank(); ++d)
      if (!(ra == 1 && d == y.rank() - 2) && !(rb == 1 && d == y.rank() - 1)) s.push_back(y.dim(d));
    return y.reshape(s);
  }
  // [..., M, K] @ [K, N] with a contiguous is one 2-D GEMM over every row of a.
  const std::int64_t k = a.dim(ra - 1);
  if (rb == 2 && !trans_a && a.is_contiguous() && k > 0) {
    const Tensor y = matmul(a.reshape({a.numel() / k, k}), b, false, trans_b, out_dtype);
    Shape s = a.shape();
    s[ra - 1] = y.dim(1);
    return y.reshape(s);
  }
  return bmm(a, b, trans_a, trans_b, out_dtype);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return run_nn(OpId::embedding, {weight, indices}, NoAttrs{});
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, std::int64_t num_weights,
                          std::int64_t padding_idx) {
  if (!grad.defined() || grad.rank() == 0)
    throw InvalidArgument("embedding_backward: grad must be defined, of shape [..., D]");
  const Shape s{num_weights, grad.dim(grad.rank() - 1)};
  return run_nn(OpId::embedding_backward, {grad, indices}, EmbeddingAttrs{padding_idx}, &s);
}

Tensor avg_pool2d(const Tensor& x, AvgPool2dAttrs attrs) {
  return run_nn(OpId::avg_pool2d, {x}, attrs);
}

Tensor avg_pool2d_backward(const Tensor& grad, const Shape& input_shape, AvgPool2dAttrs attrs) {
  return run_nn(OpId::avg_pool2d_backward, {grad}, attrs, &input_shape);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::int64_t out_h, std::int64_t out_w) {
  if (!x.defined() || x.rank() != 4)
    throw InvalidArgument(fmt::format("adaptive_avg_pool2d: input must be [N,C,H,W], got {}",
                                      x.defined() ? x.shape().str() : "undefined"));
  if (out_h <= 0 || out_w <= 0)
    throw InvalidArgument(
        fmt::format("adaptive_avg_pool2d: output size must be positive, got {}x{}", out_h, out_w));
  const Shape s{x.dim(0), x.dim(1), out_h, out_w};
  return run_nn(OpId::adaptive_avg_pool2d, {x}, NoAttrs{}, &s);
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Shape& input_shape) {
  return run_nn(OpId::adaptive_avg_pool2d_backward, {grad}, NoAttrs{}, &input_shape);
}

}  // namespace tessera
