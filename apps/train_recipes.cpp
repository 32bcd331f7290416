#include "train_recipes.h"

#include <cmath>

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera::apps {

using namespace tessera::train;
namespace po = boost::program_options;

void apply_recipe(TrainArgs& a, const po::variables_map& vm) {
  auto unset = [&](const char* flag) { return vm.count(flag) == 0 || vm[flag].defaulted(); };
  const bool resnet = a.model == "resnet", gpt = a.model == "gpt";
  if (unset("optimizer")) a.optimizer = resnet ? "sgd" : gpt ? "adamw" : "adam";
  if (unset("lr")) a.lr = resnet ? 0.1 : a.optimizer == "sgd" ? 0.05 : 1e-3;
  if (unset("weight-decay")) a.weight_decay = resnet ? 5e-4 : gpt ? 0.1 : 0.0;
  if (unset("nesterov")) a.nesterov = resnet && a.optimizer == "sgd";
  if (unset("scheduler")) a.scheduler = resnet ? "onecycle" : gpt ? "cosine" : "none";
  if (unset("width")) a.width = gpt ? 384 : 16;
  if (gpt) {
    if (unset("batch-size")) a.batch_size = 64;
    if (unset("grad-clip")) a.grad_clip = 1.0;
    if (unset("warmup-steps")) a.warmup_steps = 100;
    if (unset("max-steps")) a.max_steps = 5000;
    if (unset("val-every")) a.val_every = 250;
    if (unset("epochs")) a.epochs = -1;
  }
}

std::string check_args(const TrainArgs& a) {
  const bool gpt = a.model == "gpt";
  for (const auto& [bad, ok] : {
           std::pair{a.model != "mlp" && a.model != "cnn" && a.model != "resnet" && !gpt,
                     "--model: use mlp, cnn, resnet or gpt"},
           std::pair{a.optimizer != "sgd" && a.optimizer != "adam" && a.optimizer != "adamw",
                     "--optimizer: use sgd, adam or adamw"},
           std::pair{a.float32_matmul_precision != "highest" &&
                         a.float32_matmul_precision != "high" &&
                         a.float32_matmul_precision != "medium",
                     "--float32-matmul-precision: use highest, high or medium"},
           std::pair{gpt && a.optimizer != "adamw",
                     "--optimizer: --model gpt trains with adamw (nanoGPT's recipe)"},
           std::pair{a.scheduler != "none" && a.scheduler != "step" && a.scheduler != "cosine" &&
                         a.scheduler != "onecycle",
                     "--scheduler: use none, step, cosine or onecycle"},
           std::pair{gpt && a.scheduler != "none" && a.scheduler != "cosine",
                     "--scheduler: --model gpt uses cosine (after the warmup) or none"},
           std::pair{a.epochs < 1 && !(a.epochs == -1 && a.max_steps > 0),
                     "--epochs: use 1 or more (or -1, no limit, with --max-steps)"},
           std::pair{a.batch_size < 1, "--batch-size: use 1 or more"},
           std::pair{a.devices < 1, "--devices: use 1 or more"},
           std::pair{a.num_nodes < 1, "--num-nodes: use 1 or more"},
           std::pair{a.limit_train < 0, "--limit-train-batches: use 0 (all) or more"},
           std::pair{a.limit_test < 0, "--limit-test-batches: use 0 (all) or more"},
           std::pair{!(a.momentum >= 0), "--momentum: use 0 or more"},
           std::pair{!(a.weight_decay >= 0) || !std::isfinite(a.weight_decay),
                     "--weight-decay: use 0 or more"},
           std::pair{!(a.lr > 0) || !std::isfinite(a.lr), "--lr: use a positive number"},
           std::pair{a.max_steps < 1 && a.max_steps != -1,
                     "--max-steps: use 1 or more, or -1 (no limit)"},
           std::pair{gpt && a.max_steps < 1, "--max-steps: --model gpt needs a step count"},
           std::pair{a.scheduler != "none" && a.max_steps < 1 && a.epochs < 1,
                     "--scheduler: a schedule needs --epochs or --max-steps"},
           std::pair{
               !(a.val_every > 0) || (a.val_every > 1 && a.val_every != std::floor(a.val_every)),
               "--val-every: use a fraction in (0, 1] or a whole number of batches above 1"},
           std::pair{gpt && (a.val_every < 1 || a.val_every != std::floor(a.val_every)),
                     "--val-every: --model gpt validates every N steps: use a whole number"},
           std::pair{!(a.grad_clip >= 0) || !std::isfinite(a.grad_clip),
                     "--grad-clip: use 0 (off) or a positive number"},
           std::pair{a.accumulate < 1, "--accumulate: use 1 or more"},
           std::pair{a.warmup_steps < 0, "--warmup-steps: use 0 or more"},
           std::pair{a.model == "resnet" && (a.depth < 8 || (a.depth - 2) % 6 != 0),
                     "--depth: use 6n+2 with n >= 1 (8, 14, 20, 32, 44, 56, 110)"},
           std::pair{a.width < 1, "--width: use 1 or more"},
           std::pair{a.layers < 1, "--layers: use 1 or more"},
           std::pair{a.heads < 1 || (gpt && a.width % a.heads != 0),
                     "--heads: use a number of heads that divides --width"},
           std::pair{a.context < 1, "--context: use 1 or more"},
           std::pair{!(a.dropout >= 0 && a.dropout < 1), "--dropout: use a number in [0, 1)"},
           std::pair{a.sample_chars < 0, "--sample-chars: use 0 (no sample) or more"},
       })
    if (bad) return ok;
  return "";
}

std::shared_ptr<Module> make_image_net(const TrainArgs& a, Generator& gen) {
  if (a.model == "resnet")
    return std::make_shared<ResNet>(
        ResNetOptions{.depth = a.depth, .num_classes = 10, .in_channels = 1, .width = a.width},
        &gen);
  return make_model(a.model, gen);
}

OptimizerConfig make_image_optimizer(const TrainArgs& a, Module& net, std::int64_t total_steps) {
  OptimizerConfig c;
  std::shared_ptr<Optimizer> opt;
  if (a.optimizer == "sgd") {
    SgdOptions o;
    o.lr = a.lr;
    o.momentum = a.momentum;
    o.nesterov = a.nesterov && a.momentum > 0;
    o.weight_decay = a.weight_decay;
    opt = std::make_shared<SGD>(net.named_parameters(), o);
  } else if (a.optimizer == "adam") {
    AdamOptions o;
    o.lr = a.lr;
    o.weight_decay = a.weight_decay;
    opt = std::make_shared<Adam>(net.named_parameters(), o);
  } else {
    AdamWOptions o;
    o.lr = a.lr;
    o.weight_decay = a.weight_decay;
    opt = std::make_shared<AdamW>(net.named_parameters(), o);
  }
  c.optimizer = opt;
  c.interval = "step";
  const std::int64_t total = std::max<std::int64_t>(total_steps, 1);
  if (a.scheduler == "step") {
    c.lr_scheduler = std::make_shared<StepLR>(*opt, std::max<std::int64_t>(total / 3, 1), 0.1);
  } else if (a.scheduler == "onecycle") {
    c.lr_scheduler = std::make_shared<OneCycleLR>(*opt, a.lr, total);
  } else if (a.scheduler == "cosine") {
    const std::int64_t warmup = std::min(a.warmup_steps, total - 1);
    auto cosine = std::make_shared<CosineAnnealingLR>(*opt, total - warmup, 0.0);
    if (warmup > 1) {
      auto warm =
          std::make_shared<LinearLR>(*opt, 1.0 / static_cast<double>(warmup), 1.0, warmup - 1);
      c.lr_scheduler = std::make_shared<SequentialLR>(
          *opt, std::vector<std::shared_ptr<LRScheduler>>{warm, cosine},
          std::vector<std::int64_t>{warmup});
    } else {
      c.lr_scheduler = cosine;
    }
  }
  return c;
}

GPTConfig gpt_config(const TrainArgs& a) {
  GPTConfig c;
  c.block_size = a.context;
  c.n_layer = a.layers;
  c.n_head = a.heads;
  c.n_embd = a.width;
  c.dropout = a.dropout;
  return c;
}

LanguageModelOptions gpt_options(const TrainArgs& a) {
  LanguageModelOptions o;
  o.lr = a.lr;
  o.weight_decay = a.weight_decay;
  o.warmup_steps = a.warmup_steps;
  o.max_steps = a.max_steps;
  o.cosine = a.scheduler == "cosine";
  return o;
}

}  // namespace tessera::apps
