// The built-in ResNet and GPT on their own: construction errors, names, weight tying, forward
// errors, generate. (Their numerics against PyTorch: test_models_interop.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/gpt.h"
#include "tessera/train/resnet.h"

namespace tessera::train {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no InvalidArgument";
}

std::vector<std::string> keys(const StateDict& sd) {
  std::vector<std::string> k;
  for (const auto& e : sd) k.push_back(e.first);
  return k;
}

GPTConfig tiny_gpt() {
  GPTConfig c;
  c.vocab_size = 7;
  c.block_size = 6;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.dropout = 0;
  return c;
}

Tensor ids(const std::vector<std::int32_t>& v, Shape s) {
  return Tensor::from<std::int32_t>(v, s, &device("cpu"));
}

class Models : public ::testing::Test {
 protected:
  DeviceGuard guard_{device("cpu")};
};

TEST_F(Models, ResNetNamesShapesAndErrors) {
  Generator g(1);
  ResNet net({.depth = 8, .num_classes = 10, .in_channels = 1, .width = 4}, &g);
  const std::vector<std::string> k = keys(net.state_dict());
  // conv1, bn1 (5), 3 stages x 1 block x (conv1, bn1 x5, conv2, bn2 x5), fc (2).
  EXPECT_EQ(k.size(), 1 + 5 + 3 * 12 + 2u);
  EXPECT_EQ(k[0], "conv1.weight");
  EXPECT_EQ(k[5], "bn1.num_batches_tracked");
  EXPECT_EQ(k[6], "layer1.0.conv1.weight");
  EXPECT_EQ(k[k.size() - 3], "layer3.0.bn2.num_batches_tracked");
  EXPECT_EQ(k.back(), "fc.bias");
  EXPECT_EQ(net.fc->weight.shape(), (Shape{10, 16}));
  EXPECT_EQ(net.layer3->size(), 1u);
  // Option A has no parameters: only the convolutions, BatchNorms and fc.
  const std::int64_t convs =
      1 * 4 * 9 + (4 * 4 * 9 * 2) + (4 * 8 * 9 + 8 * 8 * 9) + (8 * 16 * 9 + 16 * 16 * 9);
  const std::int64_t bns = 2 * (4 + 4 + 4 + 8 + 8 + 16 + 16);
  EXPECT_EQ(net.num_parameters(), convs + bns + 16 * 10 + 10);
  // 28 -> 28 -> 14 -> 7: any size works through the global pooling.
  std::vector<float> x(2 * 28 * 28, 0.5f);
  const Variable y = net(Variable(Tensor::from(x, {2, 1, 28, 28})));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  EXPECT_NE(error_of([&] {
              net(Variable(Tensor::from(x, {2, 2, 14, 28})));
            }).find("[N, 1, H, W]"),
            std::string::npos);
  for (int depth : {0, 7, 9, 21})
    EXPECT_NE(error_of([&] { ResNet r({.depth = depth}); }).find("6n+2"), std::string::npos)
        << depth;
  EXPECT_NE(error_of([&] { ResNet r({.width = 0}); }).find("width (0)"), std::string::npos);
  EXPECT_NE(error_of([&] { BasicBlock b(8, 4, 1); }).find("planes at least in_planes"),
            std::string::npos);
}

TEST_F(Models, ResNetConvolutionsAreKaimingNormalFanOut) {
  Generator g(2);
  ResNet net({.depth = 8, .in_channels = 3, .width = 16}, &g);
  const std::vector<float> w = net.layer3->ptr(0)
                                   ->named_parameters()[0]
                                   .variable->value()
                                   .to_vector<float>();  // layer3.0.conv1: 64 x 32 x 3 x 3
  double sq = 0;
  for (float v : w) sq += double(v) * v;
  const double std = std::sqrt(sq / static_cast<double>(w.size()));
  EXPECT_NEAR(std, std::sqrt(2.0 / (64 * 9)), 0.05 * std::sqrt(2.0 / (64 * 9)));
  const std::vector<float> gamma = net.bn1->weight.value().to_vector<float>();
  EXPECT_TRUE(std::all_of(gamma.begin(), gamma.end(), [](float v) { return v == 1.0f; }));
}

