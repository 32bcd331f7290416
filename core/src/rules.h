// Shape rules of the op table (op_table.cpp): the checks they share, and the rules that live in
// their own files (rules_*.cpp), each group of ops beside the others. A rule checks the inputs and
// attributes of a call and fills its output specs; it throws InvalidArgument naming the op.
#pragma once

#include <span>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/op.h"

namespace tessera::rules {

// Throws InvalidArgument "<op>: <message>" unless |ok|.
template <typename... Args>
inline void require(bool ok, const OpCall& call, fmt::format_string<Args...> f, Args&&... args) {
  if (!ok)
    throw InvalidArgument(
        fmt::format("{}: {}", op_name(call.op), fmt::format(f, std::forward<Args>(args)...)));
}

inline void require_dtype(const OpCall& call, const Tensor& t, DType want, const char* what) {
  require(t.dtype() == want, call, "{} must be {}, got {}", what, dtype_name(want),
          dtype_name(t.dtype()));
}

inline void require_same_shape(const OpCall& call, const Tensor& a, const Tensor& b, const char* an,
                               const char* bn) {
  require(a.shape() == b.shape(), call, "{} {} and {} {} must have the same shape", an,
          a.shape().str(), bn, b.shape().str());
}

inline void require_rank(const OpCall& call, const Tensor& t, int rank, const char* what) {
  require(t.rank() == rank, call, "{} must have rank {}, got {}", what, rank, t.shape().str());
}

inline void require_spec(const OpCall& call, const TensorSpec& s, const Shape& want,
                         const char* what) {
  require(s.shape == want, call, "{} must have shape {} for these inputs, got {}", what, want.str(),
          s.shape.str());
}

// --- tensor API: casts, factories, indexing --- (rules_tensor.cpp)
void infer_cast(const OpCall& call, std::span<TensorSpec> out);
void infer_copy_into(const OpCall& call, std::span<TensorSpec> out);
void infer_arange(const OpCall& call, std::span<TensorSpec> out);
void infer_random(const OpCall& call, std::span<TensorSpec> out);
void infer_index_select(const OpCall& call, std::span<TensorSpec> out);
void infer_index_select_backward(const OpCall& call, std::span<TensorSpec> out);

// --- element-wise math, comparisons, selection ---
// (rules_pointwise.cpp) Unary ops keep the shape and dtype of x: numeric (any dtype but bool) or
// floating point (f32, f64, f16, bf16).
void infer_numeric_unary(const OpCall& call, std::span<TensorSpec> out);
void infer_float_unary(const OpCall& call, std::span<TensorSpec> out);
void infer_gelu(const OpCall& call, std::span<TensorSpec> out);
// (grad, x) of one shape and floating dtype -> that shape.
void infer_pointwise_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_gelu_backward(const OpCall& call, std::span<TensorSpec> out);
// (a, b) of one numeric dtype, broadcast: minimum/maximum keep the dtype, comparisons give bool.
void infer_min_max(const OpCall& call, std::span<TensorSpec> out);
void infer_compare(const OpCall& call, std::span<TensorSpec> out);
// (cond bool, a, b) broadcast together; a and b of one dtype.
void infer_where(const OpCall& call, std::span<TensorSpec> out);
// (x, mask bool) broadcast together (torch.masked_fill broadcasts both).
void infer_masked_fill(const OpCall& call, std::span<TensorSpec> out);

// --- reductions, normalisation, losses, optimizers ---
// rules_reduce.cpp
void infer_min(const OpCall& call, std::span<TensorSpec> out);
void infer_min_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_var(const OpCall& call, std::span<TensorSpec> out);
void infer_prod(const OpCall& call, std::span<TensorSpec> out);
void infer_prod_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_softmax_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_layer_norm(const OpCall& call, std::span<TensorSpec> out);
void infer_layer_norm_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_batch_norm(const OpCall& call, std::span<TensorSpec> out);
void infer_batch_norm_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_mse_loss(const OpCall& call, std::span<TensorSpec> out);
void infer_sum_squares(const OpCall& call, std::span<TensorSpec> out);
void infer_adamw(const OpCall& call, std::span<TensorSpec> out);
void infer_cross_entropy(const OpCall& call, std::span<TensorSpec> out);
void infer_cross_entropy_backward(const OpCall& call, std::span<TensorSpec> out);

// --- nn: batched matmul, embedding, pooling, attention ---
void infer_bmm(const OpCall& call, std::span<TensorSpec> out);
// The result's dtype of a matmul, addmm or bmm call (MatmulAttrs::out_dtype, checked: f32 for
// f16 or bf16 inputs, or the inputs' own).
DType matmul_out_dtype(const OpCall& call);
void infer_embedding(const OpCall& call, std::span<TensorSpec> out);
void infer_embedding_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_avg_pool2d(const OpCall& call, std::span<TensorSpec> out);
void infer_avg_pool2d_backward(const OpCall& call, std::span<TensorSpec> out);
void infer_adaptive_avg_pool2d(const OpCall& call, std::span<TensorSpec> out);
void infer_adaptive_avg_pool2d_backward(const OpCall& call, std::span<TensorSpec> out);

// attention
// scaled_dot_product_attention: q [...,L,E], k [...,S,E], v [...,S,Ev] (rank >= 2, the same
// leading dims, f32) -> out [...,L,Ev], lse [...,L]; dropout_p in [0, 1), and with dropout the
// [...,L,S] probabilities within the 2^32 indices of dropout_uniform.
void infer_attention(const OpCall& call, std::span<TensorSpec> out);
// scaled_dot_product_attention_backward: (grad_out, q, k, v, out, lse) -> (grad_q, grad_k,
// grad_v) of q's, k's and v's shapes; grad_out and out [...,L,Ev], lse [...,L].
void infer_attention_backward(const OpCall& call, std::span<TensorSpec> out);

}  // namespace tessera::rules
