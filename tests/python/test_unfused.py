"""SGLang's DeepSeek-V3.2 unfused query path (recipe sgl_v32_unfused_neox_hadamard_ue8m0,
docs/RECIPES.md 13) and its wrapper indexer_q.dsa_indexer_q_unfused: the golden files through
the reference, native CPU, composed and Python entry points with q_scale compared bit for bit
(the Triton kernel: test_triton.py), the engine's shapes and dtypes, the q_scale output's
shapes and errors, and the fold's order of factors."""

import functools
import os

import pytest
import torch

import indexer_q
from conftest import (DEVICES, GOLDEN_DIR, QUANT, QUANT_COMPOSED, QUANT_REFERENCE,
                      assert_same_outputs, load_golden, new_recipe_outputs, read_safetensors)

RECIPE = "sgl_v32_unfused_neox_hadamard_ue8m0"
DIR = "sgl_v32_unfused"
FILES = sorted(os.path.join(DIR, f) for f in os.listdir(os.path.join(GOLDEN_DIR, DIR))
               if f.endswith(".safetensors"))
IMPLS = {"reference": QUANT_REFERENCE, "native": QUANT, "composed": QUANT_COMPOSED}


def test_descriptor_and_files():
    info = indexer_q.recipe_info(RECIPE)
    assert (info.rope_dims, info.rope_pairs, info.rope_fma, info.freqs_layout) == (
        "first64", "neox", "x1_c", "halves")
    assert info.hadamard and info.bf16_after_rope and info.bf16_after_hadamard
    assert (info.format, info.quant, info.fold) == ("e4m3fn", "sglang_ue8m0", "head_scale_first")
    assert info.scale_out and info.q_scale_out and info.two_factors and not info.weights_2d
    assert not info.fp4 and not info.vllm
    assert len(FILES) == 3
    for rel in FILES:
        _, meta = read_safetensors(os.path.join(GOLDEN_DIR, rel))
        assert meta["variant"] == RECIPE and meta["op"] == "dsa_indexer_q_unfused"


@pytest.mark.parametrize("sf2d", [False, True], ids=["q_scale_bh1", "q_scale_bh"])
@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("rel", FILES, ids=[os.path.basename(f)[:-12] for f in FILES])
def test_golden_operator(rel, impl, sf2d):
    x, ws, hs, want = load_golden(rel, RECIPE)
    assert want[1].dtype == torch.float32 and want[1].shape[-1] == 1
    for dt in (torch.bfloat16, torch.float32):  # bf16 -> fp32 exact: the same bytes
        q = x["q_input"].to(dt)
        outs = new_recipe_outputs(RECIPE, q, sf2d=sf2d)
        IMPLS[impl](RECIPE, q, outs[0], outs[1], x["weight"], outs[2], ws, x["freqs"],
                    x["positions"], head_scale=hs)
        assert tuple(outs[1].shape) == (tuple(want[1].shape[:2]) if sf2d else tuple(want[1].shape))
        assert_same_outputs(outs, want, f"{rel} {impl} {dt}")


@pytest.mark.parametrize("rel", FILES, ids=[os.path.basename(f)[:-12] for f in FILES])
def test_golden_intermediates_are_the_reference_steps(rel):
    # the files keep the engine's bf16 tensors after RoPE and after the Hadamard; the op does not
    # output them, but its q_scale is the power of two of their row maximum: a cheap cross-check
    t, _ = read_safetensors(os.path.join(GOLDEN_DIR, rel))
    had = t["q_hadamard_bf16"].float()
    amax = torch.where(torch.isnan(had), 0.0, had.abs()).amax(-1, keepdim=True)  # NaN ignored
    ratio = torch.clamp(amax, min=1e-4) * torch.tensor(1 / 448, dtype=torch.float32)
    bits = ratio.view(torch.int32)
    pow2 = (((bits + 0x7FFFFF) >> 23) & 0xFF) << 23
    assert torch.equal(pow2.view(torch.float32).view(torch.int32), t["q_scale"].view(torch.int32))


@functools.lru_cache(maxsize=None)
def _golden(rel):
    return load_golden(rel, RECIPE)


