"""The key side through torch (docs/KSIDE-SPEC.md): indexer_q::kside_store (native CPU / CUDA and the
composed ATen path) and indexer_q.compress_norm_rope_store (SGLang's plan-driven call).

- every golden file of tests/data/golden/kside (SGLang's kernel on an H200), every cache byte
  (pre-filled 0xA5), through the wrapper (complex and float freq tables) and the composed path;
- random inputs with edge rows (zeros, NaN, Inf, huge, tiny, subnormal, ties), every dtype and
  page size: composed == native byte for byte;
- the composed path's exact fma and MUFU.RSQ model on hand-picked operands;
- opcheck; bad inputs raise errors naming the argument and write nothing.
"""

import os

import pytest
import torch

import indexer_q
from conftest import CUDA_OK, DEVICES, GOLDEN_DIR, read_safetensors

KSIDE_DIR = os.path.join(GOLDEN_DIR, "kside")
NATIVE = torch.ops.indexer_q.kside_store
COMPOSED = torch.ops.indexer_q.kside_store_composed


def kside_files():
    return sorted(f for f in os.listdir(KSIDE_DIR) if f.startswith("kside_") and f.endswith(".safetensors"))


def load(name, device):
    t, meta = read_safetensors(os.path.join(KSIDE_DIR, name))
    eps = torch.tensor([int(meta["eps_bits"], 16)], dtype=torch.int32).view(torch.float32).item()
    fill = int(meta["cache_fill"], 16)
    cache = torch.full_like(t["kvcache"], fill).to(device)
    args = dict(
        kv=t["input"].to(device), plan=t["plan"].to(device), norm_weight=t["weight"].to(device),
        norm_eps=eps, freq_cis=t["freqs_cis"].to(device), out_loc=t["out_loc"].to(device),
        kvcache=cache, page_size=int(meta["page_size"]), use_fp4=meta["variant"] == "v4_k_fp4",
        is_decode=meta["mode"] == "decode", compress_ratio=int(meta["compress_ratio"]))
    return args, t["kvcache"], meta


def assert_cache(got, want, what):
    got = got.cpu()
    diff = (got != want).nonzero()
    assert diff.numel() == 0, f"{what}: {diff.shape[0]} bytes differ, first at {diff[0].tolist()}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", kside_files())
def test_golden_through_the_wrapper(name, device):
    args, want, meta = load(name, device)
    indexer_q.compress_norm_rope_store(**args)
    assert_cache(args["kvcache"], want, f"{name} on {device}")
    # the complex table SGLang passes gives the same bytes
    args2, _, _ = load(name, device)
    args2["freq_cis"] = torch.view_as_complex(args2["freq_cis"].view(-1, 32, 2))
    indexer_q.compress_norm_rope_store(**args2)
    assert_cache(args2["kvcache"], want, f"{name} on {device}, complex freq_cis")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", kside_files())
def test_golden_composed(name, device):
    args, want, meta = load(name, device)
    pos, slots = indexer_q.plan_positions_slots(args["plan"], args["out_loc"], is_decode=args["is_decode"],
                                                compress_ratio=args["compress_ratio"])
    indexer_q.kside_store(meta["variant"], args["kv"], args["norm_weight"], args["norm_eps"],
                          args["freq_cis"], pos, slots, args["kvcache"], args["page_size"], composed=True)
    assert_cache(args["kvcache"], want, f"{name} composed on {device}")


