"""Every recipe (the library's list, include/indexer_q/recipes.inc) through the general operator
indexer_q::quant_q and the Python entry points: golden files (FNUZ derived from the FN files),
composed == native on random and adversarial inputs, opcheck, torch.compile, meta / fake
tensors, CUDA graphs, and errors that name the argument and write nothing."""

import os
import re

import pytest
import torch

import indexer_q
from conftest import (CUDA_OK, DEVICES, NATIVE, QUANT, QUANT_COMPOSED, QUANT_OPS, QUANT_REFERENCE,
                      RECIPES, ROOT, absent_args, assert_same_fp8, assert_same_outputs,
                      golden_recipe_cases, halves_table, fnuz_twin, load_golden,
                      nan_weight_bits, new_recipe_outputs, SOURCE_ONLY_RECIPES)
from conftest import GOLDEN_DIR, read_safetensors_header
from test_composed_vs_native import make_case

FP8_RECIPES = [r for r in RECIPES if not indexer_q.recipe_info(r).fp4]
FP4_RECIPES = [r for r in RECIPES if indexer_q.recipe_info(r).fp4]
GOLDEN = golden_recipe_cases()


def call(op, recipe, x, outs, ws, hs=None):
    """The operator; head_scale passed only when given (hs=None: the schema's default, 1.0)."""
    q_out, q_sf, w_out = outs
    kw = {} if hs is None else {"head_scale": hs}
    # a recipe without RoPE / weights: 0-element tensors there (the library's empty views)
    w, w_out, freqs, pos = absent_args(recipe, x["weight"], w_out, x["freqs"], x["positions"],
                                       x["q_input"].device)
    op(recipe, x["q_input"], q_out, q_sf, w, w_out, ws, freqs, pos, **kw)


def head_scale_of(recipe, H):
    """vLLM (and SGLang's V3.2 unfused path) pass head_scale = H**-0.5 (a Python float); the
    other recipes ignore it."""
    info = indexer_q.recipe_info(recipe)
    return float(max(H, 1)) ** -0.5 if info.vllm or info.two_factors else 1.0


# ---- the recipe list is the library's ------------------------------------------------------------
def test_recipe_list_is_the_librarys():
    names = re.findall(r'^IQ_RECIPE\(\w+, "(\w+)"',
                       open(os.path.join(ROOT, "include", "indexer_q", "recipes.inc")).read(),
                       re.M)
    assert list(torch.ops.indexer_q.recipes()) == names
    assert indexer_q.RECIPES == tuple(names) == indexer_q.recipes()
    assert names[0] == "v4_fp8"
    assert {"v4_fp8", "v32_fp8", "rope_first_fp8", "v4_fp4"} <= set(names)
    for name in names:
        info = indexer_q.recipe_info(name)
        assert info.name == name
        if info.format == "e4m3fn" and info.quant == "sglang":
            # every SGLang FN recipe has its FNUZ twin, found from the descriptor
            twin = indexer_q.resolve_recipe(name, torch.float8_e4m3fnuz)
            assert twin == name + "_fnuz", twin
            assert indexer_q.recipe_info(twin)._replace(name=name, format="e4m3fn") == info
        elif info.format == "e4m3fn":  # the other engines': no FNUZ form in the library
            with pytest.raises(ValueError, match="indexer_q: out_dtype: recipe " + name):
                indexer_q.resolve_recipe(name, torch.float8_e4m3fnuz)


def test_recipe_descriptors():
    v4, v32, rf, fp4 = (indexer_q.recipe_info(r) for r in
                        ("v4_fp8", "v32_fp8", "rope_first_fp8", "v4_fp4"))
    assert (v4.rope_dims, v4.freqs_layout, v4.hadamard, v4.format) == (
        "last64", "interleaved", True, "e4m3fn")
    assert (v32.rope_dims, v32.freqs_layout, v32.hadamard) == ("first64", "halves", False)
    assert (rf.rope_dims, rf.freqs_layout, rf.hadamard) == ("first64", "halves", True)
    assert fp4.fp4 and fp4.bf16_after_rope and fp4.bf16_after_hadamard and fp4.fold == "no_scale"
    assert v4.quant == v32.quant == rf.quant == fp4.quant == "sglang"
    vf8, vf4 = indexer_q.recipe_info("vllm_v4_fp8"), indexer_q.recipe_info("vllm_v4_mxfp4")
    assert vf8 == indexer_q.RecipeInfo(
        name="vllm_v4_fp8", rope_dims="last64", rope_pairs="adjacent", rope_fma="x0_s",
        freqs_layout="halves", hadamard=False, bf16_after_rope=True, bf16_after_hadamard=False,
        format="e4m3fn", quant="vllm", fold="scale_then_two_factors", scale_out=False)
    assert vf4 == vf8._replace(name="vllm_v4_mxfp4", format="e2m1", fold="two_factors")
    assert vf8.vllm and vf4.vllm and vf4.fp4 and not v4.vllm
    assert vf8.weights_2d and vf8.two_factors and not v4.weights_2d and not v4.two_factors
    # the forms added through the recipe columns (docs/RECIPES.md)
    neox, gptj, cute, pack, rne = (indexer_q.recipe_info(r) for r in (
        "vllm_v32_fp8_neox", "vllm_v32_fp8_gptj", "vllm_v4_fp8_cutedsl", "sgl_v41_fp4_rope_pack",
        "sgl_v41_fp4_quant_rne"))
    assert (neox.rope_dims, neox.rope_pairs, neox.quant) == ("first64", "neox", "vllm_v32")
    assert gptj == neox._replace(name="vllm_v32_fp8_gptj", rope_pairs="adjacent")
    assert neox.vllm and neox.two_factors and neox.weights_2d
    assert cute.quant == "vllm_cute" and cute.fold == "times_scale" and cute.vllm
    assert not cute.two_factors
    assert pack.fp4 and pack.quant == "fp4_two_stage" and pack.fold == "no_scale_bf16"
    assert pack.weights_2d and not pack.vllm and pack.rope and pack.weights
    assert rne.fp4 and rne.rope_dims == "none" and not rne.rope and rne.fold == "none"
    assert not rne.weights and not rne.weights_2d
    # SGLang's V3.2 unfused path: NeoX, x1_c fma, Hadamard, two bf16 points, a written row scale
    unf = indexer_q.recipe_info("sgl_v32_unfused_neox_hadamard_ue8m0")
    assert unf == neox._replace(name=unf.name, rope_fma="x1_c", hadamard=True,
                                bf16_after_hadamard=True, quant="sglang_ue8m0",
                                fold="head_scale_first", scale_out=True)
    assert unf.two_factors and not unf.weights_2d and unf.q_scale_out and not unf.vllm
    assert not any(indexer_q.recipe_info(r).scale_out for r in indexer_q.RECIPES if r != unf.name)


def test_recipe_info_op_gives_the_librarys_names():
    # "column=value" strings, the values named by the library (indexer_q.h *_name functions)
    cols = list(torch.ops.indexer_q.recipe_info("vllm_v4_mxfp4"))
    assert cols == ["rope_dims=last64", "rope_pairs=adjacent", "rope_fma=x0_s",
                    "freqs_layout=halves", "hadamard=false", "bf16_after_rope=true",
                    "bf16_after_hadamard=false", "format=e2m1", "quant=vllm", "fold=two_factors",
                    "scale_out=false"], cols
    assert [c.split("=")[0] for c in cols] == list(indexer_q.RecipeInfo._fields[1:])
    # the columns are the library's list, recipe_columns.inc (IQ_COLUMN / IQ_FLAG), in its order
    inc = open(os.path.join(ROOT, "include", "indexer_q", "recipe_columns.inc")).read()
    declared = re.findall(r"^IQ_(?:COLUMN\(\w+, (\w+),|FLAG\((\w+),)", inc, re.M)
    assert [a or b for a, b in declared] == list(indexer_q.RecipeInfo._fields[1:])
    # every column value of every recipe is one the library declares (IQ_VALUE) or a flag
    names = set(re.findall(r'^\s*IQ_VALUE\(\w+, \w+, "(\w+)"', inc, re.M))
    for r in indexer_q.RECIPES:
        for c in torch.ops.indexer_q.recipe_info(r):
            assert c.split("=", 1)[1] in names | {"true", "false"}, (r, c)
    import indexer_q._ops as ops
    assert not hasattr(ops, "_ENUMS")  # no mirrored table of the C++ enum names


