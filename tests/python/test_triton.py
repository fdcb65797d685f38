"""The Triton kernel (python/indexer_q/triton_kernel.py) and its dispatch, byte for byte.

On a CUDA machine the kernel runs compiled on the GPU; without one it runs through Triton's CPU
interpreter (TRITON_INTERPRET=1, set here before the kernel module is imported), whose float32
arithmetic is numpy's (IEEE, subnormals kept) and whose tl.fma is a true fused multiply-add in
Triton >= 3.9 (checked by test_interpreter_fma_is_fused; every other test is skipped with that
reason if it is not). The interpreter is slow, so on the CPU the random grid is reduced (each
recipe meets every B once, with an H and a dtype rotating over the recipes; B = 333 only with
H <= 8), the golden files run with bf16 inputs only and the automatic path's known-answer check
on 3 of its cases; on CUDA every combination runs.

Expected bytes: the golden files (tests/data/golden/**) and the library's native CPU operator.
"""

import os

import pytest
import torch

_CUDA = torch.cuda.is_available()
if not _CUDA:
    # Read when kernels are decorated (module import) and again while they run (Triton imports
    # parts of itself lazily and asserts the mode): it stays set for the rest of this process,
    # which affects Triton kernels only (this file's, run last in tests/python).
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton", reason="triton is not installed (requirements-dev.txt)")
from indexer_q import triton_dispatch, triton_kernel, triton_selfcheck  # noqa: E402
if not _CUDA and not triton_kernel.interpreting():  # imported earlier without the interpreter
    import importlib

    triton_kernel = importlib.reload(triton_kernel)
import triton.language as tl  # noqa: E402

import indexer_q  # noqa: E402
from conftest import (GFX942_RECIPES, GOLDEN_DIR, QUANT, QUANT_REFERENCE, RECIPES,  # noqa: E402
                      SOURCE_ONLY_RECIPES,
                      absent_args, assert_same_outputs, golden_recipe_cases, load_golden,
                      nan_weight_bits, new_recipe_outputs)

DEV = "cuda" if _CUDA else "cpu"
# numpy's notes on Inf / NaN arithmetic inside the interpreter (the kernel computes on edge rows
# and on lanes it discards): expected, not a finding
pytestmark = [pytest.mark.filterwarnings(f"ignore:{m}:RuntimeWarning") for m in (
    "invalid value encountered", "overflow encountered", "divide by zero encountered")]
TRITON = torch.ops.indexer_q.quant_q_triton


@triton.jit
def _fma_probe(a_ptr, out_ptr):
    a = tl.load(a_ptr)
    b = tl.load(a_ptr + 1)
    c = tl.load(a_ptr + 2)
    tl.store(out_ptr, tl.fma(a, b, c))


def _fma_is_fused():
    # (1 + 2^-12)^2 - (1 + 2^-11) = 2^-24 exactly; a product rounded first gives 0
    a = torch.tensor([1 + 2.0**-12, 1 + 2.0**-12, -(1 + 2.0**-11)], dtype=torch.float32,
                     device=DEV)
    out = torch.zeros(1, dtype=torch.float32, device=DEV)
    _fma_probe[(1,)](a, out, enable_fp_fusion=False)
    return out.item() == 2.0**-24


_FUSED = _fma_is_fused()
needs_exact_fma = pytest.mark.skipif(
    not _FUSED, reason="this Triton's tl.fma rounds twice here (its CPU interpreter before 3.9 "
    "computes a * b + c in two numpy steps), so no byte comparison can be exact")


def test_fma_is_fused():
    if not _CUDA:
        assert triton_kernel.interpreting()
        if not _FUSED:
            pytest.skip(f"Triton {triton.__version__}'s CPU interpreter rounds tl.fma twice "
                        "(a * b + c in two numpy steps; exact from Triton 3.9): the byte tests "
                        "are skipped here")
    assert _FUSED, "tl.fma must round once"


