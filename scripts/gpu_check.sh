#!/usr/bin/env bash
# One-call check on a CUDA machine (used on the team's H200 through the device tool): builds the
# library, CLI, tests and benchmarks with CUDA, runs every C++ test (GPU tests included),
# verifies every golden file (all recipes, FNUZ derived) on every backend and CPU ISA, installs
# the Python package with CUDA and runs pytest, then the per-recipe CUDA and CPU benchmarks.
# Logs under $OUT (default ./gpu_check_out); a summary is printed last.
# GoogleTest: an installed one, or a source tree in GTEST_SRC (default .dev/googletest).
#   SKIP_PYTHON=1 skips pip + pytest; SKIP_BENCH=1 skips the benchmarks.
#   BUILD_DIR=dir (default build-gpu); SKIP_BUILD=1 uses binaries already built in BUILD_DIR
#   (e.g. built on another machine at the same absolute path and carried).
set -u -o pipefail
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
J=$(nproc)
B=${BUILD_DIR:-build-gpu}
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
t0=$(date +%s)
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(git rev-parse --short HEAD 2>/dev/null)"

if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON \
    -DINDEXER_Q_GTEST_SOURCE_DIR="${GTEST_SRC:-$PWD/.dev/googletest}" >"$OUT/build.log" 2>&1 \
    && cmake --build $B -j"$J" >>"$OUT/build.log" 2>&1
  say "build rc=$? ($(( $(date +%s) - t0 )) s)"
else
  say "build skipped: binaries of $B used as they are"
fi

# The Python package builds while the C++ tests run (its own build directory).
if [ -z "${SKIP_PYTHON:-}" ]; then
  (python3 -m pip install -q --no-build-isolation --no-deps . >"$OUT/pip.log" 2>&1; echo "rc=$?" >>"$OUT/pip.log") &
  PIP_PID=$!
fi

timeout 300 ctest --test-dir $B -j8 --output-on-failure >"$OUT/ctest.log" 2>&1
say "ctest rc=$?: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
grep -E "^\s+[0-9]+ - .*\((Failed|Skipped|Timeout)\)" "$OUT/ctest.log" | head -20 | tee -a "$SUM"
grep -E "golden cases per recipe|cases checked" "$OUT/ctest.log" | head -5 | tee -a "$SUM"

if command -v compute-sanitizer >/dev/null 2>&1 && [ -z "${SKIP_SANITIZER:-}" ]; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/indexer_q_tests \
    --gtest_filter='Cuda.OutOfRange*:Cuda.Misaligned*:Cuda.GoldenFiles*' >"$OUT/memcheck.log" 2>&1
  say "compute-sanitizer memcheck (out-of-range, misaligned, golden; every recipe) rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

timeout 120 $B/tools/indexer-q verify tests/data/golden >"$OUT/verify.log" 2>&1
say "verify (every recipe, backend, ISA) rc=$?: $(tail -1 "$OUT/verify.log")"
head -2 "$OUT/verify.log" | tee -a "$SUM" >/dev/null

if [ -z "${SKIP_PYTHON:-}" ]; then
  wait $PIP_PID
  say "pip install $(tail -1 "$OUT/pip.log") ($(( $(date +%s) - t0 )) s)"
  XDIST=""
  python3 -c "import xdist" 2>/dev/null && XDIST="-n 8"
  timeout 300 python3 -m pytest tests/python -q -p no:cacheprovider $XDIST >"$OUT/pytest.log" 2>&1
  say "pytest rc=$?: $(tail -1 "$OUT/pytest.log")"
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  timeout 150 $B/bench/indexer_q_cuda_bench --tokens 1,64,1024,4096,16384,65536 --heads 64 \
    >"$OUT/cuda_bench.txt" 2>&1
  say "cuda bench (every recipe, same-run copy) rc=$?"
  timeout 120 $B/tools/indexer-q bench --backend cuda --recipe all --tokens 1,64,4096,65536 --heads 64 \
    --iters 100 --format csv >"$OUT/cli_bench_cuda.csv" 2>&1
  say "indexer-q bench --backend cuda rc=$?"
  timeout 150 taskset -c 2 $B/bench/indexer_q_cpu_bench --recipe all --isa avx2,avx512 --threads 1 \
    --tokens 4096 --heads 64 --iters 15 >"$OUT/cpu_bench.txt" 2>&1
  say "cpu bench (1 thread, every recipe) rc=$?"
  timeout 60 $B/bench/indexer_q_cpu_bench --recipe all --isa avx512 --threads "$J" \
    --tokens 4096 --heads 64 --iters 15 >>"$OUT/cpu_bench.txt" 2>&1
  say "cpu bench ($J threads) rc=$?"
fi
say "total $(( $(date +%s) - t0 )) s"
echo; cat "$SUM"
