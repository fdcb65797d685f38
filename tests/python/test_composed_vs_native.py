"""The composed ATen implementation against the native kernels, byte for byte, on random and
adversarial inputs (and, on CUDA, both against the CPU kernel)."""

import math
from fractions import Fraction

import pytest
import torch

import indexer_q
from conftest import (CUDA_OK, DEVICES, COMPOSED, NATIVE, QUANT, QUANT_COMPOSED, QUANT_REFERENCE, RECIPES,
                      assert_same_f32, assert_same_fp8, assert_same_outputs, nan_weight_bits, new_outputs,
                      new_recipe_outputs)

MAX_POS = 97


def rope_table(max_pos=MAX_POS, base=10000.0):
    """A real RoPE table: (max_pos, 64) float32, interleaved (cos, sin) per pair."""
    j = torch.arange(32, dtype=torch.float64)
    theta = base ** (-2.0 * j / 64.0)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * theta[None, :]
    t = torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1).reshape(max_pos, 64)
    return t.float().contiguous()


def make_case(B, H, dtype, pos_dtype, extra_stride, seed):
    """CPU inputs: random rows over 10 decades plus adversarial rows (zero, tiny, subnormal,
    huge, single spike, +-Inf, NaN) and a weight whose row stride is H + extra_stride."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, 128, generator=g, dtype=torch.float64)
    mag = torch.pow(10.0, torch.empty(B, H, 1, dtype=torch.float64).uniform_(-6, 4, generator=g))
    q = q * mag
    rows = q.view(-1, 128)
    n = rows.shape[0]
    if n:
        kinds = torch.randint(0, 12, (n,), generator=g)
        col = torch.randint(0, 128, (n,), generator=g)
        r = torch.arange(n)
        rows[kinds == 0] = 0.0
        rows[kinds == 1] *= 1e-12  # amax below the 1e-4 floor
        spike = kinds == 2  # one spike: most codes become fp8 subnormals or zero
        rows[spike] *= 1e-3
        rows[r[spike], col[spike]] = 3e3
        rows[r[kinds == 3], col[kinds == 3]] = math.inf
        rows[r[kinds == 4], col[kinds == 4]] = -math.inf
        rows[r[kinds == 5], col[kinds == 5]] = math.nan
        rows[kinds == 6] *= 1e25  # overflows to Inf in bf16 / fp16 / fp32 in different rows
    q = q.to(dtype)
    w_store = (torch.randn(B, H + extra_stride, generator=g, dtype=torch.float64) * 2).to(dtype)
    if B and H:
        w_store[0, 0] = 0.0  # weight 0 with possibly Inf scale -> NaN weights_out
    weight = w_store[:, :H]
    freqs = rope_table()
    positions = torch.randint(0, MAX_POS, (B,), generator=g).to(pos_dtype)
    ws = float(torch.empty(1, dtype=torch.float64).uniform_(0.001, 2.0, generator=g))
    return q, weight, ws, freqs, positions


def run(op, q, weight, ws, freqs, positions):
    q_fp8, w_out = new_outputs(q)
    op(q, q_fp8, weight, w_out, ws, freqs, positions)
    return q_fp8, w_out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("H", [1, 8, 64, 128])
@pytest.mark.parametrize("B", [0, 1, 7, 333])
def test_composed_equals_native(B, H, dtype, device):
    seed = B * 1000 + H * 10 + {torch.bfloat16: 1, torch.float16: 2, torch.float32: 3}[dtype]
    pos_dtype = torch.int32 if seed % 2 else torch.int64
    extra = 0 if B % 2 == 0 else 5  # weight row stride H or H + 5
    args = make_case(B, H, dtype, pos_dtype, extra, seed)
    if B > 1 and extra:
        assert args[1].stride(0) == H + extra and args[1].stride(1) == 1
    dev_args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    q_n, w_n = run(NATIVE, *dev_args)
    q_c, w_c = run(COMPOSED, *dev_args)
    assert_same_fp8(q_c, q_n, "composed vs native q_fp8")
    assert_same_f32(w_c, w_n, "composed vs native weights_out")
    if device != "cpu":  # and the device against the CPU kernel
        q_ref, w_ref = run(NATIVE, *args)
        assert_same_fp8(q_n, q_ref, f"{device} vs cpu q_fp8")
        assert_same_f32(w_n, w_ref, f"{device} vs cpu weights_out")
    if B == 0:
        assert q_n.numel() == 0 and w_n.numel() == 0
    if B == 333:  # the grid really covers the hard cases: fp8 subnormals, +-448, NaN/Inf weights
        codes = q_n.cpu().view(torch.uint8)
        assert bool((((codes & 0x78) == 0) & ((codes & 0x07) != 0)).any())
        assert bool(((codes & 0x7F) == 0x7E).any())
        assert bool((~torch.isfinite(w_n.cpu())).any())


# ---- the RoPE fma: a case where "(xr*c in double) - (xi*s), rounded to float" is wrong --------
def f32(v):
    """A float32 scalar (0-dim tensor): arithmetic between two of them rounds to float32."""
    return torch.as_tensor(v, dtype=torch.float32)


def round_to_f32(fr: Fraction) -> torch.Tensor:
    """Correctly rounded (nearest, ties to even) float32 of an exact rational (normal range)."""
    if fr == 0:
        return f32(0.0)
    sign = -1 if fr < 0 else 1
    a = abs(fr)
    e = math.floor(math.log2(a))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    ulp = Fraction(2) ** (e - 23)
    n = a / ulp
    lo = math.floor(n)
    rem = n - lo
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    return f32(sign * float(lo * ulp))  # lo * ulp has 24 bits: exact in double and float


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
def test_rope_fma_is_exact_at_float_midpoints(impl, device):
    # xr * c = (2^24 + 1) * 2^-18 = 64 + 2^-18: exactly halfway between the floats 64 and
    # 64 + 2^-17. -(xi * s) = +2^-140 pushes the exact fma just above the midpoint, so
    # fmaf gives 64 + 2^-17; rounding the double difference first gives the midpoint and then
    # 64 (ties to even). Only x[64] and x[65] are non-zero and x[65] is far below half an ulp
    # of x[64], so every Hadamard output is +-x[64] * k and weights_out = x[64] * k / 448.
    xr, c = f32(97.0), f32(172961 * 2.0**-18)
    xi, s = f32(-(2.0**-40)), f32(2.0**-100)
    exact = round_to_f32(Fraction(float(xr)) * Fraction(float(c)) - Fraction(float(xi * s)))
    naive = (xr.double() * c.double() - (xi * s).double()).float()
    assert float(exact) == 64.0 + 2.0**-17 and float(naive) == 64.0, (exact, naive)
    k = torch.tensor(0x3DB504F3, dtype=torch.int32).view(torch.float32)
    want_scale = (exact * k) / f32(448.0)
    naive_scale = (naive * k) / f32(448.0)
    assert float(want_scale) != float(naive_scale)  # the test can tell the two apart

    B, H = 2, 3
    q = torch.zeros(B, H, 128, dtype=torch.float32)
    q[:, :, 64] = float(xr)
    q[:, :, 65] = float(xi)
    freqs = torch.zeros(4, 64, dtype=torch.float32)
    freqs[:, 0::2] = 1.0
    freqs[2, 0] = float(c)
    freqs[2, 1] = float(s)
    positions = torch.tensor([2, 2], dtype=torch.int64)
    weight = torch.ones(B, H, dtype=torch.float32)
    q_fp8, w_out = new_outputs(q.to(device))
    op = NATIVE if impl == "native" else COMPOSED
    op(q.to(device), q_fp8, weight.to(device), w_out, 1.0, freqs.to(device), positions.to(device))
    got = w_out.cpu().reshape(-1)
    assert bool((got.view(torch.int32) == want_scale.view(torch.int32)).all()), (got, want_scale)
    codes = q_fp8.cpu().view(torch.uint8).reshape(-1)
    assert bool(((codes == 0x7E) | (codes == 0xFE)).all())  # every value is +-448


# ---- the fp8 cast the composed path relies on (after the clamp) ---------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_torch_fp8_cast_is_rne_on_the_clamped_range(device):
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)  # +0 .. 448 (0x7e); 0x7f is NaN
    vals = codes.view(torch.float8_e4m3fn).float().double()  # exact decode, ascending
    assert bool((vals[1:] > vals[:-1]).all()) and float(vals[-1]) == 448.0
    mids = (vals[:-1] + vals[1:]) / 2  # exact in double and in float32
    # ties go to the even code
    want_mid = torch.where(codes[:-1] % 2 == 0, codes[:-1], codes[1:])
    mids32 = mids.float()
    below = torch.nextafter(mids32, torch.tensor(-1.0))
    above = torch.nextafter(mids32, torch.tensor(1000.0))
    cases = [
        (vals.float(), codes),
        (mids32, want_mid),
        (below, codes[:-1]),
        (above, codes[1:]),
    ]
    for x, want in cases:
        for sign, bit in ((1.0, 0), (-1.0, 0x80)):
            got = (sign * x).to(device).to(torch.float8_e4m3fn).cpu().view(torch.uint8)
            expect = want | bit  # -0.0 keeps its sign bit: 0x80
            assert torch.equal(got, expect.to(torch.uint8)), (sign, x[got != expect][:4])


# ---- one NaN per output (docs/RECIPES.md "NaN"): every NaN weights_out has the same bits ----
NAN_PATTERNS = {  # NaNs of each weight dtype: quiet, negative, signalling, with payloads
    torch.float16: [0x7E00, 0xFE00, 0x7C01, 0x7D55, 0xFFFF],
    torch.bfloat16: [0x7FC0, 0xFFC0, 0x7F81, 0x7FAA, 0xFFFF],
    torch.float32: [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FAAAAAA, 0xFFFFFFFF],
}
_INT_OF = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def _recipe_args(recipe, B, H, dtype, seed):
    from conftest import absent_args, halves_table
    info = indexer_q.recipe_info(recipe)
    q, w, ws, freqs, pos = make_case(B, H, dtype, torch.int64, 0, seed)
    if info.freqs_layout == "halves":
        freqs = halves_table(freqs)
    if not info.rope:
        freqs = pos = None
    return q, w, ws, freqs, pos, absent_args


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("recipe", [r for r in RECIPES if indexer_q.recipe_info(r).weights])
def test_nan_weights_out_has_one_encoding(recipe, dtype):
    B, H = 3, 8
    q, w, ws, freqs, pos, absent_args = _recipe_args(recipe, B, H, dtype, 5)
    w = w.contiguous()
    pats = NAN_PATTERNS[dtype]
    iw = w.view(_INT_OF[dtype]).view(-1)
    for i, p in enumerate(pats):  # NaN weights in the first row, a finite row after
        iw[i] = p - (1 << (8 * w.element_size())) if p >= 1 << (8 * w.element_size() - 1) else p
    assert bool(torch.isnan(w.view(-1)[: len(pats)]).all())
    want = nan_weight_bits(recipe)
    results = {}
    for name, op in (("reference", QUANT_REFERENCE), ("native", QUANT), ("composed", QUANT_COMPOSED)):
        q_out, q_sf, w_out = new_recipe_outputs(recipe, q)
        ww, wo, fr, ps = absent_args(recipe, w, w_out, freqs, pos, q.device)
        kw = {"head_scale": 0.125} if indexer_q.recipe_info(recipe).vllm else {}
        op(recipe, q, q_out, q_sf, ww, wo, ws, fr, ps, **kw)
        bits = w_out.reshape(-1).view(torch.int32)
        nan = torch.isnan(w_out.reshape(-1))
        assert bool(nan[: len(pats)].all()), f"{name}: a NaN weight gives a NaN weights_out"
        bad = [hex(int(b) & 0xFFFFFFFF) for b in bits[nan] if int(b) != want]
        assert not bad, f"{recipe} {name}: NaN weights_out {bad}, expected {hex(want)}"
        results[name] = bits
    assert torch.equal(results["native"], results["reference"])
    assert torch.equal(results["composed"], results["reference"])


# ---- the composed path's fast fma (every operand in range: no Inf / NaN / extreme rows) ----
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_composed_fast_fma_equals_native(dtype):
    # finite rows over 12 decades (fp16: 7) with products that round differently without a fused
    # multiply-add (RoPE pairs (x, x*(1+2^-k))), a real table: the float32 fma path; every recipe
    g = torch.Generator().manual_seed(17)
    B, H = 37, 16
    q = torch.randn(B, H, 128, generator=g, dtype=torch.float64)
    lo, hi = (-4, 3) if dtype == torch.float16 else (-6, 6)
    q *= torch.pow(10.0, torch.empty(B, H, 1, dtype=torch.float64).uniform_(lo, hi, generator=g))
    q[:, :, 1::2] = q[:, :, 0::2] * (1 + torch.randint(-3, 4, (B, H, 64), generator=g) * 2.0 ** -9)
    q[0, 0] = 0.0
    q = q.to(dtype)
    assert bool(torch.isfinite(q).all())
    w = torch.randn(B, H, generator=g).to(dtype)
    freqs = rope_table()
    pos = torch.randint(0, MAX_POS, (B,), generator=g)
    from conftest import absent_args, halves_table
    for recipe in RECIPES:
        info = indexer_q.recipe_info(recipe)
        fr = halves_table(freqs) if info.freqs_layout == "halves" else freqs
        outs = {}
        for name, op in (("native", QUANT), ("composed", QUANT_COMPOSED)):
            q_out, q_sf, w_out = new_recipe_outputs(recipe, q)
            ww, wo, f2, p2 = absent_args(recipe, w, w_out, fr if info.rope else None,
                                         pos if info.rope else None, q.device)
            op(recipe, q, q_out, q_sf, ww, wo, 0.37, f2, p2)
            outs[name] = (q_out, q_sf, w_out)
        assert_same_outputs(outs["composed"], outs["native"], f"{recipe} {dtype} fast fma")
