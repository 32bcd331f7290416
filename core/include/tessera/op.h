// The op set: every op is defined once here (name, inputs, outputs, attributes) and its shape rule
// lives in core/src/op_table.cpp. Plugins register kernels for these ids. Adding or reordering an
// op changes the plugin ABI (TESSERA_PLUGIN_ABI_VERSION in plugin.h).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "tessera/tensor.h"

namespace tessera {

enum class OpId : std::uint16_t {
  matmul,                  // (a, b) -> op(a) @ op(b); 2-D, MatmulAttrs
  add,                     // (a, b) -> a + b, broadcast (strided inputs)
  sub,                     // (a, b) -> a - b, broadcast (strided inputs)
  mul,                     // (a, b) -> a * b, broadcast (strided inputs)
  div,                     // (a, b) -> a / b, broadcast (strided inputs)
  add_scalar,              // (a) -> a + s, ScalarAttrs
  mul_scalar,              // (a) -> a * s, ScalarAttrs
  relu,                    // (x) -> max(x, 0)
  relu_backward,           // (grad, x) -> grad * (x > 0)
  exp,                     // (x) -> e^x
  log,                     // (x) -> ln x
  tanh,                    // (x) -> tanh x
  sigmoid,                 // (x) -> 1 / (1 + e^-x)
  sum,                     // (x) -> sum along axis, AxisAttrs
  mean,                    // (x) -> mean along axis, AxisAttrs
  max,                     // (x) -> max along axis, AxisAttrs
  argmax,                  // (x) -> i32 index of the max along axis (first on ties), AxisAttrs
  softmax,                 // (x) -> softmax along axis, AxisAttrs (keepdim ignored)
  log_softmax,             // (x) -> log_softmax along axis, AxisAttrs (keepdim ignored)
  cross_entropy,           // (logits [N,C] or [N,T,C], labels i32/i64 [N] or [N,T]) -> mean
                           // loss, shape [], CrossEntropyAttrs
  cross_entropy_backward,  // (logits, labels, grad []) -> d loss / d logits, CrossEntropyAttrs
  conv2d,                  // (x [N,C,H,W], w [O,C,KH,KW]) -> [N,O,HO,WO], Conv2dAttrs
  conv2d_backward_input,   // (grad [N,O,HO,WO], w) -> [N,C,H,W] (shape given), Conv2dAttrs
  conv2d_backward_weight,  // (grad [N,O,HO,WO], x) -> [O,C,KH,KW] (shape given), Conv2dAttrs
  max_pool2d,              // (x [N,C,H,W]) -> (y [N,C,HO,WO], i32 argmax h*W+w), Pool2dAttrs
  max_pool2d_backward,     // (grad [N,C,HO,WO], indices) -> [N,C,H,W] (shape given), Pool2dAttrs
  copy,                    // (x strided) -> contiguous copy (strided inputs)
  fill,                    // () -> out[...] = s, in place, ScalarAttrs
  sgd_update,              // (grad) -> param, momentum updated in place, SgdAttrs
  adam_update,             // (grad) -> param, m, v updated in place, AdamAttrs
  max_backward,            // (grad [reduced], x) -> grad at the first max along axis, AxisAttrs
  dropout_mask,  // () -> out[i] = 0 or 1/(1-p), a pure function of (seed, i), DropoutAttrs
  dropout,       // (x) -> x * dropout_mask (contiguous; its own backward), DropoutAttrs
  addmm,         // (a, b, bias [N]) -> op(a) @ op(b) + bias on every row; 2-D, MatmulAttrs

  // --- tensor API: casts, factories, indexing ---
  cast,          // (x strided) -> x converted to the output's dtype (given by the caller)
  copy_into,     // (src strided, broadcast) -> written into the output, a strided view, in place
  arange,        // () -> out[i] = start + i * step, in place, RangeAttrs
  rand,          // () -> uniform in [0, 1), a pure function of (seed, i), in place, RandomAttrs
  randn,         // () -> standard normal, a pure function of (seed, i), in place, RandomAttrs
  randint,       // () -> integers uniform in [low, high), in place, RandomAttrs
  index_select,  // (x, index i32/i64 [K]) -> x's slices at index along axis, AxisAttrs
  index_select_backward,  // (grad, index) -> scatter-add along axis (shape given), AxisAttrs

