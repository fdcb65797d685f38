#!/usr/bin/env python3
"""Static and hot-path SASS instruction counts of the CUDA query kernel, without a GPU.

Compiles the kernels of src/cuda/cuda_backend.cu alone (INDEXER_Q_CUDA_KERNELS_ONLY) for sm_90,
one instantiation per recipe below (bf16 input, int64 positions, the automatic shape's lanes at
16384 x 64), disassembles them (cuobjdump -sass; it needs nvdisasm: NVDISASM_PATH) and prints,
per kernel, the static instruction count, the registers and an estimate of the warp
instructions a row on the hot path: a walk of the SASS that takes the finite-row path (slow
paths behind a CALL skipped, the NaN re-maximum after VOTE skipped, the copies holding the
clamps for rows with a NaN or an infinity skipped, the NaN probes and NaN-byte fix-ups (branch
regions testing FSETP.NAN twice or more) skipped, inputs read after the wait, a lane other
than 0). The FSETP.NAN rule (2026-12-02 session 7) changed only the vLLM FP8 kernels' figures
(vllm_v4_fp8 86.2 -> 73.8 at main db79534, where Nsight Compute had counted 74.8 on the
code of session 6) and sgl_v32_unfused_neox_hadamard_ue8m0's (104.2 -> 91.2). The walk of main at 30488bb gives 86.5 (v4_fp8) and 129.1 (v4_fp4) warp instructions
a row, where Nsight Compute counted 88.0 and 130.6 (bench/HISTORY.md).

  python3 bench/cuda_sass_counts.py [--src DIR] [--base DIR]   (DIR: a source tree, default .)
"""
import argparse, os, re, subprocess, sys, tempfile

KERNELS = [("v4_fp8", "kV4Fp8", 4, 1), ("v4_fp4", "kV4Fp4", 4, 1),
           ("sgl_v41_fp4_rope_pack", "kSglV41Fp4RopePack", 4, 1), ("sgl_v41_fp4_quant_rne", "kSglV41Fp4QuantRne", 4, 1),
           ("sglang_v4_fp8_gfx942", "kSglangV4Fp8Gfx942", 4, 1), ("v4_fp8_fnuz", "kV4Fp8Fnuz", 4, 1),
           ("rope_first_fp8", "kRopeFirstFp8", 4, 1), ("sgl_v32_unfused_neox_hadamard_ue8m0", "kSglV32UnfusedNeoxHadamardUe8m0", 4, 1),
           ("vllm_v4_mxfp4", "kVllmV4Mxfp4", 4, 2), ("v32_fp8", "kV32Fp8", 8, 1), ("vllm_v4_fp8", "kVllmV4Fp8", 8, 1)]
COLD = re.compile(r'(HMNMX2\S* R\d+, R\d+, 12, 12)|(FMNMX R\d+, R\d+, (6|-6|448|224|-224), )|MUFU.RSQ')


def compile_tree(src, work):
    tu = os.path.join(work, "sass_tu.cu")
    with open(tu, "w") as f:
        f.write('#define INDEXER_Q_CUDA_KERNELS_ONLY 1\n#include "cuda/cuda_backend.cu"\n'
                "namespace indexer_q { namespace detail {\nvoid* iq_sass_kernels[] = {\n")
        for _, e, l, g in KERNELS:
            f.write(f"  (void*)&rowgroup_kernel<RecipeT<RecipeId::{e}>, {l}, {g}, kBF16, true>,\n")
        f.write("};\n}}\n")
    cubin = os.path.join(work, "k.cubin")
    r = subprocess.run(["nvcc", "-O3", "-DNDEBUG", "-arch=sm_90", "-cubin", "-Xcompiler=-ffp-contract=off", "-std=c++17",
                        "--fmad=false", "-Xptxas", "-v", "-I" + os.path.join(src, "include"), "-I" + os.path.join(src, "src"),
                        "-o", cubin, tu], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    regs = {}
    for m in re.finditer(r"Compiling entry function '(\S+)'.*?Used (\d+) registers", r.stderr, re.S):
        regs[m.group(1)] = int(m.group(2))
    sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    funcs, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1) if "rowgroup_kernel" in m.group(1) else None
            if cur:
                funcs[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+([^;]*);", line)
        if m and cur:
            funcs[cur].append((int(m.group(1), 16), m.group(2).strip()))
    out = {}
    for mangled, ins in funcs.items():
        mm = re.search(r"RecipeIdE(\d+)EEELi(\d+)ELi(\d+)", mangled)
        out[(int(mm.group(1)), int(mm.group(2)), int(mm.group(3)))] = (ins, regs.get(mangled, 0))
    return out


def walk(ins):
    idx = {a: i for i, (a, _) in enumerate(ins)}
    i = n = steps = 0
    while i < len(ins) and steps < 50000:
        steps += 1
        t = ins[i][1]
        op = t.split()
        pred = op[0].startswith("@")
        name = (op[1:] if pred else op)[0]
        if name.startswith("NOP"):
            i += 1
            continue
        n += 1
        if name == "EXIT" and not pred:
            break
        if name.startswith("BRA"):
            tgt = int(re.search(r"0x([0-9a-f]+)", t).group(1), 16)
            if not pred:
                i = idx[tgt]
                continue
            j = idx.get(tgt)
            region = [x for _, x in ins[i + 1:j]] if j is not None and j > i else []
            before = " ".join(x for _, x in ins[max(0, i - 12):i])
            take = (any("CALL" in x for x in region) or "VOTE" in " ".join(x for _, x in ins[max(0, i - 4):i])
                    or sum(1 for x in region if COLD.search(x)) >= 8
                    or sum(1 for x in region if "FSETP.NAN" in x) >= 2
                    or (re.search(r"LOP3.LUT P\d, RZ, R\d+, 0x4, RZ", before) and "!P" in op[0])
                    or (len(region) < 40 and any("LDG" in x for x in region)
                        and any("0x2" in x or "ISETP.NE" in x for x in region)))
            i = j if take else i + 1
            continue
        i += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=".")
    ap.add_argument("--base", default=None)
    a = ap.parse_args()
    order = {}
    with open(os.path.join(a.src, "include/indexer_q/recipes.inc")) as f:
        ids = re.findall(r"^IQ_RECIPE\((k\w+),", f.read(), re.M)
    for i, e in enumerate(ids):
        order[e] = i
    trees = [("new", a.src)] + ([("base", a.base)] if a.base else [])
    res = {}
    with tempfile.TemporaryDirectory() as w:
        for tag, src in trees:
            os.makedirs(os.path.join(w, tag))
            res[tag] = compile_tree(src, os.path.join(w, tag))
    print("kernel, lanes x rows, " + ", ".join(f"{t}: static, registers, hot warp instr a row" for t, _ in trees))
    for name, e, l, g in KERNELS:
        cols = []
        for tag, _ in trees:
            ins, reg = res[tag][(order[e], l, g)]
            static = sum(1 for _, x in ins if not x.split()[-1].startswith("NOP") and "NOP" not in x.split()[0])
            cols.append(f"{static}, {reg}, {walk(ins) * l / 32 / g:.1f}")
        print(f"{name}, {l} x {g}, " + ", ".join(cols))


if __name__ == "__main__":
    main()
