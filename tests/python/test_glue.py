"""The shared torch/Python glue (python/indexer_q/_glue.py, bindings/torch/op_glue.h): the
operators' descriptions drive the fakes and the routing table; quant_q_alloc reading SGLang's
complex64 table gives the bytes and the errors of the view path; routed engine calls bind once."""

import pytest
import torch

import indexer_q
from indexer_q import _glue, _ops, routing


def _bytes(x):
    if isinstance(x, tuple):
        return tuple(_bytes(y) for y in x)
    if x is None:
        return None
    return (x.dtype, tuple(x.shape), x.contiguous().view(torch.uint8).reshape(-1).tolist())


def _inputs(t=3, h=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(t, h, 128, generator=g) * 3).to(torch.bfloat16)
    w = torch.randn(t, h, generator=g).to(torch.bfloat16)
    freqs = torch.randn(64, 64, generator=g)
    pos = torch.randint(0, 64, (t,), generator=g)
    return q, w, freqs, pos


def test_routing_table_is_the_glue_ops():
    assert routing.OPS == tuple(s.name for s in _glue.OPS)
    assert routing.OPS == ("quant_q", "fused_q_indexer_rope_hadamard_quant", "kside_store")
    triton = {s.name for s in _glue.OPS if s.triton}
    assert triton == {"quant_q", "fused_q_indexer_rope_hadamard_quant"}
    # a device type no build has a native kernel for (a CUDA build routes "cuda" natively)
    why = routing.route("kside_store", "xpu").why
    assert why.endswith("and the key side has no Triton kernel")


@pytest.mark.parametrize("spec", _glue.OPS, ids=lambda s: s.name)
def test_every_spec_has_a_fake_on_it_and_its_twins(spec):
    # a call with one tensor on meta and one on the CPU reaches the fake, which names the argument
    # that is not on the first tensor's device
    names = [spec.name, *spec.twins]
    args = [torch.empty(2, device="meta") if n in ("q_input", "input") else
            torch.empty(2) if n in ("q_out", "q_fp8", "kvcache") else
            "v4_fp8" if n == "recipe" and spec.side == "query" else
            "v4_k_fp8" if n == "recipe" else
            0.5 if n in ("weight_scale", "eps") else
            torch.empty(0, device="meta") for n in spec.args]
    if spec.name == "kside_store":
        args.append(1)  # page_size
    for n in names:
        op = getattr(torch.ops.indexer_q, n).default
        with pytest.raises(RuntimeError, match="expected the device of"):
            op(*args)


def test_recipe_at_messages():
    with pytest.raises(RuntimeError, match=r"index of a recipe in the library's list \(0 to "):
        _glue.recipe_at(indexer_q.RECIPES, len(indexer_q.RECIPES))
    with pytest.raises(RuntimeError, match=r"index of a key-side recipe"):
        _glue.recipe_at(("a", "b"), -1, "key-side ")
    assert _glue.recipe_at(("a", "b"), 1) == "b"


@pytest.mark.parametrize("recipe", [r for r in indexer_q.RECIPES
                                    if indexer_q.recipe_info(r).rope
                                    and indexer_q.recipe_info(r).freqs_layout == "interleaved"])
def test_complex_table_same_bytes(recipe):
    q, w, freqs, pos = _inputs()
    info = indexer_q.recipe_info(recipe)
    cis = torch.view_as_complex(freqs.view(64, 32, 2))
    wt = w if info.weights else None
    a = indexer_q.quant_q(recipe, q, wt, 0.25, freqs, pos, head_scale=0.5)
    b = indexer_q.quant_q(recipe, q, wt, 0.25, cis, pos, head_scale=0.5)
    assert _bytes(a) == _bytes(b)
    if recipe == "v4_fp8":
        a = indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, 0.25, freqs, pos)
        b = indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, 0.25, cis, pos)
        assert _bytes(a) == _bytes(b)


def _bad_tables():
    g = torch.Generator().manual_seed(1)
    good = torch.view_as_complex(torch.randn(64, 32, 2, generator=g))
    return [torch.view_as_complex(torch.randn(64, 16, 2, generator=g)),  # shape
            good.t(),                                                   # shape (32, 64)
            good[::2],                                                  # not contiguous
            good.to(torch.complex128)]                                  # dtype


