"""The AMD gfx942 forms (docs/RECIPES.md 14; source only: NO golden data exists): recipes
sglang_v4_fp8_gfx942 (SGLang's AOT HIP kernel: 224 in place of 448, e4m3fn codes) and
vllm_v4_fp8_fnuz224 (vLLM's ROCm Triton kernel: x1_c RoPE fma, q_scale = pow2ceil(fmax(amax, 1e-4) /
224), e4m3fnuz codes, weights_out without a factor 2). Every implementation (native CPU, composed,
and on CUDA the CUDA backend) is compared with the library's scalar reference (the executable
spec, quant_q(..., backend="reference")) on random inputs and on rows built to hit the edges:
values at and around 224, e4m3fnuz subnormals and their ties, -0, NaN / Inf rows, the 1e-4 floor.
The Triton kernel on the same rows: test_triton.py (test_gfx942_edges). Also: the descriptors,
that neither recipe is the "FNUZ twin" of an FN recipe, exact relations to the golden-checked
v4_fp8 / vllm_v4_fp8, and the engine-call wrappers."""

import math

import pytest
import torch

import indexer_q
from conftest import (DEVICES, GFX942_RECIPES, QUANT, QUANT_COMPOSED, QUANT_REFERENCE,
                      SOURCE_ONLY_RECIPES, absent_args, assert_same_f32, assert_same_fp8,
                      assert_same_outputs, halves_table, new_recipe_outputs)
from test_composed_vs_native import make_case, rope_table

SGL = "sglang_v4_fp8_gfx942"
VLLM = "vllm_v4_fp8_fnuz224"
GFX942 = (SGL, VLLM)
IMPLS = {"native": QUANT, "composed": QUANT_COMPOSED}


def run(op, recipe, x, ws, hs=1.0, w2d=None, raw=False):
    outs = new_recipe_outputs(recipe, x["q_input"], w2d=w2d, raw=raw)
    q_out, q_sf, w_out = outs
    w, w_arg, freqs, pos = absent_args(recipe, x["weight"], w_out, x["freqs"], x["positions"])
    op(recipe, x["q_input"], q_out, q_sf, w, w_arg, ws, freqs, pos, head_scale=hs)
    return outs


def to_device(x, device):
    return {k: (v.to(device) if v is not None else None) for k, v in x.items()}


# ---- rows built to hit the edges of the two quantizers ------------------------------------------
def _identity_freqs(layout, max_pos=4):
    """cos = 1, sin = 0 at every position: RoPE leaves the rotated dims as they are."""
    f = torch.zeros(max_pos, 64)
    f[:, slice(0, None, 2) if layout == "interleaved" else slice(0, 32)] = 1.0
    return f


