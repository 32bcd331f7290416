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

// --- reductions, normalisation, losses, optimizers ---

// --- nn: batched matmul, embedding, pooling, attention ---

}  // namespace tessera::rules
