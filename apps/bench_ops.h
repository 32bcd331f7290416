// tessera-bench's op cases (bench_ops.cpp): single ops of real networks, forward and backward,
// each beside PyTorch running the same call at the same size in the same run (bench/ops_peer.py:
// CUDA for GPU devices, the CPU for CPU devices).
//
//   bmm                 batched matmul [64, 256, 256] x [64, 256, 256] (tessera::bmm; torch.bmm)
//   layer_norm          layer_norm over the last dim of [8192, 1024] with weight and bias,
//                       forward + backward (layer_norm, layer_norm_backward; torch: F.layer_norm
//                       and autograd)
//   attention           batch 8, 8 heads, 512 tokens, head dim 64, causal, forward + backward,
//                       in --dtype (f16 and bf16: inputs, output and gradients in it, as torch's)
//                       (scaled_dot_product_attention_forward/_backward; torch:
//                       F.scaled_dot_product_attention, or its math path composed where torch has
//                       none, as 1.13 has not: the result's "peer" says which)
//   embedding_backward  the [V, 512] weight gradient of 32768 int64 indices drawn uniformly from
//                       [0, V), V = 50257 (GPT-2's vocabulary) (embedding_backward; torch:
//                       aten embedding_dense_backward)
//   transpose           x.t().contiguous() of [16384, 1536] f32 (a GPT's activations: the copy
//                       the GPU plugins' GEMM makes of an operand stored along K), with gb_per_s
//                       counting each element read and written once (torch: the same call)
//
// Each reports seconds per call (the median of --repeat runs after one warm-up run, each run
// ending with a device synchronisation; GPUs run 10 calls per run), the peer's, and ratio =
// peer seconds / Tessera seconds (> 1: Tessera is faster). A peer that can not run is a
// peer_error in the result, not a failed benchmark. --op-size tiny runs every case at a few
// elements (the smoke test's size).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/device.h"

namespace tessera::bench {

using json = nlohmann::ordered_json;

// The op cases, in the order they run.
const std::vector<std::string>& op_case_names();

// --profile: the device time of every kernel in one more run of |fn| (which makes |calls|
// calls), the longest first, as [{"kernel", "launches", "seconds"}] per call; printed to stderr
// as a table of the whole run, headed |title|. Null on a device that can not time kernels.
json profile_kernels(Device& dev, int calls, const std::function<void()>& fn,
                     const std::string& title);

struct OpCaseOptions {
  int repeat = 5;
  bool tiny = false;         // --op-size tiny
  bool profile = false;      // --profile: each result gets "kernels" (profile_kernels)
  DType dtype = DType::f32;  // --dtype: the attention case's (the others run f32)
  // Runs bench/ops_peer.py with these arguments: its JSON, or {"error": why}.
  std::function<json(const std::vector<std::string>&)> run_peer;
};

// The results of |cases| (op case names) on |dev|. The peer runs once per PyTorch device (cpu,
// cuda) for all of |cases|; |peers| keeps its JSON by PyTorch device between calls.
std::vector<json> bench_op_cases(Device& dev, const std::vector<std::string>& cases,
                                 const OpCaseOptions& options, std::map<std::string, json>& peers);

}  // namespace tessera::bench
