#include "tessera/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/checked.h"
#include "tessera/errors.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "tessera/train/autograd.h"
#include "tessera/train/callbacks.h"
#include "tessera/train/layers.h"
#include "trainer_fit.h"
#include "trainer_steps.h"

namespace tessera::train {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

// Back to the module's mode on every exit, exceptions included.
struct ModeGuard {
  Module& m;
  bool training;
  ~ModeGuard() { m.train(training); }
};

}  // namespace

using detail::Attach;
using detail::limited;
using detail::seconds_since;
using detail::to_device;

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {
  const TrainerOptions& o = options_;
  require(o.max_epochs >= 1 || o.max_epochs == -1,
          fmt::format("max_epochs={} is not valid: pass 1 or more, or -1 (unbounded, with "
                      "max_steps)",
                      o.max_epochs));
  require(o.max_steps >= 1 || o.max_steps == -1,
          fmt::format("max_steps={} is not valid: pass 1 or more, or -1 (no limit)", o.max_steps));
  require(o.max_epochs != -1 || o.max_steps != -1,
          "max_epochs=-1 (unbounded) needs max_steps: pass max_steps=N (1 or more), or a "
          "max_epochs of 1 or more");
  require(o.limit_train_batches >= 0 && o.limit_val_batches >= 0,
          fmt::format("limit_train_batches={} and limit_val_batches={}: pass 0 (all batches) or "
                      "more",
                      o.limit_train_batches, o.limit_val_batches));
  const double v = o.val_check_interval;
  require((v > 0 && v <= 1) || (v > 1 && v == std::floor(v) && v < 9.0e15),
          fmt::format("val_check_interval={} is not valid: pass a fraction of the training epoch "
                      "in (0, 1] or a whole number of batches above 1",
                      v));
  require(o.check_val_every_n_epoch >= 1,
          fmt::format("check_val_every_n_epoch={} is not valid: pass 1 or more",
                      o.check_val_every_n_epoch));
  require(o.accumulate_grad_batches >= 1,
          fmt::format("accumulate_grad_batches={} is not valid: pass 1 or more",
                      o.accumulate_grad_batches));
  require(o.log_every_n_steps >= 1,
          fmt::format("log_every_n_steps={} is not valid: pass 1 or more", o.log_every_n_steps));
  require(std::isfinite(o.gradient_clip_val) && o.gradient_clip_val >= 0,
          fmt::format("gradient_clip_val={} is not valid: pass 0 (no clipping) or a positive "
                      "number",
                      o.gradient_clip_val));
  require(o.gradient_clip_algorithm == "norm" || o.gradient_clip_algorithm == "value",
          fmt::format("gradient_clip_algorithm='{}' is not valid: pass 'norm' or 'value'",
                      o.gradient_clip_algorithm));
  const std::string& pr = o.precision;
  require(
      pr == "32-true" || pr == "32" || pr == "16-mixed" || pr == "16" || pr == "bf16-mixed" ||
          pr == "bf16",
      fmt::format("precision='{}' is not valid: pass '32-true', '16-mixed' or 'bf16-mixed'", pr));
  if (pr == "16-mixed" || pr == "16") {
    autocast_ = DType::f16;
    scaler_ = std::make_unique<GradScaler>();
  } else if (pr == "bf16-mixed" || pr == "bf16") {
    autocast_ = DType::bf16;
  }
  std::set<std::string> keys;
  bool has_bar = false;
  for (const auto& cb : o.callbacks) {
    require(cb != nullptr, "callbacks: an entry is null");
    has_bar = has_bar || dynamic_cast<const ProgressBar*>(cb.get());
    require(o.enable_checkpointing || !dynamic_cast<const ModelCheckpoint*>(cb.get()),
            "Trainer was configured with enable_checkpointing=false but found a ModelCheckpoint "
            "in the callbacks; remove one of the two");
    const std::string key = cb->state_key();
    require(key.empty() || keys.insert(key).second,
            fmt::format("callbacks: two callbacks have the state key '{}'; their checkpointed "
                        "state would mix (give them different monitors or paths)",
                        key));
  }
  require(!(has_bar && !o.enable_progress_bar),
          "Trainer was configured with enable_progress_bar=false but found a ProgressBar in the "
          "callbacks; remove one of the two");
  if (o.enable_progress_bar && !has_bar)
    options_.callbacks.insert(options_.callbacks.begin(), std::make_shared<ProgressBar>(stdout));
  // As Lightning: checkpoints are taken after the other callbacks have seen a validation.
  std::stable_partition(options_.callbacks.begin(), options_.callbacks.end(), [](const auto& cb) {
    return dynamic_cast<const ModelCheckpoint*>(cb.get()) == nullptr;
  });
  require(o.num_nodes >= 1,
          fmt::format("num_nodes={} is not valid: pass the number of machines (1 or more)",
                      o.num_nodes));
  strategy_ = o.strategy.instance ? o.strategy.instance : make_strategy(o.strategy.name);
  strategy_->setup_environment();
  device_ = &strategy_->device(options_.accelerator, options_.devices);
  if (o.num_nodes != 1) {
    std::set<std::string> hosts;
    if (ProcessGroup* pg = strategy_->process_group())
      for (const std::string& h : pg->all_gather(pg->host())) hosts.insert(h);
    const std::size_t machines = std::max<std::size_t>(1, hosts.size());
    require(machines == static_cast<std::size_t>(o.num_nodes),
            fmt::format("num_nodes={} but the job runs on {} machine(s) (strategy '{}', {} "
                        "process(es)); pass num_nodes={}, or start the job on {} machines",
                        o.num_nodes, machines, strategy_->name(), strategy_->world_size(), machines,
                        o.num_nodes));
  }
}

