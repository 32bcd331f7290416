# Builds torch.nn modules, runs them on random inputs and writes, for test_modules_torch.cpp:
#   DIR/ref.safetensors  every case's state_dict ("CASE.key"), inputs and outputs ("CASE:name")
#   DIR/net.json         the state_dict keys, shapes and dtypes and the repr of a small net
# Usage: modules_torch.py DIR SEED. Needs only torch (safetensors.torch when present).
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

out_dir, seed = sys.argv[1], int(sys.argv[2])
torch.manual_seed(seed)
tensors = {}


def put(case, module=None, **named):
    if module is not None:
        for k, v in module.state_dict().items():
            tensors[f"{case}.{k}"] = v.detach().clone()
    for k, v in named.items():
        tensors[f"{case}:{k}"] = v.detach().clone()


def randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()


with torch.no_grad():
    lin = nn.Linear(5, 7)
    x = torch.randn(2, 3, 5)
    put("linear", lin, x=x, y=lin(x))

    conv = nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)
    x = torch.randn(2, 4, 9, 9)
    put("conv", conv, x=x, y=conv(x))

    bn = nn.BatchNorm2d(3)
    randomize(bn)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2.0)
    bn.num_batches_tracked.fill_(5)
    x, x2 = torch.randn(4, 3, 5, 5), torch.randn(2, 3, 5, 5)
    put("bn", bn, x=x, x2=x2)
    bn.train()
    y = bn(x)
    after = {k: v.clone() for k, v in bn.state_dict().items()}
    bn.eval()
    put("bn", None, y_train=y, y_eval=bn(x2), mean_after=after["running_mean"],
        var_after=after["running_var"], count_after=after["num_batches_tracked"])

    ln = nn.LayerNorm((4, 6))
    randomize(ln)
    x = torch.randn(3, 4, 6)
    put("ln", ln, x=x, y=ln(x))

    emb = nn.Embedding(10, 4, padding_idx=2)
    idx = torch.randint(0, 10, (3, 5))
    idx[0, 0] = 2
    put("emb", emb, idx=idx, y=emb(idx))

    for case, batch_first in (("mha", True), ("mha_seq", False)):
        mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
        randomize(mha)
        x = torch.randn(2, 5, 8) if batch_first else torch.randn(5, 2, 8)
        kv = torch.randn(2, 7, 8) if batch_first else torch.randn(7, 2, 8)
        causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
        put(case, mha, x=x, kv=kv, causal=causal,
            y_self=mha(x, x, x, need_weights=False)[0],
            y_causal=mha(x, x, x, attn_mask=causal, need_weights=False)[0],
            y_cross=mha(x, kv, kv, need_weights=False)[0])

    class CausalSelfAttention(nn.Module):  # nanoGPT's, with the attention written out
        def __init__(self, n_embd, n_head):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.attn_dropout = nn.Dropout(0.0)
            self.resid_dropout = nn.Dropout(0.0)
            self.n_head, self.n_embd = n_head, n_embd

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                       for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / (k.size(-1) ** 0.5)
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    csa = CausalSelfAttention(12, 3)
    x = torch.randn(2, 6, 12)
    put("csa", csa, x=x, y=csa(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Dropout(0.25))
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.LayerNorm(8), nn.GELU(approximate="tanh")])
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.emb = nn.Embedding(10, 8, padding_idx=0)
        self.heads = nn.ModuleDict({"cls": nn.Linear(8, 3), "aux": nn.Linear(8, 1, bias=False)})
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.flat = nn.Flatten()
        self.scale = nn.Parameter(torch.ones(1))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))


net = Net()
dtypes = {torch.float32: "f32", torch.int64: "i64"}
with open(f"{out_dir}/net.json", "w") as f:
    json.dump({"keys": [[k, list(v.shape), dtypes[v.dtype]] for k, v in net.state_dict().items()],
               "repr": repr(net)}, f)

try:
    from safetensors.torch import save_file
except ImportError:
    def save_file(tensors, path):  # the format, without the library
        codes = {torch.float32: ("F32", "f"), torch.int64: ("I64", "q"), torch.bool: ("BOOL", "?")}
        header, blobs, offset = {}, [], 0
        for k, t in tensors.items():
            t = t.contiguous()
            code, fmt = codes[t.dtype]
            b = struct.pack(f"<{t.numel()}{fmt}", *t.flatten().tolist())
            header[k] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
            blobs.append(b)
            offset += len(b)
        h = json.dumps(header).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
save_file(tensors, f"{out_dir}/ref.safetensors")
