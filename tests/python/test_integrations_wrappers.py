"""The engine-facing wrappers accept the engines' call shapes (docs/INTEGRATIONS.md), byte for byte
the direct recipe / operator call, and refuse what is no form of the library naming the argument.
No engine needed (test_integrations_sglang / _vllm run the engines' own modules)."""

from collections import namedtuple

import pytest
import torch

import indexer_q

DecodePlan = namedtuple("DecodePlan", "compress_ratio plan_d")  # SGLang's shapes of plan objects
PrefillPlan = namedtuple("PrefillPlan", "compress_ratio plan_c plan_w pin_buffer")


def kside_case(n=9, m=None, decode=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    m = m or n
    kv = torch.randn((n, 128), generator=g) * 3
    w = 1 + 0.25 * torch.randn(128, generator=g)
    ang = torch.rand((40, 32), generator=g, dtype=torch.float64) * 30
    fc = torch.polar(torch.ones_like(ang), ang).to(torch.complex64)
    seq = (torch.randint(1, 10, (n,), generator=g) * 4).to(torch.int32)
    plan = torch.zeros((n, 4), dtype=torch.int32)
    plan[:, 0] = seq
    if not decode:
        plan[:, 1] = torch.randint(0, m, (n,), generator=g, dtype=torch.int32)
    plan = plan.view(torch.uint8).view(n, 16)
    out_loc = torch.randperm(128, generator=g)[:m]
    return kv, w, fc, plan, out_loc


@pytest.mark.parametrize("decode", [True, False])
@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int16, torch.uint8])
def test_out_loc_any_integer_dtype_and_plan_object(decode, loc_dtype):
    kv, w, fc, plan, out_loc = kside_case(decode=decode, m=9 if decode else 12)
    want = torch.full((2, 132 * 64), 0xA5, dtype=torch.uint8)
    indexer_q.compress_norm_rope_store(kv, plan, norm_weight=w, norm_eps=1e-6, freq_cis=fc,
                                       out_loc=out_loc, kvcache=want, page_size=64,
                                       is_decode=decode)
    obj = DecodePlan(4, plan) if decode else PrefillPlan(4, plan, None, None)
    got = torch.full_like(want, 0xA5)
    indexer_q.compress_norm_rope_store(kv, obj, norm_weight=w, norm_eps=1e-6, freq_cis=fc,
                                       out_loc=out_loc.to(loc_dtype), kvcache=got, page_size=64)
    assert torch.equal(got, want) and not torch.all(want == 0xA5)


def test_norm_weight_cast_to_kv_dtype():
    kv, w, fc, plan, out_loc = kside_case(seed=3)
    kv = kv.to(torch.bfloat16)
    got, want = (torch.full((2, 68 * 64), 0xA5, dtype=torch.uint8) for _ in range(2))
    indexer_q.compress_norm_rope_store(kv, plan, norm_weight=w, norm_eps=1e-6, freq_cis=fc,
                                       out_loc=out_loc, kvcache=got, page_size=64, use_fp4=True,
                                       is_decode=True)
    indexer_q.compress_norm_rope_store(kv, plan, norm_weight=w.to(torch.bfloat16), norm_eps=1e-6,
                                       freq_cis=fc, out_loc=out_loc, kvcache=want, page_size=64,
                                       use_fp4=True, is_decode=True)
    assert torch.equal(got, want)


@pytest.mark.parametrize("kwargs,arg", [({"preshuffle_size": 16}, "preshuffle_size"),
                                        ({"use_bf16_store": True}, "use_bf16_store"),
                                        ({"bf16_store": True}, "bf16_store"),
                                        ({"is_decode": False}, "is_decode"),
                                        ({"compress_ratio": 128}, "compress_ratio")])
def test_kside_refusals_name_the_argument(kwargs, arg):
    kv, w, fc, plan, out_loc = kside_case()
    cache = torch.full((2, 132 * 64), 0xA5, dtype=torch.uint8)
    with pytest.raises(ValueError, match=arg):
        indexer_q.compress_norm_rope_store(kv, DecodePlan(4, plan), norm_weight=w, norm_eps=1e-6,
                                           freq_cis=fc, out_loc=out_loc, kvcache=cache,
                                           page_size=64, **kwargs)
    assert torch.all(cache == 0xA5)
    with pytest.raises(TypeError, match="out_loc"):
        indexer_q.compress_norm_rope_store(kv, plan, norm_weight=w, norm_eps=1e-6, freq_cis=fc,
                                           out_loc=out_loc.float(), kvcache=cache, page_size=64)


