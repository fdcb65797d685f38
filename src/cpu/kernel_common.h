// What the SIMD kernel translation units (kernel_avx2.cpp, kernel_avx512.cpp) share, in the
// Highway style: this header is included by each of them and compiled once per ISA TU with that
// TU's flags. Everything here has internal linkage (an anonymous namespace), so no copy built
// with AVX-512 flags can ever be picked by the linker for another TU (see cpu_internal.h).
// Both TUs are built with at least -mavx2 -mfma -mf16c, so the __m256 helpers are valid in both.
//
// It holds: the constants of the row math (the same values as src/common/row.h, which the
// kernel TUs must not include), the scalar pieces (weights, positions), the scale steps that
// work on a few lanes (FP8 row scale, FP4 UE8M0 block exponents), and the row driver
// `run_rows<K, R, kDt>` that walks tokens and software-pipelines row pairs for any ISA policy K
// and any recipe R (RecipeT<Id>, src/common/recipe.h: constexpr traits only).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "common/recipe.h"
#include "cpu/cpu_internal.h"

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

// ---- constants of SPEC.md / docs/RECIPES.md (the same values as src/common/row.h) ----
constexpr float kHadamardK = 0x1.6a09e6p-4f;  // bits 0x3db504f3
constexpr float kFp8MaxK = 448.0f;
constexpr float kFp4MaxK = 6.0f;
constexpr float kScaleFloorK = 1e-4f;
// vLLM's MXFP4 (docs/RECIPES.md): the block amax floor 6 * 2^-126 and fl(1/6).
constexpr float kMxAmaxFloorK = 0x1.8p-124f;  // bits 0x01c00000
constexpr float kMxSixthK = 0x1.555556p-3f;
// vLLM's CuTe and V3.2 quantizers: fl(1/448) and V3.2's amax floor.
constexpr float kInv448K = 0x1.24924ap-9f;  // bits 0x3b124925
constexpr float kV32FloorK = 1e-10f;
// The gfx942 forms' FP8 limit (Quantizer::kSglang224, kVllmFnuz224).
constexpr float kFp8Max224K = 224.0f;

