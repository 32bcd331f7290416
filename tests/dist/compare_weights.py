#!/usr/bin/env python3
"""compare_weights.py A B TOL: every f32 tensor of safetensors file A against B's; passes when the
normalised error ||a - b|| / ||b|| over all of them is below TOL. Plain Python (the format is an
8-byte header length, a JSON header, then the raw little-endian data)."""
import array
import json
import math
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        out[name] = array.array("f", body[begin:end])
    return out


a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
if sorted(a) != sorted(b) or not a:
    sys.exit(f"FAIL: the files hold different tensors: {sorted(a)} vs {sorted(b)}")
err = ref = 0.0
for name in a:
    err += sum((x - y) ** 2 for x, y in zip(a[name], b[name]))
    ref += sum(y * y for y in b[name])
e = math.sqrt(err / ref)
print(f"normalised error {e:.3g} over {len(a)} tensors (tolerance {tol})")
sys.exit(0 if e < tol else 1)