  // --- element-wise math, comparisons, selection ---
  neg,            // (x) -> -x
  abs,            // (x) -> |x|
  sign,           // (x) -> -1, 0 or 1 (0 for NaN, as torch 1.13)
  sqrt,           // (x) -> sqrt x
  rsqrt,          // (x) -> 1 / sqrt x
  pow,            // (x) -> x^p for a scalar exponent p, ScalarAttrs (torch.pow(Tensor, Scalar))
  clamp,          // (x) -> min(max(x, lo), hi), ClampAttrs
  gelu,           // (x) -> x * Phi(x), GeluAttrs (erf or tanh form)
  gelu_backward,  // (grad, x) -> grad * d gelu / dx, GeluAttrs
  silu,           // (x) -> x * sigmoid(x)
  silu_backward,  // (grad, x) -> grad * d silu / dx
  erf,            // (x) -> erf x
  minimum,        // (a, b) -> element-wise min, NaN if either is NaN; broadcast (strided inputs)
  maximum,        // (a, b) -> element-wise max, NaN if either is NaN; broadcast (strided inputs)
  eq,             // (a, b) -> bool mask a == b, broadcast (strided inputs)
  ne,             // (a, b) -> bool mask a != b, broadcast (strided inputs)
  lt,             // (a, b) -> bool mask a < b, broadcast (strided inputs)
  le,             // (a, b) -> bool mask a <= b, broadcast (strided inputs)
  gt,             // (a, b) -> bool mask a > b, broadcast (strided inputs)
  ge,             // (a, b) -> bool mask a >= b, broadcast (strided inputs)
  where,          // (cond bool, a, b) -> cond ? a : b, all three broadcast (strided inputs)
  masked_fill,    // (x, mask bool) -> mask ? value : x, broadcast (strided inputs), ScalarAttrs

  // --- reductions, normalisation, losses, optimizers ---
  min,                   // (x) -> min along axis, AxisAttrs
  min_backward,          // (grad [reduced], x) -> grad at the first min along axis, AxisAttrs
  var,                   // (x) -> variance along axis, VarAttrs
  std,                   // (x) -> standard deviation along axis, VarAttrs
  prod,                  // (x) -> product along axis, AxisAttrs
  prod_backward,         // (grad [reduced], x) -> grad * product of the others, AxisAttrs
  softmax_backward,      // (grad, y = softmax(x)) -> y * (grad - sum(grad * y)), AxisAttrs
  log_softmax_backward,  // (grad, y = log_softmax(x)) -> grad - exp(y) sum(grad), AxisAttrs
  layer_norm,            // (x, weight, bias) -> (y, mean, rstd), LayerNormAttrs
  layer_norm_backward,   // (grad, x, weight, mean, rstd) -> (gx, gweight, gbias), LayerNormAttrs
  batch_norm,  // (x, weight, bias) -> (y, save_mean, save_invstd, running_mean, running_var
               // updated in place), BatchNormAttrs
  batch_norm_backward,  // (grad, x, weight, save_mean, save_invstd) -> (gx, gw, gb), BatchNormAttrs
  mse_loss,             // (input, target) -> loss, LossAttrs
  sum_squares,          // (x) -> sum of x^2 over every element, shape []
  adamw_update,         // (grad) -> param, m, v updated in place, AdamAttrs (decoupled decay)

  // --- nn: batched matmul, embedding, pooling, attention ---
  bmm,                 // (a [...,M,K], b [...,K,N]) -> [...,M,N], batch dims broadcast; MatmulAttrs
  embedding,           // (weight [V,D], indices i32/i64 [...]) -> [...,D]
  embedding_backward,  // (grad [...,D], indices) -> [V,D] (shape given), EmbeddingAttrs
  avg_pool2d,          // (x [N,C,H,W]) -> [N,C,HO,WO], AvgPool2dAttrs
  avg_pool2d_backward,           // (grad [N,C,HO,WO]) -> [N,C,H,W] (shape given), AvgPool2dAttrs
  adaptive_avg_pool2d,           // (x [N,C,H,W]) -> [N,C,OH,OW] (shape given)
  adaptive_avg_pool2d_backward,  // (grad [N,C,OH,OW]) -> [N,C,H,W] (shape given)