inline float load_scalar(const void* base, DType dt, std::int64_t i) {
  if (dt == DType::kFloat32) return static_cast<const float*>(base)[i];
  const std::uint16_t h = static_cast<const std::uint16_t*>(base)[i];
  if (dt == DType::kFloat16) return _cvtsh_ss(h);
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::int64_t position_of(const Problem& p, std::int64_t b) {
  return p.pos_dtype == DType::kInt32 ? std::int64_t(static_cast<const std::int32_t*>(p.positions)[b])
                                      : static_cast<const std::int64_t*>(p.positions)[b];
}

// Step 10 (and its variants): weights_out of row r = b * H + h, as the recipe's fold says (the
// products in row.h's order). scale is the row's FP8 scale (vLLM: the power-of-two q_scale;
// unused by recipes that fold none).
// row.h's round_bf16 on one float: nearest even, NaN quieted (bit 22 set).
inline float round_bf16_scalar(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
  else u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// WeightFold::kNoWeights: weight and weights_out are null, nothing is read or written.
// (always_inline: with the recipes of the list GCC's unit-growth limit otherwise leaves some calls
// out of line, which moved the existing recipes' instruction counts.)
template <class R>
__attribute__((always_inline)) inline void write_weight(const Problem& p, std::int64_t r, std::int64_t b, std::int64_t h, float scale) {
  if constexpr (!R::kWeights) return;
  const float w = load_scalar(p.weight, p.weight_dtype, b * p.weight_stride_b + h);
  float wo;
  if (R::kFold == WeightFold::kTimesScale) wo = (w * p.weight_scale) * scale;
  else if (R::kFold == WeightFold::kNoScale) wo = w * p.weight_scale;
  else if (R::kFold == WeightFold::kScaleThenTwoFactors) wo = ((w * scale) * p.weight_scale) * p.head_scale;
  else if (R::kFold == WeightFold::kHeadScaleFirst) wo = ((w * p.head_scale) * scale) * p.weight_scale;
  else if (R::kFold == WeightFold::kNoScaleBf16) wo = round_bf16_scalar(w * p.weight_scale);
  else wo = (w * p.weight_scale) * p.head_scale;  // kTwoFactors
  if (R::kFnuz && R::kQuant != Quantizer::kVllmFnuz224) wo = wo * 2.0f;  // exact (vllm_fnuz224: no x2)
  if (wo != wo) {  // the one NaN of weights_out (row.h nan_weight_bits, docs/RECIPES.md "NaN")
    const std::uint32_t nan_bits = R::kFold == WeightFold::kNoScaleBf16 ? 0x7fff0000u : 0x7fffffffu;
    std::memcpy(&wo, &nan_bits, sizeof wo);
  }
  p.weights_out[r] = wo;
}

// scale_out (R::kScaleOut, FP8 only): the row's scale (the power-of-two q_scale) also written as a
// float32 at q_sf + 4 * r. Nothing for the other recipes.
template <class R>
__attribute__((always_inline)) inline void write_scale_out(const Problem& p, std::int64_t r, float scale) {
  if constexpr (R::kScaleOut) std::memcpy(p.q_sf + 4 * r, &scale, 4);
}

template <int kN>
inline float lane_of(__m128 v) {
  return _mm_cvtss_f32(_mm_shuffle_ps(v, v, _MM_SHUFFLE(kN, kN, kN, kN)));
}

// Steps 6-7 (FP8): lanes of am hold the rows' amax; true IEEE divisions (fmax: maxps returns
// its 2nd operand, the floor, when amax is NaN).
inline void fp8_scales(__m128 am, __m128& scale, __m128& inv) {
  scale = _mm_div_ps(_mm_max_ps(am, _mm_set1_ps(kScaleFloorK)), _mm_set1_ps(kFp8MaxK));
  inv = _mm_div_ps(_mm_set1_ps(1.0f), scale);
}

// FP4 block scales for up to 8 blocks at once (lane 4n + k = block k of row n):
// s = fmax(1e-4, amax) / 6 (IEEE division); e = exponent bits of s, plus one when its mantissa
// is nonzero (adding 0x7fffff carries into the exponent exactly then; s = Inf gives 255);
// inv = the float with bits (254 - e) << 23 in 32-bit unsigned arithmetic.
inline void fp4_scales(__m256 am, __m256& inv, __m256i& e) {
  const __m256 s = _mm256_div_ps(_mm256_max_ps(am, _mm256_set1_ps(kScaleFloorK)), _mm256_set1_ps(kFp4MaxK));
  e = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(s), _mm256_set1_epi32(0x7fffff)), 23);
  inv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
}

// vLLM's FP8 row scale (Quantizer::kVllm): s = fmax(amax, 1e-4) / 448 (IEEE division; amax is
// never NaN), rounded up to a power of two from its bits: (bits(s) + 0x7fffff) with the mantissa
// cleared (s > 0, so no carry reaches the sign; s = +Inf stays +Inf). inv = 1 / q_scale, a true
// division: exact (a power of two in [2^-120, 2^22], normal), 0 for q_scale = Inf. x * inv is then
// the same float as x / q_scale for every x (both are the one rounding of the same real; Inf * 0
// and Inf / Inf are both the default NaN).
inline void vllm_fp8_scales(__m128 am, __m128& scale, __m128& inv) {
  const __m128 s = _mm_div_ps(_mm_max_ps(am, _mm_set1_ps(kScaleFloorK)), _mm_set1_ps(kFp8MaxK));
  scale = _mm_castsi128_ps(_mm_and_si128(_mm_add_epi32(_mm_castps_si128(s), _mm_set1_epi32(0x7fffff)),
                                         _mm_set1_epi32(int(0xff800000u))));
  inv = _mm_div_ps(_mm_set1_ps(1.0f), scale);
}

