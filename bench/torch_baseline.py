#!/usr/bin/env python3
"""The op composed of PyTorch CPU ops (what a framework fallback does), timed beside the native
CPU kernel in one run, at the same sizes and thread counts.

  python3 bench/torch_baseline.py --cli build/tools/indexer-q [--tokens 4096] [--heads 64]
          [--threads 1,2] [--dtype bf16] [--iters 5]

Composed implementation (float32 throughout, SPEC.md order):
  RoPE by slicing even/odd columns; the fma(a, b, c) of SPEC step 2 is emulated exactly
  (the float64 product of two floats is exact; the float64 sum is corrected to round-to-odd
  with TwoSum, then rounded once to float32), because PyTorch has no float32 fma op;
  the Hadamard as 7 butterfly stages of tensor adds/subs (strides 1..64, in order);
  amax ignoring NaN; scale = max(1e-4, amax) / 448; inv = 1 / scale; clamp with NaN -> 448;
  .to(torch.float8_e4m3fn); weights_out = (w * weight_scale) * scale.
A second variant, "plain", writes the RoPE as xr*c - xi*s in float32 (not the spec's fma;
its bytes may differ) to show what the exact fma emulation costs.

The native kernel is timed by `indexer-q bench --backend cpu --format csv` (a subprocess, same
tokens/heads/dtype/threads). Byte check: the composed outputs of a small case are written to
a safetensors conformance file and `indexer-q verify --backend cpu` compares the native
kernel's bytes against them (every supported ISA).
"""

import argparse
import csv
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import torch

HADAMARD = torch.tensor(float.fromhex("0x1.6a09e6p-4"), dtype=torch.float32)  # bits 0x3db504f3


def fma_f32(a, b, c):
    """Exact float32 fma(a, b, c) from float64 arithmetic (a, b, c float32 tensors)."""
    p = a.double() * b.double()  # exact: 24 x 24 bits
    cd = c.double()
    s = p + cd
    # TwoSum: err = (p + cd) - s exactly.
    bb = s - p
    err = (p - (s - bb)) + (cd - bb)
    # Round to odd: if inexact and s is even, step to the neighbour on err's side.
    bits = s.view(torch.int64)
    fix = (err != 0) & ((bits & 1) == 0) & torch.isfinite(s)
    step = torch.where((err > 0) == (s > 0), 1, -1).to(torch.int64)
    bits = torch.where(fix, bits + step, bits)
    return bits.view(torch.float64).float()


def composed(q, weight, weight_scale, freqs, positions, exact_fma=True):
    x = q.float()  # (B, H, 128)
    f = freqs.index_select(0, positions.long())  # (B, 64)
    c = f[:, 0::2].unsqueeze(1)  # (B, 1, 32)
    s = f[:, 1::2].unsqueeze(1)
    xr = x[..., 64::2]
    xi = x[..., 65::2]
    if exact_fma:
        re = fma_f32(xr, c, -(xi * s))
        im = fma_f32(xr, s, xi * c)
    else:
        re = xr * c - xi * s
        im = xr * s + xi * c
    x = torch.cat([x[..., :64], torch.stack([re, im], dim=-1).flatten(-2)], dim=-1)
    B, H, D = x.shape
    x = x.reshape(B * H, D)
    stride = 1
    while stride < D:
        v = x.view(B * H, D // (2 * stride), 2, stride)
        a = v[:, :, 0, :]
        b = v[:, :, 1, :]
        x = torch.stack([a + b, a - b], dim=2).reshape(B * H, D)
        stride *= 2
    y = x * HADAMARD
    amax = torch.where(torch.isnan(y), torch.zeros((), dtype=torch.float32), y.abs()).amax(dim=-1)
    scale = torch.maximum(amax, torch.tensor(1e-4, dtype=torch.float32)) / torch.tensor(448.0, dtype=torch.float32)
    inv = torch.ones_like(scale) / scale
    v = y * inv[:, None]
    v = torch.where(torch.isnan(v), torch.tensor(448.0), v).clamp(-448.0, 448.0)
    q_fp8 = v.to(torch.float8_e4m3fn).reshape(B, H, D)
    w = weight.float() * torch.tensor(weight_scale, dtype=torch.float32)
    weights_out = (w * scale.reshape(B, H)).reshape(B, H, 1)
    return q_fp8, weights_out


DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ST = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int32: "I32",
      torch.int64: "I64", torch.float8_e4m3fn: "F8_E4M3"}


