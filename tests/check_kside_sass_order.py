#!/usr/bin/env python3
"""The key side's loads stay behind griddepcontrol.wait (CTest test kside_sass_order).

    check_kside_sass_order.py LIB        LIB: the built library (libindexer_q.a / .so)
    check_kside_sass_order.py --skip WHY exit 77 (CTest: skipped) after printing WHY

With PDL a kernel starts while the previous kernel of the stream still runs; every input may be
that kernel's output, so no global memory instruction may run before griddepcontrol.wait (SASS
ACQBULK on sm_90). ptxas treats ld.global.nc as reading memory that never changes and may schedule
it above the wait, so the source's order is no proof: this reads the machine code. For every
key-side kernel of src/cuda/kside.cu in LIB (kside_kernel, kside_claim_kernel,
kside_scalar_kernel; each sm_XX cubin), `cuobjdump -sass` must show
  - an ACQBULK, and before the first one no global or generic memory instruction (LDG, STG, LD,
    ST, ATOM, RED, ...; register spills to local memory may come first) and no control transfer
    (BRA, EXIT, CALL, ...) that could skip it;
  - no read-only load (LDG ... .CONSTANT, ld.global.nc) anywhere: with PDL no input is read-only
    for a kernel's whole lifetime, and none of the key side's loads is built as one (a form with
    read-only loads after the wait was timed on the H200 and gained nothing: bench/HISTORY.md).
Prints the counts. Exit 0 pass, 1 fail, 77 skipped: no cuobjdump (pip install
nvidia-cuda-cuobjdump, a CUDA toolkit's bin/, or $CUOBJDUMP), no nvdisasm, which cuobjdump runs
for -sass (pip install nvidia-cuda-nvdisasm, the toolkit's bin/, or $NVDISASM_PATH), or no
sm_90+ machine code in LIB (older targets have no griddepcontrol).
"""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def pip_bins(name):
    """<site-packages>/nvidia/*/bin/NAME and Triton's bundled copy, where installed."""
    out = []
    for pkg, sub in (("nvidia", "*/bin"), ("triton", "backends/nvidia/bin")):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            out += sorted(glob.glob(os.path.join(root, sub, name)))
    return [p for p in out if os.access(p, os.X_OK)]


def find_tool(name, env, hint_dirs):
    p = os.environ.get(env, "")
    if p and os.path.isdir(p):
        p = os.path.join(p, name)
    if p and os.access(p, os.X_OK):
        return p
    p = shutil.which(name)
    if p:
        return p
    for d in hint_dirs:
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    found = pip_bins(name)
    return found[0] if found else None


# Opcodes that may touch memory another grid writes or reads: global and generic accesses, atomics,
# texture / surface and bulk copies. Not local (LDL / STL: register spills, private to the thread),
# shared (LDS / STS / ATOMS: private to the block) or constant-bank (LDC: kernel parameters) ones.
MEM = re.compile(r"^(LDG|LDGSTS|LD|STG|ST|ATOMG|ATOM|RED|REDG|CCTL|SUATOM|SULD|SUST|"
                 r"TLD|TEX|UBLKCP|UTMALDG|UTMASTG|UTMAPF)(\.|$)")
# (PREEXIT, griddepcontrol.launch_dependents, may come first: it lets the next grid launch, whose
# own wait holds its accesses until this grid ends; so may BSSY, which only records a convergence
# point.)
CTRL = re.compile(r"^(BRA|BRX|JMP|JMX|CALL|RET|EXIT|BREAK|BSYNC|KILL|BPT)(\.|$)")
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-7T]\s+)?([A-Z][A-Z0-9_.]*)")
KSIDE_KERNEL = re.compile(r"\d+(kside_kernel|kside_claim_kernel|kside_scalar_kernel)I")


