// The one validator (src/validate.cpp), shared by the public entry points (src/api.cpp).
#pragma once

#include "common/problem.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

// Checks args against the contract of args.recipe; on success fills *out (if not null).
// Reads no data except `positions` when it lives on the host (range check).
Status validate_op(const OpArgs& args, const Options& options, Problem* out);

// The OpArgs of a v4_fp8 call in the historical argument order.
inline OpArgs v4_fp8_args(const TensorView& q_input, const TensorView& q_fp8, const TensorView& weight,
                          const TensorView& weights_out, float weight_scale, const TensorView& freqs,
                          const TensorView& positions) {
  OpArgs a;
  a.recipe = RecipeId::kV4Fp8;
  a.q_input = q_input;
  a.q_out = q_fp8;
  a.weight = weight;
  a.weights_out = weights_out;
  a.weight_scale = weight_scale;
  a.freqs = freqs;
  a.positions = positions;
  return a;
}

}  // namespace detail
}  // namespace indexer_q
