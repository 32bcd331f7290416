// Optimizers (torch.optim.SGD and Adam): each step is one fused kernel per parameter on the
// parameter's device (sgd_update / adam_update). State tensors are created on the first step,
// on the device the parameter then lives on.
#pragma once

#include <cstdint>
#include <map>
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

// Not thread-safe. The parameters must outlive the optimizer.
class Optimizer {
 public:
  explicit Optimizer(std::vector<NamedParameter> params);
  virtual ~Optimizer() = default;

  // Updates every parameter that has a gradient. Asynchronous like every op.
  virtual void step() = 0;
  // Drops every gradient (set_to_none).
  void zero_grad();
  virtual std::string name() const = 0;  // "sgd", "adam"
  virtual float lr() const = 0;
  virtual void set_lr(float lr) = 0;

  // The state to checkpoint, and loading it back. load_state checks every entry before it
  // changes anything: each tensor must be one this optimizer keeps for one of its parameters
  // (SGD: "NAME.momentum_buffer"; Adam: "NAME.exp_avg" and "NAME.exp_avg_sq"), with the
  // parameter's dtype and shape, given once; each value must be one it keeps (Adam: "step", a
  // count in decimal digits; SGD: none); counts agree with the tensors (Adam: no moments at step
  // 0, every parameter's moments after). Otherwise it throws InvalidArgument naming the entry and
  // what is wrong, and changes nothing.
  virtual OptimizerState state() const = 0;
  virtual void load_state(const OptimizerState& state) = 0;

  const std::vector<NamedParameter>& parameters() const { return params_; }

 protected:
  std::vector<NamedParameter> params_;
};

struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0;
  float dampening = 0;
  float weight_decay = 0;
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<NamedParameter> params, SgdOptions options);
  void step() override;
  std::string name() const override { return "sgd"; }
  float lr() const override { return options_.lr; }
  void set_lr(float lr) override { options_.lr = lr; }
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
};

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
};

class Adam final : public Optimizer {
 public:
  Adam(std::vector<NamedParameter> params, AdamOptions options);
  void step() override;
  std::string name() const override { return "adam"; }
  float lr() const override { return options_.lr; }
  void set_lr(float lr) override { options_.lr = lr; }
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 private:
  AdamOptions options_;
  std::int64_t step_ = 0;
  std::vector<Tensor> m_, v_;
};

}  // namespace tessera::train
