// Inside the training library: autograd's matmul on operands that are not both matrices.
#pragma once

#include <optional>

#include "tessera/train/autograd.h"

namespace tessera::train {

// torch.matmul's rules for ranks other than (2, 2) (tessera::matmul in ops.h), differentiable.
Variable matmul_nd(const Variable& a, const Variable& b, bool trans_a, bool trans_b);

// The dtype that autocast multiplies a and b in (autocast.h): the guard's, when both are f32.
std::optional<DType> autocast_for(const Variable& a, const Variable& b);

}  // namespace tessera::train
