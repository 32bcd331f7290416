#!/usr/bin/env python3
"""The PyTorch half of the models' interop test (test_models_interop.cpp).

Usage: models_interop.py DIR

1. For each model in DIR/tessera_MODEL.safetensors (a Tessera state dict, written with
   tessera::train::save) and DIR/tessera_MODEL_io.safetensors (the inputs and Tessera's outputs,
   and the configuration as metadata): builds bench/models_peer.py's twin, loads the state dict
   with load_state_dict(strict=True), runs the same inputs in evaluation mode and compares the
   outputs (and the GPT's loss) by normalised error ||tessera - torch|| / ||torch|| < 1e-4.
2. Writes the other direction: twins initialised by torch (seed 1; the ResNet's BatchNorm
   statistics moved by one training-mode forward), their state dicts as
   DIR/torch_MODEL.safetensors, and inputs and torch's outputs as DIR/torch_MODEL_io.safetensors
   for the C++ side to load and compare.
Prints one line per check; exits 1 when any fails.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

try:
    import torch
    from torch.nn import functional as F
except ImportError as e:
    sys.exit(f"models_interop.py needs PyTorch ({e}): apt-get install python3-torch")

import models_peer  # noqa: E402
import text_peer  # noqa: E402

TOL = 1e-4
failures = []


def nerr(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check(what, err):
    ok = err < TOL
    print(f"{'ok  ' if ok else 'FAIL'} {what}: normalised error {err:.3g} (tolerance {TOL:g})")
    if not ok:
        failures.append(what)


def build(name, meta):
    if name == "resnet":
        return models_peer.ResNet(depth=int(meta["depth"]), num_classes=int(meta["num_classes"]),
                                  in_channels=int(meta["in_channels"]), width=int(meta["width"]))
    return models_peer.GPT(int(meta["vocab_size"]), int(meta["block_size"]), int(meta["n_layer"]),
                           int(meta["n_head"]), int(meta["n_embd"]), 0.0,
                           meta.get("bias", "true") == "true")


def run(name, model, io):
    with torch.no_grad():
        if name == "resnet":
            return {"out": model(io["x"])}
        logits, loss = model(io["idx"], io["targets"])
        return {"out": logits, "loss": loss}


def from_tessera(d, name):
    state, _ = text_peer.read_safetensors(os.path.join(d, f"tessera_{name}.safetensors"))
    io, meta = text_peer.read_safetensors(os.path.join(d, f"tessera_{name}_io.safetensors"))
    model = build(name, meta)
    model.load_state_dict(state, strict=True)
    model.eval()
    if name == "gpt" and model.lm_head.weight is not model.transformer.wte.weight:
        failures.append("gpt: lm_head no longer tied after load_state_dict")
    got = run(name, model, io)
    check(f"{name}: Tessera's weights in PyTorch, outputs", nerr(io["out"], got["out"]))
    if "loss" in got:
        check(f"{name}: Tessera's weights in PyTorch, loss", nerr(io["loss"], got["loss"]))


def to_tessera(d, name, meta, io):
    torch.manual_seed(1)
    model = build(name, meta)
    if name == "resnet":
        model.train()
        with torch.no_grad():
            model(torch.randn_like(io["x"]) * 2 + 0.5)
    model.eval()
    out = run(name, model, io)
    text_peer.write_safetensors(os.path.join(d, f"torch_{name}.safetensors"), model.state_dict(),
                                {"format": "pt"})
    io = dict(io)
    io.update(out)
    text_peer.write_safetensors(os.path.join(d, f"torch_{name}_io.safetensors"), io, meta)


def main():
    d = sys.argv[1]
    for name in ("resnet", "gpt"):
        from_tessera(d, name)
        io, meta = text_peer.read_safetensors(os.path.join(d, f"tessera_{name}_io.safetensors"))
        inputs = {k: v for k, v in io.items() if k in ("x", "idx", "targets")}
        to_tessera(d, name, meta, inputs)
    if failures:
        print("failed:", ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