def make_inputs(B, H, dtype, max_pos=4096, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, H, 128, generator=g) * torch.pow(10.0, torch.empty(B, H, 1).uniform_(-3, 3, generator=g))).to(dtype)
    weight = torch.randn(B, H, generator=g).to(dtype)
    j = torch.arange(32, dtype=torch.float64)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * (10000.0 ** (-2.0 * j / 64.0))[None, :]
    freqs = torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1).reshape(max_pos, 64).float().contiguous()
    positions = torch.randint(0, max_pos, (B,), generator=g, dtype=torch.int64)
    return q, weight, 0.0883883461, freqs, positions


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        data = bytes(t.view(torch.uint8).reshape(-1).tolist())  # small tensors only; no numpy needed
        header[name] = {"dtype": ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def time_composed(args_, iters, exact):
    composed(*args_, exact_fma=exact)  # warm-up
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        composed(*args_, exact_fma=exact)
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def native_us(cli, tokens, heads, dtype, threads, iters):
    out = subprocess.run([cli, "bench", "--backend", "cpu", "--threads", str(threads), "--tokens", str(tokens),
                          "--heads", str(heads), "--dtype", dtype, "--iters", str(max(iters, 10)), "--format", "csv"],
                         check=True, capture_output=True, text=True).stdout
    row = next(csv.DictReader(io.StringIO(out)))
    return float(row["us_median"]), row["isa"], row["exact"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="path to the indexer-q executable")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtype", default="bf16", choices=list(DT))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--check-tokens", type=int, default=8)
    a = ap.parse_args()

    # Byte check on a small case.
    small = make_inputs(a.check_tokens, a.heads, DT[a.dtype], seed=1)
    q8, wo = composed(*small)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "composed.safetensors")
        q, w, ws, fr, pos = small
        write_safetensors(path, {"q_input": q, "weight": w, "freqs": fr, "positions": pos,
                                 "q_fp8": q8.view(torch.uint8).view(torch.float8_e4m3fn), "weights_out": wo},
                          {"weight_scale": repr(ws), "producer": "bench/torch_baseline.py composed"})
        v = subprocess.run([a.cli, "verify", "--backend", "cpu", path], capture_output=True, text=True)
        print(f"# byte check, B={a.check_tokens} H={a.heads} {a.dtype}: native CPU kernel vs composed PyTorch:")
        for line in v.stdout.splitlines():
            if "differ" in line:
                print("#   " + line.strip())
        print(f"#   verify exit status {v.returncode} ({'bytes identical' if v.returncode == 0 else 'BYTES DIFFER'})")

    big = make_inputs(a.tokens, a.heads, DT[a.dtype], seed=2)
    rows = a.tokens * a.heads
    print(f"# torch {torch.__version__}; B={a.tokens} H={a.heads} {a.dtype}; times are medians")
    print(f"{'threads':>7} {'isa':>7} {'native_us':>11} {'ns/row':>8} {'composed_us':>12} {'ratio':>7} "
          f"{'plain_us':>11} {'ratio':>7} {'exact':>5}")
    for t in [int(x) for x in a.threads.split(",")]:
        torch.set_num_threads(t)
        c_us = time_composed(big, a.iters, True)
        p_us = time_composed(big, a.iters, False)
        n_us, isa, exact = native_us(a.cli, a.tokens, a.heads, a.dtype, t, a.iters)
        print(f"{t:>7} {isa:>7} {n_us:>11.1f} {n_us * 1e3 / rows:>8.2f} {c_us:>12.1f} {c_us / n_us:>7.1f} "
              f"{p_us:>11.1f} {p_us / n_us:>7.1f} {exact:>5}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
