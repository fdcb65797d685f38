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
  kTriggerAuto = -1,       // the launcher's choice (the shape list's)
  kTriggerAtStart = 0,     // first instruction, before griddepcontrol.wait
  kTriggerAfterLoads = 1,  // once every input load of the thread has been issued
};

// The launch shape of the row-group kernel.
struct Variant {
  int lanes = -1;       // threads per row: 16 | 8 | 4 | 2 (as listed); 0 = the one-thread-per-row fallback; -1 = automatic
  int group_rows = 1;   // rows per group of lanes (as listed with `lanes`)
  int block = 0;        // threads per block (multiple of 32, <= 256); 0 = 256
  int trigger = kTriggerAuto;  // kTrigger*: used when the launch has PDL on
};

// The recipes an entry of the shape list is chosen for.
enum ShapeRecipes : int {
  kAnyRecipe = 0,
  kPlainFp8 = 1,  // FP8 recipes without the Hadamard
  kVllmFp4 = 2,   // FP4 recipes of vLLM's quantizer (MXFP4), without the Hadamard
};
// Does entry class `c` cover recipe `r`?
bool shape_covers(int c, RecipeId r);

// One entry of src/cuda/launch_shapes.inc (see there).
struct LaunchShape {
  int lanes, group_rows, block;
  std::int64_t up_to_rows;  // 0: any size; -1: never automatic
  int trigger;
  int recipes;  // ShapeRecipes
};
inline constexpr LaunchShape kLaunchShapes[] = {
#define IQ_CUDA_SHAPE(lanes, group_rows, block, up_to_rows, trigger, recipes) \
  {lanes, group_rows, block, up_to_rows, trigger, recipes},
#include "cuda/launch_shapes.inc"
#undef IQ_CUDA_SHAPE
};
inline constexpr int kNumLaunchShapes = int(sizeof(kLaunchShapes) / sizeof(kLaunchShapes[0]));

// The shape the list chooses for `rows` rows of recipe r, without the environment override.
Variant choose_variant(std::int64_t rows, RecipeId r);

// cuda_run with a fixed shape (fields left automatic are the list's). Misaligned pointers take
// the fallback whatever v says. A (lanes, group_rows) pair the list lacks is InvalidArgument.
// side_inputs_ready: Options::side_inputs_ready (positions, freqs and weight read before
// griddepcontrol.wait).
// The bound on rows a row-group launch covers (a call of more rows is split into launches of
// whole tokens; default 2^30; rows <= 0 restores it): for tests of the split on small calls.
void set_launch_rows_limit_for_testing(std::int64_t rows);

Status cuda_run_variant(const Problem& p, void* stream, bool enable_pdl, Variant v, bool side_inputs_ready = false);

}  // namespace detail
}  // namespace indexer_q
