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

--composed-vs-plain: times this package's composed ATen operators (quant_q_composed with the
default recipe, kside_store_composed with v4_k_fp8 / v4_k_fp4) against the same ops written in plain
PyTorch in this file (composed() above; composed_kside() below: RMSNorm with the sums of squares
fma-chained, torch.rsqrt, RoPE, Hadamard, quantization, index_copy_ into the cache), both with
the float64-emulated exact fma ("plain exact") and with unfused products ("plain"), in one run,
at --sizes tokens (heads --heads on the query side):

  python3 bench/torch_baseline.py --composed-vs-plain [--sizes 1,64,1024] [--threads 2]

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


def composed_kside(x, weight, eps, freqs, positions, slots, cache, page_size, fp4, exact_fma=True):
    """The key side (SPEC-kside.md section 2) in plain PyTorch: RMSNorm (sums of squares of groups
    of four fma-chained, the xor butterfly), t = ss / 128 + eps, torch.rsqrt (not the MUFU.RSQ
    model), RoPE on dims 64..127, Hadamard, FP8 (sglang) or FP4 quantization, index_copy_."""
    f = fma_f32 if exact_fma else (lambda a, b, c: a * b + c)
    N = x.shape[0]
    xf = x.float()
    g = xf.view(N, 32, 4)
    s = g[:, :, 0] * g[:, :, 0]
    for i in (1, 2, 3):
        s = f(g[:, :, i], g[:, :, i], s)
    m = 16
    while m >= 1:
        s = s[:, :m] + s[:, m:2 * m]
        m //= 2
    t = f(s.reshape(N), torch.full((N,), 2.0 ** -7), torch.full((N,), eps, dtype=torch.float32))
    d = (xf * torch.rsqrt(t)[:, None]) * weight.float()[None, :]
    fr = freqs.index_select(0, positions.long()).view(N, 32, 2)
    c, sn = fr[..., 0], fr[..., 1]
    xr, xi = d[:, 64::2], d[:, 65::2]
    re = f(xr, c, -(xi * sn))
    im = f(xr, sn, xi * c)
    d = torch.cat([d[:, :64], torch.stack([re, im], dim=-1).flatten(-2)], dim=-1)
    st = 1
    while st < 128:
        v = d.view(N, 128 // (2 * st), 2, st)
        d = torch.stack([v[:, :, 0] + v[:, :, 1], v[:, :, 0] - v[:, :, 1]], dim=2).reshape(N, 128)
        st *= 2
    y = d * HADAMARD
    ay = torch.where(torch.isnan(y), torch.zeros((), dtype=torch.float32), y.abs())
    if not fp4:
        scale = torch.clamp(ay.amax(dim=1, keepdim=True), min=1e-4) / 448.0
        v = torch.nan_to_num(y * (1.0 / scale), nan=448.0).clamp(-448.0, 448.0)
        codes = v.to(torch.float8_e4m3fn).view(torch.uint8)
        sb = scale.contiguous().view(torch.uint8).view(N, 4)
        cb = 128
    else:
        sc = torch.clamp(ay.view(N, 4, 32).amax(dim=2, keepdim=True), min=1e-4) / 6.0
        e = torch.ceil(torch.log2(sc))
        v = y.view(N, 4, 32) * torch.exp2(-e)
        av = torch.nan_to_num(v.abs(), nan=6.0).clamp(max=6.0)
        th = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
        code = (av[..., None] > th).sum(-1) + 8 * ((v < 0) & (av > 0.25)).long()
        code = code.view(N, 64, 2)
        codes = (code[..., 0] | (code[..., 1] << 4)).to(torch.uint8)
        sb = (e.view(N, 4) + 127).to(torch.uint8)
        cb = 64
    ok = slots >= 0
    sl = slots[ok]
    page, row = sl // page_size, sl % page_size
    base = page * cache.shape[1]
    dst = torch.cat([(base + row * cb)[:, None] + torch.arange(cb), (base + cb * page_size + row * 4)[:, None] + torch.arange(4)], 1)
    src = torch.cat([codes[ok], sb[ok]], 1)
    cache.view(-1).index_copy_(0, dst.reshape(-1), src.reshape(-1))


def median_us(fn, iters):
    fn()  # warm-up
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def composed_vs_plain(a):
    import indexer_q  # noqa: F401  (loads the operators)
    ops = torch.ops.indexer_q
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; H={a.heads} {a.dtype}; "
          f"medians of {a.iters}, ms")
    print(f"{'side':>9} {'tokens':>6} {'ours_ms':>9} {'plain_exact_ms':>14} {'plain_ms':>9} "
          f"{'ours/exact':>10} {'ours/plain':>10}")
    for n in [int(v) for v in a.sizes.split(",")]:
        q, w, ws, fr, pos = make_inputs(n, a.heads, DT[a.dtype], seed=3)
        q8 = torch.empty(n, a.heads, 128, dtype=torch.float8_e4m3fn)
        wo = torch.empty(n, a.heads, 1, dtype=torch.float32)
        ours = median_us(lambda: ops.fused_q_indexer_rope_hadamard_quant_composed(q, q8, w, wo, ws, fr, pos), a.iters)
        ex = median_us(lambda: composed(q, w, ws, fr, pos, True), a.iters)
        pl = median_us(lambda: composed(q, w, ws, fr, pos, False), a.iters)
        print(f"{'query':>9} {n:>6} {ours / 1e3:>9.2f} {ex / 1e3:>14.2f} {pl / 1e3:>9.2f} {ours / ex:>10.2f} "
              f"{ours / pl:>10.2f}")
        sys.stdout.flush()
        for recipe, fp4, tb in (("v4_k_fp8", False, 132), ("v4_k_fp4", True, 68)):
            g = torch.Generator().manual_seed(n)
            x = (torch.randn(n, 128, generator=g) * 3).to(DT[a.dtype])
            nw = (1 + 0.25 * torch.randn(128, generator=g)).to(DT[a.dtype])
            kpos = torch.randint(0, fr.shape[0], (n,), generator=g)
            ps = 64
            pages = (n + ps - 1) // ps + 1
            kslots = torch.randperm(pages * ps, generator=g)[:n]
            cache = torch.zeros(pages, tb * ps, dtype=torch.uint8)
            ops.kside_store_composed(recipe, x, nw, 1e-6, fr, kpos, kslots, cache, ps)  # table built
            ours = median_us(lambda: ops.kside_store_composed(recipe, x, nw, 1e-6, fr, kpos, kslots, cache, ps),
                             a.iters)
            ex = median_us(lambda: composed_kside(x, nw, 1e-6, fr, kpos, kslots, cache, ps, fp4, True), a.iters)
            pl = median_us(lambda: composed_kside(x, nw, 1e-6, fr, kpos, kslots, cache, ps, fp4, False), a.iters)
            print(f"{recipe:>9} {n:>6} {ours / 1e3:>9.2f} {ex / 1e3:>14.2f} {pl / 1e3:>9.2f} {ours / ex:>10.2f} "
                  f"{ours / pl:>10.2f}")
            sys.stdout.flush()


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
    ap.add_argument("--cli", help="path to the indexer-q executable (native timings)")
    ap.add_argument("--composed-vs-plain", action="store_true",
                    help="time the package's composed operators against plain PyTorch (no --cli)")
    ap.add_argument("--sizes", default="1,64,1024", help="--composed-vs-plain: token counts")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtype", default="bf16", choices=list(DT))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--check-tokens", type=int, default=8)
    a = ap.parse_args()
    if a.composed_vs_plain:
        if a.threads != ap.get_default("threads"):
            torch.set_num_threads(int(a.threads.split(",")[0]))
        composed_vs_plain(a)
        return
    if not a.cli:
        ap.error("--cli is required (or --composed-vs-plain)")

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
