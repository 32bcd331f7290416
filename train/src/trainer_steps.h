// The Trainer's calls into the optimisation library (gradient clipping, scheduler steps).
#pragma once

#include <map>
#include <string>

#include "tessera/train/optim.h"

namespace tessera::train {
class LRScheduler;
namespace detail {
// Clips the gradients of |optimizer|'s parameters: "norm" as clip_grad_norm_(max_norm = |value|),
// "value" as clip_grad_value_(|value|).
void clip_gradients(Optimizer& optimizer, const std::string& algorithm, double value);
void scheduler_step(LRScheduler& scheduler);
std::map<std::string, std::string> scheduler_state(const LRScheduler& scheduler);
// Throws InvalidArgument (changing nothing) for state the scheduler refuses.
void load_scheduler_state(LRScheduler& scheduler, const std::map<std::string, std::string>& state);
}  // namespace detail
}  // namespace tessera::train
