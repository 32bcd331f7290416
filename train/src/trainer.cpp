#include "tessera/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "metric_collector.h"
#include "tessera/errors.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "tessera/train/autograd.h"
#include "tessera/train/callbacks.h"
#include "trainer_steps.h"

namespace tessera::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

// Back to the module's mode on every exit, exceptions included.
struct ModeGuard {
  Module& m;
  bool training;
  ~ModeGuard() { m.train(training); }
};

// The module knows the Trainer and logs into |metrics| while it lives.
struct Attach {
  LightningModule& m;
  Attach(LightningModule& module, Trainer* t, MetricCollector* metrics) : m(module) {
    set(t, metrics);
  }
  ~Attach() { set(nullptr, nullptr); }
  void set(Trainer* t, MetricCollector* metrics);
};

TensorBatch to_device(TensorBatch b, Device& device) {
  for (Tensor& t : b.tensors) t = t.to(device);
  return b;
}

std::int64_t limited(std::int64_t n, std::int64_t limit) {
  return limit > 0 ? std::min(n, limit) : n;
}

}  // namespace

// LightningModule's private links are the Trainer's to set (a friend); Attach forwards.
struct TrainerAccess {
  static void set(LightningModule& m, Trainer* t, MetricCollector* metrics) {
    m.trainer_ = t;
    m.metrics_ = metrics;
  }
};

void Attach::set(Trainer* t, MetricCollector* metrics) {
  TrainerAccess::set(m, t, metrics);
}

// The state of one fit call.
struct Trainer::Fit {
  DataLoader* train = nullptr;
  MetricCollector metrics, val_metrics;
  std::int64_t num_batches = 0;      // training batches per epoch (after the limit)
  std::int64_t val_check_batch = 0;  // validate after every this many batches
  Clock::time_point epoch_start;
  std::int64_t epoch_samples = 0;
  std::int64_t validated_at_step = -1;  // global_step of the latest validation
};

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
  device_ = &resolve_accelerator(options_.accelerator, options_.devices);
}

double Trainer::lr() const {
  return config_.optimizer ? config_.optimizer->lr() : std::nan("");
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
  TrainingProgress p = progress_;
  p.callbacks.clear();
  for (const auto& cb : options_.callbacks)
    if (const std::string key = cb->state_key(); !key.empty()) p.callbacks[key] = cb->state_dict();
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
  for (auto& cb : options_.callbacks) cb->on_validation_end(*this);
}

std::map<std::string, double> Trainer::validate(LightningModule& module, DataLoader& data) {
  DeviceGuard guard(*device_);
  module.to(*device_);
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
    module.validation_step(to_device(std::move(batch), *device_), i);
    if ((i + 1) % options_.log_every_n_steps == 0) metrics.flush();
  }
  metrics.flush();
  std::map<std::string, double> out = metrics.epoch_values();
  for (const auto& [k, v] : metrics.step_values()) out.emplace(k, v);
  attach.set(previous, previous_metrics);
  return out;
}

