#!/usr/bin/env bash
# One GPU-machine call for issue 20 (the query kernel at the hardware's limit): a build of this
# tree (with TUNE=1 every candidate shape of src/cuda/launch_shapes.inc, -DINDEXER_Q_CUDA_TUNING_SHAPES)
# and, where BASE names a source tree, of that tree's benchmark; the CUDA tests (sharded over
# SHARDS processes); the benchmark of every recipe at 64 and 16 heads (PDL off and on, the
# same-run copy, every output byte checked); the shape sweep (--shapes) on a set of recipes; and
# Nsight Compute on the large-size kernel of NCU_RECIPES, this tree and BASE's.
#   run: cd <this tree> && TUNE=1 BASE=.dev/base bash bench/cuda_issue20.sh
#   env: STEPS=build,test,bench,sweep,ncu (default all)  TOKENS (default 1,8,64,16384)
#        H16_TOKENS, BASE_TOKENS, BASE_RECIPES, ITERS (default 50), SHARDS (default 4),
#        SWEEP_RECIPES, SWEEP_TOKENS, NCU_RECIPES, GTEST_SRC (default ../googletest)
# Logs and CSVs under $OUT (packed into $OUT/logs.tgz); a short summary last on stdout.
set -u -o pipefail
OUT=${OUT:-$PWD/issue20_out}
L=$OUT/logs
mkdir -p "$L"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
STEPS=${STEPS:-build,test,bench,sweep,ncu}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
J=$(nproc)
B=build-i20
TOKENS=${TOKENS:-1,8,64,16384}
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1); TUNE=${TUNE:-0} BASE=${BASE:-}"

if has build; then
  FLAGS="--split-compile=0"
  [ -n "${TUNE:-}" ] && FLAGS="$FLAGS -DINDEXER_Q_CUDA_TUNING_SHAPES"
  if [ -n "${BASE:-}" ]; then
    (cmake -S "$BASE" -B build-i20-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES=90-real -DINDEXER_Q_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS="--split-compile=0" &&
     cmake --build build-i20-base -j"$J" --target indexer_q_cuda_bench) >"$L/build_base.log" 2>&1 &
    pb=$!
  fi
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DINDEXER_Q_BUILD_TORCH=OFF -DCMAKE_CUDA_FLAGS="$FLAGS" -DINDEXER_Q_GTEST_SOURCE_DIR="${GTEST_SRC:-$PWD/../googletest}" \
    >"$L/build.log" 2>&1 && cmake --build $B -j"$J" --target indexer_q_tests indexer_q_cuda_bench >>"$L/build.log" 2>&1
  rc=$?
  say "build rc=$rc ($(el))"
  grep -E "registers|spill" "$L/build.log" | head -0
  if [ -n "${BASE:-}" ]; then wait $pb; say "build base rc=$? ($(el))"; fi
  if [ $rc -ne 0 ]; then grep -E "error" "$L/build.log" | head -30 | tee -a "$SUM"; tar czf "$OUT/logs.tgz" -C "$OUT" logs; exit 1; fi
fi
T=$B/tests/indexer_q_tests
BENCH=$B/bench/indexer_q_cuda_bench

if has test; then
  N=${SHARDS:-4}
  for i in $(seq 0 $((N - 1))); do
    GTEST_TOTAL_SHARDS=$N GTEST_SHARD_INDEX=$i timeout 300 $T --gtest_filter='Cuda*' --gtest_brief=1 >"$L/test_$i.log" 2>&1 &
  done
  wait
  for i in $(seq 0 $((N - 1))); do
    say "gtest Cuda* shard $i: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$L/test_$i.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]|Failure' "$L/test_$i.log" | head -10 | tee -a "$SUM"
  done
  say "tests done ($(el))"
fi

if has bench; then
  for H in 64 16; do
    tk=$TOKENS
    [ $H = 16 ] && tk=${H16_TOKENS:-$TOKENS}
    timeout 240 $BENCH --heads $H --tokens "$tk" --pdl off,on --iters ${ITERS:-50} >"$L/bench_h$H.txt" 2>&1
    say "bench heads $H rc=$? ($(el))"
  done
  if [ -n "${BASE:-}" ]; then
    timeout 200 build-i20-base/bench/indexer_q_cuda_bench --heads 64 --tokens "${BASE_TOKENS:-$TOKENS}" --pdl off,on --iters ${ITERS:-50} \
      --recipes ${BASE_RECIPES:-v4_fp8,v32_fp8,v4_fp4,vllm_v4_fp8,vllm_v4_mxfp4,vllm_v32_fp8_neox,vllm_v4_fp8_cutedsl} \
      >"$L/bench_base_h64.txt" 2>&1
    say "bench base heads 64 rc=$? ($(el))"
  fi
fi

if has sweep; then
  timeout 240 $BENCH --heads 64 --tokens "${SWEEP_TOKENS:-1,64,16384}" --pdl on --iters 30 --shapes \
    --recipes "${SWEEP_RECIPES:-v4_fp8,v32_fp8,v4_fp4,vllm_v4_fp8,vllm_v4_mxfp4}" >"$L/sweep_h64.txt" 2>&1
  say "sweep rc=$? ($(el))"
fi

if has ncu; then
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  for r in ${NCU_RECIPES:-v4_fp8 v4_fp4}; do
    for side in new base; do
      bin=$BENCH
      [ $side = base ] && { [ -n "${BASE:-}" ] || continue; bin=build-i20-base/bench/indexer_q_cuda_bench; }
      timeout 120 "$NCU" --clock-control none -k regex:rowgroup_kernel -c 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section ComputeWorkloadAnalysis \
        --metrics smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        $bin --heads 64 --tokens 16384 --recipes $r --pdl off --iters 1 >"$L/ncu_${r}_$side.txt" 2>&1
      say "ncu $r $side rc=$? ($(el))"
    done
  done
fi

# short table: auto rows of the benchmarks
for f in "$L"/bench_h64.txt "$L"/bench_h16.txt "$L"/bench_base_h64.txt; do
  [ -f "$f" ] || continue
  say "-- $(basename "$f")"
  grep -E "^ *[0-9]+ +[0-9]+ " "$f" | awk '($1 == 16384 && $6 == "on" && $4 == "auto") || ($1 < 16384 && ($3 == "v4_fp8" || $3 == "vllm_v4_fp8") && $6 == "on") { printf "%s %s %s %s %s %s %s\n", $1,$2,$3,$4,$6,$9,$16 }' >>"$SUM"
done
for f in "$L"/ncu_*; do
  [ -f "$f" ] || continue
  say "-- $(basename "$f"): $(grep -E 'smsp__inst_executed.sum|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Memory Throughput|DRAM Throughput|No Eligible|Issued Warp Per Scheduler' "$f" | awk '{$1=$1; print}' | tr '\n' ';')"
done
say "total $(el)"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
cat "$SUM" | tail -80
