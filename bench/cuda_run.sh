#!/usr/bin/env bash
# One GPU-machine call for the CUDA backend: build, the gtest suite, golden verification,
# compute-sanitizer, SASS instruction counts, benchmarks. Logs under $OUT (<= 8 files);
# a short summary last on stdout.
#   run: bash bench/cuda_run.sh   (carry .dev/googletest)
set -u
OUT=${OUT:-/tmp/iq_out}
mkdir -p "$OUT"
B=build-gpu
LOG=$OUT/build_test.log
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" >>"$SUM"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
uname -a >>"$LOG"; nvcc --version >>"$LOG" 2>&1
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_BUILD_TORCH=OFF \
  -DINDEXER_Q_GTEST_SOURCE_DIR=$PWD/.dev/googletest >>"$LOG" 2>&1 || say "configure FAILED"
ninja -C $B -j16 -k 0 >>"$LOG" 2>&1 || say "build had failures (see build_test.log)"
nvcc -std=c++17 -O3 --fmad=false -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -Itools \
  bench/cuda_bench.cu tools/device_cuda.cu $B/libindexer_q.a -o $B/cuda_bench >>"$LOG" 2>&1 || say "cuda_bench build FAILED"
say "build: $(( $(date +%s) - t0 )) s"

# tests
T=$B/tests/indexer_q_tests
if [ -x $T ]; then
  timeout 300 $T --gtest_brief=1 >>"$LOG" 2>&1; rc=$?
  say "gtest suite rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|Failure|error:' "$LOG" | head -20 >>"$SUM"
fi
# golden files through the CLI
if [ -x $B/tools/indexer-q ]; then
  timeout 120 $B/tools/indexer-q verify --backend cuda tests/data/golden/*.safetensors >"$OUT/verify.log" 2>&1
  say "verify --backend cuda rc=$?"; tail -8 "$OUT/verify.log" >>"$SUM"
fi
# compute-sanitizer
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$CS" ] && [ -x $T ]; then
  F='Cuda.*:-Cuda.Fp8ConversionMatchesScalarEncoderForEveryFloat:Cuda.LargeBatchMatchesReference:Cuda.ErrorsAreReportedNotCrashed'
  timeout 240 $CS --tool memcheck --error-exitcode 9 $T --gtest_filter="$F" >"$OUT/sanitizer.log" 2>&1
  say "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  timeout 120 $CS --tool racecheck --error-exitcode 9 $T --gtest_filter='Cuda.EveryVariantMatchesReference:Cuda.OutOfRange*' >>"$OUT/sanitizer.log" 2>&1
  say "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  timeout 120 $CS --tool initcheck --error-exitcode 9 $T --gtest_filter='Cuda.OutOfRange*:Cuda.RunsOn*' >>"$OUT/sanitizer.log" 2>&1
  say "initcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
else
  say "compute-sanitizer not found"
fi
# SASS: instructions per kernel
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass $B/libindexer_q.a >"$OUT/sass.txt" 2>&1
  cuobjdump -sass $B/cuda_bench 2>/dev/null | awk '/Function : .*baseline/{p=1} /Function : /&&!/baseline/{p=0} p' >>"$OUT/sass.txt"
  awk '/Function : /{if(n)print n, f; f=$3; n=0} /^ *\/\*[0-9a-f]{4}\*\//{n++} END{print n, f}' "$OUT/sass.txt" \
    | grep -E 'rowgroup_kernelILi(2|4|8|16)ELi0ELb1ELb0|tma_kernelILi4ELi0ELb1|baseline_warp_kernelILi0ELb1' | sed 's/^/sass instr: /' >>"$SUM"
  for k in 'rowgroup_kernelILi4ELi0ELb1ELb0'; do
    awk -v k=$k '/Function : /{p=index($0,k)>0} p' "$OUT/sass.txt" | grep -oE '^ +/\*[0-9a-f]{4}\*/ +[A-Z0-9.]+' \
      | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' ' | sed "s/^/$k ops: /" >>"$SUM"; echo >>"$SUM"
  done
fi
# benchmarks
if [ -x $B/cuda_bench ]; then
  timeout 200 $B/cuda_bench --heads 64,16 ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  say "cuda_bench rc=$?"; grep -v '^csv' "$OUT/bench.log" | tail -40 >>"$SUM"
fi
if [ -x $B/tools/indexer-q ]; then
  timeout 200 $B/tools/indexer-q bench --backend cuda --heads 64,16 --tokens 1,8,64,256,1024,4096,16384,65536 --iters 200 --format csv >"$OUT/cli_bench.csv" 2>&1
  say "indexer-q bench rc=$?"; cut -d, -f3,4,8,9,11,12,13- "$OUT/cli_bench.csv" >>"$SUM"
fi
say "total: $(( $(date +%s) - t0 )) s"
cat "$SUM"
