"""indexer_q.integrations.vllm against vLLM 0.33.0's own modules (from PyPI, imported without
their dependencies by _engines.py): install() routes vLLM's functions of the family to indexer_q;
each is called as vLLM calls it (positional and by its keyword names), on the CPU, with random
inputs of awkward sizes, and compared byte for byte with the direct recipe call, and with the
golden files of vLLM's kernels. Calls that are no form of the library reach vLLM's own path with
one warning."""

import warnings

import pytest
import torch

import _engines
import indexer_q
from conftest import (assert_same_f32, assert_same_fp8, assert_same_outputs,
                      golden_recipe_cases, load_golden)
from indexer_q.integrations import HandBackWarning
from indexer_q.integrations import vllm as route_vllm


@pytest.fixture(scope="module")
def vl():
    ns = _engines.load_vllm()
    report = route_vllm.install()
    assert report == {f"{m}.{a}": None for m, a, _ in route_vllm.TARGETS}
    yield ns
    route_vllm.uninstall()


@pytest.fixture(autouse=True)
def _flags():
    saved = dict(vars(_engines.VFlags))
    _engines.FakeKernel.launches.clear()
    yield
    for k in ("cutedsl", "xpu", "cpu", "fp8"):
        setattr(_engines.VFlags, k, saved[k])


def inputs(t, h, table_dtype=torch.float32, max_pos=29, seed=0, q_dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn((t, h, 128), generator=g) * torch.exp2(torch.randint(-5, 6, (t, h, 1),
                                                                        generator=g))).to(q_dtype)
    w = torch.randn((t, h), generator=g).to(q_dtype)
    ang = torch.rand((max_pos, 32), generator=g, dtype=torch.float64) * 40
    cache = torch.cat([ang.cos(), ang.sin()], dim=1).to(table_dtype)
    pos = torch.randint(0, max_pos, (t,), generator=g)
    return pos, q, cache, w


SM, HS = 128 ** -0.5, 64 ** -0.5


def same(got, want, what):
    if isinstance(want[0], tuple):
        assert_same_outputs((got[0][0], got[0][1], got[1]), (want[0][0], want[0][1], want[1]),
                            what)
    else:
        assert_same_fp8(got[0], want[0], f"{what} q")
        assert_same_f32(got[1], want[1], f"{what} weights_out")


def test_reexports_loaded_before_install_are_routed(vl):
    """vLLM's V4 and V4.1 ops packages re-export fused_indexer_q_rope_quant (V4.1's attention and
    specialized decode import it from there): loaded before install(), they are rebound by it,
    and restored by uninstall()."""
    route_vllm.uninstall()
    original = vl.fused_indexer_q.fused_indexer_q_rope_quant
    assert not hasattr(original, "__indexer_q_original__")
    p4 = _engines.run_package_init("vllm.models.deepseek_v4.common.ops")
    p41 = _engines.run_package_init("vllm.models.deepseek_v41.common.ops")
    assert p41.fused_indexer_q_rope_quant is original
    route_vllm.install()
    for pkg in (p4, p41):
        assert pkg.fused_indexer_q_rope_quant.__indexer_q_original__ is original
    assert {"vllm.models.deepseek_v41.common.ops.fused_indexer_q_rope_quant"} <= set(
        route_vllm.routed())
    pos, q, cache, w = inputs(3, 10, seed=8)
    got = p41.fused_indexer_q_rope_quant(pos, q, cache, w, SM, HS, use_fp4=True)
    same(got, indexer_q.quant_q("vllm_v4_mxfp4", q, w, SM, cache, pos, head_scale=HS), "v4.1")
    route_vllm.uninstall()
    assert p41.fused_indexer_q_rope_quant is original
    route_vllm.install()


