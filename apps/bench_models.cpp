#include "bench_models.h"

#include <algorithm>
#include <array>
#include <memory>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/language_model.h"
#include "tessera/train/train.h"

namespace tessera::bench {

namespace tt = tessera::train;

namespace {

ModelSize full_size() {
  ModelSize s;
  s.name = "full";
  return s;
}

ModelSize small_size() {
  ModelSize s;
  s.name = "small";
  s.resnet_batch = 32;
  s.gpt_layers = 2;
  s.gpt_heads = 4;
  s.gpt_width = 128;
  s.gpt_context = 64;
  s.gpt_batch = 16;
  s.gpt_max_steps = 200;
  s.gpt_val_every = 100;
  s.gpt_warmup = 20;
  return s;
}

ModelSize tiny_size() {
  ModelSize s;
  s.name = "tiny";
  s.resnet_depth = 8;
  s.resnet_width = 4;
  s.resnet_batch = 8;
  s.gpt_layers = 1;
  s.gpt_heads = 2;
  s.gpt_width = 16;
  s.gpt_context = 16;
  s.gpt_batch = 4;
  s.gpt_max_steps = 4;
  s.gpt_val_every = 2;
  s.gpt_warmup = 2;
  s.gpt_val_batches = 2;
  return s;
}

const std::array<ModelSize, 3>& sizes() {
  static const std::array<ModelSize, 3> all{full_size(), small_size(), tiny_size()};
  return all;
}

// |n| random ids in [0, bound) from |gen| as an i32 tensor of |shape| on |dev|.
Tensor random_ids(tt::Generator& gen, std::int64_t bound, Shape shape, Device& dev) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(shape.numel()));
  for (auto& id : ids) id = static_cast<std::int32_t>(gen.below(static_cast<std::uint64_t>(bound)));
  return Tensor::from<std::int32_t>(ids, shape, &dev);
}

TrainJob resnet_job(Device& dev, const ModelSize& size, std::int64_t total_steps,
                    std::uint64_t seed, const Precision& precision) {
  tt::Generator gen(seed);
  tt::ResNetOptions o;
  o.depth = size.resnet_depth;
  o.width = size.resnet_width;
  auto model = std::make_shared<tt::ResNet>(o, &gen);
  const std::int64_t b = size.resnet_batch;
  std::vector<float> pixels(static_cast<std::size_t>(b * 28 * 28));
  for (float& p : pixels) p = gen.normal();
  const Tensor x = Tensor::from(pixels, {b, 1, 28, 28}, &dev);
  const Tensor y = random_ids(gen, 10, Shape{b}, dev);
  tt::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  so.weight_decay = 5e-4;
  so.nesterov = true;
  auto opt = std::make_shared<tt::SGD>(model->named_parameters(), so);
  auto sched = std::make_shared<tt::OneCycleLR>(*opt, so.lr, total_steps);
  TrainJob job;
  job.step = [model, opt, sched, x, y, precision] {
    const tt::Variable loss =
        precision.forward_backward([&] { return tt::cross_entropy((*model)(tt::Variable(x)), y); });
    precision.step(*opt);
    sched->step();
    opt->zero_grad();
    return loss.value();
  };
  job.batch = b;
  job.samples_per_step = b;
  job.sample = "image";
  job.config = {{"depth", o.depth}, {"width", o.width}, {"batch", b}};
  return job;
}

