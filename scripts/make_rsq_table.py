#!/usr/bin/env python3
"""Builds src/common/data/rsq_sm90_delta2.bin, the MUFU.RSQ table the host model embeds.

Input: the golden table tests/data/golden/kside/mufu_rsq_sm90.safetensors (docs/KSIDE-SPEC.md section 5):
`delta4`, 2^23 bytes of 4-bit two's-complement nibbles, entry i in byte i >> 1 (low nibble for even
i), with T[i] = bits(fl32(1.0 / sqrt((double)x_i))) + delta_i for the 2^24 floats x_i of [1, 4);
`exceptions` lists (i, delta) pairs for nibble -8 (the handed-out file has none: only the
placeholder row (-1, 0)).

Output: the same deltas, which are all in -2..+1, as 2-bit fields holding delta + 2: entry i in
byte i >> 2, bits 2 * (i & 3) .. 2 * (i & 3) + 1 (4 MiB). src/common/rsq_sm90.cpp decodes it.
The script refuses a table with a delta outside -2..+1 or a real exception row.

Usage: python3 scripts/make_rsq_table.py [golden.safetensors] [out.bin]
Prints the histogram of the deltas and the sha256 of the output (recorded in docs/KSIDE.md).
"""
import hashlib
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        dt = {"U8": np.uint8, "I64": np.int64}[info["dtype"]]
        tensors[name] = np.frombuffer(body[lo:hi], dtype=dt).reshape(info["shape"])
    return tensors


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "tests/data/golden/kside/mufu_rsq_sm90.safetensors"
    dst = sys.argv[2] if len(sys.argv) > 2 else "src/common/data/rsq_sm90_delta2.bin"
    t = read_safetensors(src)
    d4 = t["delta4"]
    assert d4.shape == (1 << 23,), d4.shape
    nib = np.empty(1 << 24, dtype=np.int8)
    nib[0::2] = (d4 & 0xF).astype(np.int8)
    nib[1::2] = (d4 >> 4).astype(np.int8)
    nib[nib >= 8] -= 16  # two's complement
    exc = t["exceptions"].reshape(-1, 2)
    real_exc = [tuple(r) for r in exc.tolist() if r[0] >= 0]
    if real_exc or (nib == -8).any():
        sys.exit("make_rsq_table: the table has exception entries; the 2-bit format cannot hold them")
    if nib.min() < -2 or nib.max() > 1:
        sys.exit(f"make_rsq_table: delta outside -2..+1 ({nib.min()}..{nib.max()})")
    vals, counts = np.unique(nib, return_counts=True)
    print("delta histogram:", " ".join(f"{v}:{c}" for v, c in zip(vals.tolist(), counts.tolist())))
    u = (nib + 2).astype(np.uint8).reshape(-1, 4)
    packed = (u[:, 0] | (u[:, 1] << 2) | (u[:, 2] << 4) | (u[:, 3] << 6)).astype(np.uint8)
    data = packed.tobytes()
    assert len(data) == 1 << 22
    with open(dst, "wb") as f:
        f.write(data)
    print(f"wrote {dst}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
