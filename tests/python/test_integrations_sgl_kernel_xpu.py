"""indexer_q.integrations.sgl_kernel_xpu.install(): code written for sgl-kernel-xpu (``from
sgl_kernel import ...``) gets the family's two functions from indexer_q, byte for byte the library's
call, whether sgl_kernel is absent (this module is registered under the name) or installed (its
functions are routed, a call that is no form of the library handed back to it)."""

import sys
import types
import warnings

import pytest
import torch

import indexer_q
from indexer_q.integrations import HandBackWarning
from indexer_q.integrations import sgl_kernel_xpu as xpu

from test_integrations_wrappers import kside_case, vllm_case


@pytest.fixture
def clean_sgl_kernel():
    saved = sys.modules.pop("sgl_kernel", None)
    yield
    xpu.uninstall()
    sys.modules.pop("sgl_kernel", None)
    if saved is not None:
        sys.modules["sgl_kernel"] = saved


def _q_call(fn, seed):
    pos, q, _, qw = vllm_case(seed=seed)
    ang = torch.rand((40, 32), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    real = torch.view_as_real(torch.polar(torch.ones_like(ang), ang * 30).to(torch.complex64))
    real = real.flatten(-2)
    q8 = torch.empty(q.shape, dtype=torch.float8_e4m3fn)
    wo = torch.empty((*q.shape[:-1], 1), dtype=torch.float32)
    # sgl-kernel-xpu's own test passes int32 positions
    fn(q, q8, qw, wo, 0.5, real, (pos % 40).to(torch.int32))
    want_q, want_w = indexer_q.quant_q("v4_fp8", q, qw, 0.5, real, pos % 40)
    return q8, wo, want_q, want_w


def test_registered_as_sgl_kernel_where_none_is_installed(clean_sgl_kernel, monkeypatch):
    import importlib.util
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sgl_kernel" else real_find(name, *a))
    assert xpu.install() == {"sgl_kernel": None}
    assert xpu.install() == {"sgl_kernel": None}  # idempotent
    from sgl_kernel import compress_norm_rope_store, fused_q_indexer_rope_hadamard_quant
    assert compress_norm_rope_store is xpu.compress_norm_rope_store
    q8, wo, want_q, want_w = _q_call(fused_q_indexer_rope_hadamard_quant, seed=21)
    assert torch.equal(q8.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(wo, want_w)
    assert xpu.uninstall() == 1
    assert "sgl_kernel" not in sys.modules


def test_installed_sgl_kernel_is_routed_and_hands_back(clean_sgl_kernel):
    launches = []

    def compress_norm_rope_store(input, plan, norm_weight, norm_eps, freq_cis, out_loc, kvcache,
                                 is_decode, compress_ratio, page_size, use_fp4,
                                 preshuffle_size=0, use_bf16_store=False):
        launches.append(("store", preshuffle_size, use_bf16_store))

    def fused_q_indexer_rope_hadamard_quant(q_input, q_fp8, weight, weights_out, weight_scale,
                                            freqs_real, positions):
        launches.append(("q",))

    fake = types.ModuleType("sgl_kernel")
    fake.compress_norm_rope_store = compress_norm_rope_store
    fake.fused_q_indexer_rope_hadamard_quant = fused_q_indexer_rope_hadamard_quant
    sys.modules["sgl_kernel"] = fake
    report = xpu.install()
    assert report == {"sgl_kernel.fused_q_indexer_rope_hadamard_quant": None,
                      "sgl_kernel.compress_norm_rope_store": None}
    assert set(xpu.routed()) == {"sgl_kernel.fused_q_indexer_rope_hadamard_quant",
                                 "sgl_kernel.compress_norm_rope_store"}

    # served: the bytes of the library's call, the installed kernel not launched
    q8, wo, want_q, want_w = _q_call(fake.fused_q_indexer_rope_hadamard_quant, seed=22)
    assert torch.equal(q8.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(wo, want_w)
    kv, w, fc, plan, out_loc = kside_case(seed=23)
    real = torch.view_as_real(fc).flatten(-2)
    got, want = (torch.full((2, 132 * 64), 0xA5, dtype=torch.uint8) for _ in range(2))
    fake.compress_norm_rope_store(kv, plan, w, 1e-6, real, out_loc.to(torch.int32), got, True, 4,
                                  64, False)
    indexer_q.compress_norm_rope_store(kv, plan, norm_weight=w, norm_eps=1e-6, freq_cis=fc,
                                       out_loc=out_loc, kvcache=want, page_size=64,
                                       is_decode=True, compress_ratio=4)
    assert torch.equal(got, want) and launches == []

    # the tiled layout is no form of the library: the installed kernel runs, one warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            fake.compress_norm_rope_store(kv, plan, w, 1e-6, real, out_loc, got, True, 4, 64,
                                          False, preshuffle_size=16)
    assert launches == [("store", 16, False)] * 2
    assert len([c for c in caught if issubclass(c.category, HandBackWarning)]) == 1

    assert xpu.uninstall() == 2
    assert fake.compress_norm_rope_store is compress_norm_rope_store


@pytest.mark.parametrize("n", [1, 16, 96])
@pytest.mark.parametrize("use_fp4", [False, True])
def test_key_store_call_shape_of_sgl_kernel_xpus_test(n, use_fp4):
    """The call sgl-kernel-xpu's key-side test makes (every token a decode event, seq_len = 4 (t + 1);
    plan[1] the tensor with is_decode and compress_ratio by keyword; int32 out_loc 0..n-1; the
    float32 (max_pos, 64) view of freqs_cis; bf16 kv and norm_weight; 132- or 68-byte rows, 64 per
    page; n = 96 spans two pages): the bytes of the library's call with the plan object's values."""
    g = torch.Generator().manual_seed(100 + n)
    kv = torch.randn((n, 128), generator=g).to(torch.bfloat16)
    w = torch.randn(128, generator=g).to(torch.bfloat16)
    ang = torch.rand((4 * n + 1, 32), generator=g, dtype=torch.float64) * 30
    fc = torch.polar(torch.ones_like(ang), ang).to(torch.complex64)
    words = torch.zeros((n, 4), dtype=torch.int32)
    words[:, 0] = torch.arange(1, n + 1, dtype=torch.int32) * 4
    plan = words.view(torch.uint8).view(n, 16)
    pages, row = (n + 63) // 64, 68 if use_fp4 else 132
    got, want = (torch.full((pages, row * 64), 0xA5, dtype=torch.uint8) for _ in range(2))
    xpu.compress_norm_rope_store(kv.clone(), plan, norm_weight=w, norm_eps=1e-6,
                                 freq_cis=torch.view_as_real(fc).flatten(-2),
                                 out_loc=torch.arange(n, dtype=torch.int32), kvcache=got,
                                 is_decode=True, compress_ratio=4, page_size=64, use_fp4=use_fp4,
                                 preshuffle_size=0, use_bf16_store=False)
    indexer_q.compress_norm_rope_store(kv, plan, norm_weight=w, norm_eps=1e-6, freq_cis=fc,
                                       out_loc=torch.arange(n), kvcache=want, page_size=64,
                                       use_fp4=use_fp4, is_decode=True, compress_ratio=4)
    assert torch.equal(got, want)
    assert not torch.equal(got, torch.full_like(got, 0xA5))  # every token was written
