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
// y[k] of one block, packed as the kernels store them (nibble k = code of value k), taken from
// the bf16 pairs themselves (two values an instruction, no fp32 unpacking).
//
// Why it holds. With v = y * inv (inv = 2^(127-e) a power of two, or 0 for e = 254, -Inf for
// e = 255), v is exact whenever it is a normal float32, so |v| has at most 8 significant bits;
// the code thresholds (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5) have at most 3. On a2 = 2|v| (in
// bf16: v2 = y * 2^(128-e), one fma with -0 added, exact; an underflow gives a value below 0.5,
// code 0 either way, an overflow +-Inf, code 7 as in the reference, whose v saturates), clamped
// at 12 (NaN -> 12), the code is min(L1, L2, L3) of vLLM's three lines (see mx_e2m1_code8) with
// ties to the smaller code: L1 = round(a2), L2 = 2 + round(a2 / 2), L3 = 4 + round(a2 / 4).
// Ties go down by a multiplier just below one: L1 = RN(a2 (1 - 2^-8) + 128), L2 = RN(a2 / 2
// (1 - 2^-8) + 130), L3 = RN(a2 / 4 (1 - 2^-8) + 132), each one bf16 fma (ulp 1 on [128, 256)).
// A tie t + 1/2 of a2 / 2^j moves below it by (a2 / 2^j) 2^-8 < 1/2; any other a2 / 2^j (8
// significant bits) lies at least one ulp of itself, more than (a2 / 2^j) 2^-8, from every tie,
// and stays on its side. The code is the low nibble of each half of the minimum (0x4300 + code).
// Sign: bit 15 / 31 of min(v2, 12) (a NaN gives +12), kept where the code is nonzero
// ((0x4300 + code) + 0x3cff has bit 15 set exactly then).
// Argument order: p[0] = (y0, y4), p[1] = (y2, y6), p[2] = (y1, y5), p[3] = (y3, y7) as (low,
// high) bf16 halves, so that two shifted adds put nibble k = code of y_k. m2 =
// e2m1_scale2_bf16x2(e): 2^(128-e) in both halves for e = 1..253, 0 for e = 254
// (ue8m0_inverse's 0), -Inf for e = 255; e = 0 (inverse 2^127: 2v past bf16's range) is outside
// the domain (the kernels' e is at least 114, the 1e-4 floor). Checked against e2m1_encode for
// every (bf16 y, e = 1..255) pair in every position by tests/test_cuda.cu.
__host__ __device__ __forceinline__ std::uint32_t e2m1_scale2_bf16x2(std::uint32_t e) {
  return e < 254u ? ((255u - e) << 7) * 0x00010001u : (e == 254u ? 0u : 0xff80ff80u);
}
// Two floats rounded to bf16 (cvt.rn.bf16x2.f32, as round_bf16_pair), packed: lo in bits 0..15.
__device__ __forceinline__ std::uint32_t bf16x2_rn(float lo, float hi) {
  std::uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// The larger magnitude of each half of two bf16 pairs: max.bf16x2 of the absolute values, a NaN
// ignored unless both are NaN (as fmaxf), or with kNaN any NaN propagated (max.NaN.bf16x2).
template <bool kNaN = false>
__device__ __forceinline__ std::uint32_t bf16x2_max_abs(std::uint32_t a, std::uint32_t b) {
  std::uint32_t d;
  if (kNaN)
    asm("{\n\t.reg .b32 x, y;\n\tabs.bf16x2 x, %1;\n\tabs.bf16x2 y, %2;\n\tmax.NaN.bf16x2 %0, x, y;\n\t}"
        : "=r"(d)
        : "r"(a), "r"(b));
  else
    asm("{\n\t.reg .b32 x, y;\n\tabs.bf16x2 x, %1;\n\tabs.bf16x2 y, %2;\n\tmax.bf16x2 %0, x, y;\n\t}"
        : "=r"(d)
        : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ std::uint32_t e2m1_code8_bf16(const std::uint32_t (&p)[4], std::uint32_t m2) {
  std::uint32_t z[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    std::uint32_t w, sv;
    asm("{\n\t.reg .b32 v, a, l1, l2, l3;\n\t"
        "fma.rn.bf16x2 v, %2, %3, %4;\n\t"    // y * 2^(128-e) + -0
        "abs.bf16x2 a, v;\n\t"
        "min.bf16x2 a, a, %5;\n\t"             // 12
        "min.bf16x2 %1, v, %5;\n\t"            // the sign source (NaN -> +12)
        "fma.rn.bf16x2 l1, a, %6, %7;\n\t"    // a (1 - 2^-8) + 128
        "fma.rn.bf16x2 l2, a, %8, %9;\n\t"    // a / 2 (1 - 2^-8) + 130
        "fma.rn.bf16x2 l3, a, %10, %11;\n\t"  // a / 4 (1 - 2^-8) + 132
        "min.bf16x2 l1, l1, l2;\n\t"
        "min.bf16x2 %0, l1, l3;\n\t}"
        : "=r"(w), "=r"(sv)
        : "r"(p[j]), "r"(m2), "r"(0x80008000u), "r"(0x41404140u), "r"(0x3f7f3f7fu), "r"(0x43004300u),
          "r"(0x3eff3effu), "r"(0x43024302u), "r"(0x3e7f3e7fu), "r"(0x43044304u));
    const std::uint32_t sg = sv & (w + 0x3cff3cffu) & 0x80008000u;  // sign bits of nonzero codes
    z[j] = (w - 0x43004300u) + (sg >> 12);  // code | sign << 3 at bits 0..3 and 16..19
  }
  const std::uint32_t a = z[0] + (z[1] << 8), b = z[2] + (z[3] << 8);  // nibbles 0, 2, 4, 6
  return a + (b << 4);
}

// The kernels' fast form of ue8m0_of_amax_fast and e2m1_code8_bf16, for a block whose maximum
// amax is at most 2^120 (so finite, and every value of the block finite: the kernels know it
// from the NaN-propagating block maximum; others take the forms above):
//  - ue8m0_of_amax_small: the rounding up of the exponent by a carry, (bits + 2^22 - 1) >> 23
//    (the mantissa field exceeds 2^22 exactly when adding 2^22 - 1 carries into the exponent),
//    no infinity case; e = 114..245 for such an amax.
//  - e2m1_code8_bf16_small(p, |p|, e), e = 1..251 and at least the block's own byte (|2v| <= 12): the
//    scale folded into the three lines' multipliers. a2 (1 - 2^-8) / 2^j = |y| * M_j with
//    M_j = (1 - 2^-8) 2^(128 - e - j), a bf16 of exponent field 254 - e - j (normal for
//    e <= 251) and mantissa 0x7f: the fma's exact product |y| M_j is the real number the general
//    form's a2 (1 - 2^-8) / 2^j is (its a2 = RN(y 2^(128-e)) is exact, or below 2^-126 where
//    both give code 0), so each line rounds the same number once. No multiply by 2^(128-e), no
//    clamp (a2 <= 12), and the sign of y is the sign of v. Checked against e2m1_encode for
//    every (bf16 y, e) pair of its domain in every position by tests/test_cuda.cu.
__host__ __device__ __forceinline__ std::uint32_t ue8m0_of_amax_small(float amax) {
  return ((f32_bits(::fmaxf(kScaleFloor, amax)) + 0x3fffffu) >> 23) - 2u;
}
// (ap: the absolute values of the pairs p, bf16x2_abs(p[j]), which the kernels have from the
// block maximum already.)
__device__ __forceinline__ std::uint32_t bf16x2_abs(std::uint32_t x) {
  std::uint32_t d;
  asm("abs.bf16x2 %0, %1;" : "=r"(d) : "r"(x));
  return d;
}
// max.NaN.bf16x2: the larger of each half, NaN if either is NaN.
__device__ __forceinline__ std::uint32_t bf16x2_max_nan(std::uint32_t a, std::uint32_t b) {
  std::uint32_t d;
  asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ std::uint32_t e2m1_code8_bf16_small(const std::uint32_t (&p)[4],
                                                               const std::uint32_t (&ap)[4], std::uint32_t e) {
  const std::uint32_t m0 = (254u - e) * 0x00800080u + 0x007f007fu;  // M_0 in both halves
  const std::uint32_t m1 = m0 - 0x00800080u, m2 = m0 - 0x01000100u;  // M_1, M_2
  std::uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    asm("{\n\t.reg .b32 l1, l2, l3;\n\t"
        "fma.rn.bf16x2 l1, %1, %2, %5;\n\t"  // |y| M_0 + 128
        "fma.rn.bf16x2 l2, %1, %3, %6;\n\t"  // |y| M_1 + 130
        "fma.rn.bf16x2 l3, %1, %4, %7;\n\t"  // |y| M_2 + 132
        "min.bf16x2 l1, l1, l2;\n\t"
        "min.bf16x2 %0, l1, l3;\n\t}"
        : "=r"(w[j])
        : "r"(ap[j]), "r"(m0), "r"(m1), "r"(m2), "r"(0x43004300u), "r"(0x43024302u), "r"(0x43044304u));
  // Each half of w[j] is 0x4300 + code: placed by shifted adds (p[0] = (y0, y4) at nibbles 0, 4,
  // p[2] = (y1, y5) at 1, 5, p[1] = (y2, y6) at 2, 6, p[3] = (y3, y7) at 3, 7), the 0x4300 parts
  // summing to a constant that is subtracted (mod 2^32); the codes land in separate nibbles.
  constexpr std::uint32_t kBias = 0x43004300u * (1u + 16u + 256u + 4096u);
  const std::uint32_t cw = w[0] + (w[2] << 4) + (w[1] << 8) + (w[3] << 12) - kBias;
  // Signs: byte m of ev / od is 0xff where y_2m / y_2m+1 is negative (prmt's sign replication of
  // the high byte of each bf16), kept on the nonzero codes (nibble + 7 has bit 3 set exactly then).
  const std::uint32_t ev = prmt(p[0], p[1], 0xfbd9u), od = prmt(p[2], p[3], 0xfbd9u);
  const std::uint32_t sg = (ev & 0x0f0f0f0fu) | (od & 0xf0f0f0f0u);
  return cw | (sg & (cw + 0x77777777u) & 0x88888888u);
}

// SGLang V4.1's packer exponent (row.h's rne_ue8m0_of_amax: fmax(amax / 6, 1e-4), its exponent
// rounded up, clamped to [1, 254]) without the division, for any amax >= 0 or NaN. As in
// ue8m0_of_amax_fast, RN(a / 6) for a normal a = m 2^E is the power of two 2^(E-2) only for
// m = 1.5, else its exponent is E-2 (m > 1.5) or E-3 (m < 1.5) with a nonzero mantissa, so the
// byte is field(a) - 2 + (mantissa(a) > 0.5). The floor: the byte of fmax(s, 1e-4) is the
// larger of the two bytes (rounding the exponent up is monotone), and 1e-4's is 114, which is
// also the byte of every a <= 6 * 2^-13 = 0x1.8p-11 and of that value itself: flooring a at it
// gives the same bytes (a NaN amax too: fmax(NaN / 6, 1e-4) = 1e-4). Only an infinite amax
// reaches the clamp (255 -> 254). Checked against rne_ue8m0_of_amax for every non-negative
// float and NaN by tests/test_cuda.cu.
__host__ __device__ __forceinline__ std::uint32_t rne_ue8m0_of_amax_fast(float amax) {
  const std::uint32_t b = f32_bits(::fmaxf(amax, 0x1.8p-11f));
  if (b >= 0x7f800000u) return 254u;  // Inf
  return (b >> 23) - 2u + ((b & 0x7fffffu) > 0x400000u ? 1u : 0u);
}

// SGLang V4.1's packer codes (row.h's e2m1_encode_rne) of the 8 products x[k] * inv, packed as
// the kernels store them (nibble k = code of value k). The magnitude rule is vLLM's (ties to
// even, saturating at 6, NaN -> 7: e2m1_magnitude_rne is mx_e2m1_encode's), so it is
// mx_e2m1_code8's three magic lines; only the sign differs: bit 3 of a nonzero code of a
// negative v. The sign bits are those of fmin(v, 6) (a NaN gives +6), kept on nonzero codes
// only (nibble code + 7 has bit 3 set exactly when code != 0). Checked against e2m1_encode_rne
// for every float32 in every position by tests/test_cuda.cu.
__device__ __forceinline__ std::uint32_t rne_e2m1_code8(const float* x, float inv) {
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
  const std::uint32_t ev = prmt(prmt(sb[0], sb[2], 0xfbu), prmt(sb[4], sb[6], 0xfbu), 0x5410u);
  const std::uint32_t od = prmt(prmt(sb[1], sb[3], 0xfbu), prmt(sb[5], sb[7], 0xfbu), 0x5410u);
  const std::uint32_t sg = (ev & 0x0f0f0f0fu) | (od & 0xf0f0f0f0u);
  return mag | (sg & (mag + 0x77777777u) & 0x88888888u);
}

// rne_e2m1_code8 on half2 pairs, for products x[k] * inv of at most 11 significant bits: x
// bf16- or fp16-exact and inv a power of two (or 0, or -Inf), as SGLang V4.1's packer meets them
// on bf16 / fp16 inputs (x read unchanged; inv = rne_inverse(e)), and its stage 2 on the stage-1
// values (E2M1 values times a power of two) always. Such a product converts to fp16 exactly
// (cvt.rn.f16x2.f32) wherever |v| >= 2^-14; below, it rounds to an fp16 below 2^-14 of the same
// sign (code 0 either way); past 65504 it becomes +-65504 or +-Inf (code 7, the sign kept); a
// NaN stays NaN. Then the same three lines in fp16 (1024 + rne(2a), 1026 + rne(a),
// 1028 + rne(a / 2) for a = min(|v|, 6), NaN -> 6: each exact up to its one rounding, ulp 1 on
// [1024, 2048)) and the same sign rule (bit 15 / 31 of the pair, kept on nonzero codes; a NaN
// product is the positive canonical NaN on the GPU). Checked against e2m1_encode_rne for every
// bf16 and every fp16 x at every inverse by tests/test_cuda.cu.
__device__ __forceinline__ std::uint32_t rne_e2m1_code8_h2(const float* x, float inv) {
  std::uint32_t byte[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    std::uint32_t h, w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(__fmul_rn(x[2 * j + 1], inv)), "f"(__fmul_rn(x[2 * j], inv)));
    asm("{\n\t.reg .b32 a, l1, l2, l3;\n\t"
        "abs.f16x2 a, %1;\n\t"
        "min.f16x2 a, a, %2;\n\t"          // 6
        "fma.rn.f16x2 l1, a, %3, %4;\n\t"  // a * 2 + 1024
        "add.rn.f16x2 l2, a, %5;\n\t"      // 1026
        "fma.rn.f16x2 l3, a, %6, %7;\n\t"  // a * 0.5 + 1028
        "min.f16x2 l1, l1, l2;\n\t"
        "min.f16x2 %0, l1, l3;\n\t}"
        : "=r"(w)
        : "r"(h), "r"(0x46004600u), "r"(0x40004000u), "r"(0x64006400u), "r"(0x64026402u), "r"(0x38003800u),
          "r"(0x64046404u));
    const std::uint32_t sg = (h >> 12) & (w + 0x00070007u) & 0x00080008u;
    const std::uint32_t z = w - 0x64006400u + sg;
    byte[j] = z + (z >> 12);
  }
  return prmt(prmt(byte[0], byte[1], 0x0040u), prmt(byte[2], byte[3], 0x0040u), 0x5410u);
}

// Stage 1 of SGLang V4.1's rope-pack quantizer (row.h's stage1_value(x, inv, sc): u = x * inv,
// its E2M1 value with ties to even, saturating at 6, NaN -> +6, with u's sign, times sc) by
// rounding u itself onto the grid: the E2M1 values are the multiples of 0.5 on [0, 2], of 1 on
// [2, 4] and of 2 on [4, 6], and on each of those ranges a multiple k s of the step s is the
// code of the same parity as k, so ties to the even code are ties to the even multiple. With
// w = clamp(u, -6, 6) (NaN -> 6) and p = 2^floor(log2 max(|w|, 1)) in {1, 2, 4} (the step is
// p / 2), M = 1.5 * 2^22 * p rounds w to a multiple of p / 2, ties to even, in w + M (exact
// product in the fma, one rounding) and gives it back exactly in (w + M) - M.
// Equal to stage1_value for every input up to the sign of a zero result (a negative u that
// rounds to 0 gives +0 here, -0 there): the result only feeds the block maximum (of |.|) and the
// packer, whose code of +-0 is 0 either way. u = x * inv rather than fma(x, inv, +0): they differ
// only in the sign of a zero. Checked against stage1_value by tests/test_cuda.cu for every
// float32 x at several (inv, sc).
// kClamp = false skips the clamp of u to [-6, 6], for finite x and an inverse of the block's
// stage-1 exponent (the kernels' rows whose values are all finite): then |u| <= amax * inv <=
// 6 (1 + 2^-23) (inv = 2^-k with 2^k >= RN(amax * fl(1/6)) and fl(1/6) > 1/6), which rounds to
// +-6 on the step-2 grid as the clamp's +-6 does, and u is never NaN.
template <bool kClamp = true>
__device__ __forceinline__ float stage1_value_fast(float x, float inv, float sc) {
  const float u = __fmul_rn(x, inv);
  const float w = kClamp ? fmaxf(fminf(u, kFp4Max), -kFp4Max) : u;
  const float p = __uint_as_float(__float_as_uint(fmaxf(fabsf(w), 1.0f)) & 0x7f800000u);
  const float t = __fmaf_rn(p, 6291456.0f, w);  // 1.5 * 2^22
  return __fmul_rn(__fmaf_rn(-p, 6291456.0f, t), sc);
}

// Four e4m3fn codes -> their e4m3fnuz codes: byte 0x80 (-0) becomes 0x00, every other byte is
// kept. Bit 7 of a byte survives only if one of its low 7 bits is set (no carry crosses bytes).
__host__ __device__ __forceinline__ std::uint32_t fnuz_from_fn4(std::uint32_t w) {
  return w & (((w & 0x7f7f7f7fu) + 0x7f7f7f7fu) | 0x7f7f7f7fu);
}

}  // namespace detail
}  // namespace indexer_q
