// tessera-train: trains an MLP or a CNN on Fashion-MNIST (or MNIST) on the device TESSERA_DEVICE
// (or --accelerator) picks, through the Trainer (an ImageClassifier over the network), with
// checkpoints, resume, a CSV of per-epoch metrics and a plot.
//
// Exit status: 0 when training finished, 1 when it failed (the message says why), 2 for a bad
// command line.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <boost/program_options.hpp>

#include "tessera/tessera.h"
#include "tessera/train/train.h"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::train;

namespace {

struct Args {
  std::string model = "mlp", optimizer = "adam", data = kDefaultFashionMnistDir;
  std::string accelerator = "auto", checkpoint_dir, metrics, plot;
  int epochs = 10, devices = 1;
  std::int64_t batch_size = 128, limit_train = 0, limit_test = 0, max_steps = -1, accumulate = 1;
  double lr = -1, momentum = 0.9, weight_decay = 0, val_every = 1.0, grad_clip = 0;
  std::uint64_t seed = 0;
  bool resume = false, quiet = false;
};

// Counts the epochs a fit trains (none when the checkpoint resumed from reached --epochs).
struct EpochCounter final : Callback {
  int count = 0;
  void on_train_epoch_end(Trainer&) override { ++count; }
};

OptimizerConfig make_optimizer(const Args& a, Module& model) {
  OptimizerConfig c;
  if (a.optimizer == "sgd") {
    SgdOptions o;
    o.lr = static_cast<float>(a.lr > 0 ? a.lr : 0.05);
    o.momentum = static_cast<float>(a.momentum);
    o.weight_decay = static_cast<float>(a.weight_decay);
    c.optimizer = std::make_shared<SGD>(model.named_parameters(), o);
  } else if (a.optimizer == "adam") {
    AdamOptions o;
    o.lr = static_cast<float>(a.lr > 0 ? a.lr : 1e-3);
    o.weight_decay = static_cast<float>(a.weight_decay);
    c.optimizer = std::make_shared<Adam>(model.named_parameters(), o);
  } else {
    throw ConfigError(fmt::format("--optimizer {}: use sgd or adam", a.optimizer));
  }
  return c;
}

int run(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainerOptions to;
  to.accelerator = a.accelerator;
  to.devices = a.devices;
  to.max_epochs = a.epochs;
  to.max_steps = a.max_steps;
  to.seed = a.seed;
  to.limit_train_batches = a.limit_train;
  to.limit_val_batches = a.limit_test;
  to.val_check_interval = a.val_every;
  to.gradient_clip_val = a.grad_clip;
  to.accumulate_grad_batches = a.accumulate;
  to.enable_progress_bar = !a.quiet;

  std::filesystem::path resume_from;
  if (a.resume) {
    if (a.checkpoint_dir.empty())
      throw ConfigError("--resume needs --checkpoint-dir, the directory of the checkpoints");
    auto latest = latest_checkpoint(a.checkpoint_dir);
    if (!latest)
      throw FileError(
          fmt::format("--resume: no checkpoint (epoch-NNNN.safetensors) in {}", a.checkpoint_dir));
    resume_from = *latest;
  }
  // Check what can fail early before any work: options, gnuplot, then the device and the data.
  std::shared_ptr<Callback> plot;
  if (!a.plot.empty()) plot = std::make_shared<LossPlot>(a.plot);
  if (!a.metrics.empty()) to.callbacks.push_back(std::make_shared<CsvLogger>(a.metrics));
  if (!a.checkpoint_dir.empty())
    to.callbacks.push_back(std::make_shared<ModelCheckpoint>(a.checkpoint_dir));
  if (plot) to.callbacks.push_back(plot);
  auto epochs = std::make_shared<EpochCounter>();
  to.callbacks.push_back(epochs);

  Trainer trainer(to);
  const Dataset train_set = load_mnist_split(a.data, "train");
  const Dataset test_set = load_mnist_split(a.data, "t10k");

  LoaderOptions lo;
  lo.batch_size = a.batch_size;
  lo.seed = a.seed;
  ImageDataLoader train_loader(train_set, lo);
  lo.shuffle = false;
  ImageDataLoader test_loader(test_set, lo);

  Generator gen(derive_seed(a.seed, 0x1417));
  std::shared_ptr<Module> net;
  {
    DeviceGuard guard(trainer.device());
    net = make_model(a.model, gen);
  }
  ImageClassifier model(net, [&](Module& m) { return make_optimizer(a, m); });
  trainer.fit(model, train_loader, &test_loader, resume_from);

  const TrainingProgress& progress = trainer.progress();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Device& dev = trainer.device();
  if (epochs->count == 0) {
    if (a.max_steps >= 0 && progress.global_step >= a.max_steps)
      fmt::print(
          "Nothing to train: {} already has {} step(s) and --max-steps is {}; pass a larger "
          "--max-steps to train on.\n",
          resume_from.string(), progress.global_step, a.max_steps);
    else
      fmt::print(
          "Nothing to train: {} already has {} epoch(s) and --epochs is {}; pass --epochs {} or "
          "more to train on.\n",
          resume_from.string(), progress.epoch, a.epochs, progress.epoch + 1);
  }
  // The latest validation's accuracy, from the history (a resumed run restores it).
  for (auto row = progress.history.rbegin(); row != progress.history.rend(); ++row)
    if (auto acc = row->metrics.find("val_acc"); acc != row->metrics.end()) {
      fmt::print(
          "Test accuracy: {:.2f}% after {} epoch(s), {} step(s) | {:.1f} s | {} on {} "
          "({})\n",
          100 * acc->second, progress.epoch, row->step, seconds, a.model, dev.id(),
          dev.info().name);
      break;
    }
  for (const FallbackRoute& r : fallback_stats())
    if (r.ops > 0)
      fmt::print("Fallback: {} op(s) ran on {} instead of {} ({} moved)\n", r.ops, r.to, r.from,
                 format_bytes(r.bytes));
  return 0;
}

// A default as a user writes it in --help: 0.9, not boost's 0.90000000000000002.
std::string as_written(double v) {
  return fmt::format("{}", v);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  po::options_description opts(
      "tessera-train: train a model on Fashion-MNIST on the device TESSERA_DEVICE picks\n\n"
      "Usage: tessera-train [options]\n\nOptions");
  // clang-format off
  opts.add_options()
      ("help,h", "show this help")
      ("model", po::value(&a.model)->default_value(a.model), "mlp (784-512-512-10) or cnn")
      ("epochs", po::value(&a.epochs)->default_value(a.epochs), "train until this many epochs are done")
      ("batch-size", po::value(&a.batch_size)->default_value(a.batch_size), "samples per step")
      ("optimizer", po::value(&a.optimizer)->default_value(a.optimizer), "sgd (momentum 0.9) or adam")
      ("lr", po::value(&a.lr), "learning rate (default: 0.05 for sgd, 0.001 for adam)")
      ("momentum", po::value(&a.momentum)->default_value(a.momentum, as_written(a.momentum)), "SGD momentum")
      ("weight-decay", po::value(&a.weight_decay)->default_value(a.weight_decay, as_written(a.weight_decay)), "L2 weight decay")
      ("seed", po::value(&a.seed)->default_value(a.seed), "seed of initialisation, shuffling and dropout")
      ("data", po::value(&a.data)->default_value(a.data), "directory of the IDX files (train-*, t10k-*)")
      ("accelerator", po::value(&a.accelerator)->default_value(a.accelerator),
       "auto (TESSERA_DEVICE, else the best device), cpu, vulkan, opencl, a plugin's name, or vulkan:1")
      ("devices", po::value(&a.devices)->default_value(a.devices), "number of devices (1)")
      ("checkpoint-dir", po::value(&a.checkpoint_dir), "write DIR/epoch-NNNN.safetensors after each epoch")
      ("resume", po::bool_switch(&a.resume), "continue from the newest checkpoint in --checkpoint-dir")
      ("metrics", po::value(&a.metrics), "write per-epoch metrics to this CSV file")
      ("plot", po::value(&a.plot), "draw loss and accuracy curves into this .png/.svg/.pdf (gnuplot)")
      ("limit-train-batches", po::value(&a.limit_train)->default_value(a.limit_train), "train on this many batches per epoch (0: all)")
      ("limit-test-batches", po::value(&a.limit_test)->default_value(a.limit_test), "evaluate on this many batches (0: all)")
      ("max-steps", po::value(&a.max_steps)->default_value(a.max_steps), "stop after this many optimizer steps, within an epoch if need be (-1: no limit)")
      ("val-every", po::value(&a.val_every)->default_value(a.val_every, as_written(a.val_every)),
       "evaluate on the test set every this fraction of an epoch (0 < F <= 1) or this many batches (N > 1)")
      ("grad-clip", po::value(&a.grad_clip)->default_value(a.grad_clip, as_written(a.grad_clip)), "clip the gradients' total L2 norm to this (0: off)")
      ("accumulate", po::value(&a.accumulate)->default_value(a.accumulate), "batches whose gradients are summed (mean loss) into one optimizer step")
      ("quiet,q", po::bool_switch(&a.quiet), "no progress output, only the summary");
  // clang-format on
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tessera-train: " << e.what() << "\nRun tessera-train --help for the options.\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  for (const auto& [bad, ok] :
       {std::pair{a.model != "mlp" && a.model != "cnn", "--model: use mlp or cnn"},
        std::pair{a.optimizer != "sgd" && a.optimizer != "adam", "--optimizer: use sgd or adam"},
        std::pair{a.epochs < 1, "--epochs: use 1 or more"},
        std::pair{a.batch_size < 1, "--batch-size: use 1 or more"},
        std::pair{a.devices < 1, "--devices: use 1 or more"},
        std::pair{a.limit_train < 0, "--limit-train-batches: use 0 (all) or more"},
        std::pair{a.limit_test < 0, "--limit-test-batches: use 0 (all) or more"},
        std::pair{!(a.momentum >= 0), "--momentum: use 0 or more"},
        std::pair{!(a.weight_decay >= 0), "--weight-decay: use 0 or more"},
        std::pair{vm.count("lr") && !(a.lr > 0), "--lr: use a positive number"},
        std::pair{a.max_steps < 1 && a.max_steps != -1,
                  "--max-steps: use 1 or more, or -1 (no limit)"},
        std::pair{!(a.val_every > 0) || (a.val_every > 1 && a.val_every != std::floor(a.val_every)),
                  "--val-every: use a fraction in (0, 1] or a whole number of batches above 1"},
        std::pair{!(a.grad_clip >= 0) || !std::isfinite(a.grad_clip),
                  "--grad-clip: use 0 (off) or a positive number"},
        std::pair{a.accumulate < 1, "--accumulate: use 1 or more"}})
    if (bad) {
      std::cerr << "tessera-train: " << ok << "\n";
      return 2;
    }
  try {
    return run(a);
  } catch (const ConfigError& e) {
    std::cerr << "tessera-train: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "\ntessera-train: error: " << e.what() << "\n";
    return 1;
  }
}
