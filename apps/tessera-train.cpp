// tessera-train: trains an MLP or a CNN on Fashion-MNIST (or MNIST) on the device TESSERA_DEVICE
// (or --accelerator) picks, with checkpoints, resume, a CSV of per-epoch metrics and a plot.
//
// Exit status: 0 when training finished, 1 when it failed (the message says why), 2 for a bad
// command line.
#include <unistd.h>

#include <chrono>
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
  std::int64_t batch_size = 128, limit_train = 0, limit_test = 0;
  double lr = -1, momentum = 0.9, weight_decay = 0;
  std::uint64_t seed = 0;
  bool resume = false, quiet = false;
};

// Counts the epochs a fit trains (none when the checkpoint resumed from reached --epochs).
struct EpochCounter final : Callback {
  int count = 0;
  void on_epoch_end(Trainer&, const EpochMetrics&) override { ++count; }
};

std::unique_ptr<Optimizer> make_optimizer(const Args& a, Module& model) {
  if (a.optimizer == "sgd") {
    SgdOptions o;
    o.lr = static_cast<float>(a.lr > 0 ? a.lr : 0.05);
    o.momentum = static_cast<float>(a.momentum);
    o.weight_decay = static_cast<float>(a.weight_decay);
    return std::make_unique<SGD>(model.named_parameters(), o);
  }
  if (a.optimizer == "adam") {
    AdamOptions o;
    o.lr = static_cast<float>(a.lr > 0 ? a.lr : 1e-3);
    o.weight_decay = static_cast<float>(a.weight_decay);
    return std::make_unique<Adam>(model.named_parameters(), o);
  }
  throw ConfigError(fmt::format("--optimizer {}: use sgd or adam", a.optimizer));
}

int run(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainerOptions to;
  to.accelerator = a.accelerator;
  to.devices = a.devices;
  to.max_epochs = a.epochs;
  to.batch_size = a.batch_size;
  to.seed = a.seed;
  to.limit_train_batches = a.limit_train;
  to.limit_test_batches = a.limit_test;
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

  Generator gen(derive_seed(a.seed, 0x1417));
  std::shared_ptr<Sequential> model;
  {
    DeviceGuard guard(trainer.device());
    model = make_model(a.model, gen);
  }
  std::unique_ptr<Optimizer> optimizer = make_optimizer(a, *model);
  trainer.fit(*model, *optimizer, train_set, &test_set, resume_from);

  const auto& history = trainer.progress().history;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Device& dev = trainer.device();
  if (epochs->count == 0)
    fmt::print(
        "Nothing to train: {} already has {} epoch(s) and --epochs is {}; pass --epochs {} or "
        "more to train on.\n",
        resume_from.string(), trainer.progress().epoch, a.epochs, trainer.progress().epoch + 1);
  if (!history.empty()) {
    const EpochMetrics& last = history.back();
    fmt::print("Test accuracy: {:.2f}% after {} epoch(s) | {:.1f} s | {} on {} ({})\n",
               100 * last.test_accuracy, last.epoch, seconds, a.model, dev.id(), dev.info().name);
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
        std::pair{vm.count("lr") && !(a.lr > 0), "--lr: use a positive number"}})
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
