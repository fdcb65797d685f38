#!/usr/bin/env bash
# cpuv41 (issue 20, CPU part): SGLang V4.1's FP4 forms on the host CPU of the GPU machine
# (AVX-512), this tree against its base f68d676. Runs from the repository root; CUDA off.
#   OUT=/tmp/out bash scripts/device/cpuv41_gpu.sh
# Steps: build this tree's indexer_q_tests + indexer_q_cpu_bench + indexer_q_cpu_icount and (when
# git can export it) the base tree's indexer_q_cpu_bench + indexer_q_cpu_icount, in parallel; the
# CPU / golden / reference tests under INDEXER_Q_CPU_ISA=avx512, avx2 and scalar (the CpuIsa*
# tests sweep every supported ISA, the new V41Fp4StepsEveryFloatMatchRowH included); instructions
# per row (exact, ptrace) before/after on both ISAs; the 1-thread timing of the changed recipes, 4096 tokens x 64 heads bf16, pinned to one core, base and this tree
# alternated twice. Logs under $OUT; a short summary on stdout.
set -u
OUT=${OUT:-$PWD/cpuv41-out}
mkdir -p "$OUT"
JOBS=$(nproc)
GTEST=${INDEXER_Q_GTEST_SOURCE_DIR:-$PWD/.dev/googletest}
BASE=f68d676
RECIPES=sgl_v41_fp4_rope_pack,sgl_v41_fp4_quant_rne,v4_fp4  # v4_fp4: unchanged code, a control
B=build-cpuv41
BB=/tmp/cpuv41-base
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"

say "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) ($(nproc) cpus); avx512f: $(grep -c -m1 avx512f /proc/cpuinfo)"

# ---- build (not part of the 150 s) ----
t0=$(date +%s)
have_base=0
if git rev-parse --verify -q "$BASE^{commit}" > /dev/null 2>&1; then
  rm -rf "$BB" && mkdir -p "$BB" && git archive "$BASE" | tar -x -C "$BB" && have_base=1
fi
half=$(( JOBS / 2 > 1 ? JOBS / 2 : 1 ))
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=OFF -DINDEXER_Q_GTEST_SOURCE_DIR="$GTEST" \
    > "$OUT/configure.log" 2>&1 &&
  cmake --build $B -j"$half" --target indexer_q_tests indexer_q_cpu_bench indexer_q_cpu_icount > "$OUT/build.log" 2>&1 ) &
pid_new=$!
if [ $have_base = 1 ]; then
  ( cd "$BB" && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=OFF -DINDEXER_Q_BUILD_TESTS=OFF \
      > "$OUT/configure_base.log" 2>&1 &&
    cmake --build build -j"$half" --target indexer_q_cpu_bench indexer_q_cpu_icount > "$OUT/build_base.log" 2>&1 ) &
  pid_base=$!
fi
wait $pid_new; rc_new=$?
rc_base=skipped
if [ $have_base = 1 ]; then wait $pid_base; rc_base=$?; fi
say "build: this tree rc $rc_new, base $BASE rc $rc_base ($(( $(date +%s) - t0 )) s)"
[ $rc_new = 0 ] || { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
[ -x "$BB/build/bench/indexer_q_cpu_bench" ] || have_base=0

# ---- tests (every ISA, the three runs in parallel) and instructions per row (exact, ptrace) ----
# The CpuIsa* tests sweep every supported ISA whatever INDEXER_Q_CPU_ISA says (the new
# V41Fp4StepsEveryFloatMatchRowH too, on all cores: run once, in the avx512 run); the golden and
# reference tests use the active ISA.
t1=$(date +%s)
INDEXER_Q_CPU_ISA=avx512 timeout 80 $B/tests/indexer_q_tests --gtest_filter='*Cpu*:*Golden*:*Reference*' \
    > "$OUT/tests_avx512.log" 2>&1 &
p1=$!
INDEXER_Q_CPU_ISA=avx2 timeout 80 $B/tests/indexer_q_tests --gtest_filter='*Cpu*:*Golden*:*Reference*:-*V41Fp4Steps*' \
    > "$OUT/tests_avx2.log" 2>&1 &
p2=$!
INDEXER_Q_CPU_ISA=scalar timeout 80 $B/tests/indexer_q_tests --gtest_filter='*Golden*:*Reference*' \
    > "$OUT/tests_scalar.log" 2>&1 &
p3=$!
( timeout 60 $B/bench/indexer_q_cpu_icount --recipe $RECIPES --isa avx512,avx2 --tokens 1 > "$OUT/icount_after.csv" 2>&1
  if [ $have_base = 1 ]; then
    timeout 60 "$BB/build/bench/indexer_q_cpu_icount" --recipe $RECIPES --isa avx512,avx2 --tokens 1 > "$OUT/icount_before.csv" 2>&1
  fi ) &
p4=$!
for isa in avx512 avx2 scalar; do
  case $isa in avx512) wait $p1; rc=$?;; avx2) wait $p2; rc=$?;; scalar) wait $p3; rc=$?;; esac
  say "tests INDEXER_Q_CPU_ISA=$isa: rc $rc; $(grep -E '^\[  PASSED  \]' "$OUT/tests_$isa.log" | head -1); failed: $(grep -cE '^\[  FAILED  \] [A-Za-z]' "$OUT/tests_$isa.log")"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/tests_$isa.log" | head -5