  // attention
  // (q [...,L,E], k [...,S,E], v [...,S,Ev]) -> (out [...,L,Ev], lse [...,L]), AttentionAttrs
  scaled_dot_product_attention,
  // (grad_out, q, k, v, out, lse) -> (grad_q, grad_k, grad_v), AttentionAttrs
  scaled_dot_product_attention_backward,

  num_ops_  // not an op: the number of ops
};

inline constexpr int kNumOps = static_cast<int>(OpId::num_ops_);
inline constexpr int kMaxOpInputs = 6;
inline constexpr int kMaxOpOutputs = 5;

struct NoAttrs {};
// How an f32 product may compute (torch.set_float32_matmul_precision's levels): highest, f32
// arithmetic throughout; high, products as precise as TF32's (11 significant bits an operand) or
// more (PyTorch: TF32, or each float as two bf16); medium, as precise as bf16's (8) or more.
// Devices without a faster way compute every level in f32 (ops.h's set_float32_matmul_precision
// says what each plugin does).
enum class MatmulPrecision : std::uint8_t { highest, high, medium };

struct MatmulAttrs {
  bool trans_a = false;  // use a^T ([K,M] stored)
  bool trans_b = false;  // use b^T ([N,K] stored)
  // The result's dtype (torch.mm's out_dtype): nullopt or the inputs' dtype, else f32 for f16 or
  // bf16 inputs (their f32 sums, not rounded; addmm's bias then in f32 too).
  std::optional<DType> out_dtype;
  // f32 operands: float32_matmul_precision() when the op was called (ignored for other dtypes).
  MatmulPrecision precision = MatmulPrecision::highest;
};
struct ScalarAttrs {
  double value = 0;
};
struct AxisAttrs {
  int axis = -1;  // already normalised to [0, rank) when a kernel sees it
  bool keepdim = false;
};
// torch.nn.functional.conv2d's stride, padding, dilation and groups: the input's C channels and
// the output's O channels are cut into |groups| groups, and output group g sees input group g
// only (weight [O, C/groups, KH, KW]); groups == C == O is a depthwise convolution.
struct Conv2dAttrs {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
};
struct Pool2dAttrs {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
};
// torch.nn.functional.avg_pool2d (ceil_mode false, divisor_override none): windows of
// kernel_h x kernel_w taken every stride, over the input padded by pad_h/pad_w zeros (at most half
// the kernel); the divisor counts the padding when count_include_pad, else only the window's
// elements inside the input.
struct AvgPool2dAttrs {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
  bool count_include_pad = true;
};
// torch.nn.functional.embedding's padding_idx: the row that gets no gradient, in [0, V), or -1
// for none.
struct EmbeddingAttrs {
  std::int64_t padding_idx = -1;
};
// param -= lr * v, where v = momentum * v + (1 - dampening) * (grad + weight_decay * param), as
// torch.optim.SGD (v starts as the first gradient when momentum > 0; with momentum == 0 the
// momentum buffer is not touched). Nesterov uses grad + momentum * v.
struct SgdAttrs {
  float lr = 0.01f;
  float momentum = 0;
  float dampening = 0;
  float weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // v = grad (no dampening) on the first step, as PyTorch does
};
// Adam as torch.optim.Adam (L2 weight decay added to the gradient); step counts from 1.
struct AdamAttrs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  std::int64_t step = 1;
};

// A dropout mask that every device computes bit for bit the same: element i keeps (value
// 1/(1-p)) when dropout_uniform(seed, i) >= p, else is 0. See dropout_uniform below.
struct DropoutAttrs {
  float p = 0.5f;
  std::uint64_t seed = 0;
};