def edge_case(recipe, dtype=torch.float32, seed=0):
    """(inputs, weight_scale, head_scale) of rows built for `recipe`, float32 unless `dtype`.

    sglang_v4_fp8_gfx942 (Hadamard): a row a * e_0 + b * e_1 (dims RoPE leaves alone) has the
    Hadamard output (a + b) / sqrt(128) and (a - b) / sqrt(128), 64 times each, so the smaller
    code is of about 224 * (a - b) / (a + b): ratios swept over e4m3fn's steps near 224 (208, 216
    = the tie, 224), down to its subnormals; plus rows with a NaN, +-Inf, all zero, tiny (the 1e-4
    floor), huge (Inf after the Hadamard), and random rows.
    vllm_v4_fp8_fnuz224 (no Hadamard): dims 0..63 are y itself, so a row sets amax = 224 * 2^k
    exactly (or just above / below it) and the other values v * 2^k for v on every e4m3fnuz
    subnormal (m * 2^-10), their ties ((m + 1/2) * 2^-10), -tiny (-0 -> 0x00), values at and
    around 224 and the ties of e4m3fnuz's top binade; plus NaN, +-Inf, zero, tiny and random
    rows, and rows with rotated values (bf16 rounding after the x1_c fma)."""
    g = torch.Generator().manual_seed(seed)
    info = indexer_q.recipe_info(recipe)
    rows = []
    if recipe == SGL:
        ratios = [0.0, 1.0, 2.0**-24, 2.0**-12, 2.0**-9, 2.0**-8, 1e-5, 7e-5, 1e-4]
        for t in (200.0, 204.0, 207.9, 208.0, 212.0, 215.99, 216.0, 216.01, 220.0, 223.99, 224.0):
            ratios.append(t / 224.0)
        for m in range(1, 8):  # codes on and between the e4m3fn subnormals (step 2^-9)
            ratios += [m * 2.0**-9 / 224.0, (m + 0.5) * 2.0**-9 / 224.0]
        for e in (-30, -8, 0, 3, 20, 60):
            for r in ratios:
                a = 2.0**e
                row = torch.zeros(128, dtype=torch.float64)
                # a + b = 2a / (1 + r), a - b = 2a r / (1 + r): ratio (a - b) / (a + b) = r
                row[0], row[1] = a, a * (1 - r) / (1 + r)
                rows.append(row)
                rows.append(-row)
    else:
        sub = [m * 2.0**-10 for m in range(1, 8)] + [(m + 0.5) * 2.0**-10 for m in range(0, 8)]
        near = [224.0, 223.0, 216.0, 208.0, 200.0, 112.0, 120.0, 2.0**-7, 2.0**-7 - 2.0**-11,
                2.0**-7 + 2.0**-11, 3 * 2.0**-12, 2.0**-12, 2.0**-13]
        for e in (-40, -12, -1, 0, 5, 40):
            for top in (224.0, 224.0 * (1 - 2.0**-24), 224.0 * (1 + 2.0**-23), 225.0, 112.0):
                row = torch.zeros(128, dtype=torch.float64)
                vals = torch.tensor([top] + sub + [-v for v in sub] + near + [-v for v in near]
                                    + [-2.0**-12, -2.0**-30], dtype=torch.float64)
                row[:vals.numel()] = vals * 2.0**e
                rows.append(row)
                rows.append(-row)
    specials = []
    for kind in range(8):
        row = torch.randn(128, generator=g, dtype=torch.float64)
        if kind == 0:
            row[3] = math.nan
        elif kind == 1:
            row[5] = math.inf
        elif kind == 2:
            row[70] = -math.inf
        elif kind == 3:
            row.zero_()
        elif kind == 4:
            row *= 1e-12  # below the 1e-4 floor
        elif kind == 5:
            row *= 3e37  # the Hadamard's sums overflow to Inf in float32
        elif kind == 6:
            row[:] = math.nan
        else:
            row[10], row[70] = math.inf, math.nan
        specials.append(row)
    H = 4
    while len(rows) % H:
        rows.append(torch.zeros(128, dtype=torch.float64))
    first_random = len(rows)
    for _ in range(16):  # random rows over many decades, the rotated dims included
        rows.append(torch.randn(128, generator=g, dtype=torch.float64)
                    * 10.0 ** float(torch.randint(-6, 6, (1,), generator=g)))
    inf_row = len(rows) + 1  # specials[1]: an Inf, weight 0 -> NaN weights_out
    rows += specials
    while len(rows) % H:
        rows.append(torch.zeros(128, dtype=torch.float64))
    B = len(rows) // H
    q = torch.stack(rows).view(B, H, 128)
    if dtype == torch.float16:
        q = q.clamp(-65000, 65000)
    q = q.to(dtype)
    # identity RoPE on the built rows (position 0), a real table for the random / special ones
    freqs = torch.cat([_identity_freqs(info.freqs_layout, 1),
                       rope_table(8) if info.freqs_layout == "interleaved"
                       else halves_table(rope_table(8))])
    pos = torch.zeros(B, dtype=torch.int64)
    pos[first_random // H:] = torch.randint(1, 9, (B - first_random // H,), generator=g)
    w = torch.randn(B, H, generator=g).to(dtype)
    w.view(-1)[inf_row] = 0.0  # 0 * Inf = NaN
    hs = H ** -0.5 if info.two_factors else 1.0
    return {"q_input": q, "weight": w, "freqs": freqs, "positions": pos}, 128 ** -0.5, hs


# ---- the descriptors and the FNUZ-twin rules ------------------------------------------------------
def test_descriptors():
    assert set(GFX942) == set(GFX942_RECIPES) and set(GFX942) < set(SOURCE_ONLY_RECIPES)
    sgl, v4 = indexer_q.recipe_info(SGL), indexer_q.recipe_info("v4_fp8")
    assert sgl == v4._replace(name=SGL, quant="sglang_224")
    assert not sgl.weights_2d and not sgl.vllm and not sgl.two_factors and not sgl.q_scale_out
    vl, vf8 = indexer_q.recipe_info(VLLM), indexer_q.recipe_info("vllm_v4_fp8")
    assert vl == vf8._replace(name=VLLM, rope_fma="x1_c", format="e4m3fnuz", quant="vllm_fnuz224")
    assert vl.weights_2d and vl.vllm and vl.two_factors and not vl.q_scale_out and not vl.fp4


def test_no_fnuz_twin():
    # only SGLang's quantizer has FNUZ twins (the FN result re-encoded, weights_out * 2);
    # vllm_v4_fp8_fnuz224 is a form of its own, sglang_224 has no FNUZ form
    import indexer_q._ops as ops
    assert VLLM not in ops._FNUZ_OF.values() and SGL not in ops._FNUZ_OF
    assert all(indexer_q.recipe_info(t).quant == "sglang" for t in ops._FNUZ_OF.values())
    for fn in ("vllm_v4_fp8", SGL, "vllm_v4_fp8_cutedsl", "vllm_v32_fp8_neox"):
        with pytest.raises(ValueError, match=f"indexer_q: out_dtype: recipe {fn} has no "
                                             "float8_e4m3fnuz form") as e:
            indexer_q.resolve_recipe(fn, torch.float8_e4m3fnuz)
        assert VLLM in str(e.value) and "selected by name" in str(e.value)
    assert indexer_q.resolve_recipe(VLLM, torch.float8_e4m3fnuz) == VLLM
    assert indexer_q.resolve_recipe(VLLM) == VLLM
    assert indexer_q.resolve_recipe("v4_fp8", torch.float8_e4m3fnuz) == "v4_fp8_fnuz"
    x, ws, hs = edge_case(VLLM)
    # an fnuz q_out does not turn vllm_v4_fp8 (or the gfx942 SGLang form) into anything
    for fn in ("vllm_v4_fp8", SGL):
        q_out = torch.full(x["q_input"].shape, 0x5A, dtype=torch.uint8).view(torch.float8_e4m3fnuz)
        with pytest.raises(ValueError, match="out_dtype"):
            indexer_q.quant_q(fn, x["q_input"], x["weight"], ws, x["freqs"], x["positions"],
                              q_out=q_out, head_scale=hs)
        assert bool((q_out.view(torch.uint8) == 0x5A).all())
    # the recipe by name allocates float8_e4m3fnuz and a (B, H) weights_out
    q, w = indexer_q.quant_q(VLLM, x["q_input"], x["weight"], ws, x["freqs"], x["positions"],
                             head_scale=hs)
    assert q.dtype == torch.float8_e4m3fnuz and tuple(w.shape) == tuple(x["weight"].shape)
    q, w = indexer_q.quant_q(SGL, x["q_input"], x["weight"], ws, x["freqs"], x["positions"])
    assert q.dtype == torch.float8_e4m3fn and tuple(w.shape) == tuple(x["weight"].shape) + (1,)
    # an FN q_fp8 for the FNUZ form: the library's validator names q_fp8, nothing written
    with pytest.raises(RuntimeError, match="q_fp8"):
        indexer_q.quant_q(VLLM, x["q_input"], x["weight"], ws, x["freqs"], x["positions"],
                          out_dtype=torch.float8_e4m3fn, head_scale=hs)


# ---- every implementation == the reference ------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("recipe", GFX942)
def test_edges_equal_reference(recipe, dtype, impl, device):
    x, ws, hs = edge_case(recipe, dtype, seed=3)
    want = run(QUANT_REFERENCE, recipe, x, ws, hs)
    got = run(IMPLS[impl], recipe, to_device(x, device), ws, hs)
    assert_same_outputs(got, want, f"{recipe} {impl} {device} {dtype} edges")
    if dtype != torch.float32:
        return
    codes = want[0].view(torch.uint8)
    if recipe == SGL:  # 224 is the largest magnitude (0x76); NaN -> 224; -0 kept (FN)
        assert int((codes & 0x7F).max()) == 0x76
        assert bool((codes == 0x76).any()) and bool((codes == 0xF6).any())
        assert bool(((codes & 0x7F) == 0x75).any())  # 208
        assert bool((codes == 0x80).any())
        sub = ((codes & 0x78) == 0) & ((codes & 0x07) != 0)
        assert int(sub.sum()) > 0 and len(set((codes[sub] & 7).tolist())) == 7
    else:  # e4m3fnuz: no 0x80 but for NaN; every subnormal code, both signs; up to 224 (0x7e)
        finite_rows = torch.isfinite(x["q_input"]).all(-1)
        assert not bool((codes[finite_rows] == 0x80).any())
        assert bool((codes == 0x80).any()) and bool((codes == 0x7E).any())
        assert bool((codes == 0xFE).any())
        sub = ((codes & 0x78) == 0) & ((codes & 0x07) != 0)
        assert {int(c) for c in codes[sub].unique()} == set(range(1, 8)) | set(range(0x81, 0x88))
    w = want[2]
    assert bool(torch.isnan(w).any()) and bool(torch.isinf(w).any())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32],
                         ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("B,H", [(0, 8), (1, 1), (7, 64), (333, 8)])
