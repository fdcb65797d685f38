"""The operator as torch sees it: schema, dispatch, opcheck, torch.compile, meta, threads."""

import pytest
import torch

import indexer_q
from conftest import (CUDA_OK, DEVICES, COMPOSED, NATIVE, QUANT, QUANT_COMPOSED, QUANT_REFERENCE,
                      RECIPES, assert_same_f32, assert_same_fp8, assert_same_outputs, new_outputs,
                      new_recipe_outputs)
from test_composed_vs_native import make_case


def test_schema_defined_once_with_mutation_annotations():
    s = str(NATIVE.default._schema)
    assert s == (
        "indexer_q::fused_q_indexer_rope_hadamard_quant(Tensor q_input, Tensor(a!) q_fp8, "
        "Tensor weight, Tensor(b!) weights_out, float weight_scale, Tensor freqs, "
        "Tensor positions, bool enable_pdl=True, *, bool side_inputs_ready=False) -> ()"), s
    assert str(COMPOSED.default._schema) == s.replace(
        "fused_q_indexer_rope_hadamard_quant(", "fused_q_indexer_rope_hadamard_quant_composed(")


def test_dispatch_registrations():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    name = "indexer_q::fused_q_indexer_rope_hadamard_quant"
    assert has(name, "CPU")
    assert has(name, "XPU")
    assert has(name, "CompositeExplicitAutograd")
    b = indexer_q.available_backends()
    assert b["cpu"] == "native"
    # XPU, and CUDA without the CUDA backend: the Python kernel registered from the routing table
    # (Triton where it serves the device, else composed; tests/python/test_triton.py,
    # tests/python/test_routing.py)
    from indexer_q import routing, triton_dispatch

    assert routing.ROUTES[("quant_q", "xpu")].impl == "triton"
    assert b["xpu"] == triton_dispatch.path_for("xpu")
    if "cuda" not in routing.native_devices():
        assert b["cuda"] == triton_dispatch.path_for("cuda")
    else:
        assert b["cuda"] == "native" and has(name, "CUDA")
    assert b["other"] == "composed"


def _args(device, B=5, H=8, dtype=torch.bfloat16):
    q, w, ws, freqs, pos = make_case(B, H, dtype, torch.int64, 3, seed=11)
    q, w, freqs, pos = (t.to(device) for t in (q, w, freqs, pos))
    q_fp8, w_out = new_outputs(q)
    return (q, q_fp8, w, w_out, ws, freqs, pos)


@pytest.fixture
def fp8_aware_allclose(monkeypatch):
    # opcheck's test_schema (SchemaCheckMode) compares every argument before and after the call
    # with torch.allclose, which has no float8 kernel; compare float8 tensors bit for bit instead.
    orig = torch.allclose

    def allclose(a, b, *args, **kwargs):
        if a.dtype == torch.float8_e4m3fn and b.dtype == torch.float8_e4m3fn:
            return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        return orig(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [NATIVE, COMPOSED], ids=["native", "composed"])
def test_opcheck(op, device, fp8_aware_allclose):
    # test_schema, test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic
    torch.library.opcheck(op.default, _args(device))
    torch.library.opcheck(op.default, _args(device, B=0))
    torch.library.opcheck(op.default, _args(device, B=3, H=2, dtype=torch.float32),
                          {"enable_pdl": True})


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    q, _, w, _, ws, freqs, pos = _args(device, B=7, H=16)

    def f(q, w, freqs, pos):
        q_fp8, w_out = indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, ws, freqs, pos)
        return q_fp8, w_out * 2.0  # something for the compiler to fuse around the op

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    q1, w1 = compiled(q, w, freqs, pos)
    q2, w2 = f(q, w, freqs, pos)
    assert_same_fp8(q1, q2, "compiled q_fp8")
    assert_same_f32(w1, w2, "compiled weights_out")


def test_meta_tensors_trace_without_data():
    q, _, w, _, ws, freqs, pos = (a.to("meta") if isinstance(a, torch.Tensor) else a
                                  for a in _args("cpu"))
    q_fp8, w_out = indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, ws, freqs, pos)
    assert q_fp8.device.type == "meta" and tuple(q_fp8.shape) == (5, 8, 128)
    assert w_out.device.type == "meta" and tuple(w_out.shape) == (5, 8, 1)
    assert q_fp8.dtype == torch.float8_e4m3fn and w_out.dtype == torch.float32


