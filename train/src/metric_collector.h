// What LightningModule::log records during a fit: values still on the device are kept and read
// back together (one copy per device) when the Trainer flushes, every log_every_n_steps batches
// and at the end of an epoch or validation run, so the host does not wait for the device each step.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessera/tensor.h"
#include "tessera/train/lightning.h"

namespace tessera::train {

class MetricCollector {
 public:
  // A running sum for an epoch mean: sum of value * weight, and of weights.
  struct Sum {
    double sum = 0, weight = 0;
  };

  // Starts a run of batches: |training| picks log()'s defaults (training_step's or
  // validation_step's); epoch sums and step values start empty.
  void begin(bool training);
  // The size of the batch whose step is running (the default weight of a logged value).
  void set_batch_size(std::int64_t n) { batch_size_ = n; }
  // log() of |name|: a device tensor (|value| defined) or |host|.
  void log(const std::string& name, const Tensor& value, double host, const LogOptions& options);
  // The loss a training_step returned, for the progress bar's running mean.
  void add_loss(const Tensor& loss, double weight);

  // Reads back everything pending. Returns false when a loss read back is not finite.
  bool flush();
  // The latest read-back value of each on-step metric.
  const std::map<std::string, double>& step_values() const { return step_values_; }
  // Weighted means of the on-epoch metrics (after flush()).
  std::map<std::string, double> epoch_values() const;
  // Mean of the losses read back since begin(); NaN when none.
  double mean_loss() const;
  // Names logged with prog_bar (their keys), for the progress bar.
  const std::set<std::string>& prog_bar() const { return prog_bar_; }
  // Every key logged since begin().
  const std::set<std::string>& keys() const { return keys_; }

  // The epoch sums, for a checkpoint taken within an epoch, and restoring them.
  const std::map<std::string, Sum>& sums() const { return sums_; }
  void restore(std::map<std::string, Sum> sums, Sum loss);
  Sum loss_sum() const { return loss_; }

 private:
  struct Pending {
    std::string step_key, epoch_key;  // empty when not recorded that way
    Tensor value;                     // undefined: |host| holds it
    double host = 0, weight = 0;
    bool is_loss = false;
  };
  bool training_ = true;
  std::int64_t batch_size_ = 0;
  std::vector<Pending> pending_;
  std::map<std::string, double> step_values_;
  std::map<std::string, Sum> sums_;
  Sum loss_;
  std::set<std::string> prog_bar_, keys_;
};

}  // namespace tessera::train
