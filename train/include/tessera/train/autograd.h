// Reverse-mode automatic differentiation over core tensors, as torch.autograd does it: a Variable
// is a tensor plus the record of the op that made it; backward() walks that record in reverse
// and accumulates gradients into the leaves that require them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "tessera/op.h"
#include "tessera/shape.h"
#include "tessera/tensor.h"

namespace tessera::train {

struct Node;

// A tensor that records how it was computed. Copies share the node, like PyTorch tensors.
//
// A leaf (made by the constructor) holds a value and, when requires_grad, a gradient that
// backward() adds to (gradient accumulation) until zero_grad(). A non-leaf is made by the
// functions below while gradient mode is on and an input requires grad; it keeps what its
// backward rule needs until backward() has run through it.
//
// Thread safety: a graph is used from one thread at a time; NoGradGuard is per thread.
class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false);

  bool defined() const { return node_ != nullptr; }
  const Tensor& value() const;
  const Shape& shape() const { return value().shape(); }
  bool requires_grad() const;
  bool is_leaf() const;
  // The accumulated gradient of a leaf; undefined before the first backward() or after
  // zero_grad().
  const Tensor& grad() const;
  // Drops the gradient (PyTorch's set_to_none), so the next backward() starts from nothing.
  void zero_grad();
  // Replaces the gradient of a leaf, as assigning torch's tensor.grad: |grad| must have the
  // value's shape, dtype and device; an undefined tensor drops the gradient. Throws
  // InvalidArgument for a non-leaf, or naming the shape, dtype or device that differs.
  void set_grad(Tensor grad);
  // The gradient of a leaf for assigning or writing in place (LibTorch's mutable_grad()); the
  // caller keeps it of the value's shape, dtype and device. A gradient left by backward() may
  // be the very tensor another leaf holds (the gradients of a + b): assign a new tensor rather
  // than write into one you did not set. Throws InvalidArgument for a non-leaf.
  Tensor& mutable_grad();
  // Replaces the value of a leaf (moving a parameter to a device, loading a checkpoint). Throws
  // InvalidArgument for a non-leaf or a different shape.
  void set_value(Tensor value);

  // Calls |hook| with this leaf once per backward pass, after every gradient that pass
  // contributes to it has been added into grad() (torch's register_post_accumulate_grad_hook;
  // DDP starts reducing a gradient bucket from it). Hooks run on the thread of backward(), in the
  // order they were registered, while the rest of the pass is still to run; an exception from a
  // hook propagates out of backward(). Copies of this Variable share the hooks. Returns a handle
  // that removes the hook (removing twice, or after the Variable is gone, does nothing). Throws
  // InvalidArgument for a non-leaf or a leaf that does not require grad.
  class HookHandle;
  HookHandle register_post_accumulate_grad_hook(std::function<void(Variable&)> hook);

  // Back-propagates from this one-element variable (seed 1), or from any variable with a
  // gradient |grad| of its shape. Frees the graph's saved tensors on the way (as PyTorch's
  // retain_graph=false): a second backward() through the same graph throws InvalidArgument.
  void backward() const;
  void backward(const Tensor& grad) const;

  const std::shared_ptr<Node>& node() const { return node_; }

 private:
  explicit Variable(std::shared_ptr<Node> node) : node_(std::move(node)) {}
  friend Variable make_result(Tensor value, std::vector<Variable> inputs,
                              std::function<std::vector<Tensor>(const Tensor&)> backward);
  std::shared_ptr<Node> node_;
};

// Removes the hook it was returned for (torch.utils.hooks.RemovableHandle). Movable; removing
// is explicit (dropping the handle keeps the hook).
class Variable::HookHandle {
 public:
  HookHandle() = default;
  void remove();

 private:
  friend class Variable;
  HookHandle(std::weak_ptr<Node> node, std::uint64_t id) : node_(std::move(node)), id_(id) {}
  std::weak_ptr<Node> node_;
  std::uint64_t id_ = 0;
};

// Whether new results record their history on this thread (true unless a NoGradGuard lives).
bool grad_enabled();

