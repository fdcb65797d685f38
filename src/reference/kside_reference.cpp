// The key side's scalar reference: docs/KSIDE-SPEC.md step by step (src/common/kside_row.h with the
// host's MUFU.RSQ model), one token at a time, one thread. The executable spec every other
// backend is compared against. Tokens are stored in token order, each writing its whole row, so
// of several tokens with the same slot the last one decides the row: the duplicate-slot rule
// every backend follows (docs/KSIDE.md "Duplicate slots").
#include <cstdint>

#include "common/float_env.h"
#include "common/kside_problem.h"
#include "common/kside_row.h"
#include "common/rsq_sm90.h"

namespace indexer_q {
namespace detail {
namespace {

template <class KR>
void kside_tokens(const KProblem& p) {
  float w[kHeadDim], x[kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) w[i] = kside_load(p.weight, p.dtype, i);
  for (std::int64_t t = 0; t < p.N; ++t) {
    const std::int64_t slot = p.slots[t];
    if (slot < 0) continue;  // no destination
    const std::int64_t pos = kside_position(p.positions, p.pos_dtype, t);
    for (int i = 0; i < kHeadDim; ++i) x[i] = kside_load(p.input, p.dtype, t * p.input_stride + i);
    std::uint8_t *codes, *scales;
    kside_token_ptrs<KR>(p.cache, p.page_bytes, p.page_size, p.log2_page, slot, &codes, &scales);
    kside_row<KR>(x, w, p.eps, p.freqs + pos * kFreqsDim, codes, scales, RsqSm90{});
  }
}

}  // namespace

Status kside_reference_run(const KProblem& p) {
  const IeeeFloatScope ieee;  // the caller may run with flush-to-zero / denormals-are-zero
  with_krecipe(p.recipe, [&](auto r) { kside_tokens<decltype(r)>(p); });
  return Status::Ok();
}

}  // namespace detail
}  // namespace indexer_q