@pytest.mark.parametrize("k", range(4))
def test_complex_table_errors_as_freqs_table(k):
    bad = _bad_tables()[k]
    q, w, _, pos = _inputs()
    with pytest.raises((TypeError, ValueError)) as want:
        _glue.freqs_table(bad)
    for call in (lambda: indexer_q.quant_q("v4_fp8", q, w, 0.25, bad, pos),
                 lambda: indexer_q.quant_q("v4_fp4", q, w, 0.25, bad, pos),
                 lambda: indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, 0.25, bad, pos),
                 lambda: indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(q, w, 0.25, bad, pos)):
        with pytest.raises(type(want.value)) as got:
            call()
        assert str(got.value) == str(want.value)


def test_complex_table_with_another_bad_argument():
    # the binding refuses the call for another argument: the same error as with the real table
    q, w, freqs, pos = _inputs()
    cis = torch.view_as_complex(freqs.view(64, 32, 2))
    for table in (freqs, cis):
        with pytest.raises(RuntimeError, match=r"indexer_q: weight: expected shape"):
            indexer_q.quant_q("v4_fp8", q, w[:, :2], 0.25, table, pos)
        with pytest.raises(RuntimeError, match=r"indexer_q: weight: expected shape"):
            indexer_q.fused_q_indexer_rope_hadamard_quant(q, w[:, :2], 0.25, table, pos)


@pytest.mark.parametrize("recipe", indexer_q.RECIPES)
def test_scalar_conversions_same_bytes(recipe):
    # head_scale as an int is converted to the Python float the op takes: the same call
    q, w, freqs, pos = _inputs(seed=2)
    info = indexer_q.recipe_info(recipe)
    args = (q, w if info.weights else None, 0.25, freqs if info.rope else None,
            pos if info.rope else None)
    for out_dtype in (None, torch.uint8, torch.int8):
        a = indexer_q.quant_q(recipe, *args, out_dtype=out_dtype, head_scale=1.0)
        b = indexer_q.quant_q(recipe, *args, out_dtype=out_dtype, head_scale=1)
        assert _bytes(a) == _bytes(b)


def test_allocating_path_errors():
    q, w, freqs, pos = _inputs()
    with pytest.raises(ValueError, match=r"q_input: expected 3 dims \(B, H, 128\), got 2"):
        indexer_q.quant_q("v4_fp8", q[0], w, 0.25, freqs, pos)
    with pytest.raises(TypeError, match=r"weight: recipe v4_fp8 reads it"):
        indexer_q.quant_q("v4_fp8", q, None, 0.25, freqs, pos)
    with pytest.raises(RuntimeError, match=r"weight_scale"):
        indexer_q.quant_q("v4_fp8", q, w, float("nan"), freqs, pos)
    with pytest.raises(RuntimeError, match=r"has no RoPE"):
        indexer_q.quant_q("sgl_v41_fp4_quant_rne", q, None, 1.0, freqs, pos)


def test_routed_binder_positional_and_keyword_adapters():
    import sys
    import types
    import warnings

    from indexer_q.integrations import _route

    def engine_fn(a, b, c=3, *, d=4):
        return ("engine", a, b, c, d)

    def same_order(module, a, b, c, d):  # called positionally
        return ("ours", a, b, c, d)

    def other_order(module, d, c, b, a):  # called by keyword
        if a < 0:
            raise ValueError("refused")
        return ("ours", a, b, c, d)

    for adapter in (same_order, other_order):
        name = f"indexer_q_test_glue_{adapter.__name__}"
        mod = types.ModuleType(name)
        mod.engine_fn = engine_fn
        sys.modules[name] = mod
        try:
            assert _route.route((name,), name, "engine_fn", adapter) is None
            fn = mod.engine_fn
            assert fn(1, 2) == ("ours", 1, 2, 3, 4)
            assert fn(1, b=2, d=5) == ("ours", 1, 2, 3, 5)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with pytest.raises(TypeError):  # malformed: the engine's own error, no warning
                    fn(1)
                with pytest.raises(TypeError):
                    fn(1, 2, e=1)
            if adapter is other_order:
                with pytest.warns(_route.HandBackWarning):
                    assert fn(-1, 2) == ("engine", -1, 2, 3, 4)
        finally:
            _route.unroute((name,))
            del sys.modules[name]
