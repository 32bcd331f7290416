// Inside the training library: BatchNorm2d's training forward over the batches of several
// processes (layers.h's BatchNorm2d says what it computes).
#pragma once

#include "tessera/train/autograd.h"
#include "tessera/train/strategy.h"

namespace tessera::train::detail {

// batch_norm in training mode with the statistics of every process's batch of |group|;
// |running_mean| and |running_var| (undefined: none) are updated in place from the global
// statistics. Throws InvalidArgument when the job's batch holds one value per channel.
Variable sync_batch_norm(const Variable& x, const Variable& weight, const Variable& bias,
                         const Tensor& running_mean, const Tensor& running_var, double momentum,
                         double eps, ProcessGroup& group);

}  // namespace tessera::train::detail
