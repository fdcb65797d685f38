"""Every error path: a torch error whose message names the argument, and outputs untouched."""

import re

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


# ---- issue 22: mixed meta / CPU calls raise (the dispatcher sends them to the fake kernel) ----
def _q_args(recipe="v4_fp8"):
    import indexer_q
    info = indexer_q.recipe_info(recipe)
    a = valid("cpu")
    q_out = (torch.zeros(B, H, 64, dtype=torch.uint8) if info.fp4 else a["q_fp8"])
    q_sf = torch.zeros(B, H, dtype=torch.int32) if info.fp4 else None
    return {"recipe": recipe, "q_input": a["q_input"], "q_out": q_out, "q_sf": q_sf,
            "weight": a["weight"], "weights_out": a["weights_out"], "weight_scale": 0.5,
            "freqs": a["freqs"], "positions": a["positions"]}


def _call_q(op, a):
    op(a["recipe"], a["q_input"], a["q_out"], a["q_sf"], a["weight"], a["weights_out"],
       a["weight_scale"], a["freqs"], a["positions"], True, 1.0)


def _k_args():
    g = torch.Generator().manual_seed(3)
    return {"recipe": "v4_k_fp8", "input": torch.randn(3, 128, generator=g),
            "weight": torch.ones(128), "eps": 1e-6, "freqs": torch.randn(MAX_POS, 64, generator=g),
            "positions": torch.tensor([0, 1, 2]), "slots": torch.tensor([0, 1, 2]),
            "kvcache": torch.full((3, 132), 0xA5, dtype=torch.uint8), "page_size": 1}


def _call_k(op, a):
    op(a["recipe"], a["input"], a["weight"], a["eps"], a["freqs"], a["positions"], a["slots"],
       a["kvcache"], a["page_size"], True)


Q_OPS = ["quant_q", "quant_q_composed", "quant_q_check", "quant_q_reference", "quant_q_triton"]


@pytest.mark.parametrize("opname", Q_OPS)
@pytest.mark.parametrize("recipe", ["v4_fp8", "v4_fp4"])
@pytest.mark.parametrize("arg", ["q_input", "q_out", "q_sf", "weight", "weights_out", "freqs",
                                 "positions"])
def test_one_meta_tensor_raises_naming_it(arg, recipe, opname):
    a = _q_args(recipe)
    if a[arg] is None:
        pytest.skip(f"{recipe} takes no {arg}")
    a[arg] = a[arg].to("meta")
    outs = {k: a[k].clone() for k in ("q_out", "q_sf", "weights_out")
            if a[k] is not None and a[k].device.type == "cpu"}
    with pytest.raises(RuntimeError) as e:
        _call_q(getattr(torch.ops.indexer_q, opname), a)
    msg = str(e.value)
    named = "q_out" if arg == "q_input" else arg  # the first tensor off q_input's device
    assert f"indexer_q: {named}: expected the device of q_input" in msg, msg
    for k, v in outs.items():  # nothing written
        assert torch.equal(a[k], v), k


@pytest.mark.parametrize("impl", ["native", "composed"])
@pytest.mark.parametrize("arg", ["q_input", "q_fp8", "weight", "weights_out", "freqs",
                                 "positions"])
def test_one_meta_tensor_raises_v4_schema(arg, impl):
    a = valid("cpu")
    a[arg] = a[arg].to("meta")
    with pytest.raises(RuntimeError) as e:
        call(OPS[impl], a)
    named = "q_fp8" if arg == "q_input" else arg
    assert f"indexer_q: {named}: expected the device of q_input" in str(e.value), str(e.value)


@pytest.mark.parametrize("opname", ["kside_store", "kside_store_composed"])
@pytest.mark.parametrize("arg", ["input", "weight", "freqs", "positions", "slots", "kvcache"])
def test_kside_one_meta_tensor_raises_naming_it(arg, opname):
    a = _k_args()
    a[arg] = a[arg].to("meta")
    before = a["kvcache"].clone() if arg != "kvcache" else None
    with pytest.raises(RuntimeError) as e:
        _call_k(getattr(torch.ops.indexer_q, opname), a)
    named = "weight" if arg == "input" else arg
    assert f"indexer_q: {named}: expected the device of input" in str(e.value), str(e.value)
    if before is not None:
        assert torch.equal(a["kvcache"], before)


