#include "tessera/train/optim.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "parse.h"
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

// The entries of an OptimizerState, checked against what an optimizer over |params| keeps:
// tensors only under the names |suffixes| give each parameter ("NAME.exp_avg"), each with the
// parameter's dtype and shape, no name twice, and values only under |value_keys|. Throws
// InvalidArgument naming the first entry that is not so.
class StateEntries {
 public:
  StateEntries(const OptimizerState& state, const std::vector<NamedParameter>& params,
               std::initializer_list<std::string_view> suffixes,
               std::initializer_list<std::string_view> value_keys)
      : state_(state) {
    std::map<std::string, const Tensor*> expected;
    for (const NamedParameter& p : params)
      for (std::string_view suffix : suffixes)
        expected[p.name + "." + std::string(suffix)] = &p.variable->value();
    for (const auto& [name, t] : state.tensors) {
      auto it = expected.find(name);
      if (it == expected.end())
        throw InvalidArgument(
            fmt::format("optimizer state '{}' is not a state of this optimizer (it keeps {} of "
                        "each parameter)",
                        name, fmt::join(suffixes, ", ")));
      const Tensor& param = *it->second;
      if (!t.defined() || t.dtype() != param.dtype() || !(t.shape() == param.shape()))
        throw InvalidArgument(fmt::format("optimizer state '{}' is {} {}, its parameter {} {}",
                                          name, t.defined() ? dtype_name(t.dtype()) : "undefined",
                                          t.defined() ? t.shape().str() : "",
                                          dtype_name(param.dtype()), param.shape().str()));
      if (!tensors_.emplace(name, &t).second)
        throw InvalidArgument(fmt::format("optimizer state '{}' appears twice", name));
    }
    for (const auto& [key, value] : state.values)
      if (std::find(value_keys.begin(), value_keys.end(), key) == value_keys.end())
        throw InvalidArgument(
            value_keys.size() == 0
                ? fmt::format("optimizer value '{}' is not a value of this optimizer (it keeps "
                              "none)",
                              key)
                : fmt::format("optimizer value '{}' is not a value of this optimizer (it keeps "
                              "{})",
                              key, fmt::join(value_keys, ", ")));
  }

  bool empty() const { return tensors_.empty(); }

  // A copy of tensor |name| on the device of |param|; undefined when absent and not |required|,
  // else InvalidArgument.
  Tensor take(const std::string& name, const Tensor& param, bool required) const {
    auto it = tensors_.find(name);
    if (it != tensors_.end()) return copy(it->second->to(param.device()));
    if (required) throw InvalidArgument(fmt::format("optimizer state '{}' is missing", name));
    return Tensor();
  }

  // Value |key| as a count of steps: decimal digits only, within int64.
  std::int64_t count(const std::string& key) const {
    auto it = state_.values.find(key);
    if (it == state_.values.end())
      throw InvalidArgument(fmt::format("optimizer value '{}' is missing", key));
    const auto v = detail::parse_integer<std::int64_t>(it->second);
    if (!v || *v < 0)
      throw InvalidArgument(
          fmt::format("optimizer value '{}' is '{}', not a count (0 or more, decimal digits)", key,
                      it->second));
    return *v;
  }

 private:
  const OptimizerState& state_;
  std::map<std::string, const Tensor*> tensors_;
};

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
  const StateEntries entries(state, params_, {"momentum_buffer"}, {});
  if (options_.momentum == 0 && !entries.empty())
    throw InvalidArgument(
        "optimizer state has momentum buffers, but this SGD has no momentum; resume with the "
        "momentum the checkpoint was written with");
  std::vector<Tensor> loaded(params_.size());
  // A parameter without a buffer has not taken a step yet.
  for (std::size_t i = 0; i < params_.size(); ++i)
    loaded[i] =
        entries.take(params_[i].name + ".momentum_buffer", params_[i].variable->value(), false);
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
  const StateEntries entries(state, params_, {"exp_avg", "exp_avg_sq"}, {"step"});
  const std::int64_t step = entries.count("step");
  // The moments are created by the first step: none before it, every one after it.
  if (step == 0 && !entries.empty())
    throw InvalidArgument(
        fmt::format("optimizer value 'step' is 0 but the state holds moments ('{}'); a state "
                    "with moments has taken at least one step",
                    state.tensors.front().first));
  std::vector<Tensor> m(params_.size()), v(params_.size());
  if (step > 0)
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].variable->value();
      m[i] = entries.take(params_[i].name + ".exp_avg", p, true);
      v[i] = entries.take(params_[i].name + ".exp_avg_sq", p, true);
    }
  step_ = step;
  m_ = std::move(m);
  v_ = std::move(v);
}

}  // namespace tessera::train
