// docs/training.md's example: a residual CNN with Dropout and a loss of its own, written as a
// LightningModule, trained by the Trainer on Fashion-MNIST; the best weights are saved alone and
// loaded again for inference by a second run of the program.
//
//   tessera-example-lightning-cnn train OUT_DIR [BATCHES]   trains (BATCHES per epoch; 0: all)
//   tessera-example-lightning-cnn predict OUT_DIR           loads OUT_DIR/best.safetensors
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tessera/tessera.h>
#include <tessera/train/train.h>

using namespace tessera::train;
using tessera::Tensor;

// conv-bn-relu twice, plus the input (He et al.'s basic block).
struct ResidualBlock : Module {
  explicit ResidualBlock(std::int64_t c) {
    conv1 = register_module("conv1", std::make_shared<Conv2d>(c, c, 3, 1, 1, 1, 1, false));
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(c));
    conv2 = register_module("conv2", std::make_shared<Conv2d>(c, c, 3, 1, 1, 1, 1, false));
    bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(c));
  }
  Variable forward(const Variable& x) override {
    const Variable y = relu((*bn1)((*conv1)(x)));
    return relu(add((*bn2)((*conv2)(y)), x));
  }
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
};

struct ResidualCnn : LightningModule {
  ResidualCnn() {
    stem = register_module("stem", std::make_shared<Conv2d>(1, 16, 3, 1, 1));
    block = register_module("block", std::make_shared<ResidualBlock>(16));
    pool = register_module("pool", std::make_shared<AdaptiveAvgPool2d>(1));
    drop = register_module("drop", std::make_shared<Dropout>(0.2f));
    fc = register_module("fc", std::make_shared<Linear>(16, 10));
  }
  Variable forward(const Variable& x) override {
    const Variable h = (*block)(relu((*stem)(x)));
    return (*fc)((*drop)(flatten((*pool)(h), 1)));
  }
  // Cross-entropy plus a small penalty on the logits' size: any loss built from autograd ops.
  Variable loss(const Variable& logits, const Tensor& labels) {
    return add(cross_entropy(logits, labels), mul_scalar(mean(mul(logits, logits), {0, 1}), 1e-4));
  }
  Variable training_step(const TensorBatch& batch, std::int64_t) override {
    const Variable logits = forward(Variable(batch[0]));
    const Variable l = loss(logits, batch[1]);
    LogOptions bar;
    bar.prog_bar = true;
    log("train_loss", l, bar);
    return l;  // the Trainer does zero_grad, backward, clipping and the optimizer step
  }
  void validation_step(const TensorBatch& batch, std::int64_t) override {
    const Variable logits = forward(Variable(batch[0]));
    log("val_loss", loss(logits, batch[1]));
    const Tensor hits =
        tessera::eq(tessera::cast(tessera::argmax(logits.value(), 1), tessera::DType::f32),
                    tessera::cast(batch[1], tessera::DType::f32));
    log("val_acc", tessera::mean(tessera::cast(hits, tessera::DType::f32), 0));
  }
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig c;
    AdamWOptions o;
    o.lr = 2e-3;
    c.optimizer = std::make_shared<AdamW>(named_parameters(), o);
    c.lr_scheduler = std::make_shared<CosineAnnealingLR>(*c.optimizer, 2 * 469);
    c.interval = "step";
    return c;
  }
  std::shared_ptr<Conv2d> stem;
  std::shared_ptr<ResidualBlock> block;
  std::shared_ptr<AdaptiveAvgPool2d> pool;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> fc;
};

int train(const std::string& out, std::int64_t batches) {
  Dataset train = load_mnist_split(kDefaultFashionMnistDir, "train");
  Dataset test = load_mnist_split(kDefaultFashionMnistDir, "t10k");
  LoaderOptions lo;
  lo.batch_size = 128;
  ImageDataLoader train_loader(train, lo);
  lo.shuffle = false;
  ImageDataLoader val_loader(test, lo);

  ModelCheckpointOptions best;
  best.dirpath = out;
  best.monitor = "val_acc";
  best.mode = "max";
  best.save_top_k = 1;
  best.best_weights = "best.safetensors";  // the weights alone, for inference

  EarlyStoppingOptions early;
  early.monitor = "val_loss";
  early.patience = 3;

  TrainerOptions options;
  options.max_epochs = 2;
  options.limit_train_batches = batches;
  options.limit_val_batches = batches;
  options.val_check_interval = 0.5;  // validate twice an epoch
  options.gradient_clip_val = 1.0;
  auto checkpoint = std::make_shared<ModelCheckpoint>(best);
  options.callbacks = {checkpoint, std::make_shared<EarlyStopping>(early),
                       std::make_shared<CsvLogger>(out + "/metrics.csv")};
  Trainer trainer(options);
  tessera::train::seed_everything(0);
  ResidualCnn model;
  trainer.fit(model, train_loader, &val_loader);
  std::printf("best val_acc %.4f (%s)\n", checkpoint->best_model_score(),
              checkpoint->best_model_path().c_str());
  return 0;
}

int predict(const std::string& out) {
  ResidualCnn model;  // fresh weights, replaced by the file's
  load(model, out + "/best.safetensors");
  model.eval();  // BatchNorm on its running statistics, Dropout off
  Dataset test = load_mnist_split(kDefaultFashionMnistDir, "t10k").head(512);
  LoaderOptions lo;
  lo.batch_size = 512;
  lo.shuffle = false;
  ImageDataLoader loader(test, lo);
  loader.begin_epoch(1);
  TensorBatch batch;
  loader.next(batch);
  tessera::train::NoGradGuard no_grad;
  tessera::Device& device = tessera::default_device();
  model.to(device);
  const Variable logits = model(Variable(batch[0].to(device)));
  const std::vector<std::int32_t> predicted =
      tessera::argmax(logits.value(), 1).to_vector<std::int32_t>();
  const std::vector<std::int32_t> labels = batch[1].to_vector<std::int32_t>();
  int right = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) right += predicted[i] == labels[i];
  std::printf("predicted %zu images, accuracy %.4f\n", labels.size(),
              static_cast<double>(right) / static_cast<double>(labels.size()));
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode == "train") return train(argv[2], argc > 3 ? std::atoll(argv[3]) : 0);
  if (mode == "predict") return predict(argv[2]);
  std::fprintf(stderr, "usage: %s train OUT_DIR [BATCHES] | predict OUT_DIR\n", argv[0]);
  return 2;
}
