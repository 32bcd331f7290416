// The op front-end: one function per op. Each checks its arguments with the op's shape rule,
// allocates the outputs on the device of the inputs and dispatches (dispatch.h). Inputs must share
// one device; results stay on it, even when the op ran on a fallback device.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/generator.h"
#include "tessera/op.h"
#include "tessera/tensor.h"

namespace tessera {

// Runs a prepared call: fills in the outputs the shape rule gives (outputs already present are
// checked and used), then dispatches. The building block of every function below.
void run_op(OpCall& call);

// torch.matmul(op(a), op(b)), op(x) = x or x with its last two dimensions swapped: two matrices
// run the 2-D matmul op; a vector operand is a row (a) or column (b) whose added dimension is
// removed from the result (the flag of a vector is ignored); operands of rank 3 or more run bmm
// (below), batch dimensions broadcast ([..., M, K] @ [K, N] with a contiguous folds into one 2-D
// GEMM). Throws InvalidArgument naming the shapes when the inner dimensions differ, the batch
// dimensions do not broadcast or an operand has rank 0.
// |out_dtype| (torch.mm's): unset, the inputs' dtype; f32 with f16 or bf16 inputs gives their
// f32 sums as they are, without rounding them to 16 bits (autocast's products, whose next op
// takes f32). Any other dtype throws InvalidArgument. The same for addmm and bmm.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              std::optional<DType> out_dtype = std::nullopt);
// torch.set_float32_matmul_precision / get_float32_matmul_precision: how matmul, addmm and bmm of
// f32 tensors (and the products of their gradients) may compute from now on, process-wide:
// "highest" (the default) f32 arithmetic; "high" and "medium" let a device trade precision for
// speed within PyTorch's meaning of them (op.h's MatmulPrecision). Where the OpenCL plugin runs on
// an NVIDIA GPU of compute capability 8.0 or newer ("f32 GEMM on tensor cores" in tessera-devices
// -v), "high" multiplies each operand as the sum of two TF32 numbers on the tensor cores (three
// TF32 products, f32 sums: about 18 significant bits) and "medium" as one (TF32's 11); every
// other device computes every level in f32. The string form throws InvalidArgument for any other
// name.
void set_float32_matmul_precision(MatmulPrecision precision);
void set_float32_matmul_precision(std::string_view precision);
MatmulPrecision float32_matmul_precision();
std::string_view matmul_precision_name(MatmulPrecision precision);  // "highest", "high", "medium"
// op(a) @ op(b) + bias, bias [N] added to every row (a Linear layer's forward), in the result's
// dtype (with out_dtype f32, an f32 bias on 16-bit a and b). One kernel where the device has one;
// a device without it runs matmul then add, on that device (no fallback).
Tensor addmm(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a = false,
             bool trans_b = false, std::optional<DType> out_dtype = std::nullopt);
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
// x * the mask dropout_mask_ would fill for x's shape, in one pass and without the mask (f32,
// f16 or bf16; the product in f32, rounded once): its own gradient, dropout(grad, attrs).
Tensor dropout(const Tensor& x, const DropoutAttrs& attrs);
// Optimizer steps, in place on |param| and the state tensors (all contiguous, same shape).
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdAttrs& attrs);
void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamAttrs& attrs);

// --- tensor API: casts, factories, indexing --- (ops_tensor.cpp)
// Views are Tensor methods (tensor.h); the functions below compute.

// x converted to |dtype| (Tensor::to(DType) has the rules); always a new tensor.
Tensor cast(const Tensor& x, DType dtype);
// Writes |src| into |dst| (torch's dst.copy_(src)): |dst| may be any view that does not write one
// memory location twice (no expanded dimension), |src| is broadcast to dst's shape and cast to
// its dtype; src may overlap dst (it is copied first then). Throws InvalidArgument naming both
// shapes when src does not broadcast.
void copy_(const Tensor& dst, const Tensor& src);
// The tensors joined along |dim| into a new tensor (torch.cat): every tensor has the same rank,
// dtype and device and the same extents but along |dim|; 1-D empty tensors ([0]) are skipped,
// as torch does. Throws InvalidArgument naming the shapes otherwise, or for an empty list.
Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);
// The tensors (all of one shape) stacked along a new dimension |dim| in [-(rank+1), rank]
// (torch.stack).
Tensor stack(const std::vector<Tensor>& tensors, int dim = 0);
// The slices of |x| at |index| (i32 or i64, rank 0 or 1) along |dim|, a new tensor
// (torch.index_select(x, dim, index)). An index outside [0, size) gives a slice of zeros on every
// device (torch raises; a device can not, without waiting).
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
// The gradient of index_select: a zero tensor of grad's shape with |size| along |dim|, into
// which every slice k of |grad| is added at index[k]. Deterministic: each output slice sums its
// matches in index order, the same bits on every run and device (no float atomics).
Tensor index_select_backward(const Tensor& grad, int dim, const Tensor& index, std::int64_t size);

