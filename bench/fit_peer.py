#!/usr/bin/env python3
"""PyTorch peer of tessera-bench's fit case: the whole job tessera-train runs, written as a
PyTorch user would write it. tessera-bench times this process from start to exit; the JSON
printed at the end gives the figures of each epoch (or validation). Evaluation and checkpoints are
in the process's time, not in the training seconds.

Image models (mlp, cnn: train_peer.py's; resnet: models_peer.py's ResNet): it reads
Fashion-MNIST's IDX files (gzip or not) from --data, normalises them as tessera-train does
((x/255 - 0.2860) / 0.3530), and for each epoch trains on the training split shuffled from the seed
(batch 128, the last batch partial, cross-entropy), evaluates on the test split and saves a
checkpoint (model and optimizer state, written to a temporary file and renamed, as tessera-train
does). mlp and cnn: Adam lr --lr (0.001) with PyTorch's defaults. resnet (tessera-train's recipe):
SGD lr --lr (0.1), momentum 0.9, nesterov, weight_decay 5e-4, OneCycleLR(max_lr=lr, total_steps =
epochs x batches per epoch) stepped per batch.

gpt (nanoGPT's shakespeare_char recipe, as tessera-train --model gpt): the text of --text split as
Tessera splits it (text_peer.py: 4 KiB blocks, 10% to validation by Tessera's seeded permutation),
models_peer.py's GPT (--layers, --heads, --width, --context, dropout 0.2), batches of --batch-size
(64) random windows drawn as Tessera's TextBatchLoader draws them (the same windows), AdamW lr 1e-3
betas (0.9, 0.99) with weight_decay 0.1 on parameters of rank >= 2 and 0 on the rest, gradient
clipping to norm 1.0, LinearLR warm-up over --warmup-steps (factor (step + 1) / warmup) then
CosineAnnealingLR to lr / 10 (SequentialLR), stepped per batch, for --max-steps steps; the mean
loss over the fixed validation windows (nats per character; --limit-test-batches keeps the first
batches) every --val-every steps and at the end, and a checkpoint at each validation.

Usage: fit_peer.py --model mlp|cnn|resnet --epochs N --checkpoint-dir DIR [--device cpu|cuda]
                   [--data DIR] [--batch-size 128] [--lr LR] [--seed 0] [--depth 20] [--width 16]
                   [--limit-train-batches N] [--limit-test-batches N] [--threads N]
       fit_peer.py --model gpt --max-steps N --checkpoint-dir DIR [--text PATH] [--val-every 250]
                   [--warmup-steps 100] [--layers 6] [--heads 6] [--width 384] [--context 256]
                   [--batch-size 64] [--limit-test-batches N] [--device ...] [--seed 0]
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (a source or installed tree)
import models_peer  # noqa: E402
import text_peer  # noqa: E402
from train_peer import MODELS, adamw_recipe, sgd_recipe  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def read_idx(directory, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                raw = f.read()
            ndims = raw[3]
            dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
            data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndims)
            if data.size != int(np.prod(dims)):
                sys.exit(f"fit_peer.py: {path}: {data.size} bytes of data for dimensions {dims}")
            return torch.from_numpy(data.reshape(dims).copy())
    sys.exit(f"fit_peer.py: {os.path.join(directory, stem)}: no such file (nor {stem}.gz)")


def load_split(directory, split):
    images = read_idx(directory, f"{split}-images-idx3-ubyte")
    labels = read_idx(directory, f"{split}-labels-idx1-ubyte").long()
    return images.unsqueeze(1), labels  # [N, 1, 28, 28] uint8, [N] int64


def batches(images, labels, batch, limit, device, order=None):
    """(x, y) on |device|, x normalised float32, in |order| (default: as stored)."""
    n = images.shape[0]
    count = (n + batch - 1) // batch
    if limit > 0:
        count = min(count, limit)
    for i in range(count):
        idx = slice(i * batch, (i + 1) * batch) if order is None else order[i * batch:(i + 1) * batch]
        x = images[idx].to(device, non_blocking=True).float().div_(255.0).sub_(MEAN).div_(STD)
        yield x, labels[idx].to(device, non_blocking=True)


def save_checkpoint(directory, name, state):
    """torch.save of |state| to a temporary file, then renamed (as tessera-train writes)."""
    path = os.path.join(directory, name)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def fit_images(a):
    """The image classifiers' job: epochs of training, a test and a checkpoint after each."""
    train_x, train_y = load_split(a.data, "train")
    test_x, test_y = load_split(a.data, "t10k")
    torch.manual_seed(a.seed)
    steps_per_epoch = (train_x.shape[0] + a.batch_size - 1) // a.batch_size
    if a.limit_train_batches > 0:
        steps_per_epoch = min(steps_per_epoch, a.limit_train_batches)
    sched = None
    if a.model == "resnet":
        model = MODELS["resnet"](a.depth, a.width).to(a.device)
        opt, sched = sgd_recipe(model, a.lr if a.lr > 0 else 0.1, a.epochs * steps_per_epoch)
    else:
        model = MODELS[a.model]().to(a.device)
        opt = torch.optim.Adam(model.parameters(), lr=a.lr if a.lr > 0 else 1e-3)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    epochs = []
    for epoch in range(1, a.epochs + 1):
        model.train()
        t0 = time.perf_counter()
        order = torch.randperm(train_x.shape[0], generator=torch.Generator().manual_seed(
            a.seed * 1000003 + epoch))
        loss_sum = torch.zeros((), device=a.device)
        correct = torch.zeros((), dtype=torch.long, device=a.device)
        seen = 0
        for x, y in batches(train_x, train_y, a.batch_size, a.limit_train_batches, a.device, order):
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            loss = loss_fn(logits, y)
            (loss / y.shape[0]).backward()
            opt.step()
            if sched is not None:
                sched.step()
            loss_sum += loss.detach()
            correct += (logits.detach().argmax(1) == y).sum()
            seen += y.shape[0]
        train_loss, train_correct = loss_sum.item() / seen, correct.item()  # waits for the device
        seconds = time.perf_counter() - t0

        model.eval()
        test_loss, test_correct, test_seen = 0.0, 0, 0
        with torch.no_grad():
            for x, y in batches(test_x, test_y, a.batch_size, a.limit_test_batches, a.device):
                logits = model(x)
                test_loss += loss_fn(logits, y).item()
                test_correct += (logits.argmax(1) == y).sum().item()
                test_seen += y.shape[0]
        if test_seen == 0:
            sys.exit(f"fit_peer.py: {a.data}: the test split has no samples")

        state = {"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()}
        if sched is not None:
            state["lr_scheduler"] = sched.state_dict()
        save_checkpoint(a.checkpoint_dir, f"epoch-{epoch:04d}.pt", state)
        m = {"epoch": epoch, "seconds": seconds, "train_loss": train_loss,
             "train_accuracy": train_correct / seen, "test_loss": test_loss / test_seen,
             "test_accuracy": test_correct / test_seen}
        epochs.append(m)
        print(f"epoch {epoch}: {seconds:.2f} s, test accuracy {100 * m['test_accuracy']:.2f}%",
              file=sys.stderr, flush=True)
    return {"epochs": epochs, "test_accuracy": epochs[-1]["test_accuracy"] if epochs else None}


def token_ids(vocab, data):
    """|data|'s bytes as int64 token ids under |vocab| (text_peer.encode, vectorised)."""
    lookup = np.zeros(256, dtype=np.int64)
    lookup[np.frombuffer(vocab, dtype=np.uint8)] = np.arange(len(vocab))
    return torch.from_numpy(lookup[np.frombuffer(data, dtype=np.uint8)])


def windows(ids, starts, context, device):
    """x, y [B, T] of the windows at |starts| (y: the next characters), on |device|."""
    index = torch.tensor(starts, dtype=torch.int64)[:, None] + torch.arange(context)[None, :]
    return ids[index].to(device, non_blocking=True), ids[index + 1].to(device, non_blocking=True)


def fit_gpt(a):
    """nanoGPT's job on Tessera's split and windows: max_steps steps, validations, checkpoints."""
    text = text_peer.load_text(a.text)
    vocab = text_peer.make_vocab(text)
    train, val, _ = text_peer.split_text(text, seed=a.seed)
    train_ids, val_ids = token_ids(vocab, train), token_ids(vocab, val)
    T, B = a.context, a.batch_size
    if len(train) < T + 1 or len(val) < T + 1:
        sys.exit(f"fit_peer.py: {a.text}: the train ({len(train)} bytes) or validation "
                 f"({len(val)} bytes) text is shorter than --context + 1 = {T + 1}")
    val_starts = text_peer.val_window_starts(len(val), T)
    if a.limit_test_batches > 0:
        val_starts = val_starts[:a.limit_test_batches * B]
    batches_per_epoch = max(1, len(train) // (B * T))  # TextBatchLoader's epoch
    torch.manual_seed(a.seed)
    model = models_peer.GPT(len(vocab), T, a.layers, a.heads, a.width, 0.2).to(a.device)
    warmup = min(a.warmup_steps, a.max_steps)
    opt, sched = adamw_recipe(model, a.lr if a.lr > 0 else 1e-3, warmup, a.max_steps)
    params = list(model.parameters())

    def validate():
        model.eval()
        total = torch.zeros((), device=a.device)
        with torch.no_grad():
            for i in range(0, len(val_starts), B):
                x, y = windows(val_ids, val_starts[i:i + B], T, a.device)
                _, loss = model(x, y)
                total += loss * x.shape[0]
        model.train()
        return total.item() / len(val_starts)

    evals, train_seconds, step = [], 0.0, 0
    model.train()
    t0 = time.perf_counter()
    while step < a.max_steps:
        epoch, batch = step // batches_per_epoch + 1, step % batches_per_epoch
        starts = text_peer.train_window_starts(len(train), T, B, a.seed, epoch, batch)
        x, y = windows(train_ids, starts, T, a.device)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % a.val_every == 0 or step == a.max_steps:
            train_loss = loss.item()  # waits for the device
            train_seconds += time.perf_counter() - t0
            val_loss = validate()
            save_checkpoint(a.checkpoint_dir, f"step-{step:06d}.pt",
                            {"step": step, "model": model.state_dict(),
                             "optimizer": opt.state_dict(), "lr_scheduler": sched.state_dict()})
            evals.append({"step": step, "train_seconds": train_seconds, "train_loss": train_loss,
                          "val_loss": val_loss})
            print(f"step {step}: {train_seconds:.2f} s training, val loss {val_loss:.4f}",
                  file=sys.stderr, flush=True)
            t0 = time.perf_counter()
    return {"steps": step, "train_seconds": train_seconds, "evals": evals,
            "val_loss": evals[-1]["val_loss"], "val_windows": len(val_starts),
            "vocab_size": len(vocab)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=sorted(list(MODELS) + ["gpt"]))
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--batch-size", type=int, default=0, help="0: 128 (images) or 64 (gpt)")
    p.add_argument("--lr", type=float, default=0,
                   help="0: the model's recipe (mlp, cnn: 0.001; resnet: 0.1; gpt: 0.001)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit-train-batches", type=int, default=0)
    p.add_argument("--limit-test-batches", type=int, default=0)
    p.add_argument("--depth", type=int, default=20, help="resnet")
    p.add_argument("--width", type=int, default=0, help="resnet (16) or gpt (384) width")
    p.add_argument("--text", default="/usr/share/games/fortunes", help="gpt: the corpus")
    p.add_argument("--max-steps", type=int, default=5000, help="gpt")
    p.add_argument("--val-every", type=int, default=250, help="gpt")
    p.add_argument("--warmup-steps", type=int, default=100, help="gpt")
    p.add_argument("--layers", type=int, default=6, help="gpt")
    p.add_argument("--heads", type=int, default=6, help="gpt")
    p.add_argument("--context", type=int, default=256, help="gpt")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: PyTorch's default)")
    a = p.parse_args()
    if a.batch_size <= 0:
        a.batch_size = 64 if a.model == "gpt" else 128
    if a.width <= 0:
        a.width = 384 if a.model == "gpt" else 16
    if a.model == "gpt" and (a.max_steps < 1 or a.val_every < 1 or a.warmup_steps < 1):
        sys.exit("fit_peer.py: --max-steps, --val-every and --warmup-steps must be at least 1")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("fit_peer.py: CUDA is not available to PyTorch")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.checkpoint_dir, exist_ok=True)
    result = fit_gpt(a) if a.model == "gpt" else fit_images(a)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    json.dump({"peer": f"PyTorch {torch.__version__}", "device": a.device, "device_name": name,
               "threads": torch.get_num_threads(), "model": a.model, **result},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
