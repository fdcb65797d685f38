"""Duplicate slots through torch (docs/KSIDE.md "Duplicate slots"): several tokens of one call
naming the same slot give the one-thread result, the last token of a slot deciding its row, on
the native op and on the composed ATen path, on every call. 10 calls each at 8 torch threads
(the composed path's index_copy_ runs threaded there): one distinct cache per path, the same
for both, and equal to a call with only the last token of each slot (the others' slots -1).
Before the composed path kept only the last token of a slot, every such call gave another cache
(10 distinct in 10 calls on the CPU)."""

import pytest
import torch

import indexer_q  # noqa: F401  (loads the ops)
from conftest import DEVICES

NATIVE = torch.ops.indexer_q.kside_store
COMPOSED = torch.ops.indexer_q.kside_store_composed


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe,token_bytes", [("v4_k_fp8", 132), ("v4_k_fp4", 68)])
def test_duplicate_slots_last_token_wins(device, recipe, token_bytes):
    g = torch.Generator().manual_seed(5)
    n, ps, pages, max_pos = 3000, 16, 64, 64
    x = torch.randn(n, 128, generator=g)
    w = 1 + 0.25 * torch.randn(128, generator=g)
    ang = torch.arange(max_pos)[:, None] * (10000.0 ** (-torch.arange(32) / 32.0))[None, :]
    freqs = torch.stack([ang.cos(), ang.sin()], -1).reshape(max_pos, 64).float()
    pos = torch.randint(0, max_pos, (n,), generator=g)
    slots = torch.randint(0, pages * ps, (n,), generator=g)  # 3000 tokens in 1024 rows
    slots[::7] = -1
    # only the last token of each slot
    last = torch.full_like(slots, -1)
    seen = set()
    for t in range(n - 1, -1, -1):
        s = int(slots[t])
        if s >= 0 and s not in seen:
            seen.add(s)
            last[t] = s
    assert len(seen) < int((slots >= 0).sum()), "test setup: duplicates expected"

    def call(op, sl):
        cache = torch.full((pages, token_bytes * ps), 0xA5, dtype=torch.uint8, device=device)
        op(recipe, x.to(device), w.to(device), 1e-6, freqs.to(device), pos.to(device), sl.to(device), cache, ps, True)
        return bytes(cache.cpu().numpy())

    threads = torch.get_num_threads()
    torch.set_num_threads(8)
    try:
        want = call(NATIVE, last)
        for op in (NATIVE, COMPOSED):
            got = {call(op, slots) for _ in range(10)}
            assert len(got) == 1, f"{op}: {len(got)} distinct caches in 10 calls"
            assert got == {want}, f"{op}: not the cache of the last token of each slot"
    finally:
        torch.set_num_threads(threads)
