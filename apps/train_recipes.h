// tessera-train's command line and the recipes of its built-in models: what each --model trains
// with when the command line does not say (SPEC14 E'), the networks, optimizers and schedules.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/program_options.hpp>

#include "tessera/train/language_model.h"
#include "tessera/train/text_data.h"
#include "tessera/train/train.h"

namespace tessera::apps {

struct TrainArgs {
  std::string model = "mlp", optimizer, scheduler, data = train::kDefaultFashionMnistDir;
  std::string text = train::kDefaultTextCorpus;
  std::string accelerator = "auto", checkpoint_dir, metrics, plot, save_weights;
  std::string strategy = "auto";
  std::string precision = "32-true";
  std::string float32_matmul_precision = "highest";  // highest, high or medium (ops.h)
  int num_nodes = 1;
  bool sync_batchnorm = false;
  std::int64_t epochs = 10, batch_size = 128, limit_train = 0, limit_test = 0, max_steps = -1;
  std::int64_t accumulate = 1, warmup_steps = 0, context = 256, sample_chars = 200;
  int devices = 1, depth = 20, width = 16, layers = 6, heads = 6;
  double lr = -1, momentum = 0.9, weight_decay = 0, val_every = 1.0, grad_clip = 0, dropout = 0.2;
  std::uint64_t seed = 0;
  bool resume = false, quiet = false, augment = false, nesterov = false;
};

// Sets every option of |a| that |vm| (the parsed command line) does not hold to |a.model|'s
// recipe: mlp and cnn: Adam (lr 1e-3; SGD 0.05), no schedule. resnet: depth 20, width 16, SGD
// lr 0.1 momentum 0.9 Nesterov, weight decay 5e-4, OneCycleLR per step. gpt: batch 64, context
// 256, 6 layers, 6 heads, width 384, dropout 0.2, AdamW lr 1e-3 (betas 0.9, 0.99) with weight
// decay 0.1 on matrices, gradient clipping at norm 1, warmup 100 steps then cosine to lr/10 at
// --max-steps 5000, validation every 250 steps, no epoch limit.
void apply_recipe(TrainArgs& a, const boost::program_options::variables_map& vm);

// The first problem with |a| as a user wrote it ("--depth: use 6n+2 ..."), or "" when none.
std::string check_args(const TrainArgs& a);

// The image network of --model mlp, cnn or resnet (on the default device).
std::shared_ptr<train::Module> make_image_net(const TrainArgs& a, train::Generator& gen);

// The optimizer and schedule of an image model over |net|'s parameters, for a run of
// |total_steps| optimizer steps: --optimizer sgd|adam|adamw with --lr, --momentum (--nesterov),
// --weight-decay; --scheduler none, step (lr x 0.1 at 1/3 and 2/3 of the run), cosine (to 0,
// after a linear warmup of --warmup-steps) or onecycle (max_lr = --lr), stepped per step.
train::OptimizerConfig make_image_optimizer(const TrainArgs& a, train::Module& net,
                                            std::int64_t total_steps);

// The GPT's configuration and recipe from |a| (vocab_size is the corpus's).
train::GPTConfig gpt_config(const TrainArgs& a);
train::LanguageModelOptions gpt_options(const TrainArgs& a);

}  // namespace tessera::apps