// vLLM's MXFP4 block scales for up to 8 blocks (lanes as fp4_scales): ratio = fmax(amax,
// 6 * 2^-126) * fl(1/6) (amax is never NaN); e = exponent of ratio rounded up, i.e.
// (bits(ratio) + 0x7fffff) >> 23 (ratio > 0: no carry into the sign; finite ratio <= FLT_MAX / 6
// gives 1..253), 255 only for ratio = Inf, which is 254; inv = bits (254 - e) << 23 (0 at 254).
// kCute (vLLM's CuTe MXFP4, Quantizer::kVllmCute): 255 is kept, inv = bits 0xff800000 = -Inf.
template <bool kCute = false>
inline void mx_scales(__m256 am, __m256& inv, __m256i& e) {
  const __m256 ratio = _mm256_mul_ps(_mm256_max_ps(am, _mm256_set1_ps(kMxAmaxFloorK)), _mm256_set1_ps(kMxSixthK));
  e = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(ratio), _mm256_set1_epi32(0x7fffff)), 23);
  if (!kCute) e = _mm256_min_epu32(e, _mm256_set1_epi32(254));
  inv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
}

// Power-of-two row scales from fmax(amax, floor) * factor (IEEE product; amax NaN: the floor).
// pow2_mask_scales: q_scale = that product rounded up to a power of two from its bits: (bits +
// 0x7fffff) with the mantissa cleared (positive, so no carry reaches the sign; +Inf stays +Inf),
// inv = 1 / q_scale (exact, or 0 for +Inf): x * inv is x / q_scale, as in vllm_fp8_scales.
//   vLLM's V3.2 quantizer (Quantizer::kVllmV32): floor 1e-10, factor fl(1/448): q_scale in
//   [2^-42, 2^120] or +Inf for an infinite amax;
//   SGLang's V3.2 act_quant (Quantizer::kSglangUe8m0): floor 1e-4, factor fl(1/448): q_scale in
//   [2^-22, 2^120] or +Inf (Inf / Inf and Inf * 0: NaN).
inline void pow2_mask_scales(__m128 am, float floor, float factor, __m128& scale, __m128& inv) {
  const __m128 s = _mm_mul_ps(_mm_max_ps(am, _mm_set1_ps(floor)), _mm_set1_ps(factor));
  scale = _mm_castsi128_ps(_mm_and_si128(_mm_add_epi32(_mm_castps_si128(s), _mm_set1_epi32(0x7fffff)),
                                         _mm_set1_epi32(int(0xff800000u))));
  inv = _mm_div_ps(_mm_set1_ps(1.0f), scale);
}

// pow2_exp_scales: e = the exponent of the product rounded up ((bits + 0x7fffff) >> 23: 1..254 for
// a finite amax, 255 for +Inf; not clamped), scale = bits e << 23 (+Inf at 255), inv = bits
// (254 - e) << 23 in 32-bit unsigned arithmetic (0 at 254, -Inf at 255).
//   vLLM's CuTe FP8 row scale (Quantizer::kVllmCute): floor 1e-4, factor fl(1/448);
//   stage 1 of Quantizer::kFp4TwoStage, the exponents of up to 4 blocks (lane k = block k):
//   floor 6 * 2^-126, factor fl(1/6) (scale = the stage-1 sc, inv = its inv1).
inline void pow2_exp_scales(__m128 am, float floor, float factor, __m128& scale, __m128& inv) {
  const __m128 s = _mm_mul_ps(_mm_max_ps(am, _mm_set1_ps(floor)), _mm_set1_ps(factor));
  const __m128i e = _mm_srli_epi32(_mm_add_epi32(_mm_castps_si128(s), _mm_set1_epi32(0x7fffff)), 23);
  scale = _mm_castsi128_ps(_mm_slli_epi32(e, 23));
  inv = _mm_castsi128_ps(_mm_slli_epi32(_mm_sub_epi32(_mm_set1_epi32(254), e), 23));
}

