"""The indexer's purpose, measured (python/indexer_q/recall.py, docs/RECALL.md): the top-k
overlap of the scores of the library's quantized query and key outputs against float64 scores of
the inputs, and the warning for a query / key pair that does not transform alike."""

import math
import warnings

import pytest
import torch

import indexer_q
from indexer_q import recall


def _hadamard64(x):
    """The orthonormal 128-point Hadamard transform in float64 (strides 1..64, / sqrt(128))."""
    y = x.clone()
    h = 1
    while h < 128:
        y = y.reshape(*y.shape[:-1], 128 // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        y = torch.stack([a + b, a - b], dim=-2).reshape(*x.shape)
        h *= 2
    return y / math.sqrt(128.0)


@pytest.fixture(scope="module")
def case4096():
    return recall.workload(4096, queries=4, heads=64, seed=3)


def test_matching_pair_keeps_the_top_k(case4096, recwarn):
    r = recall.topk_overlap("v4_fp8", "v4_k_fp8", topk=64, **case4096)
    assert r.mismatch == ""
    assert not [w for w in recwarn if issubclass(w.category, recall.RecipeMismatchWarning)]
    assert r.context == 4096 and r.topk == 64 and r.per_query.shape == (4,)
    assert r.overlap > 0.9, r
    assert r.min_overlap <= r.overlap


def test_matching_pairs_of_other_forms(case4096):
    # FNUZ (codes worth half, weights_out doubled) and AMD's 224 form score like v4_fp8
    for q in ("v4_fp8_fnuz", "sglang_v4_fp8_gfx942"):
        r = recall.topk_overlap(q, "v4_k_fp8", topk=64, **case4096)
        assert r.mismatch == "" and r.overlap > 0.9, r
    # FP4 on both sides: coarser, still far above chance (64 / 4096)
    r = recall.topk_overlap("v4_fp4", "v4_k_fp4", topk=64, **case4096)
    assert r.mismatch == "" and r.overlap > 0.5, r


def test_mismatched_pair_warns_and_collapses(case4096):
    # vLLM's V4 query form has no Hadamard; the library's key side applies one
    with pytest.warns(recall.RecipeMismatchWarning, match="v4_k_fp8 applies the Hadamard"):
        r = recall.topk_overlap("vllm_v4_fp8", "v4_k_fp8", topk=64, **case4096)
    assert "Hadamard" in r.mismatch
    assert r.overlap < 0.2, r
    # the same query recipe scored with an unrotated key recovers: the collapse is the Hadamard's
    good = recall.topk_overlap("v4_fp8", "v4_k_fp8", topk=64, **case4096)
    assert good.overlap > r.overlap + 0.6


def test_pair_mismatch_names_what_differs():
    assert recall.pair_mismatch("v4_fp8", "v4_k_fp8") == ""
    assert recall.pair_mismatch("v4_fp4", "v4_k_fp4") == ""
    assert recall.pair_mismatch("v4_fp4", "v4_k_fp8") == ""  # formats may differ
    m = recall.pair_mismatch("sgl_v41_fp4_rope_pack", "v4_k_fp4")
    assert "v4_k_fp4 applies the Hadamard transform and sgl_v41_fp4_rope_pack does not" in m
    m = recall.pair_mismatch("rope_first_fp8", "v4_k_fp8")
    assert "Hadamard" not in m and "RoPE on dims first64" in m
    m = recall.pair_mismatch("vllm_v32_fp8_neox", "v4_k_fp8")
    assert "Hadamard" in m and "first64" in m and "neox" in m
    with pytest.raises(ValueError, match="k_recipe"):
        recall.pair_mismatch("v4_fp8", "v4_fp8")
    with pytest.raises(ValueError, match="unknown recipe"):
        recall.pair_mismatch("nope", "v4_k_fp8")
    # every recipe of the library gets an answer
    for q in indexer_q.RECIPES:
        for k in indexer_q.KSIDE_RECIPES:
            assert isinstance(recall.pair_mismatch(q, k), str)


def test_dequantized_outputs_are_the_transformed_inputs(case4096):
    """What the scores are made of: the dequantized query (times weights_out) and keys are the
    float64 transforms of the inputs (RoPE + Hadamard), up to the formats' error."""
    c = case4096
    for q_recipe, k_recipe, tol in (("v4_fp8", "v4_k_fp8", 0.06), ("v4_fp4", "v4_k_fp4", 0.2)):
        info = indexer_q.recipe_info(q_recipe)
        res = indexer_q.quant_q(q_recipe, c["q_input"], c["weight"], c["weight_scale"],
                                c["freqs"], c["positions"])
        (q_out, q_sf), w_out = res if info.q_scale_out else ((res[0], None), res[1])
        qd, wd = recall.dequantize_query(q_recipe, q_out, q_sf, w_out)
        cos, sin = recall._angles(c["freqs"], c["positions"])
        q64 = recall._rope64(c["q_input"].double(), cos[:, None], sin[:, None], "last64",
                             "adjacent")
        want = _hadamard64(q64) * (c["weight"].double() * float(
            torch.tensor(c["weight_scale"], dtype=torch.float32)))[..., None]
        got = qd * wd[..., None]
        rel = float((got - want).norm() / want.norm())
        assert rel < tol, (q_recipe, rel)
        # the key side, through its cache
        n = 256
        kv = torch.zeros((n // 64, (132 if k_recipe == "v4_k_fp8" else 68) * 64), dtype=torch.uint8)
        slots = torch.randperm(n, generator=torch.Generator().manual_seed(1))
        indexer_q.kside_store(k_recipe, c["k_input"][:n], c["norm_weight"], 1e-6, c["freqs"],
                              c["k_positions"][:n], slots, kv, 64)
        kd = recall.dequantize_keys(k_recipe, kv, 64, slots)
        x = c["k_input"][:n].double()
        x = x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6) * c["norm_weight"].double()
        cos, sin = recall._angles(c["freqs"], c["k_positions"][:n])
        want = _hadamard64(recall._rope64(x, cos, sin, "last64", "adjacent"))
        rel = float((kd - want).norm() / want.norm())
        assert rel < tol, (k_recipe, rel)


def test_package_exports():
    assert indexer_q.topk_overlap is recall.topk_overlap
    assert indexer_q.pair_mismatch is recall.pair_mismatch
    assert indexer_q.overlap_vs_context is recall.overlap_vs_context
    assert issubclass(indexer_q.RecipeMismatchWarning, UserWarning)


def test_overlap_of():
    s = torch.randn(3, 100, dtype=torch.float64)
    assert torch.equal(recall.overlap_of(s, s, 10), torch.ones(3, dtype=torch.float64))
    assert torch.equal(recall.overlap_of(s, -s, 10), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(recall.overlap_of(s, s, 1000), torch.ones(3, dtype=torch.float64))


def test_overlap_vs_context_table():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a matching pair: no warning
        rows = recall.overlap_vs_context("v4_fp8", contexts=(256, 1024), topks=(64, 512),
                                         queries=2, heads=8, seed=5)
    assert [(r.context, r.topk) for r in rows] == [(256, 64), (1024, 64), (1024, 512)]
    assert all(r.k_recipe == "v4_k_fp8" and r.overlap > 0.8 for r in rows), rows
    text = recall.format_overlaps(rows)
    assert len(text.splitlines()) == 4 and "MISMATCHED" not in text
    with pytest.warns(recall.RecipeMismatchWarning):
        bad = recall.overlap_vs_context("vllm_v4_fp8", contexts=(1024,), topks=(64,), queries=2,
                                        heads=8)
    assert "MISMATCHED PAIR" in recall.format_overlaps(bad)