// --- tensor API: casts, factories, indexing ---
// arange: element i is start + i * step (computed in double on the CPU, in the output's own type
// on GPUs: exact for integers, within an ulp or two for floats).
struct RangeAttrs {
  double start = 0;
  double step = 1;
};
// rand, randn, randint: every element is a pure function of (seed, index), computed bit for bit
// alike on every device (random_uniform and friends below). |seed| is one draw of a TensorGenerator
// (generator.h). randint draws from [low, high).
struct RandomAttrs {
  std::uint64_t seed = 0;
  std::int64_t low = 0;
  std::int64_t high = 2;
};

// clamp: min(max(x, min), max), as torch.clamp (an absent bound is infinite; min > max gives max
// everywhere; NaN stays NaN).
struct ClampAttrs {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
};
// gelu and gelu_backward: the exact form x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)), or the tanh
// approximation x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), as torch.nn.functional.gelu's
// approximate="none" / "tanh".
enum class GeluApproximate : std::uint8_t { none, tanh };
struct GeluAttrs {
  GeluApproximate approximate = GeluApproximate::none;
};

// attention
// Scaled dot-product attention as torch.nn.functional.scaled_dot_product_attention: softmax(q k^T *
// scale + causal mask) with dropout, times v. is_causal is torch's top-left aligned mask (query i
// sees keys j <= i, for any L and S). No scale stands for torch's scale=None, 1/sqrt(E) (a kernel
// reads attention_scale()). Dropout zeroes probability (i, j) of the row-major flat
// [..., L, S] index n when dropout_uniform(seed, n) < dropout_p and scales the rest by
// 1/(1-dropout_p), so every device drops the same entries.
// With f16 or bf16 inputs lse is f32 (as FlashAttention's logsumexp), and out_dtype f32 gives out
// and the backward's three gradients in f32 (their sums, not rounded; MatmulAttrs::out_dtype's
// rule: autocast's attention); nullopt or the inputs' dtype keeps them in it.
struct AttentionAttrs {
  bool is_causal = false;
  std::optional<float> scale;
  float dropout_p = 0;
  std::uint64_t seed = 0;
  std::optional<DType> out_dtype;
};

// --- reductions, normalisation, losses, optimizers ---
// var and std along one axis, as torch.var(x, dim, correction=, keepdim=): the sum of squared
// deviations divided by max(n - correction, 0) (unbiased=True is correction 1).
struct VarAttrs {
  int axis = -1;  // already normalised to [0, rank) when a kernel sees it
  bool keepdim = false;
  double correction = 1;
};
// layer_norm normalises every row of the dimensions axis..rank-1 (torch's normalized_shape is
// x.shape[axis:]); mean and rstd have x's shape with those dimensions set to 1.
struct LayerNormAttrs {
  int axis = -1;
  float eps = 1e-5f;
};
// batch_norm over the channels (dimension 1) of [N, C, ...], as torch.nn.functional.batch_norm.
struct BatchNormAttrs {
  bool training = true;
  float momentum = 0.1f;
  float eps = 1e-5f;
};
// How a loss reduces its per-element values, as PyTorch's reduction='none' | 'mean' | 'sum'.
enum class Reduction : std::uint8_t { none, mean, sum };
struct LossAttrs {
  Reduction reduction = Reduction::mean;
};
// cross_entropy as torch.nn.functional.cross_entropy(ignore_index=, label_smoothing=), the mean
// over the targets that are not ignore_index.
struct CrossEntropyAttrs {
  std::int64_t ignore_index = -100;
  float label_smoothing = 0;
};

using OpAttrs = std::variant<NoAttrs, MatmulAttrs, ScalarAttrs, AxisAttrs, Conv2dAttrs, Pool2dAttrs,
                             SgdAttrs, AdamAttrs, DropoutAttrs,
                             // --- tensor API: casts, factories, indexing ---
                             RangeAttrs, RandomAttrs,
                             // --- element-wise math, comparisons, selection ---
                             ClampAttrs, GeluAttrs,
                             // --- reductions, normalisation, losses, optimizers ---
                             VarAttrs, LayerNormAttrs, BatchNormAttrs, LossAttrs, CrossEntropyAttrs,
                             // --- nn: batched matmul, embedding, pooling, attention ---
                             AvgPool2dAttrs, EmbeddingAttrs, AttentionAttrs>;