void Trainer::end_epoch(Fit& fit, bool completed) {
  fit.metrics.flush();
  const std::map<std::string, double> train = fit.metrics.epoch_values();
  for (const auto& [k, v] : train) callback_metrics_[k] = v;
  MetricsRow row;
  row.epoch = progress_.epoch + 1;
  row.step = progress_.global_step;
  row.lr = lr();
  row.metrics = train;
  row.seconds = seconds_since(fit.epoch_start);
  row.samples_per_second = static_cast<double>(fit.epoch_samples) / std::max(row.seconds, 1e-9);
  const bool val_epoch = val_ && (progress_.epoch + 1) % options_.check_val_every_n_epoch == 0;
  if (completed) {
    ++progress_.epoch;
    progress_.epoch_batch = 0;
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
  for (auto& cb : options_.callbacks) cb->on_train_epoch_end(*this);
}

void Trainer::fit(LightningModule& module, DataLoader& train, DataLoader* val,
                  const std::filesystem::path& ckpt_path) {
  Fit fit;
  fit.train = &train;
  fit.num_batches = limited(train.num_batches(), options_.limit_train_batches);
  if (fit.num_batches <= 0)
    throw InvalidArgument("fit: the training loader has no batches: there is nothing to train on");
  if (val && limited(val->num_batches(), options_.limit_val_batches) <= 0)
    throw InvalidArgument(
        "fit: the validation loader has no batches: metrics over no samples mean nothing; "
        "pass a loader with samples (or none)");
  const std::int64_t k = options_.accumulate_grad_batches;
  {
    const double v = options_.val_check_interval;
    std::int64_t every = 0;
    if (v <= 1) {
      every = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(static_cast<double>(fit.num_batches) * v));
    } else {
      every = static_cast<std::int64_t>(v);
      if (val && every > fit.num_batches)
        throw ConfigError(fmt::format(
            "val_check_interval={} must be less than or equal to the number of training batches "
            "per epoch ({})",
            every, fit.num_batches));
    }
    fit.val_check_batch = (every + k - 1) / k * k;
  }
  module_ = &module;
  val_ = val;
  should_stop = false;
  callback_metrics_.clear();
  DeviceGuard guard(*device_);
  module.to(*device_);
  config_ = module.configure_optimizers();
  if (!config_.optimizer)
    throw ConfigError("configure_optimizers returned no optimizer: set OptimizerConfig::optimizer");
  if (config_.interval != "step" && config_.interval != "epoch")
    throw ConfigError(
        fmt::format("configure_optimizers: interval='{}' is not valid: pass 'step' or 'epoch'",
                    config_.interval));
  progress_ = TrainingProgress{};
  progress_.seed = options_.seed;
  resumed_ = false;
  resumed_from_.clear();
  if (!ckpt_path.empty()) {
    TrainingProgress p =
        load_checkpoint(ckpt_path, module, *config_.optimizer, config_.lr_scheduler.get());
    // The callbacks' state, each checked before any is changed (a malformed one leaves all).
    std::vector<std::pair<Callback*, const std::map<std::string, std::string>*>> states;
    for (auto& cb : options_.callbacks)
      if (const std::string key = cb->state_key(); !key.empty()) {
        auto it = p.callbacks.find(key);
        if (it == p.callbacks.end())
          tessera::log().warn("{}: holds no state for callback {}; it starts afresh",
                              ckpt_path.string(), key);
        else
          states.emplace_back(cb.get(), &it->second);
      }
    for (auto& [cb, state] : states) {
      try {
        cb->load_state_dict(*state);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(
            fmt::format("{}: callback {}: {}", ckpt_path.string(), cb->state_key(), e.what()));
      }
    }
    progress_ = std::move(p);
    resumed_ = true;
    resumed_from_ = ckpt_path;
    if (progress_.seed != options_.seed)
      tessera::log().warn("resuming with the checkpoint's seed {} (this run asked for {})",
                          progress_.seed, options_.seed);
    if (progress_.epoch_batch >= fit.num_batches)
      throw InvalidArgument(fmt::format(
          "{}: the checkpoint was taken after batch {} of its epoch, but an epoch has {} "
          "batches here; resume with the same data and limit_train_batches",
          ckpt_path.string(), progress_.epoch_batch, fit.num_batches));
    tessera::log().info("resumed from {} at epoch {} batch {} (step {})", ckpt_path.string(),
                        progress_.epoch, progress_.epoch_batch, progress_.global_step);
  }
  Attach attach(module, this, &fit.metrics);
  for (auto& cb : options_.callbacks) cb->on_fit_start(*this);
  if (finished())
    tessera::log().info(
        "nothing to train: {} epoch(s) and {} step(s) done, max_epochs={}, "
        "max_steps={}",
        progress_.epoch, progress_.global_step, options_.max_epochs, options_.max_steps);
  Optimizer& optimizer = *config_.optimizer;
  while (!should_stop && !finished()) {
    const std::int64_t epoch = progress_.epoch + 1;
    module.train();
    train.begin_epoch(epoch);
    fit.metrics.begin(true);
    TensorBatch batch;
    std::int64_t b = 0;
    if (progress_.epoch_batch > 0) {  // resuming within the epoch
      std::map<std::string, MetricCollector::Sum> sums;
      for (const auto& [name, s] : progress_.epoch_sums) sums[name] = {s.sum, s.weight};
      fit.metrics.restore(std::move(sums), {progress_.epoch_loss.sum, progress_.epoch_loss.weight});
      for (; b < progress_.epoch_batch; ++b)
        if (!train.next(batch))
          throw InvalidArgument(fmt::format(
              "resuming within epoch {}: the loader ended after {} batches, the checkpoint was "
              "taken after {}",
              epoch, b, progress_.epoch_batch));
    }
    fit.epoch_start = Clock::now();
    fit.epoch_samples = 0;
    optimizer.zero_grad();
    bool completed = true;
    for (; b < fit.num_batches; ++b) {
      if (!train.next(batch))
        throw InvalidArgument(
            fmt::format("the training loader ended after {} batches of epoch {}; it said it has {}",
                        b, epoch, train.num_batches()));
      set_dropout_step(progress_.seed, static_cast<std::uint64_t>(progress_.batches_seen));
      fit.metrics.set_batch_size(batch.size);
      const std::int64_t samples = batch.size;
      const Variable loss = module.training_step(to_device(std::move(batch), *device_), b);
      if (!loss.defined() || loss.value().numel() != 1 || !loss.requires_grad())
        throw InvalidArgument(fmt::format(
            "training_step returned {}; return the loss, a one-element Variable computed from "
            "the parameters (it requires grad)",
            !loss.defined() ? std::string("nothing")
                            : fmt::format("a Variable of shape {}{}", loss.shape().str(),
                                          loss.requires_grad() ? "" : " that requires no grad")));
      fit.metrics.add_loss(loss.value(), static_cast<double>(samples));
      (k > 1 ? mul_scalar(loss, 1.0 / static_cast<double>(k)) : loss).backward();
      ++progress_.batches_seen;
      progress_.epoch_batch = b + 1;
      fit.epoch_samples += samples;
      if ((b + 1) % k == 0 || b + 1 == fit.num_batches) {
        if (options_.gradient_clip_val > 0)
          detail::clip_gradients(optimizer, options_.gradient_clip_algorithm,
                                 options_.gradient_clip_val);
        optimizer.step();
        optimizer.zero_grad();
        ++progress_.global_step;
        if (config_.lr_scheduler && config_.interval == "step")
          detail::scheduler_step(*config_.lr_scheduler);
      }
      const bool stop_steps =
          options_.max_steps >= 0 && progress_.global_step >= options_.max_steps;
      if ((b + 1) % options_.log_every_n_steps == 0 || b + 1 == fit.num_batches || stop_steps) {
        if (!fit.metrics.flush())
          throw Error(fmt::format(
              "the training loss became {} in epoch {} (step {}); lower the learning rate (now "
              "{})",
              fit.metrics.mean_loss(), epoch, progress_.global_step, lr()));
        for (const auto& [name, value] : fit.metrics.step_values()) callback_metrics_[name] = value;
        StepProgress sp;
        sp.epoch = epoch;
        sp.max_epochs = options_.max_epochs;
        sp.batch = b + 1;
        sp.num_batches = fit.num_batches;
        sp.samples = fit.epoch_samples;
        sp.global_step = progress_.global_step;
        sp.max_steps = options_.max_steps;
        sp.loss = fit.metrics.mean_loss();
        sp.lr = lr();
        sp.seconds = seconds_since(fit.epoch_start);
        for (const std::string& name : fit.metrics.prog_bar())
          if (auto it = fit.metrics.step_values().find(name); it != fit.metrics.step_values().end())
            sp.metrics[name] = it->second;
        for (auto& cb : options_.callbacks) cb->on_train_progress(*this, sp);
      }
      if (b + 1 == fit.num_batches) break;
      if (val_ && epoch % options_.check_val_every_n_epoch == 0 &&
          (b + 1) % fit.val_check_batch == 0) {
        // The epoch's partial sums go into checkpoints taken now.
        progress_.epoch_sums.clear();
        for (const auto& [name, s] : fit.metrics.sums())
          progress_.epoch_sums[name] = {s.sum, s.weight};
        progress_.epoch_loss = {fit.metrics.loss_sum().sum, fit.metrics.loss_sum().weight};
        run_validation(fit);
      }
      if (stop_steps || should_stop) {
        completed = false;
        break;
      }
    }
    end_epoch(fit, completed);
  }
  for (auto& cb : options_.callbacks) cb->on_fit_end(*this);
}

}  // namespace tessera::train
