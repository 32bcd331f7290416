// The op front-end: one function per op. Each checks its arguments with the op's shape rule,
// allocates the outputs on the device of the inputs and dispatches (dispatch.h). Inputs must share
// one device; results stay on it, even when the op ran on a fallback device.
#pragma once

#include <span>
#include <utility>
#include <vector>

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
// Cross-entropy as torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100,
// label_smoothing=0) with reduction 'mean': |logits| [N, C] with |labels| [N], or [N, T, C] with
// labels [N, T] (i32 or i64). The classes are the LAST dimension, unlike torch's [N, C, T] for
// sequences: torch's F.cross_entropy(x.transpose(1, 2), y) is cross_entropy(x, y) here for x
// [N, T, C]. Per target: (1 - s) (lse - x[label]) + s/C sum_k (lse - x[k]); the mean is over the
// targets whose label is not ignore_index (NaN when there are none, as torch). A label outside
// [0, C) that is not ignore_index gives NaN on every device. Returns a tensor of shape [].
// Throws InvalidArgument for other shapes or dtypes, or label_smoothing outside [0, 1].
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyAttrs attrs = {});
// d cross_entropy / d logits times the one-element |grad| (ignored targets get zeros).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& grad,
                              CrossEntropyAttrs attrs = {});
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

// --- reductions, normalisation, losses, optimizers ---
// (ops_reduce.cpp.) Reductions take a Python-style axis (-1 is the last); every function throws
// InvalidArgument naming the op for an axis out of range, a wrong dtype (f32 data, i32/i64
// labels) or mismatched shapes.

// torch.sum(x, dims, keepdim) / torch.mean: over several axes at once (an empty list reduces
// every axis), as one reduction kernel: axes that are adjacent in memory are merged by a view,
// other layouts are first copied with the reduced axes innermost. Throws InvalidArgument for a
// repeated axis.
Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
// torch.amin(x, axis, keepdim) (torch.min(x, dim).values); an empty axis is an error.
Tensor min(const Tensor& x, int axis, bool keepdim = false);
// The gradient of min(x, axis): |grad| (the reduced shape, keepdim or not) placed at the first
// minimum along |axis| of |x|, zeros elsewhere (max_backward's rule).
Tensor min_backward(const Tensor& grad, const Tensor& x, int axis);
// torch.var(x, axis, correction=, keepdim=): sum((x - mean)^2) / max(n - correction, 0), with
// correction 1 (unbiased=True; passing true/false works as unbiased) by default. n <= correction
// gives inf or NaN as torch. std is its square root.
Tensor var(const Tensor& x, int axis, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, int axis, double correction = 1, bool keepdim = false);
// torch.prod(x, axis, keepdim); the product of an empty axis is 1.
Tensor prod(const Tensor& x, int axis, bool keepdim = false);
// The gradient of prod(x, axis): grad times the product of the other elements of each line
// (exact with zeros in the line; no division).
Tensor prod_backward(const Tensor& grad, const Tensor& x, int axis);
// torch._softmax_backward_data(grad, y, axis): y * (grad - sum(grad * y, axis)), y = softmax(x).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int axis);
// torch._log_softmax_backward_data: grad - exp(y) * sum(grad, axis), y = log_softmax(x).
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int axis);

// The three results of layer_norm: y, and the mean and 1/sqrt(var + eps) of every row (biased
// variance), shaped as x with the normalised dimensions set to 1 (torch.native_layer_norm).
struct LayerNormResult {
  Tensor y, mean, rstd;
};
// torch.native_layer_norm(x, normalized_shape, weight, bias, eps): normalises over the last
// normalized_shape.rank() dimensions of x, which must equal normalized_shape; |weight| and
// |bias| have that shape or are undefined (ones, zeros). Statistics in one pass per row.
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias, double eps = 1e-5);
// The gradients of layer_norm (torch.native_layer_norm_backward with every output): grad_x, and
// grad_weight and grad_bias of the normalised shape (computed even when |weight| is undefined,
// which means ones). grad_weight/grad_bias are column sums in a fixed order (deterministic).
struct NormGrads {
  Tensor x, weight, bias;
};
NormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                              const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                              double eps = 1e-5);

// y and what batch_norm_backward needs: the per-channel mean and 1/sqrt(var + eps) used (batch
// statistics when training; the running ones in eval).
struct BatchNormResult {
  Tensor y, save_mean, save_invstd;
};
// torch.native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
// over the channels (dimension 1) of x [N, C, ...]. Training normalises with the batch mean and
// biased variance and updates the running statistics in place (running = (1 - momentum) *
// running + momentum * batch, the variance unbiased, as PyTorch); eval uses the running ones.
// weight/bias may be undefined (ones, zeros); running_mean/running_var may be undefined when
// training (nothing is updated) and must be contiguous f32 [C] tensors when given. Throws
// InvalidArgument for an eval call without running statistics, a channel count that does not
// match, or a training batch with one value per channel.
BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           Tensor running_mean, Tensor running_var, bool training,
                           double momentum = 0.1, double eps = 1e-5);
// The gradients of batch_norm (torch.native_batch_norm_backward with every output) given the
// save_mean/save_invstd of the forward call; |training| says whether those were batch statistics
// (their gradient then flows through the mean and variance) or constants (eval).
NormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd, bool training,
                              double eps = 1e-5);

// torch.nn.functional.mse_loss(input, target, reduction): (input - target)^2, its mean (default),
// its sum or every element (Reduction::none). Shapes must match (no broadcast).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// The sum of x^2 over every element, shape [] (0 for an empty tensor).
Tensor sum_squares(const Tensor& x);
// The total p-norm of |tensors| taken together, as the norm that
// torch.nn.utils.clip_grad_norm_(tensors, max_norm, norm_type=p) computes: the norm of the
// vector of every tensor's norm, shape [], on the device of the first tensor. p = 2 only (one
// sum_squares per tensor, summed, then the square root); other p throw InvalidArgument, as does
// an empty list (torch returns 0.0 for it: here there is no device to put it on).
Tensor total_norm(std::span<const Tensor> tensors, double p = 2);
// AdamW's step as torch.optim.AdamW: param *= 1 - lr * weight_decay, then the Adam step without
// L2 decay in the gradient (attrs as adam_update_).
void adamw_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamAttrs& attrs);

// --- nn: batched matmul, embedding, pooling, attention ---

}  // namespace tessera
