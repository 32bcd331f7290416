#include "tessera/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/config.h"
#include "tessera/errors.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "tessera/train/autograd.h"
#include "tessera/train/callbacks.h"

namespace tessera::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Plugin names with at least one device, and every name a user may pass.
std::vector<std::string> available_accelerators() {
  std::set<std::string> names;
  for (Device* d : devices()) names.insert(d->plugin_name());
  return {names.begin(), names.end()};
}

std::vector<std::string> known_accelerators() {
  std::set<std::string> names{"cpu", "vulkan", "opencl"};
  for (const PluginRecord& r : plugin_records())
    if (!r.name.empty()) names.insert(r.name);
  std::vector<std::string> out{"auto"};
  out.insert(out.end(), names.begin(), names.end());
  return out;
}

std::string quoted_list(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const auto& s : v) q.push_back("'" + s + "'");
  return fmt::format("[{}]", fmt::join(q, ", "));
}

// Why plugin |name| has no device, from the loader's records.
std::string unavailable_reason(const std::string& name) {
  for (const PluginRecord& r : plugin_records())
    if (r.name == name) {
      if (r.outcome == LoadOutcome::loaded)
        return fmt::format("plugin {} loaded from {} but found no device", name, r.path.string());
      return fmt::format("plugin {} from {} did not load: {}", name, r.path.string(), r.reason);
    }
  return fmt::format("no {} plugin was found", name);
}

// Reads back what the device computed for a few steps at once, so it is not waited for each step.
struct PendingStep {
  Tensor loss, predictions;
  std::vector<std::int32_t> labels;
};

struct Totals {
  double loss_sum = 0;
  std::int64_t correct = 0, samples = 0, batches = 0;
  void flush(std::vector<PendingStep>& pending) {
    for (PendingStep& p : pending) {
      const auto n = static_cast<std::int64_t>(p.labels.size());
      loss_sum += static_cast<double>(p.loss.item()) * static_cast<double>(n);
      const auto pred = p.predictions.to_vector<std::int32_t>();
      for (std::size_t i = 0; i < pred.size(); ++i) correct += pred[i] == p.labels[i];
      samples += n;
      ++batches;
    }
    pending.clear();
  }
  double mean_loss() const { return samples ? loss_sum / static_cast<double>(samples) : 0; }
  double accuracy() const {
    return samples ? static_cast<double>(correct) / static_cast<double>(samples) : 0;
  }
};

// A batch of |d| as tensors on |device|: images [n, 1, rows, cols] and i32 labels [n].
std::pair<Tensor, Tensor> upload(const Batch& b, const Dataset& d, Device* device) {
  return {Tensor::from(b.x, Shape{b.size, 1, d.rows, d.cols}, device),
          Tensor::from<std::int32_t>(b.y, Shape{b.size}, device)};
}

// Training runs on one device: |devices_wanted| > 1 is refused, naming |chosen|.
void require_one_device(int devices_wanted, const Device& chosen) {
  if (devices_wanted > 1)
    throw ConfigError(fmt::format(
        "You requested devices={}, but training on more than one device is not supported yet; "
        "pass devices=1 (the device picked is {})",
        devices_wanted, chosen.id()));
}

// An evaluation set must hold samples: the accuracy of nothing is not 0%.
void require_samples(const Dataset& data) {
  if (data.size <= 0)
    throw InvalidArgument(fmt::format(
        "the evaluation set '{}' has no samples: an accuracy over no samples means nothing; "
        "pass a test set with samples (or none)",
        data.name));
}

}  // namespace

