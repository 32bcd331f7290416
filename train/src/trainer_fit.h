// Inside the Trainer: the state of one fit call (trainer.cpp and trainer_fit.cpp share it) and
// the agreement of metrics and decisions across the processes of a job.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "metric_collector.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

using TrainerClock = std::chrono::steady_clock;

// The state of one fit call.
struct Trainer::Fit {
  DataLoader* train = nullptr;
  MetricCollector metrics, val_metrics;
  std::int64_t num_batches = 0;      // training batches per epoch (after the limit)
  std::int64_t val_check_batch = 0;  // validate after every this many batches
  TrainerClock::time_point epoch_start;
  std::int64_t epoch_samples = 0;       // this process's samples trained since epoch_start
  std::int64_t validated_at_step = -1;  // global_step of the latest validation
};

// LightningModule's private links are the Trainer's to set (a friend); Attach forwards.
struct TrainerAccess {
  static void set(LightningModule& m, Trainer* t, MetricCollector* metrics) {
    m.trainer_ = t;
    m.metrics_ = metrics;
  }
};

namespace detail {

inline double seconds_since(TrainerClock::time_point t0) {
  return std::chrono::duration<double>(TrainerClock::now() - t0).count();
}

inline std::int64_t limited(std::int64_t n, std::int64_t limit) {
  return limit > 0 ? std::min(n, limit) : n;
}

inline TensorBatch to_device(TensorBatch b, Device& device) {
  for (Tensor& t : b.tensors) t = t.to(device);
  return b;
}

// The module knows the Trainer and logs into |metrics| while it lives.
struct Attach {
  LightningModule& m;
  Attach(LightningModule& module, Trainer* t, MetricCollector* metrics) : m(module) {
    set(t, metrics);
  }
  ~Attach() { set(nullptr, nullptr); }
  void set(Trainer* t, MetricCollector* metrics) { TrainerAccess::set(m, t, metrics); }
};

// |sums| and |loss| summed over the processes of |strategy| (in place). Every process must hold
// the same metric names (each process's module logs the same ones); DistributedError naming
// |what| otherwise. Nothing happens for one process.
void reduce_metric_sums(Strategy& strategy, std::map<std::string, MetricCollector::Sum>& sums,
                        MetricCollector::Sum& loss, const char* what);

// The highest |value| over the processes (a flag: 0 for none; a rank + 1 to say which one).
double reduce_max(Strategy& strategy, double value);

}  // namespace detail
}  // namespace tessera::train