@pytest.mark.parametrize("rel", FILES, ids=[os.path.basename(f)[:-12] for f in FILES])
@pytest.mark.parametrize("backend", ["reference", "composed", None])
def test_wrapper_golden_bytes(rel, backend, monkeypatch):
    # dsa_indexer_q_unfused(q, positions, cos_sin_cache, weights, softmax_scale, head_scale):
    # the engine's shapes, the golden bytes. backend: the quant_q path it runs on (None: the
    # dispatcher's native CPU kernel)
    x, ws, hs, want = _golden(rel)
    if backend is not None:
        monkeypatch.setattr(indexer_q._ops, "quant_q",
                            functools.partial(indexer_q._ops.quant_q, backend=backend))
    T, H = x["q_input"].shape[:2]
    q_fp8, q_scale, w_out = indexer_q.dsa_indexer_q_unfused(
        x["q_input"], x["positions"], x["freqs"], x["weight"], ws, hs)
    assert q_fp8.dtype == torch.float8_e4m3fn and tuple(q_fp8.shape) == (T, H, 128)
    assert q_scale.dtype == torch.float32 and tuple(q_scale.shape) == (T, H, 1)
    assert w_out.dtype == torch.float32 and tuple(w_out.shape) == (T, H, 1)
    assert_same_outputs((q_fp8, q_scale, w_out), want, f"{rel} wrapper {backend}")


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_wrapper_shapes_and_dtypes(device):
    T, H, max_pos = 6, 64, 32
    q = torch.randn(T, H, 128, device=device).bfloat16()
    pos = torch.arange(T, dtype=torch.int64, device=device)
    cache = torch.rand(max_pos, 64, device=device)
    w = torch.randn(T, H, device=device)  # weights_proj's float32 output
    q_fp8, q_scale, w_out = indexer_q.dsa_indexer_q_unfused(q, pos, cache, w, 128 ** -0.5,
                                                            H ** -0.5)
    for t, shape, dt in ((q_fp8, (T, H, 128), torch.float8_e4m3fn),
                         (q_scale, (T, H, 1), torch.float32), (w_out, (T, H, 1), torch.float32)):
        assert t.device.type == torch.device(device).type
        assert tuple(t.shape) == shape and t.dtype == dt
    if device == "meta":
        return
    # q_scale is a power of two; weights_out = ((w * head_scale) * q_scale) * softmax_scale
    bits = q_scale.cpu().view(torch.int32)
    assert bool(((bits & 0x7FFFFF) == 0).all())
    s = torch.tensor(128 ** -0.5, dtype=torch.float32)
    h = torch.tensor(H ** -0.5, dtype=torch.float32)
    want = ((w.cpu().unsqueeze(-1) * h) * q_scale.cpu()) * s
    assert torch.equal(w_out.cpu().view(torch.int32), want.view(torch.int32))


def test_wrapper_errors():
    q = torch.randn(2, 4, 128).bfloat16()
    pos = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="indexer_q: q_input"):
        indexer_q.dsa_indexer_q_unfused(q[0], pos, torch.rand(4, 64), torch.randn(2, 4), 1.0, 1.0)
    with pytest.raises(TypeError, match="indexer_q: freqs"):  # a complex table: not this layout
        indexer_q.dsa_indexer_q_unfused(q, pos, torch.rand(4, 32, dtype=torch.complex64),
                                        torch.randn(2, 4), 1.0, 1.0)


@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("name,mutate", [
    ("missing", lambda q_sf: None),
    ("int32", lambda q_sf: torch.zeros(q_sf.shape, dtype=torch.int32)),
    ("float64", lambda q_sf: torch.zeros(q_sf.shape, dtype=torch.float64)),
    ("shape", lambda q_sf: torch.zeros(q_sf.shape[0], q_sf.shape[1], 2)),
    ("strided", lambda q_sf: torch.zeros(q_sf.shape[0], 2 * q_sf.shape[1])[:, ::2]),
])
def test_q_scale_errors_name_q_scale(name, mutate, impl):
    x, ws, hs, _ = _golden(FILES[1])
    q_out, q_sf, w_out = new_recipe_outputs(RECIPE, x["q_input"])
    bad = mutate(q_sf)
    before = (q_out.view(torch.uint8).clone(), w_out.clone())
    with pytest.raises(RuntimeError, match="indexer_q: q_scale: "):
        {"native": QUANT, "composed": QUANT_COMPOSED}[impl](
            RECIPE, x["q_input"], q_out, bad, x["weight"], w_out, ws, x["freqs"], x["positions"],
            head_scale=hs)
    assert torch.equal(q_out.view(torch.uint8), before[0]) and torch.equal(w_out, before[1])


def test_head_scale_is_the_first_factor():
    # ((w * head_scale) * q_scale) * softmax_scale: passing head_scale as 1 and folding it into
    # softmax_scale gives other floats for some weights (the engine's order is kept); H = 32:
    # head_scale 32**-0.5 is no power of two
    x, ws, hs, want = _golden(FILES[0])
    assert x["q_input"].shape[1] == 32
    outs = new_recipe_outputs(RECIPE, x["q_input"])
    QUANT_REFERENCE(RECIPE, x["q_input"], outs[0], outs[1], x["weight"], outs[2], ws * hs,
                    x["freqs"], x["positions"], head_scale=1.0)
    assert torch.equal(outs[0].view(torch.uint8), want[0])  # codes and scales: unaffected
    assert torch.equal(outs[1].view(torch.int32), want[1].view(torch.int32))
    assert not torch.equal(outs[2].view(torch.int32), want[2].view(torch.int32))