Device& resolve_accelerator(const std::string& accelerator, int devices_wanted) {
  if (devices_wanted < 1)
    throw ConfigError(
        fmt::format("devices={} is not valid: pass a positive number of devices", devices_wanted));
  if (accelerator.empty() || accelerator == "auto") {
    Device& d = default_device();
    require_one_device(devices_wanted, d);
    return d;
  }
  std::string name = accelerator;
  int index = -1;
  if (auto colon = accelerator.find(':'); colon != std::string::npos) {
    name = accelerator.substr(0, colon);
    try {
      std::size_t used = 0;
      index = std::stoi(accelerator.substr(colon + 1), &used);
      if (used != accelerator.size() - colon - 1 || index < 0) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw ConfigError(fmt::format(
          "You selected an invalid accelerator name: accelerator='{}'. Use a name such as "
          "'vulkan' or one device such as 'vulkan:0'.",
          accelerator));
    }
  }
  const auto known = known_accelerators();
  if (std::find(known.begin(), known.end(), name) == known.end())
    throw ConfigError(
        fmt::format("You selected an invalid accelerator name: accelerator='{}'. Available names "
                    "are: {}.",
                    accelerator, fmt::join(known, ", ")));
  std::vector<Device*> mine;
  for (Device* d : devices())
    if (d->plugin_name() == name) mine.push_back(d);
  if (mine.empty())
    throw DeviceUnavailable(fmt::format(
        "'{}' accelerator can not run on your system since the accelerator is not available "
        "({}). The following accelerator(s) is available and can be passed into the "
        "`accelerator` argument of `Trainer`: {}. Run tessera-devices for details.",
        name, unavailable_reason(name), quoted_list(available_accelerators())));
  if (index >= 0) {
    if (static_cast<std::size_t>(index) >= mine.size()) {
      std::vector<std::string> ids;
      for (Device* d : mine) ids.push_back(d->id());
      throw ConfigError(
          fmt::format("You requested accelerator='{}', but {} has only {} device(s): {}.",
                      accelerator, name, mine.size(), fmt::join(ids, ", ")));
    }
    if (devices_wanted != 1)
      throw ConfigError(
          fmt::format("accelerator='{}' names one device; devices={} can not be more than 1",
                      accelerator, devices_wanted));
    return *mine[static_cast<std::size_t>(index)];
  }
  if (static_cast<std::size_t>(devices_wanted) > mine.size())
    throw ConfigError(
        fmt::format("You requested devices={} with accelerator='{}', but your system only has {} "
                    "{} device(s).",
                    devices_wanted, name, mine.size(), name));
  Device& chosen = *pick_auto(mine, !fallback_chain().empty());
  require_one_device(devices_wanted, chosen);
  return chosen;
}

StepResult training_step(Module& model, Optimizer& optimizer, const Tensor& x,
                         const Tensor& labels) {
  StepResult r;
  r.logits = model(Variable(x));
  r.loss = cross_entropy(r.logits, labels);
  optimizer.zero_grad();
  r.loss.backward();
  optimizer.step();
  return r;
}

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {
  if (options_.max_epochs < 1)
    throw ConfigError(
        fmt::format("max_epochs={} is not valid: pass 1 or more", options_.max_epochs));
  if (options_.batch_size < 1)
    throw ConfigError(
        fmt::format("batch_size={} is not valid: pass 1 or more", options_.batch_size));
  if (options_.limit_train_batches < 0 || options_.limit_test_batches < 0)
    throw ConfigError(fmt::format(
        "limit_train_batches={} and limit_test_batches={}: pass 0 (all batches) or more",
        options_.limit_train_batches, options_.limit_test_batches));
  if (options_.log_every_n_steps < 1) options_.log_every_n_steps = 1;
  const bool has_bar =
      std::any_of(options_.callbacks.begin(), options_.callbacks.end(),
                  [](const auto& cb) { return dynamic_cast<const ProgressBar*>(cb.get()); });
  if (has_bar && !options_.enable_progress_bar)
    throw ConfigError(
        "Trainer was configured with enable_progress_bar=false but found a ProgressBar in the "
        "callbacks; remove one of the two");
  if (options_.enable_progress_bar && !has_bar)
    options_.callbacks.insert(options_.callbacks.begin(), std::make_shared<ProgressBar>(stdout));
  device_ = &resolve_accelerator(options_.accelerator, options_.devices);
}

