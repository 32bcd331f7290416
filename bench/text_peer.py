#!/usr/bin/env python3
"""The Python twin of Tessera's character-level text data (train/include/tessera/train/text_data.h),
so that a PyTorch run sees exactly the text, vocabulary, split and windows that tessera-train
--model gpt trains and validates on: load_text (a file, or a directory's regular files in name
order, skipping hidden files, *.dat and symlinks), the byte vocabulary, split_text (4 KiB blocks,
10% of them to validation, chosen by Tessera's seeded permutation), and the training and
validation windows of TextBatchLoader. Also reads and writes safetensors files with nothing but
torch (Debian's python3-torch has no `safetensors` package), for the interop tests and
docs/models.md.

Usage: text_peer.py --dump PATH [--seed S] [--block-size N] [--val-fraction F] [--context T]
                    [--batch-size B] [--batches K]
prints, as JSON, what Tessera's split and loader give for PATH (tests/train compare it).
"""
import argparse
import json
import math
import os
import struct

MASK64 = (1 << 64) - 1
SPLIT_STREAM = 0x73706C6974  # "split"
WINDOW_STREAM = 0x77696E646F7773  # "windows"


# --- Tessera's random numbers (random.h: splitmix64) ------------------------------------------
def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def derive_seed(seed, stream):
    return mix64((seed ^ mix64(stream)) & MASK64)


class Generator:
    """random.h's Generator: the n-th draw is mix64(seed + n)."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        v = mix64(self.state)
        self.state = (self.state + 1) & MASK64
        return v

    def below(self, n):
        """Uniform in [0, n) (Lemire's method, as Generator::below)."""
        threshold = ((1 << 64) - n) % n
        while True:
            m = self.next_u64() * n
            if (m & MASK64) >= threshold:
                return m >> 64


def permutation(n, seed):
    p = list(range(n))
    g = Generator(seed)
    for i in range(n - 1, 0, -1):
        j = g.below(i + 1)
        p[i], p[j] = p[j], p[i]
    return p


# --- text, vocabulary, split, windows -----------------------------------------------------------
def load_text(path="/usr/share/games/fortunes"):
    """The bytes of a file, or of a directory's text files in sorted name order."""
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            return f.read()
    names = []
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if (name.startswith(".") or name.endswith(".dat") or os.path.islink(full)
                or not os.path.isfile(full)):
            continue
        names.append(name)
    data = b""
    for name in sorted(names, key=os.fsencode):
        with open(os.path.join(path, name), "rb") as f:
            data += f.read()
    return data


def make_vocab(text):
    """The distinct bytes of |text|, sorted: token i is the byte vocab[i]."""
    return bytes(sorted(set(text)))


def encode(vocab, text):
    lookup = {c: i for i, c in enumerate(vocab)}
    return [lookup[c] for c in text]


def decode(vocab, ids):
    return bytes(vocab[i] for i in ids)


def split_text(text, block_size=4096, val_fraction=0.1, seed=0):
    """(train bytes, val bytes, sorted validation block indices), as split_text."""
    blocks = len(text) // block_size + (len(text) % block_size != 0)
    n_val = 0
    if val_fraction > 0:
        n_val = min(max(int(math.floor(val_fraction * blocks + 0.5)), 1), blocks - 1)
    val_blocks = sorted(permutation(blocks, derive_seed(seed, SPLIT_STREAM))[:n_val])
    chosen = set(val_blocks)
    train, val = bytearray(), bytearray()
    for b in range(blocks):
        (val if b in chosen else train).extend(text[b * block_size:(b + 1) * block_size])
    return bytes(train), bytes(val), val_blocks


def train_window_starts(length, context, batch_size, seed, epoch, batch):
    """The window starts of training batch |batch| of |epoch| (1-based) over a part of |length|."""
    g = Generator(derive_seed(derive_seed(derive_seed(seed, WINDOW_STREAM), epoch), batch))
    return [g.below(length - context) for _ in range(batch_size)]


def val_window_starts(length, context):
    """The fixed validation windows: 0, T, 2T, ... while start + T + 1 <= length."""
    return [w * context for w in range((length - 1) // context)]


def batch(data, vocab, starts, context):
    """x, y as int64 tensors [B, T] (y: the next character), as nanoGPT's get_batch."""
    import torch
    ids = torch.tensor(encode(vocab, data), dtype=torch.int64)
    x = torch.stack([ids[s:s + context] for s in starts])
    y = torch.stack([ids[s + 1:s + 1 + context] for s in starts])
    return x, y


# --- safetensors without the safetensors package ------------------------------------------------
def _dtypes():
    import torch
    return {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
            "BF16": torch.bfloat16, "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8,
            "BOOL": torch.bool}


def read_safetensors(path):
    """({name: tensor} in file order, metadata) of a safetensors file."""
    import torch
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = e["data_offsets"]
        dtype = _dtypes()[e["dtype"]]
        if end == begin:
            tensors[name] = torch.empty(e["shape"], dtype=dtype)
        else:
            raw = bytearray(data[8 + n + begin:8 + n + end])
            tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(e["shape"]).clone()
    return tensors, meta


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} (a state_dict) as safetensors; tied tensors are written twice."""
    import torch
    names = {v: k for k, v in _dtypes().items()}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = dict(metadata)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", required=True, help="a text file or directory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=4096)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batches", type=int, default=2, help="training batches of epoch 1 to list")
    a = ap.parse_args()
    text = load_text(a.dump)
    train, val, val_blocks = split_text(text, a.block_size, a.val_fraction, a.seed)
    print(json.dumps({
        "bytes": len(text),
        "vocab": list(make_vocab(text)),
        "val_blocks": val_blocks,
        "train_len": len(train),
        "val_len": len(val),
        "train_windows": [train_window_starts(len(train), a.context, a.batch_size, a.seed, 1, k)
                          for k in range(a.batches)],
        "val_windows": val_window_starts(len(val), a.context),
    }))


if __name__ == "__main__":
    main()