def test_schema():
    args = ("(str recipe, Tensor q_input, Tensor(a!) q_out, Tensor(b!)? q_sf, Tensor weight, "
            "Tensor(c!) weights_out, float weight_scale, Tensor freqs, Tensor positions, "
            "bool enable_pdl=True, float head_scale=1., *, bool side_inputs_ready=False) -> ()")
    assert str(QUANT.default._schema) == "indexer_q::quant_q" + args
    assert str(QUANT_COMPOSED.default._schema) == "indexer_q::quant_q_composed" + args
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for key in ("CPU", "XPU", "CompositeExplicitAutograd"):
        assert has("indexer_q::quant_q", key), key
    assert has("indexer_q::quant_q", "CUDA") == has(
        "indexer_q::fused_q_indexer_rope_hadamard_quant", "CUDA")
    assert not has("indexer_q::quant_q_composed", "CPU")


def test_golden_cases_cover_every_recipe():
    # every recipe but the source-only ones (no golden data exists) has golden files
    assert {r for _, r in GOLDEN} == set(RECIPES) - set(SOURCE_ONLY_RECIPES)
    assert set(SOURCE_ONLY_RECIPES) <= set(RECIPES)


# ---- golden files ---------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("rel,recipe", GOLDEN, ids=[f"{r}-{os.path.basename(f)[:-12]}"
                                                    for f, r in GOLDEN])
def test_golden_operator(rel, recipe, impl, device):
    x, ws, hs, want = load_golden(rel, recipe, device)
    outs = new_recipe_outputs(recipe, x["q_input"])
    call(QUANT_OPS[impl], recipe, x, outs, ws, hs)
    assert_same_outputs(outs, want, f"{rel} {recipe} {impl} {device}")
    if not indexer_q.recipe_info(recipe).fp4:  # uint8 raw codes: the same bytes
        raw = new_recipe_outputs(recipe, x["q_input"], raw=True)
        call(QUANT_OPS[impl], recipe, x, raw, ws, hs)
        assert raw[0].dtype == torch.uint8
        assert_same_outputs(raw, want, f"{rel} {recipe} {impl} {device} raw")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rel,recipe", GOLDEN, ids=[f"{r}-{os.path.basename(f)[:-12]}"
                                                    for f, r in GOLDEN])
def test_golden_python_api(rel, recipe, device):
    x, ws, hs, want = load_golden(rel, recipe, device)
    info = indexer_q.recipe_info(recipe)
    args = (x["q_input"], x["weight"], ws, x["freqs"], x["positions"])
    kw = {"head_scale": hs} if info.vllm or info.two_factors else {}
    base = recipe[:-5] if recipe.endswith("_fnuz") else recipe
    out_dtype = torch.float8_e4m3fnuz if info.format == "e4m3fnuz" else None

    def check(res, what):
        if info.fp4:
            (q, sf), w = res
            assert q.dtype == torch.uint8 and tuple(q.shape) == tuple(want[0].shape)
            assert sf.dtype == torch.int32 and tuple(sf.shape) == tuple(want[1].shape)
        elif info.scale_out:  # ((q_fp8, q_scale), weights_out), q_scale (B, H, 1) float32
            (q, sf), w = res
            assert q.dtype == torch.float8_e4m3fn
            assert sf.dtype == torch.float32 and tuple(sf.shape) == tuple(want[1].shape)
            assert sf.device == q.device
        else:
            q, w = res
            sf = None
            assert q.dtype == (torch.float8_e4m3fnuz if info.format == "e4m3fnuz"
                               else torch.float8_e4m3fn)
        assert q.device == x["q_input"].device
        if not info.weights:
            assert w is None
        else:
            assert w.device == q.device
            assert w.dtype == torch.float32 and tuple(w.shape) == tuple(want[2].shape)
        assert_same_outputs((q, sf, w), want, f"{rel} {recipe} {what}")

    # the general entry point: by the recipe's own name, and FN name + out_dtype for FNUZ
    check(indexer_q.composed_quant_q(base, *args, out_dtype=out_dtype, **kw), "composed_quant_q")
    if device == "cpu":
        check(indexer_q.quant_q(recipe, *args, backend="reference", **kw), "quant_q reference")
    check(indexer_q.quant_q(recipe, *args, **kw), "quant_q")
    check(indexer_q.quant_q(base, *args, out_dtype=out_dtype, **kw), "quant_q out_dtype")
    # SGLang's entry points
    if base == "v4_fp8":
        check(indexer_q.fused_q_indexer_rope_hadamard_quant(*args, out_dtype=out_dtype), "v4 api")
        freqs_cis = torch.view_as_complex(x["freqs"].view(-1, 32, 2))
        check(indexer_q.quant_q(recipe, *args[:3], freqs_cis, args[4]), "quant_q freqs_cis")
    elif base == "v32_fp8":
        check(indexer_q.fused_q_indexer_rope_first_quant(*args, out_dtype=out_dtype), "v32 api")
    elif info.quant == "vllm_v32":  # vLLM's V3.2 call, is_neox picking the pairs
        res = indexer_q.fused_indexer_q_rope_quant_v32(
            x["positions"], x["q_input"], x["freqs"], x["weight"], ws, hs,
            info.rope_pairs == "neox")
        assert tuple(res[1].shape) == tuple(x["weight"].shape)  # weights_out (T, H)
        check(res, "vllm v32 api")
    elif info.quant == "vllm_cute":  # vLLM's V4 call with the CuTe kernel's numerics
        _, meta = read_safetensors_header(os.path.join(GOLDEN_DIR, rel))
        res = indexer_q.fused_indexer_q_rope_quant_cutedsl(
            x["positions"], x["q_input"], x["freqs"], x["weight"],
            float(meta["softmax_scale_arg"]), float(meta["head_scale_arg"]))
        assert tuple(res[1].shape) == tuple(x["weight"].shape)
        check(res, "vllm cutedsl api")
    elif recipe == "sgl_v41_fp4_rope_pack":  # SGLang V4.1's call and its result shapes
        t, h = x["q_input"].shape[:2]
        payload, scale, w = indexer_q.index_q_rope_pack_weights(
            x["q_input"], x["freqs"], x["positions"], x["weight"], ws)
        assert payload.dtype == torch.int8 and tuple(payload.shape) == (t * h, 64)
        assert scale.dtype == torch.int32 and tuple(scale.shape) == (t * h,)
        assert w.dtype == torch.float32 and tuple(w.shape) == (t, h)
        check(((payload.view(t, h, 64).view(torch.uint8), scale.view(t, h)), w), "v41 pack api")
        freqs_cis = torch.view_as_complex(x["freqs"].view(-1, 32, 2))
        payload2, _, _ = indexer_q.index_q_rope_pack_weights(
            x["q_input"], freqs_cis, x["positions"], x["weight"], ws)
        assert torch.equal(payload2, payload)
    elif recipe == "sgl_v41_fp4_quant_rne":  # SGLang V4.1's packer on q.flatten(0, 1)
        t, h = x["q_input"].shape[:2]
        q4, sf4 = indexer_q.quantize_fp4_indexer_tensor(x["q_input"].flatten(0, 1), rne=True)
        assert q4.dtype == torch.int8 and tuple(q4.shape) == (t * h, 64)
        assert sf4.dtype == torch.int32 and tuple(sf4.shape) == (t * h,)
        check(((q4.view(t, h, 64).view(torch.uint8), sf4.view(t, h)), None), "v41 quant api")
        with pytest.raises(ValueError, match="indexer_q: rne"):
            indexer_q.quantize_fp4_indexer_tensor(x["q_input"].flatten(0, 1), rne=False)
    elif recipe == "sgl_v32_unfused_neox_hadamard_ue8m0":  # SGLang V3.2's unfused sequence
        q8, qs, w = indexer_q.dsa_indexer_q_unfused(x["q_input"], x["positions"], x["freqs"],
                                                    x["weight"], ws, hs)
        t, h = x["q_input"].shape[:2]
        assert tuple(qs.shape) == (t, h, 1) and tuple(w.shape) == (t, h, 1)
        check(((q8, qs), w), "v32 unfused api")
    elif info.vllm:  # vLLM's call: argument order, Python-float scales, vLLM's result shapes
        res = indexer_q.fused_indexer_q_rope_quant(
            x["positions"], x["q_input"], x["freqs"], x["weight"], ws, hs, use_fp4=info.fp4)
        assert tuple(res[1].shape) == tuple(x["weight"].shape)  # weights_out (T, H)
        check(res, "vllm api")
    elif base == "v4_fp4":
        def as_u8(res):  # SGLang's wrapper returns int8 codes (the same bytes)
            assert res[0][0].dtype == torch.int8
            return (res[0][0].view(torch.uint8), res[0][1]), res[1]
        check(as_u8(indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(*args)), "fp4 api")
        freqs_cis = torch.view_as_complex(x["freqs"].view(-1, 32, 2))
        check(as_u8(indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(*args[:3], freqs_cis,
                                                                      args[4])),
              "fp4 api freqs_cis")
    # a passed-in q_fp8 of dtype float8_e4m3fnuz selects the FNUZ twin
    if info.format == "e4m3fnuz":
        q_out, _, w_out = new_recipe_outputs(recipe, x["q_input"])
        res = indexer_q.quant_q(base, *args, q_out=q_out, weights_out=w_out)
        assert res[0] is q_out and res[1] is w_out
        check(res, "quant_q q_out fnuz")