def vllm_case(t=6, h=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn((t, h, 128), generator=g).to(torch.bfloat16)
    w = torch.randn((t, h), generator=g).to(torch.bfloat16)
    ang = torch.rand((23, 32), generator=g, dtype=torch.float64) * 30
    cache = torch.cat([ang.cos(), ang.sin()], 1).to(torch.float32)
    return torch.randint(0, 23, (t,), generator=g), q, cache, w


@pytest.mark.parametrize("use_fp4", [False, True])
def test_vllm_keywords_and_bf16_table(use_fp4):
    pos, q, cache, w = vllm_case()
    sm, hs = 128 ** -0.5, 7 ** -0.5
    want = indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, sm, hs, use_fp4)
    kw = indexer_q.fused_indexer_q_rope_quant(
        positions=pos, index_q=q, index_q_cos_sin_cache=cache, index_weights=w,
        index_weights_softmax_scale=sm, index_weights_head_scale=hs, use_fp4=use_fp4)
    short = indexer_q.fused_indexer_q_rope_quant(pos, q, cos_sin_cache=cache, index_weights=w,
                                                 softmax_scale=sm, head_scale=hs,
                                                 use_fp4=use_fp4)
    t16 = cache.to(torch.bfloat16)
    b16 = indexer_q.fused_indexer_q_rope_quant(pos, q, t16, w, sm, hs, use_fp4)
    b16_want = indexer_q.quant_q("vllm_v4_mxfp4" if use_fp4 else "vllm_v4_fp8", q, w, sm,
                                 t16.float(), pos, head_scale=hs)
    flat = lambda r: [x.view(torch.uint8) if x.dtype.itemsize == 1 else x  # noqa: E731
                      for x in (list(r[0]) if isinstance(r[0], tuple) else [r[0]]) + [r[1]]]
    for res, ref in ((kw, want), (short, want), (b16, b16_want)):
        for a, b in zip(flat(res), flat(ref)):
            assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_vllm_bf16_weights_out():
    pos, q, cache, w = vllm_case(seed=4)
    (q4, sf), wb = indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, 0.1, 0.3, True,
                                                        torch.bfloat16)
    (q4w, sfw), wf = indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, 0.1, 0.3, True)
    assert wb.dtype == torch.bfloat16 and wf.dtype == torch.float32
    assert torch.equal(q4, q4w) and torch.equal(sf, sfw)
    assert torch.equal(wb.view(torch.int16), wf.to(torch.bfloat16).view(torch.int16))
    with pytest.raises(ValueError, match="weights_out_dtype"):
        indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, 0.1, 0.3, False, torch.bfloat16)
    with pytest.raises(ValueError, match="weights_out_dtype"):
        indexer_q.fused_indexer_q_rope_quant_cutedsl(pos, q, cache, w, 0.1, 0.3,
                                                     weights_out_dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="given twice"):
        indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, 0.1, 0.3, softmax_scale=0.1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        indexer_q.fused_indexer_q_rope_quant(pos, q, cache, w, 0.1, 0.3, weights=w)


def test_sglang_fp4_wrapper_returns_int8():
    pos, q, cache, w = vllm_case(seed=2)
    inter = torch.stack([cache[:, :32], cache[:, 32:]], -1).reshape(-1, 64).contiguous()
    (q4, sf), wo = indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(q, w, 0.25, inter, pos)
    (q4w, sfw), wow = indexer_q.quant_q("v4_fp4", q, w, 0.25, inter, pos)
    assert q4.dtype == torch.int8 and q4w.dtype == torch.uint8
    assert torch.equal(q4.view(torch.uint8), q4w) and torch.equal(sf, sfw)
    assert torch.equal(wo, wow)


def test_fp4_quant_takes_any_leading_dims():
    x = torch.randn((3, 5, 128)).to(torch.bfloat16)
    q, sf = indexer_q.quantize_fp4_indexer_tensor(x)
    q2, sf2 = indexer_q.quantize_fp4_indexer_tensor(x.reshape(15, 128))
    assert tuple(q.shape) == (15, 64) and torch.equal(q, q2) and torch.equal(sf, sf2)


def test_sgl_kernel_xpu_entry_points():
    """sgl-kernel-xpu's signatures (positional, plan tensor, int32 out_loc, preshuffle_size and
    use_bf16_store keywords) give the bytes of the library's call."""
    from indexer_q.integrations import sgl_kernel_xpu as xpu
    kv, w, fc, plan, out_loc = kside_case(seed=6)
    real = torch.view_as_real(fc).flatten(-2)
    got, want = (torch.full((2, 132 * 64), 0xA5, dtype=torch.uint8) for _ in range(2))
    xpu.compress_norm_rope_store(kv, plan, w, 1e-6, real, out_loc.to(torch.int32), got, True, 4,
                                 64, False, preshuffle_size=0, use_bf16_store=False)
    indexer_q.compress_norm_rope_store(kv, plan, norm_weight=w, norm_eps=1e-6, freq_cis=fc,
                                       out_loc=out_loc, kvcache=want, page_size=64,
                                       is_decode=True, compress_ratio=4)
    assert torch.equal(got, want)
    for kwargs, arg in (({"preshuffle_size": 16}, "preshuffle_size"),
                        ({"use_bf16_store": True}, "use_bf16_store")):
        with pytest.raises(ValueError, match=arg):
            xpu.compress_norm_rope_store(kv, plan, w, 1e-6, real, out_loc, got, True, 4, 64,
                                         False, **kwargs)
    with pytest.raises(ValueError, match="FlashMLA"):
        xpu.compress_norm_rope_store(torch.zeros(3, 512), plan[:3], torch.ones(512), 1e-6, real,
                                     out_loc[:3], got, True, 4, 64, False)
    pos, q, _, qw = vllm_case(seed=12)
    q8 = torch.empty(q.shape, dtype=torch.float8_e4m3fn)
    wo = torch.empty((*q.shape[:-1], 1), dtype=torch.float32)
    xpu.fused_q_indexer_rope_hadamard_quant(q, q8, qw, wo, 0.5, real, pos.to(torch.int32) % 40)
    want_q, want_w = indexer_q.quant_q("v4_fp8", q, qw, 0.5, real, pos % 40)
    assert torch.equal(q8.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(wo, want_w)
