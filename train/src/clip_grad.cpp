#include "tessera/train/clip_grad.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"

namespace tessera::train {

namespace {

std::vector<Variable> variables_of(const std::vector<NamedParameter>& parameters) {
  std::vector<Variable> out;
  out.reserve(parameters.size());
  for (const NamedParameter& p : parameters) {
    if (!p.variable) throw InvalidArgument(fmt::format("parameter '{}' is null", p.name));
    out.push_back(*p.variable);
  }
  return out;
}

// |t| on |device| and of |dtype|, converted only where it differs.
Tensor as(const Tensor& t, Device& device, DType dtype) {
  Tensor out = &t.device() == &device ? t : t.to(device);
  return out.dtype() == dtype ? out : out.to(dtype);
}

// The norm of one gradient, shape [], f32.
Tensor norm_of(const Tensor& g, double p) {
  const Tensor flat = g.reshape({g.numel()});
  if (std::isinf(p)) return as(max(abs(flat), 0), g.device(), DType::f32);
  return as(pow(sum(pow(abs(flat), p), 0), 1.0 / p), g.device(), DType::f32);
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Variable>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  if (!(max_norm >= 0))
    throw InvalidArgument(
        fmt::format("clip_grad_norm_: max_norm is {}, expected a non-negative number", max_norm));
  if (!(norm_type > 0) || (std::isinf(norm_type) && norm_type < 0))
    throw InvalidArgument(fmt::format(
        "clip_grad_norm_: norm_type is {}, expected a positive number or inf", norm_type));
  std::vector<Variable> with_grad;
  for (const Variable& v : parameters)
    if (v.defined() && v.grad().defined()) with_grad.push_back(v);
  if (with_grad.empty()) {
    Device& device = parameters.empty() || !parameters.front().defined()
                         ? default_device()
                         : parameters.front().value().device();
    return Tensor::full({}, 0.0, DType::f32, &device);
  }

  Device& device = with_grad.front().grad().device();
  bool one_device = true;
  std::vector<Tensor> grads;
  for (const Variable& v : with_grad) {
    grads.push_back(v.grad());
    one_device = one_device && &v.grad().device() == &device;
  }
  Tensor total;
  if (norm_type == 2 && one_device && grads.front().dtype() == DType::f32) {
    total = total_norm(grads, 2);
  } else {
    std::vector<Tensor> norms;
    for (const Tensor& g : grads)
      if (g.numel() > 0) norms.push_back(as(norm_of(g, norm_type), device, DType::f32));
    if (norms.empty()) {
      total = Tensor::full({}, 0.0, DType::f32, &device);
    } else {
      const Tensor all = stack(norms);
      total =
          std::isinf(norm_type) ? max(all, 0) : pow(sum(pow(all, norm_type), 0), 1.0 / norm_type);
    }
  }
  if (error_if_nonfinite && !std::isfinite(total.item()))
    throw InvalidArgument(fmt::format(
        "The total norm of order {} for gradients from `parameters` is non-finite, so it cannot "
        "be clipped. To disable this error and scale the gradients by the non-finite norm "
        "anyway, set `error_if_nonfinite=false`",
        norm_type));
  const Tensor coef =
      clamp_max(div(Tensor::full({}, max_norm, DType::f32, &device), add_scalar(total, 1e-6)), 1.0);
  // Each gradient is replaced, never written in place: backward() may hand two leaves one
  // tensor (the gradients of a + b), which in-place writes would scale twice.
  for (Variable v : with_grad) {
    Tensor& g = v.mutable_grad();
    g = mul(g, as(coef, g.device(), g.dtype()));
  }
  return total;
}

Tensor clip_grad_norm_(const std::vector<NamedParameter>& parameters, double max_norm,
                       double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(variables_of(parameters), max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Variable>& parameters, double clip_value) {
  if (!(clip_value >= 0))
    throw InvalidArgument(fmt::format(
        "clip_grad_value_: clip_value is {}, expected a non-negative number", clip_value));
  for (Variable v : parameters) {
    if (!v.defined() || !v.grad().defined()) continue;
    Tensor& g = v.mutable_grad();
    g = clamp(g, -clip_value, clip_value);  // replaced, not written in place (as above)
  }
}

void clip_grad_value_(const std::vector<NamedParameter>& parameters, double clip_value) {
  clip_grad_value_(variables_of(parameters), clip_value);
}

}  // namespace tessera::train