done
say "  $(grep -E 'V41Fp4StepsEveryFloatMatchRowH \(' "$OUT/tests_avx512.log" | head -1)"
wait $p4
say "tests + icount: $(( $(date +%s) - t1 )) s"
say "instructions per row (bf16, 64 heads; before -> after):"
python3 - "$OUT" $have_base <<'EOF' | tee -a "$OUT/summary.txt"
import csv, sys, os
out, have = sys.argv[1], sys.argv[2] == "1"
def read(p):
    try:
        return {(r["recipe"], r["isa"]): float(r["insns_per_row"]) for r in csv.DictReader(open(p))}
    except Exception:
        return {}
a = read(os.path.join(out, "icount_after.csv"))
b = read(os.path.join(out, "icount_before.csv")) if have else {}
for (rec, isa), v in a.items():
    print(f"  {rec:24s} {isa:7s} {b.get((rec, isa), float('nan')):8.1f} -> {v:8.1f}")
EOF

# ---- timings: 1 thread pinned, base and this tree alternated ----
core=$(( $(nproc) > 3 ? 2 : 0 ))
: > "$OUT/timing.csv"
for round in 1 2; do
  for tree in base new; do
    if [ $tree = base ]; then [ $have_base = 1 ] || continue; exe="$BB/build/bench/indexer_q_cpu_bench"; else exe=$B/bench/indexer_q_cpu_bench; fi
    timeout 15 taskset -c $core "$exe" --isa avx512,avx2 --threads 1 --tokens 4096 --heads 64 --recipe $RECIPES --iters 10 --format csv \
        2>&1 | grep -v '^#' | sed "s/^/$tree,$round,/" >> "$OUT/timing.csv"
  done
done
# Without git here, the base column is this morning's main run (same host kind, not pinned).
MORNING=bench/cuda_results/2026-12-02-h200-session7-main/cpu_1t.csv
[ $have_base = 1 ] && label="base $BASE, same run" || label="main's run of this morning ($MORNING)"
say "ns per row (1 thread on core $core, 4096 x 64 bf16, min over 2 rounds; $label -> this tree):"
python3 - "$OUT/timing.csv" $have_base $MORNING <<'EOF' | tee -a "$OUT/summary.txt"
import sys
best, exact = {}, {}
if sys.argv[2] != "1":
    try:
        for line in open(sys.argv[3]):
            f = line.strip().split(",")
            if len(f) > 8 and f[0] != "recipe" and not f[0].startswith("#") and f[2] == "bf16" and f[5] == "1":
                best[(f[0], f[1], "base")] = float(f[8])
    except (OSError, ValueError):
        pass
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) < 10 or f[2] == "recipe":
        continue
    tree, rec, isa = f[0], f[2], f[3]
    try:
        ns = float(f[10])
    except ValueError:
        continue
    k = (rec, isa, tree)
    best[k] = min(best.get(k, 1e9), ns)
    if tree == "new":
        exact[(rec, isa)] = f[15]
for rec, isa in sorted({(k[0], k[1]) for k in best if k[2] == "new"}):
    b, n = best.get((rec, isa, "base")), best.get((rec, isa, "new"))
    bs = f"{b:7.2f}" if b else "    n/a"
    print(f"  {rec:24s} {isa:7s} {bs} -> {n:7.2f}  exact={exact.get((rec, isa))}")
EOF
say "tests + measurements: $(( $(date +%s) - t1 )) s"
