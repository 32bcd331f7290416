#include "trainer_steps.h"

#include "tessera/errors.h"

namespace tessera::train::detail {

void clip_gradients(Optimizer&, const std::string&, double) {
  throw Error("gradient clipping: waiting for clip_grad_norm_");
}

void scheduler_step(LRScheduler&) {
  throw Error("scheduler: waiting for LRScheduler");
}

}  // namespace tessera::train::detail

namespace tessera::train::detail {

std::map<std::string, std::string> scheduler_state(const LRScheduler&) {
  return {};
}

void load_scheduler_state(LRScheduler&, const std::map<std::string, std::string>&) {}

}  // namespace tessera::train::detail
