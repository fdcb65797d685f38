#!/usr/bin/env bash
# The whole check on a CUDA machine in one call (the team's H200 through the device tool), built
# there for that GPU only: the C++ suite (GPU tests included), every golden file through the CLI
# on every backend and CPU ISA (query and key side), the PyTorch operator built with CUDA and its
# pytest suite (Triton kernel included, compiled for the GPU), compute-sanitizer, and the
# benchmarks (CUDA per recipe with PDL on/off, the SGLang-design baselines, the key side, the
# Triton kernel beside the native one, the host CPU per ISA).
#
#   STEPS=build,ctest,verify,pytest,triton,sanitize,pdl,bench (default: all of them, in that order)
#   BENCH_TOKENS=list (default 1,8,64,256,1024,4096,16384,65536)   CPU_ISAS_CSV=avx512,avx2 (the CPU benches)
#   PYTEST_ARGS="tests/python/test_triton.py ..."  (default: every tests/python/test_*.py, one run per file)
#   PYTEST_FILE_TIMEOUT=s (default 300)
#   BUILD_DIR=dir (default build-gpu)   CUDA_ARCHS=list (default 90-real: this GPU)
#   BUILD_TORCH=OFF (no torch operator: without the pytest step)   BUILD_TARGETS="t1 t2" (default all)
#   CTEST_ARGS="-R Cuda" (a subset; each test has a 120 s limit)   CUDA_BENCH_ARGS="--pdl on ..."
#   GTEST_SRC=dir (default .dev/googletest: a copy of /usr/src/googletest carried along)
# Everything is logged under $OUT/logs and packed into $OUT/logs.tgz at the end (the device tool
# returns at most 8 files); $OUT/summary.txt holds one line per step.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/all_gpu_out}
L=$OUT/logs
mkdir -p "$L"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1
J=$(nproc)
B=${BUILD_DIR:-build-gpu}
STEPS=${STEPS:-build,ctest,verify,pytest,triton,sanitize,pdl,bench}
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
finish() {
  say "total $(el)"
  tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
  exit "${1:-0}"
}
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(git rev-parse --short HEAD 2>/dev/null); steps $STEPS"
TORCH_LIB() { ls "$B"/bindings/torch/_indexer_q_ops*.so 2>/dev/null | head -1; }

if has build; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90-real}" -DINDEXER_Q_BUILD_TORCH="${BUILD_TORCH:-ON}" \
    -DPython_EXECUTABLE="$(command -v python3)" \
    -DINDEXER_Q_GTEST_SOURCE_DIR="${GTEST_SRC:-$PWD/.dev/googletest}" >"$L/build.log" 2>&1 &&
    cmake --build "$B" -j"$J" ${BUILD_TARGETS:+--target $BUILD_TARGETS} >>"$L/build.log" 2>&1
  rc=$?
  say "build rc=$rc ($(el))"
  if [ $rc -ne 0 ]; then grep -E "error|Error" "$L/build.log" | head -30 | tee -a "$SUM"; finish 1; fi
fi

if has ctest; then
  # shellcheck disable=SC2086
  timeout ${CTEST_TIMEOUT:-300} ctest --test-dir "$B" -j8 --timeout 120 --output-on-failure ${CTEST_ARGS:-} >"$L/ctest.log" 2>&1
  say "ctest rc=$?: $(grep -E 'tests passed|tests failed' "$L/ctest.log" | tail -1) ($(el))"
  grep -E "^\s+[0-9]+ - .*\((Failed|Skipped|Timeout|Not Run)\)" "$L/ctest.log" | head -20 | tee -a "$SUM"
  "$B/tests/indexer_q_tests" --gtest_filter='Cuda*' --gtest_brief=1 >"$L/gtest_cuda.log" 2>&1
  say "gtest Cuda* rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$L/gtest_cuda.log" | tr '\n' ' ')"
fi

if has verify; then
  timeout 200 "$B/tools/indexer-q" verify tests/data/golden >"$L/verify.log" 2>&1
  say "verify tests/data/golden (every recipe, backend, ISA; key side included) rc=$?: $(tail -1 "$L/verify.log")"
fi

if has pytest; then
  # One pytest per file, each under its own time limit (PYTEST_FILE_TIMEOUT, default 300 s), so a
  # slow file cannot take the others' time. The torch.compile tests are the slow ones: every xdist
  # worker's Inductor would start one compile process per core, so each gets one thread.
  XDIST=""
  python3 -c "import xdist" 2>/dev/null && XDIST="-n 8"
  export TORCHINDUCTOR_COMPILE_THREADS=1
  for f in ${PYTEST_ARGS:-tests/python/test_*.py}; do
    n=$(basename "$f" .py)
    # shellcheck disable=SC2086
    INDEXER_Q_TORCH_LIBRARY=$(TORCH_LIB) PYTHONPATH=python timeout "${PYTEST_FILE_TIMEOUT:-300}" python3 -m pytest \
      "$f" -q -rs -p no:cacheprovider --durations=5 $XDIST >"$L/pytest_$n.log" 2>&1
    rc=$?
    say "pytest $n rc=$rc$([ $rc -eq 124 ] && echo ' (timed out)'): $(grep -E ' (passed|failed|skipped|error)' "$L/pytest_$n.log" | tail -1) ($(el))"
    grep -E "^FAILED|^ERROR" "$L/pytest_$n.log" | head -20 | tee -a "$SUM"
  done