def test_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    real = _args("cpu")
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in real]
        NATIVE(*fake)


def test_result_independent_of_torch_threads():
    old = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            a = _args("cpu", B=333, H=16)
            NATIVE(*a)
            outs.append((a[1], a[3]))
        for q8, wo in outs[1:]:
            assert_same_fp8(q8, outs[0][0], "threads q_fp8")
            assert_same_f32(wo, outs[0][1], "threads weights_out")
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("device", DEVICES)
def test_enable_pdl_gives_the_same_bytes(device):
    a = _args(device)
    b = _args(device)
    NATIVE(*a)
    NATIVE(*b, enable_pdl=True)
    assert_same_fp8(a[1], b[1], "pdl q_fp8")
    assert_same_f32(a[3], b[3], "pdl weights_out")


def test_library_is_loaded_from_the_package_or_override():
    import os
    assert os.path.exists(indexer_q.library_path)
    assert os.path.basename(indexer_q.library_path).startswith("_indexer_q_ops")


# ---- side_inputs_ready: the CUDA backend's opt-in, accepted and ignored everywhere else ----------
def test_side_inputs_ready_is_a_trailing_keyword_only_argument():
    # keyword-only with a default, after every existing argument: calls written for the old
    # schemas (positional or by keyword) keep working, and no positional bool can land in it
    for op in (NATIVE, COMPOSED, QUANT, QUANT_COMPOSED, QUANT_REFERENCE,
               torch.ops.indexer_q.quant_q_check, torch.ops.indexer_q.quant_q_triton):
        schema = op.default._schema
        last = schema.arguments[-1]
        assert last.name == "side_inputs_ready" and last.kwarg_only, str(schema)
        assert str(last.type) == "bool" and last.default_value is False, str(schema)
        assert all(not a.kwarg_only for a in schema.arguments[:-1]), str(schema)


def _recipe_inputs(recipe, seed, device="cpu"):
    q, w, ws, freqs, pos = make_case(5, 8, torch.bfloat16, torch.int64, 3, seed=seed)
    info = indexer_q.recipe_info(recipe)
    q, w, freqs, pos = (t.to(device) for t in (q, w, freqs, pos))
    return (q, w if info.weights else None, ws, freqs if info.rope else None,
            pos if info.rope else None)