def check(sass):
    """(kernels, LDG after the wait, .CONSTANT loads, violations) of a cuobjdump -sass listing."""
    # Split into (arch, function, instructions).
    funcs = []
    arch = "?"
    cur = None
    for line in sass.splitlines():
        m = re.search(r"(?:arch = |code for )(sm_\d+[af]?)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = (arch, m.group(1), [])
            funcs.append(cur)
            continue
        m = INSN.search(line)
        if m and cur is not None:
            cur[2].append((m.group(1), line.strip()))

    def arch_num(a):
        m = re.match(r"sm_(\d+)", a)
        return int(m.group(1)) if m else 0

    kside = [f for f in funcs if KSIDE_KERNEL.search(f[1]) and arch_num(f[0]) >= 90]
    if not kside:
        old = sorted({f[0] for f in funcs if KSIDE_KERNEL.search(f[1])})
        if old:
            print("SKIPPED: no sm_90+ machine code of the key-side kernels (targets %s have no griddepcontrol)"
                  % ",".join(old))
            return 0, 0, 0, "skip"
        print("FAIL: no key-side kernel in the SASS")
        return 0, 0, 0, "fail"

    bad = []
    n_ldg_after = n_const = 0
    for a, name, insns in kside:
        ops = [op for op, _ in insns]
        if "ACQBULK" not in ops:
            bad.append("%s %s: no ACQBULK (griddepcontrol.wait)" % (a, name))
            continue
        w = ops.index("ACQBULK")
        for op, text in insns[:w]:
            if MEM.match(op) or CTRL.match(op):
                bad.append("%s %s: before the wait: %s" % (a, name, text))
        n_ldg_after += sum(op.startswith("LDG") for op in ops[w + 1:])
        for op, text in insns:
            if op.startswith("LDG") and ".CONSTANT" in op:
                n_const += 1
                bad.append("%s %s: read-only load: %s" % (a, name, text))
    return len(kside), n_ldg_after, n_const, bad


SELF_TEST = """
code for sm_90
    Function : _ZN1x12kside_kernelIiEEvv
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R2, desc[UR4][R2.64] ;
        /*0020*/                   ACQBULK ;
    Function : _ZN1x18kside_claim_kernelIiEEvv
        /*0000*/               @P0 BRA 0x40 ;
        /*0010*/                   ACQBULK ;
    Function : _ZN1x19kside_scalar_kernelIiEEvv
        /*0000*/                   ACQBULK ;
        /*0010*/                   LDG.E.64.CONSTANT R2, desc[UR4][R2.64] ;
    Function : _ZN1x12kside_kernelIlEEvv
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0008*/                   STL [R1+0x4], R0 ;
        /*0010*/                   ACQBULK ;
        /*0020*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
"""


def self_test():
    """The checker finds each kind of violation in a synthetic listing (and none in a good kernel)."""
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        n, after, const, bad = check(SELF_TEST)
    want = ["before the wait: /*0010*/", "before the wait: /*0000*/ ", "read-only load: /*0010*/"]
    ok = n == 4 and after == 2 and const == 1 and len(bad) == 3 and all(any(w in b for b in bad) for w in want)
    if not ok:
        print("FAIL: self-test: the checker did not find the planted violations: %r" % (bad,))
    return ok


def main(argv):
    if len(argv) >= 2 and argv[1] == "--skip":
        skip(argv[2] if len(argv) > 2 else "no reason given")
    if len(argv) != 2:
        print(__doc__)
        return 2
    if not self_test():
        return 1
    lib = argv[1]
    if not os.path.isfile(lib):
        print("FAIL: no library at " + lib)
        return 1
    hints = [os.environ.get("CUOBJDUMP_HINT", ""), "/usr/local/cuda/bin"]
    cu = find_tool("cuobjdump", "CUOBJDUMP", hints)
    if not cu:
        skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump; or a CUDA toolkit's bin/ on PATH; "
             "or CUOBJDUMP=/path/to/cuobjdump)")
    nd = find_tool("nvdisasm", "NVDISASM_PATH", hints + [os.path.dirname(cu)])
    if not nd:
        skip("nvdisasm not found: cuobjdump -sass runs it (pip install nvidia-cuda-nvdisasm; or a CUDA "
             "toolkit's bin/ on PATH; or NVDISASM_PATH=/its/dir)")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(nd) + os.pathsep + env.get("PATH", "")
    env["NVDISASM_PATH"] = os.path.dirname(nd)
    r = subprocess.run([cu, "-sass", lib], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print("FAIL: cuobjdump -sass failed:\n" + r.stdout[-2000:] + r.stderr[-2000:])
        return 1
    print("cuobjdump: %s; nvdisasm: %s" % (cu, nd))

    n_k, n_after, n_const, bad = check(r.stdout)
    if n_k == 0:
        return 77 if bad == "skip" else 1
    print("key-side kernels checked: %d; global loads after the wait: %d; read-only (.CONSTANT) loads: %d"
          % (n_k, n_after, n_const))
    if bad:
        print("FAIL: %d violation(s):" % len(bad))
        for b in bad[:50]:
            print("  " + b)
        return 1
    print("PASS: in every key-side kernel the first memory instruction and the first branch follow ACQBULK; "
          "no read-only load")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
