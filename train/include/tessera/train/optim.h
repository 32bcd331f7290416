// Optimizers (torch.optim.SGD, Adam and AdamW) over parameter groups: each step is one fused
// kernel per parameter on the parameter's device (sgd_update / adam_update / adamw_update).
// State tensors are created on a parameter's first step, on the device it then lives on.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/op.h"
#include "tessera/train/layers.h"

namespace tessera::train {

// Named tensors and string values: what a checkpoint stores of an optimizer.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors;  // "0.weight.exp_avg", ...
  std::map<std::string, std::string> values;            // "step" -> "469", ...
};

// One parameter group, as an entry of torch.optim's optimizer.param_groups: its parameters and
// the hyperparameters that may differ between groups.
struct ParamGroup {
  std::vector<NamedParameter> params;
  double lr = 0;
  double weight_decay = 0;
  // The lr the first scheduler made on this optimizer started from (torch's
  // group['initial_lr'], which a scheduler sets when absent); unset until then.
  std::optional<double> initial_lr;
};

// A group as a constructor takes it (torch: {'params': [...], 'lr': 0.1}): options left unset
// take the optimizer's.
struct ParamGroupOptions {
  std::vector<NamedParameter> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// The base of every optimizer: its parameter groups, gradient reset and per-group learning rates.
// Not thread-safe. The parameters must outlive the optimizer.
class Optimizer {
 public:
  // One group of |params| with |lr| and |weight_decay|.
  explicit Optimizer(std::vector<NamedParameter> params, double lr = 0, double weight_decay = 0);
  // The groups in order; each group's unset options take |lr| and |weight_decay|.
  // Both throw InvalidArgument when there is no parameter at all, a group is empty, a parameter
  // is not a leaf Variable that requires grad, a name or Variable appears twice (in one group
  // or two), or an lr or weight_decay is negative or not finite (the message names the group).
  Optimizer(std::vector<ParamGroupOptions> groups, double lr, double weight_decay);
  virtual ~Optimizer() = default;

  // Updates every parameter that has a gradient. Asynchronous like every op.
  virtual void step() = 0;
  // torch.optim.Optimizer.zero_grad(set_to_none=True): drops every gradient; with false, sets
  // each existing gradient to a new zero tensor instead (parameters without one keep none; a
  // tensor taken from grad() before keeps its values, as backward() may share one gradient
  // tensor between leaves).
  void zero_grad(bool set_to_none = true);
  virtual std::string name() const = 0;  // "sgd", "adam", "adamw"

  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // The lr of group 0; set_lr(lr) sets every group's, set_lr(group, lr) one group's (what a
  // scheduler writes). InvalidArgument for a negative or non-finite lr or a group out of range.
  double lr() const { return groups_.front().lr; }
  void set_lr(double lr);
  void set_lr(std::size_t group, double lr);
  void set_weight_decay(std::size_t group, double weight_decay);
  // Sets group['initial_lr'] (schedulers do). Same errors as set_lr.
  void set_initial_lr(std::size_t group, double lr);

  // The momentum a scheduler may cycle (torch's OneCycleLR cycle_momentum): SGD's momentum,
  // Adam's and AdamW's beta1; nullopt for an optimizer without one, whose set_momentum throws
  // InvalidArgument. set_momentum throws InvalidArgument for a value the optimizer refuses
  // (SGD: negative, or 0 with Nesterov; Adam: outside [0, 1)).
  virtual std::optional<double> momentum() const { return std::nullopt; }
  virtual void set_momentum(double momentum);

  // The state to checkpoint, and loading it back. Values: per group "param_groups.N.lr",
  // "param_groups.N.weight_decay" and "param_groups.N.params" (its parameter names joined by
  // ','), and per optimizer: SGD "momentum"; Adam and AdamW "step" and "beta1". Tensors: SGD
  // "NAME.momentum_buffer", Adam and AdamW "NAME.exp_avg" and "NAME.exp_avg_sq", only for
  // parameters that have taken a step. load_state checks every entry before it changes anything:
  // each tensor must be one this optimizer keeps for one of its parameters, with the
  // parameter's dtype and shape, given once; each value must be one it keeps, and every one must
  // be there: counts in decimal digits, numbers finite and in the range the constructor accepts,
  // the groups holding the same parameters as this optimizer's; counts agree with the tensors
  // (Adam: no moments at step 0, some after, each parameter's two moments together). Otherwise
  // it throws InvalidArgument naming the entry and what is wrong, and changes nothing. Loading
  // sets the groups' lr and weight_decay and the momentum (as torch's load_state_dict does).
  virtual OptimizerState state() const = 0;
  virtual void load_state(const OptimizerState& state) = 0;

  // Every parameter, group after group.
  const std::vector<NamedParameter>& parameters() const { return params_; }

 protected:
  // The group of parameter |i| of parameters().
  const ParamGroup& group_of(std::size_t i) const { return groups_[group_index_[i]]; }
  // Writes the per-group values of state() into |s|, and the value keys load_state accepts
  // for them.
  void write_group_values(OptimizerState& s) const;
  std::vector<std::string> group_value_keys() const;
  // The (lr, weight_decay) of each group in |s|, checked as load_state says; apply with
  // apply_group_values once every other check has passed.
  std::vector<std::pair<double, double>> read_group_values(const OptimizerState& s) const;
  void apply_group_values(const std::vector<std::pair<double, double>>& values);

  std::vector<ParamGroup> groups_;
  std::vector<NamedParameter> params_;    // every group's, in order
  std::vector<std::size_t> group_index_;  // per parameter of params_

 private:
  void check_group(std::size_t group) const;
};

// torch.optim.SGD(params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False).
struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// Throws InvalidArgument for a negative lr, momentum or weight_decay, or Nesterov without a
// momentum or with dampening (and as Optimizer's constructors).
class SGD final : public Optimizer {
 public:
  SGD(std::vector<NamedParameter> params, SgdOptions options = {});
  SGD(std::vector<ParamGroupOptions> groups, SgdOptions options = {});
  void step() override;
  std::string name() const override { return "sgd"; }
  std::optional<double> momentum() const override { return options_.momentum; }
  void set_momentum(double momentum) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 private:
  void check_options() const;
  SgdOptions options_;            // lr and weight_decay live in the groups
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
};

// torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0): L2 decay
// added to the gradient.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

// torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
// decoupled decay, param *= 1 - lr * weight_decay before the Adam step.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// What Adam and AdamW share: one step counter for the optimizer, two moments per parameter.
// Throws InvalidArgument for a negative lr, eps or weight_decay or betas outside [0, 1).
class AdamBase : public Optimizer {
 public:
  void step() override;
  std::optional<double> momentum() const override { return options_.beta1; }
  void set_momentum(double beta1) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 protected:
  AdamBase(std::vector<ParamGroupOptions> groups, AdamOptions options, bool decoupled);

 private:
  AdamOptions options_;  // lr and weight_decay live in the groups
  bool decoupled_;
  std::int64_t step_ = 0;
  std::vector<Tensor> m_, v_;
};

class Adam final : public AdamBase {
 public:
  Adam(std::vector<NamedParameter> params, AdamOptions options = {});
  Adam(std::vector<ParamGroupOptions> groups, AdamOptions options = {});
  std::string name() const override { return "adam"; }
};

class AdamW final : public AdamBase {
 public:
  AdamW(std::vector<NamedParameter> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroupOptions> groups, AdamWOptions options = {});
  std::string name() const override { return "adamw"; }
};

}  // namespace tessera::train
