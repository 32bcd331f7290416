// LanguageModel: nanoGPT's recipe (param groups, warmup then cosine), its steps, sampling on text,
// and the weights file that carries the configuration and vocabulary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numbers>

#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/language_model.h"
#include "tessera/train/lr_scheduler.h"
#include "tessera/train/safetensors.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

const std::string kVocab = "\n abehlot";

GPTConfig tiny() {
  GPTConfig c;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.dropout = 0;
  return c;
}

class LanguageModelTest : public ::testing::Test {
 protected:
  DeviceGuard guard_{device("cpu")};
  fs::path dir_ = fs::path(::testing::TempDir()) / ("tessera_lm_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
};

TEST_F(LanguageModelTest, StateDictIsTheGptsAndTheVocabularySetsItsSize) {
  LanguageModel lm(tiny(), kVocab);
  EXPECT_EQ(lm.gpt().config().vocab_size, 9);
  const StateDict a = lm.state_dict(), b = lm.gpt().state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].first, b[i].first);
  EXPECT_EQ(lm.named_parameters().size(), a.size() - 1);  // the tied head once
  lm.eval();
  EXPECT_FALSE(lm.gpt().transformer->is_training());
  EXPECT_THROW(LanguageModel(tiny(), "ba"), InvalidArgument);  // not increasing
  LanguageModelOptions bad;
  bad.beta2 = 1.0;
  EXPECT_THROW(LanguageModel(tiny(), kVocab, bad), InvalidArgument);
}

TEST_F(LanguageModelTest, WeightDecayOnMatricesOnlyWarmupThenCosine) {
  LanguageModelOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  o.warmup_steps = 4;
  o.max_steps = 14;
  LanguageModel lm(tiny(), kVocab, o);
  const OptimizerConfig config = lm.configure_optimizers();
  ASSERT_TRUE(config.optimizer && config.lr_scheduler);
  EXPECT_EQ(config.optimizer->name(), "adamw");
  EXPECT_EQ(config.interval, "step");
  const auto& groups = config.optimizer->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].weight_decay, 0.1);
  EXPECT_EQ(groups[1].weight_decay, 0.0);
  for (const NamedParameter& p : groups[0].params)
    EXPECT_GE(p.variable->shape().rank(), 2) << p.name;
  for (const NamedParameter& p : groups[1].params)
    EXPECT_LT(p.variable->shape().rank(), 2) << p.name;
  EXPECT_EQ(groups[0].params.size() + groups[1].params.size(), lm.named_parameters().size());
  // lr * (s + 1) / 4 for s < 4, then cosine from lr to lr / 10 over 10 steps.
  LRScheduler& sched = *config.lr_scheduler;
  for (std::int64_t s = 0; s <= 14; ++s) {
    const double want =
        s < 4 ? 0.01 * static_cast<double>(s + 1) / 4
              : 0.001 +
                    0.009 * (1 + std::cos(std::numbers::pi * static_cast<double>(s - 4) / 10)) / 2;
    EXPECT_NEAR(config.optimizer->lr(), want, 1e-12) << "step " << s;
    EXPECT_NEAR(config.optimizer->param_groups()[1].lr, want, 1e-12) << "step " << s;
    sched.step();
  }
}

TEST_F(LanguageModelTest, TrainingStepIsTheCrossEntropyOfTheNextCharacter) {
  Generator g(1);
  LanguageModel lm(tiny(), kVocab, {}, &g);
  const std::vector<std::int32_t> x = {1, 2, 3, 4, 5, 6}, y = {2, 3, 4, 5, 6, 7};
  TensorBatch batch{
      {Tensor::from<std::int32_t>(x, {2, 3}), Tensor::from<std::int32_t>(y, {2, 3})}, 2, 0};
  const Variable loss = lm.training_step(batch, 0);
  const Variable want = cross_entropy(lm.forward(Variable(batch[0])), batch[1]);
  EXPECT_NEAR(loss.value().item(), want.value().item(), 1e-6);
  // Near log(9) for an untrained model (weights N(0, 0.02)).
  EXPECT_NEAR(loss.value().item(), std::log(9.0), 0.1);
  loss.backward();
  EXPECT_TRUE(lm.gpt().wte->weight.grad().defined());
}

