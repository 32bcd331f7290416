// LanguageModel: a LightningModule (lightning.h) that trains a GPT (gpt.h) on character windows
// (text_data.h's TextBatchLoader) as nanoGPT's train.py does, and samples from it; and the
// weights file that carries it with its vocabulary (tessera-generate reads it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/train/gpt.h"
#include "tessera/train/lightning.h"

namespace tessera::train {

// The optimisation recipe (nanoGPT's shakespeare_char, SPEC14 E'): AdamW(lr, betas (beta1,
// beta2), eps) with weight_decay on the parameters of rank >= 2 and none on the others (two
// param groups), the lr warmed up linearly, lr * (step + 1) / warmup_steps for the first
// warmup_steps steps (LinearLR), then cosine-annealed to min_lr over the remaining max_steps -
// warmup_steps (CosineAnnealingLR), chained by SequentialLR and stepped every optimizer step.
struct LanguageModelOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;
  double weight_decay = 0.1;
  std::int64_t warmup_steps = 100;
  std::int64_t max_steps = 5000;
  double min_lr = -1;  // negative: lr / 10
  bool cosine = true;  // false: the lr stays constant after the warmup
};

class LanguageModel : public LightningModule {
 public:
  // A new GPT of |config| (config.vocab_size is set to the vocabulary's size) over the byte
  // vocabulary |vocab| (text_data.h: distinct increasing bytes). The module registers the GPT's
  // children under their own names (transformer, lm_head), so its state_dict is the GPT's, with
  // nanoGPT's keys. Throws InvalidArgument for a vocabulary that is not one (check_vocab), as
  // GPT's constructor does, and for options out of range (lr, min_lr, weight_decay negative or
  // not finite, betas outside [0, 1), warmup_steps or max_steps negative).
  LanguageModel(GPTConfig config, std::string vocab, LanguageModelOptions options = {},
                Generator* gen = nullptr);

  // Logits [B, T, V] of token ids [B, T] (GPT::forward).
  Variable forward(const Variable& x) override { return gpt_->forward(x); }
  std::string describe() const override;

  // Batch {x, y}: i32/i64 token ids [B, T] and the next tokens [B, T]. Returns the mean
  // cross-entropy over the B * T positions (nats per character) and logs it as train_loss
  // (on the progress bar).
  Variable training_step(const TensorBatch& batch, std::int64_t batch_idx) override;
  // Logs val_loss (the mean over the validation windows, nats per character; prog bar).
  void validation_step(const TensorBatch& batch, std::int64_t batch_idx) override;
  // The recipe of LanguageModelOptions.
  OptimizerConfig configure_optimizers() override;

  // nanoGPT's generate (gpt.h's generate) on token ids.
  std::vector<std::int32_t> generate(std::vector<std::int32_t> prompt, std::int64_t max_new_tokens,
                                     double temperature = 1.0, std::int64_t top_k = 0,
                                     std::uint64_t seed = 0);
  // The same on text: |prompt| encoded with the vocabulary (an empty prompt starts from a new
  // line, as nanoGPT's sample.py, or from token 0 when the vocabulary has no '\n'; that start
  // is not returned), the result decoded. Throws
  // InvalidArgument listing the characters of |prompt| that the vocabulary lacks, and as
  // generate does.
  std::string generate_text(std::string_view prompt, std::int64_t max_new_tokens,
                            double temperature = 1.0, std::int64_t top_k = 0,
                            std::uint64_t seed = 0);

  GPT& gpt() { return *gpt_; }
  const std::string& vocab() const { return vocab_; }
  const LanguageModelOptions& options() const { return options_; }
  // What a weights file or checkpoint stores to rebuild this model: "tessera.model" = "gpt",
  // "gpt.vocab_size", "gpt.block_size", "gpt.n_layer", "gpt.n_head", "gpt.n_embd",
  // "gpt.dropout", "gpt.bias" (decimal, "true"/"false") and "gpt.vocab" (the vocabulary's bytes
  // in lower-case hex: "0a2021..."; bytes.fromhex in Python).
  // (LightningModule's hyperparameters(): a Trainer checkpoint stores them as "hparams.KEY".)
  std::map<std::string, std::string> hyperparameters() const override;

 private:
  std::shared_ptr<GPT> gpt_;
  std::string vocab_;
  LanguageModelOptions options_;
};

// The GPT configuration and vocabulary stored by LanguageModel::hyperparameters(). Throws
// FileError naming |source| (a path) and the key for a missing key, a number that is not a
// positive decimal integer (dropout: a number in [0, 1); bias: true or false), a vocabulary
// that is not hex of distinct increasing bytes, or one whose size is not gpt.vocab_size.
struct GPTSpec {
  GPTConfig config;
  std::string vocab;
};
GPTSpec read_gpt_hyperparameters(const std::map<std::string, std::string>& metadata,
                                 const std::string& source);

// Writes |model|'s state_dict with PyTorch's names (both transformer.wte.weight and
// lm_head.weight, as torch.save(model.state_dict()) does) and its hyperparameters as metadata
// (with "format": "pt"), atomically. Throws FileError for I/O.
void save_language_model(LanguageModel& model, const std::filesystem::path& path);

// Rebuilds a LanguageModel from a weights file (save_language_model) or a Trainer checkpoint of
// one (its "optimizer.*" tensors are skipped, its "hparams.*" metadata read) on |device| (the
// default device when null), in evaluation mode. Throws FileError (load_safetensors's, or
// read_gpt_hyperparameters's naming the file) and InvalidArgument when the tensors do not fit the
// model (load_state_dict's message, including tied weights that differ).
std::shared_ptr<LanguageModel> load_language_model(const std::filesystem::path& path,
                                                   Device* device = nullptr);

}  // namespace tessera::train
