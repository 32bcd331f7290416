#!/usr/bin/env python3
"""PyTorch peer for tessera-bench's training cases: the same MLP (784-512-512-10) and CNN
(conv3x3 32, pool, conv3x3 64, pool, fc 128, fc 10), batch 128, one optimizer step per batch on
random data, timed like tessera-bench (warm-up, then the median of repeats). Prints JSON.

Usage: train_peer.py [--device cpu|cuda] [--steps N] [--repeat R] [--models mlp,cnn]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch import nn


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                         nn.ReLU(), nn.Linear(512, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(),
                         nn.Linear(128, 10))


# The models by the names tessera-train and tessera-bench give them (bench/fit_peer.py uses these
# too): add one here and to tessera-bench's list of models.
MODELS = {"mlp": mlp, "cnn": cnn}


def measure(name, device, batch, steps, repeat):
    torch.manual_seed(0)
    model = MODELS[name]().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def run():
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        loss.item()  # waits for the device
        if device == "cuda":
            torch.cuda.synchronize()

    run()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return {"model": name, "batch": batch, "steps": steps, "seconds": t,
            "samples_per_second": batch * steps / t}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--threads", default="best",
                   help="intra-op threads on cpu: a number, or best (each of 1..cpu_count, the "
                        "fastest reported per model)")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.device == "cpu":
        counts = range(1, os.cpu_count() + 1) if a.threads == "best" else [int(a.threads)]
    else:
        counts = [torch.get_num_threads()]
    results = []
    for m in a.models.split(","):
        best = None
        for n in counts:
            torch.set_num_threads(n)
            r = measure(m, a.device, a.batch, a.steps, a.repeat)
            r["threads"] = n
            if best is None or r["samples_per_second"] > best["samples_per_second"]:
                best = r
        results.append(best)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    out = {"peer": f"PyTorch {torch.__version__}", "device": a.device, "device_name": name,
           "results": results}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
