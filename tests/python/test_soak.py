"""Soak test: no operator grows the process per call (issue 22).

Every operator of the package (and the two main wrappers) is called 100,000 times on the smallest
inputs (one token, one head) and the resident set size must stay flat: growth after a warm-up at
most GROWTH_LIMIT bytes, well under the 4.8 MB a leak of 48 bytes a call would add (the stable
ABI's str conversion of torch 2.10-2.13 leaked 38-50 bytes a call on every operator taking the
recipe, 800-1100 on the str[] ones; the bindings now avoid it, see bindings/torch/binding.h). The
composed operators, about 1 ms a call, get COMPOSED_CALLS calls and a limit of 24 bytes a call.
Growth is read from /proc/self/statm (Linux) or resource.getrusage's peak RSS elsewhere.
SOAK_CALLS / SOAK_COMPOSED_CALLS override the counts (e.g. for a longer run).
"""

import os
import resource
import sys
import time

import pytest
import torch

import indexer_q
import indexer_q.kside  # noqa: F401  (krecipes)

CALLS = int(os.environ.get("SOAK_CALLS", "100000"))
WARMUP = 2000
# A 48-byte-a-call leak adds 4.8 MB over 100,000 calls; 1 MiB allows the allocator's noise.
GROWTH_LIMIT = 1 << 20

OPS = torch.ops.indexer_q


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # no procfs: the peak RSS (kilobytes on Linux, bytes on macOS)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _q_case(recipe):
    info = indexer_q.recipe_info(recipe)
    x = torch.linspace(-3, 3, 128).to(torch.bfloat16).view(1, 1, 128)
    q_out = torch.empty((1, 1, 64 if info.fp4 else 128),
                        dtype=torch.uint8 if info.fp4 else torch.float8_e4m3fn)
    q_sf = (torch.empty((1, 1), dtype=torch.int32) if info.fp4
            else torch.empty((1, 1, 1), dtype=torch.float32) if info.scale_out else None)
    w = torch.ones((1, 1), dtype=torch.bfloat16) if info.weights else torch.empty(0)
    w_out = torch.empty((1, 1, 1), dtype=torch.float32) if info.weights else torch.empty(0)
    freqs = torch.rand((4, 64), dtype=torch.float32) if info.rope else torch.empty(0)
    pos = torch.tensor([2], dtype=torch.int64) if info.rope else torch.empty(0)
    return (recipe, x, q_out, q_sf, w, w_out, 0.25, freqs, pos, True, 1.0)


def _k_case(recipe):
    tb = 132 if recipe == "v4_k_fp8" else 68
    x = torch.linspace(-3, 3, 128).view(1, 128)
    return (recipe, x, torch.ones(128), 1e-6, torch.rand((4, 64)), torch.tensor([1]),
            torch.tensor([0]), torch.zeros((1, tb), dtype=torch.uint8), 1, True)


def _cases():
    q = _q_case("v4_fp8")
    v4 = q[1:3] + q[4:9] + (True,)  # the historical v4_fp8 schema
    fp4 = _q_case("v4_fp4")
    k = _k_case("v4_k_fp8")
    kplan = torch.tensor([[4] + [0] * 15], dtype=torch.uint8)
    return [
        ("quant_q", lambda: OPS.quant_q(*q)),
        ("quant_q fp4", lambda: OPS.quant_q(*fp4)),
        ("quant_q_composed", lambda: OPS.quant_q_composed(*q)),
        ("quant_q_check", lambda: OPS.quant_q_check(*q)),
        ("quant_q_reference", lambda: OPS.quant_q_reference(*q)),
        ("fused_q_indexer_rope_hadamard_quant",
         lambda: OPS.fused_q_indexer_rope_hadamard_quant(*v4)),
        ("fused_q_indexer_rope_hadamard_quant_composed",
         lambda: OPS.fused_q_indexer_rope_hadamard_quant_composed(*v4)),
        ("recipes", lambda: OPS.recipes()),
        ("recipe_info", lambda: OPS.recipe_info("v4_fp8")),
        ("kside_store", lambda: OPS.kside_store(*k)),
        ("kside_store_composed", lambda: OPS.kside_store_composed(*k)),
        ("krecipes", lambda: OPS.krecipes()),
        # SGLang's plan-driven call (a decode plan: seq_len 4, ratio 4: position 0, slot 0)
        ("kside_store_plan", lambda: OPS.kside_store_plan(0, k[1], k[2], 1e-6, k[4], kplan, k[6],
                                                          True, 4, k[7], 1)),
        # the allocating operator the wrappers call (its outputs freed each call)
        ("quant_q_alloc", lambda: OPS.quant_q_alloc(indexer_q.RECIPES.index("v4_fp8"), q[1], q[4],
                                                    0.25, q[7], q[8], 0, 3, True, 1.0)),
        ("quant_q_alloc fp4", lambda: OPS.quant_q_alloc(indexer_q.RECIPES.index("v4_fp4"), fp4[1],
                                                        fp4[4], 0.25, fp4[7], fp4[8], 0, 3, True,
                                                        1.0)),
        # the public wrappers (their allocations must all be freed too)
        ("indexer_q.quant_q", lambda: indexer_q.quant_q("v4_fp8", q[1], q[4], 0.25, q[7], q[8])),
        ("indexer_q.kside_store", lambda: indexer_q.kside_store(*k[:9])),
    ]


# The composed operators run dozens of ATen ops a call (about 1 ms on a free core): they get 2,000
# calls, with a limit of 24 bytes a call (48 KB), which a 48-byte-a-call leak (96 KB) exceeds.
COMPOSED_CALLS = int(os.environ.get("SOAK_COMPOSED_CALLS", "2000"))


@pytest.mark.parametrize("name,call", _cases(), ids=[n for n, _ in _cases()])
def test_rss_flat(name, call):
    composed = "composed" in name
    calls = COMPOSED_CALLS if composed else CALLS
    limit = calls * 24 if composed else GROWTH_LIMIT
    for _ in range(WARMUP // 2 if composed else WARMUP):  # (allocator caches settle)
        call()
    before = _rss_bytes()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - t0
    growth = _rss_bytes() - before
    print(f"{name}: {calls} calls, RSS +{growth} bytes ({growth / calls:.1f} bytes a call), "
          f"{elapsed / calls * 1e6:.1f} us a call")
    assert growth <= limit, (
        f"{name}: RSS grew by {growth} bytes over {calls} calls ({growth / calls:.1f} bytes a "
        f"call; limit {limit} bytes)")