std::vector<Callback*> Trainer::callbacks() const {
  std::vector<Callback*> out;
  const bool zero = strategy_->is_global_zero();
  for (const auto& cb : options_.callbacks)
    if (zero || !cb->rank_zero_only()) out.push_back(cb.get());
  return out;
}

double Trainer::lr() const {
  return config_.optimizer ? config_.optimizer->lr() : std::nan("");
}

std::int64_t Trainer::estimated_stepping_batches() const {
  if (options_.max_steps > 0) return options_.max_steps;
  if (fit_batches_ <= 0)
    throw ConfigError(
        "estimated_stepping_batches: the training batches are known once fit has started; call it "
        "from configure_optimizers");
  if (options_.max_epochs < 0)
    throw ConfigError(
        "estimated_stepping_batches: max_epochs is -1 and max_steps is not set, so the fit has no "
        "length; set one of them");
  const std::int64_t k = options_.accumulate_grad_batches;
  const auto steps = checked_mul(options_.max_epochs, (fit_batches_ + k - 1) / k);
  if (!steps)
    throw ConfigError(fmt::format(
        "estimated_stepping_batches: max_epochs {} x {} steps an epoch overflows 64 bits",
        options_.max_epochs, (fit_batches_ + k - 1) / k));
  return *steps;
}

bool Trainer::finished() const {
  return (options_.max_epochs >= 0 && progress_.epoch >= options_.max_epochs) ||
         (options_.max_steps >= 0 && progress_.global_step >= options_.max_steps);
}

double Trainer::monitored(const std::string& monitor, const std::string& who) const {
  auto it = callback_metrics_.find(monitor);
  if (it != callback_metrics_.end()) return it->second;
  std::vector<std::string> names;
  for (const auto& [k, v] : callback_metrics_) names.push_back("'" + k + "'");
  throw ConfigError(fmt::format(
      "{}(monitor='{}') could not find the monitored key in the logged metrics: [{}]. HINT: Did "
      "you call log('{}', value) in the LightningModule (in validation_step for a validation "
      "metric)?",
      who, monitor, fmt::join(names, ", "), monitor));
}

void Trainer::save_checkpoint(const std::filesystem::path& path) const {
  if (!strategy_->is_global_zero()) return;
  TrainingProgress p = progress_;
  p.callbacks.clear();
  for (const auto& cb : options_.callbacks)
    if (const std::string key = cb->state_key(); !key.empty()) p.callbacks[key] = cb->state_dict();
  p.grad_scaler = scaler_ ? scaler_->state_dict() : std::map<std::string, std::string>{};
  train::save_checkpoint(path, *module_, *config_.optimizer, p, config_.lr_scheduler.get());
}

void Trainer::record_row(MetricsRow row) {
  auto& h = progress_.history;
  if (!h.empty() && h.back().epoch == row.epoch && h.back().step == row.step) {
    MetricsRow& last = h.back();
    for (auto& [k, v] : row.metrics) last.metrics[k] = v;
    if (!std::isnan(row.seconds)) {
      last.seconds = row.seconds;
      last.samples_per_second = row.samples_per_second;
    }
    return;
  }
  h.push_back(std::move(row));
}

void Trainer::run_validation(Fit& fit) {
  const std::map<std::string, double> m = validation_loop(*module_, *val_);
  for (const auto& [k, v] : m) callback_metrics_[k] = v;
  fit.validated_at_step = progress_.global_step;
  MetricsRow row;
  row.epoch = progress_.epoch_batch > 0 ? progress_.epoch + 1 : progress_.epoch;
  row.step = progress_.global_step;
  row.lr = lr();
  row.metrics = m;
  row.seconds = row.samples_per_second = std::nan("");
  record_row(std::move(row));
  // Validation switched the module to training mode on its way out; the metrics link is back
  // to the training collector.
  TrainerAccess::set(*module_, this, &fit.metrics);
  for (Callback* cb : callbacks()) cb->on_validation_end(*this);
}

