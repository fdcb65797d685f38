"""What the Python entry points add to the operator, per call (issue 20: at most 3 us on CPU at
one token).

    PYTHONPATH=python python bench/python_overhead.py [--tokens 1] [--heads 64] [--calls 20000]
                                                      [--rounds 7] [--threads 1] [--device cpu]
                                                      [--clock wall|cpu] [--only SUBSTRING]
                                                      [--ab OTHER_PYTHON_DIR [--ab-library SO]
                                                       [--ab-pairs 3]] [--json]

For each entry point the same run times, in alternating rounds, (a) the operator alone
(``torch.ops.indexer_q.<op>.default`` on preallocated outputs: dispatcher + binding + kernel)
and (b) the public wrapper (allocating its outputs, checking its arguments, resolving the recipe),
and prints the median per-call time of each and their difference; for the key side SGLang's
call with its plan (the plan tensor, or SGLang's own call shape: its plan object, an int32
out_loc, the complex freq_cis; positions and slots derived by kside_store_plan) against the
operator given them,
and the integrations' routed SGLang / vLLM functions (indexer_q.integrations: binding the call
against the engine's signature, the adapter, the wrapper) against the operator. Nothing here is
a test.

``--clock cpu`` times with the calling thread's CPU time (time.thread_time) instead of the wall
clock: on a machine shared with other work the per-call figures then leave out the time the
thread waits for a core (with --threads 1 the CPU backend runs the call inline, on this thread,
so nothing of the call is left out). ``--only`` keeps the entry points whose name contains it.

``--ab DIR``: an A/B of two versions of the Python package in one run: this process's package
(A: ``indexer_q`` as imported here) and the one in DIR (B: another checkout's ``python/``, with
its own operator library ``--ab-library``, else this one), measured by alternating child
processes (A, B, B, A, ... ``--ab-pairs`` pairs, each the measurement above with ``--json``), the
median "added" per entry point and side printed. ``--json`` prints the measurement as JSON.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
import types

import torch

import indexer_q

OPS = torch.ops.indexer_q


CLOCK = time.perf_counter


def per_call_us(fn, calls):
    t0 = CLOCK()
    for _ in range(calls):
        fn()
    return (CLOCK() - t0) / calls * 1e6


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
    plan = torch.zeros(tokens, 16, dtype=torch.uint8, device=device)
    plan.view(torch.int32)[:, 0] = 8  # decode, seq_len 8: position 4, slot out_loc[t]
    out_loc = torch.arange(tokens, device=device)
    kpos = torch.full((tokens,), 4, dtype=torch.int64, device=device)
    # SGLang's call: its plan object (CompressorDecodePlan: plan[1] the tensor), an int32 out_loc
    # and the complex64 freq_cis table
    dplan = collections.namedtuple("CompressorDecodePlan", "compress_ratio plan_d")(4, plan)
    out_loc32 = out_loc.to(torch.int32)
    cis = torch.view_as_complex(freqs.view(4096, 32, 2))
    sg_q, vl_v4, sg_k = routed_engine_functions()
    q3 = torch.empty(tokens, heads, 1, dtype=torch.float32, device=device)  # a row scale
    q4i = torch.empty(tokens, heads, 64, dtype=torch.int8, device=device)
    v4 = OPS.fused_q_indexer_rope_hadamard_quant.default
    qq = OPS.quant_q.default
    ks = OPS.kside_store.default
    qa = OPS.quant_q_alloc.default
    ix = indexer_q.RECIPES.index

    def alloc(recipe, kind, wdims, w_=w, f_=freqs, p_=pos, x_=q, hs=1.0, ws=0.125):
        # quant_q_alloc, the allocating op the wrappers call on the CPU: the op alone plus making,
        # returning and freeing the outputs (what a wrapper adds over it is Python)
        # (called as the wrappers call it: the trailing arguments at the operator's defaults left
        # out, each non-tensor argument costing ~1.5k instructions)
        i = ix(recipe)
        if hs != 1.0:
            return lambda: qa(i, x_, w_, ws, f_, p_, kind, wdims, True, hs)
        if wdims == 2:
            return lambda: qa(i, x_, w_, ws, f_, p_, kind, 2)
        if kind:
            return lambda: qa(i, x_, w_, ws, f_, p_, kind)
        return lambda: qa(i, x_, w_, ws, f_, p_)

    allocs = {
        "fused_q_indexer_rope_hadamard_quant (v4_fp8)": alloc("v4_fp8", 0, 3),
        "quant_q('v4_fp8')": alloc("v4_fp8", 0, 3),
        "quant_q('v4_fp4')": alloc("v4_fp4", 0, 3),
        "fused_indexer_q_rope_quant (vllm_v4_fp8)": alloc("vllm_v4_fp8", 0, 2, hs=0.5),
        "fused_q_indexer_rope_first_quant (v32_fp8)": alloc("v32_fp8", 0, 3),
        "fused_q_indexer_rope_hadamard_fp4_quant (v4_fp4)": alloc("v4_fp4", 2, 3),
        "fused_indexer_q_rope_quant_v32 (vllm_v32_fp8_neox)":
            alloc("vllm_v32_fp8_neox", 0, 2, hs=0.5),
        "fused_indexer_q_rope_quant_cutedsl":
            alloc("vllm_v4_fp8_cutedsl", 0, 2, hs=0.5, ws=0.0625),
        "index_q_rope_pack_weights (sgl_v41_fp4_rope_pack)": alloc("sgl_v41_fp4_rope_pack", 6, 2),
        "dsa_indexer_q_unfused (V3.2 unfused)":
            alloc("sgl_v32_unfused_neox_hadamard_ue8m0", 0, 3, hs=0.5),
        "quantize_fp4_indexer_tensor (no RoPE, no weights)":
            alloc("sgl_v41_fp4_quant_rne", 6, 3, w_=none, f_=none, p_=none, x_=x2, ws=1.0),
        "routed SGLang fused_q_indexer_rope_hadamard_quant": alloc("v4_fp8", 0, 3),
        "routed vLLM fused_indexer_q_rope_quant": alloc("vllm_v4_fp8", 0, 2, hs=0.5),
    }
    return [c + ((allocs[c[0]],) if c[0] in allocs else ()) for c in [
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
        ("fused_q_indexer_rope_first_quant (v32_fp8)",
         lambda: qq("v32_fp8", q, q8, None, w, wo3, 0.125, freqs, pos, True, 1.0),
         lambda: indexer_q.fused_q_indexer_rope_first_quant(q, w, 0.125, freqs, pos)),
        ("fused_q_indexer_rope_hadamard_fp4_quant (v4_fp4)",
         lambda: qq("v4_fp4", q, q4i, sf, w, wo3, 0.125, freqs, pos, True, 1.0),
         lambda: indexer_q.fused_q_indexer_rope_hadamard_fp4_quant(q, w, 0.125, cis, pos)),
        ("dsv4_fused_q_indexer_rope_hadamard_quant (in place)",
         lambda: v4(q, q8, w, wo3, 0.125, freqs, pos, True),
         lambda: indexer_q.dsv4_fused_q_indexer_rope_hadamard_quant(q, q8, w, wo3, 0.125, freqs,
                                                                   pos)),
        ("fused_indexer_q_rope_quant_v32 (vllm_v32_fp8_neox)",
         lambda: qq("vllm_v32_fp8_neox", q, q8, None, w, wo2, 0.125, freqs, pos, True, 0.5),
         lambda: indexer_q.fused_indexer_q_rope_quant_v32(pos, q, freqs, w, 0.125, 0.5)),
        ("fused_indexer_q_rope_quant_cutedsl",
         lambda: qq("vllm_v4_fp8_cutedsl", q, q8, None, w, wo2, 0.0625, freqs, pos, True, 0.5),
         lambda: indexer_q.fused_indexer_q_rope_quant_cutedsl(pos, q, freqs, w, 0.125, 0.5)),
        ("index_q_rope_pack_weights (sgl_v41_fp4_rope_pack)",
         lambda: qq("sgl_v41_fp4_rope_pack", q, q4i, sf, w, wo2, 0.125, freqs, pos, True, 1.0),
         lambda: indexer_q.index_q_rope_pack_weights(q, freqs, pos, w, 0.125)),
        ("dsa_indexer_q_unfused (V3.2 unfused)",
         lambda: qq("sgl_v32_unfused_neox_hadamard_ue8m0", q, q8, q3, w, wo3, 0.125, freqs, pos,
                    True, 0.5),
         lambda: indexer_q.dsa_indexer_q_unfused(q, pos, freqs, w, 0.125, 0.5)),
        ("quantize_fp4_indexer_tensor (no RoPE, no weights)",
         lambda: qq("sgl_v41_fp4_quant_rne", x2.view(-1, 1, 128), q4n, sfn, none, none, 1.0,
                    none, none, True, 1.0),
         lambda: indexer_q.quantize_fp4_indexer_tensor(x2)),
        ("kside_store (v4_k_fp8)",
         lambda: ks("v4_k_fp8", kx, kw, 1e-6, freqs, pos, kslots, cache, 1, True),
         lambda: indexer_q.kside_store("v4_k_fp8", kx, kw, 1e-6, freqs, pos, kslots, cache, 1)),
        ("compress_norm_rope_store (v4_k_fp8, decode plan)",
         lambda: ks("v4_k_fp8", kx, kw, 1e-6, freqs, kpos, out_loc, cache, 1, True),
         lambda: indexer_q.compress_norm_rope_store(
             kx, plan, norm_weight=kw, norm_eps=1e-6, freq_cis=freqs, out_loc=out_loc,
             kvcache=cache, page_size=1, is_decode=True)),
        ("compress_norm_rope_store (SGLang's call shape)",
         lambda: ks("v4_k_fp8", kx, kw, 1e-6, freqs, kpos, out_loc, cache, 1, True),
         lambda: indexer_q.compress_norm_rope_store(
             kx, dplan, norm_weight=kw, norm_eps=1e-6, freq_cis=cis, out_loc=out_loc32,
             kvcache=cache, page_size=1)),
        ("routed SGLang fused_q_indexer_rope_hadamard_quant",
         lambda: v4(q, q8, w, wo3, 0.125, freqs, pos, True),
         lambda: sg_q(q, w, 0.125, cis, pos)),
        ("routed SGLang compress_norm_rope_store",
         lambda: ks("v4_k_fp8", kx, kw, 1e-6, freqs, kpos, out_loc, cache, 1, True),
         lambda: sg_k(kx, dplan, kw, 1e-6, cis, out_loc32, cache, 1)),
        ("routed vLLM fused_indexer_q_rope_quant",
         lambda: qq("vllm_v4_fp8", q, q8, None, w, wo2, 0.125, freqs, pos, True, 0.5),
         lambda: vl_v4(pos, q, freqs, w, 0.125, 0.5)),
    ]]


def routed_engine_functions():
    """The integrations' routed twins (indexer_q.integrations, the bind-and-convert layer) of
    SGLang's and vLLM's V4 query functions and SGLang's key-side store, with the engines'
    signatures, on stand-in modules
    (the engines themselves are not needed: the routed function binds the call against the
    signature and runs the adapter)."""
    from indexer_q.integrations import _route, sglang, vllm

    def fused_q_indexer_rope_hadamard_quant(q_input, weight, weight_scale, freqs_cis, positions):
        raise RuntimeError("not routed")

    def fused_indexer_q_rope_quant(positions, index_q, index_q_cos_sin_cache, index_weights,
                                   index_weights_softmax_scale, index_weights_head_scale,
                                   use_fp4=False, weights_out_dtype=torch.float32):
        raise RuntimeError("not routed")

    def compress_norm_rope_store(kv, plan, norm_weight, norm_eps, freq_cis, out_loc, kvcache,
                                 page_size, use_fp4=False, bf16_store=False, kvcache_scale=None,
                                 rope_cache=None, fp4_k_write_metadata=None, layout=None,
                                 fp8_2buff=False, kvcache_rope=None):
        raise RuntimeError("not routed")

    class CudaPlatform:  # vLLM's current_platform on CUDA
        def is_xpu(self):
            return False

        def is_cpu(self):
            return False

        def fp8_dtype(self):
            return torch.float8_e4m3fn

    # what the adapters read from the engine module at call time, as the engines' modules have it
    # (SGLang's norm_rope: _is_hip / _is_xpu; vLLM's fused_indexer_q: current_platform and
    # has_cutedsl), answering as on CUDA
    # (SGLang's compress: is_hip())
    module_attrs = ({"_is_hip": False, "_is_xpu": False},
                    {"current_platform": CudaPlatform(), "has_cutedsl": lambda: False},
                    {"is_hip": lambda: False})
    out = []
    for engine, fn, attrs in ((sglang, fused_q_indexer_rope_hadamard_quant, module_attrs[0]),
                              (vllm, fused_indexer_q_rope_quant, module_attrs[1]),
                              (sglang, compress_norm_rope_store, module_attrs[2])):
        name = f"indexer_q_bench_{engine.__name__.rsplit('.', 1)[1]}_{fn.__name__}"
        mod = types.ModuleType(name)
        setattr(mod, fn.__name__, fn)
        for k, v in attrs.items():
            setattr(mod, k, v)
        sys.modules[name] = mod
        adapter = next(a for m, f, a in engine.TARGETS if f == fn.__name__)
        why = _route.route((name,), name, fn.__name__, adapter)
        assert why is None, why
        out.append(getattr(mod, fn.__name__))
    return out


def measure(a):
    """{entry point: (op alone, wrapper, added)} in us a call, as the module docstring says."""
    out = {}
    for name, op, wrapper, *alloc in cases(a.tokens, a.heads, a.device):
        if a.only not in name:
            continue
        fns = [op, wrapper] + alloc
        for fn in fns:  # warm-up
            per_call_us(fn, max(a.calls // 10, 100))
        times = [[] for _ in fns]
        for _ in range(a.rounds):
            for t, fn in zip(times, fns):
                t.append(per_call_us(fn, a.calls))
        o, w, *al = [statistics.median(t) for t in times]
        out[name] = (o, w, w - o, al[0] if al else None)
    return out


def ab(a, argv):
    """Alternating child processes of the two packages; the median of each side's "added"."""
    here = os.path.dirname(os.path.abspath(indexer_q.__file__ + "/.."))
    lib_a = indexer_q.library_path
    lib_b = a.ab_library or lib_a
    sides = {"A": (here, lib_a), "B": (os.path.abspath(a.ab), lib_b)}
    child = [sys.executable, os.path.abspath(__file__), "--json"]
    skip = {"--ab", "--ab-library", "--ab-pairs"}
    it = iter(argv)
    for x in it:
        if x in skip:
            next(it, None)
        elif x.split("=", 1)[0] not in skip and x != "--json":
            child.append(x)
    added = {"A": collections.defaultdict(list), "B": collections.defaultdict(list)}
    order = []
    for i in range(a.ab_pairs):
        order += ["A", "B"] if i % 2 == 0 else ["B", "A"]
    for side in order:
        path, lib = sides[side]
        env = dict(os.environ, PYTHONPATH=path, INDEXER_Q_TORCH_LIBRARY=lib)
        res = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
        for name, (_, _, d, _) in json.loads(res.stdout.strip().splitlines()[-1]).items():
            added[side][name].append(d)
    print(f"A: {sides['A'][0]} ({lib_a})\nB: {sides['B'][0]} ({lib_b})")
    print(f"{a.ab_pairs} A/B pairs of child processes (A B, B A, ...), each {a.rounds} rounds of "
          f"{a.calls} calls, {a.clock} clock; median over the children of the added us a call")
    print(f"{'entry point':52s} {'A added':>8s} {'B added':>8s} {'A - B':>7s}")
    for name in added["A"]:
        x = statistics.median(added["A"][name])
        y = statistics.median(added["B"].get(name, [float("nan")]))
        print(f"{name:52s} {x:8.2f} {y:8.2f} {x - y:7.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ab", default="")
    ap.add_argument("--ab-library", default="")
    ap.add_argument("--ab-pairs", type=int, default=3)
    a = ap.parse_args()
    global CLOCK
    CLOCK = time.thread_time if a.clock == "cpu" else time.perf_counter
    torch.set_num_threads(a.threads)
    if a.ab:
        return ab(a, sys.argv[1:])
    if a.json:
        print(json.dumps(measure(a)))
        return
    print(f"torch {torch.__version__}, {a.device}, {a.tokens} token(s) x {a.heads} heads, "
          f"{a.threads} thread(s), {a.rounds} alternating rounds of {a.calls} calls, median, "
          f"{a.clock} clock; package {indexer_q.__file__}")
    print("(alloc op: quant_q_alloc alone, the allocating op the wrapper calls; python: wrapper - "
          "alloc op)")
    print(f"{'entry point':52s} {'op alone':>9s} {'wrapper':>9s} {'added':>8s} {'alloc op':>9s} "
          f"{'python':>7s}  (us a call)")
    for name, (o, w, d, al) in measure(a).items():
        extra = f" {al:9.2f} {w - al:7.2f}" if al is not None else ""
        print(f"{name:52s} {o:9.2f} {w:9.2f} {d:8.2f}{extra}")


if __name__ == "__main__":
    main()
