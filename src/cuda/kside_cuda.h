// Internal entry of the CUDA key-side kernel (src/cuda/kside.cu) with the launch shape exposed,
// for tests/test_cuda_kside.cu (every shape against the reference) and bench/cuda_kside_bench.cu.
// Not public API.
#pragma once

#include <cstdint>

#include "common/kside_problem.h"

namespace indexer_q {
namespace detail {

// The launch shape of the key-side kernel: LANES consecutive threads of a warp store one token.
struct KVariant {
  int lanes = -1;  // 4 | 8 | 16 | 32 threads per token; 0 = one thread per token (scalar kside_row); -1 = automatic
  int block = 0;   // threads per block (multiple of 32, <= 256); 0 = the automatic choice's
};

// The shape kside_cuda_run uses for N tokens (the same for both recipes).
KVariant kside_choose_variant(std::int64_t N);

// kside_cuda_run with a fixed shape. Misaligned pointers take the scalar kernel whatever v says.
Status kside_cuda_run_variant(const KProblem& p, void* stream, bool enable_pdl, KVariant v);

}  // namespace detail
}  // namespace indexer_q
