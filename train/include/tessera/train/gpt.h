// A decoder-only transformer with nanoGPT's layout, names and initialisation (Karpathy's
// nanoGPT model.py), as bench/models_peer.py's PyTorch twin defines it: a Tessera state dict
// loads into the twin with load_state_dict(strict=True) and the other way round (docs/models.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/train/layers.h"

namespace tessera::train {

// nanoGPT's GPTConfig (tessera-train's defaults: its shakespeare_char recipe).
struct GPTConfig {
  std::int64_t vocab_size = 0;
  std::int64_t block_size = 256;  // the longest context
  int n_layer = 6;
  int n_head = 6;
  std::int64_t n_embd = 384;
  double dropout = 0.2;
  bool bias = true;  // biases in the Linear layers (LayerNorm always has one, as the twin's)
};

// nanoGPT's MLP: c_fc Linear(C, 4C), GELU (exact), c_proj Linear(4C, C), dropout. Prints as
// "MLP".
class GPTMLP : public Module {
 public:
  GPTMLP(std::int64_t n_embd, double dropout, bool bias, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;
  std::string name() const override { return "MLP"; }
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

// nanoGPT's Block: x + attn(ln_1(x)), then + mlp(ln_2(x)) (pre-LayerNorm). Prints as "Block".
class GPTBlock : public Module {
 public:
  GPTBlock(std::int64_t n_embd, int n_head, double dropout, bool bias, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;
  std::string name() const override { return "Block"; }
  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<GPTMLP> mlp;
};

// GPT: transformer.{wte: Embedding(vocab, C), wpe: Embedding(block_size, C), drop, h: n_layer
// Blocks, ln_f: LayerNorm(C)} and lm_head: Linear(C, vocab, bias=false) whose weight IS
// transformer.wte.weight (weight tying: one Variable, registered under both names). So
// state_dict() holds both transformer.wte.weight and lm_head.weight, as PyTorch's does, while
// named_parameters() and parameters() (hence optimizers, gradient clipping, num_parameters())
// see it once, under transformer.wte.weight; a load_state_dict whose two entries differ throws
// InvalidArgument (Module::load_state_dict). Initialisation as nanoGPT's: Linear and Embedding
// weights N(0, 0.02), biases 0, the residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 /
// sqrt(2 n_layer)), LayerNorm 1 / 0; the values come from |gen| (nullptr:
// default_init_generator()). Throws InvalidArgument for a non-positive vocab_size, block_size,
// n_layer, n_head or n_embd, an n_head that does not divide n_embd, or a dropout outside [0, 1).
class GPT : public Module {
 public:
  explicit GPT(GPTConfig config, Generator* gen = nullptr);

  // Logits [B, T, vocab_size] of token ids |idx| [B, T] (i32 or i64 on the model's device),
  // T <= block_size (nanoGPT's forward without targets). Throws InvalidArgument naming the
  // shape for an input that is not 2-D integer ids, or for T > block_size. Ids outside
  // [0, vocab_size) are the embedding op's error.
  Variable forward(const Tensor& idx);
  // The same on x's value (not differentiated).
  Variable forward(const Variable& x) override { return forward(x.value()); }

  const GPTConfig& config() const { return config_; }

  std::shared_ptr<ModuleDict> transformer;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;

 private:
  GPTConfig config_;
  Tensor positions_;  // arange(block_size) as i32 on the model's device, made on first use
};

// nanoGPT's GPT.generate: appends |max_new_tokens| tokens to |prompt| (token ids, at least one),
// each drawn from softmax(logits / temperature) of the last position given the last block_size
// tokens, restricted to the |top_k| most likely (0: all; clamped to vocab_size). temperature 0
// picks the most likely token (greedy). Draws with Tessera's Generator(seed), so the same seed
// gives the same text on every device up to ties in the logits. Runs in evaluation mode without
// gradients and restores the module's mode. Returns the prompt followed by the new tokens.
// Throws InvalidArgument for an empty prompt, an id outside [0, vocab_size), a negative or
// non-finite temperature, a negative top_k or max_new_tokens.
std::vector<std::int32_t> generate(GPT& model, std::vector<std::int32_t> prompt,
                                   std::int64_t max_new_tokens, double temperature = 1.0,
                                   std::int64_t top_k = 0, std::uint64_t seed = 0);

}  // namespace tessera::train