// The gfx942 forms' FP8 row scales (224 in place of 448):
// Quantizer::kSglang224: fp8_scales with 224: scale = fmax(1e-4, amax) / 224, inv = 1 / scale (IEEE
// divisions; maxps returns the floor for a NaN amax).
// Quantizer::kVllmFnuz224: q_scale = pow2_ceil(fmax(amax, 1e-4) / 224) as in vllm_fp8_scales (a
// power of two in [2^-21, 2^121], or +Inf for an infinite amax), and inv = 2 / q_scale (exact, or
// 0): the x2 of the e4m3fnuz code (row.h's fnuz224_code: the e4m3fn code of 2 * (x / q_scale)) is
// folded in. x * inv differs from 2 * (x / q_scale) only where x / q_scale is below 2^-126, whose
// code is 0 either way (the sign goes with -0 -> +0); +-Inf * 0 and Inf / Inf are both NaN.
template <Quantizer kQ>
inline void gfx942_fp8_scales(__m128 am, __m128& scale, __m128& inv) {
  const __m128 s = _mm_div_ps(_mm_max_ps(am, _mm_set1_ps(kScaleFloorK)), _mm_set1_ps(kFp8Max224K));
  if (kQ == Quantizer::kSglang224) {
    scale = s;
    inv = _mm_div_ps(_mm_set1_ps(1.0f), scale);
  } else {
    scale = _mm_castsi128_ps(_mm_and_si128(_mm_add_epi32(_mm_castps_si128(s), _mm_set1_epi32(0x7fffff)),
                                           _mm_set1_epi32(int(0xff800000u))));
    inv = _mm_div_ps(_mm_set1_ps(2.0f), scale);
  }
}

// SGLang V4.1's FP4 packer (Quantizer::kFp4Rne, and stage 2 of kFp4TwoStage), up to 8 blocks:
// e = the exponent of sf = fmax(amax / 6, 1e-4) rounded up, clamped to 254 (row.h's
// rne_ue8m0_of_amax), from the bits of amax, without the division (the CUDA kernel's
// rne_ue8m0_of_amax_fast): for a normal a = m 2^E, RN(a / 6) is the power of two 2^(E-2) only for
// m = 1.5, else its exponent is E-2 (m > 1.5) or E-3 (m < 1.5) with a nonzero mantissa, so e =
// field(a) - 2 + (mantissa(a) > 0.5) = (bits(a) + 0x3fffff - (2 << 23)) >> 23. The floor: 1e-4's
// byte, 114, is also that of every a <= 6 * 2^-13 = 0x1.8p-11 and of that value itself, so a is
// floored at it (maxps: amax is never NaN). A finite amax gives at most 253; an infinite one 253
// by the formula, plus one from the compare (row.h: 255 clamped to 254). inv:
// kFp4Rne: 2^(127 - e) exactly, the subnormal 2^-127 (bits 0x00400000) at e = 254;
// kFp4TwoStage: bits (254 - e) << 23, i.e. 0 at e = 254 (the engine's packer).
template <bool kTwoStage>
inline void rne_scales(__m256 am, __m256& inv, __m256i& e) {
  const __m256i b = _mm256_castps_si256(_mm256_max_ps(am, _mm256_set1_ps(0x1.8p-11f)));
  const __m256i inf = _mm256_cmpeq_epi32(b, _mm256_set1_epi32(0x7f800000));
  e = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x3fffff - (2 << 23))), 23), inf);
  __m256i ib = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23);
  if (!kTwoStage) ib = _mm256_blendv_epi8(ib, _mm256_set1_epi32(0x00400000), inf);
  inv = _mm256_castsi256_ps(ib);
}

// The test hook of the step above (rne_ue8m0_<isa>, cpu_internal.h): UE8M0 bytes and inverses of
// n block maxima (n a multiple of 8), the same code in each ISA's translation unit.
inline void rne_ue8m0_hook(const float* amax, std::uint8_t* e, float* inv, std::int64_t n) {
  for (std::int64_t i = 0; i + 8 <= n; i += 8) {
    __m256 vinv;
    __m256i ve;
    rne_scales<false>(_mm256_loadu_ps(amax + i), vinv, ve);
    alignas(32) std::int32_t ei[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(ei), ve);
    _mm256_storeu_ps(inv + i, vinv);
    for (int j = 0; j < 8; ++j) e[i + j] = std::uint8_t(ei[j]);
  }
}

