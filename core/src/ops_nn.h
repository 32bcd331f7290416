// Inside the core: the front-end's path for matmul on operands that are not both matrices.
#pragma once

#include <optional>

#include "tessera/tensor.h"

namespace tessera {

// torch.matmul for ranks other than (2, 2): vectors, batched and broadcast operands (ops.h).
Tensor matmul_nd(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                 std::optional<DType> out_dtype);

}  // namespace tessera