TrainJob gpt_job(Device& dev, const ModelSize& size, std::int64_t total_steps, std::uint64_t seed,
                 const Precision& precision) {
  tt::Generator gen(seed);
  tt::GPTConfig c;
  c.block_size = size.gpt_context;
  c.n_layer = size.gpt_layers;
  c.n_head = size.gpt_heads;
  c.n_embd = size.gpt_width;
  std::string vocab;  // any gpt_vocab distinct bytes: the ids are random
  for (std::int64_t i = 0; i < size.gpt_vocab; ++i) vocab += static_cast<char>(i);
  tt::LanguageModelOptions lo;
  lo.max_steps = total_steps;
  auto model = std::make_shared<tt::LanguageModel>(c, vocab, lo, &gen);
  const std::int64_t b = size.gpt_batch, t = size.gpt_context;
  const Tensor x = random_ids(gen, size.gpt_vocab, Shape{b, t}, dev);
  const Tensor y = random_ids(gen, size.gpt_vocab, Shape{b, t}, dev);
  const tt::OptimizerConfig oc = model->configure_optimizers();
  const std::vector<tt::Variable> params = model->parameters();
  auto steps = std::make_shared<std::uint64_t>(0);
  TrainJob job;
  job.step = [model, oc, params, x, y, seed, steps, precision] {
    tt::set_dropout_step(seed, (*steps)++);  // a fresh dropout mask each step, as the Trainer
    const tt::Variable loss = precision.forward_backward(
        [&] { return tt::cross_entropy(model->forward(tt::Variable(x)), y); });
    precision.step(*oc.optimizer, [&] { (void)tt::clip_grad_norm_(params, 1.0); });
    if (oc.lr_scheduler) oc.lr_scheduler->step();
    oc.optimizer->zero_grad();
    return loss.value();
  };
  job.batch = b;
  job.samples_per_step = b * t;
  job.sample = "token";
  job.config = {{"n_layer", c.n_layer},
                {"n_head", c.n_head},
                {"n_embd", c.n_embd},
                {"block_size", t},
                {"vocab_size", size.gpt_vocab},
                {"dropout", c.dropout},
                {"batch", b}};
  return job;
}

}  // namespace

const std::string& model_size_list() {
  static const std::string list = "full, small, tiny";
  return list;
}

const ModelSize& model_size(const std::string& name) {
  for (const ModelSize& s : sizes())
    if (s.name == name) return s;
  throw InvalidArgument(
      fmt::format("--model-size: '{}' is not a model size ({})", name, model_size_list()));
}

bool is_real_model(const std::string& model) {
  return model == "resnet" || model == "gpt";
}

Precision::Precision(DType t)
    : dtype(t), scaler(t == DType::f16 ? std::make_shared<tt::GradScaler>() : nullptr) {}

tt::Variable Precision::forward_backward(const std::function<tt::Variable()>& forward) const {
  tt::Variable loss;
  {
    const tt::AutocastGuard autocast(dtype);
    loss = forward();
  }
  (scaler ? scaler->scale(loss) : loss).backward();
  return loss;
}

void Precision::step(tt::Optimizer& optimizer, const std::function<void()>& clip) const {
  if (scaler) scaler->unscale_(optimizer);
  if (clip) clip();
  if (!scaler) return optimizer.step();
  (void)scaler->step(optimizer);
  scaler->update();
}

TrainJob make_train_job(Device& dev, const std::string& model, const ModelSize& size,
                        std::int64_t total_steps, std::uint64_t seed, Precision precision) {
  DeviceGuard guard(dev);
  const std::int64_t steps = std::max<std::int64_t>(total_steps, 2);
  if (model == "resnet") return resnet_job(dev, size, steps, seed, precision);
  if (model == "gpt") return gpt_job(dev, size, steps, seed, precision);
  throw InvalidArgument(fmt::format("make_train_job: '{}' is not resnet or gpt", model));
}

std::vector<std::string> train_peer_size_args(const ModelSize& s) {
  return {
      "--resnet-config",
      fmt::format("depth={},width={},batch={}", s.resnet_depth, s.resnet_width, s.resnet_batch),
      "--gpt-config",
      fmt::format("n_layer={},n_head={},n_embd={},block_size={},vocab_size={},batch={}",
                  s.gpt_layers, s.gpt_heads, s.gpt_width, s.gpt_context, s.gpt_vocab, s.gpt_batch)};
}

}  // namespace tessera::bench