// Stage 1 of Quantizer::kFp4TwoStage (see pow2_exp_scales): inv1 and sc of up to 4 blocks.
inline void stage1_scales(__m128 am, __m128& inv1, __m128& sc) { pow2_exp_scales(am, kMxAmaxFloorK, kMxSixthK, sc, inv1); }

// The recipe's scale steps (SGLang's, vLLM's, SGLang V3.2 act_quant's or SGLang V4.1's quantizer).
template <class R>
inline void row_scales_fp8(__m128 am, __m128& scale, __m128& inv) {
  if constexpr (R::kQuant == Quantizer::kSglang224 || R::kQuant == Quantizer::kVllmFnuz224) {  // gfx942
    gfx942_fp8_scales<R::kQuant>(am, scale, inv);
    return;
  }
  if (R::kQuant == Quantizer::kVllm) vllm_fp8_scales(am, scale, inv);
  else if (R::kQuant == Quantizer::kVllmV32) pow2_mask_scales(am, kV32FloorK, kInv448K, scale, inv);
  else if (R::kQuant == Quantizer::kVllmCute) pow2_exp_scales(am, kScaleFloorK, kInv448K, scale, inv);
  else if (R::kQuant == Quantizer::kSglangUe8m0) pow2_mask_scales(am, kScaleFloorK, kInv448K, scale, inv);
  else fp8_scales(am, scale, inv);
}
template <class R>
inline void block_scales_fp4(__m256 am, __m256& inv, __m256i& e) {
  if (R::kQuant == Quantizer::kVllm) mx_scales(am, inv, e);
  else if (R::kQuant == Quantizer::kVllmCute) mx_scales<true>(am, inv, e);
  else if (R::kQuant == Quantizer::kFp4Rne) rne_scales<false>(am, inv, e);
  else if (R::kQuant == Quantizer::kFp4TwoStage) rne_scales<true>(am, inv, e);
  else fp4_scales(am, inv, e);
}

// The FP8 code of x * inv: vLLM's and CuTe's (NaN -> 0x7f), SGLang V3.2 act_quant's (NaN -> 0xfe)
// or the clamp's (NaN -> 0x7e: SGLang, and vLLM V3.2, whose e4m3fn_encode(v) saturates exactly as
// the clamp does).
template <class R>
constexpr bool kNanCode7f = R::kQuant == Quantizer::kVllm || R::kQuant == Quantizer::kVllmCute;
// SGLang V3.2 act_quant's code (row.h's ue8m0_fp8_code): the clamp's, but a NaN gives -448 (0xfe).
template <class R>
constexpr bool kNanCodeFe = R::kQuant == Quantizer::kSglangUe8m0;
// The FP4 encoders: vLLM's (sign on every code), the V4.1 packer's (ties to even, sign only on a
// nonzero code), SGLang's (ties to the smaller magnitude).
template <class R>
constexpr bool kRneFp4 = R::kQuant == Quantizer::kFp4Rne || R::kQuant == Quantizer::kFp4TwoStage;
// vLLM's encoder serves its Triton MXFP4 form and its CuTe one (Quantizer::kVllmCute on E2M1).
template <class R>
constexpr bool kMxFp4 = R::kQuant == Quantizer::kVllm || R::kQuant == Quantizer::kVllmCute;

// The 4 UE8M0 bytes of row n (lanes 4n..4n+3 of e) as a little-endian uint32.
inline std::uint32_t fp4_sf_word(__m256i e, int n) {
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(e, pick);
  return n == 0 ? std::uint32_t(_mm256_extract_epi32(b, 0)) : std::uint32_t(_mm256_extract_epi32(b, 4));
}

