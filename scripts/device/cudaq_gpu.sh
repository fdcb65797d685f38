#!/usr/bin/env bash
# Issue 20, fewer instructions a row in the CUDA query kernel (branch cudaq): the CUDA tests of
# this tree, then the CUDA benchmark of a baseline tree and of this one at 16384 and 65536 tokens
# x 64 heads, PDL on, alternating (base, new, base, new) on the same machine. The kernels have no
# run-time switch between the old and the new code: the A/B is two builds.
#
#   BASE=dir      the baseline source tree (default .dev/base: `git archive <main commit>` of it,
#                 carried to the device machine)
#   RECIPES=list  default: the recipes this branch changed, and v32_fp8 / vllm_v4_fp8 (8 lanes)
#   TOKENS=list   default 16384,65536       HEADS=n  default 64       ROUNDS=n  default 2
#   SHAPES=list   shapes tried on the two SGLang V4.1 FP4 forms (default "4:2 8:1"; "" for none)
#   TESTS=0       skip the tests (default: build and run indexer_q_tests --gtest_filter='Cuda*')
# Output: $OUT/summary.txt (the short form) and the logs (default OUT ./cudaq_out).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/cudaq_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
BASE=${BASE:-.dev/base}
RECIPES=${RECIPES:-sgl_v41_fp4_rope_pack,sgl_v41_fp4_quant_rne,v4_fp4,sglang_v4_fp8_gfx942,v4_fp8,v32_fp8,vllm_v4_fp8}
TOKENS=${TOKENS:-16384,65536}
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
J=$(nproc)
if [ ! -f "$BASE/CMakeLists.txt" ]; then echo "cudaq_gpu: BASE=$BASE is not a source tree" >&2; exit 2; fi
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); base $BASE"

build() {  # build <src> <dir> <targets...>: sm_90, Release
  local src=$1 dir=$2
  shift 2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DINDEXER_Q_CUDA_ARCHS=90-real -DINDEXER_Q_BUILD_TORCH=OFF >"$OUT/build_$(basename "$dir").log" 2>&1 &&
    cmake --build "$dir" -j"$J" --target "$@" >>"$OUT/build_$(basename "$dir").log" 2>&1
}
t0=$(date +%s)
build "$BASE" build-cq-base indexer_q_cuda_bench & pb=$!
if [ "${TESTS:-1}" != 0 ]; then
  build . build-cq-new indexer_q_cuda_bench indexer_q_tests & pn=$!
else
  build . build-cq-new indexer_q_cuda_bench & pn=$!
fi
wait $pb; rb=$?
wait $pn; rn=$?
say "build base rc=$rb, new rc=$rn ($(( $(date +%s) - t0 )) s)"
[ $rb -ne 0 ] && tail -20 "$OUT/build_build-cq-base.log"
[ $rn -ne 0 ] && tail -20 "$OUT/build_build-cq-new.log"
[ $rb -ne 0 ] || [ $rn -ne 0 ] && exit 1

if [ "${TESTS:-1}" != 0 ]; then
  timeout 300 build-cq-new/tests/indexer_q_tests --gtest_filter='Cuda*' >"$OUT/tests.txt" 2>&1
  say "tests rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.txt" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/tests.txt" | head -20 | tee -a "$SUM"
fi

for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in base new; do
    timeout 200 "build-cq-$side/bench/indexer_q_cuda_bench" --tokens "$TOKENS" --heads "${HEADS:-64}" \
      --recipes "$RECIPES" --pdl on >"$OUT/cuda_${side}_$r.txt" 2>&1
    say "cuda $side round $r rc=$? ($(( $(date +%s) - t0 )) s)"
    # tokens, heads, recipe, shape, us, ratio to copy, bytes equal
    grep '^csv,[0-9]' "$OUT/cuda_${side}_$r.txt" | cut -d, -f2,3,5,6,9,13,15 | sed "s/^/  $side $r: /" | tee -a "$SUM"
  done
done
# the lighter V4.1 FP4 rows on other listed shapes (INDEXER_Q_CUDA_SHAPE, docs/PERFORMANCE.md):
# 4 lanes x 2 rows and 8 lanes against the automatic 4 x 1 above (this tree only)
for shape in ${SHAPES-4:2 8:1}; do
  INDEXER_Q_CUDA_SHAPE=$shape timeout 120 build-cq-new/bench/indexer_q_cuda_bench --tokens "$TOKENS" \
    --heads "${HEADS:-64}" --recipes sgl_v41_fp4_rope_pack,sgl_v41_fp4_quant_rne --pdl on \
    >"$OUT/cuda_new_shape_${shape/:/x}.txt" 2>&1
  say "cuda new shape $shape rc=$? ($(( $(date +%s) - t0 )) s)"
  grep '^csv,[0-9]' "$OUT/cuda_new_shape_${shape/:/x}.txt" | cut -d, -f2,3,5,6,9,13,15 | sed "s/^/  $shape: /" | tee -a "$SUM"
done
say "total $(( $(date +%s) - t0 )) s"