def test_fnuz_dequant_equals_fn_dequant():
    # docs/RECIPES.md: dequant(q_fnuz) * w_fnuz == dequant(q_fn) * w_fn, exactly
    rel = "b64_h64_i64_outliers.safetensors"
    x, ws, _, _ = load_golden(rel, "v4_fp8")
    args = (x["q_input"], x["weight"], ws, x["freqs"], x["positions"])
    q_fn, w_fn = indexer_q.fused_q_indexer_rope_hadamard_quant(*args)
    q_nz, w_nz = indexer_q.fused_q_indexer_rope_hadamard_quant(
        *args, out_dtype=torch.float8_e4m3fnuz)
    assert q_nz.dtype == torch.float8_e4m3fnuz
    assert torch.equal(q_fn.float() * w_fn, q_nz.float() * w_nz)
    assert not bool((q_nz.view(torch.uint8) == 0x80).any())


# ---- composed == native on random and adversarial inputs -------------------------------------------
# (B, H, dtype) samples of the grid B in {0, 1, 7, 333} x H in {1, 8, 64, 128} x 3 dtypes: every
# recipe gets every B and every H at least once (v4_fp8 has the full grid for the historical
# operator in test_composed_vs_native.py, which runs the same kernels).
bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
_SAMPLES = {
    "v4_fp8": [(1, 8, bf), (7, 64, f16), (333, 8, f32)],
    "v32_fp8": [(0, 8, bf), (1, 128, f16), (7, 1, f32), (333, 64, bf)],
    "rope_first_fp8": [(0, 1, f16), (1, 8, f32), (7, 128, bf), (333, 8, f16)],
    "v4_fp4": [(0, 64, f32), (1, 1, bf), (7, 8, f16), (333, 64, f32), (333, 128, bf)],
    "v4_fp8_fnuz": [(0, 128, bf), (1, 64, f16), (7, 1, f32), (333, 8, bf)],
    "v32_fp8_fnuz": [(0, 8, f32), (1, 1, bf), (7, 64, f16), (333, 128, f32)],
    "rope_first_fp8_fnuz": [(0, 1, f16), (1, 128, f32), (7, 8, bf), (333, 64, f16)],
    "vllm_v4_fp8": [(0, 64, bf), (1, 1, f16), (7, 128, f32), (333, 8, bf)],
    "vllm_v4_mxfp4": [(0, 8, f16), (1, 128, bf), (7, 1, f32), (333, 64, bf)],
    "vllm_v4_mxfp4_cute": [(0, 128, bf), (1, 8, f32), (7, 64, f16), (333, 1, f32), (333, 64, bf)],
}
DTYPES = [bf, f16, f32]
# a recipe added to recipes.inc later gets a default sample until it is listed above
RANDOM_CASES = [(r, b, h, dt) for r in RECIPES
                for (b, h, dt) in _SAMPLES.get(r, [(0, 8, bf), (7, 64, f16), (333, 8, f32)])]


def recipe_case(recipe, B, H, dtype, seed):
    """make_case's inputs (random rows over 10 decades + zero / tiny / spike / +-Inf / NaN /
    overflowing rows, weight row stride H or H + 5) with the freqs table the recipe reads."""
    pos_dtype = torch.int32 if seed % 2 else torch.int64
    q, w, ws, freqs, pos = make_case(B, H, dtype, pos_dtype, 0 if B % 2 == 0 else 5, seed)
    info = indexer_q.recipe_info(recipe)
    if info.freqs_layout == "halves":
        freqs = halves_table(freqs)
    if not info.rope:  # the recipe takes no freqs / positions
        freqs = pos = None
    if not info.weights:
        w = None
    return {"q_input": q, "weight": w, "freqs": freqs, "positions": pos}, ws


def to_device(x, device):
    return {k: (v.to(device) if v is not None else None) for k, v in x.items()}


def run_op(op, recipe, x, ws, raw=False, hs=None, w2d=None):
    outs = new_recipe_outputs(recipe, x["q_input"], raw=raw, w2d=w2d)
    call(op, recipe, x, outs, ws, hs)
    return outs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe,B,H,dtype", RANDOM_CASES,
                         ids=[f"{r}-B{b}-H{h}-{str(d)[6:]}" for r, b, h, d in RANDOM_CASES])