// Maxima of 4 vectors of 8 (none NaN): lane k = max of m[k].
inline __m128 max4x8(__m256 m0, __m256 m1, __m256 m2, __m256 m3) {
  const __m256 a = _mm256_max_ps(_mm256_unpacklo_ps(m0, m1), _mm256_unpackhi_ps(m0, m1));  // m0 m1 m0 m1
  const __m256 b = _mm256_max_ps(_mm256_unpacklo_ps(m2, m3), _mm256_unpackhi_ps(m2, m3));
  const __m256 c = _mm256_max_ps(_mm256_shuffle_ps(a, b, 0x44), _mm256_shuffle_ps(a, b, 0xEE));  // m0 m1 m2 m3
  return _mm_max_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
}

// What a kernel's front phase hands to its back phase for kRows rows (lane n = row n for
// FP8; lane 4n + k = block k of row n for FP4).
struct RowScales {
  __m128 scale, inv;  // FP8
  __m256 inv4;        // FP4
  __m256i e4;         // FP4
  bool slow = false;  // AVX-512: the rows need the exact (NaN-aware) encoders
};

// The scales of kRows rows from their amax registers (FP8: lane 0 of amax[n] is row n's amax;
// FP4: lane k of amax[n] is block k's): steps 6-7, one division instruction for all the rows.
template <class R, int kRows>
inline RowScales scales_of(const __m128 (&amax)[kRows]) {
  RowScales rs;
  if (R::kFp4) {
    const __m256 am = _mm256_set_m128(kRows == 1 ? _mm_setzero_ps() : amax[kRows - 1], amax[0]);
    block_scales_fp4<R>(am, rs.inv4, rs.e4);
  } else {
    row_scales_fp8<R>(kRows == 1 ? amax[0] : _mm_unpacklo_ps(amax[0], amax[kRows - 1]), rs.scale, rs.inv);
  }
  return rs;
}

// Where the bodies go: FP8 bodies are inlined into the row-pair driver (with many recipes in a
// translation unit GCC otherwise calls them out of line, which measured slower: 617 -> 656
// instructions per row on AVX2); FP4 front bodies stay behind a call the compiler may inline or
// not (forcing them inline added instructions on AVX2: 768 -> 802), and so do FP4 back bodies
// unless K::kFp4BackInline (AVX-512: left to GCC, vllm_v4_mxfp4's went out of line, 232 -> 272).
// K::kFp4FrontInline inlines the FP4 front bodies of the recipes with the Hadamard (AVX-512:
// v4_fp4 369 -> 346 instructions per row; inlining the others too cost +2 on
// sgl_v41_fp4_rope_pack and +5 on sgl_v41_fp4_quant_rne).
// (`inline` matters: it is the hint GCC gave the in-class definitions this replaced; without it the
// FP4 path measured 795 instructions per row instead of 768.)
template <class K, class R, DType kDt, int kRows>
inline RowScales front_outlined(const Problem& p, std::int64_t r0, const typename K::Freqs& fq,
                                const typename K::Consts& c, float (*buf)[128]) {
  return K::template front_body<R, kDt, kRows>(p, r0, fq, c, buf);
}
template <class K, class R, DType kDt, int kRows>
inline void back_outlined(const Problem& p, std::int64_t r0, std::int64_t b, std::int64_t h0,
                          const typename K::Consts& c, const float (*buf)[128], const RowScales& rs) {
  K::template back_body<R, kDt, kRows>(p, r0, b, h0, c, buf, rs);
}
template <class K, class R, DType kDt, int kRows>
__attribute__((always_inline)) inline RowScales front_of(const Problem& p, std::int64_t r0,
                                                         const typename K::Freqs& fq,
                                                         const typename K::Consts& c, float (*buf)[128]) {
  if constexpr (R::kFp4 && !(K::kFp4FrontInline && R::kHadamard)) return front_outlined<K, R, kDt, kRows>(p, r0, fq, c, buf);
  else return K::template front_body<R, kDt, kRows>(p, r0, fq, c, buf);
}
template <class K, class R, DType kDt, int kRows>
__attribute__((always_inline)) inline void back_of(const Problem& p, std::int64_t r0, std::int64_t b,
                                                   std::int64_t h0, const typename K::Consts& c,
                                                   const float (*buf)[128], const RowScales& rs) {
  if constexpr (R::kFp4 && !K::kFp4BackInline) back_outlined<K, R, kDt, kRows>(p, r0, b, h0, c, buf, rs);
  else K::template back_body<R, kDt, kRows>(p, r0, b, h0, c, buf, rs);
}

