"""What the Python entry points add to the operator, per call (issue 20: at most 3 us on CPU at
one token).

    PYTHONPATH=python python bench/python_overhead.py [--tokens 1] [--heads 64] [--calls 20000]
                                                      [--rounds 7] [--threads 1] [--device cpu]

For each entry point the same run times, in alternating rounds, (a) the operator alone
(``torch.ops.indexer_q.<op>.default`` on preallocated outputs: dispatcher + binding + kernel)
and (b) the public wrapper (allocating its outputs, checking its arguments, resolving the recipe),
and prints the median per-call time of each and their difference. Nothing here is a test.
"""

import argparse
import statistics
import time

import torch

import indexer_q

OPS = torch.ops.indexer_q


def per_call_us(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def cases(tokens, heads, device):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(tokens, heads, 128, generator=g).to(torch.bfloat16).to(device)
    w = torch.randn(tokens, heads, generator=g).to(torch.bfloat16).to(device)
    freqs = torch.randn(4096, 64, generator=g).to(device)
    pos = torch.randint(0, 4096, (tokens,), generator=g).to(device)
    q8 = torch.empty(tokens, heads, 128, dtype=torch.float8_e4m3fn, device=device)
    wo3 = torch.empty(tokens, heads, 1, dtype=torch.float32, device=device)
    wo2 = torch.empty(tokens, heads, dtype=torch.float32, device=device)
    q4 = torch.empty(tokens, heads, 64, dtype=torch.uint8, device=device)
    sf = torch.empty(tokens, heads, dtype=torch.int32, device=device)
    none = torch.empty(0, device=device)
    x2 = q.reshape(tokens * heads, 128)
    q4n = torch.empty(tokens * heads, 1, 64, dtype=torch.int8, device=device)
    sfn = torch.empty(tokens * heads, 1, dtype=torch.int32, device=device)
    kx = torch.randn(tokens, 128, generator=g).to(device)
    kw = torch.ones(128, device=device)
    kslots = torch.arange(tokens, device=device)
    cache = torch.zeros(max(tokens, 1), 132, dtype=torch.uint8, device=device)
    v4 = OPS.fused_q_indexer_rope_hadamard_quant.default
    qq = OPS.quant_q.default
    ks = OPS.kside_store.default
    return [
        ("fused_q_indexer_rope_hadamard_quant (v4_fp8)",
         lambda: v4(q, q8, w, wo3, 0.125, freqs, pos, True),
         lambda: indexer_q.fused_q_indexer_rope_hadamard_quant(q, w, 0.125, freqs, pos)),
        ("quant_q('v4_fp8')",
         lambda: qq("v4_fp8", q, q8, None, w, wo3, 0.125, freqs, pos, True, 1.0),
         lambda: indexer_q.quant_q("v4_fp8", q, w, 0.125, freqs, pos)),
        ("quant_q('v4_fp4')",
         lambda: qq("v4_fp4", q, q4, sf, w, wo3, 0.125, freqs, pos, True, 1.0),
         lambda: indexer_q.quant_q("v4_fp4", q, w, 0.125, freqs, pos)),
        ("fused_indexer_q_rope_quant (vllm_v4_fp8)",
         lambda: qq("vllm_v4_fp8", q, q8, None, w, wo2, 0.125, freqs, pos, True, 0.5),
         lambda: indexer_q.fused_indexer_q_rope_quant(pos, q, freqs, w, 0.125, 0.5)),
        ("quantize_fp4_indexer_tensor (no RoPE, no weights)",
         lambda: qq("sgl_v41_fp4_quant_rne", x2.view(-1, 1, 128), q4n, sfn, none, none, 1.0,
                    none, none, True, 1.0),
         lambda: indexer_q.quantize_fp4_indexer_tensor(x2)),
        ("kside_store (v4_k_fp8)",
         lambda: ks("v4_k_fp8", kx, kw, 1e-6, freqs, pos, kslots, cache, 1, True),
         lambda: indexer_q.kside_store("v4_k_fp8", kx, kw, 1e-6, freqs, pos, kslots, cache, 1)),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.device}, {a.tokens} token(s) x {a.heads} heads, "
          f"{a.threads} thread(s), {a.rounds} alternating rounds of {a.calls} calls, median")
    print(f"{'entry point':52s} {'op alone':>9s} {'wrapper':>9s} {'added':>8s}  (us a call)")
    for name, op, wrapper in cases(a.tokens, a.heads, a.device):
        for fn in (op, wrapper):  # warm-up
            per_call_us(fn, max(a.calls // 10, 100))
        ops, wraps = [], []
        for _ in range(a.rounds):
            ops.append(per_call_us(op, a.calls))
            wraps.append(per_call_us(wrapper, a.calls))
        o, w = statistics.median(ops), statistics.median(wraps)
        print(f"{name:52s} {o:9.2f} {w:9.2f} {w - o:8.2f}")


if __name__ == "__main__":
    main()
