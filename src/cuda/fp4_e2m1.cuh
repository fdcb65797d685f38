// The FP4 steps of docs/RECIPES.md (v4_fp4) and the FNUZ re-encoding on the GPU, shared by the
// kernels and tests/test_cuda.cu (which checks each one against the scalar functions of
// src/common/row.h for every float32 bit pattern).
#pragma once

#include <cstdint>

#include "common/row.h"

namespace indexer_q {
namespace detail {

// The oldest target is sm_80 (CMakeLists.txt, INDEXER_Q_CUDA_ARCHS): cvt.rn.bf16x2.f32 below
// needs it. Everything else these headers use is older, or has a portable path (fp8_e4m3.cuh).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "indexer_q: the CUDA kernels need sm_80 or newer (set INDEXER_Q_CUDA_ARCHS, e.g. 80-real)"
#endif

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

// prmt.b32 (default mode): byte i of the result is byte (sel >> 4i) & 7 of {b, a}, or with bit
// 3 of that nibble set, that byte's sign bit replicated (0x00 / 0xff).
__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t sel) {
  std::uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// vLLM's MXFP4 codes (Quantizer::kVllm, row.h's mx_e2m1_encode) of the 8 products x[k] * inv,
// packed as the kernels store them: nibble k = code of value k (byte m = code(2m) | code(2m+1) << 4).
//
// Magnitude, for a = fmin(|v|, 6) (NaN -> 6): the e2m1 code is a step function of a that three
// lines bound from above, each exact on its own range and each rounded to an integer with ties
// to even by one float operation against 2^23 (the integer lands in the low mantissa bits):
//   L1 = rne(2a)         exact on [0, 2]  (grid 0, 0.5, 1, 1.5, 2 = codes 0..4)
//   L2 = 2 + rne(a)      exact on [2, 4]  (grid 2, 3, 4 = codes 4..6)
//   L3 = 4 + rne(a / 2)  exact on [4, 6]  (grid 4, 6 = codes 6, 7)
// and code = min(L1, L2, L3) (each line is >= the code everywhere on [0, 6]). Ties to even of the
// integer are ties to even of the code (the offsets 2, 4 are even). Every product involved is
// exact (a times a power of two); 2a + 2^23, a + 2^23 + 2 and a / 2 + 2^23 + 4 round once.
// The 8 results 2^23 + code are summed into place (k >= 2: the exponent bits of 2^23 leave the
// word; k = 0, 1: a known constant, subtracted).
// Sign: bit 3 of each code is the sign bit of fmin(v, 6), i.e. of v, except that a NaN v gives
// + (a NaN is 0x7 whatever its sign, as row.h's mx_e2m1_encode says).
// The sign bits are gathered by prmt's sign replication. Checked against mx_e2m1_encode for
// every float32 in every position by tests/test_cuda.cu.
__device__ __forceinline__ std::uint32_t mx_e2m1_code8(const float* x, float inv) {
  constexpr float kMagic = 8388608.0f;  // 2^23
  std::uint32_t mag = 0u - 0xfb000000u;  // minus (bits(2^23) + bits(2^23) << 4) mod 2^32
  std::uint32_t sb[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float v = __fmul_rn(x[k], inv);
    const float a = fminf(fabsf(v), kFp4Max);
    const float l1 = __fmaf_rn(a, 2.0f, kMagic);
    const float l2 = __fadd_rn(a, kMagic + 2.0f);
    const float l3 = __fmaf_rn(a, 0.5f, kMagic + 4.0f);
    const float m = fminf(fminf(l1, l2), l3);
    mag += __float_as_uint(m) << (4 * k);
    sb[k] = __float_as_uint(fminf(v, kFp4Max));
  }
  // bytes of sign masks: even values [S0, S2, S4, S6], odd values [S1, S3, S5, S7]
  const std::uint32_t ev = prmt(prmt(sb[0], sb[2], 0xfbu), prmt(sb[4], sb[6], 0xfbu), 0x5410u);
  const std::uint32_t od = prmt(prmt(sb[1], sb[3], 0xfbu), prmt(sb[5], sb[7], 0xfbu), 0x5410u);
  const std::uint32_t sg = (ev & 0x0f0f0f0fu) | (od & 0xf0f0f0f0u);
  return mag | (sg & 0x88888888u);
}

// SGLang's e2m1 codes (row.h's e2m1_encode of y[k] * ue8m0_inverse(e)) of 8 bf16-exact values
// y[k] of one block, packed as the kernels store them (nibble k = code of value k), given
// inv2 = e2m1_inv2_of(e). Only for that domain (y bf16-exact, e any byte): checked against
// e2m1_encode for every (bf16 y, e) pair in every position by tests/test_cuda.cu.
//
// Why it holds. With v = y * inv (inv = 2^(127-e) a power of two, or 0 for e = 254, -Inf for
// e = 255), v is exact whenever it is a normal float32, so |v| has at most 8 significant bits;
// the code thresholds (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5) have at most 3, so a |v| that is
// not a threshold is at least one bf16 ulp of itself away from every threshold. Ties to the
// smaller magnitude are then round-to-nearest of any value strictly between |v| and
// |v| minus one bf16 ulp. inv2 = 2 inv (1 - 2^-24) (exact: the float just below 2^(128-e)), and
// the product rounded toward zero is a2 = the float32 just below 2|v| in magnitude (for normal
// results; a subnormal or zero |v| < 2^-126 gives code 0 either way, and so does a2 there).
// Then vLLM's three magic lines (see mx_e2m1_code8) on a2 = 2|v|, clamped at 12 (NaN -> 12),
// never see a tie:  L1 = rne(a2), L2 = 2 + rne(a2 / 2), L3 = 4 + rne(a2 / 4), code = min.
// e = 254 (inv 0): inv2 = 0, products +-0 (code 0) or NaN (Inf * 0, code 7) as v is;
// e = 255 (inv -Inf): inv2 = -Inf, the products are v's infinities and NaNs.
// Sign: the sign bit of the product (a NaN product is the positive canonical NaN on the GPU),
// kept only on nonzero codes (nibble code + 7 has bit 3 set exactly when code != 0).
__host__ __device__ __forceinline__ float e2m1_inv2_of(std::uint32_t e) {
  return e < 254u ? f32_from_bits(((255u - e) << 23) - 1u) : (e == 254u ? 0.0f : f32_from_bits(0xff800000u));
}
__device__ __forceinline__ std::uint32_t e2m1_code8(const float* y, float inv2) {
  constexpr float kMagic = 8388608.0f;  // 2^23
  std::uint32_t mag = 0u - 0xfb000000u;  // minus (bits(2^23) + bits(2^23) << 4) mod 2^32
  std::uint32_t sb[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float v = __fmul_rz(y[k], inv2);
    const float a = fminf(fabsf(v), 12.0f);
    const float l1 = __fadd_rn(a, kMagic);
    const float l2 = __fmaf_rn(a, 0.5f, kMagic + 2.0f);
    const float l3 = __fmaf_rn(a, 0.25f, kMagic + 4.0f);
    const float m = fminf(fminf(l1, l2), l3);
    mag += __float_as_uint(m) << (4 * k);
    sb[k] = __float_as_uint(v);
  }
  const std::uint32_t ev = prmt(prmt(sb[0], sb[2], 0xfbu), prmt(sb[4], sb[6], 0xfbu), 0x5410u);
  const std::uint32_t od = prmt(prmt(sb[1], sb[3], 0xfbu), prmt(sb[5], sb[7], 0xfbu), 0x5410u);
  const std::uint32_t sg = (ev & 0x0f0f0f0fu) | (od & 0xf0f0f0f0u);
  return mag | (sg & (mag + 0x77777777u) & 0x88888888u);
}

// Four e4m3fn codes -> their e4m3fnuz codes: byte 0x80 (-0) becomes 0x00, every other byte is
// kept. Bit 7 of a byte survives only if one of its low 7 bits is set (no carry crosses bytes).
__host__ __device__ __forceinline__ std::uint32_t fnuz_from_fn4(std::uint32_t w) {
  return w & (((w & 0x7f7f7f7fu) + 0x7f7f7f7fu) | 0x7f7f7f7fu);
}

}  // namespace detail
}  // namespace indexer_q
