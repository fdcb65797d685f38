// The scalar reference: SPEC.md / docs/RECIPES.md step by step (src/common/row.h composed
// from the recipe), one row at a time, one thread.
// It is the executable spec that every other backend is compared against.
#include <cstdint>

#include "common/float_env.h"
#include "common/problem.h"
#include "common/row.h"

namespace indexer_q {
namespace detail {
namespace {

std::int64_t load_position(const void* base, DType dt, std::int64_t b) {
  return dt == DType::kInt32 ? std::int64_t(static_cast<const std::int32_t*>(base)[b])
                             : static_cast<const std::int64_t*>(base)[b];
}

template <class R>
void run_recipe(const Problem& p) {
  float x[kHeadDim];
  for (std::int64_t b = 0; b < p.B; ++b) {
    // Without RoPE there are no freqs and no positions; without weights no weight, no weights_out.
    const float* f = R::kRope ? p.freqs + load_position(p.positions, p.pos_dtype, b) * kFreqsDim : nullptr;
    for (std::int64_t h = 0; h < p.H; ++h) {
      const std::int64_t r = b * p.H + h;
      for (int i = 0; i < kHeadDim; ++i) x[i] = load_float(p.q_input, p.dtype, r * kHeadDim + i);
      const float w = R::kWeights ? load_float(p.weight, p.weight_dtype, b * p.weight_stride_b + h) : 0.0f;
      process_row<R>(x, f, w, p.weight_scale, p.head_scale, p.q_out + r * R::kOutBytes,
                     R::kSf ? p.q_sf + 4 * r : nullptr, R::kWeights ? p.weights_out + r : nullptr);
    }
  }
}

}  // namespace

Status reference_run(const Problem& p) {
  const IeeeFloatScope ieee;  // the caller may run with flush-to-zero / denormals-are-zero
  with_recipe(p.recipe, [&](auto r) { run_recipe<decltype(r)>(p); });
  return Status::Ok();
}

}  // namespace detail
}  // namespace indexer_q
