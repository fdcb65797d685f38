#!/usr/bin/env bash
# The reference run behind docs/PERFORMANCE.md and the README's table and plot: every benchmark
# of the project on one machine in one call, from one build, into one folder that
# `bench/perf_tables.py` turns into the tables (and `bench/plot_bench.py` into the plot).
#
#   OUT=dir BUILD_DIR=build-gpu scripts/device/reference_run.sh
#
# Needs a CUDA build with the torch operator (`STEPS=build scripts/device/all_gpu.sh`). Writes,
# under $OUT: cuda_bench.txt (query side, every recipe, 64 and 16 heads, PDL on, the
# SGLang-design baselines), kside_bench.txt (key side, fp32, PDL on, with its baseline),
# triton.txt (the Triton kernel beside the native one), cpu_1t.csv / cpu_nt.csv /
# kside_cpu_1t.csv (the host CPU: one thread per ISA, all cores on AVX-512, the key side),
# python_overhead.txt (what the Python entry points add to the op, CPU, 1 token), ncu_*.txt
# (Nsight Compute of the large-size kernels, NCU=0 to skip), and summary.txt (one line a step).
#   TOKENS=list (default 1,8,64,4096,16384,65536)   HEADS=list (default 64,16)
#   TRITON_TOKENS=list (default 1,4096,65536)         CPU_ISAS=list (default avx512,avx2)
# The CPU benchmarks run pinned to the last cores while the GPU benchmarks run on the others
# (the all-core CPU run last, alone).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/reference_out}
B=${BUILD_DIR:-build-gpu}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
t0=$SECONDS
el() { echo "$((SECONDS - t0)) s"; }
SO=$(ls "$B"/bindings/torch/_indexer_q_ops*.so 2>/dev/null | head -1)
export INDEXER_Q_TORCH_LIBRARY=$SO PYTHONPATH=python
N=$(nproc)
C1=$((N - 1)); C2=$((N - 2)); G="0-$((N - 3))"
TOKENS=${TOKENS:-1,8,64,4096,16384,65536}
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $(git rev-parse --short HEAD 2>/dev/null); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $N cores"

# host CPU, one thread, and the Python overhead, on the last two cores
(
  timeout 200 taskset -c $C1 "$B/bench/indexer_q_cpu_bench" --isa "${CPU_ISAS:-avx512,avx2}" --threads 1 \
    --tokens 4096 --heads 64 --recipe all --iters 10 --format csv >"$OUT/cpu_1t.csv" 2>&1
  echo "cpu 1 thread rc=$?" >"$OUT/cpu.sum"
  timeout 80 taskset -c $C1 "$B/bench/indexer_q_cpu_bench" --op kside --isa "${CPU_ISAS:-avx512,avx2}" --threads 1 \
    --tokens 4096 --recipe all --iters 10 --format csv >"$OUT/kside_cpu_1t.csv" 2>&1
  echo "cpu key side rc=$?" >>"$OUT/cpu.sum"
) &
CPU=$!
[ -n "$SO" ] && (timeout 200 taskset -c $C2 python3 bench/python_overhead.py --calls ${PY_CALLS:-4000} --rounds 5 \
  >"$OUT/python_overhead.txt" 2>&1; echo "python overhead rc=$?" >"$OUT/py.sum") &
PY=$!

timeout 150 taskset -c "$G" "$B/bench/indexer_q_cuda_bench" --recipes all --tokens "$TOKENS" --heads "${HEADS:-64,16}" \
  --pdl on --iters 20 >"$OUT/cuda_bench.txt" 2>&1
say "cuda query bench rc=$? ($(el)); rows not byte-equal: $(grep '^csv,[0-9]' "$OUT/cuda_bench.txt" | grep -vc ',yes$')"
timeout 60 taskset -c "$G" "$B/bench/indexer_q_cuda_bench" --op kside --recipes all --dtype fp32 --pdl on \
  --tokens "${KSIDE_TOKENS:-1,8,64,256,4096,16384,65536}" --iters 50 >"$OUT/kside_bench.txt" 2>&1
say "cuda key side bench rc=$? ($(el)); rows not byte-equal: $(grep '^csv,[0-9]' "$OUT/kside_bench.txt" | grep -vc ',yes$')"
if [ -n "$SO" ]; then
  timeout 130 taskset -c "$G" python3 bench/triton_bench.py --recipes all --heads 64 \
    --tokens "${TRITON_TOKENS:-1,4096,65536}" >"$OUT/triton.txt" 2>&1
  say "triton bench rc=$? ($(el)); rows not byte-equal: $(grep '^csv,[a-z]' "$OUT/triton.txt" | grep -v '^csv,recipe,' | grep -vc ',yes$')"
fi
if [ "${NCU:-1}" != 0 ] && NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null); then
  S="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats"
  for r in v4_fp8 v4_fp4 vllm_v4_fp8; do
    timeout 40 "$NCUB" --clock-control none $S -k regex:rowgroup -s 3 -c 1 "$B/bench/indexer_q_cuda_bench" \
      --recipes $r --tokens 16384 --heads 64 --pdl on --iters 5 >"$OUT/ncu_${r}_16k.txt" 2>&1
    say "ncu $r rc=$? ($(el))"
  done
  timeout 40 "$NCUB" --clock-control none $S -k regex:kside_kernel -s 3 -c 1 "$B/bench/indexer_q_cuda_bench" --op kside \
    --recipes v4_k_fp8 --dtype fp32 --pdl on --tokens 4096 --iters 5 >"$OUT/ncu_v4_k_fp8_4096.txt" 2>&1
  say "ncu v4_k_fp8 rc=$? ($(el))"
  [ -n "$SO" ] && timeout 60 "$NCUB" --clock-control none $S -k regex:quant_q -s 3 -c 1 python3 bench/triton_bench.py \
    --recipes v4_fp8 --heads 64 --tokens 16384 >"$OUT/ncu_triton_v4_fp8_16k.txt" 2>&1 && say "ncu triton v4_fp8 ($(el))"
fi
wait $CPU $PY
cat "$OUT/cpu.sum" "$OUT/py.sum" 2>/dev/null | tee -a "$SUM"
timeout 100 "$B/bench/indexer_q_cpu_bench" --isa avx512 --threads "$N" --tokens 16384 --heads 64 --recipe all \
  --iters 10 --format csv >"$OUT/cpu_nt.csv" 2>&1
say "cpu $N threads rc=$? ($(el)); rows not exact: $(grep -c ',no,' "$OUT/cpu_1t.csv" "$OUT/cpu_nt.csv" "$OUT/kside_cpu_1t.csv" | tr '\n' ' ')"
say "done ($(el))"
