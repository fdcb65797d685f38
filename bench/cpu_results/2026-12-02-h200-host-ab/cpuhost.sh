#!/usr/bin/env bash
# H200 host CPU: AVX-512 body before (eb223e2, .dev/cpubase) and after (this tree), same run
set -u
O=$OUT
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=OFF -DINDEXER_Q_BUILD_TORCH=OFF -DINDEXER_Q_BUILD_TESTS=OFF -DINDEXER_Q_BUILD_CLI=OFF"
(cmake -S .dev/cpubase -B /tmp/b-base $cfg >/dev/null 2>&1 && ninja -C /tmp/b-base -j4 indexer_q_cpu_bench >/tmp/bb.log 2>&1; echo "base build rc=$?") > $O/build_base.txt &
cmake -S . -B /tmp/b-new $cfg >/dev/null 2>&1 && ninja -C /tmp/b-new -j4 indexer_q_cpu_bench > /tmp/bn.log 2>&1; echo "new build rc=$?" > $O/build_new.txt
wait; cat $O/build_*.txt; echo "build $SECONDS s"
lscpu | grep -E "Model name|^CPU\(s\)" > $O/host.txt
R=v4_fp8,v32_fp8,rope_first_fp8,v4_fp4,vllm_v4_fp8,vllm_v4_mxfp4,sgl_v41_fp4_rope_pack,sgl_v41_fp4_quant_rne,sgl_v32_unfused_neox_hadamard_ue8m0,vllm_v4_fp8_fnuz224
for round in 1 2; do
  for t in base new; do
    taskset -c 2 /tmp/b-$t/bench/indexer_q_cpu_bench --isa avx512,avx2 --threads 1 --tokens 4096 --heads 64 --recipe $R --iters 8 --format csv 2>&1 | sed "s/^/$t,$round,/" >> $O/cpu_ab.csv
  done
  echo "round $round $SECONDS s"
done