TEST_F(Models, GptNamesAndTiedHead) {
  Generator g(3);
  GPT gpt(tiny_gpt(), &g);
  const std::vector<std::string> k = keys(gpt.state_dict());
  EXPECT_EQ(k.front(), "transformer.wte.weight");
  EXPECT_EQ(k[1], "transformer.wpe.weight");
  EXPECT_EQ(k[2], "transformer.h.0.ln_1.weight");
  EXPECT_EQ(k.back(), "lm_head.weight");
  EXPECT_NE(std::find(k.begin(), k.end(), "transformer.h.1.attn.c_attn.bias"), k.end());
  EXPECT_NE(std::find(k.begin(), k.end(), "transformer.h.1.mlp.c_proj.weight"), k.end());
  // One parameter under two names: listed once (the first name), counted once.
  std::vector<std::string> params;
  for (const NamedParameter& p : gpt.named_parameters()) params.push_back(p.name);
  EXPECT_EQ(params.size(), k.size() - 1);
  EXPECT_EQ(std::count(params.begin(), params.end(), "lm_head.weight"), 0);
  EXPECT_EQ(gpt.lm_head->weight.node(), gpt.wte->weight.node());
  const std::int64_t per_block = 4 * 8 + (8 * 24 + 24) + (8 * 8 + 8) + (8 * 32 + 32) + (32 * 8 + 8);
  EXPECT_EQ(gpt.num_parameters(), 7 * 8 + 6 * 8 + 2 * per_block + 2 * 8);
  // Both names' gradients are the one gradient, from both uses.
  const Variable logits = gpt.forward(ids({1, 2, 3, 4}, {1, 4}));
  EXPECT_EQ(logits.shape(), (Shape{1, 4, 7}));
  sum(sum(logits, 2), 1).backward();
  ASSERT_TRUE(gpt.wte->weight.grad().defined());
  EXPECT_EQ(gpt.lm_head->weight.grad().shape(), (Shape{7, 8}));
}

TEST_F(Models, GptLoadsTiedWeightsOnlyWhenBothAreEqual) {
  Generator g(4);
  GPT a(tiny_gpt(), &g), b(tiny_gpt(), &g);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.lm_head->weight.value().to_vector<float>(), a.wte->weight.value().to_vector<float>());
  EXPECT_EQ(b.lm_head->weight.node(), b.wte->weight.node());  // still tied
  StateDict sd = a.state_dict();
  for (auto& [name, t] : sd)
    if (name == "lm_head.weight") t = Tensor::full(t.shape(), 0.25, DType::f32, &device("cpu"));
  const std::string e = error_of([&] { b.load_state_dict(sd); });
  EXPECT_NE(e.find("transformer.wte.weight and lm_head.weight are one tied parameter"),
            std::string::npos)
      << e;
}

TEST_F(Models, GptForwardErrors) {
  GPT gpt(tiny_gpt());
  EXPECT_NE(error_of([&] {
              gpt.forward(ids(std::vector<std::int32_t>(7, 1), {1, 7}));
            }).find("length 7, the block size is only 6"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              gpt.forward(Tensor::from({1.0f, 2.0f}, {1, 2}));
            }).find("i32 or i64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gpt.forward(ids({1, 2}, {2})); }).find("[B, T]"), std::string::npos);
  for (auto bad : {GPTConfig{.vocab_size = 0}, GPTConfig{.vocab_size = 5, .n_head = 5},
                   GPTConfig{.vocab_size = 5, .dropout = 1.0}})
    EXPECT_NE(error_of([&] { GPT m(bad); }).find("n_head must divide n_embd"), std::string::npos);
}

TEST_F(Models, GenerateCropsTheContextAndRepeatsForASeed) {
  Generator g(5);
  GPT gpt(tiny_gpt(), &g);
  gpt.train();
  const std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 0, 1};  // longer than block_size 6
  const auto a = generate(gpt, prompt, 12, 1.0, 0, 9);
  EXPECT_TRUE(gpt.is_training());  // the mode is restored
  ASSERT_EQ(a.size(), prompt.size() + 12);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), a.begin()));
  for (std::int32_t t : a) EXPECT_TRUE(t >= 0 && t < 7);
  EXPECT_EQ(generate(gpt, prompt, 12, 1.0, 0, 9), a);
  // top_k 1 is greedy whatever the temperature and seed; temperature 0 too.
  const auto greedy = generate(gpt, prompt, 12, 0.0, 0, 1);
  EXPECT_EQ(generate(gpt, prompt, 12, 5.0, 1, 2), greedy);
  EXPECT_EQ(generate(gpt, prompt, 0, 1.0, 0, 0), prompt);
}

TEST_F(Models, GenerateErrors) {
  GPT gpt(tiny_gpt());
  EXPECT_NE(error_of([&] { generate(gpt, {}, 3); }).find("prompt is empty"), std::string::npos);
  EXPECT_NE(error_of([&] {
              generate(gpt, {1, 7}, 3);
            }).find("token 7 at position 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { generate(gpt, {1}, 3, -0.5); }).find("temperature"), std::string::npos);
  EXPECT_NE(error_of([&] { generate(gpt, {1}, 3, NAN); }).find("temperature"), std::string::npos);
  EXPECT_NE(error_of([&] { generate(gpt, {1}, 3, 1.0, -1); }).find("top_k (-1)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { generate(gpt, {1}, -1); }).find("max_new_tokens (-1)"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::train