@pytest.mark.parametrize("backend", [None, "composed", "reference"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_side_inputs_ready_changes_no_byte_off_cuda(recipe, backend):
    # the CPU backend, the composed path and the scalar reference read every input in order:
    # the opt-in is accepted and ignored, the bytes are those of the default call
    q, w, ws, freqs, pos = _recipe_inputs(recipe, 101 + RECIPES.index(recipe))
    got, want = new_recipe_outputs(recipe, q), new_recipe_outputs(recipe, q)
    for outs, flag in ((got, True), (want, False)):
        indexer_q.quant_q(recipe, q, w, ws, freqs, pos, q_out=outs[0], q_sf=outs[1],
                          weights_out=outs[2], head_scale=0.5, backend=backend,
                          side_inputs_ready=flag)
    assert_same_outputs(got, want, f"{recipe} backend={backend} side_inputs_ready")


@pytest.mark.parametrize("recipe", ["v4_fp8", "v4_fp4"])
def test_side_inputs_ready_on_the_triton_path(recipe):
    # the Triton kernel (here through its CPU interpreter, when tests/python/test_triton.py
    # turned it on in this session) and the auto kernel of the routing table take the keyword
    # too, and ignore it
    from indexer_q import triton_dispatch
    q, w, ws, freqs, pos = _recipe_inputs(recipe, 7)
    want = new_recipe_outputs(recipe, q)
    indexer_q.quant_q(recipe, q, w, ws, freqs, pos, q_out=want[0], q_sf=want[1],
                      weights_out=want[2])
    auto = new_recipe_outputs(recipe, q)
    triton_dispatch.auto_quant_q(recipe, q, auto[0], auto[1], w, auto[2], ws, freqs, pos, True,
                                 1.0, side_inputs_ready=True)
    assert_same_outputs(auto, want, f"{recipe} auto_quant_q side_inputs_ready")
    if triton_dispatch.triton_serves("cpu") is not None:
        pytest.skip("Triton's CPU interpreter is off in this session (TRITON_INTERPRET=1, "
                    "tests/python/test_triton.py)")
    got = new_recipe_outputs(recipe, q)
    indexer_q.quant_q(recipe, q, w, ws, freqs, pos, q_out=got[0], q_sf=got[1],
                      weights_out=got[2], backend="triton", side_inputs_ready=True)
    assert_same_outputs(got, want, f"{recipe} triton side_inputs_ready")


@pytest.mark.parametrize("op", [QUANT, QUANT_COMPOSED, QUANT_REFERENCE],
                         ids=["quant_q", "quant_q_composed", "quant_q_reference"])
def test_side_inputs_ready_on_the_operators(op):
    q, w, ws, freqs, pos = _recipe_inputs("v4_fp8", 3)
    got, want = new_recipe_outputs("v4_fp8", q), new_recipe_outputs("v4_fp8", q)
    op("v4_fp8", q, got[0], None, w, got[2], ws, freqs, pos, True, 1.0, side_inputs_ready=True)
    op("v4_fp8", q, want[0], None, w, want[2], ws, freqs, pos)  # the old call, unchanged
    assert_same_outputs(got, want, "operator side_inputs_ready")
    # the validator alone accepts it and writes nothing
    chk = new_recipe_outputs("v4_fp8", q)
    torch.ops.indexer_q.quant_q_check("v4_fp8", q, chk[0], None, w, chk[2], ws, freqs, pos,
                                      side_inputs_ready=True)
    assert bool((chk[0].view(torch.uint8) == 0x5A).all())
    # the v4_fp8 operator and its composed twin
    for v4 in (NATIVE, COMPOSED):
        a, b = _args("cpu"), _args("cpu")
        v4(*a, side_inputs_ready=True)
        v4(*b)
        assert_same_fp8(a[1], b[1], "v4 side_inputs_ready q_fp8")
        assert_same_f32(a[3], b[3], "v4 side_inputs_ready weights_out")


def test_side_inputs_ready_on_every_wrapper():
    q, w, ws, freqs, pos = _recipe_inputs("v4_fp8", 5)
    cis = torch.view_as_complex(freqs.view(-1, 32, 2))
    calls = {
        "fused_q_indexer_rope_hadamard_quant":
            lambda **k: indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, ws, cis, pos, **k),
        "fused_q_indexer_rope_hadamard_quant fnuz":
            lambda **k: indexer_q.fused_q_indexer_rope_hadamard_quant(
                q, w, ws, freqs, pos, out_dtype=torch.float8_e4m3fnuz, **k),
        "composed_fused_q_indexer_rope_hadamard_quant":
            lambda **k: indexer_q.composed_fused_q_indexer_rope_hadamard_quant(
                q, w, ws, freqs, pos, **k),
        "composed_quant_q":
            lambda **k: indexer_q.composed_quant_q("v4_fp8", q, w, ws, freqs, pos, **k),
        "fused_q_indexer_rope_first_quant":
            lambda **k: indexer_q.fused_q_indexer_rope_first_quant(q, w, ws, freqs, pos, **k),
        "fused_q_indexer_rope_hadamard_fp4_quant":
            lambda **k: indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(
                q, w, ws, freqs, pos, **k),
        "fused_indexer_q_rope_quant":
            lambda **k: indexer_q.fused_indexer_q_rope_quant(pos, q, freqs, w, ws, 0.5, **k),
        "fused_indexer_q_rope_quant mxfp4":
            lambda **k: indexer_q.fused_indexer_q_rope_quant(
                pos, q, freqs, w, ws, 0.5, use_fp4=True, weights_out_dtype=torch.bfloat16, **k),
        "fused_indexer_q_rope_quant_v32":
            lambda **k: indexer_q.fused_indexer_q_rope_quant_v32(pos, q, freqs, w, ws, 0.5, **k),
        "fused_indexer_q_rope_quant_cutedsl":
            lambda **k: indexer_q.fused_indexer_q_rope_quant_cutedsl(
                pos, q, freqs, w, ws, 0.5, **k),
        "index_q_rope_pack_weights":
            lambda **k: indexer_q.index_q_rope_pack_weights(q, freqs, pos, w, ws, **k),
        "quantize_fp4_indexer_tensor":
            lambda **k: indexer_q.quantize_fp4_indexer_tensor(q, **k),
        "dsa_indexer_q_unfused":
            lambda **k: indexer_q.dsa_indexer_q_unfused(q, pos, freqs, w.float(), ws, 0.5, **k),
    }

    def flat(x):
        return [t for y in x for t in (flat(y) if isinstance(y, (tuple, list)) else [y])]

    for name, call in calls.items():
        got, want = flat(call(side_inputs_ready=True)), flat(call())
        assert len(got) == len(want), name
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name
    # in place (sgl-kernel's call)
    a, b = new_outputs(q), new_outputs(q)
    indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, a[0], w, a[1], ws, freqs, pos,
                                                       side_inputs_ready=True)
    indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, b[0], w, b[1], ws, freqs, pos)
    assert_same_fp8(a[0], b[0], "dsv4 side_inputs_ready q_fp8")
    assert_same_f32(a[1], b[1], "dsv4 side_inputs_ready weights_out")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [NATIVE, COMPOSED], ids=["native", "composed"])
