#!/usr/bin/env python3
"""PyTorch peer for tessera-bench's op cases: the same calls at the same sizes, timed like
tessera-bench (one warm-up run, then the median of --repeat runs of --iters calls each, with a
device synchronisation at the end of each run), in seconds per call. Prints JSON.

Cases (--cases, comma list) and their sizes (--sizes, JSON: {"bmm": [B, M, K, N], ...}):
  bmm                 torch.bmm(a [B,M,K], b [B,K,N])
  layer_norm          F.layer_norm over the last dim of x [R, C] with weight and bias, forward and
                      backward (autograd, gradients of x, weight and bias)
  attention           [B, H, L, D], causal, forward and backward: F.scaled_dot_product_attention
                      where torch has it (2.0 and later); else composed as torch's math path does
                      (q k^T * scale, causal masked_fill with -inf, softmax, @ v), and the result
                      says so
  embedding_backward  torch.ops.aten.embedding_dense_backward of grad [N, D] for N int64 indices
                      drawn uniformly from [0, V) into a [V, D] table: [N, V, D]
  transpose           x.t().contiguous() of x [R, C] fp32

Usage: ops_peer.py --device cpu|cuda --cases bmm,attention --sizes '{"bmm": [64,256,256,256]}'
                   [--iters I] [--repeat R] [--threads T]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def timed(fn, device, iters, repeat):
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times)


def bmm(size, device):
    b, m, k, n = size
    x = torch.randn(b, m, k, device=device)
    y = torch.randn(b, k, n, device=device)
    return (lambda: torch.bmm(x, y)), "torch.bmm fp32", {"flop": 2 * b * m * n * k}


def layer_norm(size, device):
    rows, cols = size
    x = torch.randn(rows, cols, device=device, requires_grad=True)
    w = torch.randn(cols, device=device, requires_grad=True)
    b = torch.randn(cols, device=device, requires_grad=True)
    g = torch.randn(rows, cols, device=device)

    def run():
        y = F.layer_norm(x, (cols,), w, b, 1e-5)
        torch.autograd.grad(y, (x, w, b), g)

    return run, "F.layer_norm forward + autograd backward (x, weight, bias)", {}


def causal_math(q, k, v, scale):
    # torch's math path of scaled_dot_product_attention (aten _scaled_dot_product_attention_math)
    s = (q @ k.transpose(-2, -1)) * scale
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def attention(size, device, dtype=torch.float32):
    b, h, L, d = size
    q, k, v = (torch.randn(b, h, L, d, device=device, dtype=dtype, requires_grad=True)
               for _ in range(3))
    g = torch.randn(b, h, L, d, device=device, dtype=dtype)
    fused = hasattr(F, "scaled_dot_product_attention")
    if fused:
        name = "F.scaled_dot_product_attention(is_causal=True) forward + backward"
        if device == "cuda":
            name += " (PyTorch chooses the backend: flash where it can)"
    else:
        name = ("composed as torch's math path (q k^T * scale, causal masked_fill, softmax, @ v) "
                "forward + backward (this torch has no F.scaled_dot_product_attention)")

    def run():
        if fused:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = causal_math(q, k, v, d ** -0.5)
        torch.autograd.grad(out, (q, k, v), g)

    return run, name, {"fused": fused}


def embedding_backward(size, device):
    n, v, d = size
    idx = torch.randint(0, v, (n,), device=device)
    g = torch.randn(n, d, device=device)
    run = lambda: torch.ops.aten.embedding_dense_backward(g, idx, v, -1, False)
    return run, "aten embedding_dense_backward (int64 indices)", {}


def transpose(size, device):
    rows, cols = size
    x = torch.randn(rows, cols, device=device)
    return (lambda: x.t().contiguous()), "x.t().contiguous() fp32", {}


CASES = {"bmm": bmm, "layer_norm": layer_norm, "attention": attention,
         "embedding_backward": embedding_backward, "transpose": transpose}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--sizes", required=True, help="JSON object: case -> list of extents")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"],
                   help="the attention case's tensors (the others stay f32)")
    p.add_argument("--iters", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads on cpu (default: one per core, as Tessera's cpu:0)")
    a = p.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(a.threads or os.cpu_count())
    if a.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available to PyTorch", file=sys.stderr)
        sys.exit(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = json.loads(a.sizes)
    torch.manual_seed(0)
    results = {}
    for c in [c for c in a.cases.split(",") if c]:
        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
        fn, name, extra = (attention(sizes[c], a.device, dtype) if c == "attention"
                           else CASES[c](sizes[c], a.device))
        results[c] = {"seconds": timed(fn, a.device, a.iters, a.repeat), "call": name, **extra}
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    json.dump({"peer": f"PyTorch {torch.__version__}", "device": a.device, "device_name": name,
               "threads": torch.get_num_threads(), "results": results}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
