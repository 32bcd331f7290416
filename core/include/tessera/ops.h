// The op front-end: one function per op. Each checks its arguments with the op's shape rule,
// allocates the outputs on the device of the inputs and dispatches (dispatch.h). Inputs must share
// one device; results stay on it, even when the op ran on a fallback device.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "tessera/op.h"
#include "tessera/tensor.h"

namespace tessera {

// Runs a prepared call: fills in the outputs the shape rule gives (outputs already present are
// checked and used), then dispatches. The building block of every function below.
void run_op(OpCall& call);

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// op(a) @ op(b) + bias, bias [N] added to every row (a Linear layer's forward). One kernel where
// the device has one; a device without it runs matmul then add, on that device (no fallback).
Tensor addmm(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a = false,
             bool trans_b = false);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);
Tensor relu(const Tensor& x);
Tensor relu_backward(const Tensor& grad, const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sum(const Tensor& x, int axis, bool keepdim = false);
Tensor mean(const Tensor& x, int axis, bool keepdim = false);
Tensor max(const Tensor& x, int axis, bool keepdim = false);
Tensor argmax(const Tensor& x, int axis, bool keepdim = false);
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);
// Mean cross-entropy of |logits| [N,C] against i32 class |labels| [N]; a label outside [0, C)
// gives NaN on every device. Returns a tensor of shape [].
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& grad);
Tensor conv2d(const Tensor& x, const Tensor& w, Conv2dAttrs attrs = {});
Tensor conv2d_backward_input(const Tensor& grad, const Tensor& w, const Shape& input_shape,
                             Conv2dAttrs attrs = {});
Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape,
                              Conv2dAttrs attrs = {});
// Returns (values, i32 indices of the max within each input plane: h * W + w).
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, Pool2dAttrs attrs = {});
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape,
                           Pool2dAttrs attrs = {});
// The gradient of max(x, axis): |grad| (the reduced shape, keepdim or not) placed at the first
// maximum along |axis| of |x|, zeros elsewhere.
Tensor max_backward(const Tensor& grad, const Tensor& x, int axis);
// A contiguous copy (also what Tensor::contiguous() uses).
Tensor copy(const Tensor& x);
// Sets every element of the contiguous tensor |t| to |value|.
void fill_(Tensor& t, double value);
// Fills the contiguous f32 tensor |mask| with a dropout mask (DropoutAttrs in op.h).
void dropout_mask_(Tensor& mask, const DropoutAttrs& attrs);
// Optimizer steps, in place on |param| and the state tensors (all contiguous, same shape).
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdAttrs& attrs);
void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamAttrs& attrs);

// --- tensor API: casts, factories, indexing ---

// --- element-wise math, comparisons, selection ---
// (ops_pointwise.cpp) Named and ordered as torch's functions. Unary ops keep shape and dtype; the
// binary ones broadcast as add does. A bool input of a math op, an integer input of sqrt, rsqrt,
// pow, gelu, silu or erf, operands of different dtypes and shapes that do not broadcast throw
// InvalidArgument naming the op and the shapes/dtypes; kernels run f32 (another dtype on a device
// without it is UnsupportedOperation).
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
// -1, 0 or 1 by the sign of x; 0 for NaN (as torch 1.13).
Tensor sign(const Tensor& x);
Tensor sqrt(const Tensor& x);
// 1 / sqrt(x), as torch.rsqrt.
Tensor rsqrt(const Tensor& x);
// x^exponent, torch.pow(Tensor, Scalar): a negative x with a non-integer exponent gives NaN,
// 0^negative gives inf, anything^0 gives 1.
Tensor pow(const Tensor& x, double exponent);
// min(max(x, min), max) as torch.clamp: either bound may be absent (not both: InvalidArgument);
// min > max gives max everywhere; NaN stays NaN. clamp_min/clamp_max are the one-sided forms.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);
// torch.nn.functional.gelu: approximate "none" (x * Phi(x), through erf) or "tanh"; another
// string throws InvalidArgument. gelu_backward(grad, x, approximate) is grad * gelu'(x).
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate = "none");
// torch.nn.functional.silu: x * sigmoid(x); silu_backward(grad, x) is grad * silu'(x).
Tensor silu(const Tensor& x);
Tensor silu_backward(const Tensor& grad, const Tensor& x);
Tensor erf(const Tensor& x);
// Element-wise min / max of a and b, broadcast; NaN when either is NaN (torch.minimum/maximum).
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
// Comparisons, broadcast, giving bool masks (DType::boolean, one byte 0/1). NaN compares unequal
// to everything. The scalar forms compare with |b| converted to a's dtype (as torch.lt(x, 0.5)).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
// cond ? a : b element by element, all three broadcast together (torch.where(cond, a, b)); cond
// must be bool. The scalar forms take the scalar in the tensor operand's dtype.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with |value| where the bool |mask| is true; x and mask broadcast together (the result has
// their broadcast shape, as torch.masked_fill).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// --- reductions, normalisation, losses, optimizers ---

// --- nn: batched matmul, embedding, pooling, attention ---

// attention
// torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=None,
// dropout_p=0.0, is_causal=False, scale=None), without attn_mask (only the causal mask is
// supported): softmax(query @ key^T * scale + mask) @ value, with dropout on the probabilities.
// query [..., L, E], key [..., S, E], value [..., S, Ev] with the same leading dims (not
// broadcast) -> [..., L, Ev]. is_causal is torch's top-left aligned mask (query i sees keys
// j <= i); scale defaults to 1/sqrt(E). Dropout uses the counter-based mask of AttentionAttrs
// (op.h) drawn from |seed|: the same entries on every device; vary the seed per step. One fused
// kernel where the device has it (the probabilities are never stored). Throws InvalidArgument
// naming the op and the shapes for mismatched shapes or dtypes, dropout_p outside [0, 1) or a
// non-finite scale.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    std::uint64_t seed = 0);
// The same attention composed of element-wise ops, softmax and reductions (the form of torch's
// math backend, and the reference of the fused op): materialises the [..., L, S] scores, and the
// [..., L, S, max(E, Ev)] products of the broadcast matmuls. Same arguments and errors.
Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key,
                                         const Tensor& value, double dropout_p = 0.0,
                                         bool is_causal = false,
                                         std::optional<double> scale = std::nullopt,
                                         std::uint64_t seed = 0);
// The op itself: (out [..., L, Ev], lse [..., L]), lse the natural log-sum-exp of each row of
// the scaled, masked scores (before dropout), which the backward needs.
std::pair<Tensor, Tensor> scaled_dot_product_attention_forward(const Tensor& query,
                                                               const Tensor& key,
                                                               const Tensor& value,
                                                               const AttentionAttrs& attrs);
struct AttentionGrads {
  Tensor query, key, value;
};
// The gradients of scaled_dot_product_attention_forward given grad_out (the shape of out), from
// the forward's inputs, out and lse (the probabilities are recomputed, never stored). The same
// attrs as the forward (the same seed gives the same dropout mask).
AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                     const Tensor& key, const Tensor& value,
                                                     const Tensor& out, const Tensor& lse,
                                                     const AttentionAttrs& attrs);

}  // namespace tessera
