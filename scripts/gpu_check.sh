#!/usr/bin/env bash
# One-call check on a CUDA machine (used on the team's H200 through the device tool): builds the
# C++ library, CLI and tests with CUDA, runs every C++ test (GPU tests included), verifies the
# golden files on every backend, installs the Python package with CUDA and runs pytest, then a
# short CUDA benchmark. Logs under $OUT (default ./gpu_check_out); a summary is printed last.
# GoogleTest: an installed one, or a source tree in GTEST_SRC (default .dev/googletest).
set -u -o pipefail
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1
J=$(nproc)
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
t0=$(date +%s)
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON \
  -DINDEXER_Q_GTEST_SOURCE_DIR="${GTEST_SRC:-$PWD/.dev/googletest}" >"$OUT/build.log" 2>&1 \
  && cmake --build build-gpu -j"$J" >>"$OUT/build.log" 2>&1
say "build rc=$? ($(( $(date +%s) - t0 )) s)"

timeout 240 ctest --test-dir build-gpu -j8 --output-on-failure >"$OUT/ctest.log" 2>&1
say "ctest rc=$?: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
grep -E "^\s+[0-9]+ - .*\((Failed|Skipped|Timeout)\)" "$OUT/ctest.log" | head -20 | tee -a "$SUM"

timeout 120 build-gpu/tools/indexer-q verify tests/data/golden >"$OUT/verify.log" 2>&1
say "verify (all backends) rc=$?: $(tail -1 "$OUT/verify.log")"

python3 -m pip install -q --no-build-isolation --no-deps . >"$OUT/pip.log" 2>&1
say "pip install rc=$? ($(( $(date +%s) - t0 )) s)"
XDIST=""
python3 -c "import xdist" 2>/dev/null && XDIST="-n 8"
timeout 300 python3 -m pytest tests/python -q -p no:cacheprovider $XDIST >"$OUT/pytest.log" 2>&1
say "pytest rc=$?: $(tail -1 "$OUT/pytest.log")"

timeout 120 build-gpu/tools/indexer-q bench --backend cuda --tokens 1,64,1024,16384,65536 --heads 64,16 \
  --iters 200 --format csv >"$OUT/bench.csv" 2>&1
say "bench rc=$?"
cat "$OUT/bench.csv" | tee -a "$SUM" >/dev/null
say "total $(( $(date +%s) - t0 )) s"
echo; cat "$SUM"