// The row driver, one body for every ISA policy K and every recipe R. K provides:
//   K::Consts (its vector constants), K::Freqs (a token's cos/sin registers),
//   K::load_freqs<R, kDt>(const float* freqs_row, const Consts&, Freqs&),
//   K::front_body<R, kDt, kRows>(p, r0, freqs, consts, buf) -> RowScales: steps 1-7 of kRows
//     rows (results in buf, K's layout), and
//   K::back_body<R, kDt, kRows>(p, r0, b, h0, consts, buf, scales): codes, sf bytes, weights_out
//   (both always_inline; front_of / back_of below decide where they are inlined), and
//   K::kFp4BackInline, K::kFp4FrontInline (bools: FP4 bodies inlined, see front_of / back_of).
// Rows of one token go in pairs, software-pipelined: the front of pair i is issued before the
// back of pair i - 1, so that one pair's amax reduction and divisions (a long dependency chain)
// overlap with the other pair's independent encoding work.
// (The Problem is copied into a local: the code stores go through uint8_t pointers, which may
// alias anything reachable, so fields read through the caller's reference would be re-read
// from memory after every store; the local's fields stay in registers.)
template <class K, class R, DType kDt>
void run_rows(const Problem& problem, std::int64_t row_begin, std::int64_t row_end) {
  const Problem p = problem;
  const typename K::Consts c;
  const std::int64_t H = p.H;
  std::int64_t r = row_begin;
  while (r < row_end) {
    const std::int64_t b = r / H;
    const std::int64_t token_end = b * H + H < row_end ? b * H + H : row_end;
    typename K::Freqs fq;
    // Without RoPE, freqs and positions are null and never read (fq stays unused).
    if constexpr (R::kRope) K::template load_freqs<R, kDt>(p.freqs + position_of(p, b) * 64, c, fq);
    if (r + 2 <= token_end) {
      alignas(64) float buf[2][2][128];
      int cur = 0;
      RowScales prev = front_of<K, R, kDt, 2>(p, r, fq, c, buf[cur]);
      std::int64_t prev_r = r;
      for (r += 2; r + 2 <= token_end; r += 2) {
        const RowScales rs = front_of<K, R, kDt, 2>(p, r, fq, c, buf[cur ^ 1]);
        back_of<K, R, kDt, 2>(p, prev_r, b, prev_r - b * H, c, buf[cur], prev);
        prev = rs;
        prev_r = r;
        cur ^= 1;
      }
      back_of<K, R, kDt, 2>(p, prev_r, b, prev_r - b * H, c, buf[cur], prev);
    }
    if (r < token_end) {
      alignas(64) float buf[1][128];
      const RowScales rs = front_of<K, R, kDt, 1>(p, r, fq, c, buf);
      back_of<K, R, kDt, 1>(p, r, b, r - b * H, c, buf, rs);
      ++r;
    }
  }
}

// The kernel entry: recipe and dtype dispatch onto run_rows.
template <class K>
void run_kernel(const Problem& p, std::int64_t row_begin, std::int64_t row_end) {
  with_recipe(p.recipe, [&](auto rec) {
    using R = decltype(rec);
    switch (p.dtype) {
      case DType::kBFloat16: run_rows<K, R, DType::kBFloat16>(p, row_begin, row_end); break;
      case DType::kFloat16: run_rows<K, R, DType::kFloat16>(p, row_begin, row_end); break;
      default: run_rows<K, R, DType::kFloat32>(p, row_begin, row_end); break;
    }
  });
}

}  // namespace
}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
