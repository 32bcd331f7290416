#!/usr/bin/env python3
"""PyTorch CUDA peer for tessera-bench's sgemm and add cases on GPUs: torch.matmul in --dtype
(fp32 with TF32 off, fp16 or bf16) at each size, and a device-to-device copy (the bandwidth bar of the add case), timed
like tessera-bench (warm-up, then the median of repeats, each of --iters calls and one
synchronize). Prints JSON.

Usage: gpu_peer.py --sizes 1024,2048,4096 --elements N [--iters I] [--repeat R] [--dtype f32]
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
    p.add_argument("--sizes", default="1024,2048,4096")
    p.add_argument("--elements", type=int, default=1 << 26)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("CUDA is not available to PyTorch", file=sys.stderr)
        sys.exit(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sgemm = []
    for n in [int(s) for s in a.sizes.split(",") if s]:
        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
        x = torch.randn(n, n, device="cuda", dtype=dtype)
        y = torch.randn(n, n, device="cuda", dtype=dtype)
        t = timed(lambda: torch.matmul(x, y), a.iters, a.repeat)
        sgemm.append({"n": n, "seconds": t, "gflops": 2 * n**3 / t / 1e9})
        del x, y
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