def test_opcheck_side_inputs_ready(op, device, fp8_aware_allclose):
    # the fake (meta) kernels take the keyword: FakeTensor, torch.compile, AOT dispatch
    torch.library.opcheck(op.default, _args(device), {"side_inputs_ready": True})
    a = _args(device)
    rest = (a[0], new_recipe_outputs("v4_fp8", a[0])[0], None, a[2], a[3], a[4], a[5], a[6])
    for qop in (QUANT, QUANT_COMPOSED):
        torch.library.opcheck(qop.default, ("v4_fp8",) + rest,
                              {"enable_pdl": True, "head_scale": 1.0, "side_inputs_ready": True})


def test_meta_tensors_with_side_inputs_ready():
    q, _, w, _, ws, freqs, pos = (a.to("meta") if isinstance(a, torch.Tensor) else a
                                  for a in _args("cpu"))
    q_fp8, w_out = indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, ws, freqs, pos,
                                                                 side_inputs_ready=True)
    assert q_fp8.device.type == "meta" and tuple(q_fp8.shape) == (5, 8, 128)
    (q4, sf), w4 = indexer_q.quant_q("v4_fp4", q, w, ws, freqs, pos, side_inputs_ready=True)
    assert q4.device.type == "meta" and tuple(sf.shape) == (5, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_side_inputs_ready(device):
    q, _, w, _, ws, freqs, pos = _args(device, B=7, H=16)

    def f(q, w, freqs, pos):
        (q4, sf), w_out = indexer_q.quant_q("v4_fp4", q, w, ws, freqs, pos,
                                            side_inputs_ready=True)
        return q4, sf, w_out * 2.0

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True)(q, w, freqs, pos)
    want = f(q, w, freqs, pos)
    for a, b in zip(got, want):
        assert torch.equal(a.cpu().view(torch.uint8), b.cpu().view(torch.uint8))


# ---- quant_q_alloc: quant_q with its outputs allocated by the binding (the wrappers' fast path) ---
QUANT_NEW = torch.ops.indexer_q.quant_q_alloc


def _absent_or(t, takes, device="cpu"):
    return t if takes else torch.empty(0, device=device)