void Trainer::fit(Module& model, Optimizer& optimizer, const Dataset& train, const Dataset* test,
                  const std::filesystem::path& ckpt_path) {
  if (train.size <= 0)
    throw InvalidArgument(fmt::format(
        "the training set '{}' has no samples: there is nothing to train on", train.name));
  if (test) require_samples(*test);
  model_ = &model;
  optimizer_ = &optimizer;
  DeviceGuard guard(*device_);
  model.to(*device_);
  progress_ = TrainingProgress{};
  progress_.seed = options_.seed;
  resumed_ = false;
  resumed_from_.clear();
  if (!ckpt_path.empty()) {
    progress_ = load_checkpoint(ckpt_path, model, optimizer);
    resumed_ = true;
    resumed_from_ = ckpt_path;
    if (progress_.seed != options_.seed)
      tessera::log().warn("resuming with the checkpoint's seed {} (this run asked for {})",
                          progress_.seed, options_.seed);
    tessera::log().info("resumed from {} after epoch {} (step {})", ckpt_path.string(),
                        progress_.epoch, progress_.global_step);
  }
  for (auto& cb : options_.callbacks) cb->on_fit_start(*this);
  if (progress_.epoch >= options_.max_epochs)
    tessera::log().info("nothing to train: {} epoch(s) done, max_epochs={}", progress_.epoch,
                        options_.max_epochs);

  LoaderOptions lo;
  lo.batch_size = options_.batch_size;
  lo.seed = progress_.seed;
  lo.limit_batches = options_.limit_train_batches;
  BatchLoader loader(train, lo);

  // Counted from progress_.epoch < max_epochs, so that no epoch number ever passes INT_MAX.
  while (progress_.epoch < options_.max_epochs) {
    const int epoch = progress_.epoch + 1;
    model.train();
    loader.begin_epoch(epoch);
    const auto t0 = Clock::now();
    Totals totals;
    std::vector<PendingStep> pending;
    Batch batch;
    std::int64_t done = 0, done_samples = 0;
    while (loader.next(batch)) {
      set_dropout_step(progress_.seed, progress_.global_step);
      const auto [x, y] = upload(batch, train, device_);
      const StepResult step = training_step(model, optimizer, x, y);
      ++progress_.global_step;
      ++done;
      done_samples += batch.size;
      pending.push_back({step.loss.value(), argmax(step.logits.value(), 1), std::move(batch.y)});
      if (static_cast<int>(pending.size()) >= options_.log_every_n_steps ||
          done == loader.num_batches()) {
        totals.flush(pending);
        if (!std::isfinite(totals.loss_sum))
          throw Error(fmt::format(
              "the training loss became {} in epoch {} (step {}); lower the learning rate (now {})",
              totals.loss_sum, epoch, progress_.global_step, optimizer.lr()));
        const StepProgress sp{epoch,
                              options_.max_epochs,
                              done,
                              loader.num_batches(),
                              done_samples,
                              totals.mean_loss(),
                              seconds_since(t0)};
        for (auto& cb : options_.callbacks) cb->on_train_progress(*this, sp);
      }
    }
    EpochMetrics m;
    m.epoch = epoch;
    m.seconds = seconds_since(t0);
    m.train_loss = totals.mean_loss();
    m.train_accuracy = totals.accuracy();
    m.samples_per_second = static_cast<double>(totals.samples) / std::max(m.seconds, 1e-9);
    m.test_loss = m.test_accuracy = std::nan("");
    if (test) {
      const EvalResult r = evaluate(model, *test);
      m.test_loss = r.loss;
      m.test_accuracy = r.accuracy;
    }
    progress_.epoch = epoch;
    progress_.history.push_back(m);
    for (auto& cb : options_.callbacks) cb->on_epoch_end(*this, m);
  }
  for (auto& cb : options_.callbacks) cb->on_fit_end(*this);
}

EvalResult Trainer::evaluate(Module& model, const Dataset& data) {
  require_samples(data);
  DeviceGuard guard(*device_);
  NoGradGuard no_grad;
  // Back to the caller's mode on every exit, exceptions included.
  struct ModeGuard {
    Module& m;
    bool training;
    ~ModeGuard() { m.train(training); }
  } mode{model, model.is_training()};
  model.eval();
  LoaderOptions lo;
  lo.batch_size = options_.batch_size;
  lo.shuffle = false;
  lo.limit_batches = options_.limit_test_batches;
  BatchLoader loader(data, lo);
  loader.begin_epoch(0);
  Totals totals;
  std::vector<PendingStep> pending;
  Batch batch;
  while (loader.next(batch)) {
    const auto [x, y] = upload(batch, data, device_);
    const Variable logits = model(Variable(x));
    pending.push_back(
        {tessera::cross_entropy(logits.value(), y), argmax(logits.value(), 1), std::move(batch.y)});
    if (static_cast<int>(pending.size()) >= options_.log_every_n_steps) totals.flush(pending);
  }
  totals.flush(pending);
  if (totals.samples == 0)  // a loader always yields a batch of a non-empty set; never report 0%
    throw Error(fmt::format("evaluation of '{}' read no batch", data.name));
  return {totals.mean_loss(), totals.accuracy(), totals.samples};
}

}  // namespace tessera::train
