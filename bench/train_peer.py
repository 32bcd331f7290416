#!/usr/bin/env python3
"""PyTorch peer for tessera-bench's training cases: the models tessera-train trains, one optimizer
step per batch on random data, timed like tessera-bench (a warm-up run, then the median of
repeats). Prints JSON.

- mlp (784-512-512-10) and cnn (conv3x3 32, pool, conv3x3 64, pool, fc 128, fc 10): batch
  --batch of [1, 28, 28] images, SGD lr 0.01 momentum 0.9.
- resnet: bench/models_peer.py's ResNet (--resnet-config depth, width, batch; 10 classes, one
  input channel, [batch, 1, 28, 28] images) with tessera-train's recipe: SGD lr 0.1, momentum 0.9,
  nesterov, weight_decay 5e-4, OneCycleLR stepped per batch.
- gpt: models_peer.py's GPT (--gpt-config n_layer, n_head, n_embd, block_size, vocab_size,
  dropout, batch) on random token ids [batch, block_size], in training mode (dropout on), with
  nanoGPT's recipe: AdamW lr 1e-3 betas (0.9, 0.99), weight_decay 0.1 on parameters of rank >= 2
  and 0 on the rest (two groups), gradient clipping to norm 1.0, a linear warm-up then cosine decay
  (SequentialLR) stepped per batch. samples_per_second counts tokens (batch x block_size).

Usage: train_peer.py [--device cpu|cuda] [--steps N] [--repeat R] [--models mlp,cnn,resnet,gpt]
                     [--resnet-config depth=20,width=16,batch=128]
                     [--gpt-config n_layer=6,n_head=6,n_embd=384,block_size=256,vocab_size=114,
                                   dropout=0.2,batch=64]
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

import torch
from torch import nn

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (a source or installed tree)
import models_peer  # noqa: E402


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                         nn.ReLU(), nn.Linear(512, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(),
                         nn.Linear(128, 10))


# The image classifiers of tessera-train and tessera-bench by name (bench/fit_peer.py uses these
# too); the ResNet takes its depth and width. Add a model here and to tessera-bench's kModels.
MODELS = {"mlp": mlp, "cnn": cnn,
          "resnet": lambda depth=20, width=16: models_peer.ResNet(depth=depth, width=width)}

RESNET_DEFAULTS = {"depth": 20, "width": 16, "batch": 128}
GPT_DEFAULTS = {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "vocab_size": 114,
                "dropout": 0.2, "batch": 64}


def parse_config(text, defaults):
    """"key=value,..." over |defaults| (values of the defaults' types)."""
    config = dict(defaults)
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in defaults:
            sys.exit(f"train_peer.py: unknown key '{key}' (known: {', '.join(defaults)})")
        config[key] = type(defaults[key])(value)
    return config


def sgd_recipe(model, lr, total_steps):
    """tessera-train's ResNet recipe: SGD nesterov with weight decay, OneCycleLR per step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total_steps)


def adamw_recipe(model, lr, warmup, max_steps):
    """nanoGPT's recipe: AdamW with decay on rank >= 2 parameters only, warm-up then cosine."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.99), eps=1e-8)
    sched = torch.optim.lr_scheduler
    # PyTorch 1.13's SequentialLR steps its schedulers with an epoch argument and warns about it.
    warnings.filterwarnings("ignore", message="The epoch parameter", category=UserWarning)
    # As tessera-train's LanguageModel: a warm-up only when it is longer than one step, a cosine
    # only when steps remain after it, chained when both.
    parts = []
    if warmup > 1:  # factor (step + 1) / warmup at steps 0 .. warmup - 1
        parts.append(sched.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                                    total_iters=warmup - 1))
    if max_steps > warmup:
        parts.append(sched.CosineAnnealingLR(opt, T_max=max_steps - warmup, eta_min=lr / 10))
    if len(parts) == 2:
        return opt, sched.SequentialLR(opt, parts, milestones=[warmup])
    return opt, parts[0] if parts else sched.LambdaLR(opt, lambda step: 1.0)


