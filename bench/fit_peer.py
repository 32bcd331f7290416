#!/usr/bin/env python3
"""PyTorch peer of tessera-bench's fit case: the whole job tessera-train runs, written as a
PyTorch user would write it. It reads Fashion-MNIST's IDX files (gzip or not) from --data,
normalises them as tessera-train does ((x/255 - 0.2860) / 0.3530), and for each epoch trains on
the training split shuffled from the seed (batch 128, the last batch partial, Adam lr 0.001 with
PyTorch's defaults, cross-entropy), evaluates on the test split and saves a checkpoint (model and
optimizer state, written to a temporary file and renamed, as tessera-train does). The models are
train_peer.py's. tessera-bench times this process from start to exit; the JSON printed at the end
gives each epoch's figures. Per-epoch "seconds" is the training loop alone, as in tessera-train's
metrics CSV; evaluation and checkpoint are in the process's time.

Usage: fit_peer.py --model mlp --epochs N --checkpoint-dir DIR [--device cpu|cuda] [--data DIR]
                   [--batch-size 128] [--lr 0.001] [--seed 0] [--limit-train-batches N]
                   [--limit-test-batches N] [--threads N]
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
from train_peer import MODELS  # noqa: E402

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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=sorted(MODELS))
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit-train-batches", type=int, default=0)
    p.add_argument("--limit-test-batches", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: PyTorch's default)")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("fit_peer.py: CUDA is not available to PyTorch")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.checkpoint_dir, exist_ok=True)

    train_x, train_y = load_split(a.data, "train")
    test_x, test_y = load_split(a.data, "t10k")
    torch.manual_seed(a.seed)
    model = MODELS[a.model]().to(a.device)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
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

        path = os.path.join(a.checkpoint_dir, f"epoch-{epoch:04d}.pt")
        torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()},
                   path + ".tmp")
        os.replace(path + ".tmp", path)
        m = {"epoch": epoch, "seconds": seconds, "train_loss": train_loss,
             "train_accuracy": train_correct / seen, "test_loss": test_loss / test_seen,
             "test_accuracy": test_correct / test_seen}
        epochs.append(m)
        print(f"epoch {epoch}: {seconds:.2f} s, test accuracy {100 * m['test_accuracy']:.2f}%",
              file=sys.stderr, flush=True)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    json.dump({"peer": f"PyTorch {torch.__version__}", "device": a.device, "device_name": name,
               "threads": torch.get_num_threads(), "model": a.model, "epochs": epochs,
               "test_accuracy": epochs[-1]["test_accuracy"] if epochs else None},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
