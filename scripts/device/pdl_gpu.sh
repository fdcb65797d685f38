#!/usr/bin/env bash
# Issue 14 (decode sizes, PDL) on a CUDA machine: builds nothing; runs binaries already built in
# BUILD_DIR (default build-pdl; configure with -DINDEXER_Q_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a,
# targets indexer_q_tests indexer_q_cuda_bench indexer-q). Logs under $OUT, summary last:
#   cuda_tests.log   indexer_q_tests --gtest_filter='Cuda.*' (the PDL producer/consumer graph tests
#                    included)
#   cuda_bench.txt   indexer_q_cuda_bench, v4_fp8 and the SGLang-design baseline, PDL off and on,
#                    64 and 16 heads, 1 .. 65536 tokens (every timed output compared byte for byte)
#   recipes_decode.txt  every recipe at 1, 8, 64, 256 tokens x 64 heads, PDL off and on
#   cli_bench.csv    indexer-q bench --backend cuda, v4_fp8, PDL on and off
# SHAPES=1 adds the launch-shape sweep (lanes, block, trigger placement) to cuda_bench.txt;
# NCU=1 profiles the 1-token kernels (ours and the baseline, PDL off) with Nsight Compute;
# REF_BENCH=path alternates an older indexer_q_cuda_bench with this one at 256-65536 tokens (ab.txt);
# SKIP_TESTS=1 skips the gtest run (GTEST_FILTER overrides its filter); SKIP_RECIPES=1 and
# SKIP_CLI=1 skip those steps; CLI_TOKENS overrides the CLI's token list.
set -u -o pipefail
OUT=${OUT:-$PWD/pdl_gpu_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
B=${BUILD_DIR:-build-pdl}
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
t0=$(date +%s)
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1); $(git rev-parse --short HEAD 2>/dev/null)"

if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 240 "$B/tests/indexer_q_tests" --gtest_filter="${GTEST_FILTER:-Cuda.*}" >"$OUT/cuda_tests.log" 2>&1
  say "Cuda.* rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/cuda_tests.log" | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
  grep -E '^\[  FAILED  \]|Pdl.*\(' "$OUT/cuda_tests.log" | head -20 | tee -a "$SUM"
fi

SH=""
[ -n "${SHAPES:-}" ] && SH="--shapes"
timeout 240 "$B/bench/indexer_q_cuda_bench" --recipes v4_fp8 --heads 64,16 \
  --tokens 1,8,64,256,1024,4096,16384,65536 --iters 100 --pdl off,on $SH >"$OUT/cuda_bench.txt" 2>&1
say "cuda_bench (v4_fp8 + baseline, PDL off/on) rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "auto|baseline-warp|baseline-loads" "$OUT/cuda_bench.txt" | grep -v "^csv" | grep -v again | tee -a "$SUM"
grep -E "all bytes equal" "$OUT/cuda_bench.txt" | tee -a "$SUM"

if [ -z "${SKIP_RECIPES:-}" ]; then
  timeout 120 "$B/bench/indexer_q_cuda_bench" --heads 64 --tokens 1,8,64,256 --iters 100 --pdl off,on \
    >"$OUT/recipes_decode.txt" 2>&1
  say "cuda_bench (every recipe, decode sizes) rc=$? ($(( $(date +%s) - t0 )) s)"
fi

if [ -z "${SKIP_CLI:-}" ]; then
  timeout 120 "$B/tools/indexer-q" bench --backend cuda --recipe v4_fp8 --tokens ${CLI_TOKENS:-1,8,64,256,1024,4096} \
    --heads 64,16 --iters 300 --pdl on,off --format csv >"$OUT/cli_bench.csv" 2>&1
  say "indexer-q bench --backend cuda rc=$? ($(( $(date +%s) - t0 )) s)"
  cut -d, -f3,4,7,9,13,14 "$OUT/cli_bench.csv" | tee -a "$SUM" >/dev/null
fi

# REF_BENCH=path: an indexer_q_cuda_bench built from the code before this change (PDL off, no
# --pdl switch): alternated with this one at the large sizes (A/B in the same run).
if [ -n "${REF_BENCH:-}" ]; then
  : >"$OUT/ab.txt"
  for i in 1 2; do
    for who in ref new; do
      if [ $who = ref ]; then cmd="$REF_BENCH"; else cmd="$B/bench/indexer_q_cuda_bench --pdl off,on"; fi
      echo "== $who round $i" >>"$OUT/ab.txt"
      timeout 90 $cmd --recipes v4_fp8 --heads 64 --tokens 256,1024,4096,16384,65536 --iters 100 2>&1 \
        | grep -E "^ +[0-9]+ +64 v4_fp8 +auto" >>"$OUT/ab.txt"
    done
  done
  say "A/B against REF_BENCH ($(( $(date +%s) - t0 )) s)"
  cat "$OUT/ab.txt" >>"$SUM"
fi

if [ -n "${NCU:-}" ]; then
  NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  : >"$OUT/ncu.txt"
  for k in rowgroup_kernel baseline_warp_kernel; do
    timeout 90 "$NCUB" --clock-control none -k regex:$k -c 1 --section SpeedOfLight --section LaunchStats \
      --section WarpStateStats --section InstructionStats --section SchedulerStats \
      "$B/bench/indexer_q_cuda_bench" --recipes v4_fp8 --tokens 1 --heads 64 --iters 1 --pdl off >>"$OUT/ncu.txt" 2>&1
    say "ncu $k rc=$?"
  done
  grep -E '^  [a-z_]+.*\(|Duration|Elapsed Cycles|Registers Per|Executed Instructions |Warp Cycles Per Issued|Stall|Issued Warp|Grid Size|Block Size' \
    "$OUT/ncu.txt" | head -60 >>"$SUM"
fi
say "total $(( $(date +%s) - t0 )) s"
