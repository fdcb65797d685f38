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


# ---- kside_store_plan: the plan decoded by the CPU binding == plan_positions_slots + kside_store ----
PLAN_OP = torch.ops.indexer_q.kside_store_plan.default
LOC_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.uint16,
              torch.uint32, torch.uint64]


def edge_plan(n, m, ratio, seed):
    """(N, 16) uint8 records with every kind of token: multiples and non-multiples of the ratio,
    seq_len 0, 0xFFFFFFFF and values >= 2^31 (negative int32 positions), ragged ids in and past
    [0, M), junk in the unread bytes."""
    g = torch.Generator().manual_seed(seed)
    rec = torch.randint(0, 256, (n, 16), generator=g, dtype=torch.int32).to(torch.uint8)
    words = rec.view(torch.int32)
    seq = torch.randint(1, 60, (n,), generator=g) * ratio
    seq[1::5] += 1
    seq[2::9] = 0
    seq[3::11] = 0xFFFFFFFF
    seq[4::13] = 2**31 + ratio
    words[:, 0] = (seq & 0xFFFFFFFF).to(torch.int64).to(torch.int32)
    ragged = torch.randint(0, m + 3, (n,), generator=g)
    rec[:, 4] = (ragged & 0xFF).to(torch.uint8)
    rec[:, 5] = (ragged >> 8).to(torch.uint8)
    return rec


def outcome(fn, cache):
    """("ok", the cache's bytes after fn(c) on a copy) or ("error", the message)."""
    c = cache.clone()
    try:
        fn(c)
    except RuntimeError as e:
        assert torch.equal(c, cache), "nothing written on error"
        return ("error", str(e).splitlines()[0])
    return ("ok", c)


def same_outcome(a, b, what):
    assert a[0] == b[0], f"{what}: {a[0]} {a[1] if a[0] == 'error' else ''} vs {b[0]} " \
                         f"{b[1] if b[0] == 'error' else ''}"
    if a[0] == "ok":
        assert_cache(a[1], b[1], what)
    else:
        assert a[1] == b[1], what


