// Mixed precision: the autocast scope and dynamic loss scaling (autocast.h).
#include "tessera/train/autocast.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/optim.h"

namespace tessera::train {
namespace {

thread_local std::optional<DType> t_autocast;

}  // namespace

AutocastGuard::AutocastGuard(DType dtype) : previous_(t_autocast) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    throw InvalidArgument(fmt::format(
        "autocast: {} is not a dtype to multiply in; pass f16 or bf16 (f32 turns autocast off)",
        dtype_name(dtype)));
  t_autocast = dtype == DType::f32 ? std::nullopt : std::optional<DType>(dtype);
}

AutocastGuard::~AutocastGuard() {
  t_autocast = previous_;
}

std::optional<DType> autocast_dtype() {
  return t_autocast;
}

GradScaler::GradScaler() : GradScaler(Options{}) {}

GradScaler::GradScaler(Options options) : options_(options), scale_(options.init_scale) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(options.init_scale))
    throw InvalidArgument(
        fmt::format("GradScaler: init_scale is {}; pass a positive number", options.init_scale));
  if (!positive(options.growth_factor) || options.growth_factor <= 1)
    throw InvalidArgument(fmt::format("GradScaler: growth_factor is {}; pass a number above 1",
                                      options.growth_factor));
  if (!positive(options.backoff_factor) || options.backoff_factor >= 1)
    throw InvalidArgument(fmt::format("GradScaler: backoff_factor is {}; pass a number in (0, 1)",
                                      options.backoff_factor));
  if (options.growth_interval < 1)
    throw InvalidArgument(
        fmt::format("GradScaler: growth_interval is {}; pass 1 or more", options.growth_interval));
}

Variable GradScaler::scale(const Variable& loss) const {
  return mul_scalar(loss, scale_);
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (unscaled_)
    throw InvalidArgument(
        "GradScaler::unscale_ was already called for this step; call update() after step()");
  std::vector<Tensor> grads;
  for (const NamedParameter& p : optimizer.parameters()) {
    if (!p.variable || !p.variable->grad().defined()) continue;
    Tensor& g = p.variable->mutable_grad();
    g = tessera::mul_scalar(g, 1.0 / scale_);  // replaced, not written in place (clip_grad.h)
    grads.push_back(g);
  }
  found_inf_ = false;
  if (!grads.empty()) {
    const float norm = total_norm(grads).to_vector<float>().front();
    found_inf_ = !std::isfinite(norm);
  }
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
    ++skipped_;
  } else if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

}  // namespace tessera::train