# on CUDA too (where a GPU is present): the allocation on q_input's device and stream
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", RECIPES)
def test_quant_q_alloc_equals_quant_q(recipe, device):
    info = indexer_q.recipe_info(recipe)
    q, w, ws, freqs, pos = _recipe_inputs(recipe, 211 + RECIPES.index(recipe), device)
    w, freqs, pos = (_absent_or(w, info.weights, device), _absent_or(freqs, info.rope, device),
                     _absent_or(pos, info.rope, device))
    b, h = q.shape[:2]
    for kind in (0, 1, 2, 4, 5, 6):  # dtype (recipe's, uint8, int8), + 4: rows
        raw, rows = {0: None, 1: torch.uint8, 2: torch.int8}[kind & 3], bool(kind & 4)
        for dims in (2, 3):
            got = list(QUANT_NEW(RECIPES.index(recipe), q, w, ws, freqs, pos, kind, dims, True,
                                 0.5))
            want = new_recipe_outputs(recipe, q, raw=raw is not None, w2d=dims == 2)
            q_out = want[0] if raw is None else want[0].view(raw)
            QUANT(recipe, q, q_out, want[1], w, want[2], ws, freqs, pos, True, 0.5)
            d = q_out.shape[2]
            assert got[0].dtype == q_out.dtype and got[0].is_contiguous()
            assert tuple(got[0].shape) == ((b * h, d) if rows else (b, h, d))
            got[0] = got[0].view(b, h, d)
            if info.fp4 or info.scale_out:
                sf_shape = (b, h) if info.fp4 else (b, h, 1)
                assert got[1].dtype == (torch.int32 if info.fp4 else torch.float32)
                assert tuple(got[1].shape) == ((b * h,) if rows else sf_shape)
                got[1] = got[1].view(sf_shape)
            else:
                assert got[1] is None
            if info.weights:
                assert tuple(got[2].shape) == ((b, h) if dims == 2 else (b, h, 1))
            else:
                assert got[2] is None
            assert_same_outputs(
                (got[0], got[1], got[2] if info.weights else want[2]),
                (q_out, want[1], want[2]), f"{recipe} quant_q_alloc kind {kind} dims {dims}")


def test_quant_q_alloc_errors_are_the_validators():
    q, w, ws, freqs, pos = _recipe_inputs("v4_fp8", 5)
    v4 = RECIPES.index("v4_fp8")
    cases = [
        ((q.double(), w, ws, freqs, pos), "q_input"),
        ((q, w, ws, freqs, pos.float()), "positions"),
        ((q, w[:, :3], ws, freqs, pos), "weight"),
        ((q, w, -1.0, freqs, pos), "weight_scale"),
        ((q, w, ws, freqs[:, :32], pos), "freqs"),
    ]
    for args, arg in cases:
        with pytest.raises(RuntimeError) as new:
            QUANT_NEW(v4, *args, 0, 3)
        outs = new_recipe_outputs("v4_fp8", q)
        with pytest.raises(RuntimeError) as old:
            QUANT("v4_fp8", args[0], outs[0], None, args[1], outs[2], *args[2:])
        assert str(new.value) == str(old.value), (str(new.value), str(old.value))
        assert f"indexer_q: {arg}:" in str(new.value)
    for bad in (3, 7, 8, -1):
        with pytest.raises(RuntimeError, match="indexer_q: out_kind: expected 0"):
            QUANT_NEW(v4, q, w, ws, freqs, pos, bad, 3)
    with pytest.raises(RuntimeError, match="indexer_q: weights_dims: expected 2"):
        QUANT_NEW(v4, q, w, ws, freqs, pos, 0, 4)
    with pytest.raises(RuntimeError, match="indexer_q: q_input: expected 3 dims"):
        QUANT_NEW(v4, q[0], w, ws, freqs, pos, 0, 3)
    for bad in (-1, len(RECIPES)):
        with pytest.raises(RuntimeError, match=r"indexer_q: recipe: expected the index of a "
                                               r"recipe in the library's list \(0 to "):
            QUANT_NEW(bad, q, w, ws, freqs, pos, 0, 3)
    with pytest.raises(RuntimeError, match="recipe"):  # a name: torch's parser refuses it
        QUANT_NEW("v4_fp8", q, w, ws, freqs, pos, 0, 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["v4_fp8", "v4_fp4", "vllm_v4_fp8",
                                    "sgl_v32_unfused_neox_hadamard_ue8m0",
                                    "sgl_v41_fp4_quant_rne"])
