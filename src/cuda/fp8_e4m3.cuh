// Steps 8..9 of SPEC.md on the GPU for four values at a time, shared by the kernels and
// tests/test_cuda.cu (which checks it against the scalar encoder of row.h for every float32).
#pragma once

#include <cstdint>

#include "common/row.h"

namespace indexer_q {
namespace detail {

// Four products v = y * inv (already rounded) -> four e4m3fn codes, byte j = value j.
// fminf(v, 448) maps NaN to +448 (as the spec's fmax(fmin(v, 448), -448) does) and clamps
// the top; cvt.rn.satfinite.e4m3x2.f32 rounds to nearest even and saturates the rest
// (anything below -448, -Inf included, becomes -448). cvt d, a, b puts a in the high byte.
//
// quantize4_e4m3_sat skips the fminf: it equals quantize4_e4m3 for every input that is not
// NaN (the conversion saturates +-large and +-Inf to +-448 by itself), and the kernels call it
// only for rows that hold no NaN product (see compute_row).
//
// The conversion instruction exists from sm_89 on (L40S, RTX 4090, H100 and later). Below it
// (sm_80..sm_88) the same bytes come from row.h's scalar encoder, the reference's own
// function: quantize4_e4m3_sat_sw. It equals the instruction for every input that is not NaN
// (tests/test_cuda_arch.cu checks every float32 in every byte on the GPU, and on the host
// without one). On the GPU a NaN gives 0xfe there (fmaxf(NaN, -448)), the instruction's own NaN byte
// here: no output depends on it (quantize4_e4m3 maps NaN to 448 first, quantize4_e4m3_vllm
// writes NaN bytes itself, the kernels call the _sat form only for rows without a NaN product).
__host__ __device__ __forceinline__ std::uint32_t quantize4_e4m3_sat_sw(float a, float b, float c, float d) {
  return std::uint32_t(e4m3fn_encode(::fmaxf(a, -kFp8Max))) |
         (std::uint32_t(e4m3fn_encode(::fmaxf(b, -kFp8Max))) << 8) |
         (std::uint32_t(e4m3fn_encode(::fmaxf(c, -kFp8Max))) << 16) |
         (std::uint32_t(e4m3fn_encode(::fmaxf(d, -kFp8Max))) << 24);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define INDEXER_Q_HW_FP8_CVT 1  // this device pass has cvt.rn.satfinite.e4m3x2.f32
#endif

__device__ __forceinline__ std::uint32_t quantize4_e4m3_sat(float a, float b, float c, float d) {
#if defined(INDEXER_Q_HW_FP8_CVT)
  std::uint32_t r;
  asm("{\n\t.reg .b16 lo, hi;\n\t"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
      "mov.b32 %0, {lo, hi};\n\t}"
      : "=r"(r)
      : "f"(a), "f"(b), "f"(c), "f"(d));
  return r;
#else
  return quantize4_e4m3_sat_sw(a, b, c, d);
#endif
}

// SGLang's FP8 row scale and its inverse (row.h: scale = fmax(1e-4, amax) / kMax, inv = 1 / scale,
// each one IEEE rounding; kMax = 448, or 224 for the gfx942 form) for any amax >= 0 (+Inf
// included; row_amax never gives NaN), without the two division sequences:
//  - the quotient by the constant: q0 = a * RN(1 / kMax), then one correction by the exact
//    remainder a - q0 * kMax (an fma): RN(a / kMax) for every finite a >= 1e-4 (checked for every
//    such float32 for 448 and 224, on the host with the C library's fma and on the device by
//    tests/test_cuda.cu). For a = +Inf the remainder is NaN, and fminf(NaN, a) gives +Inf; for a
//    finite a the quotient is below a, so the fminf keeps it.
//  - the reciprocal: the fast path of rcp.rn.f32 as the compiler emits it (rcp.approx, the
//    residual s * r - 1 by an fma, one correction), which is taken there for every input whose
//    exponent field is 1..252; the scales here lie in [1e-4 / 448, FLT_MAX / 224]. For +Inf the
//    residual is NaN, and fmaxf(NaN, 0) gives 1 / Inf = 0; every finite inverse is positive.
// Checked against __fdiv_rn for every non-negative amax bit pattern by tests/test_cuda.cu.
template <int kMax>
__device__ __forceinline__ void sglang_scale_inverse(float amax, float& scale, float& inv) {
  static_assert(kMax == 448 || kMax == 224, "RN(1 / kMax) below is written for 448 and 224");
  constexpr float kM = float(kMax);
  constexpr float kR = kMax == 448 ? kInv448 : 2.0f * kInv448;  // RN(1 / 224) = 2 RN(1 / 448)
  const float a = fmaxf(kScaleFloor, amax);
  const float q0 = __fmul_rn(a, kR);
  scale = fminf(__fmaf_rn(__fmaf_rn(-q0, kM, a), kR, q0), a);
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(scale));
  const float e = __fmaf_rn(scale, r, -1.0f);
  inv = fmaxf(__fmaf_rn(r, -e, r), 0.0f);
}

// vLLM's conversion (Quantizer::kVllm, row.h's vllm_fp8_code of a product already divided by
// its power-of-two scale): e4m3fn nearest even, saturating to +-448 (Inf too), the sign of zero
// kept, and any NaN -> 0x7f whatever its sign. The satfinite conversion gives every non-NaN
// byte (its sign included: tests/test_cuda.cu checks -0 and the negative values that round to
// zero); a NaN byte is written here rather than taken from the hardware (nan_bytes_to: byte k of
// r becomes nan_byte where lane k's value is NaN; each quantizer below picks its NaN code).
__device__ __forceinline__ std::uint32_t nan_bytes_to(std::uint32_t r, std::uint32_t nan_byte, float a, float b,
                                                      float c, float d) {
  if (a != a) r = (r & 0xffffff00u) | nan_byte;
  if (b != b) r = (r & 0xffff00ffu) | (nan_byte << 8);
  if (c != c) r = (r & 0xff00ffffu) | (nan_byte << 16);
  if (d != d) r = (r & 0x00ffffffu) | (nan_byte << 24);
  return r;
}
__device__ __forceinline__ std::uint32_t quantize4_e4m3_vllm(float a, float b, float c, float d) {
  return nan_bytes_to(quantize4_e4m3_sat(a, b, c, d), 0x7fu, a, b, c, d);
}

// vLLM's V3.2 conversion (Quantizer::kVllmV32, row.h's v32_fp8_code of a quotient x / scale
// already computed): the same bytes as quantize4_e4m3_vllm except that every NaN gives 0x7e.
__device__ __forceinline__ std::uint32_t quantize4_e4m3_v32(float a, float b, float c, float d) {
  return nan_bytes_to(quantize4_e4m3_sat(a, b, c, d), 0x7eu, a, b, c, d);
}

// SGLang's V3.2 act_quant conversion (Quantizer::kSglangUe8m0, row.h's ue8m0_fp8_code of a
// quotient x / scale already computed): the same bytes except that every NaN gives 0xfe (-448).
__device__ __forceinline__ std::uint32_t quantize4_e4m3_ue8m0(float a, float b, float c, float d) {
  return nan_bytes_to(quantize4_e4m3_sat(a, b, c, d), 0xfeu, a, b, c, d);
}

// 1 / q_scale for a power-of-two scale q_scale = 2^k (exponent byte qe = 127 + k, 1..253) or
// +Inf (qe = 255): bits((254 - qe) << 23) = 2^-k (normal), or 0 for +Inf (qe = 254 would give
// 0 too, not 2^-127: no caller's scale reaches 2^127). x * 2^-k is x / q_scale exactly (the one
// rounding of the same real number, subnormal results included), and x * 0 is x / Inf (+-0 for
// a finite x, NaN for +-Inf and NaN).
__host__ __device__ __forceinline__ float pow2_scale_inverse(float q_scale) {
  const std::uint32_t qe = f32_bits(q_scale) >> 23;
  return qe >= 255u ? 0.0f : f32_from_bits((254u - qe) << 23);
}

// vLLM's ROCm conversion (Quantizer::kVllmFnuz224, row.h's fnuz224_code of a quotient v = x / scale
// already computed): the e4m3fnuz code of v is the e4m3fn code of 2v (the doubling is exact),
// which the satfinite conversion gives for every non-NaN v (|2v| <= 448 (1 + 2^-22) for a finite
// row; anything larger saturates to 448 as e4m3fn_encode does; no clamp precedes it in the
// reference either); then byte 0x80 (-0: a -0 or a negative v rounding to zero) becomes 0x00 (as
// fnuz_from_fn4), and every NaN v gives 0x80 (e4m3fnuz's NaN) whatever its sign, written here
// rather than taken from the hardware (or from the software encoder below sm_89).
// quantize4_e4m3_fnuz224_finite: the same bytes for values that are not NaN (the kernels call it
// on rows without a NaN product).
__device__ __forceinline__ std::uint32_t quantize4_e4m3_fnuz224_finite(float a, float b, float c, float d) {
  std::uint32_t r = quantize4_e4m3_sat(__fmul_rn(a, 2.0f), __fmul_rn(b, 2.0f), __fmul_rn(c, 2.0f), __fmul_rn(d, 2.0f));
  return r & (((r & 0x7f7f7f7fu) + 0x7f7f7f7fu) | 0x7f7f7f7fu);  // 0x80 -> 0x00, every other byte kept
}
__device__ __forceinline__ std::uint32_t quantize4_e4m3_fnuz224(float a, float b, float c, float d) {
  return nan_bytes_to(quantize4_e4m3_fnuz224_finite(a, b, c, d), 0x80u, a, b, c, d);
}

// SGLang's gfx942 conversion (Quantizer::kSglang224, row.h's quantize_value(y * inv, ., 224)):
// the product clamped to [-224, 224] (fminf first: NaN -> +224 = 0x76), then the conversion of
// a value inside e4m3fn's range (no saturation involved, on either path).
__device__ __forceinline__ std::uint32_t quantize4_e4m3_224(float a, float b, float c, float d) {
  return quantize4_e4m3_sat(fmaxf(fminf(a, 224.0f), -224.0f), fmaxf(fminf(b, 224.0f), -224.0f),
                            fmaxf(fminf(c, 224.0f), -224.0f), fmaxf(fminf(d, 224.0f), -224.0f));
}

__device__ __forceinline__ std::uint32_t quantize4_e4m3(float a, float b, float c, float d) {
  return quantize4_e4m3_sat(fminf(a, kFp8Max), fminf(b, kFp8Max), fminf(c, kFp8Max), fminf(d, kFp8Max));
}

}  // namespace detail
}  // namespace indexer_q
