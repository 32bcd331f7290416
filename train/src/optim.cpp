#include "tessera/train/optim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "parse.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::train {

namespace {

std::vector<ParamGroupOptions> one_group(std::vector<NamedParameter> params) {
  std::vector<ParamGroupOptions> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

void check_hyper(std::string_view what, std::size_t group, double value) {
  if (!(value >= 0) || !std::isfinite(value))
    throw InvalidArgument(fmt::format(
        "parameter group {}: {} is {}, expected a finite non-negative number", group, what, value));
}

std::string joined_names(const std::vector<NamedParameter>& params) {
  std::string out;
  for (const NamedParameter& p : params) out += (out.empty() ? "" : ",") + p.name;
  return out;
}

std::string group_key(std::size_t group, std::string_view what) {
  return fmt::format("param_groups.{}.{}", group, what);
}

}  // namespace

Optimizer::Optimizer(std::vector<NamedParameter> params, double lr, double weight_decay)
    : Optimizer(one_group(std::move(params)), lr, weight_decay) {}

Optimizer::Optimizer(std::vector<ParamGroupOptions> groups, double lr, double weight_decay) {
  std::set<std::string> names;
  std::set<const Node*> nodes;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ParamGroupOptions& o = groups[g];
    if (o.params.empty() && groups.size() > 1)
      throw InvalidArgument(fmt::format("parameter group {} has no parameters", g));
    ParamGroup group{std::move(o.params), o.lr.value_or(lr), o.weight_decay.value_or(weight_decay),
                     std::nullopt};
    check_hyper("lr", g, group.lr);
    check_hyper("weight_decay", g, group.weight_decay);
    for (const NamedParameter& p : group.params) {
      if (!p.variable || !p.variable->defined() || !p.variable->requires_grad() ||
          !p.variable->is_leaf())
        throw InvalidArgument(
            fmt::format("parameter '{}' is not a leaf Variable that requires grad", p.name));
      if (!names.insert(p.name).second || !nodes.insert(p.variable->node().get()).second)
        throw InvalidArgument(fmt::format(
            "parameter '{}' appears twice (a parameter belongs to one group, once)", p.name));
      params_.push_back(p);
      group_index_.push_back(groups_.size());
    }
    groups_.push_back(std::move(group));
  }
  if (params_.empty()) throw InvalidArgument("an optimizer needs at least one parameter");
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const NamedParameter& p : params_) {
    if (set_to_none) {
      p.variable->zero_grad();
      continue;
    }
    // A new zero tensor rather than zeroing in place: backward() may hand two leaves one
    // gradient tensor, and a parameter outside this optimizer must keep its gradient.
    Tensor& g = p.variable->mutable_grad();
    if (g.defined()) g = Tensor::full(g.shape(), 0.0, g.dtype(), &g.device());
  }
}

void Optimizer::check_group(std::size_t group) const {
  if (group >= groups_.size())
    throw InvalidArgument(fmt::format("parameter group {} does not exist (the optimizer has {})",
                                      group, groups_.size()));
}

void Optimizer::set_lr(double lr) {
  for (std::size_t g = 0; g < groups_.size(); ++g) check_hyper("lr", g, lr);
  for (ParamGroup& g : groups_) g.lr = lr;
}

void Optimizer::set_lr(std::size_t group, double lr) {
  check_group(group);
  check_hyper("lr", group, lr);
  groups_[group].lr = lr;
}

void Optimizer::set_weight_decay(std::size_t group, double weight_decay) {
  check_group(group);
  check_hyper("weight_decay", group, weight_decay);
  groups_[group].weight_decay = weight_decay;
}

void Optimizer::set_initial_lr(std::size_t group, double lr) {
  check_group(group);
  check_hyper("initial_lr", group, lr);
  groups_[group].initial_lr = lr;
}

void Optimizer::set_momentum(double) {
  throw InvalidArgument(fmt::format("optimizer '{}' has no momentum to set", name()));
}

void Optimizer::write_group_values(OptimizerState& s) const {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    s.values[group_key(g, "lr")] = fmt::format("{}", groups_[g].lr);
    s.values[group_key(g, "weight_decay")] = fmt::format("{}", groups_[g].weight_decay);
    s.values[group_key(g, "params")] = joined_names(groups_[g].params);
  }
}

std::vector<std::string> Optimizer::group_value_keys() const {
  std::vector<std::string> keys;
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (const char* what : {"lr", "weight_decay", "params"}) keys.push_back(group_key(g, what));
  return keys;
}

