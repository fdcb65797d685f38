// Internal entry of the CUDA backend with the launch shape exposed, for benchmarks that
// compare kernel variants in one run (tools/device_cuda.cu). Not part of the public API.
#pragma once

#include "common/problem.h"

namespace indexer_q {
namespace detail {

// lanes: threads per row, 4 | 8 | 16; 0 = the one-thread-per-row fallback kernel;
// -1 = automatic (what cuda_run uses). block: threads per block (multiple of 32), 0 = default.
Status cuda_run_variant(const Problem& p, void* stream, bool enable_pdl, int lanes, int block);

}  // namespace detail
}  // namespace indexer_q