std::map<std::string, double> Trainer::validate(LightningModule& module, DataLoader& data) {
  DeviceGuard guard(*device_);
  module.to(*device_);
  const int world = strategy_->world_size();
  if (world == 1) return validation_loop(module, data);
  data.set_distributed(strategy_->global_rank(), world, false);
  struct Unshard {
    DataLoader& d;
    ~Unshard() {
      try {
        d.set_distributed(0, 1, false);
      } catch (...) {  // NOLINT(bugprone-empty-catch): one process is always valid
      }
    }
  } unshard{data};
  return validation_loop(module, data);
}

std::map<std::string, double> Trainer::validation_loop(LightningModule& module, DataLoader& data) {
  const std::int64_t batches = limited(data.num_batches(), options_.limit_val_batches);
  if (batches <= 0)
    throw InvalidArgument(
        "validate: the validation loader has no batches: metrics over no samples mean nothing; "
        "pass a loader with samples (or none)");
  NoGradGuard no_grad;
  ModeGuard mode{module, module.is_training()};
  module.eval();
  MetricCollector metrics;
  metrics.begin(false);
  Trainer* previous = module.trainer_;
  MetricCollector* previous_metrics = module.metrics_;
  Attach attach(module, this, &metrics);
  data.begin_epoch(1);
  TensorBatch batch;
  for (std::int64_t i = 0; i < batches && data.next(batch); ++i) {
    metrics.set_batch_size(batch.size);
    const AutocastGuard autocast(autocast_.value_or(DType::f32));
    module.validation_step(to_device(std::move(batch), *device_), i);
    if ((i + 1) % options_.log_every_n_steps == 0) metrics.flush();
  }
  metrics.flush();
  if (strategy_->world_size() > 1) {  // every sample counts once in the job's means
    std::map<std::string, MetricCollector::Sum> sums = metrics.sums();
    MetricCollector::Sum loss = metrics.loss_sum();
    detail::reduce_metric_sums(*strategy_, sums, loss, "validation");
    metrics.restore(std::move(sums), loss);
  }
  std::map<std::string, double> out = metrics.epoch_values();
  for (const auto& [k, v] : metrics.step_values()) out.emplace(k, v);
  attach.set(previous, previous_metrics);
  return out;
}

void Trainer::end_epoch(Fit& fit, bool completed) {
  fit.metrics.flush();
  const int world = strategy_->world_size();
  if (world > 1) {  // the job's epoch means: sums and weights over the processes
    std::map<std::string, MetricCollector::Sum> sums = fit.metrics.sums();
    MetricCollector::Sum loss = fit.metrics.loss_sum();
    detail::reduce_metric_sums(*strategy_, sums, loss, "training epoch");
    fit.metrics.restore(std::move(sums), loss);
  }
  const std::map<std::string, double> train = fit.metrics.epoch_values();
  for (const auto& [k, v] : train) callback_metrics_[k] = v;
  MetricsRow row;
  row.epoch = progress_.epoch + 1;
  row.step = progress_.global_step;
  row.lr = lr();
  row.metrics = train;
  if (scaler_) {  // "16-mixed": the optimizer steps skipped so far for non-finite gradients
    row.metrics["skipped_steps"] = static_cast<double>(scaler_->skipped_steps());
    callback_metrics_["skipped_steps"] = row.metrics["skipped_steps"];
  }
  row.seconds = seconds_since(fit.epoch_start);
  row.samples_per_second =
      static_cast<double>(fit.epoch_samples) * world / std::max(row.seconds, 1e-9);
  const bool val_epoch = val_ && (progress_.epoch + 1) % options_.check_val_every_n_epoch == 0;
  if (completed) {
    ++progress_.epoch;
    progress_.epoch_batch = 0;
    progress_.epoch_sample = 0;
    progress_.epoch_sums.clear();
    progress_.epoch_loss = {};
    if (config_.lr_scheduler && config_.interval == "epoch")
      detail::scheduler_step(*config_.lr_scheduler);
  } else {
    progress_.epoch_sums.clear();
    for (const auto& [k, s] : fit.metrics.sums()) progress_.epoch_sums[k] = {s.sum, s.weight};
    progress_.epoch_loss = {fit.metrics.loss_sum().sum, fit.metrics.loss_sum().weight};
  }
  record_row(std::move(row));
  // Validation at the epoch's end when its last batch is a validation batch; at a stop within
  // the epoch (max_steps, should_stop) when none just ran.
  const bool at_check = fit.num_batches % fit.val_check_batch == 0;
  if (val_epoch && fit.validated_at_step != progress_.global_step && (completed ? at_check : true))
    run_validation(fit);
  for (Callback* cb : callbacks()) cb->on_train_epoch_end(*this);
}

}  // namespace tessera::train