// Factories (torch's names and argument order; the default device when none is given).
// [start, start + step, ...) below |end| (above it for a negative step): ceil((end - start) / step)
// elements (torch.arange). Integer dtypes need whole start and step. Throws InvalidArgument for
// step 0, a non-finite bound or a count that does not fit.
Tensor arange(double start, double end, double step = 1, DType dtype = DType::f32,
              Device* device = nullptr);
Tensor arange(double end, DType dtype = DType::f32, Device* device = nullptr);
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device* device = nullptr);
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device* device = nullptr);
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device* device = nullptr);
// Random f32 tensors from |generator| (the default generator when null), the same numbers on
// every device for the same seed (op.h: random_uniform, random_normal). Each call advances the
// generator. At most 2^32 elements.
Tensor rand(const Shape& shape, TensorGenerator* generator = nullptr, Device* device = nullptr);
Tensor randn(const Shape& shape, TensorGenerator* generator = nullptr, Device* device = nullptr);
// Integers uniform in [low, high) (torch.randint(low, high, size)), i64 by default (i32 and f32
// too); high - low below 2^32.
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype = DType::i64,
               TensorGenerator* generator = nullptr, Device* device = nullptr);

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
// sum_squares per tensor into one vector, its sum, then the square root); other p throw
// InvalidArgument, as does an empty list (torch returns 0.0 for it: here there is no device to
// put it on).
Tensor total_norm(std::span<const Tensor> tensors, double p = 2);
// AdamW's step as torch.optim.AdamW: param *= 1 - lr * weight_decay, then the Adam step without
// L2 decay in the gradient (attrs as adam_update_).
void adamw_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamAttrs& attrs);

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
// The same, written into |into|'s three tensors (contiguous, each of its input's shape and
// dtype, on its device, none overlapping another or an input; disjoint views of one tensor are
// allowed, as the slices of a packed gradient): returns |into|. Throws InvalidArgument naming the
// tensor that does not fit.
AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                     const Tensor& key, const Tensor& value,
                                                     const Tensor& out, const Tensor& lse,
                                                     const AttentionAttrs& attrs,
                                                     const AttentionGrads& into);
// Batched op(a) @ op(b) for a [..., M, K] and b [..., K, N] (trans_a: a holds [..., K, M],
// trans_b: b holds [..., N, K]), both of rank >= 2: the batch dimensions (all but the last two)
// broadcast as torch.matmul's do (an operand with batch extent 1 is read again for every batch,
// not copied); the result is [broadcast batch..., M, N]. torch.bmm is the 3-D case without
// broadcast. A view whose last two dimensions are swapped from a contiguous tensor folds into the
// flag. Throws InvalidArgument naming the shapes when the inner dimensions differ or the batch
// dimensions do not broadcast.
// out_dtype as matmul's.
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
           std::optional<DType> out_dtype = std::nullopt);
// torch.nn.functional.embedding(indices, weight) in ATen's argument order (at::embedding): the
// rows of |weight| [V, D] picked by |indices| (i32 or i64, any shape of rank < 6), shape
// [...indices, D]. An index outside [0, V) gives a row of NaN on every device (PyTorch raises;
// the devices can not). Throws InvalidArgument for a weight that is not 2-D or other index dtypes.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// at::embedding_backward (dense, no scale_grad_by_freq): the [num_weights, D] gradient of the
// weight, row v the sum of the rows of |grad| [...indices, D] whose index is v, added in
// position order (the same bits on every run and every device); row |padding_idx| (in [0, V),
// or -1 for none) and indices outside [0, V) get nothing. Throws InvalidArgument when grad is not
// [...indices, D] or padding_idx is out of range.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, std::int64_t num_weights,
                          std::int64_t padding_idx = -1);
// torch.nn.functional.avg_pool2d(x, kernel, stride, padding, ceil_mode=False,
// count_include_pad) over x [N,C,H,W] (AvgPool2dAttrs in op.h). Throws InvalidArgument for a
// non-positive kernel or stride, padding beyond half the kernel, or a kernel larger than the
// padded input.
Tensor avg_pool2d(const Tensor& x, AvgPool2dAttrs attrs = {});
// The gradient of avg_pool2d with respect to its input of shape |input_shape|.
Tensor avg_pool2d_backward(const Tensor& grad, const Shape& input_shape, AvgPool2dAttrs attrs = {});
// torch.nn.functional.adaptive_avg_pool2d(x, (out_h, out_w)) over x [N,C,H,W]: output cell
// (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)) and the columns likewise. Throws
// InvalidArgument for an input that is not 4-D, an empty plane or a non-positive output size.
Tensor adaptive_avg_pool2d(const Tensor& x, std::int64_t out_h, std::int64_t out_w);
// The gradient of adaptive_avg_pool2d with respect to its input of shape |input_shape|.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Shape& input_shape);

}  // namespace tessera
