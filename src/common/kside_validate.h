// The key side's validator (src/validate_kside.cpp), shared by the public entry points (src/api.cpp).
#pragma once

#include "common/kside_problem.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

// Checks args against docs/KSIDE-SPEC.md's contract; on success fills *out (if not null). Reads no
// data except positions and slots when they live on the host (range check of every token with
// a slot >= 0).
Status validate_kstore(const KStoreArgs& args, const Options& options, KProblem* out);

}  // namespace detail
}  // namespace indexer_q