@pytest.mark.parametrize("recipe", GFX942)
def test_random_equal_reference(recipe, B, H, dtype, device):
    # make_case: rows over 10 decades + zero / tiny / spike / +-Inf / NaN / overflowing rows,
    # weight row stride H + 5, a real RoPE table
    q, w, ws, freqs, pos = make_case(B, H, dtype, torch.int32 if B % 2 else torch.int64, 5,
                                     seed=17 * B + H + GFX942.index(recipe))
    if indexer_q.recipe_info(recipe).freqs_layout == "halves":
        freqs = halves_table(freqs)
    x = {"q_input": q, "weight": w, "freqs": freqs, "positions": pos}
    hs = max(H, 1) ** -0.5
    for w2d in (False, True):
        want = run(QUANT_REFERENCE, recipe, x, ws, hs, w2d=w2d)
        for name, op in IMPLS.items():
            got = run(op, recipe, to_device(x, device), ws, hs, w2d=w2d)
            assert_same_outputs(got, want, f"{recipe} {name} {device} B={B} H={H} {dtype}")
        raw = run(QUANT, recipe, to_device(x, device), ws, hs, w2d=w2d, raw=True)
        assert raw[0].dtype == torch.uint8
        assert_same_outputs(raw, want, f"{recipe} native raw codes")