def _run_triton(recipe, q, w, ws, freqs, pos, hs=1.0, w2d=None, raw=False):
    out = new_recipe_outputs(recipe, q, raw=raw, w2d=w2d)
    # a recipe without RoPE / weights: 0-element tensors there (the library's empty views)
    w, w_out, freqs, pos = absent_args(recipe, w, out[2], freqs, pos, q.device)
    TRITON(recipe, q, out[0], out[1], w, w_out, ws, freqs, pos, False, hs)
    return out


def _run_cpu(op, recipe, q, w, ws, freqs, pos, hs=1.0, w2d=None, raw=False):
    cpu = lambda t: t.cpu() if t is not None else None  # noqa: E731
    q, w, freqs, pos = cpu(q), cpu(w), cpu(freqs), cpu(pos)
    out = new_recipe_outputs(recipe, q, raw=raw, w2d=w2d)
    w, w_out, freqs, pos = absent_args(recipe, w, out[2], freqs, pos)
    op(recipe, q, out[0], out[1], w, w_out, ws, freqs, pos, False, hs)
    return out


def _run_native_cpu(*args, **kw):
    return _run_cpu(QUANT, *args, **kw)


def _run_reference(*args, **kw):
    """The library's scalar reference (the executable spec), on the CPU."""
    return _run_cpu(QUANT_REFERENCE, *args, **kw)


# ---- golden files ------------------------------------------------------------------------------
@needs_exact_fma
@pytest.mark.parametrize("fp32_inputs", [False, True] if _CUDA else [False],
                         ids=["bf16", "fp32"] if _CUDA else ["bf16"])
@pytest.mark.parametrize("rel,recipe", golden_recipe_cases())
def test_golden(rel, recipe, fp32_inputs):
    x, ws, hs, want = load_golden(rel, recipe, DEV)
    q, w = x["q_input"], x["weight"]
    if fp32_inputs:  # bf16 -> fp32 is exact: same bytes
        q, w = q.float(), (w.float() if w is not None else None)
    got = _run_triton(recipe, q, w, ws, x["freqs"], x["positions"], hs,
                      w2d=want[2] is not None and want[2].dim() == 2)
    assert_same_outputs(got, want, f"{rel} {recipe} triton {DEV}")


# ---- random awkward grid vs the library's scalar reference (the native CPU operator's spec) -------
_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
_BS = [0, 1, 7, 333]
_HS = [1, 8, 64, 128]


def _grid():
    """CUDA: every (recipe, B, H, dtype). Interpreter: per recipe, each B once with an H and a
    dtype that rotate over the recipes (so every recipe meets every B, and every H and dtype
    are met), B = 333 with H <= 8."""
    cases = []
    for r, recipe in enumerate(RECIPES):
        for i, b in enumerate(_BS):
            for j, h in enumerate(_HS):
                for k, dt in enumerate(_DTYPES):
                    if not _CUDA:
                        hs = _HS[:2] if b == 333 else _HS
                        if h != hs[(r + i) % len(hs)] or k != (r + i + j) % 3:
                            continue
                    cases.append(pytest.param(recipe, b, h, dt,
                                              id=f"{recipe}-B{b}-H{h}-{str(dt)[6:]}"))
    return cases


def _awkward_inputs(b, h, dt, seed):
    g = torch.Generator().manual_seed(seed)
    mag = torch.pow(10.0, torch.randint(-6, 5, (b, h, 1), generator=g).float())
    q = torch.randn(b, h, 128, generator=g) * mag
    if b * h > 3:
        flat = q.view(-1, 128)
        flat[0].zero_()                                   # all-zero row: the 1e-4 floor
        flat[1] = torch.randn(128, generator=g) * 1e-38   # subnormal float32 values
        flat[2, 5] = float("inf")                         # an Inf (scale Inf, inv 0)
        flat[3, 70] = float("nan")                        # a NaN (ignored by amax)
        flat[min(4, flat.shape[0] - 1), 64:] *= -0.0      # signed zeros in the rotated dims
    if dt == torch.float16:
        q = q.clamp(-60000, 60000)  # keep fp16 finite except the Inf above
        if b * h > 3:
            q.view(-1, 128)[2, 5] = float("inf")
    q = q.to(dt)
    wide = h + (3 if seed % 2 else 0)  # weight stride(0) > H for half of the cases
    w = torch.randn(b, wide, generator=g).to(dt)[:, :h]
    max_pos = 37
    freqs = torch.randn(max_pos, 64, generator=g)
    pdt = torch.int32 if seed % 3 else torch.int64
    pos = torch.randint(0, max_pos, (b,), generator=g).to(pdt)
    return q, w, freqs, pos


