"""Prints timings of the operator through torch (not a test: pytest does not collect it).

    python tests/python/bench_op.py [--device cpu|cuda] [--heads 64] [--tokens 1,64,1024,16384]

CUDA: median of CUDA-graph replays of 20 calls each (launch overhead amortized, as engines run
it), plus the eager per-call time (dispatcher + binding + launch). CPU: median wall time of calls.
Bytes per call as in docs/PERFORMANCE.md: per row 256 read + 2 weight + 128 fp8 + 4 weights_out, per
token 8 + 256 (position, freqs row), for bf16 input.
"""

import argparse
import statistics
import time

import torch

import indexer_q

NATIVE = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant
COMPOSED = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant_composed


def make(tokens, heads, device):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(tokens, heads, 128, generator=g).to(torch.bfloat16).to(device)
    w = torch.randn(tokens, heads, generator=g).to(torch.bfloat16).to(device)
    freqs = torch.randn(4096, 64, generator=g).to(device)
    pos = torch.randint(0, 4096, (tokens,), generator=g).to(device)
    q8 = torch.empty(tokens, heads, 128, dtype=torch.float8_e4m3fn, device=device)
    wo = torch.empty(tokens, heads, 1, dtype=torch.float32, device=device)
    return q, q8, w, wo, 0.5, freqs, pos


def bytes_moved(tokens, heads):
    return tokens * heads * (256 + 2 + 128 + 4) + tokens * (8 + 256)


def time_cuda(op, args, reps=20, trials=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            op(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            op(*args)
    times = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / reps)  # us per call
    eager = []
    for _ in range(trials):
        torch.cuda.synchronize()
        t = time.perf_counter()
        op(*args)
        torch.cuda.synchronize()
        eager.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times), statistics.median(eager)


def time_cpu(op, args, trials=7):
    op(*args)
    times = []
    for _ in range(trials):
        t = time.perf_counter()
        op(*args)
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--tokens", default="1,64,1024,16384")
    p.add_argument("--composed-max-tokens", type=int, default=1024)
    a = p.parse_args()
    print(f"torch {torch.__version__}, device {a.device}"
          + (f" ({torch.cuda.get_device_name(0)})" if a.device == "cuda" else
             f" ({torch.get_num_threads()} threads)")
          + f", backends {indexer_q.available_backends()}")
    for tokens in (int(t) for t in a.tokens.split(",")):
        for name, op in (("native", NATIVE), ("composed", COMPOSED)):
            if name == "composed" and tokens > a.composed_max_tokens:
                continue
            args = make(tokens, a.heads, a.device)
            nbytes = bytes_moved(tokens, a.heads)
            if a.device == "cuda":
                graph_us, eager_us = time_cuda(op, args)
                print(f"{name:8s} tokens={tokens:6d} heads={a.heads}: graph {graph_us:9.2f} us/call "
                      f"({nbytes / graph_us / 1e3:7.1f} GB/s), eager {eager_us:9.2f} us/call")
            else:
                us = time_cpu(op, args)
                print(f"{name:8s} tokens={tokens:6d} heads={a.heads}: {us:10.1f} us/call "
                      f"({nbytes / us / 1e3:7.2f} GB/s)")


if __name__ == "__main__":
    main()
