// Scalar math shared by host and device code: the element codecs (bf16, fp16, fp8 e4m3fn)
// and the row pipeline of SPEC.md, step by step. Every backend reproduces exactly what
// these functions compute; the scalar reference *is* these functions.
//
// Host code including this header must be built with -ffp-contract=off (the project's
// CMake sets it) so that no product is fused or split behind our back; the one fused
// multiply-add of the spec is written explicitly.
#pragma once

#include <cstdint>
#include <cstring>
#include <cmath>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define IQ_HD __host__ __device__ __forceinline__
#else
#define IQ_HD inline
#endif

namespace indexer_q {
namespace detail {

constexpr int kHeadDim = 128;
constexpr int kRopeDim = 64;            // the last 64 dims are rotated
constexpr int kRopeOffset = kHeadDim - kRopeDim;
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

// ---- the row pipeline (SPEC.md steps 2..10) ----

// Step 2: RoPE on dims 64..127, interleaved (re, im) pairs; f = freqs row of the position.
IQ_HD void rope_row(float* x, const float* f) {
  for (int j = 0; j < kRopeDim / 2; ++j) {
    const float xr = x[kRopeOffset + 2 * j];
    const float xi = x[kRopeOffset + 2 * j + 1];
    const float c = f[2 * j];
    const float s = f[2 * j + 1];
    const float xis = xi * s;
    const float xic = xi * c;
    x[kRopeOffset + 2 * j] = ::fmaf(xr, c, -xis);
    x[kRopeOffset + 2 * j + 1] = ::fmaf(xr, s, xic);
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

// Steps 4..7: scale by 1/sqrt(128) in place, then the row's quantization scale.
IQ_HD float scale_and_amax_row(float* y) {
  float amax = 0.0f;
  for (int i = 0; i < kHeadDim; ++i) {
    y[i] = y[i] * kHadamardScale;
    amax = ::fmaxf(amax, ::fabsf(y[i]));
  }
  // amax starts at 0 rather than NaN: with step 6's fmax(1e-4, .) both give the same scale.
  return ::fmaxf(kScaleFloor, amax) / kFp8Max;
}

// Steps 8..9 for one value, given inv = 1 / scale.
IQ_HD std::uint8_t quantize_value(float y, float inv) {
  const float v = ::fmaxf(::fminf(y * inv, kFp8Max), -kFp8Max);
  return e4m3fn_encode(v);
}

// Step 10.
IQ_HD float fold_weight(float w, float weight_scale, float scale) {
  return (w * weight_scale) * scale;
}

// The whole row: x (128 floats, already decoded) is consumed as scratch.
IQ_HD void process_row(float* x, const float* freqs_row, float w, float weight_scale,
                       std::uint8_t* out, float* weight_out) {
  rope_row(x, freqs_row);
  hadamard_row(x);
  const float scale = scale_and_amax_row(x);
  const float inv = 1.0f / scale;
  for (int i = 0; i < kHeadDim; ++i) out[i] = quantize_value(x[i], inv);
  *weight_out = fold_weight(w, weight_scale, scale);
}

}  // namespace detail
}  // namespace indexer_q