namespace {

const std::string& state_value(const OptimizerState& s, const std::string& key) {
  auto it = s.values.find(key);
  if (it == s.values.end())
    throw InvalidArgument(fmt::format("optimizer value '{}' is missing", key));
  return it->second;
}

// Value |key| of |s| as a finite number in [low, high).
double state_number(const OptimizerState& s, const std::string& key, double low, double high) {
  const std::string& text = state_value(s, key);
  const auto v = detail::parse_number(text);
  if (!v || *v < low || *v >= high)
    throw InvalidArgument(
        fmt::format("optimizer value '{}' is '{}', expected a finite number in [{}, {})", key, text,
                    low, high));
  return *v;
}

// The entries of an OptimizerState, checked against what an optimizer over |params| keeps:
// tensors only under the names |suffixes| give each parameter ("NAME.exp_avg"), each with the
// parameter's dtype and shape, no name twice, and values only under |value_keys|, every one of
// them present. Throws InvalidArgument naming the first entry that is not so.
class StateEntries {
 public:
  StateEntries(const OptimizerState& state, const std::vector<NamedParameter>& params,
               std::initializer_list<std::string_view> suffixes,
               const std::vector<std::string>& value_keys)
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
            fmt::format("optimizer value '{}' is not a value of this optimizer (it keeps {})", key,
                        fmt::join(value_keys, ", ")));
    for (const std::string& key : value_keys)
      if (!state.values.count(key))
        throw InvalidArgument(fmt::format("optimizer value '{}' is missing", key));
  }

  bool empty() const { return tensors_.empty(); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  // A copy of tensor |name| on the device of |param|; undefined when absent and not |required|,
  // else InvalidArgument.
  Tensor take(const std::string& name, const Tensor& param, bool required) const {
    auto it = tensors_.find(name);
    if (it != tensors_.end()) return copy(it->second->to(param.device()));
    if (required) throw InvalidArgument(fmt::format("optimizer state '{}' is missing", name));
    return Tensor();
  }

  const std::string& value(const std::string& key) const { return state_value(state_, key); }

  // Value |key| as a count of steps: decimal digits only, within int64.
  std::int64_t count(const std::string& key) const {
    const auto v = detail::parse_integer<std::int64_t>(value(key));
    if (!v || *v < 0)
      throw InvalidArgument(
          fmt::format("optimizer value '{}' is '{}', not a count (0 or more, decimal digits)", key,
                      value(key)));
    return *v;
  }

  double number(const std::string& key, double low, double high) const {
    return state_number(state_, key, low, high);
  }

 private:
  const OptimizerState& state_;
  std::map<std::string, const Tensor*> tensors_;
};

constexpr double kNoLimit = std::numeric_limits<double>::infinity();

Tensor zeros_like(const Tensor& t) {
  return Tensor::full(t.shape(), 0.0, t.dtype(), &t.device());
}

std::vector<std::string> with(std::vector<std::string> keys,
                              std::initializer_list<const char*> more) {
  keys.insert(keys.end(), more.begin(), more.end());
  return keys;
}

}  // namespace

std::vector<std::pair<double, double>> Optimizer::read_group_values(const OptimizerState& s) const {
  std::vector<std::pair<double, double>> out;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string names = joined_names(groups_[g].params);
    const std::string& given = state_value(s, group_key(g, "params"));
    if (given != names)
      throw InvalidArgument(fmt::format(
          "optimizer value '{}' is '{}', but group {} of this optimizer holds '{}'; resume with "
          "the same parameter groups",
          group_key(g, "params"), given, g, names));
    out.emplace_back(state_number(s, group_key(g, "lr"), 0, kNoLimit),
                     state_number(s, group_key(g, "weight_decay"), 0, kNoLimit));
  }
  return out;
}

void Optimizer::apply_group_values(const std::vector<std::pair<double, double>>& values) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = values[g].first;
    groups_[g].weight_decay = values[g].second;
  }
}

SGD::SGD(std::vector<NamedParameter> params, SgdOptions options)
    : SGD(one_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroupOptions> groups, SgdOptions options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay),
      options_(options),
      momentum_(params_.size()) {
  check_options();
}

void SGD::check_options() const {
  if (!(options_.momentum >= 0) || !std::isfinite(options_.momentum) ||
      !std::isfinite(options_.dampening))
    throw InvalidArgument(
        fmt::format("SGD: momentum ({}) must be finite and non-negative", options_.momentum));
  if (options_.nesterov && (options_.momentum <= 0 || options_.dampening != 0))
    throw InvalidArgument("SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::set_momentum(double momentum) {
  const SgdOptions before = options_;
  options_.momentum = momentum;
  try {
    check_options();
  } catch (...) {
    options_ = before;
    throw;
  }
}

void SGD::step() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Variable& var = *params_[i].variable;
    if (!var.grad().defined()) continue;
    const ParamGroup& group = group_of(i);
    Tensor p = var.value();
    SgdAttrs a{static_cast<float>(group.lr),
               static_cast<float>(options_.momentum),
               static_cast<float>(options_.dampening),
               static_cast<float>(group.weight_decay),
               options_.nesterov,
               false};
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
  write_group_values(s);
  s.values["momentum"] = fmt::format("{}", options_.momentum);
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (momentum_[i].defined())
      s.tensors.emplace_back(params_[i].name + ".momentum_buffer", momentum_[i]);
  return s;
}