class Precision:
    """--dtype: f32, or the forward under torch.autocast to f16 (with a GradScaler) or bf16."""

    def __init__(self, dtype, device):
        self.dtype = {"f16": torch.float16, "bf16": torch.bfloat16}.get(dtype)
        self.device_type = "cuda" if str(device).startswith("cuda") else "cpu"
        self.scaler = torch.cuda.amp.GradScaler() if dtype == "f16" else None

    def forward_backward(self, forward):
        with torch.autocast(self.device_type, dtype=self.dtype, enabled=self.dtype is not None):
            loss = forward()
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        return loss

    def step(self, opt, clip=None):
        if self.scaler:
            self.scaler.unscale_(opt)
        if clip:
            clip()
        if self.scaler:
            self.scaler.step(opt)
            self.scaler.update()
        else:
            opt.step()


def job(name, device, a, total_steps):
    """(model, optimizer, scheduler, step function, samples per step, the config run)."""
    torch.manual_seed(0)
    precision = Precision(a.dtype, device)
    if name == "gpt":
        c = parse_config(a.gpt_config, GPT_DEFAULTS)
        model = models_peer.GPT(c["vocab_size"], c["block_size"], c["n_layer"], c["n_head"],
                                c["n_embd"], c["dropout"]).to(device)
        opt, sched = adamw_recipe(model, 1e-3, 100, total_steps + 100)
        x = torch.randint(0, c["vocab_size"], (c["batch"], c["block_size"]), device=device)
        y = torch.randint(0, c["vocab_size"], (c["batch"], c["block_size"]), device=device)
        params = list(model.parameters())

        def step():
            loss = precision.forward_backward(lambda: model(x, y)[1])
            precision.step(opt, lambda: torch.nn.utils.clip_grad_norm_(params, 1.0))
            sched.step()
            opt.zero_grad(set_to_none=True)
            return loss
        return model, step, c["batch"] * c["block_size"], c
    loss_fn = nn.CrossEntropyLoss()
    if name == "resnet":
        c = parse_config(a.resnet_config, RESNET_DEFAULTS)
        model = MODELS[name](c["depth"], c["width"]).to(device)
        opt, sched = sgd_recipe(model, 0.1, total_steps)
        batch = c["batch"]
    else:
        c = {"batch": a.batch}
        model = MODELS[name]().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        sched = None
        batch = a.batch
    x = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = precision.forward_backward(lambda: loss_fn(model(x), y))
        precision.step(opt)
        if sched is not None:
            sched.step()
        return loss
    return model, step, batch, c


def measure(name, device, a):
    total_steps = a.steps * (a.repeat + 1)
    model, step, samples, config = job(name, device, a, total_steps)
    model.train()

    def run():
        for _ in range(a.steps):
            loss = step()
        loss.item()  # waits for the device
        if device == "cuda":
            torch.cuda.synchronize()

    run()
    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    r = {"model": name, "batch": config["batch"], "steps": a.steps, "seconds": t,
         "samples_per_second": samples * a.steps / t}
    if name in ("resnet", "gpt"):
        r["config"] = config
    return r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=128, help="the MLP's and the CNN's batch")
    p.add_argument("--resnet-config", default="", help="depth=D,width=W,batch=B")
    p.add_argument("--gpt-config", default="",
                   help="n_layer=,n_head=,n_embd=,block_size=,vocab_size=,dropout=,batch=")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "medium"],
                   help="torch.set_float32_matmul_precision for f32 products (TF32 off at highest)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"],
                   help="f32, or mixed precision: torch.autocast to f16 (GradScaler) or bf16")
    p.add_argument("--threads", default="best",
                   help="intra-op threads on cpu: a number, or best (each of 1..cpu_count, the "
                        "fastest reported per model)")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision(a.matmul_precision)  # "high" and "medium": TF32 products
    if a.device == "cpu":
        counts = range(1, os.cpu_count() + 1) if a.threads == "best" else [int(a.threads)]
    else:
        counts = [torch.get_num_threads()]
    results = []
    for m in a.models.split(","):
        if m not in MODELS and m != "gpt":
            sys.exit(f"train_peer.py: unknown model '{m}' (mlp, cnn, resnet, gpt)")
        best = None
        for n in counts:
            torch.set_num_threads(n)
            r = measure(m, a.device, a)
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
