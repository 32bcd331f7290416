// Trainer::fit: the training loop, resuming from a checkpoint, and the calls into the strategy
// (trainer.cpp has the rest of the Trainer).
#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <typeinfo>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/log.h"
#include "tessera/runtime.h"
#include "tessera/train/autograd.h"
#include "tessera/train/callbacks.h"
#include "tessera/train/layers.h"
#include "trainer_fit.h"
#include "trainer_steps.h"
#include "type_name.h"

namespace tessera::train {

using detail::Attach;
using detail::limited;
using detail::seconds_since;
using detail::to_device;

namespace detail {

void reduce_metric_sums(Strategy& strategy, std::map<std::string, MetricCollector::Sum>& sums,
                        MetricCollector::Sum& loss, const char* what) {
  if (strategy.world_size() == 1) return;
  // The names must agree before their values are summed position by position: a hash of them,
  // and its negation, maximised (equal everywhere exactly when the maximum of both agrees).
  std::string names;
  for (const auto& [k, s] : sums) names += k + '\n';
  const auto h = static_cast<double>(std::hash<std::string>{}(names) >> 12);
  std::vector<double> check{h, -h, static_cast<double>(sums.size())};
  strategy.reduce_max(check);
  if (check[0] != h || check[1] != -h || check[2] != static_cast<double>(sums.size()))
    throw DistributedError(fmt::format(
        "the {} metrics differ between processes: rank {} logged [{}]; every process must log the "
        "same names",
        what, strategy.global_rank(), names.empty() ? "" : names.substr(0, names.size() - 1)));
  std::vector<double> v;
  v.reserve(2 * sums.size() + 2);
  for (const auto& [k, s] : sums) {
    v.push_back(s.sum);
    v.push_back(s.weight);
  }
  v.push_back(loss.sum);
  v.push_back(loss.weight);
  strategy.reduce_sum(v);
  std::size_t i = 0;
  for (auto& [k, s] : sums) {
    s.sum = v[i++];
    s.weight = v[i++];
  }
  loss = {v[i], v[i + 1]};
}

double reduce_max(Strategy& strategy, double value) {
  std::vector<double> v{value};
  strategy.reduce_max(v);
  return v[0];
}

}  // namespace detail

namespace {

// The loaders sharded and SyncBatchNorm on for one fit, back to one process at its end.
struct FitScope {
  DataLoader& train;
  DataLoader* val;
  Module* module = nullptr;
  FitScope(DataLoader& t, DataLoader* v) : train(t), val(v) {}
  FitScope(const FitScope&) = delete;
  FitScope& operator=(const FitScope&) = delete;
  ~FitScope() {
    try {
      train.set_distributed(0, 1, true);
      if (val) val->set_distributed(0, 1, false);
    } catch (...) {  // NOLINT(bugprone-empty-catch): one process is always valid
    }
    if (module) convert_sync_batchnorm(*module, nullptr);
  }
};

}  // namespace

void Trainer::fit(LightningModule& module, DataLoader& train, DataLoader* val,
                  const std::filesystem::path& ckpt_path) {
  try {
    const int world = strategy_->world_size();
    std::optional<FitScope> scope;
    if (world > 1) {
      scope.emplace(train, val);
      train.set_distributed(strategy_->global_rank(), world, true);
      if (val) val->set_distributed(strategy_->global_rank(), world, false);
      if (options_.sync_batchnorm) scope->module = &module;
    }
    Fit fit;
    fit.train = &train;
    val_ = val;
    fit_loop(fit, module, train, ckpt_path);
  } catch (const std::exception& e) {
    strategy_->on_exception(e);
    try {
      strategy_->teardown();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one to report
    }
    throw;
  } catch (...) {
    strategy_->on_exception(std::runtime_error("an exception that is not a std::exception"));
    try {
      strategy_->teardown();
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
    throw;
  }
  strategy_->teardown();
}

void Trainer::resume(Fit& fit, const std::filesystem::path& ckpt_path) {
  TrainingProgress p =
      load_checkpoint(ckpt_path, *module_, *config_.optimizer, config_.lr_scheduler.get());
  if (strategy_->world_size() > 1) {
    // Every rank reads the checkpoint itself: ranks that found different files (a stale copy on
    // one machine) would run different steps and wait on each other for ever.
    const std::vector<double> mine{static_cast<double>(p.epoch), static_cast<double>(p.global_step),
                                   static_cast<double>(p.epoch_sample)};
    std::vector<double> v;
    for (double x : mine) v.push_back(x);
    for (double x : mine) v.push_back(-x);
    strategy_->reduce_max(v);
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (v[i] != -v[i + mine.size()])
        throw DistributedError(fmt::format(
            "{}: the ranks resumed from different checkpoints (this rank, {}, has epoch {}, step "
            "{}; the newest among the ranks has epoch {}, step {}); every rank reads the "
            "checkpoint itself: put the checkpoint directory on a file system all machines "
            "share, or copy the same file to each",
            ckpt_path.string(), strategy_->global_rank(), p.epoch, p.global_step, v[0], v[1]));
  }
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
  // The loss scale where the run stood ("16-mixed"), as Lightning restores its scaler's state:
  // otherwise the first steps after resuming would overflow and be skipped again. A checkpoint of
  // another precision has none (the scaler starts at its initial scale), and a run without a
  // scaler has no use for one.
  if (scaler_ && !p.grad_scaler.empty()) {
    scaler_->load_state_dict(p.grad_scaler);  // checked by load_checkpoint
  } else if (scaler_) {
    tessera::log().info(
        "{}: holds no loss-scaler state (not written by a 16-mixed run); the "
        "scaler starts at scale {}",
        ckpt_path.string(), scaler_->get_scale());
  }
  progress_ = std::move(p);
  resumed_ = true;
  resumed_from_ = ckpt_path;
  if (progress_.seed != options_.seed)
    tessera::log().warn("resuming with the checkpoint's seed {} (this run asked for {})",
                        progress_.seed, options_.seed);
  const int world = strategy_->world_size();
  // Within an epoch, another global batch (another number of processes, or another batch size
  // that the loader says) continues from the sample position.
  const std::int64_t b = fit.train->batch_size();
  const bool moved = progress_.world_size != world ||
                     (b > 0 && progress_.epoch_sample >= 0 &&
                      progress_.epoch_sample != progress_.epoch_batch * b * world);
  if (moved && progress_.epoch_batch > 0) {
    restart_position(fit, ckpt_path);
  } else if (progress_.epoch_batch >= fit.num_batches) {
    throw InvalidArgument(
        fmt::format("{}: the checkpoint was taken after batch {} of its epoch, but an epoch has {} "
                    "batches here; resume with the same data and limit_train_batches",
                    ckpt_path.string(), progress_.epoch_batch, fit.num_batches));
  } else if (progress_.world_size != world) {
    tessera::log().info(
        "{}: written by {} process(es), resumed by {}: epoch {} starts as {} shard(s) it",
        ckpt_path.string(), progress_.world_size, world, progress_.epoch + 1, world);
  }
  if (progress_.epoch_sample < 0)  // a file of one process that does not say
    progress_.epoch_sample = progress_.epoch_batch * b * world;
  progress_.world_size = world;
  tessera::log().info("resumed from {} at epoch {} batch {} (step {})", ckpt_path.string(),
                      progress_.epoch, progress_.epoch_batch, progress_.global_step);
}

void Trainer::restart_position(Fit& fit, const std::filesystem::path& ckpt_path) {
  const int world = strategy_->world_size();
  const std::int64_t b = fit.train->batch_size();
  if (b <= 0) {
    const DataLoader& loader = *fit.train;
    throw ConfigError(fmt::format(
        "{}: the checkpoint was taken within epoch {} by {} process(es) and this run has {}; "
        "continuing within the epoch needs the training loader's batch size, which this loader "
        "({}) does not give (DataLoader::batch_size() is 0): resume with {} process(es), from a "
        "checkpoint taken at an epoch's end, or implement batch_size()",
        ckpt_path.string(), progress_.epoch + 1, progress_.world_size, world,
        detail::type_name(typeid(loader)), progress_.world_size));
  }
  // Samples of the epoch the job had trained; a file of one process that does not say had the
  // same batch size per process.
  const std::int64_t done = progress_.epoch_sample >= 0
                                ? progress_.epoch_sample
                                : progress_.epoch_batch * b * progress_.world_size;
  const std::int64_t global = b * world;
  const std::int64_t next = std::min((done + global - 1) / global, fit.num_batches);
  const std::int64_t skipped = std::max<std::int64_t>(0, next * global - done);
  tessera::log().warn(
      "{}: written by {} process(es) after {} samples of epoch {}, resumed by {} with a global "
      "batch of {}: the epoch continues at its batch {} of {}, skipping {} sample(s)",
      ckpt_path.string(), progress_.world_size, done, progress_.epoch + 1, world, global, next + 1,
      fit.num_batches, skipped);
  progress_.epoch_batch = next;
  progress_.epoch_sample = next * global;
  progress_.batches_seen = std::max(progress_.batches_seen, next);
}

void Trainer::fit_loop(Fit& fit, LightningModule& module, DataLoader& train,
                       const std::filesystem::path& ckpt_path) {
  const int world = strategy_->world_size();
  DataLoader* val = val_;
  fit.num_batches = limited(train.num_batches(), options_.limit_train_batches);
  fit_batches_ = fit.num_batches;
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
  if (options_.sync_batchnorm && world > 1)
    convert_sync_batchnorm(module, strategy_->process_group());
  strategy_->setup_module(module);
  config_ = module.configure_optimizers();
  if (!config_.optimizer)
    throw ConfigError("configure_optimizers returned no optimizer: set OptimizerConfig::optimizer");
  if (config_.interval != "step" && config_.interval != "epoch")
    throw ConfigError(
        fmt::format("configure_optimizers: interval='{}' is not valid: pass 'step' or 'epoch'",
                    config_.interval));
  progress_ = TrainingProgress{};
  progress_.seed = options_.seed;
  progress_.world_size = world;
  resumed_ = false;
  resumed_from_.clear();
  if (!ckpt_path.empty()) resume(fit, ckpt_path);
  Attach attach(module, this, &fit.metrics);
  for (Callback* cb : callbacks()) cb->on_fit_start(*this);
  if (world > 1) should_stop = detail::reduce_max(*strategy_, should_stop ? 1 : 0) > 0;
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
      // With several processes the checkpoint holds the job's sums: the global-zero process
      // takes them, the others start from zeros under the same names.
      const bool mine = world == 1 || strategy_->is_global_zero();
      for (const auto& [name, s] : progress_.epoch_sums)
        sums[name] = mine ? MetricCollector::Sum{s.sum, s.weight} : MetricCollector::Sum{};
      fit.metrics.restore(std::move(sums), mine ? MetricCollector::Sum{progress_.epoch_loss.sum,
                                                                       progress_.epoch_loss.weight}
                                                : MetricCollector::Sum{});
      for (; b < progress_.epoch_batch; ++b)
        if (!train.next(batch))
          throw InvalidArgument(fmt::format(
              "resuming within epoch {}: the loader ended after {} batches, the checkpoint was "
              "taken after {}",
              epoch, b, progress_.epoch_batch));
    }
    fit.epoch_start = TrainerClock::now();
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
      const Variable loss = [&] {
        const AutocastGuard autocast(autocast_.value_or(DType::f32));  // precision
        return module.training_step(to_device(std::move(batch), *device_), b);
      }();
      if (!loss.defined() || loss.value().numel() != 1 || !loss.requires_grad())
        throw InvalidArgument(fmt::format(
            "training_step returned {}; return the loss, a one-element Variable computed from "
            "the parameters (it requires grad)",
            !loss.defined() ? std::string("nothing")
                            : fmt::format("a Variable of shape {}{}", loss.shape().str(),
                                          loss.requires_grad() ? "" : " that requires no grad")));
      fit.metrics.add_loss(loss.value(), static_cast<double>(samples));
      const bool sync = (b + 1) % k == 0 || b + 1 == fit.num_batches;
      strategy_->before_backward(sync);
      const Variable part = k > 1 ? mul_scalar(loss, 1.0 / static_cast<double>(k)) : loss;
      (scaler_ ? scaler_->scale(part) : part).backward();
      strategy_->after_backward(sync);
      ++progress_.batches_seen;
      progress_.epoch_batch = b + 1;
      progress_.epoch_sample += samples * world;
      fit.epoch_samples += samples;
      if (sync) {
        if (scaler_) scaler_->unscale_(optimizer);  // before clipping, as Lightning
        if (options_.gradient_clip_val > 0)
          detail::clip_gradients(optimizer, options_.gradient_clip_algorithm,
                                 options_.gradient_clip_val);
        if (scaler_) {
          (void)scaler_->step(optimizer);  // skipped when a gradient is not finite
          scaler_->update();
        } else {
          optimizer.step();
        }
        optimizer.zero_grad();
        ++progress_.global_step;
        if (config_.lr_scheduler && config_.interval == "step")
          detail::scheduler_step(*config_.lr_scheduler);
      }
      const bool stop_steps =
          options_.max_steps >= 0 && progress_.global_step >= options_.max_steps;
      if ((b + 1) % options_.log_every_n_steps == 0 || b + 1 == fit.num_batches || stop_steps) {
        const bool finite = fit.metrics.flush();
        if (world == 1 && !finite)
          throw Error(fmt::format(
              "the training loss became {} in epoch {} (step {}); lower the learning rate (now "
              "{})",
              fit.metrics.mean_loss(), epoch, progress_.global_step, lr()));
        if (world > 1) {  // every process stops at once: the highest failing rank + 1
          const int rank = strategy_->global_rank();
          const double bad = detail::reduce_max(*strategy_, finite ? 0 : rank + 1);
          if (bad > 0)
            throw Error(fmt::format(
                "the training loss became {} on rank {} in epoch {} (step {}); lower the learning "
                "rate (now {})",
                finite ? std::string("not finite") : fmt::format("{}", fit.metrics.mean_loss()),
                static_cast<int>(bad) - 1, epoch, progress_.global_step, lr()));
        }
        for (const auto& [name, value] : fit.metrics.step_values()) callback_metrics_[name] = value;
        StepProgress sp;
        sp.epoch = epoch;
        sp.max_epochs = options_.max_epochs;
        sp.batch = b + 1;
        sp.num_batches = fit.num_batches;
        sp.samples = fit.epoch_samples * world;
        sp.global_step = progress_.global_step;
        sp.max_steps = options_.max_steps;
        sp.loss = fit.metrics.mean_loss();
        sp.lr = lr();
        sp.seconds = seconds_since(fit.epoch_start);
        for (const std::string& name : fit.metrics.prog_bar())
          if (auto it = fit.metrics.step_values().find(name); it != fit.metrics.step_values().end())
            sp.metrics[name] = it->second;
        if (scaler_) {
          sp.metrics["skipped_steps"] = static_cast<double>(scaler_->skipped_steps());
          callback_metrics_["skipped_steps"] = static_cast<double>(scaler_->skipped_steps());
        }
        for (Callback* cb : callbacks()) cb->on_train_progress(*this, sp);
      }
      if (b + 1 == fit.num_batches) break;
      if (val_ && epoch % options_.check_val_every_n_epoch == 0 &&
          (b + 1) % fit.val_check_batch == 0) {
        // The epoch's partial sums go into checkpoints taken now.
        progress_.epoch_sums.clear();
        for (const auto& [name, s] : fit.metrics.sums())
          progress_.epoch_sums[name] = {s.sum, s.weight};
        progress_.epoch_loss = {fit.metrics.loss_sum().sum, fit.metrics.loss_sum().weight};
        if (world > 1) {  // the job's sums (only the global-zero process writes them)
          std::map<std::string, MetricCollector::Sum> sums = fit.metrics.sums();
          MetricCollector::Sum l = fit.metrics.loss_sum();
          detail::reduce_metric_sums(*strategy_, sums, l, "training epoch");
          progress_.epoch_sums.clear();
          for (const auto& [name, s] : sums) progress_.epoch_sums[name] = {s.sum, s.weight};
          progress_.epoch_loss = {l.sum, l.weight};
        }
        run_validation(fit);
      }
      if (world > 1) should_stop = detail::reduce_max(*strategy_, should_stop ? 1 : 0) > 0;
      if (stop_steps || should_stop) {
        completed = false;
        break;
      }
    }
    end_epoch(fit, completed);
    if (world > 1) should_stop = detail::reduce_max(*strategy_, should_stop ? 1 : 0) > 0;
  }
  for (Callback* cb : callbacks()) cb->on_fit_end(*this);
  strategy_->barrier();
}

}  // namespace tessera::train