def test_composed_equals_native(recipe, B, H, dtype, device):
    seed = 7919 * RECIPES.index(recipe) + B * 1000 + H * 10 + DTYPES.index(dtype)
    x, ws = recipe_case(recipe, B, H, dtype, seed)
    hs = head_scale_of(recipe, H)
    xd = to_device(x, device)
    # the library's scalar reference (the executable spec) first: composed and native each
    # against it, so a change in progress in one backend does not hide the other's result
    reference = run_op(QUANT_REFERENCE, recipe, x, ws, hs=hs)
    composed = run_op(QUANT_COMPOSED, recipe, xd, ws, hs=hs)
    assert_same_outputs(composed, reference, f"{recipe} composed vs reference")
    native = run_op(QUANT, recipe, xd, ws, hs=hs)
    assert_same_outputs(native, reference, f"{recipe} native ({device}) vs reference")
    assert_same_outputs(composed, native, f"{recipe} composed vs native")
    info = indexer_q.recipe_info(recipe)
    native = reference  # the coverage checks below: on the spec's bytes
    if B == 333 and info.quant == "vllm":  # the grid covers the hard cases of vLLM's quantizer
        codes = native[0].cpu().view(torch.uint8)
        if info.fp4:
            nib = torch.cat([codes & 0x0F, codes >> 4])
            for m in range(16):  # every e2m1 code, the sign bit on zero included (0x8)
                assert bool((nib == m).any()), m
            sf = native[1].cpu().view(torch.uint8)
            assert bool((sf == 254).any())  # an Inf block: e = 254, inv = +0
            assert int(sf.min()) < 120 and int(sf.max()) >= 130
        else:
            assert bool((((codes & 0x78) == 0) & ((codes & 0x07) != 0)).any())  # subnormals
            assert bool((codes == 0x7F).any())  # NaN (and Inf / Inf) codes
            assert bool((codes == 0x80).any())  # -0 kept
            assert bool((~torch.isfinite(native[2].cpu())).any())
    elif B == 333 and info.quant == "vllm_cute" and info.fp4 and H == 64:  # CuTe's MXFP4
        nib = torch.cat([native[0].cpu() & 0x0F, native[0].cpu() >> 4])
        for m in range(16):  # every e2m1 code, the sign bit on zero included (0x8)
            assert bool((nib == m).any()), m
        sf = native[1].cpu().view(torch.uint8)
        assert bool((sf == 255).any())  # an Inf block: e = 255, inv = -Inf (step 15)
        assert int(sf.min()) < 120 and int(sf.max()) >= 130
    elif B == 333 and info.quant == "sglang":  # the grid really covers the hard cases
        codes = native[0].cpu().view(torch.uint8)
        w = native[2].cpu()
        if info.fp4:
            lo, hi = codes & 0x0F, codes >> 4
            nib = torch.cat([lo, hi])
            for m in range(8):  # every e2m1 magnitude, both signs where nonzero
                assert bool((nib == m).any()) and (m == 0 or bool((nib == (m | 8)).any())), m
            sf = native[1].cpu().view(torch.uint8)
            assert bool((sf == 255).any())  # an Inf block: inv = -Inf
            assert int(sf.min()) < 120 and int(sf.max()) >= 130
        else:
            assert bool((((codes & 0x78) == 0) & ((codes & 0x07) != 0)).any())  # subnormals
            assert bool(((codes & 0x7F) == 0x7E).any())  # +-448
            assert bool((~torch.isfinite(w)).any())
            if info.format == "e4m3fnuz":
                assert not bool((codes == 0x80).any())
            else:
                assert bool((codes == 0x80).any())  # -0 occurs in the FN result
    if B == 0:
        assert native[0].numel() == 0 and (native[2] is None or native[2].numel() == 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", [r for r in FP8_RECIPES if fnuz_twin(r) or r.endswith("_fnuz")])
def test_fnuz_is_the_fn_result_reencoded(recipe, device):
    # the FNUZ recipe == the FN recipe with 0x80 -> 0x00 and weights_out * 2 (random inputs)
    fn = recipe[:-5] if recipe.endswith("_fnuz") else recipe
    nz = indexer_q.resolve_recipe(fn, torch.float8_e4m3fnuz)
    x, ws = recipe_case(fn, 33, 8, torch.bfloat16, seed=3)
    x = to_device(x, device)
    for op in (QUANT, QUANT_COMPOSED):
        q_fn, _, w_fn = run_op(op, fn, x, ws)
        q_nz, _, w_nz = run_op(op, nz, x, ws)
        b = q_fn.view(torch.uint8)
        assert_same_fp8(q_nz, torch.where(b == 0x80, torch.zeros_like(b), b), "fnuz codes")
        assert torch.equal(w_nz.view(torch.int32), (w_fn * 2).view(torch.int32))  # NaN bits too


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", FP4_RECIPES)
def test_fp4_block_scale_edges(recipe, device):
    # Rows whose Hadamard output is one magnitude per row (a single non-zero in a non-rotated dim),
    # swept so that v = y * inv lands on and around the e2m1 thresholds and the block amax on and
    # around powers of two (the UE8M0 round-up); plus rows with the bf16 rounding of y at ties.
    info = indexer_q.recipe_info(recipe)
    free = 0 if info.rope_dims == "last64" else 64  # a dim RoPE leaves alone
    mags = []
    for e in (-20, -3, 0, 7, 40):
        for m in (1.0, 1.0 + 2**-7, 1.5, 1.75, 2.0 - 2**-8, 2.0):
            mags.append(m * 2.0**e)
    B, H = len(mags), 4
    q = torch.zeros(B, H, 128, dtype=torch.float32)
    for b, m in enumerate(mags):
        q[b, 0, free] = m
        q[b, 1, free] = -m
        q[b, 2, free], q[b, 2, free + 1] = m, m * 0.25  # two magnitudes per block: 1.25 : 0.75
        q[b, 3, free], q[b, 3, free + 1] = m, m * (1 + 2**-8)  # a difference at bf16's last bit
    freqs = torch.zeros(4, 64)  # cos = 1, sin = 0: RoPE leaves the row as it is
    freqs[:, slice(0, None, 2) if info.freqs_layout == "interleaved" else slice(0, 32)] = 1.0
    x = {"q_input": q, "weight": torch.ones(B, H), "freqs": freqs,
         "positions": torch.zeros(B, dtype=torch.int64)}
    xd = to_device(x, device)
    native = run_op(QUANT, recipe, xd, 1.0)
    assert_same_outputs(run_op(QUANT_COMPOSED, recipe, xd, 1.0), native, f"{recipe} edges")
    if device != "cpu":
        assert_same_outputs(native, run_op(QUANT, recipe, x, 1.0), f"{recipe} edges vs cpu")


# ---- opcheck, torch.compile, meta / fake ----------------------------------------------------------
@pytest.fixture
def fp8_aware_allclose(monkeypatch):
    # opcheck's test_schema (SchemaCheckMode) compares every argument before and after the call
    # with torch.allclose, which has no float8 kernel; compare float8 tensors bit for bit instead.
    orig = torch.allclose

    def allclose(a, b, *args, **kwargs):
        if a.dtype.itemsize == 1 and a.dtype.is_floating_point and a.dtype == b.dtype:
            return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        return orig(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose)


def op_args(recipe, device, B=5, H=8, dtype=torch.bfloat16):
    x, ws = recipe_case(recipe, B, H, dtype, seed=11)
    x = to_device(x, device)
    q_out, q_sf, w_out = new_recipe_outputs(recipe, x["q_input"])
    # a recipe without RoPE / weights: 0-element tensors there (the library's empty views)
    w, w_out, freqs, pos = absent_args(recipe, x["weight"], w_out, x["freqs"], x["positions"],
                                       device)
    return (recipe, x["q_input"], q_out, q_sf, w, w_out, ws, freqs, pos)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_opcheck(recipe, impl, device, fp8_aware_allclose):
    # test_schema, test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic
    # vLLM's forms: with the trailing head_scale, by keyword
    info = indexer_q.recipe_info(recipe)
    kw = {"head_scale": 8 ** -0.5} if info.vllm or info.two_factors else {}
    torch.library.opcheck(QUANT_OPS[impl].default, op_args(recipe, device), kw)
    if impl == "native":
        torch.library.opcheck(QUANT_OPS[impl].default, op_args(recipe, device, B=0),
                              {"enable_pdl": True})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", RECIPES)
def test_torch_compile_fullgraph(recipe, device):
    _, q, _, _, w, _, ws, freqs, pos = op_args(recipe, device, B=7, H=16)
    info = indexer_q.recipe_info(recipe)
    fp4 = info.fp4
    hs = head_scale_of(recipe, 16)

    if not info.rope:
        freqs = pos = None  # the Python entry points take None for what a recipe does not read
    if not info.weights:
        w = None

    def f(q, w, freqs, pos):
        if info.quant == "vllm":  # vLLM's call
            out, w_out = indexer_q.fused_indexer_q_rope_quant(pos, q, freqs, w, ws, hs,
                                                              use_fp4=fp4)
        else:
            out, w_out = indexer_q.quant_q(recipe, q, w, ws, freqs, pos, head_scale=hs)
        if w_out is None:  # no weights
            return out, q.sum()
        return out, w_out * 2.0  # something for the compiler to fuse around the op

    def g(q, w, freqs, pos):  # the operator itself, writing into buffers allocated in the graph
        q_out, q_sf, w_out = new_recipe_outputs(recipe, q, poison=False)
        w, w_out, freqs, pos = absent_args(recipe, w, w_out, freqs, pos, q.device)
        QUANT(recipe, q, q_out, q_sf, w, w_out, ws, freqs, pos, head_scale=hs)
        return q_out, q_sf, w_out

    torch._dynamo.reset()
    for fn in (f, g):
        got = torch.compile(fn, fullgraph=True)(q, w, freqs, pos)
        want = fn(q, w, freqs, pos)
        if fn is f:
            two = info.q_scale_out  # ((q, q_sf / q_scale), weights_out)
            got = (*got[0], got[1]) if two else (got[0], None, got[1])
            want = (*want[0], want[1]) if two else (want[0], None, want[1])
        if not info.weights:  # the second result is no weights_out
            got, want = (got[0], got[1], None), (want[0], want[1], None)
        assert_same_outputs(got, want, f"compiled {recipe}")


@pytest.mark.parametrize("recipe", RECIPES)
def test_meta_tensors(recipe):
    _, q, _, _, w, _, ws, freqs, pos = (a.to("meta") if isinstance(a, torch.Tensor) else a
                                        for a in op_args(recipe, "cpu"))
    info = indexer_q.recipe_info(recipe)
    if not info.rope:
        freqs = pos = None
    if not info.weights:
        w = None
    out, w_out = indexer_q.quant_q(recipe, q, w, ws, freqs, pos)
    if indexer_q.recipe_info(recipe).fp4:
        q_fp4, q_sf = out
        assert q_fp4.device.type == "meta" and tuple(q_fp4.shape) == (5, 8, 64)
        assert q_fp4.dtype == torch.uint8
        assert tuple(q_sf.shape) == (5, 8) and q_sf.dtype == torch.int32
    elif info.scale_out:  # the FP8 row scale as a second output, (B, H, 1) float32
        q_fp8, q_scale = out
        assert q_fp8.device.type == "meta" and tuple(q_fp8.shape) == (5, 8, 128)
        assert q_scale.device.type == "meta" and tuple(q_scale.shape) == (5, 8, 1)
        assert q_scale.dtype == torch.float32
    else:
        assert out.device.type == "meta" and tuple(out.shape) == (5, 8, 128)
    if not info.weights:
        assert w_out is None
        return
    shape = (5, 8) if info.weights_2d else (5, 8, 1)
    assert tuple(w_out.shape) == shape and w_out.dtype == torch.float32


# ---- CUDA graphs (GPU only) -----------------------------------------------------------------------
@pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_cuda_graph_capture_and_replay(recipe, impl):
    B, H = 33, 64
    x, ws = recipe_case(recipe, B, H, torch.bfloat16, seed=21)
    xd = to_device(x, "cuda")
    outs = new_recipe_outputs(recipe, xd["q_input"])
    op = QUANT_OPS[impl]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up on a side stream, then capture
        call(op, recipe, xd, outs, ws)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call(op, recipe, xd, outs, ws)
    for seed in (22, 23):
        new, _ = recipe_case(recipe, B, H, torch.bfloat16, seed=seed)  # weight_scale is baked in
        for k in xd:
            xd[k].copy_(new[k])
        outs[0].view(torch.uint8).fill_(0x5A)
        outs[2].fill_(-7.25)
        if outs[1] is not None:
            outs[1].fill_(0)
        g.replay()
        torch.cuda.synchronize()
        assert_same_outputs(outs, run_op(QUANT, recipe, new, ws), f"{recipe} graph replay {seed}")


@pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")
@pytest.mark.parametrize("recipe", RECIPES)
def test_out_of_range_positions_on_cuda(recipe):
    # Not checkable without a sync: native and composed agree on such rows (no out-of-bounds
    # read), and the in-range rows equal the CPU result.
    B, H = 6, 8
    x, ws = recipe_case(recipe, B, H, torch.bfloat16, seed=9)
    want = run_op(QUANT, recipe, x, ws)
    xd = to_device(x, "cuda")
    xd["positions"][1] = x["freqs"].shape[0]
    xd["positions"][4] = -3
    native = run_op(QUANT, recipe, xd, ws)
    composed = run_op(QUANT_COMPOSED, recipe, xd, ws)
    torch.cuda.synchronize()
    assert_same_outputs(composed, native, f"{recipe} out-of-range rows, composed vs native")
    good = torch.tensor([0, 2, 3, 5])
    pick = lambda o: tuple(None if t is None else t.cpu()[good] for t in o)  # noqa: E731
    assert_same_outputs(pick(native), pick(want), f"{recipe} in-range rows")
    assert bool((native[2].cpu()[torch.tensor([1, 4])].view(torch.int32) == nan_weight_bits(recipe)).all())


# ---- errors: the message names the argument, nothing is written -----------------------------------
def check_error(op, args, arg, exc=RuntimeError):
    q_out, q_sf, w_out = args[2], args[3], args[5]
    before = [None if t is None else t.clone() for t in (q_out, q_sf, w_out)]
    with pytest.raises(exc) as e:
        op(*args)
    msg = str(e.value)
    assert f"indexer_q: {arg}" in msg, msg
    for t, b in zip((q_out, q_sf, w_out), before):
        if t is not None:
            assert torch.equal(t.view(torch.uint8), b.view(torch.uint8)), "an output was written"
    return msg


def with_arg(args, i, v):
    a = list(args)
    a[i] = v
    return tuple(a)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
def test_unknown_recipe(impl, device):
    args = with_arg(op_args("v4_fp8", device), 0, "v5_fp8")
    msg = check_error(QUANT_OPS[impl], args, "recipe")
    assert "unknown recipe 'v5_fp8'; expected one of " + ", ".join(RECIPES) in msg, msg


def test_unknown_recipe_python():
    _, q, _, _, w, _, ws, freqs, pos = op_args("v4_fp8", "cpu")
    with pytest.raises(ValueError, match="indexer_q: recipe: unknown recipe 'v4_fp16'"):
        indexer_q.quant_q("v4_fp16", q, w, ws, freqs, pos)
    with pytest.raises(TypeError, match="indexer_q: recipe"):
        indexer_q.quant_q(3, q, w, ws, freqs, pos)
    with pytest.raises(ValueError, match="indexer_q: recipe"):
        indexer_q.recipe_info("nope")
    with pytest.raises(RuntimeError, match="indexer_q: recipe: unknown recipe 'nope'"):
        torch.ops.indexer_q.recipe_info("nope")


def _fp4(device):
    return op_args("v4_fp4", device)


# (case, recipe, argument named in the message, mutation of the op's argument tuple)
ERROR_CASES = [
    ("q_fp4_shape_128", "v4_fp4", "q_fp4",
     lambda a: with_arg(a, 2, torch.zeros(*a[2].shape[:2], 128, dtype=torch.uint8,
                                           device=a[2].device))),
    ("q_fp4_dtype_fp8", "v4_fp4", "q_fp4", lambda a: with_arg(a, 2, a[2].view(torch.float8_e4m3fn))),
    ("q_fp4_dtype_int16", "v4_fp4", "q_fp4",
     lambda a: with_arg(a, 2, torch.zeros(*a[2].shape[:2], 32, dtype=torch.int16,
                                           device=a[2].device))),
    ("q_fp4_noncontig", "v4_fp4", "q_fp4",
     lambda a: with_arg(a, 2, torch.zeros(*a[2].shape[:2], 128, dtype=torch.uint8,
                                           device=a[2].device)[..., ::2])),
    ("q_sf_missing", "v4_fp4", "q_sf", lambda a: with_arg(a, 3, None)),
    ("q_sf_dtype_int64", "v4_fp4", "q_sf", lambda a: with_arg(a, 3, a[3].long())),
    ("q_sf_dtype_uint8", "v4_fp4", "q_sf",
     lambda a: with_arg(a, 3, torch.zeros(*a[3].shape, 4, dtype=torch.uint8,
                                           device=a[3].device))),
    ("q_sf_shape", "v4_fp4", "q_sf", lambda a: with_arg(a, 3, a[3][:, :3])),
    ("q_sf_for_fp8", "v32_fp8", "q_sf",
     lambda a: with_arg(a, 3, torch.zeros(a[1].shape[:2], dtype=torch.int32,
                                          device=a[1].device))),
    ("q_fp8_fnuz_for_fn", "v32_fp8", "q_fp8",
     lambda a: with_arg(a, 2, a[2].view(torch.float8_e4m3fnuz))),
    ("q_fp8_fn_for_fnuz", "v4_fp8_fnuz", "q_fp8",
     lambda a: with_arg(a, 2, a[2].view(torch.float8_e4m3fn))),
    ("q_fp8_e5m2", "rope_first_fp8", "q_fp8", lambda a: with_arg(a, 2, a[2].view(torch.float8_e5m2))),
    ("q_fp8_fp4_shape", "v4_fp8", "q_fp8", lambda a: with_arg(a, 2, a[2][..., :64])),
    ("freqs_shape_halves", "v32_fp8", "freqs", lambda a: with_arg(a, 7, a[7][:, :32].contiguous())),
    ("weight_dtype", "v4_fp4", "weight", lambda a: with_arg(a, 4, a[4].int())),  # float dtypes: any
    ("weights_out_dtype", "v32_fp8_fnuz", "weights_out", lambda a: with_arg(a, 5, a[5].double())),
    ("q_sf_overlaps_weights_out", "v4_fp4", "q_sf",
     lambda a: with_arg(a, 3, a[5].view(torch.int32).view(a[3].shape))),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("name,recipe,arg,mutate", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_error_names_argument(name, recipe, arg, mutate, impl, device):
    args = mutate(op_args(recipe, device))
    msg = check_error(QUANT_OPS[impl], args, arg)
    if name == "q_sf_overlaps_weights_out":
        assert "overlaps weights_out" in msg, msg


@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("recipe", [r for r in RECIPES if indexer_q.recipe_info(r).rope])
def test_positions_out_of_range_cpu(recipe, impl):
    args = op_args(recipe, "cpu")
    args[8][2] = args[7].shape[0]
    msg = check_error(QUANT_OPS[impl], args, "positions")
    assert "outside [0, max_pos)" in msg, msg


@pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("i,arg", [(2, "q_fp4"), (3, "q_sf"), (5, "weights_out"), (7, "freqs")])
def test_device_mismatch_fp4(i, arg, impl):
    args = _fp4("cuda")
    args = with_arg(args, i, args[i].cpu())
    msg = check_error(QUANT_OPS[impl], args, arg)
    assert "device" in msg, msg


@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_valid_call_writes_outputs(recipe, impl):
    # the control for the error cases: the same valid arguments write every output
    args = op_args(recipe, "cpu")
    QUANT_OPS[impl](*args)
    assert not bool((args[2].view(torch.uint8) == 0x5A).all())
    if args[3] is not None:
        assert not bool((args[3] == 0x5A5A5A5A).any())
    assert not bool((args[5] == -7.25).any())


@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("recipe", [r for r in RECIPES if not indexer_q.recipe_info(r).rope
                                    or not indexer_q.recipe_info(r).weights])
def test_absent_arguments(recipe, impl):
    # a recipe without RoPE / weights takes 0-element tensors there (Python: None); a tensor with
    # elements is named by the validator, and nothing is written
    info = indexer_q.recipe_info(recipe)
    args = op_args(recipe, "cpu")
    QUANT_OPS[impl](*args)  # 0-element tensors: valid
    x, _ = recipe_case(recipe, 5, 8, torch.bfloat16, seed=11)
    res = indexer_q.quant_q(recipe, x["q_input"], None, 1.0, None, None,
                            backend=None if impl == "native" else impl)
    assert_same_outputs((*res[0], res[1]) if info.fp4 else (res[0], None, res[1]),
                        (args[2], args[3], None if not info.weights else args[5]), recipe)
    full = {"weight": torch.ones(5, 8), "weights_out": torch.ones(5, 8),
            "freqs": torch.ones(4, 64), "positions": torch.zeros(5, dtype=torch.int64)}
    idx = {"weight": 4, "weights_out": 5, "freqs": 7, "positions": 8}
    names = ([] if info.rope else ["freqs", "positions"]) + ([] if info.weights else
                                                             ["weight", "weights_out"])
    for name in names:
        bad = with_arg(op_args(recipe, "cpu"), idx[name], full[name])
        msg = check_error(QUANT_OPS[impl], bad, name)
        assert "expected an empty view" in msg, msg
    with pytest.raises(TypeError, match="indexer_q: freqs: recipe v4_fp8 reads it"):
        indexer_q.quant_q("v4_fp8", x["q_input"], torch.ones(5, 8), 1.0, None, None)


def test_python_api_errors():
    _, q, _, _, w, _, ws, freqs, pos = op_args("v32_fp8", "cpu")
    cis = torch.zeros(freqs.shape[0], 32, dtype=torch.complex64)
    with pytest.raises(TypeError, match="indexer_q: freqs: recipe v32_fp8"):
        indexer_q.fused_q_indexer_rope_first_quant(q, w, ws, cis, pos)
    with pytest.raises(ValueError, match="indexer_q: out_dtype"):
        indexer_q.quant_q("v32_fp8", q, w, ws, freqs, pos, out_dtype=torch.float8_e4m3fnuz,
                          q_out=torch.empty(q.shape, dtype=torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="indexer_q: q_input"):
        indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(q[0], w, ws, freqs, pos)
    # the library's validator, through the Python entry point: fp4 codes into a float8 tensor
    with pytest.raises(RuntimeError, match="indexer_q: q_fp4"):
        indexer_q.quant_q("v4_fp4", q, w, ws, freqs, pos, out_dtype=torch.float8_e4m3fn)
    # an FNUZ recipe asked for FN output
    with pytest.raises(RuntimeError, match="indexer_q: q_fp8"):
        indexer_q.quant_q("v32_fp8_fnuz", q, w, ws, freqs, pos, out_dtype=torch.float8_e4m3fn)


def test_general_op_equals_legacy_op():
    # quant_q("v4_fp8") and the historical operator are the same computation
    args = op_args("v4_fp8", "cpu", B=33, H=16)
    QUANT(*args)
    q8 = torch.empty_like(args[2])
    wo = torch.empty_like(args[5])
    NATIVE(args[1], q8, args[4], wo, args[6], args[7], args[8])
    assert_same_outputs((q8, None, wo), (args[2], None, args[5]), "legacy vs quant_q")


# ---- vLLM's forms (docs/RECIPES.md): hand-made edges, the two weight factors, (T, H) weights_out ----
VLLM_RECIPES = [r for r in RECIPES if indexer_q.recipe_info(r).vllm]
NAN = float("nan")
INF = float("inf")


def identity_rope(B, recipe):
    """cos = 1, sin = 0 (halves table): RoPE and the bf16 point leave bf16-exact values alone."""
    freqs = torch.zeros(4, 64)
    freqs[:, :32] = 1.0
    assert indexer_q.recipe_info(recipe).freqs_layout == "halves"
    return freqs, torch.zeros(B, dtype=torch.int64)


def test_vllm_recipes_listed():
    assert VLLM_RECIPES == ["vllm_v4_fp8", "vllm_v4_mxfp4", "vllm_v32_fp8_neox",
                            "vllm_v32_fp8_gptj", "vllm_v4_fp8_cutedsl", "vllm_v4_fp8_fnuz224",
                            "vllm_v4_mxfp4_cute"]


def pow2_ceil_f32(amax):
    """q_scale of docs/RECIPES.md step 6 for float32 amax values (a tensor): fmax(amax, 1e-4) / 448
    rounded up to a power of two from the bits; +Inf stays +Inf."""
    s = torch.fmax(amax.float(), torch.tensor(1e-4, dtype=torch.float32)) / 448.0
    b = s.view(torch.int32).long()
    e = ((b + 0x7FFFFF) >> 23) & 0xFF
    return (e << 23).to(torch.int32).view(torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_fp8_edges(device):
    # fp32 input, values in dims 0..63 (no RoPE, no bf16 point); expected codes by hand
    recipe = "vllm_v4_fp8"
    rows = [
        # amax 56 -> q_scale = 56 / 448 = 2^-3 exactly, v = 8 x
        [(56.0, 0x7E), (-56.0, 0xFE), (NAN, 0x7F), (-NAN, 0x7F), (-1e-30, 0x80), (0.0, 0x00),
         (-0.0, 0x80),
         (1.0625 / 8, 0x38),      # v = 1.0625: tie 1 | 1.125 -> even (1.0)
         (1.1875 / 8, 0x3A),      # v = 1.1875: tie 1.125 | 1.25 -> 1.25
         (2.0**-12, 0x01),        # v = 2^-9, the smallest subnormal
         (2.0**-13, 0x00), (-(2.0**-13), 0x80),  # v = 2^-10: tie 0 | 2^-9 -> 0, sign kept
         (3 * 2.0**-13, 0x02), (-(3 * 2.0**-13), 0x82),  # v = 3 * 2^-10: tie -> 2^-8
         (54.0, 0x7E),            # v = 432: tie 416 | 448 -> 448
         (50.0, 0x7C)],           # v = 400: tie 384 | 416 -> 384
        # amax below the 1e-4 floor -> q_scale = pow2_ceil(1e-4 / 448) = 2^-22
        [(9e-5, 0x7C), (-3e-5, 0xF0), (2.0**-22, 0x38), (-(2.0**-23), 0xB0)],
        # an Inf: q_scale = +Inf, finite values become +-0, the Inf Inf / Inf = NaN (0x7f)
        [(INF, 0x7F), (-5.0, 0x80), (5.0, 0x00), (-INF, 0x7F)],
        # a large row: q_scale = 2^91 (1e30 / 448 = 2.2e27), v = 403.9 -> 416 (0x7d)
        [(1e30, 0x7D), (-1e30, 0xFD)],
    ]
    B = len(rows)
    q = torch.zeros(B, 1, 128)
    want = torch.zeros(B, 1, 128, dtype=torch.uint8)
    for b, row in enumerate(rows):
        for i, (x, c) in enumerate(row):
            q[b, 0, i], want[b, 0, i] = x, c
    w = torch.tensor([[1.5], [-2.0], [1.0], [0.75]])
    freqs, pos = identity_rope(B, recipe)
    x = to_device({"q_input": q, "weight": w, "freqs": freqs, "positions": pos}, device)
    ws, hs = 128**-0.5, 8**-0.5
    q_scale = pow2_ceil_f32(q.abs().nan_to_num(0.0, posinf=INF).amax(dim=2))  # (B, 1)
    assert q_scale[:, 0].tolist() == [2.0**-3, 2.0**-22, INF, 2.0**91]
    s32, h32 = torch.tensor(ws, dtype=torch.float32), torch.tensor(hs, dtype=torch.float32)
    want_w = ((w * q_scale) * s32) * h32  # (B, 1): three multiplies, left to right
    for op in (QUANT, QUANT_COMPOSED):
        for w2d in (True, False):
            q_out, _, w_out = run_op(op, recipe, x, ws, hs=hs, w2d=w2d)
            got = q_out.cpu().view(torch.uint8)
            for b in range(B):
                assert got[b].tolist() == want[b].tolist(), (op, b, got[b, 0, :16].tolist())
            assert_same_outputs((q_out, None, w_out),
                                (want, None, want_w.view(w_out.shape)), f"{op} fp8 edges")


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_mxfp4_edges(device):
    recipe = "vllm_v4_mxfp4"
    # block 0 (dims 0..31): amax 5 -> ratio 5 * fl(1/6) = 0.83 -> 2^0 (e = 127), v = x
    b0 = [(5.0, 6), (3.5, 6), (2.75, 5), (2.5, 4), (1.75, 4), (1.25, 2), (0.75, 2), (0.5, 1),
          (0.25, 0), (-0.25, 8), (-0.1, 8), (0.0, 0), (-0.0, 8), (-5.0, 14), (NAN, 7),
          (-NAN, 7), (-2.5, 12), (1.5, 3), (-3.0, 13), (0.7, 1)]
    # block 1 (dims 32..63): amax 6.5 -> ratio 1.08 -> 2 (e = 128), v = x / 2
    b1 = [(6.5, 5), (-6.0, 13), (0.5, 0), (1.5, 2), (-1.0, 9)]
    q = torch.zeros(3, 1, 128)
    want = torch.zeros(3, 1, 128, dtype=torch.uint8)  # one code per dim, packed below
    for i, (v, c) in enumerate(b0):
        q[0, 0, i], want[0, 0, i] = v, c
    for i, (v, c) in enumerate(b1):
        q[0, 0, 32 + i], want[0, 0, 32 + i] = v, c
    want[0, 0, 37:64] = 0  # (+0 codes)
    want[0, 0, 64:] = 0    # blocks 2, 3: zeros -> amax floored at 6 * 2^-126 (e = 1)
    # row 1: a tiny block (below the floor) and an Inf block (e = 254, inv = +0: x * 0)
    q[1, 0, 0], q[1, 0, 1] = 1e-40, -1e-40
    want[1, 0, 1] = 8
    want[1, 0, 32:64] = 0
    q[1, 0, 32], q[1, 0, 33], q[1, 0, 34] = INF, -7.0, 7.0
    want[1, 0, 33], want[1, 0, 34] = 8, 0  # -7 * 0 = -0 -> 8; +0 -> 0
    want[1, 0, 32] = 7  # INF * 0 = NaN -> 7 whatever the device's NaN sign
    w = torch.tensor([[1.5], [-2.0], [3.0]])
    freqs, pos = identity_rope(3, recipe)
    x = to_device({"q_input": q, "weight": w, "freqs": freqs, "positions": pos}, device)
    ws, hs = 128**-0.5, 8**-0.5
    s32, h32 = torch.tensor(ws, dtype=torch.float32), torch.tensor(hs, dtype=torch.float32)
    want_w = (w * s32) * h32
    packed = want[:, :, 0::2] | (want[:, :, 1::2] << 4)
    for op in (QUANT, QUANT_COMPOSED):
        q_out, q_sf, w_out = run_op(op, recipe, x, ws, hs=hs)
        got = q_out.cpu()
        sf = q_sf.cpu().view(torch.uint8).view(3, 1, 4)
        assert sf[0, 0].tolist()[:2] == [127, 128] and sf[1, 0, 1] == 254, sf
        # 6 * fl(1/6) rounds to exactly 1: the floor 6 * 2^-126 gives 2^-126 (e = 1)
        assert sf[2, 0].tolist() == [1, 1, 1, 1] and sf[0, 0, 2:].tolist() == [1, 1]
        assert sf[1, 0, 0] == 1
        for b in range(3):
            g = got[b, 0].tolist()
            p = packed[b, 0].tolist()
            assert g == p, (op, b, g[:20], p[:20])
        assert_same_outputs((q_out, q_sf, w_out), (q_out, q_sf, want_w.view(w_out.shape)),
                            f"{op} mxfp4 edges weights")
    assert_same_outputs(run_op(QUANT_COMPOSED, recipe, x, ws, hs=hs),
                        run_op(QUANT, recipe, x, ws, hs=hs), "mxfp4 edges composed vs native")


# ---- vLLM's CuTe MXFP4 form (docs/RECIPES.md step 15; source only) ----------------------------
# OPEN-7 (no capture): a NaN input, and a zero of an infinite block (0 * -Inf), take 0x7 (+6):
# the PTX ISA's .satfinite rule for a destination format without NaN (positive MAX_NORM).
CUTE_MX = "vllm_v4_mxfp4_cute"
CUTE_SM, CUTE_HS = 128**-0.5, 8**-0.5
CUTE_S = CUTE_SM * CUTE_HS  # formed in double, as vLLM's host code; the recipe's weight_scale


def mxfp4_cute_edge_case():
    """Rows of hand-known codes (fp32 input, identity RoPE: the rotated dims stay as given, bf16-
    exact) and their expected bytes: (inputs, S, want codes (4, 1, 128) one per dim, want e)."""
    q = torch.zeros(4, 1, 128)
    want = torch.zeros(4, 1, 128, dtype=torch.uint8)
    # row 0, block 0: amax 5 -> 5 * fl(1/6) -> 2^0 (e = 127), v = x: ties to even, -0 -> 8
    b0 = [(5.0, 6), (3.5, 6), (2.75, 5), (2.5, 4), (1.75, 4), (1.25, 2), (0.75, 2), (0.5, 1),
          (0.25, 0), (-0.25, 8), (-0.1, 8), (0.0, 0), (-0.0, 8), (-5.0, 14), (NAN, 7),
          (-NAN, 7), (-2.5, 12), (1.5, 3), (-3.0, 13), (0.7, 1)]
    for i, (v, c) in enumerate(b0):
        q[0, 0, i], want[0, 0, i] = v, c
    # row 0, block 1: amax 6.5 -> 2 (e = 128), v = x / 2; blocks 2, 3: zeros -> the floor, e = 1
    for i, (v, c) in enumerate([(6.5, 5), (-6.0, 13), (0.5, 0), (1.5, 2), (-1.0, 9)]):
        q[0, 0, 32 + i], want[0, 0, 32 + i] = v, c
    # row 1: block 0 below the floor (e = 1); block 1 holds +Inf: e = 255, inv = -Inf, so every
    # value changes sign and saturates: +Inf -> 0xf, -7 -> +6 (7), 7 -> 0xf, -1e-3 -> 7, and the
    # zeros and the NaN give NaN -> 7
    q[1, 0, 0], q[1, 0, 1] = 1e-40, -1e-40
    want[1, 0, 1] = 8
    want[1, 0, 32:64] = 7
    for i, (v, c) in enumerate([(INF, 15), (-7.0, 7), (7.0, 15), (-1e-3, 7), (NAN, 7)]):
        q[1, 0, 32 + i], want[1, 0, 32 + i] = v, c
    # row 2: all zero -> e = 1 everywhere, codes 0
    # row 3: block 0 all NaN (amax 0: e = 1, NaN -> 7); block 2 (rotated dims; identity RoPE:
    # x0' = fma(x0, 1, -(x1 * 0)), x1' = fma(x0, 0, x1 * 1)): pair (64, 65) = (0, -Inf) gives
    # (NaN, -Inf), pair (66, 67) = (1, 0) gives (1, 0); e = 255, inv = -Inf: -Inf -> +Inf (7),
    # 1 -> -Inf (0xf), NaN and the zeros -> 7
    q[3, 0, :32] = NAN
    want[3, 0, :32] = 7
    q[3, 0, 65], q[3, 0, 66] = -INF, 1.0
    want[3, 0, 64:96] = 7
    want[3, 0, 66] = 15
    want_e = [[127, 128, 1, 1], [1, 255, 1, 1], [1, 1, 1, 1], [1, 1, 255, 1]]
    w = torch.tensor([[1.5], [-2.0], [3.0], [NAN]])
    freqs, pos = identity_rope(4, CUTE_MX)
    x = {"q_input": q, "weight": w, "freqs": freqs, "positions": pos}
    return x, CUTE_S, want, want_e


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_mxfp4_cute_edges(device):
    x, s, want, want_e = mxfp4_cute_edge_case()
    xd = to_device(x, device)
    packed = want[:, :, 0::2] | (want[:, :, 1::2] << 4)
    s32 = torch.tensor(s, dtype=torch.float32)
    want_w = x["weight"] * s32  # one factor, no scale folded in; the NaN weight canonical
    want_w[3, 0] = torch.tensor(nan_weight_bits(CUTE_MX), dtype=torch.int32).view(torch.float32)
    for op in (QUANT_REFERENCE, QUANT, QUANT_COMPOSED):
        q_out, q_sf, w_out = run_op(op, CUTE_MX, x if op is QUANT_REFERENCE else xd, s, hs=0.3)
        sf = q_sf.cpu().view(torch.uint8).view(4, 4)
        assert sf.tolist() == want_e, (op, sf.tolist())
        assert q_out.cpu().tolist() == packed.tolist(), op
        assert_same_outputs((q_out, q_sf, w_out), (packed, q_sf, want_w.view(w_out.shape)),
                            f"{op} mxfp4 cute edges")
    # the finite rows are vllm_v4_mxfp4's bytes; the Inf blocks are not (e = 254 there)
    mx = run_op(QUANT, "vllm_v4_mxfp4", xd, CUTE_SM, hs=CUTE_HS)
    assert torch.equal(mx[0].cpu()[0::2], packed[0::2]) and mx[1].cpu().view(torch.uint8).view(
        4, 4)[1, 1] == 254
    # vLLM's call with the CuTe DSL numerics: the two factors, multiplied in double
    for wdt in (torch.float32, torch.bfloat16):
        (q4, sf4), wo = indexer_q.fused_indexer_q_rope_quant_cutedsl(
            xd["positions"], xd["q_input"], xd["freqs"], xd["weight"], CUTE_SM, CUTE_HS,
            use_fp4=True, weights_out_dtype=wdt)
        assert q4.dtype == torch.uint8 and tuple(q4.shape) == (4, 1, 64)
        assert sf4.dtype == torch.int32 and tuple(sf4.shape) == (4, 1)
        assert torch.equal(q4.cpu(), packed) and sf4.cpu().view(torch.uint8).view(4, 4).tolist() \
            == want_e
        assert wo.dtype == wdt and tuple(wo.shape) == (4, 1)
        ref = (x["weight"] * s32).to(wdt)
        assert torch.equal(wo.cpu()[:3].view(torch.int16 if wdt == torch.bfloat16 else torch.int32),
                           ref[:3].view(torch.int16 if wdt == torch.bfloat16 else torch.int32))
        assert bool(wo.cpu()[3].isnan())
    with pytest.raises(ValueError, match="weights_out_dtype"):
        indexer_q.fused_indexer_q_rope_quant_cutedsl(
            xd["positions"], xd["q_input"], xd["freqs"], xd["weight"], CUTE_SM, CUTE_HS,
            use_fp4=True, weights_out_dtype=torch.float16)


VLLM_MXFP4_GOLDEN = [rel for rel, r in GOLDEN if r == "vllm_v4_mxfp4"]


def test_vllm_mxfp4_golden_files_present():
    assert len(VLLM_MXFP4_GOLDEN) >= 2, VLLM_MXFP4_GOLDEN


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rel", VLLM_MXFP4_GOLDEN)
def test_vllm_mxfp4_cute_equals_mxfp4_golden_on_finite_rows(rel, device):
    """Step 15 equals step 8 for every block with a finite amax: the CuTe form's codes and q_sf are
    byte-identical to the vllm_v4_mxfp4 golden files (vLLM's Triton kernel), on every backend and
    through vLLM's call; weights_out is w * fl32(softmax_scale * head_scale) (one factor)."""
    x, sm, hs, want = load_golden(rel, "vllm_v4_mxfp4")
    sf_want = want[1].view(torch.uint8).view(-1, 4)
    finite = (sf_want != 254).all(dim=1)  # 254 only for an infinite amax under step 8
    assert int(finite.sum()) == sf_want.shape[0], f"{rel}: every row of these files is finite"
    s = sm * hs  # in double, as vLLM's host code
    want_w = x["weight"].float() * torch.tensor(s, dtype=torch.float32)
    xd = to_device(x, device)
    results = [run_op(op, CUTE_MX, xd if op is not QUANT_REFERENCE else x, s)
               for op in (QUANT_REFERENCE, QUANT, QUANT_COMPOSED)]
    (q4, sf4), wo = indexer_q.fused_indexer_q_rope_quant_cutedsl(
        xd["positions"], xd["q_input"], xd["freqs"], xd["weight"], sm, hs, use_fp4=True)
    results.append((q4, sf4, wo))
    for got in results:
        assert_same_outputs(got, (want[0], want[1], want_w.view(got[2].shape)), f"{rel} cute")
    # the fold is the change: (w * sm) * hs and w * fl(sm * hs) agree when hs = H^-0.5 is a power
    # of two (H = 64), and differ somewhere otherwise (H = 8)
    same_w = torch.equal(want_w.view(-1).view(torch.int32), want[2].view(-1).view(torch.int32))
    h = x["q_input"].shape[1]
    assert same_w == (h in (1, 4, 16, 64, 256)), (rel, h)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", [r for r in VLLM_RECIPES if indexer_q.recipe_info(r).quant
                                    == "vllm"])
def test_vllm_two_factors_stay_two_multiplies(recipe, device):
    # rows with amax 448 (q_scale = 1): weights_out = (w * softmax_scale) * head_scale for both
    # forms; many bf16 weights where fl(fl(w * s) * h) != fl(w * fl(s * h))
    T, H = 64, 8
    g = torch.Generator().manual_seed(5)
    q = torch.zeros(T, H, 128, dtype=torch.bfloat16)
    q[:, :, 0] = 448.0
    w = (torch.randn(T, H, generator=g) * 3).to(torch.bfloat16)
    freqs, pos = identity_rope(T, recipe)
    ws, hs = 128**-0.5, 8**-0.5  # the Python floats vLLM passes (H = 8)
    s32, h32 = torch.tensor(ws, dtype=torch.float32), torch.tensor(hs, dtype=torch.float32)
    two_step = (w.float() * s32) * h32
    one_step = w.float() * (s32 * h32)
    assert int((two_step != one_step).sum()) > 10  # the crafted difference is really there
    x = to_device({"q_input": q, "weight": w, "freqs": freqs, "positions": pos}, device)
    fp4 = indexer_q.recipe_info(recipe).fp4
    results = [run_op(op, recipe, x, ws, hs=hs)[2] for op in (QUANT, QUANT_COMPOSED)]
    results.append(indexer_q.fused_indexer_q_rope_quant(
        x["positions"], x["q_input"], x["freqs"], x["weight"], ws, hs, use_fp4=fp4)[1])
    for w_out in results:
        assert tuple(w_out.shape) == (T, H)
        assert torch.equal(w_out.cpu().view(torch.int32), two_step.view(torch.int32))
    # the product given as one factor is a different result: the op does not fold them
    folded = run_op(QUANT, recipe, x, float(s32 * h32), hs=1.0)[2].cpu()
    assert torch.equal(folded.view(torch.int32), one_step.view(torch.int32))


@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("recipe", [r for r in RECIPES if indexer_q.recipe_info(r).weights])
def test_weights_out_2d_and_3d(recipe, impl):
    # every recipe accepts weights_out as (B, H) and (B, H, 1): the same values
    x, ws = recipe_case(recipe, 7, 8, torch.bfloat16, seed=4)
    hs = head_scale_of(recipe, 8)
    a = run_op(QUANT_OPS[impl], recipe, x, ws, hs=hs, w2d=True)
    b = run_op(QUANT_OPS[impl], recipe, x, ws, hs=hs, w2d=False)
    assert a[2].shape == (7, 8) and b[2].shape == (7, 8, 1)
    assert_same_outputs(a, (b[0], b[1], b[2][..., 0]), f"{recipe} (B, H) vs (B, H, 1)")
    if indexer_q.recipe_info(recipe).vllm:  # the Python entry point writes a passed-in one too
        out = torch.empty(7, 8, 1)
        res = indexer_q.quant_q(recipe, x["q_input"], x["weight"], ws, x["freqs"],
                                x["positions"], head_scale=hs, weights_out=out)
        assert res[1] is out and torch.equal(out[..., 0], a[2])


def test_head_scale_ignored_by_sglang_recipes():
    x, ws = recipe_case("v4_fp8", 5, 8, torch.bfloat16, seed=6)
    assert_same_outputs(run_op(QUANT, "v4_fp8", x, ws, hs=0.3), run_op(QUANT, "v4_fp8", x, ws),
                        "head_scale ignored")


VLLM_ERROR_CASES = [
    ("weights_out_shape_bh2", "vllm_v4_fp8", "weights_out",
     lambda a: with_arg(a, 5, torch.zeros(*a[5].shape[:2], 2, device=a[5].device))),
    ("weights_out_shape_hb", "vllm_v4_mxfp4", "weights_out",
     lambda a: with_arg(a, 5, torch.zeros(a[5].shape[1], a[5].shape[0], device=a[5].device))),
    ("q_sf_missing", "vllm_v4_mxfp4", "q_sf", lambda a: with_arg(a, 3, None)),
    ("q_sf_for_fp8", "vllm_v4_fp8", "q_sf",
     lambda a: with_arg(a, 3, torch.zeros(a[1].shape[:2], dtype=torch.int32, device=a[1].device))),
    ("q_fp8_fnuz", "vllm_v4_fp8", "q_fp8", lambda a: with_arg(a, 2, a[2].view(torch.float8_e4m3fnuz))),
    ("q_fp4_shape", "vllm_v4_mxfp4", "q_fp4",
     lambda a: with_arg(a, 2, torch.zeros(*a[2].shape[:2], 128, dtype=torch.uint8,
                                           device=a[2].device))),
    ("freqs_shape", "vllm_v4_fp8", "freqs", lambda a: with_arg(a, 7, a[7][:, :32].contiguous())),
    ("weight_dtype", "vllm_v4_mxfp4", "weight", lambda a: with_arg(a, 4, a[4].double())),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("name,recipe,arg,mutate", VLLM_ERROR_CASES,
                         ids=[c[0] for c in VLLM_ERROR_CASES])
def test_vllm_error_names_argument(name, recipe, arg, mutate, impl, device):
    check_error(QUANT_OPS[impl], mutate(op_args(recipe, device)), arg)


def test_vllm_entry_point_errors():
    _, q, _, _, w, _, ws, freqs, pos = op_args("vllm_v4_fp8", "cpu")
    cis = torch.zeros(freqs.shape[0], 32, dtype=torch.complex64)
    with pytest.raises(TypeError, match="indexer_q: freqs: recipe vllm_v4_fp8"):
        indexer_q.fused_indexer_q_rope_quant(pos, q, cis, w, ws, 0.125)
    with pytest.raises(ValueError, match="indexer_q: q_input"):  # index_q is the op's q_input
        indexer_q.fused_indexer_q_rope_quant(pos, q[0], freqs, w, ws, 0.125, use_fp4=True)
    with pytest.raises(RuntimeError, match="indexer_q: weight"):  # index_weights: weight
        indexer_q.fused_indexer_q_rope_quant(pos, q, freqs, w.int(), ws, 0.125)
    with pytest.raises(RuntimeError, match="indexer_q: positions"):
        indexer_q.fused_indexer_q_rope_quant(pos[:2], q, freqs, w, ws, 0.125)
    with pytest.raises(ValueError, match="indexer_q: out_dtype: recipe vllm_v4_fp8"):
        indexer_q.quant_q("vllm_v4_fp8", q, w, ws, freqs, pos, out_dtype=torch.float8_e4m3fnuz)
