"""Times the Triton kernel against the native CUDA operator and a device copy (CUDA only).

    python bench/triton_bench.py [--recipes all|v4_fp8,v4_fp4,...] [--heads 64]
                                 [--tokens 1,16,256,1024,4096,16384,65536] [--sweep]

Method (the one of bench/cuda_bench.cu and tests/python/bench_op.py): bf16 inputs, one CUDA
graph of 20 launches, median over 15 replays of (replay time / 20). Both operators run through
the dispatcher with their own argument checks (host work, which a graph replay does not
repeat): native = torch.ops.indexer_q.quant_q (the library's CUDA backend, enable_pdl off, as
the Triton kernel has no PDL), triton = torch.ops.indexer_q.quant_q_triton. copy = a
device-to-device copy of half the op's bytes (so bytes read + written equal the op's), the
ceiling. Bytes per call: src/common/problem.h bytes_moved (q rows read, codes (+ FP4 block
scales) written, weights read and written, one position and one freqs row per token).
Each line also says whether the two operators wrote the same bytes.

--sweep: first times the kernel's (rows per program, warps) choices for the --sweep-recipes
(default v4_fp8,v4_fp4) at the --sweep-tokens (default 1,4096,65536) and prints the best per
case (how triton_kernel.default_block_rows is chosen). --shapes R/W,R/W,... replaces the list
of (rows per program, warps) tried; --sweep-only skips the table after it. One command for the
choice of the default, every recipe at the sizes of the target:

    python bench/triton_bench.py --sweep --sweep-only --sweep-recipes all \
        --sweep-tokens 4096,16384,65536 --shapes 32/1,64/2,128/4,16/1,8/1

On a CPU the Triton kernel runs only through Triton's interpreter: nothing to time (the script
says so and exits).
"""

import argparse
import statistics
import sys

import torch

import indexer_q
from indexer_q import triton_kernel

NATIVE = torch.ops.indexer_q.quant_q
TRITON = torch.ops.indexer_q.quant_q_triton


def bytes_moved(tokens, heads, info, in_bytes=2, pos_bytes=8):
    # per row: the input, the codes (+ the FP4 block scales, or the FP8 row scale with
    # scale_out), the weight and weights_out where the recipe has them; per token: the
    # position and its freqs row where it has RoPE
    out = 64 + 4 if info.fp4 else 128 + (4 if info.q_scale_out else 0)
    row = 128 * in_bytes + out + ((in_bytes + 4) if info.weights else 0)
    return tokens * heads * row + (tokens * (pos_bytes + 256) if info.rope else 0)


def make(recipe, tokens, heads):
    info = indexer_q.recipe_info(recipe)
    g = torch.Generator().manual_seed(tokens)
    dev = "cuda"
    q = torch.randn(tokens, heads, 128, generator=g).to(torch.bfloat16).to(dev)
    w = torch.randn(tokens, heads, generator=g).to(torch.bfloat16).to(dev)
    freqs = torch.randn(4096, 64, generator=g).to(dev)
    pos = torch.randint(0, 4096, (tokens,), generator=g).to(dev)
    # what a recipe does not read or write is an empty view for the raw operator
    absent = lambda: torch.empty(0, dtype=torch.float32, device=dev)  # noqa: E731
    if not info.rope:
        freqs, pos = absent(), absent()
    if not info.weights:
        w = absent()

    def outs():
        wo = torch.empty(tokens, heads, dtype=torch.float32, device=dev) if info.weights else absent()
        if info.fp4:
            return (torch.empty(tokens, heads, 64, dtype=torch.uint8, device=dev),
                    torch.empty(tokens, heads, dtype=torch.int32, device=dev), wo)
        dt = torch.float8_e4m3fnuz if info.format == "e4m3fnuz" else torch.float8_e4m3fn
        sf = torch.empty(tokens, heads, 1, dtype=torch.float32, device=dev) if info.q_scale_out else None
        return (torch.empty(tokens, heads, 128, dtype=dt, device=dev), sf, wo)

    return info, (q, w, freqs, pos), outs


