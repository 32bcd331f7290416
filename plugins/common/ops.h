// The groups of portable ops (portable.h): each ops_*.cpp adds its ops to the table that both GPU
// plugins install. A new group declares its function here and calls it from portable_ops().
#pragma once

#include "portable.h"

namespace tessera::common {

// The first ops, moved here from the plugins' own kernels.
void add_base_ops(PortableOps& ops);

// The bias step of an addmm call whose GEMM a plugin has just launched: output += bias on every
// row, in place, with the portable add kernel.
void bias_add(const OpCall& addmm, Launcher& l);

// --- tensor API: casts, factories, indexing ---
void add_tensor_ops(PortableOps& ops);

// --- element-wise math, comparisons, selection ---
// Element-wise math, comparisons, where and masked_fill (ops_pointwise.cpp).
void add_pointwise_ops(PortableOps& ops);

// --- reductions, normalisation, losses, optimizers ---
void add_reduce_ops(PortableOps& ops);  // ops_reduce.cpp

// --- nn: batched matmul, embedding, pooling, attention ---
void add_nn_ops(PortableOps& ops);  // ops_nn.cpp

// attention
void add_attention_ops(PortableOps& ops);

}  // namespace tessera::common
