"""Concurrent calls of the operator from Python threads, with PyTorch's intra-op threads busy.

8 Python threads (torch.ops release the GIL while the operator runs) call the native operator
(indexer_q::quant_q: the library's CPU backend with torch.get_num_threads() threads, one
process-wide pool) and its composed ATen twin (which runs on PyTorch's own intra-op pool) on a
mix of recipes, dtypes and shapes, while another thread keeps PyTorch's intra-op pool busy with
large matmuls. Each phase sets torch.set_num_threads to 1, 2 and 4. Every output is compared byte
for byte (weights_out as int32 bits) with the same call made alone before the threads start; each
call is counted (no lost work); the threads are daemons joined with a deadline (a deadlock fails
the test instead of hanging it)."""

import threading
import time

import pytest
import torch

from conftest import (QUANT, QUANT_COMPOSED, RECIPES, absent_args, assert_same_outputs,  # noqa: E501
                      new_recipe_outputs)
from test_composed_vs_native import make_case

import indexer_q

CALLERS = 8
ROUNDS = 3
DEADLINE_S = 240.0


def _cases():
    shapes = [(1, 1), (3, 8), (17, 16), (64, 8), (5, 64)]
    dtypes = [torch.bfloat16, torch.float16, torch.float32]
    cases = []
    for i, recipe in enumerate(RECIPES):
        for j in range(2):
            k = 2 * i + j
            B, H = shapes[(k + k // 5) % len(shapes)]
            pos = torch.int32 if k % 2 else torch.int64
            q, w, ws, freqs, positions = make_case(B, H, dtypes[k % 3], pos, k % 3, 500 + k)
            hs = 0.125 if indexer_q.recipe_info(recipe).vllm else 1.0
            cases.append((recipe, q, w, ws, freqs, positions, hs))
    return cases


def _call(op, case):
    recipe, q, w, ws, freqs, positions, hs = case
    outs = new_recipe_outputs(recipe, q)
    q_out, q_sf, w_out = outs
    w, w_out, freqs, positions = absent_args(recipe, w, w_out, freqs, positions)
    op(recipe, q, q_out, q_sf, w, w_out, ws, freqs, positions, head_scale=hs)
    return outs


def _bytes(outs):
    q_out, q_sf, w_out = outs
    parts = [q_out.contiguous().view(torch.uint8).flatten(), w_out.contiguous().view(torch.uint8).flatten()]
    if q_sf is not None:
        parts.append(q_sf.contiguous().view(torch.uint8).flatten())
    return torch.cat(parts)


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_python_threads_and_intra_op_threads_byte_exact(threads, restore_threads):
    torch.set_num_threads(threads)
    cases = _cases()
    ops = {"native": QUANT, "composed": QUANT_COMPOSED}
    alone = {}
    for name, op in ops.items():
        for i, c in enumerate(cases):
            alone[name, i] = _bytes(_call(op, c))
    for i, c in enumerate(cases):  # the two paths agree (NaN payloads aside), as elsewhere
        assert_same_outputs(_call(QUANT, c), _call(QUANT_COMPOSED, c), f"{c[0]} native vs composed")

    completed = [0] * CALLERS
    failures = []
    start = threading.Barrier(CALLERS + 2, timeout=60)  # the callers, the busy thread, this one
    stop_busy = threading.Event()

    def caller(t):
        start.wait()
        try:
            for r in range(ROUNDS):
                for k in range(len(cases)):
                    i = (k + 3 * t + r) % len(cases)
                    name = "native" if (t + k) % 3 else "composed"
                    got = _bytes(_call(ops[name], cases[i]))
                    if not torch.equal(got, alone[name, i]):
                        diff = int((got != alone[name, i]).sum())
                        failures.append(f"caller {t}: {name} {cases[i][0]} case {i}: {diff} bytes differ")
                    completed[t] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(f"caller {t}: {type(e).__name__}: {e}")

    def busy():  # PyTorch's intra-op pool kept busy meanwhile
        a = torch.randn(384, 384)
        start.wait()
        while not stop_busy.is_set():
            a = torch.tanh(a @ a.T * 1e-3)

    threads_ = [threading.Thread(target=caller, args=(t,), daemon=True) for t in range(CALLERS)]
    busy_t = threading.Thread(target=busy, daemon=True)
    for th in threads_ + [busy_t]:
        th.start()
    t0 = time.monotonic()
    start.wait()
    for th in threads_:
        th.join(timeout=max(0.0, DEADLINE_S - (time.monotonic() - t0)))
    hung = [i for i, th in enumerate(threads_) if th.is_alive()]
    stop_busy.set()
    busy_t.join(timeout=30)
    assert not hung, f"callers {hung} did not finish within {DEADLINE_S} s (deadlock?)"
    assert not failures, "\n".join(failures[:10])
    assert completed == [ROUNDS * len(cases)] * CALLERS, f"lost work: completed {completed}"
