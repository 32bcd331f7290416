#include "tessera/train/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "parse.h"
#include "tessera/errors.h"

namespace tessera::train {

namespace {

constexpr double kPi = std::numbers::pi;

std::string number(double v) {
  return fmt::format("{}", v);
}

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

bool finite_non_negative(double v) {
  return v >= 0 && std::isfinite(v);
}

const std::string& value_of(const SchedulerState& s, const std::string& key,
                            const std::string& who) {
  auto it = s.find(key);
  if (it == s.end()) throw InvalidArgument(fmt::format("{} state: '{}' is missing", who, key));
  return it->second;
}

std::int64_t count_of(const SchedulerState& s, const std::string& key, const std::string& who,
                      std::int64_t min) {
  const std::string& text = value_of(s, key, who);
  const auto v = detail::parse_integer<std::int64_t>(text);
  if (!v || *v < min)
    throw InvalidArgument(
        fmt::format("{} state: '{}' is '{}', expected an integer of {} or more in decimal digits",
                    who, key, text, min));
  return *v;
}

double lr_of(const SchedulerState& s, const std::string& key, const std::string& who) {
  const std::string& text = value_of(s, key, who);
  const auto v = detail::parse_number(text);
  if (!v || *v < 0)
    throw InvalidArgument(fmt::format(
        "{} state: '{}' is '{}', expected a finite non-negative number", who, key, text));
  return *v;
}

std::string indexed(const char* what, std::size_t i) {
  return fmt::format("{}.{}", what, i);
}

// Python's a % b for b > 0 (never negative).
std::int64_t floor_mod(std::int64_t a, std::int64_t b) {
  const std::int64_t r = a % b;
  return r < 0 ? r + b : r;
}

}  // namespace

// --- LRScheduler ---

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  const auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].initial_lr) optimizer.set_initial_lr(g, groups[g].lr);
    base_lrs_.push_back(*optimizer.param_groups()[g].initial_lr);
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  advance(last_epoch_ + 1, false);
}

void LRScheduler::step_to(std::int64_t epoch) {
  advance(epoch, true);
}

void LRScheduler::advance(std::int64_t epoch, bool closed_form) {
  const std::int64_t last_epoch = last_epoch_, step_count = step_count_;
  std::vector<double> values;
  try {
    ++step_count_;
    last_epoch_ = epoch;
    std::optional<std::vector<double>> closed;
    if (closed_form) closed = closed_form_lr();
    values = closed ? std::move(*closed) : get_lr();
    const std::size_t groups = optimizer_.param_groups().size();
    require(values.size() == groups,
            fmt::format("{}: the schedule gave {} lrs for {} parameter groups", name(),
                        values.size(), groups));
    for (std::size_t g = 0; g < groups; ++g)
      require(finite_non_negative(values[g]),
              fmt::format("{}: the lr of group {} at step {} is {}, expected a finite "
                          "non-negative number",
                          name(), g, epoch, values[g]));
  } catch (...) {
    last_epoch_ = last_epoch;
    step_count_ = step_count;
    throw;
  }
  for (std::size_t g = 0; g < values.size(); ++g) optimizer_.set_lr(g, values[g]);
  last_lr_ = std::move(values);
}

SchedulerState LRScheduler::state() const {
  SchedulerState s = settings();
  s["type"] = name();
  s["last_epoch"] = std::to_string(last_epoch_);
  s["step_count"] = std::to_string(step_count_);
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    s[indexed("base_lrs", g)] = number(base_lrs_[g]);
    s[indexed("last_lr", g)] = number(last_lr_[g]);
  }
  return s;
}

void LRScheduler::check_extra_state(const SchedulerState&, std::set<std::string>&) const {}
void LRScheduler::apply_extra_state(const SchedulerState&) {}

void LRScheduler::check_state(const SchedulerState& s) const {
  const std::string who = name();
  const std::string& type = value_of(s, "type", who);
  require(type == who, fmt::format("{} state: 'type' is '{}'; this is the state of another "
                                   "scheduler, resume with the one it was written by",
                                   who, type));
  std::set<std::string> known{"type", "last_epoch", "step_count"};
  count_of(s, "last_epoch", who, -1);  // -1: a SequentialLR's scheduler not started yet
  count_of(s, "step_count", who, 1);
  for (std::size_t g = 0; g < base_lrs_.size(); ++g)
    for (const char* what : {"base_lrs", "last_lr"}) {
      known.insert(indexed(what, g));
      lr_of(s, indexed(what, g), who);
    }
  for (const auto& [key, mine] : settings()) {
    known.insert(key);
    const std::string& theirs = value_of(s, key, who);
    require(theirs == mine,
            fmt::format("{} state: '{}' is '{}', this scheduler's is '{}'; resume with the "
                        "settings the state was written with",
                        who, key, theirs, mine));
  }
  check_extra_state(s, known);
  for (const auto& [key, value] : s)
    require(known.count(key) != 0,
            fmt::format("{} state: '{}' is not part of this scheduler's state (with {} parameter "
                        "groups it keeps {})",
                        who, key, base_lrs_.size(), fmt::join(known, ", ")));
}

