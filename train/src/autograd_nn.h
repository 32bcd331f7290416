// Inside the training library: autograd's matmul on operands that are not both matrices.
#pragma once

#include <optional>

#include "tessera/train/autograd.h"

namespace tessera::train {

// torch.matmul's rules for ranks other than (2, 2) (tessera::matmul in ops.h), differentiable.
Variable matmul_nd(const Variable& a, const Variable& b, bool trans_a, bool trans_b);

// The dtype that autocast multiplies a and b in (autocast.h): the guard's, when both are f32.
std::optional<DType> autocast_for(const Variable& a, const Variable& b);

// Autocast's product of f32 a and b: op(a) @ op(b) (+ an f32 bias on every row) with a and b
// cast to |lo| once, the sums in f32 (out_dtype): matmul (or addmm) where both are matrices,
// else bmm with equal batch dimensions. Its backward casts the gradient to |lo| and takes a's
// and b's gradients from the same GEMMs in f32; the bias's is the gradient summed over rows.
Variable autocast_product(const Variable& a, const Variable& b, const Variable& bias, bool trans_a,
                          bool trans_b, DType lo);

}  // namespace tessera::train
