"""The numpy table decoder quantscope's `decode --out` is measured against.

    python3 numpy_decode.py nvfp4|fp8-block FILE.safetensors MODULE OUT

Reads the module's tensors with np.fromfile at the offsets of the safetensors
header, decodes FP8 codes with a 256-entry table and E2M1 nibbles with a
16-entry table, applies the scales by broadcasting, and writes little-endian
float32 [rows, cols] to OUT: what a person would write with numpy alone.
The float32 operations are the ones quantscope does, in the same order, so
the outputs are byte-identical.
"""
import json
import struct
import sys

import numpy as np


def e4m3_table():
    t = np.zeros(256, dtype=np.float32)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            t[c] = np.nan
        elif e == 0:
            t[c] = s * m * 2.0 ** -9
        else:
            t[c] = s * (1 + m / 8) * 2.0 ** (e - 7)
    return t


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return h, 8 + n


def tensor(path, h, start, name, dtype):
    t = h[name]
    a, b = t["data_offsets"]
    count = (b - a) // np.dtype(dtype).itemsize
    return np.fromfile(path, dtype=dtype, count=count, offset=start + a).reshape(t["shape"] or [1])


def main():
    kind, path, module, out = sys.argv[1:5]
    h, start = header(path)
    if kind == "fp8-block":
        codes = tensor(path, h, start, module + ".weight", np.uint8)
        scale = tensor(path, h, start, module + ".weight_scale_inv", np.float32)
        r, c = codes.shape
        br, bc = scale.shape
        w = e4m3_table()[codes]  # [r, c]
        w = w.reshape(br, r // br, bc, c // bc) * scale[:, None, :, None]
        w = w.reshape(r, c)
    elif kind == "nvfp4":
        packed = tensor(path, h, start, module + ".weight", np.uint8)
        scale = tensor(path, h, start, module + ".weight_scale", np.uint8)
        g = tensor(path, h, start, module + ".weight_scale_2", np.float32).reshape(())
        r, half = packed.shape
        vals = np.empty((r, 2 * half), dtype=np.float32)
        vals[:, 0::2] = E2M1[packed & 15]
        vals[:, 1::2] = E2M1[packed >> 4]
        s = e4m3_table()[scale] * g  # [r, c/16], float32 as quantscope
        w = (vals.reshape(r, -1, 16) * s[:, :, None]).reshape(r, 2 * half)
    else:
        raise SystemExit("unknown kind " + kind)
    w.astype("<f4", copy=False).tofile(out)


if __name__ == "__main__":
    main()