@pytest.mark.parametrize("branch", ["triton", "xpu", "cpu"])
@pytest.mark.parametrize("t,h", [(7, 5), (1, 64), (0, 3), (33, 16)])
@pytest.mark.parametrize("table_dtype", [torch.float32, torch.bfloat16])
def test_v4_fp8(vl, branch, t, h, table_dtype):
    _engines.VFlags.xpu, _engines.VFlags.cpu = branch == "xpu", branch == "cpu"
    pos, q, cache, w = inputs(t, h, table_dtype, seed=t * 10 + h)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)
        got = vl.fused_indexer_q.fused_indexer_q_rope_quant(
            positions=pos, index_q=q, index_q_cos_sin_cache=cache, index_weights=w,
            index_weights_softmax_scale=SM, index_weights_head_scale=HS)
    want = indexer_q.quant_q("vllm_v4_fp8", q, w, SM, cache.float(), pos, head_scale=HS)
    assert got[0].dtype == torch.float8_e4m3fn and tuple(got[1].shape) == (t, h)
    same(got, want, "fp8")
    assert _engines.FakeKernel.launches == []


@pytest.mark.parametrize("t,h", [(7, 5), (1, 64), (0, 3)])
def test_v4_cpu_backend_function(vl, t, h):
    """vLLM's CPU attention backend calls its own FP8 wrapper (cpu_sparse.py) directly."""
    _engines.VFlags.cpu = True
    pos, q, cache, w = inputs(t, h, seed=t + 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)
        got = vl.cpu_sparse._fused_indexer_q_rope_quant_cpu(pos, q, cache, w, SM, HS)
    same(got, indexer_q.quant_q("vllm_v4_fp8", q, w, SM, cache, pos, head_scale=HS), "cpu")
    assert got[0].dtype == torch.float8_e4m3fn and tuple(got[1].shape) == (t, h)


@pytest.mark.parametrize("t,h", [(7, 5), (2, 64), (0, 8)])
@pytest.mark.parametrize("wdt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("table_dtype", [torch.float32, torch.bfloat16])
def test_v4_mxfp4(vl, t, h, wdt, table_dtype):
    pos, q, cache, w = inputs(t, h, table_dtype, seed=t + h)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)
        (qp, sf), wo = vl.fused_indexer_q.fused_indexer_q_rope_quant(
            pos, q, cache, w, SM, HS, True, weights_out_dtype=wdt)
    (qw, sfw), ww = indexer_q.quant_q("vllm_v4_mxfp4", q, w, SM, cache.float(), pos,
                                      head_scale=HS)
    assert qp.dtype == torch.uint8 and tuple(qp.shape) == (t, h, 64)
    assert sf.dtype == torch.int32 and tuple(sf.shape) == (t, h)
    assert wo.dtype == wdt and tuple(wo.shape) == (t, h)
    assert torch.equal(qp, qw) and torch.equal(sf, sfw)
    # bf16 weights: the float32 product rounded to nearest even, as vLLM's kernel stores it
    assert torch.equal(wo.view(torch.int16 if wdt == torch.bfloat16 else torch.int32),
                       ww.to(wdt).view(torch.int16 if wdt == torch.bfloat16 else torch.int32))


def test_v4_cutedsl_and_fnuz_forms(vl):
    pos, q, cache, w = inputs(9, 11, seed=3)
    _engines.VFlags.cutedsl = True
    got = vl.fused_indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, SM, HS)
    same(got, indexer_q.quant_q("vllm_v4_fp8_cutedsl", q, w, SM * HS, cache, pos), "cutedsl")
    _engines.VFlags.cutedsl = False
    _engines.VFlags.fp8 = torch.float8_e4m3fnuz  # ROCm gfx942: the Triton kernel, max 224
    got = vl.fused_indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, SM, HS)
    assert got[0].dtype == torch.float8_e4m3fnuz
    same(got, indexer_q.quant_q("vllm_v4_fp8_fnuz224", q, w, SM, cache, pos, head_scale=HS),
         "fnuz224")


