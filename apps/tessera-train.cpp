// tessera-train: trains an MLP, a CNN or a ResNet on Fashion-MNIST (or MNIST), or a
// character-level GPT on a text (Debian's fortunes by default), on the device TESSERA_DEVICE (or
// --accelerator) picks, through the Trainer (an ImageClassifier over the network, or a
// LanguageModel), with checkpoints, resume, a CSV of metrics, a plot and a weights-only file.
// Each model's recipe (train_recipes.h) gives the defaults; every flag overrides its part.
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
#include "train_launch.h"
#include "train_recipes.h"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::train;
using tessera::apps::TrainArgs;

namespace {

// Counts the epochs a fit trains (none when the checkpoint resumed from reached --epochs).
struct EpochCounter final : Callback {
  int count = 0;
  void on_train_epoch_end(Trainer&) override { ++count; }
};

// After each validation of a GPT: the validation loss and a sample of its text (nanoGPT's
// sample.py settings: temperature 0.8, top-k 200), the same seed each time.
struct TextSample final : Callback {
  TextSample(std::int64_t c, std::uint64_t s) : chars(c), seed(s) {}
  bool rank_zero_only() const override { return true; }
  void on_validation_end(Trainer& t) override {
    const auto loss = t.callback_metrics().find("val_loss");
    std::string sample;
    if (chars > 0 && model) sample = model->generate_text("", chars, 0.8, 200, seed);
    std::fflush(stdout);
    fmt::print("\nstep {}: val_loss {:.4f} nats/char{}\n{}\n", t.global_step(),
               loss == t.callback_metrics().end() ? NAN : loss->second,
               chars > 0 ? "; a sample:" : "", sample);
    std::fflush(stdout);
  }
  LanguageModel* model = nullptr;  // set once it is built
  std::int64_t chars;
  std::uint64_t seed;
};

std::filesystem::path resume_path(const TrainArgs& a) {
  if (!a.resume) return {};
  if (a.checkpoint_dir.empty())
    throw ConfigError("--resume needs --checkpoint-dir, the directory of the checkpoints");
  auto latest = latest_checkpoint(a.checkpoint_dir);
  if (!latest)
    throw FileError(
        fmt::format("--resume: no checkpoint (epoch-NNNN.safetensors) in {}", a.checkpoint_dir));
  return *latest;
}

// Whether this process prints: the only one, or rank 0 of a data-parallel job.
bool printer(Strategy& s) {
  return s.is_global_zero();
}

TrainerOptions trainer_options(const TrainArgs& a, const std::shared_ptr<EpochCounter>& epochs,
                               const std::shared_ptr<Strategy>& strategy) {
  TrainerOptions to;
  to.accelerator = a.accelerator;
  to.devices = a.devices;
  to.num_nodes = a.num_nodes;
  to.strategy = strategy;
  to.sync_batchnorm = a.sync_batchnorm;
  to.max_epochs = a.epochs;
  to.max_steps = a.max_steps;
  to.seed = a.seed;
  to.limit_train_batches = a.limit_train;
  to.limit_val_batches = a.limit_test;
  to.val_check_interval = a.model == "gpt" ? 1.0 : a.val_every;
  to.gradient_clip_val = a.grad_clip;
  to.accumulate_grad_batches = a.accumulate;
  to.precision = a.precision;
  to.enable_progress_bar = !a.quiet;
  // Check what can fail early before any work: options, gnuplot, then the device and the data.
  std::shared_ptr<Callback> plot;
  if (!a.plot.empty()) plot = std::make_shared<LossPlot>(a.plot);
  if (!a.metrics.empty()) to.callbacks.push_back(std::make_shared<CsvLogger>(a.metrics));
  if (!a.checkpoint_dir.empty())
    to.callbacks.push_back(std::make_shared<ModelCheckpoint>(a.checkpoint_dir));
  if (plot) to.callbacks.push_back(plot);
  to.callbacks.push_back(epochs);
  return to;
}

void nothing_to_train(const TrainArgs& a, const Trainer& trainer,
                      const std::filesystem::path& from) {
  const TrainingProgress& progress = trainer.progress();
  if (a.max_steps >= 0 && progress.global_step >= a.max_steps)
    fmt::print(
        "Nothing to train: {} already has {} step(s) and --max-steps is {}; pass a larger "
        "--max-steps to train on.\n",
        from.string(), progress.global_step, a.max_steps);
  else
    fmt::print(
        "Nothing to train: {} already has {} epoch(s) and --epochs is {}; pass --epochs {} or "
        "more to train on.\n",
        from.string(), progress.epoch, a.epochs, progress.epoch + 1);
}

// The latest value of |metric| in the history (a resumed run restores it) and its step.
std::optional<std::pair<double, std::int64_t>> latest(const Trainer& t, const std::string& metric) {
  const auto& h = t.progress().history;
  for (auto row = h.rbegin(); row != h.rend(); ++row)
    if (auto it = row->metrics.find(metric); it != row->metrics.end() && !std::isnan(it->second))
      return std::pair{it->second, row->step};
  return std::nullopt;
}

void print_fallbacks(Strategy& strategy) {
  if (const std::string note = tessera::apps::sync_note(strategy); !note.empty())
    fmt::print("{}\n", note);
  for (const FallbackRoute& r : fallback_stats())
    if (r.ops > 0)
      fmt::print("Fallback: {} op(s) ran on {} instead of {} ({} moved)\n", r.ops, r.to, r.from,
                 format_bytes(r.bytes));
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_images(const TrainArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path resume_from = resume_path(a);
  auto epochs = std::make_shared<EpochCounter>();
  auto strategy = tessera::apps::make_train_strategy(a.strategy, a.num_nodes);
  Trainer trainer(trainer_options(a, epochs, strategy));
  const bool zero = printer(*strategy);
  const Dataset train_set = load_mnist_split(a.data, "train");
  const Dataset test_set = load_mnist_split(a.data, "t10k");

  LoaderOptions lo;
  lo.batch_size = a.batch_size;
  lo.seed = a.seed;
  if (a.augment) {
    lo.random_crop_padding = 2;
    lo.random_horizontal_flip = true;
  }
  ImageDataLoader train_loader(train_set, lo);
  lo.shuffle = false;
  lo.random_crop_padding = 0;
  lo.random_horizontal_flip = false;
  ImageDataLoader test_loader(test_set, lo);

  Generator gen(derive_seed(a.seed, 0x1417));
  std::shared_ptr<Module> net;
  {
    DeviceGuard guard(trainer.device());
    net = tessera::apps::make_image_net(a, gen);
  }
  // The schedule's length, counted when fit calls configure_optimizers: with several processes
  // the loader is sharded by then, so an epoch is this process's share of it.
  ImageClassifier model(net, [&](Module& m) {
    return tessera::apps::make_image_optimizer(a, m, trainer.estimated_stepping_batches());
  });
  trainer.fit(model, train_loader, &test_loader, resume_from);

  const Device& dev = trainer.device();
  if (!zero) return 0;
  if (epochs->count == 0) nothing_to_train(a, trainer, resume_from);
  if (const auto acc = latest(trainer, "val_acc"))
    fmt::print("Test accuracy: {:.2f}% after {} epoch(s), {} step(s) | {:.1f} s | {} on {} ({})\n",
               100 * acc->first, trainer.progress().epoch, acc->second, since(t0), a.model,
               dev.id(), dev.info().name);
  if (!a.save_weights.empty()) {
    save(*net, a.save_weights);
    fmt::print("Weights: {} ({} parameters; docs/models.md loads them into PyTorch)\n",
               a.save_weights, net->num_parameters());
  }
  print_fallbacks(*strategy);
  return 0;
}

int run_gpt(const TrainArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path resume_from = resume_path(a);
  auto epochs = std::make_shared<EpochCounter>();
  auto strategy = tessera::apps::make_train_strategy(a.strategy, a.num_nodes);
  TrainerOptions to = trainer_options(a, epochs, strategy);
  const bool zero = printer(*strategy);

  const TextCorpus corpus = load_text(a.text);
  TextSplitOptions so;
  so.seed = a.seed;
  const TextSplit split = split_text(corpus, so);
  TextLoaderOptions lo;
  lo.batch_size = a.batch_size;
  lo.context = a.context;
  lo.seed = a.seed;
  // An epoch is the stretch between two validations: --val-every optimizer steps.
  lo.batches_per_epoch = static_cast<std::int64_t>(a.val_every) * a.accumulate;
  TextBatchLoader train_loader(split, lo);
  lo.part = TextPart::val;
  lo.eval_batches = a.limit_test;
  TextBatchLoader val_loader(split, lo);

  auto sample = std::make_shared<TextSample>(a.sample_chars, a.seed);
  if (!a.quiet) to.callbacks.push_back(sample);
  Trainer trainer(to);
  std::shared_ptr<LanguageModel> model;
  {
    DeviceGuard guard(trainer.device());
    Generator gen(derive_seed(a.seed, 0x1417));
    model = std::make_shared<LanguageModel>(tessera::apps::gpt_config(a), split.vocab,
                                            tessera::apps::gpt_options(a), &gen);
  }
  sample->model = model.get();
  if (!a.quiet && zero)
    fmt::print("{}: {} bytes, {} characters; train {} / val {} bytes | GPT {:.2f} M parameters\n",
               corpus.name, corpus.text.size(), corpus.vocab.size(), split.train->size(),
               split.val->size(), static_cast<double>(model->num_parameters()) / 1e6);
  trainer.fit(*model, train_loader, &val_loader, resume_from);

  const Device& dev = trainer.device();
  if (!zero) return 0;
  if (epochs->count == 0) nothing_to_train(a, trainer, resume_from);
  if (const auto loss = latest(trainer, "val_loss"))
    fmt::print("Validation loss: {:.4f} nats/char after {} step(s) | {:.1f} s | gpt on {} ({})\n",
               loss->first, loss->second, since(t0), dev.id(), dev.info().name);
  if (!a.save_weights.empty()) {
    save_language_model(*model, a.save_weights);
    fmt::print("Weights: {} (sample with: tessera-generate {} --prompt TEXT)\n", a.save_weights,
               a.save_weights);
  }
  print_fallbacks(*strategy);
  return 0;
}

// A default as a user writes it in --help: 0.9, not boost's 0.90000000000000002.
std::string as_written(double v) {
  return fmt::format("{}", v);
}

}  // namespace

int main(int argc, char** argv) {
  TrainArgs a;
  po::options_description opts(
      "tessera-train: train a model on Fashion-MNIST (mlp, cnn, resnet) or on a text (gpt) on the "
      "device TESSERA_DEVICE picks\n\nUsage: tessera-train [options]\n\n"
      "Defaults marked * depend on --model (its recipe; docs/models.md).\n\nOptions");
  // clang-format off
  opts.add_options()
      ("help,h", "show this help")
      ("model", po::value(&a.model)->default_value(a.model), "mlp (784-512-512-10), cnn, resnet (CIFAR ResNet, --depth, --width) or gpt (character-level, --text)")
      ("epochs", po::value(&a.epochs)->default_value(a.epochs), "train until this many epochs are done (* gpt: no limit; its epoch is --val-every steps)")
      ("max-steps", po::value(&a.max_steps), "stop after this many optimizer steps, within an epoch if need be (-1: no limit; gpt: 5000)")
      ("batch-size", po::value(&a.batch_size)->default_value(a.batch_size), "samples per step (* gpt: 64)")
      ("optimizer", po::value(&a.optimizer)->default_value("adam"), "sgd, adam or adamw (* resnet: sgd; gpt: adamw)")
      ("lr", po::value(&a.lr), "learning rate (* sgd 0.05, adam 0.001; resnet 0.1; gpt 0.001)")
      ("momentum", po::value(&a.momentum)->default_value(a.momentum, as_written(a.momentum)), "SGD momentum")
      ("nesterov", po::value(&a.nesterov), "SGD with Nesterov momentum (* resnet: true)")
      ("weight-decay", po::value(&a.weight_decay)->default_value(a.weight_decay, as_written(a.weight_decay)), "weight decay (* resnet 5e-4; gpt 0.1, on matrices only)")
      ("scheduler", po::value(&a.scheduler), "none, step, cosine or onecycle, stepped per step (* none; resnet onecycle; gpt cosine to lr/10)")
      ("warmup-steps", po::value(&a.warmup_steps), "linear warmup steps before a cosine schedule (* 0; gpt 100)")
      ("grad-clip", po::value(&a.grad_clip), "clip the gradients' total L2 norm to this (0: off; * gpt 1)")
      ("accumulate", po::value(&a.accumulate)->default_value(a.accumulate), "batches whose gradients are summed (mean loss) into one optimizer step")
      ("precision", po::value(&a.precision)->default_value(a.precision), "32-true, 16-mixed (f16 GEMMs, loss scaling) or bf16-mixed (bf16 GEMMs), as Lightning's")
      ("float32-matmul-precision", po::value(&a.float32_matmul_precision)->default_value(a.float32_matmul_precision), "f32 products: highest (f32), high or medium (TF32 on tensor cores where the device has them), as torch.set_float32_matmul_precision")
      ("val-every", po::value(&a.val_every),
       "validate every this fraction of an epoch (0 < F <= 1) or this many batches (N > 1) (* 1; gpt: every N steps, 250)")
      ("depth", po::value(&a.depth)->default_value(a.depth), "resnet: layers, 6n+2 (8, 14, 20, 32, 44, 56, 110)")
      ("width", po::value(&a.width), "resnet: channels of the first stage (16); gpt: embedding width (384)")
      ("layers", po::value(&a.layers)->default_value(a.layers), "gpt: transformer blocks")
      ("heads", po::value(&a.heads)->default_value(a.heads), "gpt: attention heads (divides --width)")
      ("context", po::value(&a.context)->default_value(a.context), "gpt: context length in characters (block size)")
      ("dropout", po::value(&a.dropout)->default_value(a.dropout, as_written(a.dropout)), "gpt: dropout")
      ("text", po::value(&a.text)->default_value(a.text), "gpt: a text file, or a directory of them (Debian's fortunes by default)")
      ("sample-chars", po::value(&a.sample_chars)->default_value(a.sample_chars), "gpt: characters of the sample printed at each validation (0: none)")
      ("augment", po::bool_switch(&a.augment), "images: random crops (padding 2) and horizontal flips")
      ("seed", po::value(&a.seed)->default_value(a.seed), "seed of initialisation, shuffling, windows and dropout")
      ("data", po::value(&a.data)->default_value(a.data), "directory of the IDX files (train-*, t10k-*)")
      ("accelerator", po::value(&a.accelerator)->default_value(a.accelerator),
       "auto (TESSERA_DEVICE, else the best device), cpu, vulkan, opencl, a plugin's name, or vulkan:1")
      ("devices", po::value(&a.devices)->default_value(a.devices), "devices of this machine, one process each: N > 1 trains data-parallel, starting itself under mpirun -np N (docs/distributed.md); under mpirun or srun, 1 means as launched")
      ("strategy", po::value(&a.strategy)->default_value(a.strategy), "auto (ddp under mpirun or srun, else single_device), single_device or ddp")
      ("num-nodes", po::value(&a.num_nodes)->default_value(a.num_nodes), "machines of the job (checked against the launch)")
      ("sync-batchnorm", po::bool_switch(&a.sync_batchnorm), "data-parallel: BatchNorm normalises by the statistics of the global batch (resnet, cnn)")
      ("checkpoint-dir", po::value(&a.checkpoint_dir), "write DIR/epoch-NNNN.safetensors after each epoch")
      ("resume", po::bool_switch(&a.resume), "continue from the newest checkpoint in --checkpoint-dir")
      ("save-weights", po::value(&a.save_weights), "write the trained weights (PyTorch's names; a GPT with its vocabulary) to this .safetensors file")
      ("metrics", po::value(&a.metrics), "write metrics to this CSV file")
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
  tessera::apps::apply_recipe(a, vm);
  if (const std::string bad = tessera::apps::check_args(a); !bad.empty()) {
    std::cerr << "tessera-train: " << bad << "\n";
    return 2;
  }
  try {
    tessera::apps::launch_if_needed(a.devices, a.strategy, argc, argv);
    tessera::set_float32_matmul_precision(a.float32_matmul_precision);
    return a.model == "gpt" ? run_gpt(a) : run_images(a);
  } catch (const ConfigError& e) {
    tessera::apps::end_job_on_failure(e);
    std::cerr << "tessera-train: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    tessera::apps::end_job_on_failure(e);
    std::fflush(stdout);
    std::cerr << "\ntessera-train: error: " << e.what() << "\n";
    return 1;
  }
}
