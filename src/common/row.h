// Scalar math shared by host and device code: the element codecs (bf16, fp16, fp8 e4m3fn,
// e2m1 + ue8m0) and the row pipeline of SPEC.md / docs/RECIPES.md, step by step, composed
// from a recipe (src/common/recipe.h). Every backend reproduces exactly what
// these functions compute; the scalar reference *is* these functions.
//
// Host code including this header must be built with -ffp-contract=off (the project's
// CMake sets it) so that no product is fused or split behind our back; the one fused
// multiply-add of the spec is written explicitly.
#pragma once

#include <cstdint>
#include <cstring>
#include <cmath>

#include "common/recipe.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define IQ_HD __host__ __device__ __forceinline__
#else
#define IQ_HD inline
#endif

namespace indexer_q {
namespace detail {

constexpr int kHeadDim = 128;
constexpr int kRopeDim = 64;            // 64 of the 128 dims are rotated (which: the recipe)
constexpr int kFreqsDim = 64;           // (cos, sin) for 32 pairs
constexpr float kHadamardScale = 0x1.6a09e6p-4f;  // float32 nearest 1/sqrt(128), bits 0x3db504f3
constexpr float kFp8Max = 448.0f;
constexpr float kScaleFloor = 1e-4f;

IQ_HD std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
IQ_HD float f32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- input decoders (all exact) ----
IQ_HD float bf16_to_f32(std::uint16_t h) { return f32_from_bits(std::uint32_t(h) << 16); }

IQ_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float32
    const float v = float(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13));  // Inf / NaN
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

// Element i of a bf16 / fp16 / fp32 array, as a float (exact).
IQ_HD float load_float(const void* base, DType dt, std::int64_t i) {
  if (dt == DType::kBFloat16) return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  if (dt == DType::kFloat16) return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

// ---- fp8 e4m3fn codec ----
// Encodes any float32 to float8_e4m3fn: round to nearest, ties to even, saturating
// (|f| >= 448, Inf included, gives +-448 = 0x7e/0xfe); NaN gives 0x7f (sign kept).
IQ_HD std::uint8_t e4m3fn_encode(float f) {
  const std::uint32_t u = f32_bits(f);
  const std::uint8_t sign = std::uint8_t((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint8_t(sign | 0x7fu);  // NaN
  if (a >= 0x43e00000u) return std::uint8_t(sign | 0x7eu); // >= 448 or Inf: saturate
  if (a < 0x3c800000u) {
    // Below 2^-6: subnormal codes, step 2^-9. |f| * 512 < 8 is exact; adding 2^23 rounds it
    // to an integer with ties to even, which lands in the low mantissa bits.
    const float scaled = f32_from_bits(a) * 512.0f;
    const std::uint32_t r = f32_bits(scaled + 8388608.0f) - 0x4b000000u;  // 0..8; 8 = 2^-6
    return std::uint8_t(sign | r);
  }
  // Normal: keep 3 mantissa bits with round-to-nearest-even, re-bias the exponent 127 -> 7.
  const std::uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  return std::uint8_t(sign | (r - (120u << 3)));
}

// Decodes float8_e4m3fn to float32 (exact). 0x7f / 0xff are NaN.
IQ_HD float e4m3fn_decode(std::uint8_t c) {
  const std::uint32_t sign = std::uint32_t(c & 0x80u) << 24;
  const std::uint32_t e = (c >> 3) & 0xfu;
  const std::uint32_t m = c & 0x7u;
  if (e == 0xfu && m == 0x7u) return f32_from_bits(sign | 0x7fc00000u);
  if (e == 0) {
    const float v = float(m) * 0x1p-9f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

// ---- the running absolute maximum (steps 5 / FP4 block amax) ----
// max(amax, |y|) ignoring a NaN y, quiet or signaling. (libm's fmaxf returns NaN for a
// signaling NaN operand, which a recipe without arithmetic before this step - no Hadamard -
// can pass through unchanged; the reference kernels' fmax ignores it.) amax is never NaN.
IQ_HD float amax_step(float amax, float y) {
  const float a = ::fabsf(y);
  return a > amax ? a : amax;
}

// ---- bf16 rounding point (FP4 recipes) ----
// Rounds to the nearest bf16 (ties to even) and back; Inf stays Inf, finite values past the
// largest bf16 become Inf, NaN stays NaN (quieted).
IQ_HD float round_bf16(float f) {
  const std::uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return f32_from_bits(u | 0x00400000u);
  return f32_from_bits((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// ---- fp4 e2m1 (docs/RECIPES.md, v4_fp4) ----
constexpr float kFp4Max = 6.0f;
// UE8M0 exponent byte of a block: s = fmax(1e-4, amax) / 6 rounded up to a power of two.
IQ_HD std::uint8_t ue8m0_of_amax(float amax) {
  const float s = ::fmaxf(kScaleFloor, amax) / kFp4Max;
  const std::uint32_t b = f32_bits(s);
  return std::uint8_t(((b >> 23) & 0xffu) + ((b & 0x7fffffu) != 0u ? 1u : 0u));
}
// inv = 2^(127 - e), built from bits in 32-bit unsigned arithmetic (e = 255 gives -Inf).
IQ_HD float ue8m0_inverse(std::uint8_t e) { return f32_from_bits((254u - std::uint32_t(e)) << 23); }
// E2M1 code of v: magnitude = number of thresholds {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
// strictly below min(|v|, 6) (NaN -> 6), so ties go to the smaller magnitude; sign bit 8 only
// on a nonzero code of a negative v.
IQ_HD std::uint8_t e2m1_encode(float v) {
  const float a = ::fminf(::fabsf(v), kFp4Max);
  const std::uint8_t m = std::uint8_t((a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) +
                                      (a > 2.5f) + (a > 3.5f) + (a > 5.0f));
  return std::uint8_t(m | ((v < 0.0f && m != 0) ? 8u : 0u));
}

// ---- the row pipeline, composed from a recipe (R = RecipeT<Id>, src/common/recipe.h) ----

// Step 2: RoPE on the recipe's 64 dims: pair j = (x0, x1) is (2j, 2j+1) of them (RopePairs::
// kAdjacent) or (j, j+32) (kNeox); f = freqs row of the position, laid out as the recipe says.
// x0' = fma(x0, c, -(x1*s)), x1' = fma(x0, s, x1*c) (RopeFma::kFmaX0S) or fma(x1, c, x0*s)
// (kFmaX1C), the products rounded first.
template <class R>
IQ_HD void rope_row(float* x, const float* f) {
  for (int j = 0; j < kRopeDim / 2; ++j) {
    float* v0 = x + R::kRopeOffset + (R::kNeox ? j : 2 * j);
    float* v1 = x + R::kRopeOffset + (R::kNeox ? j + 32 : 2 * j + 1);
    const float xr = *v0;
    const float xi = *v1;
    const float c = R::kFreqsLayout == FreqsLayout::kInterleaved ? f[2 * j] : f[j];
    const float s = R::kFreqsLayout == FreqsLayout::kInterleaved ? f[2 * j + 1] : f[32 + j];
    const float xis = xi * s;
    *v0 = ::fmaf(xr, c, -xis);
    if (R::kRopeFma == RopeFma::kFmaX1C) {
      const float xrs = xr * s;
      *v1 = ::fmaf(xi, c, xrs);
    } else {
      const float xic = xi * c;
      *v1 = ::fmaf(xr, s, xic);
    }
  }
}

// Step 3: butterflies at strides 1, 2, 4, ..., 64, in that order.
IQ_HD void hadamard_row(float* x) {
  for (int stride = 1; stride < kHeadDim; stride <<= 1) {
    for (int i = 0; i < kHeadDim; ++i) {
      if ((i & stride) == 0) {
        const float a = x[i];
        const float b = x[i + stride];
        x[i] = a + b;
        x[i + stride] = a - b;
      }
    }
  }
}

// The FP8 limit of SGLang's quantizer: 448, or 224 for the gfx942 form (Quantizer::kSglang224).
template <class R>
IQ_HD constexpr float sglang_fp8_max() { return R::kQuant == Quantizer::kSglang224 ? 224.0f : kFp8Max; }

// Steps 4..6 (FP8 recipes): y = x / sqrt(128) in place when the recipe has the Hadamard,
// then the row's quantization scale.
template <class R>
IQ_HD float scale_and_amax_row(float* y) {
  float amax = 0.0f;
  for (int i = 0; i < kHeadDim; ++i) {
    if (R::kHadamard) y[i] = y[i] * kHadamardScale;
    amax = amax_step(amax, y[i]);
  }
  // amax starts at 0 rather than NaN: with step 6's fmax(1e-4, .) both give the same scale.
  return ::fmaxf(kScaleFloor, amax) / sglang_fp8_max<R>();
}

// Steps 8..9 for one value, given inv = 1 / scale: the e4m3fn code of the value clamped to
// [-lim, lim] (fminf: a NaN gives lim).
IQ_HD std::uint8_t quantize_value(float y, float inv, float lim = kFp8Max) {
  const float v = ::fmaxf(::fminf(y * inv, lim), -lim);
  return e4m3fn_encode(v);
}
// The e4m3fnuz code of the same value (OutFormat::kE4M3FNUZ): -0 becomes +0.
IQ_HD std::uint8_t fnuz_from_fn(std::uint8_t c) { return c == 0x80u ? std::uint8_t(0) : c; }

// ---- vLLM's quantizer (Quantizer::kVllm, docs/RECIPES.md) ----
// A positive float rounded up to a power of two, from its bits: finite s -> 2^ceil(log2 s)
// (exponent byte ((bits + 0x7fffff) >> 23) & 0xff), +Inf stays +Inf.
IQ_HD float pow2_ceil(float s) { return f32_from_bits((((f32_bits(s) + 0x7fffffu) >> 23) & 0xffu) << 23); }
// The fp8 code of x / q_scale: e4m3fn, nearest even, saturating to +-448 (Inf too), any NaN
// -> 0x7f, the sign of zero kept (no clamp before: a NaN product stays NaN).
IQ_HD std::uint8_t vllm_fp8_code(float x, float q_scale) {
  const float v = x / q_scale;
  if (v != v) return 0x7fu;
  return e4m3fn_encode(v);
}
// The UE8M0 byte of an MXFP4 block: amax floored at 6 * 2^-126, times fl(1/6), rounded up to a
// power of two (an infinite amax gives 254).
constexpr float kMxAmaxFloor = 0x1.8p-124f;   // 6 * 2^-126, bits 0x01c00000
constexpr float kMxSixth = 0x1.555556p-3f;    // the float32 nearest 1/6
IQ_HD std::uint8_t mx_ue8m0_of_amax(float amax) {
  const float ratio = ::fmaxf(amax, kMxAmaxFloor) * kMxSixth;
  const std::uint32_t b = f32_bits(ratio);
  if ((b & 0x7f800000u) == 0x7f800000u) return 254u;
  return std::uint8_t(((b + 0x7fffffu) >> 23) & 0xffu);
}
// E2M1 code with round to nearest, ties to even, saturating at 6, the sign bit of v on every
// code (zero included). A NaN v gives 0x7 (+6): our choice where the spec is silent, and
// deliberately independent of the NaN's sign bit, which differs between devices (x86 keeps an
// input NaN's sign and makes Inf * 0 a negative NaN; CUDA returns a positive canonical NaN).
IQ_HD std::uint8_t mx_e2m1_encode(float v) {
  if (v != v) return 0x7u;
  const float a = ::fminf(::fabsf(v), kFp4Max);
  // Boundary between codes k and k+1 goes to the even code: strict above 0.25, 1.25, 2.5, 5;
  // inclusive at 0.75, 1.75, 3.5.
  const std::uint8_t m = std::uint8_t((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) +
                                      (a > 2.5f) + (a >= 3.5f) + (a > 5.0f));
  return std::uint8_t(m | ((f32_bits(v) >> 28) & 8u));
}

// ---- vLLM's CuTe quantizer (Quantizer::kVllmCute) ----
constexpr float kInv448 = 0x1.24924ap-9f;  // the float32 nearest 1/448, bits 0x3b124925
// The exponent byte of fmax(amax, 1e-4) * fl(1/448) rounded up to a power of two: finite -> 1..254,
// an infinite amax -> 255 (bits 0x7f800000 + 0x7fffff = 0x7fffffff).
IQ_HD std::uint32_t cute_exponent(float amax) {
  return ((f32_bits(::fmaxf(amax, kScaleFloor) * kInv448) + 0x7fffffu) >> 23) & 0xffu;
}
// inv = bits((254 - e) << 23) in 32-bit unsigned arithmetic: 2^(127-e); e = 255 gives -Inf.
IQ_HD float cute_inverse(std::uint32_t e) { return f32_from_bits((254u - e) << 23); }
// Its MXFP4 form (source only, docs/RECIPES.md step 15): per block of 32, the exponent of
// fmax(amax, 6 * 2^-126) * fl(1/6) rounded up by the same bit trick, no clamp (1..254 for a finite
// amax, 255 for an infinite one: stage1_exponent below), inv = cute_inverse(e) (-Inf at 255), the
// codes mx_e2m1_encode's (NaN -> 0x7, the PTX ISA's satfinite rule for E2M1: positive MAX_NORM).

// ---- vLLM's V3.2 quantizer (Quantizer::kVllmV32) ----
constexpr float kV32Floor = 1e-10f;
// The code of v = x / q_scale: e4m3fn of sign(v) * min(|v|, 448) (saturation does the min), and
// 0x7e for every NaN v (the clamp keeps 448; the NaNs the engine's kernel meets are positive).
IQ_HD std::uint8_t v32_fp8_code(float x, float q_scale) {
  const float v = x / q_scale;
  if (v != v) return 0x7eu;
  return e4m3fn_encode(v);
}

// ---- vLLM's ROCm quantizer (Quantizer::kVllmFnuz224) ----
// The e4m3fnuz code of v = x / q_scale: every e4m3fnuz code is worth half the e4m3fn code of the
// same bits, so the code of v is the e4m3fn code of 2v (exact; |v| <= 224 for a finite row), with
// -0 written as +0 (0x80 is e4m3fnuz's NaN) and every NaN v giving 0x80.
IQ_HD std::uint8_t fnuz224_code(float x, float q_scale) {
  const float v = x / q_scale;
  if (v != v) return 0x80u;
  const std::uint8_t c = e4m3fn_encode(v * 2.0f);
  return c == 0x80u ? std::uint8_t(0) : c;
}

// ---- SGLang's V3.2 act_quant (Quantizer::kSglangUe8m0) ----
// The code of v = x / q_scale: e4m3fn of clamp(v, -448, 448) (saturation does the clamp), and
// 0xfe (-448) for every NaN v (max(NaN, -448) is -448 there).
IQ_HD std::uint8_t ue8m0_fp8_code(float x, float q_scale) {
  const float v = x / q_scale;
  if (v != v) return 0xfeu;
  return e4m3fn_encode(v);
}

// ---- the FP4 packer of SGLang V4.1 (Quantizer::kFp4Rne, and stage 2 of kFp4TwoStage) ----
// The UE8M0 byte of a block: sf = fmax(amax / 6, 1e-4) (IEEE division, then the floor), its
// exponent rounded up, clamped to [1, 254] (an infinite amax gives 254).
IQ_HD std::uint32_t rne_ue8m0_of_amax(float amax) {
  const std::uint32_t b = f32_bits(::fmaxf(amax / kFp4Max, kScaleFloor));
  const std::uint32_t e = ((b >> 23) & 0xffu) + ((b & 0x7fffffu) != 0u ? 1u : 0u);
  return e < 1u ? 1u : (e > 254u ? 254u : e);
}
// 2^(127 - e) for e in [1, 254], exactly (e = 254: the subnormal 2^-127), so x * it is x / 2^(e-127).
IQ_HD float rne_inverse(std::uint32_t e) { return f32_from_bits(e == 254u ? 0x00400000u : (254u - e) << 23); }
// The E2M1 magnitude (0..7) of min(|v|, 6), nearest with ties to even; NaN -> 7 (6).
IQ_HD std::uint8_t e2m1_magnitude_rne(float v) {
  if (v != v) return 7u;
  const float a = ::fminf(::fabsf(v), kFp4Max);
  return std::uint8_t((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) +
                      (a > 5.0f));
}
// The code: the magnitude, and the sign bit of a negative v on a nonzero magnitude only.
IQ_HD std::uint8_t e2m1_encode_rne(float v) {
  const std::uint8_t m = e2m1_magnitude_rne(v);
  return std::uint8_t(m | ((v < 0.0f && m != 0) ? 8u : 0u));
}
// The value of E2M1 magnitude m (0, 0.5, 1, 1.5, 2, 3, 4, 6).
IQ_HD float e2m1_value(std::uint8_t m) {
  return m < 4u ? float(m) * 0.5f : (m < 6u ? float(m) - 2.0f : (m == 6u ? 4.0f : 6.0f));
}

// ---- stage 1 of SGLang V4.1's rope-pack quantizer (Quantizer::kFp4TwoStage) ----
// The block's exponent: fmax(amax, 6 * 2^-126) * fl(1/6), its exponent rounded up (no clamp: an
// infinite amax gives 255, whose scale is +Inf and inverse bits 0xff800000 = -Inf).
IQ_HD std::uint32_t stage1_exponent(float amax) {
  const std::uint32_t b = f32_bits(::fmaxf(amax, kMxAmaxFloor) * kMxSixth);
  return ((b >> 23) & 0xffu) + ((b & 0x7fffffu) != 0u ? 1u : 0u);
}
// The fake-quantized value: u = fma(x, inv, +0), its E2M1 value (ties to even, saturating at 6,
// NaN -> +6) with the sign of u, times the block scale.
IQ_HD float stage1_value(float x, float inv, float sc) {
  const float u = ::fmaf(x, inv, 0.0f);
  const float g = e2m1_value(e2m1_magnitude_rne(u));
  return (u < 0.0f ? -g : g) * sc;
}

// Step 10 and its variants: weights_out as the recipe's fold says (scale: the row's fp8 scale).
IQ_HD float fold_weight(float w, float weight_scale, float scale) {
  return (w * weight_scale) * scale;
}
// The one NaN of weights_out (docs/RECIPES.md, "NaN"): 0x7fffffff, or 0x7fff0000 (the bf16 NaN
// 0x7fff) for the bf16-rounded fold; every backend writes exactly these bits for any NaN.
template <class R>
IQ_HD constexpr std::uint32_t nan_weight_bits() {
  return R::kFold == WeightFold::kNoScaleBf16 ? 0x7fff0000u : 0x7fffffffu;
}
template <class R>
IQ_HD float canonical_weight(float w) {
  return w != w ? f32_from_bits(nan_weight_bits<R>()) : w;
}
template <class R>
IQ_HD float fold_of(float w, float weight_scale, float head_scale, float scale) {
  switch (R::kFold) {
    case WeightFold::kTimesScale: return fold_weight(w, weight_scale, scale);
    case WeightFold::kNoScale: return w * weight_scale;
    case WeightFold::kScaleThenTwoFactors: return ((w * scale) * weight_scale) * head_scale;
    case WeightFold::kTwoFactors: return (w * weight_scale) * head_scale;
    case WeightFold::kHeadScaleFirst: return ((w * head_scale) * scale) * weight_scale;
    case WeightFold::kNoScaleBf16: return round_bf16(w * weight_scale);
    case WeightFold::kNoWeights: return 0.0f;
  }
  return 0.0f;
}
template <class R>
IQ_HD float weights_out_of(float w, float weight_scale, float head_scale, float scale) {
  return canonical_weight<R>(fold_of<R>(w, weight_scale, head_scale, scale));
}

// The FP4 block quantizers: the 128 values of x (the recipe's steps before done) into 64 code
// pairs and 4 UE8M0 bytes.
template <class R>
IQ_HD void quantize_fp4_row(const float* x, std::uint8_t* out, std::uint8_t* sf) {
  for (int k = 0; k < 4; ++k) {  // blocks of 32 dims
    float amax = 0.0f;
    for (int i = 32 * k; i < 32 * k + 32; ++i) amax = amax_step(amax, x[i]);
    if (R::kQuant == Quantizer::kFp4TwoStage) {
      // Stage 1: fake quantization of the block; stage 2: the packer on its values.
      const std::uint32_t e1 = stage1_exponent(amax);
      const float sc = f32_from_bits(e1 << 23), inv1 = cute_inverse(e1);
      float q[32];
      float amax2 = 0.0f;
      for (int i = 0; i < 32; ++i) {
        q[i] = stage1_value(x[32 * k + i], inv1, sc);
        amax2 = amax_step(amax2, q[i]);
      }
      const std::uint32_t e2 = rne_ue8m0_of_amax(amax2);
      const float inv2 = f32_from_bits((254u - e2) << 23);  // e2 = 254: 0 (the engine's packer)
      sf[k] = std::uint8_t(e2);
      for (int m = 0; m < 16; ++m)
        out[16 * k + m] = std::uint8_t(e2m1_encode_rne(q[2 * m] * inv2) | (e2m1_encode_rne(q[2 * m + 1] * inv2) << 4));
      continue;
    }
    if (R::kQuant == Quantizer::kFp4Rne) {
      const std::uint32_t e = rne_ue8m0_of_amax(amax);
      const float inv = rne_inverse(e);
      sf[k] = std::uint8_t(e);
      for (int m = 16 * k; m < 16 * k + 16; ++m)
        out[m] = std::uint8_t(e2m1_encode_rne(x[2 * m] * inv) | (e2m1_encode_rne(x[2 * m + 1] * inv) << 4));
      continue;
    }
    constexpr bool kCute = R::kQuant == Quantizer::kVllmCute;  // vLLM's CuTe MXFP4: e = 255 for Inf
    const std::uint8_t e = kCute ? std::uint8_t(stage1_exponent(amax))
                                 : (R::kVllm ? mx_ue8m0_of_amax(amax) : ue8m0_of_amax(amax));
    const float inv = ue8m0_inverse(e);
    sf[k] = e;
    for (int m = 16 * k; m < 16 * k + 16; ++m) {
      const float v0 = x[2 * m] * inv, v1 = x[2 * m + 1] * inv;
      out[m] = R::kVllm || kCute ? std::uint8_t(mx_e2m1_encode(v0) | (mx_e2m1_encode(v1) << 4))
                                 : std::uint8_t(e2m1_encode(v0) | (e2m1_encode(v1) << 4));
    }
  }
}

// The whole row for recipe R: x (128 floats, already decoded) is consumed as scratch.
// freqs_row: the position's freqs row (unused without RoPE). out: 128 fp8 codes, or 64 fp4 code
// pairs and sf = 4 UE8M0 bytes (FP4 recipes; else unused). weight_out: written unless the recipe
// has no weights.
template <class R>
IQ_HD void process_row(float* x, const float* freqs_row, float w, float weight_scale, float head_scale,
                       std::uint8_t* out, std::uint8_t* sf, float* weight_out) {
  static_assert(!R::kFp4 || R::kFold == WeightFold::kNoScale || R::kFold == WeightFold::kTwoFactors ||
                    R::kFold == WeightFold::kNoScaleBf16 || R::kFold == WeightFold::kNoWeights,
                "FP4 has one scale per 32 values: it cannot be folded into weights_out");
  static_assert((R::kQuant != Quantizer::kFp4Rne && R::kQuant != Quantizer::kFp4TwoStage) || R::kFp4,
                "the fp4_* quantizers are FP4 only");
  static_assert(R::kQuant != Quantizer::kVllmV32 || !R::kFp4, "the vllm_v32 quantizer is FP8 only");
  static_assert(R::kQuant == Quantizer::kSglang || R::kQuant == Quantizer::kVllmFnuz224 || !R::kFnuz,
                "FNUZ: the re-encoded SGLang FP8 result, or vLLM's ROCm codes");
  static_assert(R::kQuant != Quantizer::kVllmFnuz224 || R::kFnuz, "vllm_fnuz224 writes e4m3fnuz codes");
  static_assert(R::kFp4 || R::kQuant != Quantizer::kSglang || !R::kBf16AfterHadamard,
                "SGLang's FP8 quantizer has no bf16 point after the Hadamard");
  static_assert(!R::kScaleOut || R::kQuant != Quantizer::kSglang, "scale_out: a power-of-two FP8 quantizer");
  static_assert(!R::kScaleOut || !R::kFp4, "scale_out is the FP8 row scale");
  if (R::kRope) rope_row<R>(x, freqs_row);
  if (R::kRope && R::kBf16AfterRope)
    for (int i = 0; i < kRopeDim; ++i) x[R::kRopeOffset + i] = round_bf16(x[R::kRopeOffset + i]);
  if (R::kHadamard) hadamard_row(x);
  if (R::kFp4) {
    for (int i = 0; i < kHeadDim; ++i) {
      if (R::kHadamard) x[i] = x[i] * kHadamardScale;
      if (R::kBf16AfterHadamard) x[i] = round_bf16(x[i]);
    }
    quantize_fp4_row<R>(x, out, sf);
    if (R::kWeights) *weight_out = weights_out_of<R>(w, weight_scale, head_scale, 0.0f);
    return;
  }
  constexpr bool kSglangForm = R::kQuant == Quantizer::kSglang || R::kQuant == Quantizer::kSglang224;
  if (!kSglangForm) {
    float amax = 0.0f;
    for (int i = 0; i < kHeadDim; ++i) {
      if (R::kHadamard) x[i] = x[i] * kHadamardScale;
      if (R::kBf16AfterHadamard) x[i] = round_bf16(x[i]);
      amax = amax_step(amax, x[i]);
    }
    float q_scale;
    if (R::kQuant == Quantizer::kVllmCute) {
      const std::uint32_t e = cute_exponent(amax);
      const float inv = cute_inverse(e);
      q_scale = f32_from_bits(e << 23);
      for (int i = 0; i < kHeadDim; ++i) {
        const float v = x[i] * inv;
        out[i] = v != v ? std::uint8_t(0x7fu) : e4m3fn_encode(v);
      }
    } else if (R::kQuant == Quantizer::kVllmFnuz224) {
      q_scale = pow2_ceil(::fmaxf(amax, kScaleFloor) / 224.0f);
      for (int i = 0; i < kHeadDim; ++i) out[i] = fnuz224_code(x[i], q_scale);
    } else if (R::kQuant == Quantizer::kSglangUe8m0) {
      q_scale = pow2_ceil(::fmaxf(amax, kScaleFloor) * kInv448);
      for (int i = 0; i < kHeadDim; ++i) out[i] = ue8m0_fp8_code(x[i], q_scale);
    } else if (R::kQuant == Quantizer::kVllmV32) {
      q_scale = pow2_ceil(::fmaxf(amax, kV32Floor) * kInv448);
      for (int i = 0; i < kHeadDim; ++i) out[i] = v32_fp8_code(x[i], q_scale);
    } else {  // kVllm
      q_scale = pow2_ceil(::fmaxf(amax, kScaleFloor) / kFp8Max);
      for (int i = 0; i < kHeadDim; ++i) out[i] = vllm_fp8_code(x[i], q_scale);
    }
    if (R::kWeights) *weight_out = weights_out_of<R>(w, weight_scale, head_scale, q_scale);
    if (R::kScaleOut) std::memcpy(sf, &q_scale, 4);
    return;
  }
  const float scale = scale_and_amax_row<R>(x);
  const float inv = 1.0f / scale;
  for (int i = 0; i < kHeadDim; ++i) {
    const std::uint8_t c = quantize_value(x[i], inv, sglang_fp8_max<R>());
    out[i] = R::kFnuz ? fnuz_from_fn(c) : c;
  }
  const float wo = weights_out_of<R>(w, weight_scale, head_scale, scale);
  if (R::kWeights) *weight_out = R::kFnuz ? wo * 2.0f : wo;
}

}  // namespace detail
}  // namespace indexer_q