void LRScheduler::load_state(const SchedulerState& s) {
  check_state(s);
  const std::string who = name();
  last_epoch_ = count_of(s, "last_epoch", who, -1);
  step_count_ = count_of(s, "step_count", who, 1);
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    base_lrs_[g] = lr_of(s, indexed("base_lrs", g), who);
    last_lr_[g] = lr_of(s, indexed("last_lr", g), who);
  }
  apply_extra_state(s);
}

// --- StepLR, MultiStepLR ---

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  require(step_size >= 1, fmt::format("StepLR: step_size is {}, expected 1 or more", step_size));
  require(finite_non_negative(gamma),
          fmt::format("StepLR: gamma is {}, expected a finite non-negative number", gamma));
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> out;
  for (const ParamGroup& g : optimizer_.param_groups())
    out.push_back(last_epoch_ == 0 || last_epoch_ % step_size_ != 0 ? g.lr : g.lr * gamma_);
  return out;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  std::vector<double> out;
  for (double base : base_lrs_)
    out.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_)));
  return out;
}

SchedulerState StepLR::settings() const {
  return {{"step_size", std::to_string(step_size_)}, {"gamma", number(gamma_)}};
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<std::int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  require(milestones_.empty() || milestones_.front() >= 0,
          fmt::format("MultiStepLR: milestones [{}] include a negative one",
                      fmt::join(milestones_, ", ")));
  require(finite_non_negative(gamma),
          fmt::format("MultiStepLR: gamma is {}, expected a finite non-negative number", gamma));
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  const auto times = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  std::vector<double> out;
  for (const ParamGroup& g : optimizer_.param_groups())
    out.push_back(times == 0 ? g.lr : g.lr * std::pow(gamma_, static_cast<double>(times)));
  return out;
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return out;
}

SchedulerState MultiStepLR::settings() const {
  return {{"milestones", fmt::format("{}", fmt::join(milestones_, ","))},
          {"gamma", number(gamma_)}};
}

// --- CosineAnnealingLR, LinearLR ---

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  require(T_max >= 1, fmt::format("CosineAnnealingLR: T_max is {}, expected 1 or more", T_max));
  require(finite_non_negative(eta_min),
          fmt::format("CosineAnnealingLR: eta_min is {}, expected a finite non-negative number",
                      eta_min));
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  const auto& groups = optimizer_.param_groups();
  const double e = static_cast<double>(last_epoch_), t = static_cast<double>(t_max_);
  std::vector<double> out;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double lr = groups[g].lr, base = base_lrs_[g];
    if (last_epoch_ == 0)
      out.push_back(lr);
    else if (step_count_ == 1 && last_epoch_ > 0)
      out.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(e * kPi / t)) / 2);
    else if (floor_mod(last_epoch_ - 1 - t_max_, 2 * t_max_) == 0)
      out.push_back(lr + (base - eta_min_) * (1 - std::cos(kPi / t)) / 2);
    else
      out.push_back((1 + std::cos(kPi * e / t)) / (1 + std::cos(kPi * (e - 1) / t)) *
                        (lr - eta_min_) +
                    eta_min_);
  }
  return out;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  const double e = static_cast<double>(last_epoch_), t = static_cast<double>(t_max_);
  std::vector<double> out;
  for (double base : base_lrs_)
    out.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * e / t)) / 2);
  return out;
}

SchedulerState CosineAnnealingLR::settings() const {
  return {{"T_max", std::to_string(t_max_)}, {"eta_min", number(eta_min_)}};
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   std::int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  require(start_factor > 0 && start_factor <= 1,
          fmt::format("LinearLR: start_factor is {}, expected a number in (0, 1]", start_factor));
  require(end_factor >= 0 && end_factor <= 1,
          fmt::format("LinearLR: end_factor is {}, expected a number in [0, 1]", end_factor));
  require(total_iters >= 1,
          fmt::format("LinearLR: total_iters is {}, expected 1 or more", total_iters));
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  const double d = end_factor_ - start_factor_;
  std::vector<double> out;
  for (const ParamGroup& g : optimizer_.param_groups()) {
    if (last_epoch_ == 0)
      out.push_back(g.lr * start_factor_);
    else if (last_epoch_ > total_iters_)
      out.push_back(g.lr);
    else
      out.push_back(g.lr * (1. + d / (static_cast<double>(total_iters_) * start_factor_ +
                                      static_cast<double>(last_epoch_ - 1) * d)));
  }
  return out;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  std::vector<double> out;
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  for (double base : base_lrs_)
    out.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * done /
                                              static_cast<double>(total_iters_)));
  return out;
}

