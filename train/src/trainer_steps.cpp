#include "trainer_steps.h"

#include "tessera/train/clip_grad.h"
#include "tessera/train/lr_scheduler.h"

namespace tessera::train::detail {

void clip_gradients(Optimizer& optimizer, const std::string& algorithm, double value) {
  if (algorithm == "value")
    clip_grad_value_(optimizer.parameters(), value);
  else
    (void)clip_grad_norm_(optimizer.parameters(), value);  // the norm stays on the device
}

void scheduler_step(LRScheduler& scheduler) {
  scheduler.step();
}

std::map<std::string, std::string> scheduler_state(const LRScheduler& scheduler) {
  return scheduler.state();
}

void load_scheduler_state(LRScheduler& scheduler, const std::map<std::string, std::string>& state) {
  scheduler.load_state(state);
}

}  // namespace tessera::train::detail
