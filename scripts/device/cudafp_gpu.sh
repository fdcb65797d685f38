#!/usr/bin/env bash
# Issue 20, session 7 (branch cudafp): fewer instructions a row in the CUDA query kernel (SGLang's
# FP8 scale and inverse without the division sequences, an out-of-range row's zero codes behind a
# warp-uniform branch, 32-bit row indices with larger calls split into launches of whole tokens,
# v4_fp4's codes with the scale folded into the bf16 fmas). The CUDA tests of this tree, then the
# CUDA benchmark of the base tree (main db79534) and of this one at 16384 and 65536 tokens x 64
# heads, PDL on, alternating base, new, base, new on the same machine (no run-time switch between
# the old and the new code: the A/B is two builds).
#
#   BASE=dir      the base source tree (default .dev/base: `git archive db79534 CMakeLists.txt cmake
#                 include src bench tools tests` unpacked there, carried to the device machine)
#   RECIPES=list  default: the recipes whose kernels changed, and vllm_v4_fp8 (no Hadamard)
#   TOKENS=list   default 16384,65536    HEADS=n default 64    ROUNDS=n default 2    ITERS=n default 30
#   GTEST_SRC=dir GoogleTest sources where none is installed (default .dev/googletest)
#   TESTS=0       skip the tests (default: indexer_q_tests --gtest_filter='Cuda*', 6 shards at once)
# Output: $OUT/summary.txt (the short form, also on stdout) and the logs (default OUT ./cudafp_out).
# Success: "tests rc=0" with every shard PASSED and no FAILED line; every bench line "bytes equal"
# (the `eq` column: yes); the table at the end gives new / base per recipe and size.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/cudafp_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
BASE=${BASE:-.dev/base}
RECIPES=${RECIPES:-v4_fp8,v4_fp4,rope_first_fp8,v4_fp8_fnuz,sglang_v4_fp8_gfx942,v32_fp8,vllm_v4_fp8,sgl_v41_fp4_rope_pack}
TOKENS=${TOKENS:-16384,65536}
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
J=$(nproc)
GTEST_SRC=${GTEST_SRC:-$PWD/.dev/googletest}  # used where no GTest is installed (carry .dev/googletest)
if [ ! -f "$BASE/CMakeLists.txt" ]; then echo "cudafp_gpu: BASE=$BASE is not a source tree" >&2; exit 2; fi
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); base $BASE"

build() {  # build <src> <dir> <targets...>: sm_90, Release
  local src=$1 dir=$2
  shift 2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DINDEXER_Q_CUDA_ARCHS=90-real -DINDEXER_Q_BUILD_TORCH=OFF -DINDEXER_Q_GTEST_SOURCE_DIR="$GTEST_SRC" \
    >"$OUT/build_$(basename "$dir").log" 2>&1 &&
    cmake --build "$dir" -j"$J" --target "$@" >>"$OUT/build_$(basename "$dir").log" 2>&1
}
t0=$(date +%s)
build "$BASE" build-fp-base indexer_q_cuda_bench & pb=$!
if [ "${TESTS:-1}" != 0 ]; then
  build . build-fp-new indexer_q_cuda_bench indexer_q_tests & pn=$!
else
  build . build-fp-new indexer_q_cuda_bench & pn=$!
fi
wait $pb; rb=$?
wait $pn; rn=$?
say "build base rc=$rb, new rc=$rn ($(( $(date +%s) - t0 )) s)"
[ $rb -ne 0 ] && tail -20 "$OUT/build_build-fp-base.log"
[ $rn -ne 0 ] && tail -20 "$OUT/build_build-fp-new.log"
[ $rb -ne 0 ] || [ $rn -ne 0 ] && exit 1
t1=$(date +%s)

if [ "${TESTS:-1}" != 0 ]; then
  S=6
  pids=()
  for i in $(seq 0 $((S - 1))); do
    GTEST_TOTAL_SHARDS=$S GTEST_SHARD_INDEX=$i timeout 120 build-fp-new/tests/indexer_q_tests --gtest_filter='Cuda*' \
      >"$OUT/tests_$i.txt" 2>&1 & pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  say "tests rc=$rc ($(( $(date +%s) - t1 )) s after the build): $(cat "$OUT"/tests_*.txt | grep -cE '^\[       OK \]') OK, $(cat "$OUT"/tests_*.txt | grep -cE '^\[  FAILED  \] [A-Za-z]') FAILED"
  cat "$OUT"/tests_*.txt | grep -E '^\[  FAILED  \] [A-Za-z]' | sort -u | head -20 | tee -a "$SUM"
  for n in SglangScaleInverseMatchesDivisionForEveryAmax E2m1Code8MatchesScalarForEveryBf16AndExponent \
    EncodersMatchScalarForEveryFloat CallsSplitIntoLaunchesOfWholeTokensMatchReference \
    EveryRecipeShapeAndDtypeMatchesReference GoldenFilesOfEveryRecipeThroughEveryShape; do
    say "  Cuda.$n: $(cat "$OUT"/tests_*.txt | grep -E "^\[ +(OK|FAILED) +\] Cuda\.$n " | head -1 | sed -E 's/^\[ *([A-Z]+) *\].*\((.*)\)/\1 (\2)/')"
  done
fi

for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in base new; do
    timeout 60 "build-fp-$side/bench/indexer_q_cuda_bench" --tokens "$TOKENS" --heads "${HEADS:-64}" \
      --recipes "$RECIPES" --pdl on --iters "${ITERS:-30}" >"$OUT/cuda_${side}_$r.txt" 2>&1
    say "cuda $side round $r rc=$? ($(( $(date +%s) - t1 )) s after the build)"
  done
done
# tokens, heads, recipe, shape, us, ratio to copy, bytes equal
python3 - "$OUT" <<'EOF' | tee -a "$SUM"
import glob, os, statistics, sys
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "cuda_*_*.txt"))):
    side = os.path.basename(f).split("_")[1]
    for line in open(f):
        c = line.strip().split(",")
        if len(c) < 15 or c[0] != "csv" or not c[1].isdigit():
            continue
        key = (c[4], int(c[1]), int(c[2]))
        rows.setdefault(key, {}).setdefault(side, []).append((float(c[8]), float(c[12]), c[14]))
print("recipe, tokens x heads: base us (of copy) -> new us (of copy), new speed / base, every byte equal")
for (rec, t, h), d in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    b, n = d.get("base", []), d.get("new", [])
    if not b or not n:
        print(f"  {rec}, {t} x {h}: missing ({len(b)} base, {len(n)} new lines)")
        continue
    bu, bc = statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)
    nu, nc = statistics.median(x[0] for x in n), statistics.median(x[1] for x in n)
    eq = "yes" if all(x[2] == "yes" for x in b + n) else "NO: " + " ".join(sorted(set(x[2] for x in b + n)))
    print(f"  {rec}, {t} x {h}: {bu:.2f} ({bc:.2f}) -> {nu:.2f} ({nc:.2f}), {bu / nu:.3f}x, eq {eq}")
EOF
say "total $(( $(date +%s) - t1 )) s after the build"
