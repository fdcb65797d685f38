"""SASS instruction counts of the Triton kernel per recipe, compiled offline for sm_90 (no GPU
needed): static instructions of one program x warps / rows per program = warp instructions a
row (the kernel has no loops; the static count also holds the divisions' slow-path
subroutines, which normal rows never run, so it is an upper bound; body_...: the same without
the subroutines, still counting both sides of every branch), with the registers per thread, the
global load / store instructions by width, the shuffles and shared-memory accesses, and
(--top) the mix by opcode class. Needs cuobjdump (Triton's bundled one, or
`pip install nvidia-cuda-cuobjdump`).

    python bench/triton_sass.py [--recipes v4_fp8,...] [--shapes R/W/L,...] [--top 12]
                                [--old]

--shapes: (rows per program)/(warps)/(lanes a row) triples, default the launcher's default;
--old: the kernel of bench/triton_kernel_old.py (the one before the lane-tiled kernel; its
shapes are R/W, lanes ignored).
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)
import indexer_q  # noqa: E402
import triton  # noqa: E402
from indexer_q import triton_kernel as tk  # noqa: E402


def cuobjdump() -> str:
    here = os.path.dirname(triton.__file__)
    for c in glob.glob(os.path.join(here, "backends", "nvidia", "bin", "cuobjdump")) + ["cuobjdump"]:
        try:
            subprocess.run([c, "--version"], capture_output=True, check=True)
            return c
        except (OSError, subprocess.CalledProcessError):
            pass
    sys.exit("triton_sass: no cuobjdump (pip install nvidia-cuda-cuobjdump)")


def old_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "triton_kernel_old", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                          "triton_kernel_old.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def compile_old(m, info, br, nw):
    from triton.backends.compiler import GPUTarget
    sig = {"q_ptr": "*bf16", "w_ptr": "*bf16", "freqs_ptr": "*fp32", "pos_ptr": "*i64",
           "out_ptr": "*u8", "sf_ptr": "*i32", "wout_ptr": "*fp32", "n_rows": "i32", "H": "i32",
           "w_stride_b": "i32", "max_pos": "i32", "weight_scale": "fp32", "head_scale": "fp32"}
    cx = dict(IN_KIND=0, W_KIND=0, BLOCK_R=br, **m.recipe_constants(info))
    if cx["SCALE_OUT"]:
        sig["sf_ptr"] = "*fp32"
    sig.update({k: "constexpr" for k in cx})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(7)}
    src = triton.compiler.ASTSource(fn=m.quant_q_kernel, signature=sig, constexprs=cx, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=nw, enable_fp_fusion=False))


def sass_of(k):
    """(opcodes with their modifiers, registers per thread) of a compiled kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        out = subprocess.run([cuobjdump(), "-sass", f.name], capture_output=True, text=True,
                             check=True).stdout
        res = subprocess.run([cuobjdump(), "-res-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
    ops, addr, calls = [], [], []
    for line in out.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)", line)
        if m:
            ops.append(m.group(3))
            addr.append(int(m.group(1), 16))
            c = re.match(r"\s+(0x[0-9a-f]+)", m.group(4)) if m.group(3).startswith("CALL") else None
            if c:
                calls.append(int(c.group(1), 16))
    while ops and ops[-1] in ("BRA", "NOP"):
        ops.pop()
    # the body: the instructions before the first called subroutine (the slow paths of the
    # divisions, which normal rows never run)
    first_sub = min(calls) if calls else 1 << 62
    body = sum(1 for a in addr[:len(ops)] if a < first_sub)
    m = re.search(r"REG:(\d+)", res)
    return ops, int(m.group(1)) if m else -1, body


def memory_mix(ops):
    """Global loads / stores by width, shuffles, shared-memory accesses and barriers."""
    c = collections.Counter()
    for o in ops:
        parts = o.split(".")
        if parts[0] in ("LDG", "STG"):
            width = next((p for p in parts[1:] if p in ("U8", "S8", "U16", "S16", "64", "128")),
                         "32")
            c[f"{parts[0]}.{width}"] += 1
        elif parts[0] in ("SHFL", "STS", "LDS", "BAR", "LDL", "STL"):
            c[parts[0]] += 1
    return " ".join(f"{k}:{v}" for k, v in sorted(c.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipes", default=",".join(indexer_q.RECIPES))
    ap.add_argument("--shapes", default="", help="R/W/L triples; default the launcher's")
    ap.add_argument("--old", action="store_true", help="the kernel of bench/triton_kernel_old.py")
    ap.add_argument("--top", type=int, default=0, help="print the N most frequent opcodes")
    a = ap.parse_args()
    shapes = []
    for s in (a.shapes.split(",") if a.shapes else []):
        v = [int(x) for x in s.split("/")]
        shapes.append((v[0], v[1] if len(v) > 1 else 0, v[2] if len(v) > 2 else 0))
    if not shapes:
        shapes = [(4, 1, 0)] if a.old else [(8, 0, 0)]
    old = old_module() if a.old else None
    print("recipe,block_rows,warps,lanes,regs,sass_static,warp_instr_per_row,"
          "body_warp_instr_per_row,memory")
    for r in a.recipes.split(","):
        info = indexer_q.recipe_info(r)
        for br, nw, ln in shapes:
            if old:
                nw = nw or old.default_num_warps(br)
                k = compile_old(old, info, br, nw)
                ln = "-"
            else:
                ln = ln or 4
                nw = nw or tk.default_num_warps(br, ln)
                k = tk.compile_offline(info, "bf16", br, nw, ln)
            ops, regs, body = sass_of(k)
            print(f"{r},{br},{nw},{ln},{regs},{len(ops)},{len(ops) * nw / br:.1f},"
                  f"{body * nw / br:.1f},{memory_mix(ops)}")
            if a.top:
                c = collections.Counter(o.split(".")[0] for o in ops)
                print("   ", " ".join(f"{k}:{v}" for k, v in c.most_common(a.top)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
