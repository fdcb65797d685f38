"""Golden conformance through the operator: 0 differing bytes against tests/data/golden."""

import pytest
import torch

import indexer_q
from conftest import (DEVICES, GOLDEN_DIR, OPS, assert_same_f32, assert_same_fp8, golden_files,
                      new_outputs, read_safetensors)

import os


def load_case(name, device):
    t, meta = read_safetensors(os.path.join(GOLDEN_DIR, name))
    ws = float(meta["weight_scale"])
    inputs = {k: t[k].to(device) for k in ("q_input", "weight", "freqs", "positions")}
    return inputs, ws, t["q_fp8"], t["weights_out"]


def test_golden_files_present():
    names = golden_files()
    assert len(names) == 5, names


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("name", golden_files())
def test_golden_operator(name, impl, device):
    x, ws, want_q, want_w = load_case(name, device)
    q_fp8, w_out = new_outputs(x["q_input"])
    OPS[impl](x["q_input"], q_fp8, x["weight"], w_out, ws, x["freqs"], x["positions"])
    assert_same_fp8(q_fp8, want_q, f"{name} {impl} {device} q_fp8")
    assert_same_f32(w_out, want_w, f"{name} {impl} {device} weights_out")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", golden_files())
def test_golden_python_api_complex_and_real_freqs(name, device):
    x, ws, want_q, want_w = load_case(name, device)
    freqs_cis = torch.view_as_complex(x["freqs"].view(-1, 32, 2))  # complex64 (max_pos, 32)
    for table in (freqs_cis, x["freqs"]):
        q_fp8, w_out = indexer_q.fused_q_indexer_rope_hadamard_quant(
            x["q_input"], x["weight"], ws, table, x["positions"])
        assert q_fp8.dtype == torch.float8_e4m3fn and q_fp8.shape == want_q.shape
        assert w_out.dtype == torch.float32 and w_out.shape == want_w.shape
        assert q_fp8.device == x["q_input"].device
        assert_same_fp8(q_fp8, want_q, f"{name} api q_fp8")
        assert_same_f32(w_out, want_w, f"{name} api weights_out")
        q2, w2 = indexer_q.composed_fused_q_indexer_rope_hadamard_quant(
            x["q_input"], x["weight"], ws, table, x["positions"])
        assert_same_fp8(q2, want_q, f"{name} composed api q_fp8")
        assert_same_f32(w2, want_w, f"{name} composed api weights_out")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("name", golden_files())
def test_golden_as_fp32_inputs(name, impl, device):
    # bf16 -> fp32 is exact, so the fp32 input path must give the same bytes.
    x, ws, want_q, want_w = load_case(name, device)
    q = x["q_input"].float()
    w = x["weight"].float()
    q_fp8, w_out = new_outputs(q)
    OPS[impl](q, q_fp8, w, w_out, ws, x["freqs"], x["positions"])
    assert_same_fp8(q_fp8, want_q, f"{name} fp32 {impl}")
    assert_same_f32(w_out, want_w, f"{name} fp32 {impl}")


# ---- every golden file of every form (the later engine forms included) through quant_q -------------
from conftest import (QUANT_OPS, QUANT_REFERENCE, absent_args, assert_same_outputs,  # noqa: E402
                      golden_more_files, golden_recipe_cases, load_golden, new_recipe_outputs)

_CASES = golden_recipe_cases()


def test_golden_more_forms_present():
    # the later engine forms: each file's metadata names its recipe
    rels = golden_more_files()
    assert len(rels) >= 18, rels
    recipes = {r for f, r in _CASES if f in rels}
    assert recipes == {"vllm_v32_fp8_neox", "vllm_v32_fp8_gptj", "vllm_v4_fp8_cutedsl",
                       "sgl_v41_fp4_rope_pack", "sgl_v41_fp4_quant_rne",
                       "sgl_v32_unfused_neox_hadamard_ue8m0"}, recipes


@pytest.mark.parametrize("impl", ["reference", "native", "composed"])
@pytest.mark.parametrize("rel,recipe", _CASES, ids=[f"{r}-{os.path.basename(f)[:-12]}"
                                                     for f, r in _CASES])
def test_golden_every_form(rel, recipe, impl):
    x, ws, hs, want = load_golden(rel, recipe)
    op = QUANT_REFERENCE if impl == "reference" else QUANT_OPS[impl]
    # outputs in the file's shapes (weights_out / q_scale (B, H) or (B, H, 1)); q_scale (scale_out)
    # is compared as its float32 bits, like the FP4 q_sf
    q_out, q_sf, w_out = new_recipe_outputs(recipe, x["q_input"],
                                            w2d=want[2] is not None and want[2].dim() == 2,
                                            sf2d=want[1] is not None and want[1].dim() == 2)
    w, w_arg, freqs, pos = absent_args(recipe, x["weight"], w_out, x["freqs"], x["positions"])
    op(recipe, x["q_input"], q_out, q_sf, w, w_arg, ws, freqs, pos, head_scale=hs)
    assert_same_outputs((q_out, q_sf, w_out), want, f"{rel} {recipe} {impl}")
