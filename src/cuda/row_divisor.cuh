// Division of a row index by the head count H by one multiply (the query kernel's b = row / H),
// shared by src/cuda/cuda_backend.cu and tests/test_cuda.cu.
#pragma once

#include <cstdint>

namespace indexer_q {
namespace detail {

// Granlund and Montgomery's round-up method for an invariant divisor d (1 <= d < 2^32) and
// every 32-bit dividend n: with l = ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1 (< 2^32),
// t = floor(m n / 2^32):  n / d = (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0).
// The host computes (m, s1, s2) once per launch; the kernel spends a multiply-high, two shifts
// and two adds where a 32-bit division by a run-time value takes about twenty instructions.
// Checked against n / d by tests/test_cuda.cu (host side: edge and random dividends for many
// divisors, every dividend for a few).
struct RowDivisor {
  std::uint32_t m, s1, s2;
};
inline RowDivisor row_divisor(std::uint32_t d) {
  if (d == 0) return RowDivisor{0u, 0u, 0u};  // no rows (H = 0): nothing is divided
  std::uint32_t l = 0;
  while (l < 32 && (std::uint64_t(1) << l) < d) ++l;
  RowDivisor v;
  v.m = std::uint32_t(((std::uint64_t(1) << 32) * ((std::uint64_t(1) << l) - d)) / d + 1);
  v.s1 = l < 1 ? l : 1;
  v.s2 = l > 1 ? l - 1 : 0;
  return v;
}
__host__ __device__ __forceinline__ std::uint32_t divide_rows(std::uint32_t n, RowDivisor v) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t t = __umulhi(v.m, n);
#else
  const std::uint32_t t = std::uint32_t((std::uint64_t(v.m) * n) >> 32);
#endif
  return (t + ((n - t) >> v.s1)) >> v.s2;
}

}  // namespace detail
}  // namespace indexer_q
