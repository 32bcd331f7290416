#include "tessera/train/optim.h"

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::train {

Optimizer::Optimizer(std::vector<NamedParameter> params) : params_(std::move(params)) {
  if (params_.empty()) throw InvalidArgument("an optimizer needs at least one parameter");
  for (const NamedParameter& p : params_)
    if (!p.variable || !p.variable->defined() || !p.variable->requires_grad())
      throw InvalidArgument(
          fmt::format("parameter '{}' is not a leaf Variable that requires grad", p.name));
}

void Optimizer::zero_grad() {
  for (const NamedParameter& p : params_) p.variable->zero_grad();
}

namespace {

// A copy of state tensor |name| on the device of |param|, checked against its shape; undefined
// when absent and not |required|, else InvalidArgument.
Tensor state_for(const OptimizerState& state, const std::string& name, const Tensor& param,
                 bool required) {
  for (const auto& [n, t] : state.tensors)
    if (n == name) {
      if (!(t.shape() == param.shape()))
        throw InvalidArgument(fmt::format("optimizer state '{}' has shape {}, the parameter {}",
                                          name, t.shape().str(), param.shape().str()));
      return copy(t.to(param.device()));
    }
  if (required) throw InvalidArgument(fmt::format("optimizer state '{}' is missing", name));
  return Tensor();
}

std::int64_t find_int(const OptimizerState& state, const std::string& key) {
  auto it = state.values.find(key);
  if (it == state.values.end())
    throw InvalidArgument(fmt::format("optimizer value '{}' is missing", key));
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw InvalidArgument(
        fmt::format("optimizer value '{}' is not an integer: '{}'", key, it->second));
  }
}

Tensor zeros_like(const Tensor& t) {
  return Tensor::full(t.shape(), 0.0, t.dtype(), &t.device());
}

}  // namespace

SGD::SGD(std::vector<NamedParameter> params, SgdOptions options)
    : Optimizer(std::move(params)), options_(options), momentum_(params_.size()) {
  if (!(options.lr >= 0) || !(options.momentum >= 0) || !(options.weight_decay >= 0))
    throw InvalidArgument(
        fmt::format("SGD: lr ({}), momentum ({}) and weight_decay ({}) must be non-negative",
                    options.lr, options.momentum, options.weight_decay));
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0))
    throw InvalidArgument("SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Variable& var = *params_[i].variable;
    if (!var.grad().defined()) continue;
    Tensor p = var.value();
    SgdAttrs a{options_.lr,           options_.momentum, options_.dampening,
               options_.weight_decay, options_.nesterov, false};
    if (options_.momentum != 0) {
      if (!momentum_[i].defined()) {
        momentum_[i] = Tensor::empty(p.shape(), p.dtype(), &p.device());
        a.first_step = true;
      }
      sgd_update_(p, var.grad(), momentum_[i], a);
    } else {
      // Without momentum the kernel does not touch the buffer: the gradient stands in for it.
      Tensor unused = var.grad();
      sgd_update_(p, var.grad(), unused, a);
    }
  }
}

OptimizerState SGD::state() const {
  OptimizerState s;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (momentum_[i].defined())
      s.tensors.emplace_back(params_[i].name + ".momentum_buffer", momentum_[i]);
  return s;
}

void SGD::load_state(const OptimizerState& state) {
  std::vector<Tensor> loaded(params_.size());
  // A parameter without a buffer has not taken a step yet.
  for (std::size_t i = 0; i < params_.size(); ++i)
    loaded[i] =
        state_for(state, params_[i].name + ".momentum_buffer", params_[i].variable->value(), false);
  momentum_ = std::move(loaded);
}

Adam::Adam(std::vector<NamedParameter> params, AdamOptions options)
    : Optimizer(std::move(params)), options_(options), m_(params_.size()), v_(params_.size()) {
  if (!(options.lr >= 0) || !(options.eps >= 0) || !(options.weight_decay >= 0) ||
      !(options.beta1 >= 0 && options.beta1 < 1) || !(options.beta2 >= 0 && options.beta2 < 1))
    throw InvalidArgument(fmt::format(
        "Adam: lr ({}), eps ({}) and weight_decay ({}) must be non-negative and betas ({}, {}) "
        "in [0, 1)",
        options.lr, options.eps, options.weight_decay, options.beta1, options.beta2));
}

void Adam::step() {
  ++step_;
  const AdamAttrs a{options_.lr,  options_.beta1,        options_.beta2,
                    options_.eps, options_.weight_decay, step_};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Variable& var = *params_[i].variable;
    if (!var.grad().defined()) continue;
    Tensor p = var.value();
    if (!m_[i].defined()) {
      m_[i] = zeros_like(p);
      v_[i] = zeros_like(p);
    }
    adam_update_(p, var.grad(), m_[i], v_[i], a);
  }
}

OptimizerState Adam::state() const {
  OptimizerState s;
  s.values["step"] = std::to_string(step_);
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (m_[i].defined()) {
      s.tensors.emplace_back(params_[i].name + ".exp_avg", m_[i]);
      s.tensors.emplace_back(params_[i].name + ".exp_avg_sq", v_[i]);
    }
  return s;
}

void Adam::load_state(const OptimizerState& state) {
  const std::int64_t step = find_int(state, "step");
  std::vector<Tensor> m(params_.size()), v(params_.size());
  if (step > 0)
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].variable->value();
      m[i] = state_for(state, params_[i].name + ".exp_avg", p, true);
      v[i] = state_for(state, params_[i].name + ".exp_avg_sq", p, true);
    }
  step_ = step;
  m_ = std::move(m);
  v_ = std::move(v);
}

}  // namespace tessera::train