fi

if has triton; then
  if ! has pytest; then  # the Triton tests alone, compiled for this GPU
    INDEXER_Q_TORCH_LIBRARY=$(TORCH_LIB) PYTHONPATH=python timeout 200 python3 -m pytest \
      tests/python/test_triton.py -q -rs -p no:cacheprovider >"$L/pytest_triton.log" 2>&1
    say "pytest tests/python/test_triton.py rc=$?: $(tail -1 "$L/pytest_triton.log") ($(el))"
  fi
  INDEXER_Q_TORCH_LIBRARY=$(TORCH_LIB) PYTHONPATH=python timeout 240 python3 bench/triton_bench.py \
    ${TRITON_BENCH_ARGS:-} >"$L/triton_bench.txt" 2>&1
  say "triton bench rc=$? ($(el))"
  grep -E "^csv" "$L/triton_bench.txt" | head -60 >>"$SUM"
fi

if has sanitize; then
  OUT="$L/sanitize" BUILD_DIR="$B" TOOL_TIMEOUT=${TOOL_TIMEOUT:-240} timeout 300 bash scripts/device/gpu_sanitize.sh >"$L/sanitize.log" 2>&1
  say "gpu_sanitize rc=$? ($(el))"
  cat "$L/sanitize/summary.txt" >>"$SUM" 2>/dev/null
fi

TOKENS=${BENCH_TOKENS:-1,8,64,256,1024,4096,16384,65536}
if has pdl; then
  OUT="$L/pdl" BUILD_DIR="$B" SKIP_TESTS=1 timeout 200 bash scripts/device/pdl_gpu.sh >"$L/pdl.log" 2>&1
  say "pdl_gpu (v4_fp8 + SGLang-design baseline, PDL on/off; every recipe at decode sizes) rc=$? ($(el))"
fi
if has bench; then
  # shellcheck disable=SC2086
  timeout 240 "$B/bench/indexer_q_cuda_bench" --tokens "$TOKENS" --heads 64 ${CUDA_BENCH_ARGS:-} \
    >"$L/cuda_bench_recipes.txt" 2>&1
  say "cuda bench, every recipe (and the SGLang-design baseline, PDL on/off) rc=$? ($(el))"
  timeout 150 "$B/bench/indexer_q_cuda_bench" --op kside --dtype fp32 --pdl off,on \
    --tokens "$TOKENS" >"$L/kside_bench_fp32.txt" 2>&1
  say "kside bench fp32 rc=$?"
  grep -E '^csv,.*,(baseline-warp-per-token|ours-auto)' "$L/kside_bench_fp32.txt" >>"$SUM"
  # the host CPU (issue 20's targets): every query recipe at 4096 x 64, one thread per ISA, and
  # 16 threads, each beside a same-run copy (bench/cpu_bench.cpp); the key side per token, same run
  timeout 200 "$B/bench/indexer_q_cpu_bench" --isa ${CPU_ISAS_CSV:-avx512,avx2} --threads 1 \
    --tokens 4096 --heads 64 --recipe all --iters ${CPU_ITERS:-10} --format csv >"$L/cpu_bench_1t.csv" 2>&1
  say "cpu bench every recipe, 1 thread, 4096 x 64 rc=$?"
  timeout 100 "$B/bench/indexer_q_cpu_bench" --isa avx512 --threads $(nproc) \
    --tokens 16384 --heads 64 --recipe all --iters ${CPU_ITERS:-10} --format csv >"$L/cpu_bench_nt.csv" 2>&1
  say "cpu bench every recipe, $(nproc) threads, 16384 x 64 rc=$?"
  # the key side in the query side's harness (inputs rotated over 64 MiB, as the query's: the
  # like-for-like key / query ratio), and as earlier runs measured it (indexer-q bench, 16 MiB)
  timeout 100 taskset -c 2 "$B/bench/indexer_q_cpu_bench" --op kside --isa ${CPU_ISAS_CSV:-avx512,avx2} --threads 1 \
    --tokens 4096 --recipe all --iters ${CPU_ITERS:-10} --format csv >"$L/kside_cpu_bench_1t.csv" 2>&1
  say "cpu bench key side, 1 thread, 4096 tokens fp32 rc=$?"
  for isa in $(echo "${CPU_ISAS_CSV:-avx512,avx2}" | tr , ' '); do
    timeout 100 taskset -c 2 "$B/tools/indexer-q" bench --backend cpu --isa $isa --threads 1 \
      --recipe v4_k_fp8,v4_k_fp4 --tokens 4096 --format csv >>"$L/kside_cpu_1t.csv" 2>&1
  done
  say "indexer-q bench key side 1 thread rc=$?"
  cat "$L/cpu_bench_1t.csv" "$L/cpu_bench_nt.csv" "$L/kside_cpu_bench_1t.csv" "$L/kside_cpu_1t.csv" >>"$SUM"
  # what the Python entry points add to the op per call (CPU, 1 token)
  INDEXER_Q_TORCH_LIBRARY=$(TORCH_LIB) PYTHONPATH=python timeout 120 taskset -c 3 python3 \
    bench/python_overhead.py --calls ${PY_CALLS:-5000} >"$L/python_overhead.txt" 2>&1
  say "python overhead rc=$?"
  cat "$L/python_overhead.txt" >>"$SUM"
fi
finish 0
