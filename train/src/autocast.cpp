// Mixed precision: the autocast scope and dynamic loss scaling (autocast.h).
#include "tessera/train/autocast.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "parse.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/optim.h"

namespace tessera::train {
namespace {

thread_local std::optional<DType> t_autocast;

}  // namespace

AutocastGuard::AutocastGuard(DType dtype) : previous_(t_autocast) {
  if (dtype != DType::f32 && !is_16bit_float(dtype))
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

namespace {

// Why |o| is not a scaler's options ("" when it is): |init| names the scale's field.
std::string options_error(const GradScaler::Options& o, const char* init) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(o.init_scale))
    return fmt::format("{} is {}; pass a positive number", init, o.init_scale);
  if (!positive(o.growth_factor) || o.growth_factor <= 1)
    return fmt::format("growth_factor is {}; pass a number above 1", o.growth_factor);
  if (!positive(o.backoff_factor) || o.backoff_factor >= 1)
    return fmt::format("backoff_factor is {}; pass a number in (0, 1)", o.backoff_factor);
  if (o.growth_interval < 1)
    return fmt::format("growth_interval is {}; pass 1 or more", o.growth_interval);
  return {};
}

constexpr const char* kStateKeys[] = {"scale",           "growth_factor",  "backoff_factor",
                                      "growth_interval", "growth_tracker", "skipped_steps"};

// |state| as options (init_scale: the scale) and the two counters, or the reason it is not.
struct ScalerState {
  GradScaler::Options options;
  std::int64_t growth_tracker = 0, skipped = 0;
  std::string error;
};

ScalerState parse_state(const std::map<std::string, std::string>& state) {
  ScalerState r;
  for (const auto& [k, v] : state)
    if (std::find(std::begin(kStateKeys), std::end(kStateKeys), k) == std::end(kStateKeys)) {
      r.error = fmt::format("'{}' is not part of a GradScaler's state (it has {})", k,
                            fmt::join(kStateKeys, ", "));
      return r;
    }
  auto number = [&](const char* key, double& out) {
    const auto it = state.find(key);
    const auto v = it == state.end() ? std::nullopt : detail::parse_number(it->second);
    if (!v && r.error.empty())
      r.error = it == state.end() ? fmt::format("'{}' is missing", key)
                                  : fmt::format("'{}' is '{}', not a number", key, it->second);
    if (v) out = *v;
  };
  auto count = [&](const char* key, std::int64_t& out, std::int64_t least) {
    const auto it = state.find(key);
    const auto v =
        it == state.end() ? std::nullopt : detail::parse_integer<std::int64_t>(it->second);
    if ((!v || *v < least) && r.error.empty())
      r.error = it == state.end()
                    ? fmt::format("'{}' is missing", key)
                    : fmt::format(
                          "'{}' is '{}', expected an integer of {} or more in decimal "
                          "digits",
                          key, it->second, least);
    if (v) out = *v;
  };
  number("scale", r.options.init_scale);
  number("growth_factor", r.options.growth_factor);
  number("backoff_factor", r.options.backoff_factor);
  count("growth_interval", r.options.growth_interval, 1);
  count("growth_tracker", r.growth_tracker, 0);
  count("skipped_steps", r.skipped, 0);
  if (r.error.empty()) r.error = options_error(r.options, "scale");
  return r;
}

}  // namespace

GradScaler::GradScaler() : GradScaler(Options{}) {}

GradScaler::GradScaler(Options options) : options_(options), scale_(options.init_scale) {
  if (const std::string e = options_error(options, "init_scale"); !e.empty())
    throw InvalidArgument("GradScaler: " + e);
}

std::map<std::string, std::string> GradScaler::state_dict() const {
  return {{"scale", fmt::format("{}", scale_)},
          {"growth_factor", fmt::format("{}", options_.growth_factor)},
          {"backoff_factor", fmt::format("{}", options_.backoff_factor)},
          {"growth_interval", std::to_string(options_.growth_interval)},
          {"growth_tracker", std::to_string(good_steps_)},
          {"skipped_steps", std::to_string(skipped_)}};
}

std::string GradScaler::check_state(const std::map<std::string, std::string>& state) {
  return parse_state(state).error;
}

void GradScaler::load_state_dict(const std::map<std::string, std::string>& state) {
  const ScalerState s = parse_state(state);
  if (!s.error.empty()) throw InvalidArgument("GradScaler::load_state_dict: " + s.error);
  options_.growth_factor = s.options.growth_factor;
  options_.backoff_factor = s.options.backoff_factor;
  options_.growth_interval = s.options.growth_interval;
  scale_ = s.options.init_scale;
  good_steps_ = s.growth_tracker;
  skipped_ = s.skipped;
  unscaled_ = false;
  found_inf_ = false;
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
