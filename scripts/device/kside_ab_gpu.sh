#!/usr/bin/env bash
# The key side's store kernel on a CUDA machine (issue 20; the team's H200 through the device tool),
# one call: build (library, C++ tests, CUDA bench; this GPU only, no torch), the SASS order test
# (kside_sass_order), the CUDA key-side tests (every shape and duplicate method byte-checked against
# the reference, the PDL producer tests of both sides), then timings of what the library has:
#   - bench_pdl_{1,2}.txt (the same run twice, for the noise): the automatic shape with PDL off and
#     on, beside the SGLang-design baseline and a copy, 1 to 65536 tokens;
#   - bench_dup.txt: the two duplicate-slot methods forced (--dup scan,claim) from 64 to 8192
#     tokens, across the automatic threshold (detail::kKsideScanMaxTokens).
# Its first run (2026-12-02 07:00 UTC) was the A/B of the store kernel's variants, recorded in
# bench/cuda_results/2026-12-02-h200-kside-ab/: the variants that lost there (the old kernel with the
# scan in every store kernel, read-only loads, launching dependents at the first instruction, the
# block-wide scan) and their bench options are gone (bench/HISTORY.md).
#
#   BUILD_DIR=dir (default build-ab)   GTEST_SRC=dir (default .dev/googletest: a copy of
#   /usr/src/googletest carried along, as for all_gpu.sh, where the machine has no GoogleTest)
#   STEPS=build,sass,tests,bench (default all)   ITERS=n (bench replays, default 100)
# Results under $OUT (default ./kside_ab_out): summary.txt, *.log, bench_*.txt.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/kside_ab_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
B=${BUILD_DIR:-build-ab}
STEPS=${STEPS:-build,sass,tests,bench}
ITERS=${ITERS:-100}
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); steps $STEPS"


if has build; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DINDEXER_Q_BUILD_TORCH=OFF -DINDEXER_Q_GTEST_SOURCE_DIR="${GTEST_SRC:-$PWD/.dev/googletest}" >"$OUT/build.log" 2>&1 &&
    cmake --build "$B" -j"$(nproc)" --target indexer_q indexer_q_tests indexer_q_cuda_bench >>"$OUT/build.log" 2>&1
  rc=$?
  say "build rc=$rc ($(el))"
  if [ $rc -ne 0 ]; then grep -E "error|Error" "$OUT/build.log" | head -30 | tee -a "$SUM"; exit 1; fi
fi

if has sass; then
  ctest --test-dir "$B" -R '^kside_sass_order$' --output-on-failure >"$OUT/sass_order.log" 2>&1
  say "kside_sass_order rc=$?: $(grep -E 'key-side kernels checked|PASS|FAIL|SKIPPED' "$OUT/sass_order.log" | head -3 | tr '\n' ' ')"
fi

if has tests; then
  F='CudaKside.*:Cuda.Pdl*:Cuda.DefaultOptionsUsePdl*'
  timeout 300 "$B/tests/indexer_q_tests" --gtest_filter="$F" >"$OUT/gtest_kside.log" 2>&1
  say "gtest $F rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/gtest_kside.log" | tr '\n' ' ') ($(el))"
  grep -E '^\[  FAILED  \]' "$OUT/gtest_kside.log" | head -20 | tee -a "$SUM"
fi

if has bench; then
  KB="$B/bench/indexer_q_cuda_bench --op kside --dtype fp32 --iters $ITERS"
  for r in 1 2; do
    # shellcheck disable=SC2086
    timeout 200 $KB --pdl off,on --tokens 1,8,64,4096,16384,65536 >"$OUT/bench_pdl_$r.txt" 2>&1
    say "bench pdl off,on run $r rc=$? ($(el))"
  done
  # shellcheck disable=SC2086
  timeout 150 $KB --pdl on --tokens 64,256,512,1024,2048,4096,8192 --dup scan,claim >"$OUT/bench_dup.txt" 2>&1
  say "bench dup rc=$? ($(el))"
  say "bytes: $(cat "$OUT"/bench_*.txt | grep -c '^csv,.*,NO$') rows differ (want 0); $(grep -h 'all bytes equal' "$OUT"/bench_*.txt | sort | uniq -c | tr '\n' ' ')"
  # PDL on, from the csv lines: tokens recipe impl us ratio_to_copy ratio_to_baseline
  for f in "$OUT"/bench_pdl_1.txt "$OUT"/bench_pdl_2.txt "$OUT"/bench_dup.txt; do
    say "-- $(basename "$f") (pdl on): tokens recipe impl us of-copy of-baseline"
    awk -F, '$1=="csv" && $6==1 {printf "%6s %-9s %-28s %8s %6s %6s\n", $2, $4, $5, $8, $12, $13}' "$f" | tee -a "$SUM"
  done
fi
say "total $(el)"