TEST_F(LanguageModelTest, GenerateTextKeepsThePromptAndRefusesUnknownCharacters) {
  Generator g(2);
  LanguageModel lm(tiny(), kVocab, {}, &g);
  const std::string a = lm.generate_text("hello", 20, 1.0, 0, 5);
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a.substr(0, 5), "hello");
  for (char c : a) EXPECT_NE(kVocab.find(c), std::string::npos);
  EXPECT_EQ(lm.generate_text("hello", 20, 1.0, 0, 5), a);
  EXPECT_EQ(lm.generate_text("", 7, 1.0, 3, 1).size(), 7u);
  try {
    lm.generate_text("Hello!", 3);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'!', 'H'"), std::string::npos) << e.what();
  }
}

TEST_F(LanguageModelTest, WeightsFileRoundTripsWithConfigurationAndVocabulary) {
  Generator g(3);
  LanguageModel lm(tiny(), kVocab, {}, &g);
  const fs::path f = dir_ / "lm.safetensors";
  save_language_model(lm, f);
  const SafetensorsContents c = load_safetensors(f);
  EXPECT_EQ(c.metadata.at("gpt.vocab"), "0a20616265686c6f74");
  EXPECT_EQ(c.metadata.at("format"), "pt");
  EXPECT_EQ(c.tensors.back().first, "lm_head.weight");
  const auto back = load_language_model(f, &device("cpu"));
  EXPECT_EQ(back->vocab(), kVocab);
  EXPECT_EQ(back->gpt().config().n_embd, 8);
  EXPECT_FALSE(back->is_training());
  EXPECT_EQ(back->generate_text("hat", 10, 0.7, 4, 9), lm.generate_text("hat", 10, 0.7, 4, 9));
}

TEST_F(LanguageModelTest, MetadataErrorsNameTheKey) {
  LanguageModel lm(tiny(), kVocab);
  const std::map<std::string, std::string> good = lm.hyperparameters();
  EXPECT_EQ(read_gpt_hyperparameters(good, "f").vocab, kVocab);
  auto with = [&](const std::string& k, const std::string& v) {
    auto m = good;
    if (v == "<erase>")
      m.erase(k);
    else
      m[k] = v;
    try {
      read_gpt_hyperparameters(m, "f.safetensors");
    } catch (const FileError& e) {
      return std::string(e.what());
    }
    return std::string("no FileError");
  };
  EXPECT_NE(with("gpt.n_head", "<erase>").find("'gpt.n_head' is missing"), std::string::npos);
  EXPECT_NE(with("tessera.model", "resnet").find("'tessera.model'"), std::string::npos);
  EXPECT_NE(with("gpt.n_layer", "-1").find("positive decimal integer"), std::string::npos);
  EXPECT_NE(with("gpt.n_embd", "8x").find("'gpt.n_embd'"), std::string::npos);
  EXPECT_NE(with("gpt.dropout", "1.5").find("[0, 1)"), std::string::npos);
  EXPECT_NE(with("gpt.bias", "yes").find("true or false"), std::string::npos);
  EXPECT_NE(with("gpt.vocab", "0a2").find("hex"), std::string::npos);
  EXPECT_NE(with("gpt.vocab", "2061").find("holds 2 characters but gpt.vocab_size is 9"),
            std::string::npos);
  EXPECT_NE(with("gpt.vocab", "61616263646566676869").find("increasing"), std::string::npos);
  for (const std::string& m : {with("gpt.bias", "yes"), with("gpt.n_head", "<erase>")})
    EXPECT_EQ(m.rfind("f.safetensors", 0), 0u) << m;
}

}  // namespace
}  // namespace tessera::train
