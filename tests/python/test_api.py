"""The operator as torch sees it: schema, dispatch, opcheck, torch.compile, meta, threads."""

import pytest
import torch

import indexer_q
from conftest import (CUDA_OK, DEVICES, COMPOSED, NATIVE, assert_same_f32, assert_same_fp8,
                      new_outputs)
from test_composed_vs_native import make_case


def test_schema_defined_once_with_mutation_annotations():
    s = str(NATIVE.default._schema)
    assert s == (
        "indexer_q::fused_q_indexer_rope_hadamard_quant(Tensor q_input, Tensor(a!) q_fp8, "
        "Tensor weight, Tensor(b!) weights_out, float weight_scale, Tensor freqs, "
        "Tensor positions, bool enable_pdl=True) -> ()"), s
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
