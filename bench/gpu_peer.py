#!/usr/bin/env python3
"""PyTorch CUDA peer for tessera-bench's sgemm and add cases on GPUs: torch.matmul in --dtype
(fp32 with TF32 off, or at --matmul-precision; fp16 or bf16) at each shape (MxNxK:AB, A stored [K, M] where A is T, B
stored [N, K] where B is T, as tessera-bench spells them), and a device-to-device copy (the
bandwidth bar of the add case), timed like tessera-bench (warm-up, then the median of repeats,
each of --iters calls and one synchronize). Prints JSON.

Usage: gpu_peer.py --shapes 1024x1024x1024:NN,16384x1152x384:NT --elements N [--iters I]
                   [--repeat R] [--dtype f32] [--matmul-precision highest]
"""
import argparse
import json
import statistics
import sys
import time

import torch


def timed(fn, iters, repeat):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="1024x1024x1024:NN,2048x2048x2048:NN,4096x4096x4096:NN")
    p.add_argument("--elements", type=int, default=1 << 26)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "medium"],
                   help="torch.set_float32_matmul_precision for f32 products (TF32 off at highest)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("CUDA is not available to PyTorch", file=sys.stderr)
        sys.exit(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision(a.matmul_precision)  # "high" and "medium": TF32 products
    sgemm = []
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    for shape in [s for s in a.shapes.split(",") if s]:
        dims, ops = shape.split(":")
        m, n, k = (int(v) for v in dims.split("x"))
        x = torch.randn(*((k, m) if ops[0] == "T" else (m, k)), device="cuda", dtype=dtype)
        y = torch.randn(*((n, k) if ops[1] == "T" else (k, n)), device="cuda", dtype=dtype)
        xa = x.t() if ops[0] == "T" else x
        yb = y.t() if ops[1] == "T" else y
        t = timed(lambda: torch.matmul(xa, yb), a.iters, a.repeat)
        sgemm.append({"shape": shape, "seconds": t, "gflops": 2 * m * n * k / t / 1e9})
        del x, y, xa, yb
    src = torch.randn(a.elements, device="cuda")
    dst = torch.empty_like(src)
    other = torch.randn(a.elements, device="cuda")
    t_copy = timed(lambda: dst.copy_(src), a.iters, a.repeat)
    t_add = timed(lambda: torch.add(src, other, out=dst), a.iters, a.repeat)
    out = {"peer": f"PyTorch {torch.__version__}", "device_name": torch.cuda.get_device_name(),
           "dtype": a.dtype, "sgemm": sgemm,
           "copy": {"elements": a.elements, "seconds": t_copy,
                    "gb_per_s": 8 * a.elements / t_copy / 1e9},
           "add": {"elements": a.elements, "seconds": t_add,
                   "gb_per_s": 12 * a.elements / t_add / 1e9}}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