def test_plan_derivation_follows_the_spec():
    # decode: skipped unless seq_len % ratio == 0; position = int32(seq_len - ratio)
    plan = torch.zeros(4, 16, dtype=torch.uint8)
    seq = torch.tensor([8, 9, 0, 0xFFFFFFFF], dtype=torch.int64)
    plan[:, 0:4] = torch.stack([(seq >> (8 * i)) & 0xFF for i in range(4)], 1).to(torch.uint8)
    out_loc = torch.tensor([5, 6, 7, 8])
    pos, slots = indexer_q.plan_positions_slots(plan, out_loc, is_decode=True, compress_ratio=4)
    assert slots.tolist() == [5, -1, 7, -1]  # 0xFFFFFFFF % 4 == 3: skipped
    assert pos.tolist() == [4, 0, -4, 0]     # seq_len 0: 0 - 4 as int32 = -4 (the op then skips it: bad position)
    # extend: slot = out_loc[ragged_id]; 0xFFFFFFFF or ragged_id >= M skips
    plan[:, 4] = torch.tensor([2, 0, 9, 1], dtype=torch.uint8)
    pos, slots = indexer_q.plan_positions_slots(plan, torch.tensor([10, 11, 12, 13, 14]), is_decode=False,
                                                compress_ratio=4)
    assert slots.tolist() == [12, 10, -1, -1]
    assert pos.tolist() == [4, 5, 0, 0]