void SGD::load_state(const OptimizerState& state) {
  const StateEntries entries(state, params_, {"momentum_buffer"},
                             with(group_value_keys(), {"momentum"}));
  const auto groups = read_group_values(state);
  const double momentum = entries.number("momentum", 0, kNoLimit);
  if (options_.nesterov && momentum == 0)
    throw InvalidArgument(
        "optimizer value 'momentum' is '0', but this SGD uses Nesterov momentum, which needs one");
  std::vector<Tensor> loaded(params_.size());
  // A parameter without a buffer has not taken a step with momentum yet.
  for (std::size_t i = 0; i < params_.size(); ++i)
    loaded[i] =
        entries.take(params_[i].name + ".momentum_buffer", params_[i].variable->value(), false);
  apply_group_values(groups);
  options_.momentum = momentum;
  momentum_ = std::move(loaded);
}

AdamBase::AdamBase(std::vector<ParamGroupOptions> groups, AdamOptions options, bool decoupled)
    : Optimizer(std::move(groups), options.lr, options.weight_decay),
      options_(options),
      decoupled_(decoupled),
      m_(params_.size()),
      v_(params_.size()) {
  const char* what = decoupled ? "AdamW" : "Adam";
  if (!(options.eps >= 0) || !std::isfinite(options.eps) ||
      !(options.beta1 >= 0 && options.beta1 < 1) || !(options.beta2 >= 0 && options.beta2 < 1))
    throw InvalidArgument(
        fmt::format("{}: eps ({}) must be finite and non-negative and betas ({}, {}) in [0, 1)",
                    what, options.eps, options.beta1, options.beta2));
}

void AdamBase::set_momentum(double beta1) {
  if (!(beta1 >= 0 && beta1 < 1))
    throw InvalidArgument(fmt::format("{}: beta1 {} is outside [0, 1)", name(), beta1));
  options_.beta1 = beta1;
}

void AdamBase::step() {
  ++step_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Variable& var = *params_[i].variable;
    if (!var.grad().defined()) continue;
    const ParamGroup& group = group_of(i);
    const AdamAttrs a{static_cast<float>(group.lr),           static_cast<float>(options_.beta1),
                      static_cast<float>(options_.beta2),     static_cast<float>(options_.eps),
                      static_cast<float>(group.weight_decay), step_};
    Tensor p = var.value();
    if (!m_[i].defined()) {
      m_[i] = zeros_like(p);
      v_[i] = zeros_like(p);
    }
    if (decoupled_)
      adamw_update_(p, var.grad(), m_[i], v_[i], a);
    else
      adam_update_(p, var.grad(), m_[i], v_[i], a);
  }
}

OptimizerState AdamBase::state() const {
  OptimizerState s;
  write_group_values(s);
  s.values["step"] = std::to_string(step_);
  s.values["beta1"] = fmt::format("{}", options_.beta1);
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (m_[i].defined()) {
      s.tensors.emplace_back(params_[i].name + ".exp_avg", m_[i]);
      s.tensors.emplace_back(params_[i].name + ".exp_avg_sq", v_[i]);
    }
  return s;
}

void AdamBase::load_state(const OptimizerState& state) {
  const StateEntries entries(state, params_, {"exp_avg", "exp_avg_sq"},
                             with(group_value_keys(), {"step", "beta1"}));
  const auto groups = read_group_values(state);
  const std::int64_t step = entries.count("step");
  const double beta1 = entries.number("beta1", 0, 1);
  // The moments are created by a parameter's first step: none before the first step, some
  // after it (a parameter that never had a gradient has none), each with its pair.
  if (step == 0 && !entries.empty())
    throw InvalidArgument(
        fmt::format("optimizer value 'step' is 0 but the state holds moments ('{}'); a state "
                    "with moments has taken at least one step",
                    state.tensors.front().first));
  if (step > 0 && entries.empty())
    throw InvalidArgument(
        fmt::format("optimizer value 'step' is {} but the state holds no moments ('NAME.exp_avg', "
                    "'NAME.exp_avg_sq'); a state that took steps has them",
                    step));
  std::vector<Tensor> m(params_.size()), v(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].variable->value();
    const std::string& n = params_[i].name;
    const bool has_m = entries.has(n + ".exp_avg"), has_v = entries.has(n + ".exp_avg_sq");
    if (!has_m && !has_v) continue;
    m[i] = entries.take(n + ".exp_avg", p, true);
    v[i] = entries.take(n + ".exp_avg_sq", p, true);
  }
  apply_group_values(groups);
  options_.beta1 = beta1;
  step_ = step;
  m_ = std::move(m);
  v_ = std::move(v);
}

Adam::Adam(std::vector<NamedParameter> params, AdamOptions options)
    : AdamBase(one_group(std::move(params)), options, false) {}
Adam::Adam(std::vector<ParamGroupOptions> groups, AdamOptions options)
    : AdamBase(std::move(groups), options, false) {}

namespace {
AdamOptions as_adam(const AdamWOptions& o) {
  return AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
}
}  // namespace

AdamW::AdamW(std::vector<NamedParameter> params, AdamWOptions options)
    : AdamBase(one_group(std::move(params)), as_adam(options), true) {}
AdamW::AdamW(std::vector<ParamGroupOptions> groups, AdamWOptions options)
    : AdamBase(std::move(groups), as_adam(options), true) {}

}  // namespace tessera::train
