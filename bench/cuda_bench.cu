// indexer_q_cuda_bench: the CUDA benchmark of every op and recipe, one harness
// (bench/cuda_harness.cuh: inputs per size, the same-run device copy, the byte check against the
// op's one-thread-per-row spec kernel, CUDA-graph timing with PDL off and on, csv and table) over
// one description per op:
//   --op query (default)  bench/cuda_op_query.cuh: every query recipe, the SGLang-design
//                         one-warp-per-row baseline (bench/cuda_baseline.cuh), --shapes
//   --op kside            bench/cuda_op_kside.cuh: both key recipes, the SGLang-design
//                         one-warp-per-token baseline, --shapes, --dup
// Standalone: the library, its src/ internals and these headers; nothing from tools/.
// A next op is one more header and one line in the list below.
//
//   indexer_q_cuda_bench [--op query|kside] [--tokens LIST] [--heads LIST (query)] [--dtype bf16|fp16|fp32]
//                        [--recipes LIST] [--iters N] [--pdl off,on] [--shapes] [--dup scan,claim (kside)]
// (--help lists each op's defaults.)
#include <memory>
#include <vector>

#include "cuda_harness.cuh"
#include "cuda_op_kside.cuh"
#include "cuda_op_query.cuh"

int main(int argc, char** argv) {
  std::vector<std::unique_ptr<indexer_q::bench::CudaOp>> ops;
  ops.push_back(indexer_q::bench::make_query_op());  // the first is the default
  ops.push_back(indexer_q::bench::make_kside_op());
  return indexer_q::bench::run_cuda_bench(argc, argv, ops);
}
