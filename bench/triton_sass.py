"""SASS instruction counts of the Triton kernel per recipe, compiled offline for sm_90 (no GPU
needed): static instructions of one program x warps / rows per program = warp instructions a
row (the kernel has no loops; the static count also holds the division's slow-path subroutine,
which normal rows never run, so it is an upper bound), with the mix by opcode class. Needs cuobjdump (Triton's bundled
one, or `pip install nvidia-cuda-cuobjdump`).

    python bench/triton_sass.py [--recipes v4_fp8,...] [--block-rows 4] [--warps 1] [--top 12]
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


def sass_of(recipe, br, nw):
    from triton.backends.compiler import GPUTarget
    info = indexer_q.recipe_info(recipe)
    sig = {"q_ptr": "*bf16", "w_ptr": "*bf16", "freqs_ptr": "*fp32", "pos_ptr": "*i64",
           "out_ptr": "*u8", "sf_ptr": "*i32", "wout_ptr": "*fp32", "n_rows": "i32", "H": "i32",
           "w_stride_b": "i32", "max_pos": "i32", "weight_scale": "fp32", "head_scale": "fp32"}
    cx = dict(IN_KIND=0, W_KIND=0, BLOCK_R=br, **tk.recipe_constants(info))
    if cx["SCALE_OUT"]:
        sig["sf_ptr"] = "*fp32"
    sig.update({k: "constexpr" for k in cx})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(7)}
    src = triton.compiler.ASTSource(fn=tk.quant_q_kernel, signature=sig, constexprs=cx, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=nw, enable_fp_fusion=False))
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        out = subprocess.run([cuobjdump(), "-sass", f.name], capture_output=True, text=True,
                             check=True).stdout
    ops = []
    for line in out.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops.append(m.group(2))
    while ops and ops[-1] in ("BRA", "NOP"):
        ops.pop()
    return ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipes", default=",".join(indexer_q.RECIPES))
    ap.add_argument("--block-rows", type=int, default=4)
    ap.add_argument("--warps", type=int, default=0, help="0: the launcher's default")
    ap.add_argument("--top", type=int, default=0, help="print the N most frequent opcodes")
    a = ap.parse_args()
    nw = a.warps or tk.default_num_warps(a.block_rows)
    print(f"recipe,block_rows,warps,sass_static,warp_instr_per_row")
    for r in a.recipes.split(","):
        ops = sass_of(r, a.block_rows, nw)
        print(f"{r},{a.block_rows},{nw},{len(ops)},{len(ops) * nw / a.block_rows:.1f}")
        if a.top:
            c = collections.Counter(o.split(".")[0] for o in ops)
            print("   ", " ".join(f"{k}:{v}" for k, v in c.most_common(a.top)))


if __name__ == "__main__":
    main()