# ---- exact relations to the golden-checked forms -------------------------------------------------
def test_sglang_224_weights_are_twice_v4_fp8s():
    # scale = fmax(1e-4, amax) / 224 = 2 * (fmax(1e-4, amax) / 448) exactly (no subnormal scale),
    # so weights_out = (w * ws) * scale is exactly twice v4_fp8's (bits; NaN where NaN)
    q, w, ws, freqs, pos = make_case(61, 8, torch.bfloat16, torch.int64, 0, seed=5)
    x = {"q_input": q, "weight": w, "freqs": freqs, "positions": pos}
    _, _, w_fn = run(QUANT, "v4_fp8", x, ws)
    _, _, w_224 = run(QUANT, SGL, x, ws)
    assert_same_f32(w_224, w_fn * 2.0, "weights_out 224 vs 448")
    codes = run(QUANT, SGL, x, ws)[0].view(torch.uint8)
    assert int((codes & 0x7F).max()) <= 0x76  # nothing above 224


def test_vllm_fnuz224_is_vllm_fp8_with_twice_the_scale_when_rope_agrees():
    # With sin = 0 both RoPE fma forms give the same values, and then (exactly):
    # q_scale(224) = pow2ceil(t / 224) = 2 * pow2ceil(t / 448) = 2 * q_scale(vllm), so v' = v / 2
    # and the e4m3fnuz code of v / 2 has the e4m3fn code bits of v: the same bytes except -0
    # (0x80 -> 0x00) and NaN (0x7f / 0xff -> 0x80), and weights_out exactly twice vLLM's (the
    # doubled q_scale, no separate factor 2).
    q, w, ws, _, pos = make_case(61, 8, torch.bfloat16, torch.int64, 0, seed=9)
    freqs = halves_table(rope_table())
    freqs[:, 32:] = 0.0  # sin = 0
    freqs[:, :32] = torch.linspace(-1.0, 1.0, 32)  # any cos
    x = {"q_input": q, "weight": w, "freqs": freqs, "positions": pos}
    hs = 8 ** -0.5
    q_fn, _, w_fn = run(QUANT_REFERENCE, "vllm_v4_fp8", x, ws, hs)
    q_nz, _, w_nz = run(QUANT_REFERENCE, VLLM, x, ws, hs)
    b = q_fn.view(torch.uint8)
    want = torch.where(b == 0x80, 0, torch.where((b & 0x7F) == 0x7F, 0x80, b)).to(torch.uint8)
    assert_same_fp8(q_nz, want, "fnuz224 codes vs vllm_v4_fp8")
    assert_same_f32(w_nz, w_fn * 2.0, "fnuz224 weights_out vs vllm_v4_fp8")
    assert bool((b == 0x80).any()) and bool(((b & 0x7F) == 0x7F).any())  # both cases occur