def test_opcheck_quant_q_alloc(recipe, device, fp8_aware_allclose):
    # finite inputs (opcheck compares eager and traced results with allclose: no NaN outputs)
    info = indexer_q.recipe_info(recipe)
    g = torch.Generator().manual_seed(9)
    q = torch.randn(5, 8, 128, generator=g).to(torch.bfloat16).to(device)
    w = torch.randn(5, 8, generator=g).to(torch.bfloat16).to(device)
    freqs = torch.randn(16, 64, generator=g).to(device)
    pos = torch.randint(0, 16, (5,), generator=g).to(device)
    ws = 0.25
    none = torch.empty(0, device=device)
    args = (RECIPES.index(recipe), q, w if info.weights else none, ws,
            freqs if info.rope else none,
            pos if info.rope else none, 2 if info.fp4 else 0, 2, True, 0.5)
    torch.library.opcheck(QUANT_NEW.default, args)
    torch.library.opcheck(QUANT_NEW.default, args[:6] + (args[6] + 4, 3) + args[8:])  # rows
    torch.library.opcheck(QUANT_NEW.default, args, {"side_inputs_ready": True})
    # the defaults the wrappers rely on (out_kind 0, weights_dims 3); rows with a 2-D q_input
    torch.library.opcheck(QUANT_NEW.default, args[:6])
    if not info.weights and not info.rope:
        torch.library.opcheck(QUANT_NEW.default, (args[0], q.reshape(-1, 128)) + args[2:6]
                              + (args[6] + 4,))


@pytest.mark.parametrize("device", DEVICES)
def test_quant_q_alloc_defaults_and_2d_rows(device):
    # out_kind and weights_dims default to 0 and 3 (what the wrappers leave out); with the rows
    # flag a 2-D q_input (N, D) is read as (N, 1, D), the view reshape(-1, 1, D) gives (any
    # strides), and the same bytes come back; without it a 2-D q_input is refused as always
    q, w, ws, freqs, pos = _recipe_inputs("v4_fp8", 5, device)
    v4 = RECIPES.index("v4_fp8")
    got, want = QUANT_NEW(v4, q, w, ws, freqs, pos), QUANT_NEW(v4, q, w, ws, freqs, pos, 0, 3)
    assert got[1] is None and tuple(got[2].shape) == tuple(want[2].shape)
    assert_same_outputs((got[0], None, got[2]), (want[0], None, want[2]), "defaults")
    rne = RECIPES.index("sgl_v41_fp4_quant_rne")
    none = torch.empty(0, device=device)
    wide = torch.randn(7, 256, generator=torch.Generator().manual_seed(3)).to(device)
    for x in (wide[:, :128], wide[:, :128].contiguous(), wide[:, :128].t().contiguous().t(),
              wide[:0, :128]):
        for kind in (4, 5, 6):
            try:
                want = QUANT_NEW(rne, x.reshape(-1, 1, 128), none, 1.0, none, none, kind)
            except RuntimeError as e:  # strides the library refuses: the same message
                with pytest.raises(RuntimeError) as new:
                    QUANT_NEW(rne, x, none, 1.0, none, none, kind)
                assert str(new.value) == str(e)
                continue
            got = QUANT_NEW(rne, x, none, 1.0, none, none, kind)
            assert got[0].dtype == want[0].dtype and tuple(got[0].shape) == (x.shape[0], 64)
            assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8))
            assert torch.equal(got[1], want[1]) and got[2] is None
        with pytest.raises(RuntimeError, match="indexer_q: q_input: expected 3 dims"):
            QUANT_NEW(rne, x, none, 1.0, none, none, 2)
    with pytest.raises(RuntimeError) as new:  # a 2-D (N, 64): the validator's message, as (N, 1, 64)
        QUANT_NEW(rne, wide[:, :64], none, 1.0, none, none, 6)
    with pytest.raises(RuntimeError) as old:
        QUANT_NEW(rne, wide[:, :64].reshape(-1, 1, 64), none, 1.0, none, none, 6)
    assert str(new.value) == str(old.value)
    meta = QUANT_NEW(rne, wide[:, :128].to("meta"), none.to("meta"), 1.0, none.to("meta"),
                     none.to("meta"), 6)
    assert tuple(meta[0].shape) == (7, 64) and tuple(meta[1].shape) == (7,)


