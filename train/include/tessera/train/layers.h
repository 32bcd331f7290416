// Layers (torch.nn's modules) over the Module base of modules.h: the same names, constructor
// arguments and defaults, state_dict keys and initial distributions as torch.nn 1.13/2.x.
// Parameters are created on the default device and move with to().
//
// Initialisation: every constructor takes an optional Generator* last (nullptr: this thread's
// default_init_generator()); Linear and Conv2d also keep their older form with a Generator& after
// the sizes. The random numbers are Tessera's (random.h), not torch's: the distributions are
// torch's, the values are not.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/train/modules.h"
#include "tessera/train/strategy.h"

namespace tessera::train {

// How Linear and Conv2d initialise their weight. torch_default is torch.nn.Linear/Conv2d's own
// (kaiming_uniform with a = sqrt(5), i.e. uniform in +-1/sqrt(fan_in); bias uniform in
// +-1/sqrt(fan_in)); the others use the init.h function with ReLU's gain (Kaiming) or gain
// sqrt(2) (Xavier) and a zero bias.
enum class Init { torch_default, kaiming_uniform, kaiming_normal, xavier_uniform, xavier_normal };

// torch.nn.Linear: y = x @ weight^T + bias over x [..., in_features] (any leading dimensions,
// including none) -> [..., out_features]. weight [out, in], bias [out]. Throws InvalidArgument
// for non-positive sizes, or an input whose last dimension is not in_features.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         Init init = Init::torch_default, Generator* gen = nullptr);
  Linear(std::int64_t in_features, std::int64_t out_features, Generator& gen, bool with_bias = true,
         Init init = Init::torch_default)
      : Linear(in_features, out_features, with_bias, init, &gen) {}
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }
  Variable weight, bias;  // bias undefined when bias=false

 private:
  std::int64_t in_, out_;
};

// The Linear that torch.nn.MultiheadAttention names out_proj (the same layer; only its printed
// name differs).
class NonDynamicallyQuantizableLinear final : public Linear {
 public:
  using Linear::Linear;
  std::string name() const override { return "NonDynamicallyQuantizableLinear"; }
};

// torch.nn.Conv2d(in, out, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True)
// with square kernels, strides, padding and dilation: [N, in, H, W] -> [N, out, H', W'].
// weight [out, in/groups, k, k], bias [out]. Throws InvalidArgument for non-positive sizes,
// stride, dilation or groups, negative padding, or channels that groups does not divide.
class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         int stride = 1, int padding = 0, int dilation = 1, int groups = 1, bool bias = true,
         Init init = Init::torch_default, Generator* gen = nullptr);
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         Generator& gen, int stride = 1, int padding = 0, bool with_bias = true,
         Init init = Init::torch_default)
      : Conv2d(in_channels, out_channels, kernel_size, stride, padding, 1, 1, with_bias, init,
               &gen) {}
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  Variable weight, bias;

 private:
  std::int64_t in_, out_, k_;
  Conv2dAttrs attrs_;
};

// torch.nn.BatchNorm2d(num_features, eps=1e-5, momentum=0.1, affine=True,
// track_running_stats=True) over [N, C, H, W]. Parameters weight (ones) and bias (zeros) when
// affine; buffers running_mean (zeros), running_var (ones) and num_batches_tracked (an i64 scalar
// [], 0) when track_running_stats. Training normalises by the batch statistics, updates the
// running ones in place (unbiased variance, as torch) and adds 1 to num_batches_tracked; eval
// uses the running statistics (the batch's without them). momentum None (a cumulative average)
// is not offered. Throws InvalidArgument for num_features <= 0, eps <= 0, momentum outside
// [0, 1], or an input that is not 4-D with num_features channels.
//
// Synchronised (torch.nn.SyncBatchNorm): with a process group of more than one process set
// (convert_sync_batchnorm), training normalises by the statistics of the union of every
// process's batch: per channel, the count, mean and sum of squared deviations of each process's
// batch are summed over the processes (host all-reduce, in double), giving the global mean and
// biased variance; the running statistics take the global unbiased variance. Its backward sums
// dy and dy * (x - mean) over the processes for the input's gradient; the weight's and bias's
// gradients are this process's (DDP averages them, as PyTorch). Every process must run the same
// BatchNorm2d calls in the same order (collectives). Throws InvalidArgument when the job's batch
// holds one value per channel, DistributedError from the process group.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true, bool track_running_stats = true);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  // The processes whose batches training statistics are taken over (null or one process: this
  // process's batch, the default). Not owned; it must outlive the layer's training.
  void set_process_group(ProcessGroup* group) { group_ = group; }
  ProcessGroup* process_group() const { return group_; }
  Variable weight, bias;
  // The buffers (undefined without track_running_stats); to() and load_state_dict() replace
  // them, so read them here rather than keeping a copy.
  Tensor& running_mean() { return *running_mean_; }
  Tensor& running_var() { return *running_var_; }
  Tensor& num_batches_tracked() { return *num_batches_tracked_; }

 private:
  std::int64_t c_;
  double eps_, momentum_;
  bool affine_, track_;
  Tensor *running_mean_, *running_var_, *num_batches_tracked_;
  Tensor last_count_;            // the num_batches_tracked this layer wrote last
  std::int64_t host_count_ = 0;  // its value
  ProcessGroup* group_ = nullptr;
};

// torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group): sets |group| on every
// BatchNorm2d in |module| (itself included, in named_modules order) and returns how many there
// are. PyTorch replaces the layers by SyncBatchNorm; here the same layers synchronise (their
// parameters, buffers and state_dict names stay). A null |group| turns synchronisation off.
// Never throws.
std::int64_t convert_sync_batchnorm(Module& module, ProcessGroup* group);

// torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True): normalises
// the last normalized_shape.rank() dimensions; weight (ones) and bias (zeros) of
// normalized_shape. Throws InvalidArgument for an empty or non-positive shape or eps <= 0, and
// as layer_norm does for an input whose trailing dimensions differ.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  explicit LayerNorm(std::int64_t normalized_size, double eps = 1e-5,
                     bool elementwise_affine = true, bool with_bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, with_bias) {}
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  Variable weight, bias;

 private:
  Shape shape_;
  double eps_;
  bool affine_;
};

// torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx=None): rows of weight [V, D]
// (N(0, 1), the padding_idx row zero and never trained) picked by i32/i64 indices of any shape ->
// [..., D]. padding_idx in [-V, V) (negative counts from the end). Throws InvalidArgument for
// non-positive sizes or a padding_idx out of range.
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
            std::optional<std::int64_t> padding_idx = std::nullopt, Generator* gen = nullptr);
  Variable forward(const Tensor& indices);
  // Uses x's value as the indices (not differentiated).
  Variable forward(const Variable& x) override { return forward(x.value()); }
  std::string extra_repr() const override;
  Variable weight;

 private:
  std::int64_t num_, dim_;
  std::optional<std::int64_t> padding_idx_;
};

// torch.nn.GELU(approximate="none" | "tanh"); InvalidArgument for another approximation.
class GELU final : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Variable forward(const Variable& x) override { return gelu(x, approximate_); }
  std::string extra_repr() const override;

 private:
  std::string approximate_;
};

class SiLU final : public Module {
 public:
  Variable forward(const Variable& x) override { return silu(x); }
};

class ReLU final : public Module {
 public:
  Variable forward(const Variable& x) override { return relu(x); }
};

class Tanh final : public Module {
 public:
  Variable forward(const Variable& x) override { return tanh(x); }
};

class Identity final : public Module {
 public:
  Variable forward(const Variable& x) override { return x; }
};

// torch.nn.Flatten(start_dim=1, end_dim=-1).
class Flatten final : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Variable forward(const Variable& x) override { return flatten(x, start_, end_); }
  std::string extra_repr() const override;

 private:
  int start_, end_;
};

// torch.nn.MaxPool2d(kernel_size, stride=kernel_size) over [N, C, H, W], square windows; no
// padding, dilation or ceil_mode (the op has none). stride 0 means kernel_size.
class MaxPool2d final : public Module {
 public:
  explicit MaxPool2d(int kernel_size, int stride = 0);
  Variable forward(const Variable& x) override { return max_pool2d(x, attrs_); }
  std::string extra_repr() const override;

 private:
  Pool2dAttrs attrs_;
};

