# Times PTX GEMM kernels of the portable GEMM's MODE 0 contract (gemm.tk's words, gemm_ffma.cl's
# and gemm_tf32.cl's) against torch.matmul (TF32 off) in one process, CUDA events, launching each
# module through the CUDA driver (cuModuleLoadData, cuLaunchKernel) on PyTorch's tensors; first
# checks each kernel against a float64 product on ragged shapes and split K. Named ffma_V0_NAME.ptx
# (gemm_ffma.cl) or gemm.tk_TM_TN_V2_V3.ptx (the Vulkan plugin's build of gemm.tk). As run in job
# 11 of docs/bench/h200-ffma.txt (the NN products as torch's transposed copy of A and the TN
# kernel, then the cubes); jobs 1-4 timed 1024^3 ... 8192^3, 4096x4096x1024 and 8192x1024x4096 in
# the last loop, job 7 2048^3 ... 8192^3, and had no transpose loop.
# usage: python3 h200-ffma-harness.py OUT.json file.ptx ...
import ctypes, json, sys, os, math
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
cu = ctypes.CDLL("libcuda.so.1")
torch.zeros(1, device="cuda")
def ck(r, what):
    if r != 0: raise RuntimeError(f"{what}: CUresult {r}")
stream = torch.cuda.current_stream().cuda_stream
def load(path):
    data = open(path, "rb").read() + b"\0"
    mod = ctypes.c_void_p()
    ck(cu.cuModuleLoadData(ctypes.byref(mod), data), "load " + path)
    f = ctypes.c_void_p()
    ck(cu.cuModuleGetFunction(ctypes.byref(f), mod, b"tk_main"), "func")
    v = {}
    for a, k in ((4, "regs"), (1, "smem"), (3, "local")):
        x = ctypes.c_int(); cu.cuFuncGetAttribute(ctypes.byref(x), a, f); v[k] = x.value
    return f, v
def launch(f, bufs, words, groups, threads=256):
    ptrs = [ctypes.c_uint64(b.data_ptr()) for b in bufs] + [ctypes.c_uint64(bufs[0].data_ptr())] * (8 - len(bufs))
    w = (ctypes.c_int * 32)(*words)
    loc = ctypes.c_uint64(0)
    args = (ctypes.c_void_p * 10)(*[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in ptrs],
                                  ctypes.cast(ctypes.byref(w), ctypes.c_void_p), ctypes.cast(ctypes.byref(loc), ctypes.c_void_p))
    ck(cu.cuLaunchKernel(f, groups, 1, 1, threads, 1, 1, 0, ctypes.c_void_p(stream), args, None), "launch")