@pytest.mark.parametrize("t,h", [(7, 5), (2, 64), (0, 8)])
@pytest.mark.parametrize("wdt", [torch.float32, torch.bfloat16])
def test_v4_cutedsl_mxfp4(vl, t, h, wdt):
    """With the CuTe DSL importable vLLM takes its CuTe MXFP4 kernel: routed to recipe
    vllm_v4_mxfp4_cute (source only, docs/RECIPES.md step 15), ONE factor fl32(SM * HS) formed in
    double; vLLM's own kernel object is never called; the result shapes and dtypes are vLLM's."""
    _engines.VFlags.cutedsl = True
    pos, q, cache, w = inputs(t, h, seed=t + 3 * h)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)
        (qp, sf), wo = vl.fused_indexer_q.fused_indexer_q_rope_quant(
            pos, q, cache, w, SM, HS, use_fp4=True, weights_out_dtype=wdt)
    (qw, sfw), ww = indexer_q.quant_q("vllm_v4_mxfp4_cute", q, w, SM * HS, cache, pos)
    assert qp.dtype == torch.uint8 and tuple(qp.shape) == (t, h, 64)
    assert sf.dtype == torch.int32 and tuple(sf.shape) == (t, h)
    assert wo.dtype == wdt and tuple(wo.shape) == (t, h)
    assert torch.equal(qp, qw) and torch.equal(sf, sfw)
    iv = torch.int16 if wdt == torch.bfloat16 else torch.int32
    assert torch.equal(wo.view(iv), ww.to(wdt).view(iv))
    # finite rows: the Triton form's codes and scales; the weights take one factor, not two
    (q2, sf2), _ = indexer_q.quant_q("vllm_v4_mxfp4", q, w, SM, cache, pos, head_scale=HS)
    assert torch.equal(qp, q2) and torch.equal(sf, sf2)
    assert _engines.FakeKernel.launches == []


def test_v4_fp8_bf16_weights_handed_back(vl):
    """vLLM's FP8 path asserts float32 weights; the routed call hands that back unchanged."""
    pos, q, cache, w = inputs(2, 3, seed=9)
    with pytest.warns(HandBackWarning, match="float32"):
        with pytest.raises(AssertionError):
            vl.fused_indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, SM, HS,
                                                          weights_out_dtype=torch.bfloat16)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("t,h", [(5, 7), (1, 64), (0, 2)])
def test_v32(vl, is_neox, t, h):
    pos, q, cache, w = inputs(t, h, seed=t + 2 * h)
    w = w.float()
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)
        got = vl.sparse_attn_indexer.fused_indexer_q_rope_quant(pos, q, cache, w, SM, HS, is_neox)
    recipe = "vllm_v32_fp8_neox" if is_neox else "vllm_v32_fp8_gptj"
    same(got, indexer_q.quant_q(recipe, q, w, SM, cache, pos, head_scale=HS), "v32")


_V_GOLDEN = ("vllm_v4_fp8", "vllm_v4_mxfp4", "vllm_v4_fp8_cutedsl", "vllm_v32_fp8_neox",
             "vllm_v32_fp8_gptj")


@pytest.mark.parametrize("rel,recipe", [c for c in golden_recipe_cases() if c[1] in _V_GOLDEN])
def test_golden_through_vllm(vl, rel, recipe):
    x, ws, hs, want = load_golden(rel, recipe)
    args = (x["positions"], x["q_input"], x["freqs"], x["weight"])
    if recipe.startswith("vllm_v32"):
        res = vl.sparse_attn_indexer.fused_indexer_q_rope_quant(*args, ws, hs,
                                                                recipe.endswith("neox"))
        got = (res[0], None, res[1])
    else:
        if recipe == "vllm_v4_fp8_cutedsl":  # the file's one factor; vLLM gets it as two
            _engines.VFlags.cutedsl = True
            ws, hs = ws, 1.0
        res = vl.fused_indexer_q.fused_indexer_q_rope_quant(*args, ws, hs,
                                                            use_fp4=recipe.endswith("mxfp4"))
        got = (res[0][0], res[0][1], res[1]) if isinstance(res[0], tuple) else (res[0], None,
                                                                               res[1])
    assert_same_outputs(got, want, f"{rel} via vLLM")
