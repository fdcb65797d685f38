"""Every error path: a torch error whose message names the argument, and outputs untouched."""

import pytest
import torch

from conftest import CUDA_OK, DEVICES, OPS, new_outputs

B, H, MAX_POS = 3, 4, 10


def valid(device, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, H, 128, generator=g).to(dtype)
    w = torch.randn(B, H, generator=g).to(dtype)
    freqs = torch.randn(MAX_POS, 64, generator=g)
    pos = torch.tensor([0, 5, 9], dtype=torch.int64)
    q_fp8, w_out = new_outputs(q)
    return {
        "q_input": q.to(device), "q_fp8": q_fp8.to(device), "weight": w.to(device),
        "weights_out": w_out.to(device), "weight_scale": 0.5, "freqs": freqs.to(device),
        "positions": pos.to(device),
    }


def noncontig(t):
    """Same values and shape, last dim stride 2."""
    big = torch.empty(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype, device=t.device)
    v = big[..., ::2]
    v.copy_(t)
    return v


# (case name, argument named in the message, mutation)
CASES = [
    ("q_input_dtype_f64", "q_input", lambda a: a.update(q_input=a["q_input"].double())),
    ("q_input_dtype_int32", "q_input", lambda a: a.update(q_input=a["q_input"].int())),
    ("q_input_2d", "q_input", lambda a: a.update(q_input=a["q_input"][:, 0, :])),
    ("q_input_4d", "q_input", lambda a: a.update(q_input=a["q_input"][None])),
    ("q_input_5d", "q_input", lambda a: a.update(q_input=a["q_input"][None, None])),
    ("q_input_dim64", "q_input", lambda a: a.update(q_input=a["q_input"][:, :, :64])),
    ("q_input_strided", "q_input", lambda a: a.update(q_input=noncontig(a["q_input"]))),
    ("q_fp8_dtype_fnuz", "q_fp8", lambda a: a.update(q_fp8=a["q_fp8"].view(torch.float8_e4m3fnuz))),
    ("q_fp8_dtype_int16", "q_fp8",
     lambda a: a.update(q_fp8=torch.zeros(B, H, 64, dtype=torch.int16, device=a["q_fp8"].device))),
    ("q_fp8_e5m2", "q_fp8", lambda a: a.update(q_fp8=a["q_fp8"].view(torch.float8_e5m2))),
    ("q_fp8_shape", "q_fp8", lambda a: a.update(q_fp8=a["q_fp8"][:2])),
    ("weight_dtype_int32", "weight", lambda a: a.update(weight=a["weight"].int())),
    ("weight_dtype_fp8", "weight", lambda a: a.update(weight=a["weight"].to(torch.float8_e4m3fn))),
    ("weight_shape", "weight", lambda a: a.update(weight=a["weight"][:, :3])),
    ("weight_col_stride", "weight", lambda a: a.update(weight=noncontig(a["weight"]))),
    ("weight_f64", "weight", lambda a: a.update(weight=a["weight"].double())),
    ("weights_out_dtype", "weights_out", lambda a: a.update(weights_out=a["weights_out"].half())),
    # (B, H, 1) and (B, H) are both valid (the validator's contract); these are not
    ("weights_out_shape", "weights_out",
     lambda a: a.update(weights_out=torch.zeros(*a["weights_out"].shape[:2], 2,
                                                 device=a["weights_out"].device))),
    ("weights_out_shape_1d", "weights_out",
     lambda a: a.update(weights_out=torch.zeros(a["weights_out"].numel(),
                                                 device=a["weights_out"].device))),
    ("freqs_dtype", "freqs", lambda a: a.update(freqs=a["freqs"].double())),
    ("freqs_shape", "freqs", lambda a: a.update(freqs=a["freqs"][:, :32].contiguous())),
    ("freqs_strided", "freqs", lambda a: a.update(freqs=noncontig(a["freqs"]))),
    ("freqs_empty", "freqs", lambda a: a.update(freqs=a["freqs"][:0])),
    ("positions_dtype", "positions", lambda a: a.update(positions=a["positions"].float())),
    ("positions_shape", "positions", lambda a: a.update(positions=a["positions"][:2])),
    ("positions_2d", "positions", lambda a: a.update(positions=a["positions"][:, None])),
]
HOST_ONLY_CASES = [  # the positions range is checked where the host can read it
    ("positions_too_big", "positions", lambda a: a["positions"].__setitem__(1, MAX_POS)),
    ("positions_negative", "positions", lambda a: a["positions"].__setitem__(2, -1)),
    ("positions_too_big_i32", "positions",
     lambda a: a.update(positions=torch.tensor([0, 1, MAX_POS], dtype=torch.int32))),
]


def call(op, a):
    op(a["q_input"], a["q_fp8"], a["weight"], a["weights_out"], a["weight_scale"], a["freqs"],
       a["positions"])


def check_error(op, a, arg):
    q_before = a["q_fp8"].view(torch.uint8).clone() if a["q_fp8"].dtype.itemsize == 1 else None
    w_before = a["weights_out"].clone()
    with pytest.raises(RuntimeError) as e:
        call(op, a)
    msg = str(e.value)
    assert f"indexer_q: {arg}" in msg, msg
    # nothing written
    if q_before is not None:
        assert torch.equal(a["q_fp8"].view(torch.uint8), q_before)
    assert torch.equal(a["weights_out"].view(torch.uint8) if a["weights_out"].dtype.itemsize == 1
                       else a["weights_out"], w_before)
    return msg


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("name,arg,mutate", CASES, ids=[c[0] for c in CASES])
def test_error_names_argument(name, arg, mutate, impl, device):
    a = valid(device)
    mutate(a)
    check_error(OPS[impl], a, arg)


