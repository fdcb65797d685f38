"""CUDA-only behaviour: torch's current stream, CUDA graph capture and replay."""

import pytest
import torch

import indexer_q
from conftest import (CUDA_OK, NATIVE, assert_same_f32, assert_same_fp8, assert_same_outputs,
                      new_outputs, new_recipe_outputs)
from test_composed_vs_native import make_case

pytestmark = pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")


def cpu_reference(args):
    q, w, ws, freqs, pos = args
    q8, wo = new_outputs(q)
    NATIVE(q, q8, w, wo, ws, freqs, pos)
    return q8, wo


def test_runs_on_the_current_stream():
    args = make_case(64, 64, torch.bfloat16, torch.int64, 0, seed=5)
    want_q, want_w = cpu_reference(args)
    q, w, ws, freqs, pos = (a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        q8, wo = new_outputs(q)
        NATIVE(q, q8, w, wo, ws, freqs, pos)
    s.synchronize()
    assert_same_fp8(q8, want_q, "side stream q_fp8")
    assert_same_f32(wo, want_w, "side stream weights_out")


@pytest.mark.parametrize("pdl", [False, True])
def test_cuda_graph_capture_and_replay_with_new_inputs(pdl):
    B, H = 33, 64
    first = make_case(B, H, torch.bfloat16, torch.int32, 0, seed=21)
    q, w, ws, freqs, pos = (a.cuda() if isinstance(a, torch.Tensor) else a for a in first)
    q8, wo = new_outputs(q)
    # warm up on a side stream (as torch.cuda.graphs recommends), then capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        NATIVE(q, q8, w, wo, ws, freqs, pos, enable_pdl=pdl)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        NATIVE(q, q8, w, wo, ws, freqs, pos, enable_pdl=pdl)
    for seed in (22, 23, 24):
        new = make_case(B, H, torch.bfloat16, torch.int32, 0, seed=seed)
        # weight_scale is baked into the graph: keep the captured one for the reference
        new = (new[0], new[1], ws, new[3], new[4])
        q.copy_(new[0]); w.copy_(new[1]); freqs.copy_(new[3]); pos.copy_(new[4])
        q8.view(torch.uint8).fill_(0x5A); wo.fill_(-7.25)
        g.replay()
        torch.cuda.synchronize()
        want_q, want_w = cpu_reference(new)
        assert_same_fp8(q8, want_q, f"graph replay {seed} q_fp8")
        assert_same_f32(wo, want_w, f"graph replay {seed} weights_out")


def test_python_api_on_cuda_allocates_on_the_device():
    args = make_case(7, 16, torch.float16, torch.int64, 2, seed=3)
    want_q, want_w = cpu_reference(args)
    q, w, ws, freqs, pos = (a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
    q8, wo = indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, ws, freqs, pos)
    assert q8.is_cuda and wo.is_cuda
    assert_same_fp8(q8, want_q, "api q_fp8")
    assert_same_f32(wo, want_w, "api weights_out")


@pytest.mark.parametrize("impl", ["native", "composed"])
def test_out_of_range_positions_on_cuda(impl):
    # Not checkable on the host without a sync: such a row gets 128 zero codes and a NaN
    # weights_out (the CUDA backend's documented behaviour, mirrored by the composed path),
    # the other rows are computed normally, nothing is read out of bounds.
    from conftest import COMPOSED
    B, H = 6, 8
    args = make_case(B, H, torch.bfloat16, torch.int64, 0, seed=9)
    want_q, want_w = cpu_reference(args)
    q, w, ws, freqs, pos = (a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
    max_pos = freqs.shape[0]
    pos[1] = max_pos
    pos[4] = -3
    q8, wo = new_outputs(q)
    (NATIVE if impl == "native" else COMPOSED)(q, q8, w, wo, ws, freqs, pos)
    torch.cuda.synchronize()
    bad = torch.tensor([1, 4])
    good = torch.tensor([0, 2, 3, 5])
    codes = q8.cpu().view(torch.uint8)
    assert bool((codes[bad] == 0).all())
    assert bool((wo.cpu()[bad].view(torch.int32) == 0x7FFFFFFF).all())  # the one NaN of weights_out
    assert_same_fp8(q8.cpu()[good], want_q[good], "in-range rows q_fp8")
    assert_same_f32(wo.cpu()[good], want_w[good], "in-range rows weights_out")


# ---- side_inputs_ready: the opt-in behind producer kernels in a CUDA graph ---------------------
# The contract (docs/TORCH.md, "side_inputs_ready"): with side_inputs_ready=True the kernel may
# read positions, freqs and weight before griddepcontrol.wait, i.e. while the kernel right before
# it on the stream still runs (PDL). So those three must have been written before that kernel
# began: by a kernel that completed before it, which a plain launch (every torch op) guarantees.
# Here, in one graph: kernel 1 writes positions, kernel 2 weight, kernel 3 q_input (the kernel
# right before the op, which the op may overlap: q_input is still read after the wait), then the
# op with PDL and the opt-in. Each replay gets new values from the producers; the bytes are
# checked against the CPU backend run on the inputs the producers wrote.
@pytest.mark.parametrize("side_inputs_ready", [True, False], ids=["side-ready", "default"])
@pytest.mark.parametrize("recipe", ["v4_fp8", "v4_fp4", "vllm_v4_fp8", "v32_fp8"])
@pytest.mark.parametrize("tokens", [1, 8, 64])
def test_side_inputs_ready_behind_producer_kernels_in_a_graph(tokens, recipe, side_inputs_ready):
    H, hs = 64, 0.5
    info = indexer_q.recipe_info(recipe)
    assert info.rope and info.weights  # the recipes chosen read all three side inputs
    first = make_case(tokens, H, torch.bfloat16, torch.int64, 2, seed=31)
    ws = first[2]
    # the op's inputs, and the producers' sources (refilled between replays, outside the graph)
    q, w, freqs, pos = (t.cuda() for t in (first[0], first[1], first[3], first[4]))
    q_src, w_src, pos_src = q.clone(), w.clone(), pos.clone()
    outs = new_recipe_outputs(recipe, q)

    def step():
        torch.mul(pos_src, 1, out=pos)  # kernel 1: positions
        torch.mul(w_src, 1, out=w)      # kernel 2: weight
        torch.mul(q_src, 1, out=q)      # kernel 3, right before the op: q_input
        indexer_q.quant_q(recipe, q, w, ws, freqs, pos, q_out=outs[0], q_sf=outs[1],
                          weights_out=outs[2], head_scale=hs, enable_pdl=True,
                          side_inputs_ready=side_inputs_ready)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up, as torch.cuda.graphs recommends
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for seed in (32, 33, 34, 35):
        new = make_case(tokens, H, torch.bfloat16, torch.int64, 2, seed=seed)
        q_src.copy_(new[0]); w_src.copy_(new[1]); pos_src.copy_(new[4])
        freqs.copy_(new[3])  # final long before the graph runs: allowed
        for t in outs:
            if t is not None and t.numel():
                t.view(torch.uint8).fill_(0x5A)
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        # what the producers wrote, run through the CPU backend
        want = new_recipe_outputs(recipe, q.cpu())
        indexer_q.quant_q(recipe, q.cpu(), w.cpu(), ws, freqs.cpu(), pos.cpu(), q_out=want[0],
                          q_sf=want[1], weights_out=want[2], head_scale=hs)
        assert torch.equal(pos.cpu(), new[4])  # the producers ran
        assert_same_outputs(outs, want, f"{recipe} T={tokens} replay {seed} "
                                        f"side_inputs_ready={side_inputs_ready}")
