"""indexer_q.integrations.sglang against SGLang 0.5.23's own modules (from PyPI, imported without
their dependencies by _engines.py): install() routes SGLang's functions of the family to
indexer_q; each is called as SGLang calls it, on the CPU, with random inputs of awkward sizes, and
compared byte for byte with the direct recipe call, and with the golden files where they apply.
Calls that are no form of the library must reach SGLang's own path (its kernel launch recorded
by the stub of its JIT loader) with one warning."""

import os
import struct
import warnings

import pytest
import torch

import _engines
import indexer_q
from conftest import (GOLDEN_DIR, assert_same_f32, assert_same_fp8, assert_same_outputs,
                      golden_recipe_cases, load_golden, read_safetensors)
from indexer_q.integrations import HandBackWarning
from indexer_q.integrations import sglang as route_sglang


@pytest.fixture(scope="module")
def sg():
    ns = _engines.load_sglang()
    report = route_sglang.install()
    assert all(v is None for v in report.values()), report
    yield ns
    assert route_sglang.uninstall() >= len(route_sglang.TARGETS)


@pytest.fixture(autouse=True)
def _fresh_launches():
    _engines.FakeKernel.launches.clear()
    yield


def freqs_cis(max_pos, seed):
    g = torch.Generator().manual_seed(seed)
    ang = torch.rand((max_pos, 32), generator=g, dtype=torch.float64) * 50.0
    return torch.polar(torch.ones_like(ang), ang).to(torch.complex64)


def real_table(fc):
    return torch.view_as_real(fc).flatten(-2).contiguous()


def q_inputs(b, h, dtype=torch.bfloat16, max_pos=37, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn((b, h, 128), generator=g) * torch.exp2(torch.randint(-6, 7, (b, h, 1),
                                                                        generator=g))).to(dtype)
    w = torch.randn((b, h), generator=g).to(dtype)
    pos = torch.randint(0, max_pos, (b,), generator=g)
    return q, w, freqs_cis(max_pos, seed + 1), pos


def test_install_routes_every_target(sg):
    assert route_sglang.install() == {f"{m}.{a}": None for m, a, _ in route_sglang.TARGETS}
    assert getattr(sg.norm_rope.fused_q_indexer_rope_hadamard_quant, "__indexer_q_original__")
    assert getattr(sg.compress.compress_norm_rope_store, "__indexer_q_original__")
    assert set(route_sglang.routed().values()) == {f"{m}.{a}" for m, a, _ in route_sglang.TARGETS}


def test_package_imported_later_gets_the_routed_functions(sg):
    """SGLang's own package __init__ (its re-exports, as srt/layers/attention/dsv4/indexer.py
    imports them), run after install(), binds the routed functions."""
    pkg = _engines.run_package_init("sglang.kernels.ops.attention.dsv4")
    for name in ("fused_q_indexer_rope_hadamard_quant", "fused_q_indexer_rope_hadamard_fp4_quant",
                 "compress_norm_rope_store"):
        assert getattr(pkg, name).__indexer_q_original__ is not None, name
    q, w, fc, pos = q_inputs(4, 9, seed=77)
    got = pkg.fused_q_indexer_rope_hadamard_quant(q, w, 0.3, fc, pos)
    want = indexer_q.quant_q("v4_fp8", q, w, 0.3, real_table(fc), pos)
    assert_same_fp8(got[0], want[0], "q_fp8 via the package")


@pytest.mark.parametrize("branch", ["cuda", "xpu", "cpu"])
@pytest.mark.parametrize("b,h,dtype", [(7, 5, torch.bfloat16), (1, 64, torch.bfloat16),
                                       (3, 13, torch.float32), (0, 4, torch.bfloat16)])
def test_q_fp8(sg, monkeypatch, branch, b, h, dtype):
    monkeypatch.setattr(sg.norm_rope, "_is_xpu", branch == "xpu")
    monkeypatch.setattr(sg.norm_rope, "_is_hip", False)
    q, w, fc, pos = q_inputs(b, h, dtype, seed=b * 100 + h)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)
        got = sg.norm_rope.fused_q_indexer_rope_hadamard_quant(q, w, 0.125, fc, pos)
    want = indexer_q.quant_q("v4_fp8", q, w, 0.125, real_table(fc), pos)
    assert got[0].dtype == torch.float8_e4m3fn and tuple(got[0].shape) == (b, h, 128)
    assert got[1].dtype == torch.float32 and tuple(got[1].shape) == (b, h, 1)
    assert_same_fp8(got[0], want[0], "q_fp8")
    assert_same_f32(got[1], want[1], "weights_out")
    assert _engines.FakeKernel.launches == []  # SGLang's kernel was not launched


