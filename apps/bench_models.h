// tessera-bench's real models (bench_models.cpp): the ResNet and the GPT that tessera-train
// trains (SPEC14 E'), at a size chosen by --model-size, for the train case (steady-state
// optimizer steps on random data, beside bench/train_peer.py) and the fit case (whole
// tessera-train runs with the model's default recipe, beside bench/fit_peer.py).
//
//   resnet  ResNet (resnet.h; depth 20, width 16 at full size) on random [batch, 1, 28, 28]
//           images and labels in [0, 10), tessera-train's recipe: SGD lr 0.1, momentum 0.9,
//           nesterov, weight_decay 5e-4, OneCycleLR(max_lr 0.1) stepped per batch. A sample is
//           an image.
//   gpt     GPT (gpt.h; nanoGPT's shakespeare_char config at full size: 6 layers, 6 heads,
//           width 384, context 256, batch 64, dropout 0.2) on random token ids of a 114-byte
//           vocabulary (the fortunes corpus's), in training mode, with LanguageModel's recipe
//           (AdamW with weight decay on rank >= 2 parameters, warm-up then cosine, stepped per
//           batch) and clip_grad_norm_ to 1.0, as tessera-train --model gpt runs it. A sample is
//           a token (batch x context per step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/device.h"
#include "tessera/tensor.h"
#include "tessera/train/autocast.h"
#include "tessera/train/optim.h"

namespace tessera::bench {

using json = nlohmann::ordered_json;

// The sizes of the real models: "full" (the recipes' sizes, for GPUs), "small" (the same
// networks shrunk for a 2-core CPU: ResNet-20 at batch 32; a GPT of 2 layers, 4 heads, width 128,
// context 64, batch 16) and "tiny" (a few elements: the smoke tests').
struct ModelSize {
  std::string name;
  int resnet_depth = 20, resnet_width = 16;
  std::int64_t resnet_batch = 128;
  int gpt_layers = 6, gpt_heads = 6;
  std::int64_t gpt_width = 384, gpt_context = 256, gpt_batch = 64, gpt_vocab = 114;
  // The fit case's GPT run: optimizer steps, validation interval and warm-up (tessera-train's
  // --max-steps, --val-every, --warmup-steps), and validation batches (0: all).
  std::int64_t gpt_max_steps = 5000, gpt_val_every = 250, gpt_warmup = 100, gpt_val_batches = 0;
};

// "full, small, tiny".
const std::string& model_size_list();
// The size named |name|. Throws InvalidArgument naming it and listing the sizes.
const ModelSize& model_size(const std::string& name);

// True for the models of this file (resnet, gpt); false for the MLP and CNN.
bool is_real_model(const std::string& model);

// One training job of a real model on a device: |step| runs one optimizer step (forward, loss,
// backward, clipping where the recipe clips, optimizer and scheduler steps) and returns the loss
// as a device scalar without waiting for the device.
struct TrainJob {
  std::function<Tensor()> step;
  std::int64_t batch = 0;
  std::int64_t samples_per_step = 0;  // images (resnet) or tokens (gpt)
  std::string sample;                 // "image" or "token"
  json config;                        // the size run, as train_peer.py reports it
};

// A training step's precision, as the Trainer's: f32, or the forward under autocast to f16 (the
// loss scaled by a GradScaler) or bf16.
struct Precision {
  explicit Precision(DType dtype = DType::f32);
  DType dtype;
  std::shared_ptr<train::GradScaler> scaler;  // f16 only
  // The loss of |forward| (run under autocast), back-propagated (scaled for f16).
  train::Variable forward_backward(const std::function<train::Variable()>& forward) const;
  // |clip| (may be empty) on unscaled gradients, then the optimizer's step (skipped by the
  // scaler for non-finite gradients).
  void step(train::Optimizer& optimizer, const std::function<void()>& clip = {}) const;
};

// The job of |model| (resnet or gpt) at |size| on |dev| with random data from |seed|, in
// |precision|; its scheduler lasts |total_steps| steps (the steps the caller runs, at least).
// Throws InvalidArgument for another model.
TrainJob make_train_job(Device& dev, const std::string& model, const ModelSize& size,
                        std::int64_t total_steps, std::uint64_t seed,
                        Precision precision = Precision());

// train_peer.py's arguments for the real models at |size| (--resnet-config, --gpt-config).
std::vector<std::string> train_peer_size_args(const ModelSize& size);

}  // namespace tessera::bench
