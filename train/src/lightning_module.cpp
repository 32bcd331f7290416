#include <cmath>

#include <fmt/format.h>

#include "metric_collector.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/lightning.h"

namespace tessera::train {

void LightningModule::validation_step(const TensorBatch&, std::int64_t) {}

void LightningModule::log(const std::string& name, const Variable& value, LogOptions options) {
  log(name, value.value(), options);
}

void LightningModule::log(const std::string& name, const Tensor& value, LogOptions options) {
  if (name.empty()) throw InvalidArgument("log: the metric name is empty");
  if (value.numel() != 1)
    throw InvalidArgument(fmt::format(
        "log('{}'): the value is a tensor of shape {}; log a one-element tensor (a scalar)", name,
        value.shape().str()));
  if (metrics_) metrics_->log(name, value, 0, options);
}

void LightningModule::log(const std::string& name, double value, LogOptions options) {
  if (name.empty()) throw InvalidArgument("log: the metric name is empty");
  if (metrics_) metrics_->log(name, Tensor(), value, options);
}

void MetricCollector::begin(bool training) {
  training_ = training;
  pending_.clear();
  step_values_.clear();
  sums_.clear();
  loss_ = {};
  prog_bar_.clear();
  keys_.clear();
}

void MetricCollector::log(const std::string& name, const Tensor& value, double host,
                          const LogOptions& options) {
  const bool on_step = options.on_step.value_or(training_);
  const bool on_epoch = options.on_epoch.value_or(!training_);
  Pending p;
  if (on_step) p.step_key = on_epoch ? name + "_step" : name;
  if (on_epoch) p.epoch_key = on_step ? name + "_epoch" : name;
  p.value = value;
  p.host = host;
  p.weight = static_cast<double>(options.batch_size > 0 ? options.batch_size : batch_size_);
  for (const std::string* k : {&p.step_key, &p.epoch_key})
    if (!k->empty()) {
      keys_.insert(*k);
      if (options.prog_bar) prog_bar_.insert(*k);
    }
  pending_.push_back(std::move(p));
}

void MetricCollector::add_loss(const Tensor& loss, double weight) {
  Pending p;
  p.value = loss;
  p.weight = weight;
  p.is_loss = true;
  pending_.push_back(std::move(p));
}

bool MetricCollector::flush() {
  // One read-back per device: the pending scalars concatenated there.
  std::map<Device*, std::vector<std::size_t>> by_device;
  for (std::size_t i = 0; i < pending_.size(); ++i)
    if (pending_[i].value.defined()) by_device[&pending_[i].value.device()].push_back(i);
  for (auto& [device, indices] : by_device) {
    std::vector<Tensor> parts;
    parts.reserve(indices.size());
    for (std::size_t i : indices) {
      const Tensor& v = pending_[i].value;
      parts.push_back((v.dtype() == DType::f32 ? v : cast(v, DType::f32)).reshape(Shape{1}));
    }
    const std::vector<float> values = cat(parts, 0).to_vector<float>();
    for (std::size_t j = 0; j < indices.size(); ++j) pending_[indices[j]].host = values[j];
  }
  bool finite = true;
  for (const Pending& p : pending_) {
    if (p.is_loss) {
      finite = finite && std::isfinite(p.host);
      loss_.sum += p.host * p.weight;
      loss_.weight += p.weight;
      continue;
    }
    if (!p.step_key.empty()) step_values_[p.step_key] = p.host;
    if (!p.epoch_key.empty()) {
      Sum& s = sums_[p.epoch_key];
      s.sum += p.host * p.weight;
      s.weight += p.weight;
    }
  }
  pending_.clear();
  return finite;
}

std::map<std::string, double> MetricCollector::epoch_values() const {
  std::map<std::string, double> out;
  for (const auto& [k, s] : sums_) out[k] = s.weight > 0 ? s.sum / s.weight : std::nan("");
  return out;
}

double MetricCollector::mean_loss() const {
  return loss_.weight > 0 ? loss_.sum / loss_.weight : std::nan("");
}

void MetricCollector::restore(std::map<std::string, Sum> sums, Sum loss) {
  sums_ = std::move(sums);
  loss_ = loss;
  for (const auto& [k, s] : sums_) keys_.insert(k);
}

}  // namespace tessera::train
