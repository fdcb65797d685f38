#!/usr/bin/env bash
# compute-sanitizer over the CUDA tests (issue 11), for the GPU machine. Expects a CUDA build in
# BUILD_DIR (default build-gpu; e.g. made by `STEPS=build scripts/device/all_gpu.sh` or `cmake -DINDEXER_Q_CUDA=ON`)
# holding tests/indexer_q_tests. Runs, each under a time limit:
#   memcheck   every Cuda.* / CudaKside.* test except the exhaustive encoder sweeps (2^32 inputs,
#              pure arithmetic with no memory access of interest) and the PDL timing test (the
#              sanitizer serialises kernels, so no overlap can be measured); includes
#              Cuda.OutOfRangePositions* (out-of-range positions for every recipe), misaligned
#              pointers, golden files, graphs, streams, errors (LEAK_CHECK=1 adds --leak-check full)
#   racecheck  the kernels' shared-memory hazards, on the tests that launch the op's kernels
#   initcheck  reads of uninitialised device memory, same tests
#   synccheck  (when the tool has it) invalid __syncthreads / warp-sync use, same tests
# Logs and summary.txt under $OUT (default ./gpu_sanitize_out). Exit status: 0 only when every
# tool ran, the tests passed under it, and it reported 0 errors.
#   BUILD_DIR=dir   the build tree (default build-gpu)
#   TOOL_TIMEOUT=s  seconds per tool (default 140: four tools stay inside a 10-minute call)
#   MEMCHECK_TIMEOUT=s  seconds for memcheck alone (default TOOL_TIMEOUT; it runs the most tests)
#   TOOLS="memcheck racecheck initcheck synccheck"  the tools to run (default all four)
#   SERIAL=1        run the tools one after another (default: all at once, each its own process
#                   on the one GPU; the wall time is then the slowest tool's, about 3 minutes)
# The tests see INDEXER_Q_SANITIZER_SUBSET=1: Cuda.EveryRecipeShapeAndDtypeMatchesReference then
# runs each (recipe, B, H) with one (dtype, position dtype) pair in rotation (every pair, recipe and
# launch shape still met; a sixth of the launches), which keeps every tool inside its limit.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_sanitize_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
B=${BUILD_DIR:-build-gpu}
T=${TOOL_TIMEOUT:-140}
BIN=$B/tests/indexer_q_tests
SUM=$OUT/summary.txt
: >"$SUM"
export INDEXER_Q_SANITIZER_SUBSET=1
say() { echo "$*" | tee -a "$SUM"; }

if [ ! -x "$BIN" ]; then say "gpu_sanitize: $BIN not found (build with CUDA first; BUILD_DIR=...)"; exit 2; fi
if ! command -v compute-sanitizer >/dev/null 2>&1; then say "gpu_sanitize: compute-sanitizer not found"; exit 2; fi
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(compute-sanitizer --version 2>&1 | grep -m1 -oE 'Version [0-9.]+'); $(git rev-parse --short HEAD 2>/dev/null)"

# The CUDA tests present in this binary (the key-side ones only when built).
ALL=$("$BIN" --gtest_list_tests 2>/dev/null | awk '/^[A-Za-z]/{s=$1} /^  /{print s $1}' | grep -E '^Cuda(Kside)?\.' || true)
if [ -z "$ALL" ]; then say "gpu_sanitize: no Cuda.* tests in $BIN (built without CUDA?)"; exit 2; fi
# memcheck: all but the exhaustive encoder sweeps and the overlap timing test. The tests that
# provoke a CUDA API error on purpose (an impossible launch, to check it comes back as a Status)
# run in a second memcheck pass that does not count API errors; kernel memory errors still count.
SKIP_RE='EveryFloat|EveryBf16AndExponent|EveryByte|OverlappedOnThisDevice'
API_ERR_RE='ErrorsAreReportedNotCrashed'
MEM=$(echo "$ALL" | grep -vE "$SKIP_RE|$API_ERR_RE" | paste -sd: -)
MEM_API=$(echo "$ALL" | grep -E "$API_ERR_RE" | paste -sd: -)
# racecheck / initcheck / synccheck: the tests that launch the op's kernels over many shapes.
KERNEL_RE='EveryRecipeShapeAndDtype|NonFiniteRows|OutOfRange|Misaligned|GoldenFiles|VllmEdgeRows|HeadScale|RandomCases|StridedRows'
KER=$(echo "$ALL" | grep -E "$KERNEL_RE" | paste -sd: -)
say "memcheck set: $(echo "$MEM" | tr ':' '\n' | wc -l) tests; racecheck/initcheck set: $(echo "$KER" | tr ':' '\n' | wc -l) tests"

rc_all=0
run_tool() {  # label, tool, filter, extra options...
  local label=$1 tool=$2 filter=$3
  shift 3
  local log=$OUT/$label.log t0 rc lim=$T
  [ "$tool" = memcheck ] && lim=${MEMCHECK_TIMEOUT:-$T}
  t0=$(date +%s)
  timeout "$lim" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" "$BIN" --gtest_filter="$filter" \
    >"$log" 2>&1
  rc=$?
  local tests errs
  tests=$(grep -E '^\[  (PASSED|FAILED)  \]' "$log" | tr '\n' ' ')
  errs=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)
  # each tool writes its own status file (the tools may run at once); collected in order below
  {
    echo "$label rc=$rc ($(( $(date +%s) - t0 )) s): ${errs:-no summary line} | ${tests:-no gtest summary}"
    [ "$rc" -eq 124 ] && echo "  $label: timed out after $lim s (raise TOOL_TIMEOUT or narrow the set)"
    grep -m5 -E '^========= (Invalid|Program hit|Race|Uninitialized|Error|Leaked)' "$log" | sed 's/^/  /'
  } >"$OUT/$label.status"
  echo "$rc" >"$OUT/$label.rc"
  return 0
}
order=()
start() {  # label, tool, filter, extra options...: in the background unless SERIAL=1
  order+=("$1")
  if [ -n "${SERIAL:-}" ]; then run_tool "$@"; else run_tool "$@" & fi
}

leak=()
[ -n "${LEAK_CHECK:-}" ] && leak=(--leak-check full)
TOOLS=" ${TOOLS:-memcheck racecheck initcheck synccheck} "
if [[ $TOOLS == *" memcheck "* ]]; then
  start memcheck memcheck "$MEM" "${leak[@]}"
  [ -n "$MEM_API" ] && start memcheck-deliberate-api-errors memcheck "$MEM_API" --report-api-errors no
fi
[[ $TOOLS == *" racecheck "* ]] && start racecheck racecheck "$KER" --racecheck-report all
[[ $TOOLS == *" initcheck "* ]] && start initcheck initcheck "$KER"
if [[ $TOOLS == *" synccheck "* ]] && compute-sanitizer --help 2>&1 | grep -q synccheck; then
  start synccheck synccheck "$KER"
fi
wait
for label in "${order[@]}"; do
  cat "$OUT/$label.status" 2>/dev/null | tee -a "$SUM" || say "$label: no status (the tool did not finish)"
  [ "$(cat "$OUT/$label.rc" 2>/dev/null)" = 0 ] || rc_all=1
  rm -f "$OUT/$label.status" "$OUT/$label.rc"
done
say "gpu_sanitize: $([ $rc_all -eq 0 ] && echo PASS || echo FAIL)"
exit $rc_all