def test_wrappers_take_the_allocating_operator_on_native_devices(monkeypatch):
    # the allocating wrappers call quant_q_alloc once on a device with a native kernel (one call:
    # no torch.empty per output), and the in-place / composed forms do not
    from indexer_q import _ops
    calls = []
    real = _ops._OP_QUANT_Q_ALLOC
    monkeypatch.setattr(_ops, "_OP_QUANT_Q_ALLOC",
                        lambda *a, **k: calls.append(RECIPES[a[0]]) or real(*a, **k))
    q, w, ws, freqs, pos = _recipe_inputs("v4_fp8", 5)
    indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, ws, freqs, pos)
    indexer_q.quant_q("v4_fp4", q, w, ws, freqs, pos)
    indexer_q.fused_indexer_q_rope_quant(pos, q, freqs, w, ws, 0.5)
    indexer_q.quantize_fp4_indexer_tensor(q)
    assert calls == ["v4_fp8", "v4_fp4", "vllm_v4_fp8", "sgl_v41_fp4_quant_rne"]
    indexer_q.composed_quant_q("v4_fp8", q, w, ws, freqs, pos)
    indexer_q.quant_q("v4_fp8", q, w, ws, freqs, pos, backend="reference")
    a = new_outputs(q)
    indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, a[0], w, a[1], ws, freqs, pos)
    assert len(calls) == 4


def test_fast_paths_equal_the_general_path():
    # the entry points' one-call fast paths (the engines' own call shapes) against the general
    # path, which enable_pdl=1 (truthy, not True) takes: the same bytes for accepted calls, the
    # same exception type and message for refused ones
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 4, 128, generator=g).to(torch.bfloat16)
    w = torch.randn(3, 4, generator=g).to(torch.bfloat16)
    table = torch.rand(16, 64, generator=g)
    cis = torch.view_as_complex(table.view(16, 32, 2))
    pos = torch.randint(0, 16, (3,), generator=g)
    calls = {
        "v4_fp4": lambda f, pdl: indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(
            q, w, 0.5, f, pos, enable_pdl=pdl),
        "rope_pack": lambda f, pdl: indexer_q.index_q_rope_pack_weights(q, f, pos, w, 0.5,
                                                                        enable_pdl=pdl),
        "unfused": lambda f, pdl: indexer_q.dsa_indexer_q_unfused(q, pos, f, w, 0.5, 0.25,
                                                                  enable_pdl=pdl),
        "vllm_v4": lambda f, pdl: indexer_q.fused_indexer_q_rope_quant(pos, q, f, w, 0.5, 0.25,
                                                                       enable_pdl=pdl),
        "vllm_v32": lambda f, pdl: indexer_q.fused_indexer_q_rope_quant_v32(
            pos, q, f, w, 0.5, 0.25, enable_pdl=pdl),
        "cutedsl": lambda f, pdl: indexer_q.fused_indexer_q_rope_quant_cutedsl(
            pos, q, f, w, 0.5, 0.25, enable_pdl=pdl),
        "rne": lambda f, pdl: indexer_q.quantize_fp4_indexer_tensor(q[0], enable_pdl=pdl),
        "v4_fp8": lambda f, pdl: indexer_q.fused_q_indexer_rope_hadamard_quant(
            q, w, 0.5, f, pos, enable_pdl=pdl),
    }
    tables = (table, cis, table[:, :32], cis[:, :16], cis.t(), table.to(torch.bfloat16),
              torch.zeros(16, 64, dtype=torch.int32))

    def flat(r):
        out = []
        for x in (r if isinstance(r, tuple) else (r,)):
            out += flat(x) if isinstance(x, tuple) else [x]
        return out

    for name, call in calls.items():
        for f in tables:
            try:
                want = call(f, 1)
            except Exception as e:  # noqa: BLE001
                with pytest.raises(type(e)) as got:
                    call(f, True)
                assert str(got.value) == str(e), (name, f.dtype, tuple(f.shape))
                continue
            got = call(f, True)
            assert len(flat(got)) == len(flat(want))
            for a, b in zip(flat(got), flat(want)):
                assert a.dtype == b.dtype and a.shape == b.shape, name
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name
