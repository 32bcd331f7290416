// Learning-rate schedulers as torch.optim.lr_scheduler (PyTorch 1.13): the same names, arguments,
// defaults and values. A scheduler writes each parameter group's lr (Optimizer::set_lr) when it
// is made and at every step(); call step() after the optimizer's step(), once per step or per
// epoch as the schedule is meant. Not thread-safe; the optimizer must outlive its schedulers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessera/train/optim.h"

namespace tessera::train {

// What a checkpoint stores of a scheduler: string keys and values.
using SchedulerState = std::map<std::string, std::string>;

// torch.optim.lr_scheduler._LRScheduler. Construction sets each group's initial_lr where unset
// (torch's group.setdefault('initial_lr', group['lr'])) and takes base_lrs from them; a derived
// class's constructor then takes the initial step (last_epoch 0), which writes the first lr.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances last_epoch by one and writes the schedule's lr of every group. Throws
  // InvalidArgument, changing nothing, when the schedule gives an lr that is negative or not
  // finite (a LambdaLR's function), or as the derived class says.
  virtual void step();
  // The lr of each group written by the last step (torch's get_last_lr()).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  // Steps taken since construction (0 after it).
  std::int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }
  // The class name, as torch's: "StepLR", "OneCycleLR", ...
  virtual std::string name() const = 0;

  // The state to checkpoint: "type" (name()), "last_epoch", "step_count", "base_lrs.N" and
  // "last_lr.N" per group, and the scheduler's settings (StepLR "step_size", "gamma", ...).
  // load_state checks every entry before it changes anything: the type is this scheduler's,
  // every key is known and present, counts are decimal digits, lrs finite non-negative numbers,
  // one per group, and the settings equal this scheduler's (a schedule is resumed with the
  // settings it was made with); otherwise InvalidArgument naming the key, its value and what was
  // expected. Loading does not write the optimizer's lr (torch's load_state_dict does not
  // either: the optimizer's own state holds it).
  virtual SchedulerState state() const;
  void load_state(const SchedulerState& state);

 protected:
  // torch's get_lr(): the lr of every group at last_epoch_ (already advanced), in the chainable
  // form that reads the groups' current lr where torch's does.
  virtual std::vector<double> get_lr() = 0;
  // torch's _get_closed_form_lr(), used by step_to (a SequentialLR's milestone); nullopt when
  // the scheduler has none (get_lr is used then).
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  // The settings state() writes and load_state requires equal, as strings.
  virtual SchedulerState settings() const { return {}; }
  // Checks the entries of |state| a derived class keeps beyond the base's and settings(),
  // adding their keys to |known|; apply_extra_state applies them after every check passed.
  virtual void check_extra_state(const SchedulerState& state, std::set<std::string>& known) const;
  virtual void apply_extra_state(const SchedulerState& state);

  // torch's _initial_step(): the step a derived constructor ends with.
  void initial_step();
  // torch's step(epoch): last_epoch_ = epoch, lrs from closed_form_lr() (else get_lr()).
  void step_to(std::int64_t epoch);
  // Checks |state| entirely (the contract of load_state), throwing InvalidArgument.
  void check_state(const SchedulerState& state) const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  std::int64_t last_epoch_ = -1;
  std::int64_t step_count_ = 0;

 private:
  void advance(std::int64_t epoch, bool closed_form);
  friend class SequentialLR;
};

// torch.optim.lr_scheduler.StepLR(optimizer, step_size, gamma=0.1): lr times gamma every
// step_size steps. InvalidArgument for step_size < 1 or gamma negative or not finite.
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  SchedulerState settings() const override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

// torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=0.1): lr times gamma at
// each milestone (a milestone given k times multiplies by gamma^k). InvalidArgument for a
// negative milestone or gamma negative or not finite.
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<std::int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  SchedulerState settings() const override;

 private:
  std::vector<std::int64_t> milestones_;  // sorted
  double gamma_;
};

// torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max, eta_min=0): in torch's recursive
// form, which gives eta_min + (base_lr - eta_min) (1 + cos(pi t / T_max)) / 2 when nothing else
// writes the lr. InvalidArgument for T_max < 1 or eta_min negative or not finite.
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min = 0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  SchedulerState settings() const override;

 private:
  std::int64_t t_max_;
  double eta_min_;
};

// torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1/3, end_factor=1.0, total_iters=5):
// lr times a factor going linearly from start_factor to end_factor over total_iters steps
// (warmup). InvalidArgument for start_factor outside (0, 1] (torch 1.13 takes 0 and then divides
// by zero), end_factor outside [0, 1] or total_iters < 1.
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           std::int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  SchedulerState settings() const override;

 private:
  double start_factor_, end_factor_;
  std::int64_t total_iters_;
};

// The options of OneCycleLR after total_steps, with torch's defaults.
struct OneCycleLROptions {
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  // or "linear"
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool three_phase = false;
};

// torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr, total_steps, pct_start=0.3,
// anneal_strategy='cos', cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
// div_factor=25., final_div_factor=1e4, three_phase=False) (epochs * steps_per_epoch: pass the
// product as total_steps). Starts at max_lr / div_factor, rises to max_lr over pct_start of the
// steps, then anneals to initial_lr / final_div_factor; with cycle_momentum the optimizer's
// momentum (SGD momentum, Adam/AdamW beta1) moves the opposite way between max_momentum and
// base_momentum. max_lr is one value or one per group. Sets each group's initial_lr. Throws
// InvalidArgument for total_steps < 1, pct_start outside [0, 1], another anneal_strategy, a
// max_lr count that is not the number of groups, a max_lr negative or not finite, div factors
// not positive, cycle_momentum on an optimizer without momentum or momenta it refuses. step()
// throws InvalidArgument, as torch raises, when last_epoch would pass total_steps: "Tried to
// step 12 times. The specified number of total steps is 10".
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, std::int64_t total_steps,
             OneCycleLROptions options = {});
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lr, std::int64_t total_steps,
             OneCycleLROptions options = {});
  std::string name() const override { return "OneCycleLR"; }

 protected:
  std::vector<double> get_lr() override;
  SchedulerState settings() const override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;  // 0 initial, 1 max, 2 min
    bool start_max_momentum, end_max_momentum;
  };
  double anneal(double start, double end, double pct) const;

  std::int64_t total_steps_;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
  std::vector<std::vector<double>> lrs_;  // per group: initial, max, min
};

// torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers, milestones): schedulers[i] runs
// from milestones[i-1] on (restarted at its epoch 0 there, from its closed form). The schedulers
// must be made on |optimizer| (before this). Construction resets every group's lr to its
// initial_lr, undoes the schedulers' initial steps and takes the first one's again, as torch
// does. State: its own plus each scheduler's under "schedulers.N.". Throws InvalidArgument for no
// scheduler, a null one or one of another optimizer, a milestone count other than
// schedulers - 1, or milestones that are not increasing from 1.
class SequentialLR final : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<std::int64_t> milestones);
  void step() override;
  std::string name() const override { return "SequentialLR"; }
  SchedulerState state() const override;

 protected:
  std::vector<double> get_lr() override { return last_lr_; }
  SchedulerState settings() const override;
  void check_extra_state(const SchedulerState& state, std::set<std::string>& known) const override;
  void apply_extra_state(const SchedulerState& state) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<std::int64_t> milestones_;
};

// torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda): base_lr * lr_lambda(last_epoch), one
// function for every group or one per group. Throws InvalidArgument for an empty function or a
// count other than the number of groups. The functions are not part of the state.
class LambdaLR final : public LRScheduler {
 public:
  using Lambda = std::function<double(std::int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);
  std::string name() const override { return "LambdaLR"; }

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<Lambda> lambdas_;
};

}  // namespace tessera::train
