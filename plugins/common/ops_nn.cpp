// Launch geometry of the nn group on the GPUs: embedding and its deterministic backward, average
// pooling, and convolution with groups and dilation (batched matmul: ops_gemm.cpp).
#include <bit>
#include <limits>

#include "geometry.h"
#include "ops.h"
#include "pool.h"

namespace tessera::common {
namespace {

int wide(const Tensor& indices) {
  return indices.dtype() == DType::i64 ? 1 : 0;
}

void embedding(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  Launch(l, "embedding", {wide(call.in(1))})
      .in(call.in(0))
      .in(call.in(1))
      .out(y)
      .i(y.numel())
      .i(call.in(0).dim(1))
      .i(call.in(0).dim(0))
      .run(y.numel());
}

// kernels/embedding_backward.tk's block: slots sorted in one work-group's shared memory.
constexpr std::int64_t kSortBlock = 2048;
// Sorted slots per work-group when the runs are summed.
constexpr std::int64_t kChunk = 32;

// Sorts (index, position) pairs by a bitonic sort over P2 >= 2048 slots: the first stages up to
// 2048 in shared memory in one launch; each later stage k its steps j >= 2048 one launch each and
// the rest in shared memory (for 32768 indices, 15 launches). Then chunks of kChunk sorted slots
// sum their runs, and runs longer than a chunk add their pieces.
void embedding_backward(const OpCall& call, Launcher& l) {
  const Tensor &grad = call.in(0), &indices = call.in(1), &dw = call.out(0);
  const std::int64_t n = indices.numel(), v = dw.dim(0), d = dw.dim(1);
  const std::int64_t pad = call.attr<EmbeddingAttrs>().padding_idx;
  const auto p2 = static_cast<std::int64_t>(
      std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(n, kSortBlock))));
  const Tensor keys = Tensor::empty({p2}, DType::i32, &l.device());
  const Tensor pos = Tensor::empty({p2}, DType::i32, &l.device());
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  const Tensor partial =
      Tensor::empty({2 * std::max<std::int64_t>(chunks, 1), d}, DType::f32, &l.device());
  auto step = [&](int mode, std::initializer_list<std::int64_t> words) {
    Launch launch(l, "embedding_backward", {mode, wide(indices)});
    launch.out(keys).out(pos).in(indices).in(grad).out(dw).out(partial);
    for (const std::int64_t w : words) launch.i(w);
    return launch;
  };
  step(3, {dw.numel()}).run(dw.numel());
  if (n == 0 || d == 0) return;
  step(0, {p2, n, v, pad}).run(p2);
  step(2, {p2, 0, 0}).shared(2 * kSortBlock).group(256).groups(p2 / kSortBlock);
  for (std::int64_t k = 2 * kSortBlock; k <= p2; k *= 2) {
    for (std::int64_t j = k / 2; j >= kSortBlock; j /= 2) step(1, {p2, k, j}).run(p2 / 2);
    step(2, {p2, k, kSortBlock / 2}).shared(2 * kSortBlock).group(256).groups(p2 / kSortBlock);
  }
  const std::int32_t group = d >= 256 ? 256 : 64;
  step(4, {n, d, v, kChunk}).group(group).groups(chunks);
  step(5, {n, d, v, kChunk}).group(group).groups(chunks);
}

// Positions and rows fit the sort's shared-memory encoding (below 2^29).
Support embedding_backward_supports(const OpCall& call) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 29;
  if (call.in(1).numel() >= kLimit || call.out(0).dim(0) >= kLimit)
    return Support::no("embedding_backward on the GPU takes fewer than 2^29 indices and rows");
  return gpu_supports(call);
}

void avg_pools(const OpCall& call, Launcher& l) {
  const AvgPool g = avg_pool(call);
  const bool forward = call.op == OpId::avg_pool2d || call.op == OpId::adaptive_avg_pool2d;
  const bool adaptive =
      call.op == OpId::adaptive_avg_pool2d || call.op == OpId::adaptive_avg_pool2d_backward;
  const Tensor& y = call.out(0);
  Launch(l, "avg_pool", {forward ? 0 : 1, adaptive ? 1 : 0})
      .in(call.in(0))
      .out(y)
      .i(y.numel())
      .i(g.h)
      .i(g.w)
      .i(g.ho)
      .i(g.wo)
      .i(g.kh)
      .i(g.kw)
      .i(g.sh)
      .i(g.sw)
      .i(g.ph)
      .i(g.pw)
      .i(g.count_include_pad ? 1 : 0)
      .run(y.numel());
}

// The adaptive windows are computed as i * h / ho in 32 bits.
Support adaptive_supports(const OpCall& call) {
  const AvgPool g = avg_pool(call);
  constexpr std::int64_t kLimit = std::numeric_limits<std::int32_t>::max();
  if (g.h * g.ho >= kLimit || g.w * g.wo >= kLimit)
    return Support::no("adaptive pooling on the GPU needs h * out_h and w * out_w below 2^31");
  return gpu_supports(call);
}

// conv2d (x, w) -> y, conv2d_backward_input (gy, w) -> dx and conv2d_backward_weight (gy, x) ->
// dw: an implicit GEMM (ops_gemm.cpp) where the GEMM's M, the channels of a group it produces,
// is at least kConvGemmRows; else (depthwise and other thin groups, where a tile would be mostly
// idle) the direct kernels: conv2d.tk, one invocation per output, and conv2d_backward_weight.tk,
// one work-group per weight.
constexpr std::int64_t kConvGemmRows = 4;

template <int kMode>
void conv(const OpCall& call, Launcher& l) {
  const Conv g = common::conv(call);
  const Tensor &src = call.in(0), &w = call.in(1), &out = call.out(0);
  if (conv_gemm_shape(g, kMode + 1).m >= kConvGemmRows) {
    conv_gemm(l, g, kMode + 1, w, src, out);
    return;
  }
  Launch(l, "conv2d", {kMode}).in(src).in(w).out(out).words(g).run(out.numel());
}

void conv2d_backward_weight(const OpCall& call, Launcher& l) {
  const Conv g = common::conv(call);
  if (conv_gemm_shape(g, 3).m >= kConvGemmRows) {
    conv_gemm(l, g, 3, call.in(0), call.in(1), call.out(0));
    return;
  }
  Launch(l, "conv2d_backward_weight")
      .in(call.in(0))
      .in(call.in(1))
      .out(call.out(0))
      .words(g)
      .shared(256)
      .group(256)
      .groups(call.out(0).numel());
}

}  // namespace

void add_nn_ops(PortableOps& ops) {
  ops.add(OpId::embedding, embedding);
  ops.add(OpId::embedding_backward, embedding_backward, embedding_backward_supports);
  ops.add(OpId::avg_pool2d, avg_pools);
  ops.add(OpId::avg_pool2d_backward, avg_pools);
  ops.add(OpId::adaptive_avg_pool2d, avg_pools, adaptive_supports);
  ops.add(OpId::adaptive_avg_pool2d_backward, avg_pools, adaptive_supports);
  ops.add(OpId::conv2d, conv<0>);
  ops.add(OpId::conv2d_backward_input, conv<1>);
  ops.add(OpId::conv2d_backward_weight, conv2d_backward_weight);
}

}  // namespace tessera::common