# ---- the engines' calls ------------------------------------------------------------------------
def _sgl_inputs(device="cpu", T=9, H=16):
    q, w, ws, freqs, pos = make_case(T, H, torch.bfloat16, torch.int32, 0, seed=21)
    return [t.to(device) for t in (q, w)] + [ws, freqs.to(device), pos.to(device)]


@pytest.mark.parametrize("device", DEVICES)
def test_sgl_kernel_hip_call(device):
    # sgl-kernel's dsv4_fused_q_indexer_rope_hadamard_quant(q_input, q_fp8, weight, weights_out,
    # weight_scale, freqs_real, positions): in place, q_fp8 float8_e4m3fn, weights_out (B, H, 1)
    q, w, ws, freqs, pos = _sgl_inputs(device)
    T, H = q.shape[:2]
    x = {"q_input": q.cpu(), "weight": w.cpu(), "freqs": freqs.cpu(), "positions": pos.cpu()}
    want = run(QUANT_REFERENCE, SGL, x, ws)
    q_fp8 = torch.empty(T, H, 128, dtype=torch.float8_e4m3fn, device=device)
    w_out = torch.empty(T, H, 1, dtype=torch.float32, device=device)
    res = indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, q_fp8, w, w_out, ws, freqs, pos,
                                                             gfx942=True)
    assert res is None
    assert_same_outputs((q_fp8, None, w_out), want, "hip call gfx942")
    # uint8 raw codes, a (B, H) weights_out, the complex64 freqs_cis: the same bytes
    raw = torch.empty(T, H, 128, dtype=torch.uint8, device=device)
    w2 = torch.empty(T, H, dtype=torch.float32, device=device)
    cis = torch.view_as_complex(freqs.view(-1, 32, 2))
    indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, raw, w, w2, ws, cis, pos, gfx942=True)
    assert_same_outputs((raw, None, w2.view(T, H, 1)), want, "hip call gfx942 raw")
    # gfx942=False: the CUDA build's v4_fp8 (the operator's bytes); an fnuz q_fp8: v4_fp8_fnuz
    ref = torch.empty_like(q_fp8), torch.empty_like(w_out)
    torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant(q, ref[0], w, ref[1], ws, freqs, pos)
    indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, q_fp8, w, w_out, ws, freqs, pos)
    assert_same_outputs((q_fp8, None, w_out), (ref[0], None, ref[1]), "hip call v4_fp8")
    nz = torch.empty(T, H, 128, dtype=torch.float8_e4m3fnuz, device=device)
    indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, nz, w, w_out, ws, freqs, pos)
    want_nz = run(QUANT_REFERENCE, "v4_fp8_fnuz", x, ws)
    assert_same_outputs((nz, None, w_out), want_nz, "hip call v4_fp8 fnuz q_fp8")
    # the gfx942 form writes e4m3fn codes: an fnuz q_fp8 is refused, nothing written
    nz.view(torch.uint8).fill_(0x5A)
    with pytest.raises(ValueError, match="indexer_q: q_fp8: the gfx942 form"):
        indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, nz, w, w_out, ws, freqs, pos,
                                                           gfx942=True)
    assert bool((nz.view(torch.uint8) == 0x5A).all())


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_vllm_rocm_call(device):
    # vLLM's fused_indexer_q_rope_quant(positions, q, cos_sin_cache, weights, softmax_scale,
    # head_scale) whose q_fp8 is e4m3fnuz on gfx942: out_dtype selects vllm_v4_fp8_fnuz224
    T, H = 9, 16
    q, w, _, freqs, pos = make_case(T, H, torch.bfloat16, torch.int64, 0, seed=23)
    cache = halves_table(freqs)
    sm, hs = 128 ** -0.5, H ** -0.5
    dev = [t.to(device) for t in (pos, q, cache, w)]
    q8, w_out = indexer_q.fused_indexer_q_rope_quant(*dev, sm, hs, out_dtype=torch.float8_e4m3fnuz)
    assert q8.dtype == torch.float8_e4m3fnuz and tuple(q8.shape) == (T, H, 128)
    assert w_out.dtype == torch.float32 and tuple(w_out.shape) == (T, H)
    assert q8.device.type == torch.device(device).type
    if device == "meta":
        return
    x = {"q_input": q, "weight": w, "freqs": cache, "positions": pos}
    want = run(QUANT_REFERENCE, VLLM, x, sm, hs)
    assert_same_outputs((q8, None, w_out), want, "vllm rocm call")
    # the default (and float8_e4m3fn / uint8) stays vllm_v4_fp8
    want_fn = run(QUANT_REFERENCE, "vllm_v4_fp8", x, sm, hs)
    for od in (None, torch.float8_e4m3fn, torch.uint8):
        q8, w_out = indexer_q.fused_indexer_q_rope_quant(*dev, sm, hs, out_dtype=od)
        assert q8.dtype == (od or torch.float8_e4m3fn)
        assert_same_outputs((q8, None, w_out), want_fn, f"vllm call out_dtype={od}")
    with pytest.raises(ValueError, match="indexer_q: out_dtype"):
        indexer_q.fused_indexer_q_rope_quant(*dev, sm, hs, use_fp4=True,
                                             out_dtype=torch.float8_e4m3fnuz)
