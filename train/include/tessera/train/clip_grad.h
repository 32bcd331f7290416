// Gradient clipping as torch.nn.utils.clip_grad_norm_ and clip_grad_value_, on the gradients'
// devices, without waiting for the device (unless asked to check the norm). Each clipped
// gradient replaces the parameter's gradient (Variable::mutable_grad) rather than being written
// in place as PyTorch's: backward() may give two leaves one gradient tensor (the gradients of
// a + b), which an in-place write would clip twice. A tensor taken from grad() before clipping
// keeps the unclipped values.
#pragma once

#include <vector>

#include "tessera/tensor.h"
#include "tessera/train/autograd.h"
#include "tessera/train/layers.h"

namespace tessera::train {

// torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
// the total norm of every gradient taken together (the norm of the vector of each gradient's
// norm; norm_type inf: the largest absolute value), then every gradient multiplied by
// min(1, max_norm / (total_norm + 1e-6)), a coefficient computed on the device as PyTorch does.
// Parameters without a gradient are skipped. Returns the total norm before clipping as a device
// scalar (shape [], on the device of the first gradient; zero on the first parameter's device, or
// the default device for no parameters, when no parameter has a gradient). Throws
// InvalidArgument for a max_norm that is negative or NaN, a norm_type that is not positive
// (finite or inf); and, with error_if_nonfinite (which reads the norm back, waiting for the
// device), when the total norm is NaN or infinite, before changing any gradient.
Tensor clip_grad_norm_(const std::vector<Variable>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);
Tensor clip_grad_norm_(const std::vector<NamedParameter>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// torch.nn.utils.clip_grad_value_(parameters, clip_value): every gradient clamped to
// [-clip_value, clip_value]; parameters without a gradient are skipped. Throws InvalidArgument
// for a clip_value that is negative or NaN (torch clamps to an empty range then).
void clip_grad_value_(const std::vector<Variable>& parameters, double clip_value);
void clip_grad_value_(const std::vector<NamedParameter>& parameters, double clip_value);

}  // namespace tessera::train
