// Host only: an exact model of the NVIDIA sm_90 MUFU.RSQ instruction (rsqrtf without fast-math),
// docs/KSIDE-SPEC.md section 2 step 5. MUFU.RSQ is not correctly rounded; its result for every x in
// [1, 4) is tabulated (2^24 entries, stored as 2-bit deltas against fl32(1 / sqrt((double)x)) in
// src/common/data/rsq_sm90_delta2.bin, embedded in the library at build time), and every other
// float maps onto that range by an even power of two. Verified entry by entry against the golden
// table in tests/test_kside_rsq.cpp.
#pragma once

#include <cstdint>

namespace indexer_q {
namespace detail {

// The bits of MUFU.RSQ(x_i) for table index i < 2^24: x_i = 2^(i >> 23) * (1 + (i & 0x7fffff) 2^-23).
std::uint32_t rsq_sm90_table(std::uint32_t i) noexcept;

// MUFU.RSQ(x) on sm_90: NaN -> NaN, -0 -> -inf, negative -> NaN, +0 -> +inf, +inf -> +0,
// subnormals scaled by 2^24 first.
float rsq_sm90(float x) noexcept;

// rsq_sm90 of n values (out may alias x). The table is 4 MiB and looked up at random places, so
// every lookup is likely a cache miss: this first prefetches the n entries' cache lines, then
// computes, so the misses overlap. Same bits as n calls of rsq_sm90.
void rsq_sm90_n(const float* x, float* out, int n) noexcept;

// The host's reciprocal-square-root model for kside_row<KR>(..., RsqSm90{}).
struct RsqSm90 {
  float operator()(float x) const noexcept { return rsq_sm90(x); }
};

}  // namespace detail
}  // namespace indexer_q
