// The op front-end: one function per op. Each checks its arguments with the op's shape rule,
// allocates the outputs on the device of the inputs and dispatches (dispatch.h). Inputs must share
// one device; results stay on it, even when the op ran on a fallback device.
#pragma once

#include <utility>
#include <vector>

#include "tessera/generator.h"
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

// --- reductions, normalisation, losses, optimizers ---

// --- nn: batched matmul, embedding, pooling, attention ---

}  // namespace tessera
