#!/usr/bin/env bash
# Shorter GPU-machine call: build, the gtest suite, golden verification, the CLI benchmark and
# one Nsight Compute profile of the large-batch kernel. Logs under $OUT; summary last.
set -u
OUT=${OUT:-/tmp/iq_out}
mkdir -p "$OUT"
B=build-gpu
LOG=$OUT/build_test.log
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" >>"$SUM"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_BUILD_TORCH=OFF \
  -DINDEXER_Q_GTEST_SOURCE_DIR=$PWD/.dev/googletest >>"$LOG" 2>&1 || say "configure FAILED"
ninja -C $B -j16 indexer_q_tests indexer-q >>"$LOG" 2>&1 || say "build FAILED (see build_test.log)"
say "build: $(( $(date +%s) - t0 )) s"
T=$B/tests/indexer_q_tests
timeout 200 $T --gtest_brief=1 >>"$LOG" 2>&1
say "gtest suite rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]|Failure' "$LOG" | head -20 >>"$SUM"
timeout 120 $B/tools/indexer-q verify --backend cuda tests/data/golden/*.safetensors >"$OUT/verify.log" 2>&1
say "verify --backend cuda rc=$? $(tail -1 "$OUT/verify.log")"
timeout 200 $B/tools/indexer-q bench --backend cuda --heads 64,16 --tokens 1,8,64,256,1024,4096,16384,65536 \
  --iters 300 --format csv >"$OUT/cli_bench.csv" 2>&1
say "indexer-q bench rc=$?"; cut -d, -f3,4,8,9,11,12,13,14,15 "$OUT/cli_bench.csv" >>"$SUM"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
  timeout 150 $NCU --clock-control none -k regex:rowgroup_kernel -c 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    $T --gtest_filter=Cuda.LargeBatchMatchesReference >"$OUT/ncu.txt" 2>&1
  say "ncu rc=$?"
  grep -E 'DRAM Throughput|Memory Throughput|Compute \(SM\)|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Block Size|Grid Size|Executed Ipc|L2 Hit|Mem Busy|Max Bandwidth|Stall' "$OUT/ncu.txt" | head -40 >>"$SUM"
else
  say "ncu not found"
fi
say "total: $(( $(date +%s) - t0 )) s"
cat "$SUM"