@needs_exact_fma
@pytest.mark.parametrize("recipe,b,h,dt", _grid())
def test_grid_vs_reference(recipe, b, h, dt):
    seed = 1000 * b + 10 * h + _DTYPES.index(dt) + RECIPES.index(recipe) * 7919
    q, w, freqs, pos = _awkward_inputs(b, h, dt, seed)
    ws, hs = 0.37, 0.125
    w2d = bool(seed % 2)
    want = _run_reference(recipe, q, w, ws, freqs, pos, hs, w2d=w2d)
    got = _run_triton(recipe, q.to(DEV), w.to(DEV), ws, freqs.to(DEV), pos.to(DEV), hs, w2d=w2d)
    assert_same_outputs(got, want, f"{recipe} B={b} H={h} {dt}")


@needs_exact_fma
@pytest.mark.parametrize("wdt", [torch.float16, torch.float32])
@pytest.mark.parametrize("recipe", ["v4_fp8", "v4_fp4", "vllm_v4_fp8"])
def test_weight_dtype_independent_of_q_input(recipe, wdt):
    q, w, freqs, pos = _awkward_inputs(7, 8, torch.bfloat16, 11)
    w = w.to(wdt)
    want = _run_reference(recipe, q, w, 0.37, freqs, pos, 0.125)
    got = _run_triton(recipe, q.to(DEV), w.to(DEV), 0.37, freqs.to(DEV), pos.to(DEV), 0.125)
    assert_same_outputs(got, want, f"{recipe} weight {wdt}")


@needs_exact_fma
@pytest.mark.parametrize("recipe", RECIPES)
def test_python_api_backend_triton(recipe):
    q, w, freqs, pos = _awkward_inputs(5, 4, torch.bfloat16, 7)
    info = indexer_q.recipe_info(recipe)
    if not info.rope:  # the Python entry point takes None for what a recipe does not read
        freqs = pos = None
    if not info.weights:
        w = None
    dev = lambda t: t.to(DEV) if t is not None else None  # noqa: E731
    want = indexer_q.quant_q(recipe, q, w, 0.5, freqs, pos, head_scale=0.25, backend="reference")
    got = indexer_q.quant_q(recipe, q.to(DEV), dev(w), 0.5, dev(freqs), dev(pos),
                            head_scale=0.25, backend="triton")
    flat = lambda r: (r[0][0], r[0][1], r[1]) if isinstance(r[0], tuple) else (r[0], None, r[1])
    assert_same_outputs(flat(got), flat(want), f"{recipe} backend=triton")
    with pytest.raises(ValueError, match="backend"):
        indexer_q.quant_q(recipe, q, w, 0.5, freqs, pos, backend="cuda")


@needs_exact_fma
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("recipe", GFX942_RECIPES)
def test_gfx942_edges(recipe, dtype):
    # the AMD gfx942 forms (no golden data, so not in the known-answer check): test_gfx942.py's
    # rows at and around 224, e4m3fnuz subnormals and ties, -0, NaN / Inf, the 1e-4 floor,
    # against the library's scalar reference
    from test_gfx942 import edge_case

    x, ws, hs = edge_case(recipe, dtype, seed=3)
    for w2d in (False, True):
        want = _run_reference(recipe, x["q_input"], x["weight"], ws, x["freqs"], x["positions"],
                              hs, w2d=w2d)
        got = _run_triton(recipe, x["q_input"].to(DEV), x["weight"].to(DEV), ws,
                          x["freqs"].to(DEV), x["positions"].to(DEV), hs, w2d=w2d)
        assert_same_outputs(got, want, f"{recipe} triton {DEV} edges {dtype}")