def time_graph(fn, reps=20, trials=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(times)


def same_bytes(a, b):
    for x, y in zip(a, b):
        if x is None:
            continue
        if not torch.equal(x.view(torch.uint8), y.view(torch.uint8)):
            return False
    return True


SWEEP_SHAPES = "32/1,64/2,128/4,16/1,8/1,4/1,32/2,64/1"


def sweep(heads, recipes, tokens_list, shapes):
    configs = [tuple(int(v) for v in c.split("/")) for c in shapes.split(",")]
    print("sweep: us per call (graph) for (rows per program, warps)")
    for recipe in recipes:
        for tokens in tokens_list:
            info, (q, w, freqs, pos), outs = make(recipe, tokens, heads)
            o = outs()
            res = []
            for br, nw in configs:
                def fn(br=br, nw=nw):
                    triton_kernel.launch(info, q, o[0], o[1], w, o[2], 0.5, freqs, pos, 1.0,
                                         block_rows=br, num_warps=nw)
                res.append((time_graph(fn), br, nw))
            on = outs()
            native_us = time_graph(lambda: NATIVE(recipe, q, on[0], on[1], w, on[2], 0.5, freqs,
                                                  pos, False, 1.0))
            res.sort()
            line = "  ".join(f"({br},{nw}) {us:.2f}" for us, br, nw in res)
            print(f"sweep {recipe:8s} tokens={tokens:6d} native {native_us:.2f} us; best "
                  f"({res[0][1]},{res[0][2]}) {res[0][0]:.2f} us, x{native_us / res[0][0]:.3f} "
                  f"of native | {line}")
            sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recipes", default="all")
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--tokens", default="1,16,256,1024,4096,16384,65536")
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--sweep-recipes", default="v4_fp8,v4_fp4", help="all, or a list")
    p.add_argument("--sweep-tokens", default="1,4096,65536")
    p.add_argument("--shapes", default=SWEEP_SHAPES,
                   help="(rows per program)/(warps) pairs the sweep times")
    p.add_argument("--sweep-only", action="store_true", help="no table after the sweep")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("triton_bench: no CUDA device. On a CPU the Triton kernel runs only through "
              "Triton's interpreter (numpy), which is a correctness tool, not something to time; "
              "nothing measured.")
        return 0
    import triton

    recipes = indexer_q.RECIPES if a.recipes == "all" else tuple(a.recipes.split(","))
    print(f"torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name(0)}, heads {a.heads}, bf16, "
          f"backends {indexer_q.available_backends()}")
    if a.sweep:
        sweep(a.heads, indexer_q.RECIPES if a.sweep_recipes == "all"
              else tuple(a.sweep_recipes.split(",")),
              [int(t) for t in a.sweep_tokens.split(",")], a.shapes)
        if a.sweep_only:
            return 0
    print("csv,recipe,tokens,heads,bytes,native_us,native_gbps,triton_us,triton_gbps,copy_us,"
          "copy_gbps,triton_over_native_gbps,triton_over_copy_gbps,bytes_equal")
    tokens_list = [int(t) for t in a.tokens.split(",")]
    copy_us = {}
    for recipe in recipes:
        for tokens in tokens_list:
            info, (q, w, freqs, pos), outs = make(recipe, tokens, a.heads)
            nbytes = bytes_moved(tokens, a.heads, info)
            if tokens not in copy_us:
                src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
                dst = torch.empty_like(src)
                copy_us[tokens] = time_graph(lambda: dst.copy_(src))
            on, ot = outs(), outs()
            native_us = time_graph(lambda: NATIVE(recipe, q, on[0], on[1], w, on[2], 0.5, freqs,
                                                  pos, False, 1.0))
            triton_us = time_graph(lambda: TRITON(recipe, q, ot[0], ot[1], w, ot[2], 0.5, freqs,
                                                  pos, False, 1.0))
            torch.cuda.synchronize()
            eq = same_bytes(on, ot)
            gb = lambda us: nbytes / us / 1e3
            cu = copy_us[tokens]
            print(f"{recipe:20s} tokens={tokens:6d} {nbytes:11d} B  native {native_us:9.2f} us "
                  f"{gb(native_us):7.1f} GB/s  triton {triton_us:9.2f} us {gb(triton_us):7.1f} GB/s"
                  f"  copy {gb(cu):7.1f} GB/s  triton/native x{native_us / triton_us:.3f}  "
                  f"triton/copy x{cu / triton_us:.3f}  {'same bytes' if eq else 'BYTES DIFFER'}")
            print(f"csv,{recipe},{tokens},{a.heads},{nbytes},{native_us:.3f},{gb(native_us):.1f},"
                  f"{triton_us:.3f},{gb(triton_us):.1f},{cu:.3f},{gb(cu):.1f},"
                  f"{native_us / triton_us:.3f},{cu / triton_us:.3f},{'yes' if eq else 'NO'}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