@pytest.mark.parametrize("b,h", [(7, 5), (2, 64), (0, 3)])
def test_q_fp4_int8_like_sglang(sg, b, h):
    q, w, fc, pos = q_inputs(b, h, seed=7 + b)
    (q4, sf), wo = sg.norm_rope.fused_q_indexer_rope_hadamard_fp4_quant(q, w, 0.5, fc, pos)
    (q4w, sfw), wow = indexer_q.quant_q("v4_fp4", q, w, 0.5, real_table(fc), pos)
    assert q4.dtype == torch.int8 and tuple(q4.shape) == (b, h, 64)  # SGLang allocates int8
    assert sf.dtype == torch.int32 and tuple(sf.shape) == (b, h)
    assert tuple(wo.shape) == (b, h, 1)
    assert torch.equal(q4.view(torch.uint8), q4w) and torch.equal(sf, sfw)
    assert_same_f32(wo, wow, "weights_out")
    assert _engines.FakeKernel.launches == []


def test_q_hip_other_arch_handed_back_once(sg, monkeypatch):
    """HIP on an architecture other than gfx942 (here: no HIP device at all) is SGLang's: its
    own path runs (torch.ops.sgl_kernel, which this machine lacks), with one warning."""
    monkeypatch.setattr(sg.norm_rope, "_is_hip", True)
    q, w, fc, pos = q_inputs(3, 4)
    calls = []

    class _SglKernel:
        def dsv4_fused_q_indexer_rope_hadamard_quant(self, *args):
            calls.append(args)
    monkeypatch.setattr(torch.ops, "sgl_kernel", _SglKernel(), raising=False)
    with pytest.warns(HandBackWarning, match="HIP"):
        got = sg.norm_rope.fused_q_indexer_rope_hadamard_quant(q, w, 0.5, fc, pos)
    assert len(calls) == 1 and calls[0][0] is q and calls[0][1] is got[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)  # no second warning for the same reason
        sg.norm_rope.fused_q_indexer_rope_hadamard_quant(q, w, 0.5, fc, pos)
    assert len(calls) == 2


@pytest.mark.parametrize("t,h,dtype", [(5, 7, torch.bfloat16), (1, 64, torch.bfloat16),
                                       (9, 3, torch.float32)])
def test_rope_pack(sg, t, h, dtype):
    q, w, fc, pos = q_inputs(t, h, dtype, seed=t + 50)
    table = real_table(fc)  # SGLang passes the interleaved real table here
    payload, scale, weights = sg.fp4_indexer_rope.index_q_rope_pack_weights(
        q, table, pos.to(torch.int32), w, 0.0883883)
    (qw, sfw), ww = indexer_q.quant_q("sgl_v41_fp4_rope_pack", q, w, 0.0883883, table, pos)
    assert payload.dtype == torch.int8 and tuple(payload.shape) == (t * h, 64)
    assert scale.dtype == torch.int32 and tuple(scale.shape) == (t * h,)
    assert weights.dtype == torch.float32 and tuple(weights.shape) == (t, h)
    assert torch.equal(payload.view(torch.uint8).view(t, h, 64), qw)
    assert torch.equal(scale.view(t, h), sfw)
    assert_same_f32(weights, ww, "weights")


@pytest.mark.parametrize("shape", [(13, 128), (3, 5, 128), (0, 128)])
def test_fp4_quant_rne(sg, shape):
    g = torch.Generator().manual_seed(shape[0])
    x = (torch.randn(shape, generator=g) * 3).to(torch.bfloat16)
    q, sf = sg.fp4_quant.quantize_fp4_indexer_tensor(x, rne=True)
    n = x.numel() // 128
    (qw, sfw), _ = indexer_q.quant_q("sgl_v41_fp4_quant_rne", x.reshape(n, 1, 128), None, 1.0,
                                     None, None)
    assert q.dtype == torch.int8 and tuple(q.shape) == (n, 64)
    assert sf.dtype == torch.int32 and tuple(sf.shape) == (n,)
    assert torch.equal(q.view(torch.uint8), qw.view(n, 64)) and torch.equal(sf, sfw.view(n))


def test_fp4_quant_threshold_form_handed_back(sg, monkeypatch):
    """rne=False (SGLang's default) is not a recipe of the library: SGLang's own Triton kernel
    is launched (recorded here), with one warning."""
    fake = _engines.FakeKernel("_quantize_fp4_indexer_kernel")
    monkeypatch.setattr(sg.fp4_quant, "_quantize_fp4_indexer_kernel", fake)
    x = torch.randn(6, 128).to(torch.bfloat16)
    with pytest.warns(HandBackWarning, match="rne=False"):
        q, sf = sg.fp4_quant.quantize_fp4_indexer_tensor(x)
    assert [n for n, _, _ in _engines.FakeKernel.launches] == ["_quantize_fp4_indexer_kernel"]
    assert _engines.FakeKernel.launches[0][1][1] is q and _engines.FakeKernel.launches[0][1][2] is sf


