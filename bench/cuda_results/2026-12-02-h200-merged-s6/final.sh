#!/usr/bin/env bash
# final device call of the session: merged main; correctness (ctest CUDA/golden, verify, GPU pytest,
# compute-sanitizer) then benches (query all recipes, key side) and the host CPU A/B
set -u
O=$OUT; L=$O/l; mkdir -p $L
export PATH=/usr/local/cuda/bin:$PATH
el() { echo "$SECONDS s"; }
# host CPU A/B builds + rounds, low priority, pinned away from the GPU jobs
(sleep 200; CORE=15 JOBS=2 ROUNDS=2 nice -n 5 bash bench/cpu_results/2026-12-02-cpu-perf-3/host_ab.sh .dev/base $L/cpuab > $L/cpuab.log 2>&1; echo "cpu ab rc=$?" >> $L/cpuab.log) &
CP=$!
OUT=$O/a STEPS=build bash scripts/device/all_gpu.sh >/dev/null 2>&1; cat $O/a/summary.txt; echo "built $(el)"
B=build-gpu; SO=$(ls $B/bindings/torch/_indexer_q_ops*.so | head -1)
(OUT=$L/san BUILD_DIR=$B TOOL_TIMEOUT=190 MEMCHECK_TIMEOUT=210 timeout 230 taskset -c 8-13 bash scripts/device/gpu_sanitize.sh > $L/san.log 2>&1; echo "sanitize rc=$?" >> $L/san.log) &
SP=$!
timeout 110 taskset -c 0-7 ctest --test-dir $B -R 'Cuda|Golden|kside_sass|bench_cuda' -j6 --timeout 120 > $L/ctest.log 2>&1; echo "ctest rc=$? $(grep -E 'tests passed|tests failed' $L/ctest.log | tail -1) $(el)"
grep -E "\((Failed|Timeout)\)" $L/ctest.log | head -10
timeout 80 taskset -c 0-7 $B/tools/indexer-q verify tests/data/golden > $L/verify.log 2>&1; echo "verify rc=$? $(tail -1 $L/verify.log) $(el)"
INDEXER_Q_TORCH_LIBRARY=$SO PYTHONPATH=python timeout 100 taskset -c 0-7 python3 -m pytest tests/python/test_cuda.py tests/python/test_glue.py tests/python/test_integrations_vllm.py tests/python/test_api.py -q -n 8 -p no:cacheprovider > $L/pytest.log 2>&1; echo "pytest rc=$? $(tail -1 $L/pytest.log) $(el)"
grep -E "^FAILED" $L/pytest.log | head -10
wait $SP; cat $L/san/summary.txt 2>/dev/null | head -12; tail -1 $L/san.log; echo "sanitize done $(el)"
timeout 70 $B/bench/indexer_q_cuda_bench --recipes all --tokens 1,8,64,16384,65536 --heads 64 --pdl on --iters 20 > $L/cuda_bench.txt 2>&1; echo "cuda bench rc=$? $(el)"
timeout 25 $B/bench/indexer_q_cuda_bench --op kside --dtype fp32 --pdl on --tokens 1,8,64,4096,16384,65536 --iters 50 > $L/kside_bench.txt 2>&1; echo "kside bench rc=$? $(el)"
grep -c ",NO$" $L/cuda_bench.txt $L/kside_bench.txt
wait $CP; tail -4 $L/cpuab.log; cat $L/cpuab/summary.csv 2>/dev/null | head -50
echo "done $(el)"
