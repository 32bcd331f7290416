// The C++ Trainer with strategy="ddp" under mpirun (a LightningModule: ImageClassifier): the
// same weights and validation metrics as one process with the global batch.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "dist_test_util.h"
#include "tessera/dist/dist.h"
#include "tessera/train/train.h"

namespace {

using namespace tessera;
using namespace tessera::train;
using tessera::dist::MpiProcessGroup;

using tessera::dist::testing::group;
using tessera::dist::testing::job_seed;

// 96 random 8x8 images of 4 classes, the same on every rank (the job's seed).
Dataset synthetic() {
  std::mt19937_64 gen(job_seed());
  Dataset d;
  d.name = "synthetic";
  d.size = 96;
  d.rows = d.cols = 8;
  d.num_classes = 4;
  for (std::int64_t i = 0; i < d.size * 64; ++i) d.images.push_back(gen() % 256);
  for (std::int64_t i = 0; i < d.size; ++i) d.labels.push_back(gen() % 4);
  return d;
}

struct FitResult {
  std::vector<std::vector<float>> weights;
  std::map<std::string, double> metrics;
  int world = 0;
};

FitResult fit(const Dataset& d, const std::string& strategy, std::int64_t batch) {
  seed_everything(11);
  auto net = std::make_shared<Sequential>();
  net->add(std::make_shared<Flatten>());
  net->add(std::make_shared<Linear>(64, 4));
  ImageClassifier model(net);
  TrainerOptions o;
  o.accelerator = "cpu";
  o.strategy = strategy;
  o.max_epochs = 2;
  o.enable_progress_bar = false;
  Trainer trainer(o);
  LoaderOptions lo;
  lo.batch_size = batch;
  lo.seed = 3;
  ImageDataLoader train_loader(d, lo);
  lo.shuffle = false;
  const Dataset val = d.head(90);  // the loader keeps a reference
  ImageDataLoader val_loader(val, lo);
  trainer.fit(model, train_loader, &val_loader);
  FitResult r;
  for (const auto& p : net->named_parameters())
    r.weights.push_back(p.variable->value().to_vector<float>());
  r.metrics = trainer.callback_metrics();
  r.world = trainer.world_size();
  return r;
}

TEST(DDPTrainer, FitWithStrategyDdpMatchesOneProcessWithTheGlobalBatch) {
  const Dataset d = synthetic();
  const int n = group().size();
  const FitResult ddp = fit(d, "ddp", 8);
  const FitResult one = fit(d, "single_device", 8 * n);
  EXPECT_EQ(ddp.world, n);
  EXPECT_EQ(one.world, 1);
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < ddp.weights.size(); ++i)
    for (std::size_t k = 0; k < ddp.weights[i].size(); ++k) {
      err += std::pow(ddp.weights[i][k] - one.weights[i][k], 2);
      ref += std::pow(one.weights[i][k], 2);
    }
  EXPECT_LT(std::sqrt(err / ref), 1e-5);
  // Validation sharded without padding, reduced over the ranks: every sample counted once.
  for (const char* m : {"val_loss", "val_acc"}) {
    ASSERT_TRUE(ddp.metrics.count(m) && one.metrics.count(m)) << m;
    EXPECT_NEAR(ddp.metrics.at(m), one.metrics.at(m), 1e-5 * (1 + std::abs(one.metrics.at(m))))
        << m;
  }
}

}  // namespace