def test_all_meta_still_traces():
    # every tensor on meta (shape propagation, torch.compile's fake tensors): the fakes accept it
    a = _q_args("v4_fp8")
    for k in ("q_input", "q_out", "weight", "weights_out", "freqs", "positions"):
        a[k] = a[k].to("meta")
    _call_q(torch.ops.indexer_q.quant_q, a)
    k = _k_args()
    for n in ("input", "weight", "freqs", "positions", "slots", "kvcache"):
        k[n] = k[n].to("meta")
    _call_k(torch.ops.indexer_q.kside_store, k)
    # a recipe without RoPE / weights: 0-element placeholders on another device are skipped
    x = torch.zeros(2, 1, 128, device="meta")
    torch.ops.indexer_q.quant_q("sgl_v41_fp4_quant_rne", x,
                                torch.zeros(2, 1, 64, dtype=torch.uint8, device="meta"),
                                torch.zeros(2, 1, dtype=torch.int32, device="meta"),
                                torch.empty(0), torch.empty(0), 1.0, torch.empty(0),
                                torch.empty(0), True, 1.0)


# ---- issue 22: every scalar checked by the library's one validator, the argument named ----
# weight_scale and head_scale: finite and > 0, and so in float32 (0, -0 and negative factors
# refused: they turn every weights_out into 0 or flip its sign)
BAD_SCALARS = [
    (float("nan"), "got nan"), (float("inf"), "got inf"), (float("-inf"), "got -inf"),
    (1e300, "got 1e+300, which is inf in float32"), (-1e300, "got -1e+300"),
    (1e-50, "got 1e-50, which rounds to 0 in float32"),
    (0.0, "got 0"), (-0.0, "got -0"), (-0.5, "got -0.5"), (-1e-50, "got -1e-50"),
    (7e-46, "got 7e-46, which rounds to 0 in float32"),
]


@pytest.mark.parametrize("opname", ["quant_q", "quant_q_composed", "quant_q_check",
                                    "quant_q_reference"])
@pytest.mark.parametrize("which", ["weight_scale", "head_scale"])
@pytest.mark.parametrize("value,text", BAD_SCALARS, ids=[t for _, t in BAD_SCALARS])
def test_bad_scalar_is_refused_naming_it(value, text, which, opname):
    a = _q_args("vllm_v4_fp8")
    a["weights_out"] = torch.full((B, H), -7.25)
    before = a["weights_out"].clone(), a["q_out"].view(torch.uint8).clone()
    op = getattr(torch.ops.indexer_q, opname)
    args = [a["recipe"], a["q_input"], a["q_out"], a["q_sf"], a["weight"], a["weights_out"],
            0.5, a["freqs"], a["positions"], True, 1.0]
    args[6 if which == "weight_scale" else 10] = value
    with pytest.raises(RuntimeError) as e:
        op(*args)
    msg = str(e.value)
    assert f"indexer_q: {which}: expected a finite number > 0, {text}" in msg, msg
    assert torch.equal(a["weights_out"], before[0])
    assert torch.equal(a["q_out"].view(torch.uint8), before[1])


@pytest.mark.parametrize("value,text", BAD_SCALARS, ids=[t for _, t in BAD_SCALARS])
def test_bad_scalar_through_the_wrappers(value, text):
    import indexer_q
    a = valid("cpu")
    with pytest.raises(RuntimeError, match=f"indexer_q: weight_scale: .*{re.escape(text)}"):
        indexer_q.fused_q_indexer_rope_hadamard_quant(a["q_input"], a["weight"], value,
                                                      a["freqs"], a["positions"])
    with pytest.raises(RuntimeError, match=f"indexer_q: head_scale: .*{re.escape(text)}"):
        indexer_q.quant_q("vllm_v4_fp8", a["q_input"], a["weight"], 0.5, a["freqs"],
                          a["positions"], head_scale=value)
    with pytest.raises(RuntimeError, match=f"indexer_q: head_scale: .*{re.escape(text)}"):
        indexer_q.fused_indexer_q_rope_quant(a["positions"], a["q_input"], a["freqs"],
                                             a["weight"], 0.5, value)


