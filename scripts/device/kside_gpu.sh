#!/usr/bin/env bash
# GPU check of the key side (issue 13; docs/KSIDE-SPEC.md) on a CUDA machine, e.g. the team's H200:
#   1. builds (unless SKIP_BUILD=1) the test binary, the key-side benchmark and the CLI with CUDA
#      in BUILD_DIR (default build-kside-gpu), sm_90a by default (CUDA_ARCHS=... to change);
#   2. runs the key-side CUDA tests (CudaKside.*: golden files every byte through every launch
#      shape and the public API, random cases vs the reference, out-of-range tokens, misaligned
#      pointers, graph + PDL, the device's rsqrtf against the host's MUFU.RSQ model) and the
#      other key-side tests of the suite (*Kside*);
#   3. bench/cuda_kside_bench.cu: our kernel (automatic shape, and every fixed shape) vs the
#      one-warp-per-token baseline vs a same-run device copy, PDL off and on (fp32; bf16 last);
#   4. compute-sanitizer memcheck on the out-of-range, misaligned and golden CUDA tests;
#   5. `indexer-q verify tests/data/golden/kside` (every backend the CLI has);
#   6. the torch operator built with CUDA and tests/python/test_kside.py (SKIP_TORCH=1 skips).
# Logs under $OUT (default ./kside_gpu_out); a summary is printed last.
# GoogleTest: an installed one, or a source tree in GTEST_SRC (default .dev/googletest).
# Lead's call through the device tool (builds on the device, about 3-5 minutes in all):
#   run(command="OUT=$OUT bash scripts/device/kside_gpu.sh", carry=[".dev/googletest"], timeout_s=600)
set -u -o pipefail
OUT=${OUT:-$PWD/kside_gpu_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
J=$(nproc)
B=${BUILD_DIR:-build-kside-gpu}
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
t0=$(date +%s)
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(git rev-parse --short HEAD 2>/dev/null)"

if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" -DINDEXER_Q_BUILD_TORCH=OFF \
    -DINDEXER_Q_GTEST_SOURCE_DIR="${GTEST_SRC:-$PWD/.dev/googletest}" >"$OUT/build.log" 2>&1 &&
    cmake --build "$B" -j"$J" --target indexer_q_tests indexer_q_cuda_kside_bench indexer-q >>"$OUT/build.log" 2>&1
  rc=$?
  say "build rc=$rc ($(( $(date +%s) - t0 )) s)"
  [ $rc -ne 0 ] && { grep -E "error|Error" "$OUT/build.log" | head -30 | tee -a "$SUM"; exit 1; }
fi

timeout 150 "$B/tests/indexer_q_tests" --gtest_filter='CudaKside.*' >"$OUT/gtest_cuda_kside.log" 2>&1
say "CudaKside.* rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/gtest_cuda_kside.log" | tr '\n' ' ')"
grep -E '^\[kside cuda|^\[  FAILED ' "$OUT/gtest_cuda_kside.log" | tee -a "$SUM"

if [ -z "${SKIP_BENCH:-}" ]; then
  timeout 150 "$B/bench/indexer_q_cuda_kside_bench" --dtype fp32 --shapes --pdl both \
    --tokens 1,8,64,512,1024,4096,16384,65536 >"$OUT/kside_bench_fp32.txt" 2>&1
  say "kside bench fp32 (shapes, PDL off/on) rc=$?: $(tail -1 "$OUT/kside_bench_fp32.txt")"
  # automatic shape and baseline, per size: ratio to copy and to the baseline
  grep -E '^csv,.*,(baseline-warp-per-token|ours-auto)' "$OUT/kside_bench_fp32.txt" | \
    awk -F, '{printf "  %6s %-9s %-26s pdl=%s %9s us  x%s copy  x%s baseline %s\n", $2, $4, $5, $6, $8, $12, $13, $14}' | tee -a "$SUM"
fi
if command -v compute-sanitizer >/dev/null 2>&1; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/indexer_q_tests" \
    --gtest_filter='CudaKside.OutOfRange*:CudaKside.Misaligned*:CudaKside.Golden*' >"$OUT/memcheck.log" 2>&1
  say "compute-sanitizer memcheck (out-of-range, misaligned, golden) rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
else
  say "compute-sanitizer: not found, memcheck skipped"
fi

if [ -x "$B/tools/indexer-q" ]; then
  timeout 120 "$B/tools/indexer-q" verify tests/data/golden/kside >"$OUT/verify_kside.log" 2>&1
  say "indexer-q verify tests/data/golden/kside rc=$?: $(tail -1 "$OUT/verify_kside.log")"
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  timeout 100 "$B/bench/indexer_q_cuda_kside_bench" --dtype bf16 --pdl both \
    --tokens 1,64,4096,65536 >"$OUT/kside_bench_bf16.txt" 2>&1
  say "kside bench bf16 rc=$?: $(tail -1 "$OUT/kside_bench_bf16.txt")"
fi
timeout 120 "$B/tests/indexer_q_tests" --gtest_filter='*Kside*:*KSide*:-CudaKside.*' >"$OUT/gtest_kside_other.log" 2>&1
say "other key-side tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/gtest_kside_other.log" | tr '\n' ' ')"

# 6. (SKIP_TORCH=1 skips) the torch operator with CUDA, built into the same build dir, and
#    tests/python/test_kside.py against it (native CUDA, composed on CUDA, golden files, errors).
if [ -z "${SKIP_TORCH:-}" ] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  { cmake -S . -B "$B" -DINDEXER_Q_BUILD_TORCH=ON -DPython_EXECUTABLE="$(command -v python3)" &&
    cmake --build "$B" -j"$J" --target indexer_q_torch_ops; } >"$OUT/build_torch.log" 2>&1
  say "torch operator build rc=$?"
  INDEXER_Q_TORCH_LIBRARY=$(ls "$B"/bindings/torch/_indexer_q_ops*.so | head -1) PYTHONPATH=python \
    timeout 200 python3 -m pytest tests/python/test_kside.py -q -p no:cacheprovider >"$OUT/pytest_kside.log" 2>&1
  say "pytest tests/python/test_kside.py rc=$?: $(tail -1 "$OUT/pytest_kside.log")"
fi
say "total $(( $(date +%s) - t0 )) s"
echo; cat "$SUM"