// The counter-based random number behind dropout_mask, written with 32-bit integer operations
// only so that a GLSL or OpenCL kernel computes the same value: a uniform float in [0, 1) with
// 24 random bits, for element |index| (< 2^32) of the stream |seed|.
inline std::uint32_t dropout_hash(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
// The 32-bit key of stream |seed|; a device kernel receives it and computes
// (dropout_hash(index ^ key) >> 8) * 2^-24 per element.
inline std::uint32_t dropout_key(std::uint64_t seed) {
  return dropout_hash(static_cast<std::uint32_t>(seed) ^
                      dropout_hash(static_cast<std::uint32_t>(seed >> 32) + 0x9e3779b9u));
}
inline float dropout_uniform(std::uint64_t seed, std::uint32_t index) {
  return static_cast<float>(dropout_hash(index ^ dropout_key(seed)) >> 8) * (1.0f / 16777216.0f);
}

// --- tensor API: casts, factories, indexing ---
// The streams of rand, randn and randint, built on the same hash so that a kernel with 32-bit
// integers computes them: element |index| (< 2^32) of stream |seed| draws
// random_bits(random_key(seed, k), index) for k = 0 (and k = 1, randn's second uniform).
inline std::uint32_t random_key(std::uint64_t seed, std::uint32_t k) {
  return dropout_key(seed) ^ dropout_hash(k * 0x68e31da4u + 0x1b873593u);
}
inline std::uint32_t random_bits(std::uint32_t key, std::uint32_t index) {
  return dropout_hash(index ^ key);
}
// rand: 24 random bits in [0, 1) (exact in f32, so every device gives the same bits).
inline float random_uniform(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}
// randn's log and cos, written with +, -, *, / and bit operations (kernels/tensor_random.tk has
// the same text): a GPU's own log and cos may be 2^-21 and 2^-11 off in absolute terms (Vulkan's
// precision rules), which Box-Muller would turn into visible differences between devices.
// random_log: ln x for a normal float x > 0, to a few ulps.
inline float random_log(float x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  int e = static_cast<int>((b >> 23) & 255u) - 127;
  const std::uint32_t mb = (b & 8388607u) | 1065353216u;
  float m = 0;
  std::memcpy(&m, &mb, sizeof m);
  if (m > 1.41421356f) {
    m = m * 0.5f;
    e = e + 1;
  }
  const float s = (m - 1.0f) / (m + 1.0f);
  const float z = s * s;
  return static_cast<float>(e) * 0.693147181f +
         s * (2.0f + z * (0.666666667f + z * (0.4f + z * (0.285714286f + z * 0.222222222f))));
}
// random_cos2pi: cos(2 pi u) for u in [0, 1), by quadrant and Taylor polynomials on [0, pi/4].
inline float random_cos2pi(float u) {
  const float r = u * 4.0f;
  const float q = std::floor(r);
  const float f = r - q;
  const bool flip = f > 0.5f;
  const float h = flip ? 1.0f - f : f;
  const float a = h * 1.57079633f;
  const float z = a * a;
  const float s =
      a * (1.0f + z * (-0.166666667f +
                       z * (0.00833333333f + z * (-0.000198412698f + z * 2.75573192e-6f))));
  const float c =
      1.0f + z * (-0.5f + z * (0.0416666667f +
                               z * (-0.00138888889f + z * (2.48015873e-5f + z * -2.75573192e-7f))));
  const float cs = flip ? s : c;  // cos(f pi / 2)
  const float sn = flip ? c : s;  // sin(f pi / 2)
  const int quadrant = static_cast<int>(q);
  return quadrant == 0 ? cs : quadrant == 1 ? -sn : quadrant == 2 ? -cs : sn;
}
// randn: Box-Muller from two such uniforms, u1 in (0, 1] and u2 in [0, 1), in f32. Devices agree
// to a few ulps (a GPU compiler may fuse a multiply and an add, and its sqrt and division may
// round differently).
inline float random_normal(std::uint32_t bits1, std::uint32_t bits2) {
  const float u1 = static_cast<float>((bits1 >> 8) + 1u) * (1.0f / 16777216.0f);
  const float u2 = random_uniform(bits2);
  return std::sqrt(-2.0f * random_log(u1)) * random_cos2pi(u2);
}
// randint: low + floor(bits * range / 2^32), range = high - low in [1, 2^32) (Lemire's
// multiply-shift: no modulo; the bias is below range / 2^32).
inline std::uint32_t random_below(std::uint32_t bits, std::uint32_t range) {
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(bits) * range) >> 32);
}