def test_tiny_and_huge_positive_scales_are_valid_factors():
    """Any factor whose float32 value is finite and > 0 is valid: a float32 subnormal (1e-45
    rounds to the smallest one, not to 0) and the float32 maximum."""
    import indexer_q
    a = valid("cpu")
    for ws, hs in ((1e-45, 1.0), (0.5, 1e-40), (3.4028234663852886e38, 1.0), (0.5, 2.0)):
        _, w = indexer_q.quant_q("vllm_v4_fp8", a["q_input"], a["weight"], ws, a["freqs"],
                                 a["positions"], head_scale=hs)
        assert not bool(torch.isnan(w).any())


@pytest.mark.parametrize("softmax_scale,head_scale,which,text", [
    (-0.5, 0.125, "weight_scale", "got -0.0625"), (0.0, 0.125, "weight_scale", "got 0"),
    (0.5, 0.0, "weight_scale", "got 0"), (0.5, -0.0, "weight_scale", "got -0"),
    (-0.5, -0.125, "head_scale", "got -0.125"), (-1.0, -1.0, "head_scale", "got -1")])
def test_cutedsl_checks_each_factor(softmax_scale, head_scale, which, text):
    """vLLM's CuTe form takes one factor fl32(softmax_scale * head_scale), checked as
    weight_scale; head_scale is checked on its own too, so that two negative factors (whose
    product is > 0) are refused as well."""
    import indexer_q
    a = valid("cpu")
    with pytest.raises(RuntimeError, match=f"indexer_q: {which}: expected a finite number > 0, "
                                           f"{re.escape(text)}"):
        indexer_q.fused_indexer_q_rope_quant_cutedsl(a["positions"], a["q_input"], a["freqs"],
                                                     a["weight"], softmax_scale, head_scale)


@pytest.mark.parametrize("value", ["0.5", None, [0.5], object()])
def test_non_number_scalar_names_the_argument(value):
    import indexer_q
    a = valid("cpu")
    with pytest.raises(TypeError, match="indexer_q: weight_scale: expected a float"):
        indexer_q.quant_q("v4_fp8", a["q_input"], a["weight"], value, a["freqs"], a["positions"])
    with pytest.raises(TypeError, match="indexer_q: head_scale: expected a float"):
        indexer_q.quant_q("vllm_v4_fp8", a["q_input"], a["weight"], 0.5, a["freqs"],
                          a["positions"], head_scale=value)
    k = _k_args()
    with pytest.raises(TypeError, match="indexer_q: eps: expected a float"):
        indexer_q.kside_store(k["recipe"], k["input"], k["weight"], value, k["freqs"],
                              k["positions"], k["slots"], k["kvcache"], 1)


@pytest.mark.parametrize("opname", ["kside_store", "kside_store_composed"])
@pytest.mark.parametrize("value,text", [
    (float("nan"), "got nan"), (float("inf"), "got inf"), (-1e-6, "got -1e-06"),
    (1e39, "got 1e+39, which is inf in float32"),
    (1e-60, "got 1e-60, which rounds to 0 in float32")])
def test_bad_eps_is_refused_naming_it(value, text, opname):
    k = _k_args()
    k["eps"] = value
    before = k["kvcache"].clone()
    with pytest.raises(RuntimeError) as e:
        _call_k(getattr(torch.ops.indexer_q, opname), k)
    assert f"indexer_q: eps: expected a finite number >= 0, {text}" in str(e.value), str(e.value)
    assert torch.equal(k["kvcache"], before)


def test_eps_zero_is_valid():
    k = _k_args()
    k["eps"] = 0.0
    _call_k(torch.ops.indexer_q.kside_store, k)
    assert not torch.equal(k["kvcache"], torch.full_like(k["kvcache"], 0xA5))


@pytest.mark.parametrize("value", [4.7, "4", 2.5, None])
def test_page_size_not_integral_is_refused(value):
    import indexer_q
    k = _k_args()
    before = k["kvcache"].clone()
    with pytest.raises(TypeError, match="indexer_q: page_size: expected an integer"):
        indexer_q.kside_store(k["recipe"], k["input"], k["weight"], 1e-6, k["freqs"],
                              k["positions"], k["slots"], k["kvcache"], value)
    assert torch.equal(k["kvcache"], before)
    # an integral float is its integer
    indexer_q.kside_store(k["recipe"], k["input"], k["weight"], 1e-6, k["freqs"], k["positions"],
                          k["slots"], k["kvcache"], 1.0)