// Turns recording off for its scope on this thread, like torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Builds a result: records |backward| (the gradient of each input given the result's gradient;
// an undefined tensor for an input that needs none) when recording is on and an input requires
// grad, else a plain value. For writing new differentiable functions.
Variable make_result(Tensor value, std::vector<Variable> inputs,
                     std::function<std::vector<Tensor>(const Tensor&)> backward);

// Sums |grad| down to |shape| over the dimensions that broadcasting expanded.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// Differentiable versions of the core ops (ops.h has their contracts).
Variable matmul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable add_scalar(const Variable& a, double s);
Variable mul_scalar(const Variable& a, double s);
Variable relu(const Variable& x);
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable tanh(const Variable& x);
Variable sigmoid(const Variable& x);
Variable sum(const Variable& x, int axis, bool keepdim = false);
Variable mean(const Variable& x, int axis, bool keepdim = false);
Variable max(const Variable& x, int axis, bool keepdim = false);
Variable softmax(const Variable& x, int axis = -1);
Variable log_softmax(const Variable& x, int axis = -1);
// Cross-entropy of |logits| [N,C] or [N,T,C] against i32/i64 |labels| [N] or [N,T] (not
// differentiated), with ignore_index and label_smoothing (ops.h has the contract).
Variable cross_entropy(const Variable& logits, const Tensor& labels, CrossEntropyAttrs attrs = {});
Variable conv2d(const Variable& x, const Variable& w, Conv2dAttrs attrs = {});
Variable max_pool2d(const Variable& x, Pool2dAttrs attrs = {});
Variable reshape(const Variable& x, const Shape& shape);
Variable copy(const Variable& x);
// x converted to |dtype| (Tensor::to); its gradient is converted back to x's dtype. Between the
// floating-point dtypes (f32, f64, f16, bf16): throws InvalidArgument otherwise.
Variable to(const Variable& x, DType dtype);
// A view with dimensions |dim0| and |dim1| swapped (no copy).
Variable transpose(const Variable& x, int dim0, int dim1);
// x @ w^T + b for x [N,in], w [out,in] (PyTorch's layout), b [out] (may be undefined).
Variable linear(const Variable& x, const Variable& w, const Variable& b);
// x * mask, where mask is dropout_mask(p, seed): zero with probability p, else 1/(1-p).
Variable dropout(const Variable& x, float p, std::uint64_t seed);

// --- tensor API: casts, factories, indexing --- (autograd_tensor.cpp)
// Differentiable views and copies, with the contracts of their Tensor and ops.h namesakes. The
// gradient of a view is the incoming gradient written into that view of a zero tensor of the
// input's shape (permute and reshape-like views map it back instead); cat and stack hand each
// input its slice of the gradient; index_select's is index_select_backward.
Variable narrow(const Variable& x, int dim, std::int64_t start, std::int64_t length);
Variable slice(const Variable& x, int dim, std::int64_t start, std::int64_t end,
               std::int64_t step = 1);
Variable select(const Variable& x, int dim, std::int64_t index);
Variable permute(const Variable& x, const std::vector<int>& dims);
Variable unsqueeze(const Variable& x, int dim);
Variable squeeze(const Variable& x);
Variable squeeze(const Variable& x, int dim);
Variable expand(const Variable& x, const Shape& shape);
Variable flatten(const Variable& x, int start_dim = 0, int end_dim = -1);
Variable cat(const std::vector<Variable>& xs, int dim = 0);
Variable stack(const std::vector<Variable>& xs, int dim = 0);
std::vector<Variable> split(const Variable& x, std::int64_t size, int dim = 0);
std::vector<Variable> chunk(const Variable& x, std::int64_t chunks, int dim = 0);
// |index| (i32 or i64) is not differentiated.
Variable index_select(const Variable& x, int dim, const Tensor& index);

// --- element-wise math, comparisons, selection ---
// (autograd_pointwise.cpp) Differentiable forms of the element-wise ops of ops.h, with PyTorch's
// gradients: abs' = sign(x) (0 at 0); clamp passes the gradient where min <= x <= max; pow's
// gradient is 0 for exponent 0; minimum/maximum give the gradient to the smaller/larger operand
// and half to each on ties; where gives it to a where cond holds and to b elsewhere; masked_fill
// gives it to x where the mask is false. Gradients of broadcast operands are summed to their
// shapes. Masks (cond, mask) are plain tensors: they get no gradient.
Variable neg(const Variable& x);
Variable abs(const Variable& x);
Variable sqrt(const Variable& x);
Variable rsqrt(const Variable& x);
Variable pow(const Variable& x, double exponent);
Variable clamp(const Variable& x, std::optional<double> min,
               std::optional<double> max = std::nullopt);
