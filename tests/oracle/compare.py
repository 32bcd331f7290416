#!/usr/bin/env python3
"""The PyTorch oracle's second half: reads what tessera_oracle wrote (manifest.json and one
safetensors file per case and device), recomputes every case with torch in float64 from the same
inputs (torch.autograd for the gradients, with the same upstream gradient) and compares by
normalised error ||tessera - torch|| / ||torch|| with a tolerance per case (integer outputs:
exactly). Prints one line per (case, device) and exits 1 with the worst offenders when any case
fails, errs, or when the two tables (oracle.h's cases and CASES below) do not name the same cases.

Usage: compare.py DIR        (needs PyTorch: Debian's python3-torch; no other package)

Adding a case: one entry in CASES, under the name the C++ table gives it (tests/oracle/README.md).
"""
import json
import math
import os
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"compare.py needs PyTorch ({e}): apt-get install python3-torch, or run "
             "scripts/test.sh; TESSERA_TEST_TORCH_PYTHON names another Python")

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "U8": torch.uint8,
          "I64": torch.int64, "BOOL": torch.bool}


def read_safetensors(path):
    """The tensors (by name) and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        dtype = DTYPES[e["dtype"]]
        if end == begin:
            tensors[name] = torch.empty(e["shape"], dtype=dtype)
        else:
            raw = bytearray(data[8 + n + begin:8 + n + end])
            tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(e["shape"])
    return tensors, meta


class Ref:
    """torch's side of one case: fn(*inputs) in float64 (integer inputs as int64), and the
    tolerance of the normalised error of the output and of each input gradient. With seen=True,
    fn also gets the keyword argument `seen` (Tessera's tensors of the case, by name) for what
    torch can not redraw (a random mask)."""

    def __init__(self, fn, tol=1e-5, grad_tol=None, seen=False):
        self.fn, self.tol = fn, tol
        self.grad_tol = grad_tol if grad_tol is not None else tol
        self.wants_seen = seen


def dropout_ref(x, seen, p=0.3):
    keep = seen["out"] != 0
    share = keep.double().mean().item()
    n = keep.numel()
    sigma = math.sqrt(p * (1 - p) / n)
    if abs(share - (1 - p)) > 6 * sigma:
        raise AssertionError(f"dropout kept {share:.4f} of {n} elements, expected {1 - p} "
                             f"(+- {6 * sigma:.4f})")
    return torch.where(keep, x / (1 - p), torch.zeros_like(x))


def optimizer_step(make, state):
    """The change of the parameter in one step of the torch.optim optimizer make([q]) from
    |state| (torch's own state dict of q)."""
    def step(p, g, *buffers):
        q = p.detach().clone()
        q.grad = g.detach().clone()
        opt = make([q])
        opt.state[q] = state(*(b.detach().clone() for b in buffers))
        opt.step()
        return q.detach() - p.detach()
    return step


def sdpa(q, k, v, causal=False, scale=None):
    """torch's scaled_dot_product_attention where it has one (2.0 and later, scale= from 2.1);
    else its math path composed of torch ops (PyTorch 1.13)."""
    fused = getattr(F, "scaled_dot_product_attention", None)
    if fused is not None and scale is None:
        return fused(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def copy_broadcast(x):
    dst = torch.zeros(3, 4, 5, dtype=x.dtype)
    dst[:, 1:3] = x
    return dst


# One entry per case of tests/oracle/cases*.cpp, under the same name. Tolerances are on the
# normalised error of Tessera's f32 against torch's f64; integer outputs are compared exactly.
CASES = {
    # --- matmul, addmm, linear ---
    "matmul": Ref(lambda a, b: a @ b),
    "matmul_trans": Ref(lambda a, b: a.t() @ b.t()),
    "matmul_odd": Ref(lambda a, b: a @ b),
    "matmul_view": Ref(lambda a, b: a @ b.t()),
    "addmm": Ref(lambda a, b, bias: torch.addmm(bias, a, b.t())),
    "linear": Ref(lambda x, w, b: F.linear(x, w, b)),
    # --- element-wise arithmetic ---
    "add": Ref(torch.add),
    "add_broadcast": Ref(torch.add),
    "add_empty": Ref(torch.add),
    "sub": Ref(torch.sub),
    "sub_broadcast": Ref(torch.sub),
    "mul": Ref(torch.mul),
    "mul_broadcast": Ref(torch.mul),
    "div": Ref(torch.div),
    "div_broadcast": Ref(torch.div),
    "add_scalar": Ref(lambda x: x + (-1.25)),
    "mul_scalar": Ref(lambda x: x * 2.5),
    # --- activations and pointwise math ---
    "relu": Ref(torch.relu),
    "exp": Ref(torch.exp),
    "log": Ref(torch.log),
    "tanh": Ref(torch.tanh),
    "sigmoid": Ref(torch.sigmoid),
    # --- reductions ---
    "sum_0": Ref(lambda x: x.sum(0)),
    "sum_1_keepdim": Ref(lambda x: x.sum(1, keepdim=True)),
    "mean_1": Ref(lambda x: x.mean(1)),
    "max_1": Ref(lambda x: x.max(1).values),
    "max_0_keepdim": Ref(lambda x: x.max(0, keepdim=True).values),
    "argmax_1": Ref(lambda x: x.argmax(1)),
    # --- softmax, log_softmax, cross-entropy ---
    "softmax": Ref(lambda x: torch.softmax(x, -1)),
    "softmax_0": Ref(lambda x: torch.softmax(x, 0)),
    "log_softmax": Ref(lambda x: torch.log_softmax(x, -1)),
    "cross_entropy": Ref(lambda x, y: F.cross_entropy(x, y)),
    # --- convolution, pooling, dropout ---
    "conv2d": Ref(lambda x, w: F.conv2d(x, w)),
    "conv2d_stride2_pad1": Ref(lambda x, w: F.conv2d(x, w, stride=2, padding=1)),
    "max_pool2d": Ref(lambda x: F.max_pool2d(x, 2)),
    "max_pool2d_k3_s2": Ref(lambda x: F.max_pool2d(x, 3, stride=2)),
    "dropout": Ref(dropout_ref, seen=True),
    # --- optimizer steps: the state of a third step (step 3, two steps taken) ---
    "sgd_step": Ref(optimizer_step(
        lambda q: torch.optim.SGD(q, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda buf: {"momentum_buffer": buf})),
    "adam_step": Ref(optimizer_step(
        lambda q: torch.optim.Adam(q, lr=0.1, weight_decay=0.1),
        lambda m, v: {"step": torch.tensor(2.0), "exp_avg": m, "exp_avg_sq": v}), tol=1e-4),
    # --- views and copies ---
    "reshape": Ref(lambda x: x.reshape(2, 3, 4)),
    "transpose_copy": Ref(lambda x: x.t().contiguous()),
    # --- tensor API (cases_tensor.cpp) ---
    "cast_i32": Ref(lambda x: (x.float() * 3).to(torch.int32)),
    "cast_i64_view": Ref(lambda x: (x.float() * 3).t().to(torch.int64)),
    "cast_bool_f32": Ref(lambda x: (x > 0).to(torch.float32)),
    "copy_broadcast": Ref(copy_broadcast),
    "arange": Ref(lambda: torch.arange(-1.5, 7.25, 0.75, dtype=torch.float64)),
    "arange_i64": Ref(lambda: torch.arange(10, -7, -3)),
    "narrow": Ref(lambda x: x.narrow(1, 2, 5)),
    "slice_step": Ref(lambda x: x[:, 1:8:3]),
    "select": Ref(lambda x: x.select(1, -1)),
    "permute": Ref(lambda x: x.permute(2, 0, 3, 1)),
    "unsqueeze_squeeze": Ref(lambda x: x.squeeze(1).unsqueeze(0)),
    "expand": Ref(lambda x: x.expand(2, 3, 4)),
    "flatten": Ref(lambda x: x.permute(1, 0, 2).flatten(1)),
    "cat": Ref(lambda a, b, c: torch.cat([a, b, c], 1)),
    "stack": Ref(lambda a, b: torch.stack([a, b], 1)),
    "split": Ref(lambda x: x.split(3, 0)[2]),
    "chunk": Ref(lambda x: x.chunk(3, 1)[1]),
    "index_select": Ref(lambda x, i: x.index_select(0, i)),
    "index_select_i64": Ref(lambda x, i: x.index_select(1, i)),
    # --- element-wise math, comparisons, selection (cases_pointwise.cpp) ---
    "neg": Ref(torch.neg),
    "abs": Ref(torch.abs),
    "sign": Ref(torch.sign),
    "sqrt": Ref(torch.sqrt),
    "rsqrt": Ref(torch.rsqrt),
    "pow_3": Ref(lambda x: torch.pow(x, 3.0)),
    "pow_half": Ref(lambda x: torch.pow(x, 0.5)),
    "clamp": Ref(lambda x: torch.clamp(x, -0.5, 0.7)),
    "clamp_min": Ref(lambda x: torch.clamp(x, min=0.1)),
    "gelu": Ref(F.gelu),
    "gelu_tanh": Ref(lambda x: F.gelu(x, approximate="tanh")),
    "silu": Ref(F.silu),
    "erf": Ref(torch.erf),
    "minimum": Ref(torch.minimum),
    "maximum_broadcast": Ref(torch.maximum),
    "lt": Ref(torch.lt),
    "ge_broadcast": Ref(torch.ge),
    "gt_scalar": Ref(lambda x: x > 0.25),
    "eq_view": Ref(lambda x: x == x.t()),
    "ne_view": Ref(lambda x: x != x.t()),
    "le_scalar": Ref(lambda x: x <= -0.1),
    "where": Ref(lambda c, a, b: torch.where(c > 0, a, b)),
    "where_broadcast": Ref(lambda c, a, b: torch.where(c > 0, a, b)),
    "masked_fill": Ref(lambda c, x: x.masked_fill(c > 0, -2.5)),
    # --- reductions, normalisation, losses, optimizers (cases_reduce.cpp) ---
    "sum_dims": Ref(lambda x: x.sum((0, 2))),
    "mean_dims_keepdim": Ref(lambda x: x.mean((1, 2), keepdim=True)),
    "min_1": Ref(lambda x: x.min(1).values),
    "var_1": Ref(lambda x: x.var(1)),
    "var_0_biased": Ref(lambda x: x.var(0, unbiased=False, keepdim=True)),
    "std_1": Ref(lambda x: x.std(1)),
    "prod_1": Ref(lambda x: x.prod(1)),
    "layer_norm": Ref(lambda x, w, b: F.layer_norm(x, (33,), w, b, 1e-5)),
    "layer_norm_2d": Ref(lambda x, w, b: F.layer_norm(x, (4, 5), w, b, 1e-5)),
    "batch_norm_train": Ref(lambda x, w, b: F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5)),
    "batch_norm_eval": Ref(lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)),
    "cross_entropy_ignore_smooth": Ref(
        lambda x, y: F.cross_entropy(x, y, ignore_index=0, label_smoothing=0.1)),
    "cross_entropy_seq": Ref(lambda x, y: F.cross_entropy(x.transpose(1, 2), y)),
    "mse_loss": Ref(F.mse_loss),
    "mse_loss_sum": Ref(lambda a, b: F.mse_loss(a, b, reduction="sum")),
    "mse_loss_none": Ref(lambda a, b: F.mse_loss(a, b, reduction="none")),
    "total_norm": Ref(lambda a, b: torch.cat([a.flatten(), b.flatten()]).norm()),
    "adamw_step": Ref(optimizer_step(
        lambda q: torch.optim.AdamW(q, lr=0.1, weight_decay=0.1),
        lambda m, v: {"step": torch.tensor(2.0), "exp_avg": m, "exp_avg_sq": v}), tol=1e-4),
    # --- nn (cases_nn.cpp) ---
    "bmm": Ref(torch.bmm),
    "bmm_trans": Ref(lambda a, b: torch.bmm(a.transpose(1, 2), b.transpose(1, 2))),
    "matmul_broadcast_batch": Ref(torch.matmul),
    "matmul_batch_view": Ref(lambda a, b: a @ b.transpose(1, 2)),
    "embedding": Ref(lambda w, i: F.embedding(i, w)),
    "embedding_padding_i64": Ref(lambda w, i: F.embedding(i, w, padding_idx=2)),
    "avg_pool2d": Ref(lambda x: F.avg_pool2d(x, 2)),
    "avg_pool2d_k3_s2_pad1": Ref(lambda x: F.avg_pool2d(x, 3, 2, 1)),
    "avg_pool2d_exclude_pad": Ref(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
    "adaptive_avg_pool2d": Ref(lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
    "adaptive_avg_pool2d_1x1": Ref(lambda x: F.adaptive_avg_pool2d(x, 1)),
    "conv2d_groups": Ref(lambda x, w: F.conv2d(x, w, padding=1, groups=2)),
    "conv2d_depthwise": Ref(lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=3)),
    "conv2d_dilation": Ref(lambda x, w: F.conv2d(x, w, padding=2, dilation=2)),
    # --- attention (cases_attention.cpp) ---
    "sdpa": Ref(sdpa),
    "sdpa_causal": Ref(lambda q, k, v: sdpa(q, k, v, causal=True)),
    "sdpa_causal_scale": Ref(lambda q, k, v: sdpa(q, k, v, causal=True, scale=0.3)),
    "sdpa_long": Ref(sdpa),
}


def norm_error(got, ref):
    """||got - ref|| / ||ref|| in float64 (the absolute norm where ref is all zeros); inf for a
    shape mismatch or a NaN."""
    if tuple(got.shape) != tuple(ref.shape):
        return math.inf
    if got.numel() == 0:
        return 0.0
    got, ref = got.double(), ref.double()
    diff = (got - ref).norm().item()
    scale = ref.norm().item()
    err = diff / scale if scale > 0 else diff
    return math.inf if math.isnan(err) else err


def check(path, ref):
    """[(what, error, tolerance)] of one case on one device."""
    t, meta = read_safetensors(path)
    n = int(meta["inputs"])
    inputs = []
    for i in range(n):
        x = t[f"in{i}"]
        if x.dtype.is_floating_point:
            x = x.double().requires_grad_(f"grad_in{i}" in t)
        else:
            x = x.long()
        inputs.append(x)
    kwargs = {"seen": t} if ref.wants_seen else {}
    out = ref.fn(*inputs, **kwargs)
    got = t["out"]
    results = []
    if not got.dtype.is_floating_point or not out.dtype.is_floating_point:
        same = tuple(got.shape) == tuple(out.shape) and torch.equal(got.long(), out.long())
        results.append(("out", 0.0 if same else math.inf, 0.0))
    else:
        results.append(("out", norm_error(got, out.detach()), ref.tol))
    if "grad_out" in t:
        wanted = [i for i in range(n) if f"grad_in{i}" in t]
        grads = torch.autograd.grad(out, [inputs[i] for i in wanted], t["grad_out"].double(),
                                    allow_unused=True)
        for i, g in zip(wanted, grads):
            g = torch.zeros_like(inputs[i]) if g is None else g
            results.append((f"grad_in{i}", norm_error(t[f"grad_in{i}"], g), ref.grad_tol))
    return results


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: compare.py DIR (written by tessera_oracle --out DIR)")
    root = sys.argv[1]
    with open(os.path.join(root, "manifest.json")) as f:
        manifest = json.load(f)
    torch.set_num_threads(1)
    print(f"PyTorch {torch.__version__} against Tessera on {', '.join(manifest['devices'])} "
          f"(TESSERA_TEST_SEED={manifest['seed']})")
    failures = []  # (error / tolerance, line)
    counts = {"ok": 0, "FAIL": 0, "skip": 0}
    ran = set()
    for r in manifest["results"]:
        name, dev = r["case"], r["device"]
        ran.add(name)
        if "skipped" in r:
            counts["skip"] += 1
            print(f"skip {name} on {dev}: {r['skipped']}")
            continue
        failed = True
        if name not in CASES:
            line = f"FAIL {name} on {dev}: no torch reference (add '{name}' to CASES)"
            failures.append((math.inf, line))
        elif "error" in r:
            line = f"FAIL {name} on {dev}: Tessera raised: {r['error']}"
            failures.append((math.inf, line))
        else:
            try:
                results = check(os.path.join(root, r["file"]), CASES[name])
            except Exception as e:  # a torch error or a failed check of the case
                results = [(f"torch side ({type(e).__name__}: {e})", math.inf, 0.0)]
            ratios = [e / tol if tol else (math.inf if e else 0.0) for _, e, tol in results]
            worst = max(ratios)
            failed = worst > 1
            parts = "  ".join(f"{w} {e:.1e}" for w, e, _ in results)
            tols = sorted({f"{tol:.0e}" for _, _, tol in results if tol})
            line = (f"{'FAIL' if failed else 'ok  '} {name} on {dev}: {parts}"
                    f" (tol {', '.join(tols) or 'exact'})")
            if failed:
                failures.append((worst, line))
        counts["FAIL" if failed else "ok"] += 1
        print(line)
    for op in manifest.get("uncovered_ops", []):
        line = (f"FAIL op {op}: no case of the oracle calls it (add one to oracle.h's table, or "
                f"say why it needs none in main.cpp's not_cased)")
        failures.append((math.inf, line))
        counts["FAIL"] += 1
        print(line)
    for name in sorted(set(CASES) - ran if not manifest.get("filtered") else ()):
        line = (f"FAIL {name}: in CASES but tessera_oracle ran no such case (add it to oracle.h's "
                f"table)")
        failures.append((math.inf, line))
        counts["FAIL"] += 1
        print(line)
    print(f"{counts['ok']} ok, {counts['FAIL']} failed, {counts['skip']} skipped "
          f"(cases x devices)")
    if failures:
        print("\nworst offenders (error / tolerance):")
        for ratio, line in sorted(failures, key=lambda x: -x[0])[:10]:
            print(f"  {ratio:.3g}  {line}")
        print(f"\nrepeat with TESSERA_TEST_SEED={manifest['seed']}")
        sys.exit(1)


if __name__ == "__main__":
    main()