def gemm(f, a, b, c, m, n, k, ta, tb, parts=1, bias=None):
    across = (n + 127) // 128; tiles = across * ((m + 127) // 128)
    per = k if parts == 1 else ((k + parts - 1) // parts + 31) // 32 * 32
    parts = (k + per - 1) // per
    words = [0] * 32
    words[8] = parts * tiles
    P = {0: m, 1: n, 2: k, 3: across, 4: tiles, 5: 0, 18: 1, 21: per}
    for i, v in P.items(): words[9 + i] = v
    out = c if parts == 1 else torch.empty(parts, m, n, device="cuda")
    bufs = [a, b, out] + ([bias] if bias is not None else [])
    launch(f, bufs, words, parts * tiles)
    if parts > 1: c.copy_(out.sum(0))
def timeit(fn, reps):
    for _ in range(3): fn()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        s.record()
        for _ in range(reps): fn()
        e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / reps)
    ts.sort(); return ts[len(ts) // 2]
out = {"kernels": {}, "results": []}
kernels = {}
for p in sys.argv[2:]:
    name = os.path.basename(p)
    try:
        f, v = load(p); kernels[name] = f; out["kernels"][name] = v; print(name, v, flush=True)
    except Exception as ex:
        print(name, "FAILED", ex, flush=True); out["kernels"][name] = str(ex)
def v0_of(name):
    # ffma_V0_... or gemm.tk_128_128_V2_V3.ptx
    if name.startswith("ffma_"): return int(name.split("_")[1])
    v3 = int(name.split("_")[-1].split(".")[0]); return (v3 & 3) | (v3 & 8)
# correctness: odd shapes, every kernel's own flags, split K
torch.manual_seed(0)
for name, f in kernels.items():
    v0 = v0_of(name); ta, tb, bias = bool(v0 & 1), bool(v0 & 2), bool(v0 & 8)
    for (m, n, k, parts) in ((1000, 1004, 1012, 1), (132, 260, 2048, 3), (128, 128, 16, 1), (4, 8, 36, 1)):
        A = torch.randn(k, m, device="cuda") if ta else torch.randn(m, k, device="cuda")
        B = torch.randn(n, k, device="cuda") if tb else torch.randn(k, n, device="cuda")
        bb = torch.randn(n, device="cuda") if bias else None
        C = torch.full((m, n), float("nan"), device="cuda")
        gemm(f, A, B, C, m, n, k, ta, tb, parts, bb)
        ref = (A.t() if ta else A).double() @ (B.t() if tb else B).double()
        if bias: ref = ref + bb.double()
        err = ((C.double() - ref).norm() / ref.norm()).item()
        ok = err < 1e-5
        out["results"].append({"kernel": name, "check": [m, n, k, parts], "err": err, "ok": ok})
        if not ok: print("WRONG", name, m, n, k, parts, err, flush=True)
shapes = [(s, s, s) for s in (2048, 4096, 8192)] + [(16384, 1152, 384), (16384, 384, 1536), (16384, 1536, 384), (16384, 384, 1152)]
# The NN product as a transposed copy of A (torch's) and the TN kernel: what a transpose beforehand
# would give, and the copy's time alone.
tk = [n for n in kernels if n.startswith("ffma_1")]
for (m, n, k) in shapes:
    reps = max(2, int(2e11 / (2 * m * n * k)))
    A = torch.randn(m, k, device="cuda"); B = torch.randn(k, n, device="cuda"); C = torch.empty(m, n, device="cuda")
    At0 = A.t().contiguous()
    fl = 2 * m * n * k
    row = {"nn_via_transpose": [m, n, k], "torch_tflops": fl / timeit(lambda: torch.matmul(A, B, out=C), reps) / 1e9}
    row["transpose_us"] = timeit(lambda: A.t().contiguous(), reps) * 1e3
    for name in tk:
        f = kernels[name]
        def both():
            gemm(f, A.t().contiguous(), B, C, m, n, k, True, False, 1)
        row[name + " transpose+TN"] = fl / timeit(both, reps) / 1e9
        row[name + " TN alone"] = fl / timeit(lambda: gemm(f, At0, B, C, m, n, k, True, False, 1), reps) / 1e9
        gemm(f, At0, B, C, m, n, k, True, False, 1)
        ref = A.double() @ B.double()
        row[name + " err"] = ((C.double() - ref).norm() / ref.norm()).item()
    out["results"].append(row); print(json.dumps(row), flush=True)
shapes = [(s, s, s) for s in (2048, 4096)]
for (m, n, k) in shapes:
    reps = max(2, int(2e11 / (2 * m * n * k)))
    A = torch.randn(m, k, device="cuda"); B = torch.randn(k, n, device="cuda"); C = torch.empty(m, n, device="cuda")
    At = A.t().contiguous(); Bt = B.t().contiguous()
    fl = 2 * m * n * k
    t = timeit(lambda: torch.matmul(A, B, out=C), reps)
    row = {"shape": [m, n, k], "torch_tflops": fl / t / 1e9}
    for rnd in range(2):
        for name, f in kernels.items():
            v0 = v0_of(name); ta, tb = bool(v0 & 1), bool(v0 & 2)
            if v0 & 8: continue
            a = At if ta else A; b = Bt if tb else B
            parts = 1
            tk = timeit(lambda: gemm(f, a, b, C, m, n, k, ta, tb, parts), reps)
            row.setdefault(name, []).append(fl / tk / 1e9)
        t = timeit(lambda: torch.matmul(A, B, out=C), reps)
        row.setdefault("torch_again", []).append(fl / t / 1e9)
    out["results"].append(row)
    print(json.dumps(row), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
