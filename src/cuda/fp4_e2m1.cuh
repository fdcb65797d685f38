// The FP4 steps of SPEC-variants.md (v4_fp4) and the FNUZ re-encoding on the GPU, shared by the
// kernels and tests/test_cuda.cu (which checks each one against the scalar functions of
// src/common/row.h for every float32 bit pattern).
#pragma once

#include <cstdint>

#include "common/row.h"

namespace indexer_q {
namespace detail {

// round_bf16 of two values by one cvt.rn.bf16x2.f32 (round to nearest even; overflow to Inf).
// Equal to row.h's round_bf16 for every non-NaN input; a NaN stays a NaN (the payload may
// differ, which no output byte depends on: NaN is ignored by fmax and encodes by magnitude).
__device__ __forceinline__ void round_bf16_pair(float& a, float& b) {
  std::uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));  // d.hi = b, d.lo = a
  a = __uint_as_float(d << 16);
  b = __uint_as_float(d & 0xffff0000u);
}

// ue8m0_of_amax(amax) for any amax >= 0 that is not NaN, without the division: with
// a = fmax(1e-4, amax) normal, RN(a / 6) is a power of two only when the mantissa of a is
// exactly 1.5 (a / 6 = 2^(E-2)); otherwise its exponent is E-2 (mantissa > 1.5) or E-3, and
// the rounding up adds one. Checked against ue8m0_of_amax for every non-negative float.
__host__ __device__ __forceinline__ std::uint32_t ue8m0_of_amax_fast(float amax) {
  const std::uint32_t b = f32_bits(::fmaxf(kScaleFloor, amax));
  if (b >= 0x7f800000u) return 255u;  // Inf
  return (b >> 23) - 2u + ((b & 0x7fffffu) > 0x400000u ? 1u : 0u);
}

// e2m1_encode(v) for every v (a signalling NaN aside: v is a product, never one). With
// a = fmin(|v|, 6) and hi(x) = the e2m1 code of a float x >= 1 (round its mantissa to one bit
// with ties down: (bits + 2^21 - 1) >> 22, re-biased), code = max(hi(a), hi(a + 1) - 2): below
// 1 the e2m1 grid {0, 0.5, 1} is the 1-bit grid of [1, 2) shifted by one (thresholds 0.25 and
// 0.75 become 1.25 and 1.75), and above 1 the second term never exceeds the first. a + 1 is
// rounded upwards so that an a just above a threshold stays above it. The sign bit goes with
// every nonzero code of a negative v, i.e. exactly when v < -0.25. Checked against e2m1_encode
// for every float32 by tests/test_cuda.cu.
__device__ __forceinline__ std::uint32_t e2m1_code(float v) {
  const float a = fminf(fabsf(v), kFp4Max);
  const int h1 = int(__float_as_uint(a) + 0x1fffffu - 0x3f000000u) >> 22;
  const int h2 = int(__float_as_uint(__fadd_ru(a, 1.0f)) + 0x1fffffu - 0x3f800000u) >> 22;  // hi(a + 1) - 2
  return std::uint32_t(h1 > h2 ? h1 : h2) | (v < -0.25f ? 8u : 0u);
}

// Four e4m3fn codes -> their e4m3fnuz codes: byte 0x80 (-0) becomes 0x00, every other byte is
// kept. Bit 7 of a byte survives only if one of its low 7 bits is set (no carry crosses bytes).
__host__ __device__ __forceinline__ std::uint32_t fnuz_from_fn4(std::uint32_t w) {
  return w & (((w & 0x7f7f7f7fu) + 0x7f7f7f7fu) | 0x7f7f7f7fu);
}

}  // namespace detail
}  // namespace indexer_q