Variable gelu(const Variable& x, std::string_view approximate = "none");
Variable silu(const Variable& x);
Variable erf(const Variable& x);
Variable minimum(const Variable& a, const Variable& b);
Variable maximum(const Variable& a, const Variable& b);
Variable where(const Tensor& cond, const Variable& a, const Variable& b);
Variable masked_fill(const Variable& x, const Tensor& mask, double value);

// --- reductions, normalisation, losses, optimizers ---
// (autograd_reduce.cpp; ops.h has the contracts.)
Variable sum(const Variable& x, const std::vector<int>& dims, bool keepdim = false);
Variable mean(const Variable& x, const std::vector<int>& dims, bool keepdim = false);
Variable min(const Variable& x, int axis, bool keepdim = false);
Variable var(const Variable& x, int axis, double correction = 1, bool keepdim = false);
Variable std(const Variable& x, int axis, double correction = 1, bool keepdim = false);
Variable prod(const Variable& x, int axis, bool keepdim = false);
// torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps); |weight| and |bias|
// may be undefined.
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                    const Variable& bias, double eps = 1e-5);
// torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
// eps) (note: the arguments here are in native_batch_norm's order); the running statistics are
// updated in place when training. |weight|, |bias| may be undefined; the running statistics may
// be undefined when training.
Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias,
                    const Tensor& running_mean, const Tensor& running_var, bool training,
                    double momentum = 0.1, double eps = 1e-5);
// torch.nn.functional.mse_loss(input, target, reduction); both are differentiated.
Variable mse_loss(const Variable& input, const Variable& target,
                  Reduction reduction = Reduction::mean);

// --- nn: batched matmul, embedding, pooling, attention ---
// tessera::bmm, differentiable: the gradients are summed over the batch dimensions that
// broadcast. (matmul above follows torch.matmul's rules for every rank, through this.)
Variable bmm(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);
// torch.nn.functional.embedding(indices, weight, padding_idx) in ATen's argument order: rows of
// |weight| [V, D] picked by |indices| (i32 or i64, not differentiated). |padding_idx| in [-V, V)
// (negative counts from the end, as PyTorch) names the row that gets no gradient. Throws
// InvalidArgument for a padding_idx out of range and as tessera::embedding does.
Variable embedding(const Variable& weight, const Tensor& indices,
                   std::optional<std::int64_t> padding_idx = std::nullopt);
Variable avg_pool2d(const Variable& x, AvgPool2dAttrs attrs = {});
Variable adaptive_avg_pool2d(const Variable& x, std::int64_t out_h, std::int64_t out_w);

// attention
// scaled_dot_product_attention (ops.h) with gradients for query, key and value: the backward is
// the fused scaled_dot_product_attention_backward op, recomputing the probabilities from the
// saved log-sum-exp (the same dropout mask, from the same seed).
Variable scaled_dot_product_attention(const Variable& query, const Variable& key,
                                      const Variable& value, double dropout_p = 0.0,
                                      bool is_causal = false,
                                      std::optional<double> scale = std::nullopt,
                                      std::uint64_t seed = 0);
// The same for query, key and value packed in one tensor qkv [3, ..., L, E] (qkv[0] the query,
// qkv[1] the key, qkv[2] the value, as flash-attn's qkvpacked functions; self-attention: L = S,
// E = Ev): the op reads the three slices in place, and the backward writes their gradients into
// one tensor of qkv's shape. A model that projects q, k and v at once (a GPT's c_attn) then
// arranges its heads with one copy each way, instead of three copies and three zero-filled
// gradients summed. Throws InvalidArgument unless qkv has rank >= 3 and 3 in its first dimension.
Variable scaled_dot_product_attention_packed(const Variable& qkv, double dropout_p = 0.0,
                                             bool is_causal = false,
                                             std::optional<double> scale = std::nullopt,
                                             std::uint64_t seed = 0);

}  // namespace tessera::train