# ---- the key side -----------------------------------------------------------------------------
def spec_positions_slots(plan, out_loc, is_decode, ratio):
    """Each token's (position, slot) read from the plan bytes one by one (the text of
    docs/KSIDE.md, SGLang's plan convention); slot -1 = skipped."""
    pos, slots = [], []
    raw = plan.contiguous().numpy().tobytes()
    for t in range(plan.shape[0]):
        seq_len, = struct.unpack_from("<I", raw, 16 * t)
        if is_decode:
            take, slot = seq_len % ratio == 0, int(out_loc[t])
        else:
            ragged, = struct.unpack_from("<H", raw, 16 * t + 4)
            take = seq_len != 0xFFFFFFFF and ragged < out_loc.shape[0]
            slot = int(out_loc[ragged]) if take else -1
        p = (seq_len - ratio) & 0xFFFFFFFF
        pos.append((p - 2**32 if p >= 2**31 else p) if take else 0)
        slots.append(slot if take else -1)
    return torch.tensor(pos, dtype=torch.int64), torch.tensor(slots, dtype=torch.int64)


def random_plan(n, m, is_decode, max_pos, ratio, seed):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for t in range(n):
        if is_decode:
            seq = ratio * int(torch.randint(1, max_pos // ratio + 1, (1,), generator=g))
            if t % 5 == 3:
                seq += 1  # not a multiple of the ratio: skipped
            rows.append(struct.pack("<Iiii", seq, 0, -1, -1))
        else:
            seq = 0xFFFFFFFF if t % 6 == 4 else int(torch.randint(ratio, max_pos + 1, (1,),
                                                                  generator=g))
            ragged = int(torch.randint(0, m, (1,), generator=g))
            rows.append(struct.pack("<IHHii", seq, ragged, 0, -1, -1))
    return torch.frombuffer(bytearray(b"".join(rows)), dtype=torch.uint8).view(n, 16).clone()


@pytest.mark.parametrize("use_fp4", [False, True])
@pytest.mark.parametrize("is_decode", [True, False])
@pytest.mark.parametrize("kv_dtype,w_dtype,loc_dtype", [
    (torch.float32, torch.float32, torch.int64), (torch.bfloat16, torch.float32, torch.int32),
    (torch.float32, torch.bfloat16, torch.int32), (torch.float16, torch.float16, torch.int16)])
@pytest.mark.parametrize("branch", ["cuda", "xpu"])
def test_kside_store(sg, monkeypatch, use_fp4, is_decode, kv_dtype, w_dtype, loc_dtype, branch):
    monkeypatch.setattr(sg.compress, "_is_xpu", branch == "xpu")
    n, page, pages, max_pos, ratio = 19, 64, 3, 41, 4
    m = n if is_decode else n + 6
    g = torch.Generator().manual_seed(n + use_fp4 * 2 + is_decode)
    kv = (torch.randn((n, 128), generator=g) * 4).to(kv_dtype)
    norm_w = (1 + 0.25 * torch.randn(128, generator=g)).to(w_dtype)
    fc = freqs_cis(max_pos + 1, 3)
    perm = torch.randperm(pages * page, generator=g)[:m]
    perm[2] = -1  # engines pad with -1
    out_loc = perm.to(loc_dtype)
    raw = random_plan(n, m, is_decode, max_pos, ratio, 11)
    plan = (sg.compress.CompressorDecodePlan(ratio, raw) if is_decode
            else sg.compress.CompressorPrefillPlan(ratio, raw, torch.zeros((n, 8), dtype=torch.uint8)))
    width = 68 if use_fp4 else 132
    cache = torch.full((pages, width * page), 0xA5, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HandBackWarning)
        sg.compress.compress_norm_rope_store(
            kv, plan, norm_weight=norm_w, norm_eps=1e-6, freq_cis=fc, out_loc=out_loc,
            kvcache=cache, page_size=page, use_fp4=use_fp4)
    pos, slots = spec_positions_slots(raw, perm.to(torch.int64), is_decode, ratio)
    want = torch.full_like(cache, 0xA5)
    indexer_q.kside_store("v4_k_fp4" if use_fp4 else "v4_k_fp8", kv, norm_w.to(kv_dtype), 1e-6,
                          real_table(fc), pos, slots, want, page)
    assert int((slots >= 0).sum()) > n // 2
    assert torch.equal(cache, want)
    assert _engines.FakeKernel.launches == []


def kside_golden():
    d = os.path.join(GOLDEN_DIR, "kside")
    return sorted(f for f in os.listdir(d) if f.startswith("kside_"))


@pytest.mark.parametrize("name", kside_golden())
def test_kside_golden_through_sglang(sg, name):
    """SGLang's call with its plan object, an int32 out_loc and the complex freq_cis gives the
    golden cache of SGLang's own kernel (slot -1 skipped: docs/KSIDE.md's bounds rule)."""
    t, meta = read_safetensors(os.path.join(GOLDEN_DIR, "kside", name))
    eps = torch.tensor([int(meta["eps_bits"], 16)], dtype=torch.int32).view(torch.float32).item()
    ratio = int(meta["compress_ratio"])
    plan = (sg.compress.CompressorDecodePlan(ratio, t["plan"]) if meta["mode"] == "decode"
            else sg.compress.CompressorPrefillPlan(ratio, t["plan"], None))
    cache = torch.full_like(t["kvcache"], int(meta["cache_fill"], 16))
    sg.compress.compress_norm_rope_store(
        t["input"], plan, norm_weight=t["weight"], norm_eps=eps,
        freq_cis=torch.view_as_complex(t["freqs_cis"].view(-1, 32, 2)),
        out_loc=t["out_loc"].to(torch.int32), kvcache=cache, page_size=int(meta["page_size"]),
        use_fp4=meta["variant"] == "v4_k_fp4")
    assert torch.equal(cache, t["kvcache"])


@pytest.mark.parametrize("kwargs,reason", [
    ({"bf16_store": True}, "bf16_store"), ({"layout": "v41"}, "layout"),
    ({"fp8_2buff": True, "kvcache_rope": torch.zeros(1)}, "fp8_2buff")])
def test_kside_other_stores_handed_back(sg, kwargs, reason):
    n = 3
    kv = torch.randn((n, 128))
    raw = random_plan(n, n, True, 20, 4, 1)
    cache = torch.full((1, 132 * 64), 0xA5, dtype=torch.uint8)
    if reason == "layout":
        kv = torch.randn((n, 512))  # the V4.1 main-KV store
    with pytest.warns(HandBackWarning, match=reason):
        try:
            sg.compress.compress_norm_rope_store(
                kv, sg.compress.CompressorDecodePlan(4, raw), norm_weight=torch.ones(kv.shape[1]),
                norm_eps=1e-6, freq_cis=freqs_cis(21, 0), out_loc=torch.arange(n),
                kvcache=cache, page_size=64, **kwargs)
        except AssertionError:
            assert reason == "fp8_2buff"  # SGLang's own assertion (its store is the latent's)
            return
    assert len(_engines.FakeKernel.launches) == 1  # SGLang's JIT kernel, launched
    assert torch.all(cache == 0xA5)  # nothing written by indexer_q


# ---- the golden files of the forms SGLang calls, through SGLang's functions -----------------------
_SG_GOLDEN = ("v4_fp8", "v4_fp4", "sgl_v41_fp4_rope_pack", "sgl_v41_fp4_quant_rne")


@pytest.mark.parametrize("rel,recipe", [c for c in golden_recipe_cases() if c[1] in _SG_GOLDEN])
def test_golden_through_sglang(sg, rel, recipe):
    x, ws, hs, want = load_golden(rel, recipe)
    q = x["q_input"]
    b, h = q.shape[0], q.shape[1]
    if recipe in ("v4_fp8", "v4_fp4"):
        fc = torch.view_as_complex(x["freqs"].contiguous().view(-1, 32, 2))
        fn = (sg.norm_rope.fused_q_indexer_rope_hadamard_quant if recipe == "v4_fp8"
              else sg.norm_rope.fused_q_indexer_rope_hadamard_fp4_quant)
        res = fn(q, x["weight"], ws, fc, x["positions"])
        if recipe == "v4_fp8":
            got = (res[0], None, res[1])
        else:
            got = (res[0][0].view(torch.uint8), res[0][1], res[1])
    elif recipe == "sgl_v41_fp4_rope_pack":
        p, s, w = sg.fp4_indexer_rope.index_q_rope_pack_weights(q, x["freqs"], x["positions"],
                                                                x["weight"], ws)
        got = (p.view(torch.uint8).view(b, h, 64), s.view(b, h), w)
    else:
        p, s = sg.fp4_quant.quantize_fp4_indexer_tensor(q, rne=True)
        got = (p.view(torch.uint8).view(b, h, 64), s.view(b, h), None)
    assert_same_outputs(got, want, f"{rel} via SGLang")