// attention
// The score scale of an attention call over head dimension |e|: attrs.scale, or 1/sqrt(e) when it
// has none (torch's default).
inline float attention_scale(const AttentionAttrs& attrs, std::int64_t e) {
  if (attrs.scale) return *attrs.scale;
  return e > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(e))) : 1.0f;
}

// One call of an op: the tensors and attributes a kernel sees. Inputs and outputs live on the
// same device. Unless the op's definition says `strided_inputs`, every input is contiguous (it may
// start at a non-zero offset). Outputs are contiguous (unless the definition says
// `strided_outputs`) and already allocated; for in-place ops (`inplace`) they hold the values to
// update.
struct OpCall {
  OpId op{};
  std::array<Tensor, kMaxOpInputs> inputs{};
  std::array<Tensor, kMaxOpOutputs> outputs{};
  int num_inputs = 0;
  int num_outputs = 0;
  OpAttrs attrs{};

  const Tensor& in(int i) const { return inputs[static_cast<std::size_t>(i)]; }
  const Tensor& out(int i) const { return outputs[static_cast<std::size_t>(i)]; }
  template <typename A>
  const A& attr() const {
    return std::get<A>(attrs);
  }
  // "f32, [64,32,26,26]": the first input's (or output's) dtype and shape, for messages.
  std::string describe() const;
};

// A call of |op| on |inputs| with |attrs|, with as many outputs as the op's definition has, all
// undefined: run_op (ops.h) allocates them unless the caller sets them first. Throws
// InvalidArgument for more than kMaxOpInputs inputs.
OpCall make_call(OpId op, std::initializer_list<Tensor> inputs, OpAttrs attrs = NoAttrs{});

// Shape and dtype of one output, computed by an op's shape rule.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
};

// The definition of one op, shared by every plugin.
struct OpDef {
  OpId id;
  std::string_view name;
  int num_inputs;
  int num_outputs;
  bool strided_inputs;  // kernels accept inputs with any strides (zero for broadcast)
  bool inplace;         // outputs are read and written (optimizer updates, fill)
  bool differentiable;  // has a gradient rule in train/
  // The shape rule: checks the inputs and attributes of |call| and fills |outputs| (one spec per
  // output). For ops whose output shape the caller gives (the backward ops, in-place ops) the
  // specs arrive filled and are checked. Throws InvalidArgument naming the op and the shapes.
  void (*infer)(const OpCall& call, std::span<TensorSpec> outputs);
  // Outputs may be strided views (copy_into writes through one): kernels then read the output's
  // strides and write only the elements of the view; a fallback device receives the storage range
  // the view spans and the whole range is copied back. Every other op's outputs are contiguous.
  bool strided_outputs = false;
};

// The definition of |op|.
const OpDef& op_def(OpId op);
// All ops in id order.
std::span<const OpDef> op_defs();
// The id of the op named |name|, or false when there is none.
bool op_from_name(std::string_view name, OpId& out);
// Whether |op|'s result for f16 and bf16 tensors is defined as its f32 result on the widened
// inputs, rounded once to the output's dtype (as torch computes these ops in f32 internally): the
// element-wise math, comparisons, selection, reductions and softmax ops, scaled dot-product
// attention, and their backwards. A device whose kernel takes such a call only in f32 runs it in
// f32 on the same device through casts (Dispatcher::run); a kernel may take the 16-bit call
// itself, with the same result, except that attention on matrix units rounds its probabilities
// (and the backward its dS) to the inputs' dtype before multiplying them, as FlashAttention does:
// within that dtype's precision of the widened result.
bool op_computes_in_f32(OpId op);
inline std::string_view op_name(OpId op) {
  return op_def(op).name;
}

}  // namespace tessera