@pytest.mark.parametrize("value", [4.5, "4", None])
def test_compress_ratio_not_integral_is_refused(value):
    import indexer_q.kside as ks
    plan = torch.zeros(2, 16, dtype=torch.uint8)
    with pytest.raises(TypeError, match="indexer_q: compress_ratio: expected an integer"):
        ks.plan_positions_slots(plan, torch.tensor([0, 1]), is_decode=True,
                                compress_ratio=value)
    ks.plan_positions_slots(plan, torch.tensor([0, 1]), is_decode=True, compress_ratio=4.0)


def test_unknown_recipe_names_it():
    a = _q_args()
    a["recipe"] = "v4_fp9"
    with pytest.raises(RuntimeError, match="indexer_q: recipe: unknown recipe 'v4_fp9'; "
                                           "expected one of v4_fp8"):
        _call_q(torch.ops.indexer_q.quant_q, a)
    with pytest.raises(RuntimeError, match="unknown recipe 'nope'"):
        torch.ops.indexer_q.recipe_info("nope")
    k = _k_args()
    k["recipe"] = "v4_k_fp9"
    with pytest.raises(RuntimeError, match="unknown key-side recipe 'v4_k_fp9'; expected one of "
                                           "v4_k_fp8"):
        _call_k(torch.ops.indexer_q.kside_store, k)


# ---- side_inputs_ready: the wrappers take True or False only ----------------------------------
@pytest.mark.parametrize("bad", [1, 0, "yes", None, 1.0, torch.tensor(True)],
                         ids=["int1", "int0", "str", "None", "float", "tensor"])
def test_side_inputs_ready_must_be_a_bool(bad):
    import indexer_q

    a = valid("cpu")
    q, w, freqs, pos = a["q_input"], a["weight"], a["freqs"], a["positions"]
    calls = [
        lambda: indexer_q.quant_q("v4_fp8", q, w, 0.5, freqs, pos, side_inputs_ready=bad),
        lambda: indexer_q.quant_q("v4_fp8", q, w, 0.5, freqs, pos, backend="composed",
                                  side_inputs_ready=bad),
        lambda: indexer_q.composed_quant_q("v4_fp4", q, w, 0.5, freqs, pos,
                                           side_inputs_ready=bad),
        lambda: indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, 0.5, freqs, pos,
                                                              side_inputs_ready=bad),
        lambda: indexer_q.composed_fused_q_indexer_rope_hadamard_quant(
            q, w, 0.5, freqs, pos, side_inputs_ready=bad),
        lambda: indexer_q.fused_indexer_q_rope_quant(pos, q, freqs, w, 0.5, 1.0,
                                                     side_inputs_ready=bad),
        lambda: indexer_q.quantize_fp4_indexer_tensor(q, side_inputs_ready=bad),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"^indexer_q: side_inputs_ready: expected a bool "
                                            r"\(True or False\), got "):
            call()
    # in place: nothing written
    q8, wo = a["q_fp8"], a["weights_out"]
    with pytest.raises(TypeError, match="indexer_q: side_inputs_ready: expected a bool"):
        indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, q8, w, wo, 0.5, freqs, pos,
                                                           side_inputs_ready=bad)
    assert bool((q8.view(torch.uint8) == 0x5A).all())
    assert bool((wo == -7.25).all())


@pytest.mark.parametrize("op", ["quant_q", "fused_q_indexer_rope_hadamard_quant"])
def test_side_inputs_ready_bad_type_on_the_operator(op):
    # the operator itself: torch's schema parser refuses a value that is not a bool-like,
    # naming the argument; nothing written
    a = valid("cpu")
    args = [a[k] for k in ("q_input", "q_fp8", "weight", "weights_out", "weight_scale", "freqs",
                           "positions")]
    if op == "quant_q":
        args = ["v4_fp8"] + args[:2] + [None] + args[2:]
    with pytest.raises(RuntimeError, match="side_inputs_ready"):
        getattr(torch.ops.indexer_q, op)(*args, side_inputs_ready="yes")
    with pytest.raises(RuntimeError, match="positional argument"):  # keyword-only
        getattr(torch.ops.indexer_q, op)(*args, True, *([1.0] if op == "quant_q" else []), True)
    assert bool((a["q_fp8"].view(torch.uint8) == 0x5A).all())