SchedulerState LinearLR::settings() const {
  return {{"start_factor", number(start_factor_)},
          {"end_factor", number(end_factor_)},
          {"total_iters", std::to_string(total_iters_)}};
}

// --- OneCycleLR ---

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, std::int64_t total_steps,
                       OneCycleLROptions options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.param_groups().size(), max_lr),
                 total_steps, std::move(options)) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lr, std::int64_t total_steps,
                       OneCycleLROptions options)
    : LRScheduler(optimizer), total_steps_(total_steps), options_(std::move(options)) {
  const OneCycleLROptions& o = options_;
  require(
      total_steps >= 1,
      fmt::format("OneCycleLR: expected positive integer total_steps, but got {}", total_steps));
  require(
      o.pct_start >= 0 && o.pct_start <= 1,
      fmt::format("OneCycleLR: expected float between 0 and 1 pct_start, but got {}", o.pct_start));
  require(o.anneal_strategy == "cos" || o.anneal_strategy == "linear",
          fmt::format("OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got "
                      "'{}'",
                      o.anneal_strategy));
  const std::size_t groups = optimizer.param_groups().size();
  require(max_lr.size() == groups,
          fmt::format("OneCycleLR: expected {} values for max_lr, got {}", groups, max_lr.size()));
  for (double m : max_lr)
    require(finite_non_negative(m),
            fmt::format("OneCycleLR: max_lr {} is not a finite non-negative number", m));
  require(o.div_factor > 0 && std::isfinite(o.div_factor) && o.final_div_factor > 0 &&
              std::isfinite(o.final_div_factor),
          fmt::format("OneCycleLR: div_factor ({}) and final_div_factor ({}) must be positive",
                      o.div_factor, o.final_div_factor));
  const double t = static_cast<double>(total_steps);
  if (o.three_phase)
    phases_ = {{o.pct_start * t - 1, 0, 1, true, false},
               {2 * o.pct_start * t - 2, 1, 0, false, true},
               {t - 1, 0, 2, true, true}};
  else
    phases_ = {{o.pct_start * t - 1, 0, 1, true, false}, {t - 1, 1, 2, false, true}};
  if (o.cycle_momentum) {
    const std::optional<double> before = optimizer.momentum();
    require(before.has_value(),
            fmt::format("OneCycleLR: optimizer '{}' has no momentum (or beta1) to cycle; pass "
                        "cycle_momentum = false",
                        optimizer.name()));
    try {  // both momenta must be ones the optimizer takes
      optimizer.set_momentum(o.base_momentum);
      optimizer.set_momentum(o.max_momentum);
    } catch (...) {
      optimizer.set_momentum(*before);
      throw;
    }
  }
  for (std::size_t g = 0; g < groups; ++g) {
    const double initial = max_lr[g] / o.div_factor;
    lrs_.push_back({initial, max_lr[g], initial / o.final_div_factor});
    optimizer.set_initial_lr(g, initial);
    base_lrs_[g] = initial;
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "cos") {
    const double cos_out = std::cos(kPi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::get_lr() {
  const std::int64_t step_num = last_epoch_;
  if (step_num > total_steps_)
    throw InvalidArgument(
        fmt::format("OneCycleLR: tried to step {} times. The specified number of total steps is {}",
                    step_num + 1, total_steps_));
  const double s = static_cast<double>(step_num);
  std::vector<double> out;
  double momentum = 0;
  for (const std::vector<double>& lrs : lrs_) {
    double start_step = 0;
    for (std::size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (s <= phase.end_step || i == phases_.size() - 1) {
        const double span = phase.end_step - start_step;
        require(span != 0,
                fmt::format("OneCycleLR: phase {} of the schedule has no steps (pct_start {} of "
                            "total_steps {}), so step {} divides by zero",
                            i, options_.pct_start, total_steps_, step_num));
        const double pct = (s - start_step) / span;
        out.push_back(anneal(lrs[phase.start_lr], lrs[phase.end_lr], pct));
        momentum =
            anneal(phase.start_max_momentum ? options_.max_momentum : options_.base_momentum,
                   phase.end_max_momentum ? options_.max_momentum : options_.base_momentum, pct);
        break;
      }
      start_step = phase.end_step;
    }
  }
  if (options_.cycle_momentum) optimizer_.set_momentum(momentum);
  return out;
}

SchedulerState OneCycleLR::settings() const {
  const OneCycleLROptions& o = options_;
  SchedulerState s{{"total_steps", std::to_string(total_steps_)},
                   {"pct_start", number(o.pct_start)},
                   {"anneal_strategy", o.anneal_strategy},
                   {"cycle_momentum", o.cycle_momentum ? "true" : "false"},
                   {"base_momentum", number(o.base_momentum)},
                   {"max_momentum", number(o.max_momentum)},
                   {"div_factor", number(o.div_factor)},
                   {"final_div_factor", number(o.final_div_factor)},
                   {"three_phase", o.three_phase ? "true" : "false"}};
  for (std::size_t g = 0; g < lrs_.size(); ++g) s[indexed("max_lr", g)] = number(lrs_[g][1]);
  return s;
}

// --- SequentialLR ---

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<std::int64_t> milestones)
    : LRScheduler(optimizer),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  require(!schedulers_.empty(), "SequentialLR: expects at least one scheduler");
  for (std::size_t i = 0; i < schedulers_.size(); ++i) {
    require(schedulers_[i] != nullptr, fmt::format("SequentialLR: scheduler {} is null", i));
    require(&schedulers_[i]->optimizer() == &optimizer,
            fmt::format("SequentialLR: expects all schedulers to belong to the same optimizer, "
                        "but got scheduler at index {} to be different than the optimizer "
                        "passed in",
                        i));
  }
  require(milestones_.size() + 1 == schedulers_.size(),
          fmt::format("SequentialLR: expects number of schedulers provided to be one more than "
                      "the number of milestone points, but got number of schedulers {} and the "
                      "number of milestones to be equal to {}",
                      schedulers_.size(), milestones_.size()));
  for (std::size_t i = 0; i < milestones_.size(); ++i)
    require(milestones_[i] >= 1 && (i == 0 || milestones_[i] > milestones_[i - 1]),
            fmt::format("SequentialLR: milestones [{}] must increase from 1",
                        fmt::join(milestones_, ", ")));
  last_epoch_ = 0;
  const auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) optimizer.set_lr(g, *groups[g].initial_lr);
  for (const auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_.front()->initial_step();
  last_lr_ = schedulers_.front()->get_last_lr();
  step_count_ = 1;
}

void SequentialLR::step() {
  const std::int64_t epoch = last_epoch_ + 1;
  const auto idx = static_cast<std::size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == epoch)
    s.step_to(0);
  else
    s.step();
  last_epoch_ = epoch;
  ++step_count_;
  last_lr_ = s.get_last_lr();
}