# ---- random cases: composed == native ----
def random_case(N, dtype, page_size, seed, fp4, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.rand(N, 1, generator=g) * 32 - 16)
    x = torch.randn(N, 128, generator=g) * mag
    kinds = torch.randint(0, 16, (N,), generator=g)
    for t in range(N):
        k = int(kinds[t])
        if k == 0:
            x[t] = 0
        elif k == 1:
            x[t, 5] = float("nan")
        elif k == 2:
            x[t, 70] = float("-inf")
        elif k == 3:
            x[t] = 1.2e18
        elif k == 4:
            x[t] = 1e-30 * torch.randn(128, generator=g)
        elif k == 5:
            x[t] = 3e-39 * torch.randn(128, generator=g)
        elif k == 6:
            x[t] = torch.randint(-4, 5, (128,), generator=g).float()
    w = 1 + 0.25 * torch.randn(128, generator=g)
    w[3] = 0
    max_pos = 300
    p = torch.arange(max_pos, dtype=torch.float64)[:, None] * 10000.0 ** (-2 * torch.arange(32) / 64.0)
    freqs = torch.stack([torch.cos(p), torch.sin(p)], 2).reshape(max_pos, 64).float()
    pos = torch.randint(0, max_pos, (N,), generator=g)
    pages = (N + page_size) // page_size + 1
    slots = torch.randperm(pages * page_size, generator=g)[:N]
    slots[::7] = -1
    tb = 68 if fp4 else 132
    cache = torch.randint(0, 256, (pages, tb * page_size), generator=g, dtype=torch.int32).to(torch.uint8)
    return [a.to(device) for a in (x.to(dtype), w.to(dtype), freqs, pos, slots, cache)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["v4_k_fp8", "v4_k_fp4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_composed_equals_native(recipe, dtype, page_size, device):
    x, w, freqs, pos, slots, cache = random_case(97, dtype, page_size, 11 + page_size, recipe == "v4_k_fp4", device)
    a, b = cache.clone(), cache.clone()
    NATIVE(recipe, x, w, 1e-6, freqs, pos, slots, a, page_size)
    COMPOSED(recipe, x, w, 1e-6, freqs, pos, slots, b, page_size)
    assert_cache(b, a.cpu(), f"{recipe} {dtype} page_size {page_size}")
    assert not torch.equal(a, cache), "the op wrote something"


def test_composed_fma_and_rsq_on_hard_operands():
    # rows whose sums of squares and RoPE products round differently without a fused multiply-add,
    # and arguments of the reciprocal square root over many binades: composed == native
    rows = []
    for e in range(-60, 61, 3):
        r = torch.full((128,), 2.0 ** e) * (1 + torch.arange(128) * 2.0 ** -20)
        rows.append(r)
    rows.append(torch.tensor([1 + 2.0 ** -12] * 128))
    rows.append(torch.tensor([(1 - 2.0 ** -24) * 2.0 ** -63] * 128))
    x = torch.stack(rows).float()
    N = x.shape[0]
    w = torch.ones(128)
    freqs = torch.tensor([[0.1, 0.99498743710662] * 32, [1.0 - 2.0 ** -24, 2.0 ** -12] * 32]).float()
    pos = torch.arange(N) % 2
    slots = torch.arange(N)
    for recipe, tb in (("v4_k_fp8", 132), ("v4_k_fp4", 68)):
        for eps in (1e-6, 0.0, 1e-40, 3.0):
            a = torch.zeros(N, tb, dtype=torch.uint8)
            b = a.clone()
            NATIVE(recipe, x, w, eps, freqs, pos, slots, a, 1)
            COMPOSED(recipe, x, w, eps, freqs, pos, slots, b, 1)
            assert_cache(b, a, f"{recipe} eps {eps}")


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x, w, freqs, pos, slots, cache = random_case(9, torch.float32, 16, 3, False, device)
    torch.library.opcheck(NATIVE.default, ("v4_k_fp8", x, w, 1e-6, freqs, pos, slots, cache, 16))
    x4, w4, f4, p4, s4, c4 = random_case(5, torch.bfloat16, 1, 4, True, device)
    torch.library.opcheck(NATIVE.default, ("v4_k_fp4", x4, w4, 1e-6, f4, p4, s4, c4, 1), {"enable_pdl": True})


# ---- errors: the argument is named, nothing is written ----
@pytest.mark.parametrize("op", [NATIVE, COMPOSED], ids=["native", "composed"])
def test_bad_inputs_name_the_argument_and_write_nothing(op):
    x, w, freqs, pos, slots, cache = random_case(12, torch.float32, 16, 5, False)
    before = cache.clone()

    def expect(msg, *args):
        with pytest.raises((RuntimeError, ValueError, TypeError), match=msg):
            op(*args)
        assert torch.equal(cache, before), "nothing written"

    expect("recipe", "v4_k_fp9", x, w, 1e-6, freqs, pos, slots, cache, 16)
    bad = pos.clone()
    bad[3] = 300  # == max_pos
    expect("positions", "v4_k_fp8", x, w, 1e-6, freqs, bad, slots, cache, 16)
    bad = slots.clone()
    bad[4] = cache.shape[0] * 16  # one past the last slot
    expect("slots", "v4_k_fp8", x, w, 1e-6, freqs, pos, bad, cache, 16)
    expect("slots", "v4_k_fp8", x, w, 1e-6, freqs, pos, slots.int(), cache, 16)
    expect("kvcache", "v4_k_fp4", x, w, 1e-6, freqs, pos, slots, cache, 16)  # FP8-sized pages
    expect("page_size", "v4_k_fp8", x, w, 1e-6, freqs, pos, slots, cache, 12)
    expect("weight", "v4_k_fp8", x, w.half(), 1e-6, freqs, pos, slots, cache, 16)


def test_wrapper_errors():
    args, _, _ = load(kside_files()[0], "cpu")
    with pytest.raises(ValueError, match="plan"):
        indexer_q.compress_norm_rope_store(**{**args, "plan": args["plan"][:, :8]})
    with pytest.raises(ValueError, match="out_loc"):
        indexer_q.compress_norm_rope_store(**{**args, "out_loc": args["out_loc"][:3]})
    with pytest.raises(ValueError, match="compress_ratio"):
        indexer_q.compress_norm_rope_store(**{**args, "compress_ratio": 0})


@pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")
def test_cuda_skips_out_of_range_tokens():
    x, w, freqs, pos, slots, cache = random_case(40, torch.float32, 16, 9, False)
    pos[2] = 300
    pos[5] = -1
    slots[8] = cache.shape[0] * 16
    ref_slots = slots.clone()
    ref_slots[[2, 5, 8]] = -1
    want = cache.clone()
    NATIVE("v4_k_fp8", x, w, 1e-6, freqs, pos, ref_slots, want, 16)
    got = cache.cuda()
    NATIVE("v4_k_fp8", x.cuda(), w.cuda(), 1e-6, freqs.cuda(), pos.cuda(), slots.cuda(), got, 16)
    assert_cache(got, want, "cuda, out-of-range tokens skipped")
