#!/usr/bin/env bash
# One GPU-machine call for the CUDA backend: the CUDA tests (every recipe), compute-sanitizer on
# a subset, the rest of the suite, and the per-recipe benchmark. Logs under $OUT; a short
# summary last on stdout.
#
# Binaries built elsewhere may be carried in build-cuda/ (tests/indexer_q_tests and
# bench/indexer_q_cuda_bench); if they are missing or do not start here, the script builds the
# library, the test binary and the benchmark (only those targets) in build-gpu.
#   run: bash bench/cuda_run.sh   (carry build-cuda/tests/indexer_q_tests,
#        build-cuda/bench/indexer_q_cuda_bench, .dev/googletest)
#   env: BENCH_ARGS (extra cuda bench options), BENCH_TOKENS (default 1,64,1024,4096,16384,65536),
#        SKIP_SANITIZER=1, SKIP_REST=1, CUDA_TEST_TIMEOUT, BENCH_TIMEOUT
set -u
OUT=${OUT:-/tmp/iq_out}
mkdir -p "$OUT"
LOG=$OUT/tests.log
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" >>"$SUM"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
T=build-cuda/tests/indexer_q_tests
BENCH=build-cuda/bench/indexer_q_cuda_bench
if ! { [ -x $T ] && $T --gtest_list_tests >/dev/null 2>&1 && [ -x $BENCH ]; }; then
  say "carried binaries missing or not runnable: building here"
  B=build-gpu
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_BUILD_TORCH=OFF \
    -DINDEXER_Q_GTEST_SOURCE_DIR=$PWD/.dev/googletest >"$OUT/build.log" 2>&1 || say "configure FAILED"
  ninja -C $B -j16 indexer_q_tests indexer_q_cuda_bench >>"$OUT/build.log" 2>&1 || say "build FAILED (see build.log)"
  T=$B/tests/indexer_q_tests
  BENCH=$B/bench/indexer_q_cuda_bench
  say "build: $(( $(date +%s) - t0 )) s"
fi

# CUDA tests (every recipe), then the golden and conformance suites through CUDA
timeout ${CUDA_TEST_TIMEOUT:-200} $T --gtest_filter='Cuda.*' >"$LOG" 2>&1
say "Cuda.* rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]|Failure|golden cases per recipe|^\[       OK \]' "$LOG" | head -40 >>"$SUM"
if [ -z "${SKIP_REST:-}" ]; then
  timeout ${REST_TIMEOUT:-90} $T --gtest_filter='-Cuda.*' --gtest_brief=1 >"$OUT/rest.log" 2>&1
  say "rest of the suite rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/rest.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/rest.log" | head -20 >>"$SUM"
fi
# compute-sanitizer memcheck: out-of-range positions, misaligned fallback, golden files
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -z "${SKIP_SANITIZER:-}" ] && [ -n "$CS" ]; then
  timeout ${SANITIZER_TIMEOUT:-90} $CS --tool memcheck --error-exitcode 9 $T \
    --gtest_filter='Cuda.OutOfRange*:Cuda.Misaligned*:Cuda.Golden*' >"$OUT/sanitizer.log" 2>&1
  say "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/sanitizer.log" | tr '\n' ' ')"
fi
say "tests done: $(( $(date +%s) - t0 )) s"
# benchmark: every recipe, the same-run copy
timeout ${BENCH_TIMEOUT:-150} $BENCH --heads 64 --tokens ${BENCH_TOKENS:-1,64,1024,4096,16384,65536} ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
say "cuda_bench rc=$?"
grep -v '^csv' "$OUT/bench.log" >>"$SUM"
say "total: $(( $(date +%s) - t0 )) s"
cat "$SUM"
