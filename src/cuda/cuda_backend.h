// Internal entry of the CUDA backend with the launch shape exposed, for tests (every shape the
// launcher can choose, against the reference) and for bench/cuda_bench.cu. Not public API.
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace indexer_q {
namespace detail {

// Where a kernel launched with PDL (programmatic dependent launch) executes
// griddepcontrol.launch_dependents, i.e. from when the next kernel of the stream may be launched
// (its own griddepcontrol.wait still waits for this whole grid to finish and flush):
enum : int {
  kTriggerAuto = -1,       // the launcher's choice (choose_variant)
  kTriggerAtStart = 0,     // first instruction, before griddepcontrol.wait
  kTriggerAfterLoads = 1,  // once every input load of the thread has been issued
  kTriggerAtExit = 2,      // no explicit trigger: the grid's exit
};

// The launch shape of the row-group kernel.
struct Variant {
  int lanes = -1;  // threads per row: 4 | 8 | 16; 0 = the one-thread-per-row fallback; -1 = automatic
  int block = 0;   // threads per block (multiple of 32, <= 256); 0 = 256
  int trigger = kTriggerAuto;  // kTrigger*: used when the launch has PDL on
};

// The shape cuda_run uses for `rows` rows (the same for every recipe).
Variant choose_variant(std::int64_t rows);

// cuda_run with a fixed shape. Misaligned pointers take the fallback whatever v says.
Status cuda_run_variant(const Problem& p, void* stream, bool enable_pdl, Variant v);

}  // namespace detail
}  // namespace indexer_q
