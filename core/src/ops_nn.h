// Inside the core: the front-end's path for matmul on operands that are not both matrices.
#pragma once

#include <optional>

#include "tessera/op.h"
#include "tessera/tensor.h"

namespace tessera {

// torch.matmul for ranks other than (2, 2): vectors, batched and broadcast operands (ops.h).
Tensor matmul_nd(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                 std::optional<DType> out_dtype);

// The attributes of a matmul, addmm or bmm called now: the flags, out_dtype and
// float32_matmul_precision().
MatmulAttrs matmul_attrs(bool trans_a, bool trans_b, std::optional<DType> out_dtype);

}  // namespace tessera