// torch.nn.AvgPool2d(kernel_size, stride=kernel_size, padding=0, ceil_mode=False,
// count_include_pad=True), square windows; stride 0 means kernel_size. ceil_mode=true is not
// supported (InvalidArgument), nor is padding over half the kernel.
class AvgPool2d final : public Module {
 public:
  explicit AvgPool2d(int kernel_size, int stride = 0, int padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Variable forward(const Variable& x) override { return avg_pool2d(x, attrs_); }
  std::string extra_repr() const override;

 private:
  AvgPool2dAttrs attrs_;
};

// torch.nn.AdaptiveAvgPool2d(output_size): [N, C, H, W] -> [N, C, out_h, out_w] (out_w = out_h
// when not given).
class AdaptiveAvgPool2d final : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::int64_t out_h, std::int64_t out_w = -1);
  Variable forward(const Variable& x) override { return adaptive_avg_pool2d(x, h_, w_); }
  std::string extra_repr() const override;

 private:
  std::int64_t h_, w_;
};

// Zeroes each element with probability p in training mode and scales the rest by 1/(1-p);
// the identity in evaluation mode. The mask is a pure function of (the dropout seed and step
// set by set_dropout_step, this layer's stream), so a resumed run draws the same masks.
class Dropout final : public Module {
 public:
  // |stream| tells apart the Dropout layers of one model; by default each new layer of the
  // process takes the next number. Throws InvalidArgument for p outside [0, 1).
  explicit Dropout(float p = 0.5f, std::int64_t stream = -1);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  float p() const { return p_; }
  std::uint64_t stream() const { return stream_; }

 private:
  float p_;
  std::uint64_t stream_;
};

// Sets the seed and step that Dropout layers (and attention dropout) on this thread draw their
// masks from (the Trainer sets them before each training step).
void set_dropout_step(std::uint64_t seed, std::uint64_t step);
// A fresh stream number for a layer that draws dropout masks, and the seed of its mask for the
// current step (set_dropout_step).
std::uint64_t next_dropout_stream();
std::uint64_t dropout_seed(std::uint64_t stream);

// torch.nn.MultiheadAttention(embed_dim, num_heads, dropout=0, bias=True, batch_first=False)
// with kdim = vdim = embed_dim. Parameters as torch: in_proj_weight [3E, E] (xavier_uniform),
// in_proj_bias [3E] (zeros), out_proj (a NonDynamicallyQuantizableLinear E -> E: torch_default
// weight, zero bias). Dropout on the attention probabilities in training mode (dropout seed as
// Dropout's). Throws InvalidArgument when num_heads does not divide embed_dim.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout = 0.0,
                     bool bias = true, bool batch_first = false, Generator* gen = nullptr);
  // forward(query, key, value, attn_mask, need_weights=False, is_causal) of torch: query
  // [B, L, E] ([L, B, E] unless batch_first; [L, E] unbatched), key and value [B, S, E] ->
  // [B, L, E]. |attn_mask| (optional): a boolean mask (true: not allowed, as torch) or a float
  // mask added to the scores, of shape [L, S] or [B * num_heads, L, S]. |is_causal| applies the
  // causal mask (query i sees keys j <= i) through the fused attention op, without attn_mask.
  // The attention weights are not returned. Throws InvalidArgument for mismatched shapes, or
  // attn_mask together with is_causal.
  Variable forward(const Variable& query, const Variable& key, const Variable& value,
                   const Tensor& attn_mask = Tensor(), bool is_causal = false);
  // Self-attention: forward(x, x, x).
  Variable forward(const Variable& x) override { return forward(x, x, x); }
  std::string extra_repr() const override { return ""; }
  Variable in_proj_weight, in_proj_bias;
  std::shared_ptr<NonDynamicallyQuantizableLinear> out_proj;

 private:
  std::int64_t e_, h_;
  double dropout_;
  bool batch_first_;
  std::uint64_t stream_;
};

// nanoGPT's CausalSelfAttention(n_embd, n_head, dropout=0, bias=True): c_attn Linear(C, 3C),
// c_proj Linear(C, C), attn_dropout and resid_dropout (Dropout(dropout)), in that order. forward
// on x [B, T, C]: q, k, v from c_attn split into n_head heads, the fused causal
// scaled_dot_product_attention (dropout on the probabilities in training), heads merged,
// c_proj, resid_dropout. Throws InvalidArgument when n_head does not divide n_embd or for an
// input that is not [B, T, n_embd].
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::int64_t n_embd, std::int64_t n_head, double dropout = 0.0,
                      bool bias = true, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;

 private:
  std::int64_t c_, h_;
  double dropout_;
};

}  // namespace tessera::train