SchedulerState SequentialLR::settings() const {
  SchedulerState s{{"milestones", fmt::format("{}", fmt::join(milestones_, ","))}};
  for (std::size_t i = 0; i < schedulers_.size(); ++i)
    s[indexed("schedulers", i) + ".type"] = schedulers_[i]->name();
  return s;
}

SchedulerState SequentialLR::state() const {
  SchedulerState s = LRScheduler::state();
  for (std::size_t i = 0; i < schedulers_.size(); ++i)
    for (const auto& [key, value] : schedulers_[i]->state())
      s[indexed("schedulers", i) + "." + key] = value;
  return s;
}

namespace {

// The entries of |s| under |prefix|, without it.
SchedulerState under(const SchedulerState& s, const std::string& prefix) {
  SchedulerState out;
  for (auto it = s.lower_bound(prefix); it != s.end() && it->first.starts_with(prefix); ++it)
    out[it->first.substr(prefix.size())] = it->second;
  return out;
}

}  // namespace

void SequentialLR::check_extra_state(const SchedulerState& s, std::set<std::string>& known) const {
  for (std::size_t i = 0; i < schedulers_.size(); ++i) {
    const std::string prefix = indexed("schedulers", i) + ".";
    const SchedulerState sub = under(s, prefix);
    try {
      schedulers_[i]->check_state(sub);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(
          fmt::format("SequentialLR state, scheduler {} ('{}*'): {}", i, prefix, e.what()));
    }
    for (const auto& [key, value] : sub) known.insert(prefix + key);
  }
}

void SequentialLR::apply_extra_state(const SchedulerState& s) {
  for (std::size_t i = 0; i < schedulers_.size(); ++i)
    schedulers_[i]->load_state(under(s, indexed("schedulers", i) + "."));
}

// --- LambdaLR ---

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lr_lambdas)) {
  require(lambdas_.size() == base_lrs_.size(),
          fmt::format("LambdaLR: expected {} lr_lambdas, but got {}", base_lrs_.size(),
                      lambdas_.size()));
  for (std::size_t g = 0; g < lambdas_.size(); ++g)
    require(static_cast<bool>(lambdas_[g]), fmt::format("LambdaLR: lr_lambda {} is empty", g));
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> out;
  for (std::size_t g = 0; g < lambdas_.size(); ++g)
    out.push_back(base_lrs_[g] * lambdas_[g](last_epoch_));
  return out;
}

}  // namespace tessera::train
