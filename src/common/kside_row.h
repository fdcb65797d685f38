// The key side's scalar steps (docs/KSIDE-SPEC.md section 2), shared by host and device code, and
// the cache placement of section 3. kside_row<KR> composed from these steps IS the reference:
// every backend reproduces its bytes. Steps that are the query side's arithmetic exactly (RoPE
// on dims 64..127 with the interleaved table, the Hadamard butterflies, the 1/sqrt(128)
// multiply, the SGLang FP8 row scale and e4m3fn codes, the UE8M0 block scale and e2m1 codes
// with ties toward zero) are taken from src/common/row.h, not written again.
//
// The reciprocal square root of step 5 is a parameter: the GPU's MUFU.RSQ is not correctly
// rounded, so the host passes the exact table model (src/common/rsq_sm90.h, RsqSm90) and CUDA
// passes the hardware instruction (RsqHw below: rsqrtf, which is MUFU.RSQ on sm_90).
//
// Host code including this header must be built with -ffp-contract=off (the project's CMake
// sets it); every fma of the spec is written explicitly.
#pragma once

#include <cstdint>

#include "common/kside_problem.h"
#include "common/row.h"

namespace indexer_q {
namespace detail {

constexpr float kKsideSsScale = 0x1p-7f;  // 1/128: mean of the 128 squares

// Element i of a bf16 / fp16 / fp32 array, as a float (exact).
IQ_HD float kside_load(const void* base, DType dt, std::int64_t i) {
  if (dt == DType::kBFloat16) return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  if (dt == DType::kFloat16) return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

// Step 2: sum of squares of dims 4l..4l+3, fma-chained (one GPU lane's share).
IQ_HD float kside_group_ss(const float* x4) {
  return ::fmaf(x4[3], x4[3], ::fmaf(x4[2], x4[2], ::fmaf(x4[1], x4[1], x4[0] * x4[0])));
}

// Step 3: the xor butterfly over 32 partial sums, masks 16, 8, 4, 2, 1. Lane l and lane l ^ m
// end each round equal (a + b == b + a in IEEE), so halving the array in place gives lane 0's
// value: v[l] = v[l] + v[l + m] for l < m.
IQ_HD float kside_butterfly_sum(float* v /* 32 partial sums, consumed */) {
  for (int m = 16; m >= 1; m >>= 1)
    for (int l = 0; l < m; ++l) v[l] = v[l] + v[l + m];
  return v[0];
}

// Steps 2-4: t = fma(ss, 2^-7, eps), the argument of the reciprocal square root.
IQ_HD float kside_rms_arg(const float* x, float eps) {
  float v[32];
  for (int l = 0; l < 32; ++l) v[l] = kside_group_ss(x + 4 * l);
  return ::fmaf(kside_butterfly_sum(v), kKsideSsScale, eps);
}

// Step 6: d = (x * nf) * w, left product first.
IQ_HD float kside_norm(float x, float nf, float w) { return (x * nf) * w; }

#if defined(__CUDACC__) || defined(__HIPCC__)
// The device's reciprocal square root: rsqrtf is MUFU.RSQ on sm_90 without fast-math (the model
// the host follows is src/common/rsq_sm90.h; docs/KSIDE-SPEC.md section 7 for other GPUs).
struct RsqHw {
  __device__ __forceinline__ float operator()(float x) const { return rsqrtf(x); }
};
#endif

// FP8 store of steps 9-13: codes[i] = e4m3fn(clip(y[i] * inv)), scale_bytes = the fp32 scale's
// bytes (little endian). y holds the 128 values after the Hadamard multiply.
IQ_HD void kside_quant_fp8(const float* y, std::uint8_t* codes, std::uint8_t* scale_bytes) {
  float amax = 0.0f;  // NaN ignored; starting at 0 instead of -inf is the same after fmaxf(1e-4, .)
  for (int i = 0; i < kHeadDim; ++i) amax = amax_step(amax, y[i]);
  const float scale = ::fmaxf(kScaleFloor, amax) / kFp8Max;
  const float inv = 1.0f / scale;
  for (int i = 0; i < kHeadDim; ++i) codes[i] = quantize_value(y[i], inv);
  const std::uint32_t sb = f32_bits(scale);
  for (int k = 0; k < 4; ++k) scale_bytes[k] = std::uint8_t(sb >> (8 * k));
}

// FP4 store (block steps 1-6): 4 blocks of 32 dims, UE8M0 scale rounded up, e2m1 ties toward
// zero, no negative zero; codes[m] = code(y[2m]) | code(y[2m + 1]) << 4.
IQ_HD void kside_quant_fp4(const float* y, std::uint8_t* codes, std::uint8_t* scale_bytes) {
  for (int b = 0; b < 4; ++b) {
    float amax = 0.0f;
    for (int i = 32 * b; i < 32 * b + 32; ++i) amax = amax_step(amax, y[i]);
    const std::uint8_t e = ue8m0_of_amax(amax);
    const float inv = ue8m0_inverse(e);
    scale_bytes[b] = e;
    for (int m = 16 * b; m < 16 * b + 16; ++m)
      codes[m] = std::uint8_t(e2m1_encode(y[2 * m] * inv) | (e2m1_encode(y[2 * m + 1] * inv) << 4));
  }
}

// One token, steps 1-13: x, w = the token's 128 values and the RMSNorm weight (as floats),
// freqs_row = the position's row of the table, codes = KR::kCodeBytes bytes, scale_bytes = 4
// bytes; rsq = the reciprocal square root model (RsqSm90 on the host, RsqHw on CUDA).
template <class KR, class Rsq>
IQ_HD void kside_row(const float* x, const float* w, float eps, const float* freqs_row,
                     std::uint8_t* codes, std::uint8_t* scale_bytes, Rsq rsq) {
  const float nf = rsq(kside_rms_arg(x, eps));
  float d[kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) d[i] = kside_norm(x[i], nf, w[i]);
  rope_row<KR>(d, freqs_row);  // dims 64..127, interleaved: fma(xr, c, -(xi * s)), fma(xr, s, xi * c)
  hadamard_row(d);
  for (int i = 0; i < kHeadDim; ++i) d[i] = d[i] * kHadamardScale;
  if (KR::kFp4)
    kside_quant_fp4(d, codes, scale_bytes);
  else
    kside_quant_fp8(d, codes, scale_bytes);
}

// Section 3: where slot s (>= 0) of a cache of page_bytes-byte pages lands. codes: row r's
// code bytes; scales: its 4 scale bytes (after the page's page_size code rows).
template <class KR>
IQ_HD void kside_token_ptrs(std::uint8_t* cache, std::int64_t page_bytes, std::int64_t page_size,
                            int log2_page, std::int64_t slot, std::uint8_t** codes,
                            std::uint8_t** scales) {
  const std::int64_t page = slot >> log2_page;
  const std::int64_t r = slot & (page_size - 1);
  std::uint8_t* base = cache + page * page_bytes;
  *codes = base + KR::kCodeBytes * r;
  *scales = base + KR::kCodeBytes * page_size + 4 * r;
}

// A position of either index dtype.
IQ_HD std::int64_t kside_position(const void* positions, DType dt, std::int64_t t) {
  return dt == DType::kInt32 ? std::int64_t(static_cast<const std::int32_t*>(positions)[t])
                             : static_cast<const std::int64_t*>(positions)[t];
}

}  // namespace detail
}  // namespace indexer_q