@needs_exact_fma
def test_mxfp4_cute_edges():
    # vLLM's CuTe MXFP4 form (source only): test_recipes.py's edge rows (an Inf block: e = 255,
    # inv = -Inf; NaN codes; the floor; ties) against the library's scalar reference
    from test_recipes import mxfp4_cute_edge_case

    recipe = "vllm_v4_mxfp4_cute"
    x, s, _, _ = mxfp4_cute_edge_case()
    want = _run_reference(recipe, x["q_input"], x["weight"], s, x["freqs"], x["positions"])
    got = _run_triton(recipe, x["q_input"].to(DEV), x["weight"].to(DEV), s, x["freqs"].to(DEV),
                      x["positions"].to(DEV))
    assert_same_outputs(got, want, f"{recipe} triton {DEV} edges")


# ---- the bit-level encoders against torch's conversions, on a sweep of float32 bit patterns ------
@triton.jit
def _encoders_probe(x_ptr, e4_ptr, e4_sat_ptr, bf_ptr, f4_ptr, mx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(e4_ptr + offs, triton_kernel._e4m3fn(x, True).to(tl.uint8), mask=m)
    tl.store(e4_sat_ptr + offs, triton_kernel._e4m3fn(x, False).to(tl.uint8), mask=m)
    tl.store(bf_ptr + offs, triton_kernel._round_bf16(x), mask=m)
    tl.store(f4_ptr + offs, triton_kernel._e2m1_sglang(x).to(tl.uint8), mask=m)
    tl.store(mx_ptr + offs, triton_kernel._e2m1_vllm(x).to(tl.uint8), mask=m)


def _e2m1_reference(x, vllm):
    """row.h e2m1_encode / mx_e2m1_encode, written as their threshold counts."""
    a = torch.where(torch.isnan(x), torch.full_like(x, 6.0), x.abs().clamp(max=6.0))
    if vllm:
        m = ((a > 0.25).int() + (a >= 0.75).int() + (a > 1.25).int() + (a >= 1.75).int()
             + (a > 2.5).int() + (a >= 3.5).int() + (a > 5.0).int())
        code = m | ((x.view(torch.int32) >> 28) & 8)
        return torch.where(torch.isnan(x), torch.full_like(code, 7), code).to(torch.uint8)
    m = ((a > 0.25).int() + (a > 0.75).int() + (a > 1.25).int() + (a > 1.75).int()
         + (a > 2.5).int() + (a > 3.5).int() + (a > 5.0).int())
    return (m | torch.where((x < 0) & (m != 0), 8, 0)).to(torch.uint8)


def _sweep_bits(step):
    # every `step`-th positive pattern up to +Inf, the neighbourhoods of e4m3's rounding
    # boundaries (subnormal steps, 2^-6, 448 / 464), then both signs and a few NaNs
    u = torch.arange(0, 0x7F800001, step, dtype=torch.int64)
    edges = torch.tensor([0x3A000000, 0x3A800000, 0x3B000000, 0x3C800000, 0x43E00000,
                          0x43E80000, 0x43F00000, 0x7F7FFFFF], dtype=torch.int64)
    near = (edges[:, None] + torch.arange(-4096, 4097, dtype=torch.int64)[None, :]).flatten()
    # every multiple of 2^-10 in [0, 7] (the e2m1 ties and boundaries) and its two neighbours
    fine = (torch.arange(0, 7 * 1024 + 1, dtype=torch.float32) / 1024).view(torch.int32)
    fine = (fine.to(torch.int64)[:, None] + torch.tensor([-1, 0, 1])[None, :]).flatten()[1:]
    u = torch.cat([u, near, fine, torch.tensor([0x7FC00000, 0x7F800001, 0x7FFFFFFF])])
    u = torch.cat([u, u | 0x80000000])
    u = torch.where(u >= 2**31, u - 2**32, u)  # as int32 bit patterns
    return u.to(torch.int32).view(torch.float32)


def test_bit_encoders_match_torch_conversions():  # no fma involved: runs on any interpreter
    x = _sweep_bits(257 if _CUDA else 1031)
    n = x.numel()
    x_dev = x.to(DEV)
    e4 = torch.empty(n, dtype=torch.uint8, device=DEV)
    e4s = torch.empty(n, dtype=torch.uint8, device=DEV)
    bf = torch.empty(n, dtype=torch.float32, device=DEV)
    f4 = torch.empty(n, dtype=torch.uint8, device=DEV)
    mx = torch.empty(n, dtype=torch.uint8, device=DEV)
    block = 4096 if _CUDA else 65536
    _encoders_probe[(triton.cdiv(n, block),)](x_dev, e4, e4s, bf, f4, mx, n, BLOCK=block,
                                              enable_fp_fusion=False)
    e4, e4s, bf, f4, mx = e4.cpu(), e4s.cpu(), bf.cpu(), f4.cpu(), mx.cpu()
    # e2m1 (both quantizers) on the sweep and on every multiple of 2^-10 in [-7, 7] (all ties)
    assert torch.equal(f4, _e2m1_reference(x, False))
    assert torch.equal(mx, _e2m1_reference(x, True))
    finite = ~torch.isnan(x)
    ins = finite & (x.abs() <= 448)
    # torch's float32 -> e4m3fn cast rounds to nearest even (subnormals included); beyond 448 it
    # gives NaN, so only the in-range values are compared with it
    want = x[ins].to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(e4[ins], want)
    assert torch.equal(e4s[ins], want)
    big = finite & (x.abs() > 448)
    assert torch.equal(e4s[big], torch.where(x[big] > 0, 0x7E, 0xFE).to(torch.uint8))
    sign = (x.view(torch.int32) < 0).to(torch.uint8) * 0x80
    assert torch.equal(e4s[~finite], (sign[~finite] | 0x7F))
    # bf16 point: torch's cast is round-to-nearest-even (overflow to Inf); NaN stays NaN
    want_bf = x[finite].to(torch.bfloat16).float()
    assert torch.equal(bf[finite].view(torch.int32), want_bf.view(torch.int32))
    assert bool(torch.isnan(bf[~finite]).all())


# ---- arguments: the library's validator, nothing written ------------------------------------------
@needs_exact_fma
def test_bad_arguments_rejected_by_the_validator():
    q, w, freqs, pos = _awkward_inputs(3, 4, torch.bfloat16, 5)
    q, w, freqs, pos = q.to(DEV), w.to(DEV), freqs.to(DEV), pos.to(DEV)
    q_out, _, w_out = new_recipe_outputs("v4_fp8", q)
    with pytest.raises(RuntimeError, match="weight"):
        TRITON("v4_fp8", q, q_out, None, w[:, :3], w_out, 0.5, freqs, pos)
    with pytest.raises(RuntimeError, match="q_sf"):
        q_fp4 = torch.zeros(3, 4, 64, dtype=torch.uint8, device=DEV)
        TRITON("v4_fp4", q, q_fp4, None, w, w_out, 0.5, freqs, pos)
    with pytest.raises(RuntimeError, match="freqs"):
        TRITON("v4_fp8", q, q_out, None, w, w_out, 0.5, freqs[:, :32], pos)
    assert bool((q_out.view(torch.uint8) == 0x5A).all()) and bool((w_out == -7.25).all())


@needs_exact_fma
def test_out_of_range_positions():
    q, w, freqs, pos = _awkward_inputs(4, 8, torch.bfloat16, 9)
    pos = pos.clone()
    pos[1] = freqs.shape[0]
    pos[3] = -1
    q, w, freqs, pos = q.to(DEV), w.to(DEV), freqs.to(DEV), pos.to(DEV)
    for recipe in [r for r in RECIPES if indexer_q.recipe_info(r).rope]:
        if DEV == "cpu":  # the validator reads host positions: an error naming positions
            q_out, q_sf, w_out = new_recipe_outputs(recipe, q)
            with pytest.raises(RuntimeError, match="positions"):
                TRITON(recipe, q, q_out, q_sf, w, w_out, 0.5, freqs, pos)
            assert bool((q_out.view(torch.uint8) == 0x5A).all())
        else:  # device memory: the CUDA backend's convention (zero codes / q_sf, NaN weight)
            got = _run_triton(recipe, q, w, 0.5, freqs, pos)
            want = new_recipe_outputs(recipe, q)
            QUANT(recipe, q, want[0], want[1], w, want[2], 0.5, freqs, pos)
            assert_same_outputs(got, want, f"{recipe} out-of-range positions")
            assert bool((got[2].view(4, 8)[[1, 3]].view(torch.int32) == nan_weight_bits(recipe)).all())


# ---- the known-answer check and the automatic path ----------------------------------------------
def test_selfcheck_data_matches_golden_files():
    with open(triton_selfcheck.DATA_PATH, "rb") as f:
        shipped = f.read()
    assert triton_selfcheck.build(GOLDEN_DIR) == shipped, (
        "python/indexer_q/triton_selfcheck.bin is stale: regenerate it with "
        "`python -m indexer_q.triton_selfcheck --write tests/data/golden`")
    cases = triton_selfcheck.load()
    # every recipe with golden data (the source-only gfx942 forms have none: test_gfx942_edges)
    assert {c["recipe"] for c in cases} >= {r for r in RECIPES if not r.endswith("_fnuz")
                                           and r not in SOURCE_ONLY_RECIPES}


@needs_exact_fma
def test_selfcheck_passes_here():
    dev = torch.device(DEV, 0) if _CUDA else torch.device("cpu")
    assert triton_dispatch._self_check(dev) is None


@pytest.fixture
def fresh_checks(monkeypatch):
    monkeypatch.delenv("INDEXER_Q_TRITON", raising=False)
    triton_dispatch.reset_checks()
    if not _CUDA:  # the interpreter is slow: the automatic path's check on 3 of the cases
        real_load = triton_selfcheck.load
        monkeypatch.setattr(triton_selfcheck, "load", lambda: real_load()[:3])
    yield
    triton_dispatch.reset_checks()


def _auto_call(recipe="v4_fp8"):
    q, w, freqs, pos = _awkward_inputs(3, 4, torch.bfloat16, 3)
    out = new_recipe_outputs(recipe, q.to(DEV))
    triton_dispatch.auto_quant_q(recipe, q.to(DEV), out[0], out[1], w.to(DEV), out[2], 0.5,
                                 freqs.to(DEV), pos.to(DEV), False, 1.0)
    return out, _run_native_cpu(recipe, q, w, 0.5, freqs, pos)


@needs_exact_fma
def test_auto_path_uses_triton_after_a_passed_check(fresh_checks, monkeypatch, recwarn):
    calls = []
    real = triton_dispatch.run_triton
    monkeypatch.setattr(triton_dispatch, "run_triton", lambda *a, **k: calls.append(1) or real(*a, **k))
    got, want = _auto_call()
    assert_same_outputs(got, want, "auto")
    assert len(calls) > 1  # the check's runs, then the call itself
    n = len(calls)
    _auto_call()
    assert len(calls) == n + 1  # no second check
    assert not [w for w in recwarn if "indexer_q" in str(w.message)]
    assert triton_dispatch.path_for(DEV) == "triton"


@needs_exact_fma
def test_auto_path_falls_back_once_on_a_mismatch(fresh_checks, monkeypatch):
    real_load = triton_selfcheck.load

    def corrupted():
        cases = real_load()
        cases[0]["q_out"] = cases[0]["q_out"].clone()
        cases[0]["q_out"].view(-1)[7] ^= 0x01  # one byte off: the device "disagrees"
        return cases

    monkeypatch.setattr(triton_selfcheck, "load", corrupted)
    calls = []
    real = triton_dispatch.run_triton
    with pytest.warns(RuntimeWarning, match="known-answer check failed") as rec:
        got, want = _auto_call()
    assert len([w for w in rec if "indexer_q" in str(w.message)]) == 1
    assert_same_outputs(got, want, "fallback (composed)")  # the composed path's bytes
    monkeypatch.setattr(triton_dispatch, "run_triton", lambda *a, **k: calls.append(1) or real(*a, **k))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # later calls: silent
        for recipe in ("v4_fp8", "vllm_v4_mxfp4"):
            got, want = _auto_call(recipe)
            assert_same_outputs(got, want, f"fallback {recipe}")
    assert calls == []  # the device stays on the composed path
    assert triton_dispatch.path_for(DEV) == "composed"


def test_auto_path_disabled_by_environment(fresh_checks, monkeypatch):
    monkeypatch.setenv("INDEXER_Q_TRITON", "0")
    monkeypatch.setattr(triton_dispatch, "_self_check", lambda d: pytest.fail("no check expected"))
    got, want = _auto_call()
    assert_same_outputs(got, want, "INDEXER_Q_TRITON=0")
    assert triton_dispatch.path_for("xpu") == "composed"


def test_available_backends_names_each_path():
    paths = indexer_q.available_backends()
    assert set(paths) >= {"cpu", "cuda", "xpu", "other"}
    assert paths["cpu"] == "native"
    assert paths["xpu"] in ("triton", "composed")
    assert paths["cuda"] in ("native", "triton", "composed")
    if "xpu" not in indexer_q.routing.native_devices():
        assert paths["xpu"] == triton_dispatch.path_for("xpu")


# ---- what the compiler made of it (NVIDIA PTX) ---------------------------------------------------
_PTX_RECIPES = list(RECIPES) if _CUDA else [
    "v4_fp8", "v4_fp4", "vllm_v4_fp8", "vllm_v4_mxfp4", "vllm_v32_fp8_neox", "vllm_v4_fp8_cutedsl",
    "sgl_v41_fp4_rope_pack", "sgl_v41_fp4_quant_rne", "sglang_v4_fp8_gfx942", "vllm_v4_fp8_fnuz224",
    "vllm_v4_mxfp4_cute"]


def _ptx_all():
    if _CUDA:
        return {r: triton_kernel.ptx_of(indexer_q.recipe_info(r)) for r in _PTX_RECIPES}
    # the kernels of this process are the interpreter's: compile in a fresh one
    import json
    import subprocess
    import sys

    code = ("import json, sys, indexer_q; from indexer_q import triton_kernel as k; "
            "print(json.dumps({r: k.ptx_of(indexer_q.recipe_info(r)) for r in sys.argv[1:]}))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code, *_PTX_RECIPES], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ptx_by_recipe():
    return _ptx_all()


@pytest.mark.skipif(not _CUDA and os.environ.get("INDEXER_Q_PTX_TESTS") != "1",
                    reason="compiles PTX for sm_90 offline (about 5 s a recipe on a CPU); runs "
                    "on CUDA machines, or here with INDEXER_Q_PTX_TESTS=1")
@pytest.mark.parametrize("recipe", _PTX_RECIPES)
def test_ptx_has_no_flush_no_approximate_division(recipe, ptx_by_recipe):
    import re

    ptx = ptx_by_recipe[recipe]
    info = indexer_q.recipe_info(recipe)
    assert ".ftz" not in ptx, "a flush-to-zero instruction would drop subnormals"
    assert not re.search(r"div\.(full|approx)", ptx), "divisions must be div.rn"
    assert not re.search(r"cvt\.[a-z.]*(e4m3|e2m1|bf16)", ptx), "encoders must be bit operations"
    # the MX and CuTe paths divide nothing (their scales' inverses are built from bits)
    if not (info.fp4 and info.quant == "vllm") and info.quant != "vllm_cute":
        assert "div.rn.f32" in ptx
    if info.rope:
        assert "fma.rn.f32" in ptx  # RoPE's explicit fma
    else:
        assert "fma.rn.f32" not in ptx
    # with fusion off nothing is contracted: no float mad, and every float add / sub / mul
    # carries .rn (ptxas may fuse a plain mul.f32 + add.f32 pair into an fma)
    assert not re.search(r"\bmad(\.[a-z]+)*\.f32", ptx)
    assert not re.search(r"\b(add|sub|mul)\.f32", ptx)
    assert "mul.rn.f32" in ptx
    if info.hadamard:
        assert "add.rn.f32" in ptx and "sub.rn.f32" in ptx
