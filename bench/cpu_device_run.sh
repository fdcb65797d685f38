#!/usr/bin/env bash
# One call on a machine with AVX-512 (the GPU machine's host CPU): processor facts, build
# (CUDA off), the CPU tests for every supported ISA, the golden files, the CPU benchmark and
# the PyTorch baseline. Logs go to $OUT (default ./cpu-device-out).
#   bash bench/cpu_device_run.sh     (GoogleTest source: INDEXER_Q_GTEST_SOURCE_DIR or .dev/googletest)
set -u
OUT=${OUT:-$PWD/cpu-device-out}
mkdir -p "$OUT"
JOBS=${JOBS:-$(nproc)}
GTEST=${INDEXER_Q_GTEST_SOURCE_DIR:-$PWD/.dev/googletest}
B=build-cpu-dev
step() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }

step "processor"
{ grep -m1 'model name' /proc/cpuinfo; echo "nproc $(nproc)";
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512[a-z_0-9]*)$' | tr '\n' ' ')";
  lscpu 2>/dev/null | grep -E 'Model name|Socket|Core|Thread|MHz|L1d|L2|L3|NUMA node\(s\)'; } > "$OUT/cpu.txt" 2>&1
cat "$OUT/cpu.txt"

step "configure + build (-j$JOBS)"
cmake -S . -B $B -G Ninja -DINDEXER_Q_CUDA=OFF -DINDEXER_Q_GTEST_SOURCE_DIR="$GTEST" > "$OUT/configure.log" 2>&1
timeout 150 cmake --build $B -j"$JOBS" --target indexer_q_tests indexer-q indexer_q_cpu_bench -- -k 0 > "$OUT/build.log" 2>&1
echo "build rc $?"; grep -E "error|FAILED" "$OUT/build.log" | head -20

step "CPU tests (every supported ISA) + golden + conformance tests"
timeout 120 $B/tests/indexer_q_tests --gtest_filter='*Cpu*:*Golden*:*Conformance*' > "$OUT/tests.log" 2>&1
echo "tests rc $?"; grep -E "supported CPU ISAs|PASSED|FAILED|tests ran" "$OUT/tests.log" | head -20

step "golden verify (every backend and ISA)"
timeout 60 $B/tools/indexer-q verify tests/data/golden/*.safetensors > "$OUT/verify.log" 2>&1
echo "verify rc $?"; tail -3 "$OUT/verify.log"

step "CLI bench: 4096 tokens x 64 heads bf16, avx512/avx2 x 1/2 threads"
for isa in avx512 avx2; do for t in 1 2; do
  timeout 60 $B/tools/indexer-q bench --backend cpu --isa $isa --threads $t --tokens 4096 --heads 64 \
      --iters 20 --format csv 2>&1 | tail -n +1
done; done | awk 'NR==1 || !/^backend/' | tee "$OUT/cli_bench.csv"

step "cpu_bench: dtypes, thread scaling, small-batch pool crossover"
{
timeout 60 $B/bench/indexer_q_cpu_bench --isa avx2,avx512 --threads 1 --tokens 4096 --dtype fp16 --iters 10
timeout 60 $B/bench/indexer_q_cpu_bench --isa avx2,avx512 --threads 1 --tokens 4096 --dtype fp32 --iters 10
timeout 60 $B/bench/indexer_q_cpu_bench --isa avx512 --threads 1,2,4,8,16 --tokens 4096 --iters 20
timeout 60 $B/bench/indexer_q_cpu_bench --isa avx512 --threads 1,2,4 --tokens 1,2,4,8,16,64 --inline-rows 0 --iters 200
timeout 60 $B/bench/indexer_q_cpu_bench --isa avx512 --threads 1,2,4 --tokens 1,2,4,8,16,64 --iters 200
} > "$OUT/cpu_bench.txt" 2>&1
cat "$OUT/cpu_bench.txt"
if command -v perf >/dev/null; then
  step "perf stat: avx512 and avx2, 1 thread, 4096 x 64 bf16"
  for isa in avx512 avx2; do
    timeout 60 perf stat -e instructions,cycles,task-clock $B/bench/indexer_q_cpu_bench --isa $isa --threads 1 \
        --tokens 4096 --iters 10 > "$OUT/perf_$isa.txt" 2>&1
    tail -15 "$OUT/perf_$isa.txt"
  done
fi

step "PyTorch composed baseline (same sizes, 1 and 2 threads)"
timeout 150 python3 bench/torch_baseline.py --cli $B/tools/indexer-q --tokens 4096 --heads 64 --threads 1,2,16 --iters 1 \
    > "$OUT/torch_baseline.txt" 2>&1
echo "torch rc $?"; cat "$OUT/torch_baseline.txt"
step "done"
