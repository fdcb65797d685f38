// Internal entry of the CUDA backend with the launch shape exposed, for tests and for
// benchmarks that compare kernel variants in one run (tools/device_cuda.cu). Not public API.
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace indexer_q {
namespace detail {

struct Variant {
  int lanes = -1;           // threads per row: 2 (not persistent) | 4 | 8 | 16; 0 = one-thread-per-row fallback; -1 = automatic
  int block = 0;            // threads per block (multiple of 32, <= 256); 0 = 256
  bool persistent = false;  // grid sized to the resident blocks; each row group walks rows, prefetching
  bool tma = false;         // bf16/fp16: tiles of rows streamed to shared memory by cp.async.bulk
                            // (lanes 4 | 8, 256 threads, persistent); fp32 ignores it
};

// The shape cuda_run uses for `rows` rows on a device with `sms` multiprocessors.
Variant choose_variant(std::int64_t rows, int sms);

Status cuda_run_variant(const Problem& p, void* stream, bool enable_pdl, Variant v);

}  // namespace detail
}  // namespace indexer_q