@pytest.mark.parametrize("is_decode", [True, False])
@pytest.mark.parametrize("n", [1, 7, 64, 65, 300])  # the binding's stack buffer holds 64 tokens
@pytest.mark.parametrize("ratio", [4, 128, 2**32 - 1])
def test_plan_op_equals_plan_positions_slots(is_decode, n, ratio):
    m = n if is_decode else n + 5
    plan = edge_plan(n, m, ratio, n + ratio % 1000)
    g = torch.Generator().manual_seed(n)
    x, w, freqs, _, _, _ = random_case(n, torch.bfloat16, 16, n, False)
    max_pos = freqs.shape[0]
    cache = torch.randint(0, 256, (max(4 * m, 128) // 16 + 1, 132 * 16), generator=g,
                          dtype=torch.int32).to(torch.uint8)
    k = indexer_q.kside.KSIDE_RECIPES.index("v4_k_fp8")
    taken = 0
    for dtype in LOC_DTYPES:
        if dtype != torch.int64 and n > 100:
            continue
        narrow = dtype in (torch.int8, torch.uint8)
        loc = torch.randperm(127 if narrow else 4 * m, generator=g)[:m]
        if dtype.is_signed:
            loc[::6] = -3  # a negative slot: the token is skipped
        loc = loc.to(dtype)
        # tokens whose position is out of range make the CPU op refuse the call: the first
        # plan has some (both routes must refuse alike), the second none
        pos, slots = indexer_q.plan_positions_slots(plan, loc, is_decode=is_decode,
                                                    compress_ratio=ratio)
        bad = (slots >= 0) & ((pos < 0) | (pos >= max_pos))
        fixed = plan.clone()
        fixed.view(torch.int32)[bad, 0] = 1 if is_decode else -1  # skipped
        for p0 in (plan, fixed):
            for strided_plan in (False, True):
                p = p0
                if strided_plan:  # every record in a wider buffer, each byte at stride 2
                    buf = torch.zeros(n, 32, dtype=torch.uint8)
                    buf[:, ::2] = p0
                    p = buf[:, ::2]
                rp, rs = indexer_q.plan_positions_slots(p, loc, is_decode=is_decode,
                                                        compress_ratio=ratio)
                got = outcome(lambda c: PLAN_OP(k, x, w, 1e-6, freqs, p, loc, is_decode, ratio,
                                                c, 16), cache)
                ref = outcome(lambda c: NATIVE("v4_k_fp8", x, w, 1e-6, freqs, rp, rs, c, 16),
                              cache)
                same_outcome(got, ref, f"n {n} ratio {ratio} out_loc {dtype} "
                                       f"strided {strided_plan} fixed {p0 is fixed}")
                taken += got[0] == "ok"
        if dtype == torch.int64:  # a strided out_loc (every other entry of a longer tensor)
            wide = torch.full((2 * m,), 10**6, dtype=torch.int64)
            wide[::2] = loc
            got = outcome(lambda c: PLAN_OP(k, x, w, 1e-6, freqs, fixed, wide[::2], is_decode,
                                            ratio, c, 16), cache)
            ref = outcome(lambda c: PLAN_OP(k, x, w, 1e-6, freqs, fixed, loc, is_decode, ratio,
                                            c, 16), cache)
            same_outcome(got, ref, f"n {n} ratio {ratio}, strided out_loc")
            assert got[0] == "ok"
    assert taken > 0


def test_plan_op_composite_kernel_equals_the_binding(monkeypatch):
    # the CompositeExplicitAutograd kernel (what a CUDA / XPU call runs), called on CPU tensors:
    # directly, and through the dispatcher as for a CUDA / XPU tensor (redispatch to that key)
    n, ratio = 33, 4
    plan = edge_plan(n, n, ratio, 5)
    plan.view(torch.int32)[:, 0] = (torch.arange(n) % 7 + 1) * 4 + (torch.arange(n) % 3 == 0)
    x, w, freqs, _, _, cache = random_case(n, torch.float32, 1, 2, True)
    cache = torch.zeros(n, 68, dtype=torch.uint8)
    a, b = cache.clone(), cache.clone()
    k = indexer_q.kside.KSIDE_RECIPES.index("v4_k_fp4")
    PLAN_OP(k, x, w, 1e-6, freqs, plan, torch.arange(n), True, ratio, a, 1)
    indexer_q.kside._store_plan_composite(k, x, w, 1e-6, freqs, plan, torch.arange(n), True,
                                          ratio, b, 1)
    assert_cache(b, a, "composite == binding")
    assert not torch.equal(a, cache)
    # the complex64 freq_cis table, read as its float32 view: the same bytes on both routes
    cis = torch.view_as_complex(freqs.view(-1, 32, 2))
    for run in (PLAN_OP, indexer_q.kside._store_plan_composite):
        c = cache.clone()
        run(k, x, w, 1e-6, cis, plan, torch.arange(n), True, ratio, c, 1)
        assert_cache(c, a, f"{run}, complex freq_cis")
    derived = []
    pps = indexer_q.kside.plan_positions_slots
    monkeypatch.setattr(indexer_q.kside, "plan_positions_slots",
                        lambda *a_, **k_: (derived.append(1), pps(*a_, **k_))[1])
    for key in (torch._C.DispatchKey.CUDA, torch._C.DispatchKey.XPU):
        c = cache.clone()
        PLAN_OP.redispatch(torch._C.DispatchKeySet(key), k, x, w, 1e-6, cis, plan,
                           torch.arange(n), True, ratio, c, 1)
        assert_cache(c, a, f"dispatched as {key}")
    assert len(derived) == 2, "the composite kernel ran"


def test_plan_op_opcheck_and_meta():
    n = 6
    plan = torch.zeros(n, 4, dtype=torch.int32)
    plan[:, 0] = 4 * torch.arange(1, n + 1) + (torch.arange(n) == 2)
    plan = plan.view(torch.uint8)
    x, w, freqs, _, _, _ = random_case(n, torch.float32, 1, 3, False)
    cache = torch.zeros(n, 132, dtype=torch.uint8)
    torch.library.opcheck(PLAN_OP, (0, x, w, 1e-6, freqs, plan, torch.arange(n, dtype=torch.int32),
                                    True, 4, cache, 1))
    m = [t.to("meta") for t in (x, w, freqs, plan, torch.arange(n), cache)]
    PLAN_OP(0, m[0], m[1], 1e-6, m[2], m[3], m[4], True, 4, m[5], 1)
    with pytest.raises(RuntimeError, match="indexer_q: kvcache: expected the device of input"):
        PLAN_OP(0, m[0], m[1], 1e-6, m[2], m[3], m[4], True, 4, cache, 1)
    with pytest.raises(ValueError, match="indexer_q: out_loc: expected 6 entries"):
        PLAN_OP(0, m[0], m[1], 1e-6, m[2], m[3], m[4][:5], True, 4, m[5], 1)


def test_plan_op_bad_inputs_name_the_argument_and_write_nothing():
    n = 6
    plan = torch.zeros(n, 4, dtype=torch.int32)
    plan[:, 0] = 4 * torch.arange(1, n + 1)
    plan = plan.view(torch.uint8)
    x, w, freqs, _, _, _ = random_case(n, torch.float32, 1, 3, False)
    cache = torch.zeros(n, 132, dtype=torch.uint8)
    loc = torch.arange(n)
    good = dict(recipe=0, input=x, weight=w, eps=1e-6, freqs=freqs, plan=plan, out_loc=loc,
                is_decode=True, compress_ratio=4, kvcache=cache, page_size=1)

    def expect(msg, **bad):
        with pytest.raises(RuntimeError, match=msg):
            PLAN_OP(*{**good, **bad}.values())
        assert not cache.any(), "nothing written"

    expect("indexer_q: recipe: expected the index", recipe=2)
    expect("indexer_q: plan: expected a uint8 tensor", plan=plan.view(torch.int8))
    expect(r"indexer_q: plan: expected shape \(N, 16\), got \(6, 8\)", plan=plan[:, :8])
    expect(r"indexer_q: plan: expected shape \(N, 16\), got \(96,\)", plan=plan.reshape(-1))
    expect("indexer_q: out_loc: expected a 1-D integer", out_loc=loc.float())
    expect("indexer_q: out_loc: expected a 1-D integer", out_loc=loc > 2)
    expect("indexer_q: out_loc: expected a 1-D integer", out_loc=loc.view(2, 3))
    expect("indexer_q: out_loc: expected 6 entries", out_loc=loc[:5])
    expect("indexer_q: out_loc: expected at least 6 entries", out_loc=loc[:5], is_decode=False)
    expect("indexer_q: compress_ratio: expected a positive 32-bit", compress_ratio=0)
    expect("indexer_q: compress_ratio: expected a positive 32-bit", compress_ratio=2**32)
    bad_plan = plan.clone()
    bad_plan.view(torch.int32)[3, 0] = 0  # position -4, a taken token
    expect("indexer_q: positions", plan=bad_plan)
    expect("indexer_q: slots", out_loc=loc + 1)  # slot 6 of 6
    expect("indexer_q: eps", eps=-1.0)
    expect("indexer_q: weight", weight=w.half())
    expect("indexer_q: kvcache", kvcache=cache[:, :68])
    expect("indexer_q: page_size", page_size=0)
    expect("indexer_q: input", input=x[:, :64])
    cis = torch.view_as_complex(freqs.view(-1, 32, 2))
    expect("indexer_q: freqs_cis: expected complex64", freqs=cis.to(torch.complex128))
    expect(r"indexer_q: freqs_cis: expected shape \(max_pos, 32\)", freqs=cis[:, :16])
    expect("indexer_q: freqs_cis: expected a contiguous table", freqs=cis[::2])
    expect("indexer_q: freqs: expected dtype fp32", freqs=freqs.double())


def test_wrapper_takes_one_operator_call(monkeypatch):
    # the engines' call shapes all run kside_store_plan (never the checked path) with the bytes
    # of plan_positions_slots + kside_store
    import collections
    ks = indexer_q.kside
    monkeypatch.setattr(ks, "_compress_checked",
                        lambda *a: (_ for _ in ()).throw(AssertionError("checked path taken")))
    DecodePlan = collections.namedtuple("DecodePlan", "compress_ratio plan_d")
    PrefillPlan = collections.namedtuple("PrefillPlan", "compress_ratio plan_c plan_w pin_buffer")
    for name in kside_files():
        args, want, meta = load(name, "cpu")
        assert args["norm_weight"].dtype == args["kv"].dtype  # (variant 3: back to it exactly)
        for variant in range(4):
            a = dict(args, kvcache=torch.full_like(args["kvcache"], 0xA5))
            if variant == 1:
                a["freq_cis"] = torch.view_as_complex(a["freq_cis"].view(-1, 32, 2))
                a["out_loc"] = a["out_loc"].to(torch.int32)
            if variant == 2:  # SGLang's plan object
                ratio = a.pop("compress_ratio")
                a["plan"] = (DecodePlan(ratio, a["plan"]) if a.pop("is_decode")
                             else PrefillPlan(ratio, a["plan"], None, None))
            if variant == 3:
                a["norm_weight"] = a["norm_weight"].double()  # converted to kv's dtype
            indexer_q.compress_norm_rope_store(**a)
            assert_cache(a["kvcache"], want, f"{name} variant {variant}")


@pytest.mark.parametrize("bad,exc,msg", [
    (dict(plan="plan"), TypeError, "indexer_q: plan: expected a"),
    (dict(plan_dtype=torch.int8), TypeError, "indexer_q: plan: expected a uint8 tensor"),
    (dict(plan_cols=8), ValueError, r"indexer_q: plan: expected shape \(N, 16\)"),
    (dict(out_loc=torch.zeros(3, dtype=torch.float32)), TypeError, "indexer_q: out_loc: expected a 1-D"),
    (dict(out_loc_len=1), ValueError, "indexer_q: out_loc: expected"),
    (dict(compress_ratio=0), ValueError, "indexer_q: compress_ratio: expected a positive"),
    (dict(compress_ratio=4.5), TypeError, "indexer_q: compress_ratio: expected an integer"),
    (dict(page_size=4.7), TypeError, "indexer_q: page_size: expected an integer"),
    (dict(norm_eps="x"), TypeError, "indexer_q: eps: expected a float"),
    (dict(cis=torch.complex128), TypeError, "indexer_q: freqs_cis: expected complex64"),
    (dict(cis="half"), ValueError, r"indexer_q: freqs_cis: expected shape \(max_pos, 32\)"),
    (dict(cis="strided"), ValueError, "indexer_q: freqs_cis: expected a contiguous table"),
    (dict(preshuffle_size=16), ValueError, "indexer_q: preshuffle_size"),
    (dict(bf16_store=True), ValueError, "indexer_q: bf16_store"),
    (dict(bad_position=True), RuntimeError, "indexer_q: positions"),  # the library's validator
])
def test_wrapper_errors_keep_their_types(bad, exc, msg):
    args, _, _ = load(kside_files()[0], "cpu")
    before = args["kvcache"].clone()
    a = dict(args)
    if "plan_dtype" in bad:
        a["plan"] = a["plan"].view(bad.pop("plan_dtype"))
    if "plan_cols" in bad:
        a["plan"] = a["plan"][:, :bad.pop("plan_cols")]
    if "out_loc_len" in bad:
        a["out_loc"] = a["out_loc"][:bad.pop("out_loc_len")]
    if "cis" in bad:
        how = bad.pop("cis")
        cis = torch.view_as_complex(a["freq_cis"].view(-1, 32, 2))
        a["freq_cis"] = (cis.to(how) if isinstance(how, torch.dtype) else cis[:, :16]
                         if how == "half" else cis[::2])
    if bad.pop("bad_position", False):  # token 0 taken (seq_len 0, ragged_id 0): position -ratio
        a["plan"] = a["plan"].clone()
        a["plan"][0, :6] = 0
    a.update(bad)
    with pytest.raises(exc, match=msg):
        indexer_q.compress_norm_rope_store(**a)
    assert torch.equal(args["kvcache"], before), "nothing written"