@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("name,arg,mutate", HOST_ONLY_CASES, ids=[c[0] for c in HOST_ONLY_CASES])
def test_positions_out_of_range_cpu(name, arg, mutate, impl):
    a = valid("cpu")
    mutate(a)
    msg = check_error(OPS[impl], a, arg)
    assert "outside [0, max_pos)" in msg, msg


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
def test_output_overlapping_input(impl, device):
    a = valid(device)
    buf = torch.zeros(B * H * 128 * 2, dtype=torch.uint8, device=device)
    a["q_input"] = buf.view(torch.bfloat16).view(B, H, 128)
    a["q_fp8"] = buf[: B * H * 128].view(torch.float8_e4m3fn).view(B, H, 128)
    with pytest.raises(RuntimeError, match="indexer_q: q_fp8: output memory overlaps q_input"):
        call(OPS[impl], a)
    assert int(buf.count_nonzero()) == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
def test_raw_uint8_q_fp8_gets_the_same_bytes(impl, device):
    # the library's v4_fp8 contract takes uint8 / int8 raw codes too
    a = valid(device)
    call(OPS[impl], a)
    for dt in (torch.uint8, torch.int8):
        b = valid(device)
        b["q_fp8"] = b["q_fp8"].view(dt)
        call(OPS[impl], b)
        assert torch.equal(b["q_fp8"].view(torch.uint8), a["q_fp8"].view(torch.uint8))
        assert torch.equal(b["weights_out"], a["weights_out"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("wdtype", [torch.float32, torch.float16, torch.bfloat16])
def test_weight_dtype_independent_of_q_input(wdtype, impl, device):
    # a port passes an fp32 weight with bf16 q_input: the weight is decoded exactly, so a weight
    # holding the same values in another float dtype gives the same bytes
    a = valid(device)
    assert a["q_input"].dtype == torch.bfloat16 and a["weight"].dtype == torch.bfloat16
    call(OPS[impl], a)
    b = valid(device)
    b["weight"] = b["weight"].to(wdtype)  # bf16 values: exact in fp32; these small ones in fp16 too
    assert torch.equal(b["weight"].float(), a["weight"].float())
    call(OPS[impl], b)
    assert torch.equal(b["q_fp8"].view(torch.uint8), a["q_fp8"].view(torch.uint8))
    assert torch.equal(b["weights_out"].view(torch.int32), a["weights_out"].view(torch.int32))
    # and a genuinely fp32 weight (not representable in bf16) folds its own value in
    if wdtype == torch.float32:
        c = valid(device)
        c["weight"] = c["weight"].float() * (1.0 + 2.0 ** -20)
        call(OPS[impl], c)
        want = valid(device)
        want["q_input"] = want["q_input"].float()
        want["weight"] = c["weight"].clone()
        call(OPS[impl], want)  # fp32 q_input holding the same bf16 values: same rows
        assert torch.equal(c["q_fp8"].view(torch.uint8), want["q_fp8"].view(torch.uint8))
        assert torch.equal(c["weights_out"].view(torch.int32), want["weights_out"].view(torch.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["native", "composed"])
def test_valid_call_writes_outputs(impl, device):
    # the control for the cases above: the same valid arguments do write both outputs
    a = valid(device)
    call(OPS[impl], a)
    assert not bool((a["q_fp8"].view(torch.uint8) == 0x5A).all())
    assert not bool((a["weights_out"] == -7.25).any())


@pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")
@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("arg", ["q_fp8", "weight", "weights_out", "freqs", "positions"])
def test_device_mismatch(arg, impl):
    a = valid("cuda")
    a[arg] = a[arg].cpu()
    msg = check_error(OPS[impl], a, arg)
    assert "device" in msg, msg


def test_freqs_cis_errors():
    import indexer_q
    a = valid("cpu")
    bad = torch.zeros(MAX_POS, 32, dtype=torch.complex128)
    with pytest.raises(TypeError, match="indexer_q: freqs_cis"):
        indexer_q.fused_q_indexer_rope_hadamard_quant(a["q_input"], a["weight"], 0.5, bad,
                                                      a["positions"])
    bad = torch.zeros(MAX_POS, 16, dtype=torch.complex64)
    with pytest.raises(ValueError, match="indexer_q: freqs_cis"):
        indexer_q.fused_q_indexer_rope_hadamard_quant(a["q_input"], a["weight"], 0.5, bad,
                                                      a["positions"])
    with pytest.raises(ValueError, match="indexer_q: q_input"):
        indexer_q.fused_q_indexer_rope_hadamard_quant(a["q_input"][0], a["weight"], 0.5,
                                                      a["freqs"], a["positions"])


@pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")
@pytest.mark.parametrize("impl", ["native", "composed"])
def test_q_input_on_cpu_others_on_cuda(impl):
    # the dispatcher picks the CUDA kernel; the validator names the first tensor whose device
    # differs from q_input's
    a = valid("cuda")
    a["q_input"] = a["q_input"].cpu()
    msg = check_error(OPS[impl], a, "q_fp8")
    assert "expected the device of q_input (cpu)" in msg, msg
