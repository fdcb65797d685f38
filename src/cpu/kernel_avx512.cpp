// AVX-512 kernel (F/BW/VL/DQ; compiled with those flags on this file only): one body for every
// recipe (template on RecipeT<Id>, src/common/recipe.h), driven by run_rows of kernel_common.h
// (row pairs software-pipelined: front of pair i, then back of pair i - 1).
//
// Layout: a row of 128 floats lives in 8 registers of 16 lanes, split into even and odd
// elements: E[k] lane l = x[32k + 2l], O[k] lane l = x[32k + 2l + 1] (for bf16 this split
// is free: a 32-bit load holds one even and one odd element). Then
//   - the RoPE pairs (x[o+2j], x[o+1+2j]) are (E[o/32+m] lane l, O[o/32+m] lane l), j = 16m + l,
//     o = the recipe's rope offset (0 or 64);
//   - butterfly stride 1 is E +/- O; strides 32, 64 pair registers (k bits 0, 1);
//   - strides 2, 4, 8, 16 pair lanes (lane bits 0..3) inside a register: with p the register
//     with its lanes swapped, each lane computes fma(r, +-1, p), i.e. exactly a + b or a - b
//     (the product by +-1 is exact, so the single rounding is the one of the add/sub).
// Every stage keeps each value in its place, so with or without the Hadamard E[k] / O[k] hold
// the even / odd dims 32k..32k+31 (one FP4 block), stored as buf[32k + 0..15] / buf[32k + 16..31].
// Every value goes through the same IEEE operations, in the same order, as src/common/row.h.
// This file includes no shared header with inline functions (see cpu_internal.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/cpu_internal.h"
#include "cpu/kernel_common.h"

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

struct Consts {
  __m512 sg0, sg1, sg2, sg3;  // +1 where the lane bit is clear, -1 where set
  __m512 hadamard, c448, c2p20, c6, cm025;
  __m512i even, odd, hi16, absmask, expmask, min_normal, cff, c0f, c8;
  __m512i fp4_base, fp4_lo, fp4_hi;
  __m512i c1ffff, c8000, c80_32, enc_k;
  __m512i signexp, enc_k2;          // fp8_fast_raw
  __m512i lane0_8;                  // lanes 0, 8 to lanes 0, 1
  __m512i c7f_32, cffff, qperm, dperm, c80_8, c7f_8;  // the codes' packing (back_row)
  __m512 c2p22;                     // vLLM E2M1 encoder
  __m512 cm6, c15p22, one_f;        // stage 1 (stage1_values)
  __m512i one_bits, mx_off, c1;
  __m512 c224, cm224;  // gfx942: Quantizer::kSglang224's clamp
  Consts() {
    sg0 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
    sg1 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
    sg2 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
    sg3 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
    hadamard = _mm512_set1_ps(kHadamardK);
    c448 = _mm512_set1_ps(kFp8MaxK);
    c2p20 = _mm512_set1_ps(0x1p20f);
    c6 = _mm512_set1_ps(kFp4MaxK);
    cm025 = _mm512_set1_ps(-0.25f);
    even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    hi16 = _mm512_set1_epi32(int(0xffff0000u));
    absmask = _mm512_set1_epi32(0x7fffffff);
    expmask = _mm512_set1_epi32(0x7f800000);
    min_normal = _mm512_set1_epi32(0x3c800000);  // 2^-6
    cff = _mm512_set1_epi32(0xff);
    c0f = _mm512_set1_epi32(0x0f);
    c8 = _mm512_set1_epi32(8);
    fp4_base = _mm512_set1_epi32(0x3e000000 + 1);  // bits(0.125) + 1
    // E2M1 magnitude by (exponent, top 2 mantissa bits) of the float just below a, from 0.125
    // up (see e2m1_encode).
    fp4_lo = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 4);
    fp4_hi = _mm512_setr_epi32(4, 5, 5, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7);
    c224 = _mm512_set1_ps(kFp8Max224K);
    cm224 = _mm512_set1_ps(-kFp8Max224K);
    c1ffff = _mm512_set1_epi32(0x1ffff);
    c8000 = _mm512_set1_epi32(0x8000);
    c80_32 = _mm512_set1_epi32(0x80);
    c2p22 = _mm512_set1_ps(0x1p22f);
    cm6 = _mm512_set1_ps(-kFp4MaxK);
    c15p22 = _mm512_set1_ps(0x1.8p22f);
    one_f = _mm512_set1_ps(1.0f);
    one_bits = _mm512_set1_epi32(0x3f800000);  // bits(1.0f)
    mx_off = _mm512_set1_epi32(-(22 << 23) - 254);
    c1 = _mm512_set1_epi32(1);
    // clamp_encode: entry e & 15 (e = biased exponent of m, 121..135: 15 distinct residues) is
    // (e << 3) + 56 - (e << 23) mod 2^32, i.e. (bits(m) >> 20) + 56 - bits(m).
    alignas(64) std::uint32_t k[16] = {};
    for (std::uint32_t e = 121; e <= 135; ++e) k[e & 15u] = (e << 3) + 56u - (e << 23);
    enc_k = _mm512_load_si512(k);
    // fp8_fast_raw: entry e & 15 is (e << 3) - 968 - ((e + 20) << 23) mod 2^32, which takes the
    // fma's bits straight to the code (see there).
    for (std::uint32_t e = 121; e <= 135; ++e) k[e & 15u] = (e << 3) - 968u - ((e + 20u) << 23);
    enc_k2 = _mm512_load_si512(k);
    signexp = _mm512_set1_epi32(int(0xff800000u));
    lane0_8 = _mm512_setr_epi32(0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8);
    c7f_32 = _mm512_set1_epi32(0x7f);
    cffff = _mm512_set1_epi32(0xffff);
    qperm = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    dperm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    c80_8 = _mm512_set1_epi8(char(0x80));
    c7f_8 = _mm512_set1_epi8(0x7f);
  }
};

template <DType kDt>
inline void load_row(const void* base, std::int64_t r, const Consts& c, __m512 E[4], __m512 O[4]) {
  if (kDt == DType::kBFloat16) {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(base) + r * 128;
    for (int k = 0; k < 4; ++k) {
      const __m512i w = _mm512_loadu_si512(src + 32 * k);
      E[k] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
      O[k] = _mm512_castsi512_ps(_mm512_and_si512(w, c.hi16));
    }
  } else if (kDt == DType::kFloat16) {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(base) + r * 128;
    for (int k = 0; k < 4; ++k) {
      const __m512i w = _mm512_loadu_si512(src + 32 * k);
      E[k] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
      O[k] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w, 16)));
    }
  } else {
    const float* src = static_cast<const float*>(base) + r * 128;
    for (int k = 0; k < 4; ++k) {
      const __m512 a = _mm512_loadu_ps(src + 32 * k);
      const __m512 b = _mm512_loadu_ps(src + 32 * k + 16);
      E[k] = _mm512_permutex2var_ps(a, c.even, b);
      O[k] = _mm512_permutex2var_ps(a, c.odd, b);
    }
  }
}

// Butterflies at strides 2, 4, 8, 16 inside one register (in that order).
inline __m512 inlane_stages(__m512 v, const Consts& c) {
  v = _mm512_fmadd_ps(v, c.sg0, _mm512_permute_ps(v, 0xB1));
  v = _mm512_fmadd_ps(v, c.sg1, _mm512_permute_ps(v, 0x4E));
  v = _mm512_fmadd_ps(v, c.sg2, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_fmadd_ps(v, c.sg3, _mm512_shuffle_f32x4(v, v, 0x4E));
  return v;
}

inline void butterfly(__m512& a, __m512& b) {
  const __m512 t = a;
  a = _mm512_add_ps(t, b);
  b = _mm512_sub_ps(t, b);
}

inline __m512 abs_ps(__m512 v, const Consts& c) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), c.absmask));
}

// round_bf16 of row.h (see kernel_avx2.cpp: NaNs are kept as they are; bf16 inputs need no care).
// Nearest even as "add half, drop 16 bits", except on an exact tie with an even kept part (low 17
// bits == 0x8000), which stays where it is: one masked add instead of computing the lsb.
template <DType kDt>
inline __m512 round_bf16(__m512 x, const Consts& c) {
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 up = _mm512_cmpneq_epi32_mask(_mm512_and_si512(u, c.c1ffff), c.c8000);
  const __m512 r = _mm512_castsi512_ps(_mm512_and_si512(_mm512_mask_add_epi32(u, up, u, c.c8000), c.hi16));
  if (kDt == DType::kBFloat16) return r;
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// Steps 8..9 for 16 values already multiplied by inv: clamp (NaN -> +448) and encode.
// Returns the e4m3fn code in the low byte of each 32-bit lane (upper bytes: don't care).
// The integer-from-fma encoder of kernel_avx2.cpp (see there): with a = |v| <= 448 after the
// clamp, m = 2^max(E, -6), the fma t = a + 2^(Ec+20) is the one rounding (nearest even onto the
// e4m3 grid) and the code is the low byte of bits(t) - bits(m) + (bits(m) >> 20) + 56; no
// float32 subnormal is produced. Here a = min(|v|, 448) directly (minps returns its 2nd operand for a NaN: 448, positive), the
// sign is the class "negative finite, -Inf or -0" of v (never a NaN: fmin(NaN, 448) = +448), and
// (bits(m) >> 20) + 56 - bits(m) comes from a 16-entry table on m's exponent (enc_k).
// kNanNeg (Quantizer::kSglangUe8m0): a NaN counts as negative too, so it gives -448 (0xfe).
// Rows known to hold no NaN or Inf take fp8_fast_pair instead.
template <bool kNanNeg = false>
inline __m512i clamp_encode(__m512 q, const Consts& c) {
  // 0x40 negative finite, 0x10 -Inf, 0x04 -0 (kNanNeg: also 0x01 QNaN, 0x80 SNaN)
  const __mmask16 neg = _mm512_fpclass_ps_mask(q, kNanNeg ? 0xD5 : 0x54);
  const __m512 a = _mm512_min_ps(abs_ps(q, c), c.c448);
  const __m512i m = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(a), c.expmask), c.min_normal);
  const __m512i t = _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(m), c.c2p20, a));  // the one rounding
  const __m512i raw = _mm512_add_epi32(t, _mm512_permutexvar_epi32(_mm512_srli_epi32(m, 23), c.enc_k));
  return _mm512_mask_or_epi32(raw, neg, raw, c.c80_32);
}
// The FP8 codes of rows known to hold no NaN or Inf (kFast, see kRangeAmax), 32 values at a time.
// There |q| < 464 for every quantizer (q = y * inv with |y| <= amax and inv at most 448 / amax, or
// 224 / amax, times a few ulps), so the clamp to 448 (224) is a no-op after rounding: every such q
// rounds to a code of at most 448 (224). The rounding is clamp_encode's fma done on the signed
// value: m = +-2^max(E, -6) with q's sign (one vrangeps on q's sign and exponent bits: the larger
// magnitude of that and 2^-6, q's sign), t = fma(m, 2^20, q) = -fma(|m|, 2^20, |q|) or
// +fma(|m|, 2^20, |q|) (round to nearest even is symmetric), so bits(t) = sign << 31 | the bits of
// clamp_encode's t, and bits(t) + enc_k2[e & 15] (e = the biased exponent of |m|) is sign << 31 |
// the 7-bit code, nothing else (clamp_encode's raw is the same less 0x0a000400 and its sign).
inline __m512i fp8_fast_raw(__m512 q, const Consts& c) {
  const __m512 m = _mm512_range_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(q), c.signexp)),
                                   _mm512_castsi512_ps(c.min_normal), 0x03);
  const __m512i t = _mm512_castps_si512(_mm512_fmadd_ps(m, c.c2p20, q));
  return _mm512_add_epi32(t, _mm512_permutexvar_epi32(_mm512_srli_epi32(_mm512_castps_si512(m), 23), c.enc_k2));
}
// The codes of qe and qo as the 16-bit words code(qe) | code(qo) << 8, zero-extended to the
// lanes: each sign moves from bit 31 to bit 7 / 15 by a shift, the codes by none / one:
// (re & 0x7f) | ro << 8 | ro >> 16 | re >> 24.
inline __m512i fp8_fast_pair(__m512 qe, __m512 qo, const Consts& c) {
  const __m512i re = fp8_fast_raw(qe, c), ro = fp8_fast_raw(qo, c);
  const __m512i x = _mm512_ternarylogic_epi32(_mm512_slli_epi32(ro, 8), _mm512_srli_epi32(ro, 16),
                                              _mm512_srli_epi32(re, 24), 0xFE);  // a | b | c
  return _mm512_ternarylogic_epi32(re, x, c.c7f_32, 0xEC);                        // (a & c) | b
}

// E2M1 code (0..15, clean 32-bit lanes) of v, any float. a = min(|v|, 6) (NaN -> 6). The
// magnitude is the number of thresholds {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} strictly below a,
// i.e. the bucket of the float just below a (bits(a) - 1) among [0.125 * 2^e, ...) split by
// exponent and the top 2 mantissa bits: every threshold is such a bucket edge. The bucket index
// (0 below 0.125, at most 21 at a = 6) picks the magnitude from a 32-entry table.
// Sign: v < -0.25 exactly when v < 0 and the magnitude is not 0 (a NaN is never below).
// kFast (no NaN in v): a in one vrangeps, as in clamp_encode.
template <bool kFast = false>
inline __m512 min_abs6(__m512 v, const Consts& c) {
  return kFast ? _mm512_range_ps(v, c.c6, 0x0A) : _mm512_min_ps(abs_ps(v, c), c.c6);  // minps: NaN -> 6
}

template <bool kFast = false>
inline __m512i e2m1_encode(__m512 v, const Consts& c) {
  const __m512 a = min_abs6<kFast>(v, c);
  const __m512i idx = _mm512_srli_epi32(
      _mm512_max_epi32(_mm512_sub_epi32(_mm512_castps_si512(a), c.fp4_base), _mm512_setzero_si512()), 21);
  const __m512i mag = _mm512_permutex2var_epi32(c.fp4_lo, idx, c.fp4_hi);
  return _mm512_mask_or_epi32(mag, _mm512_cmp_ps_mask(v, c.cm025, _CMP_LT_OQ), mag, c.c8);
}

// vLLM's E2M1 code (Quantizer::kVllm, row.h's mx_e2m1_encode) of any float v: the fma encoder of
// kernel_avx2.cpp's mx_e2m1_encode (see there): a = min(|v|, 6) (NaN -> 6), m = 2^max(E, 0),
// t = fma(m, 2^22, a) rounds a onto the E2M1 grid with ties to even, magnitude =
// bits(t) - bits(m) + (bits(m) >> 22) - (22 << 23) - 254; bit 3 = the sign bit of v on every code
// but a NaN's (0x7 whatever its sign): the class "negative finite, -Inf or -0" of v, as in
// clamp_encode (negative subnormals included).
inline __m512i e2m1_grid_mag(__m512 a, const Consts& c) {
  const __m512i m = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(a), c.expmask), c.one_bits);
  const __m512i t = _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(m), c.c2p22, a));
  return _mm512_add_epi32(_mm512_add_epi32(_mm512_sub_epi32(t, m), _mm512_srli_epi32(m, 22)), c.mx_off);
}
template <bool kFast = false>
inline __m512i mx_e2m1_encode(__m512 v, const Consts& c) {
  const __m512i mag = e2m1_grid_mag(min_abs6<kFast>(v, c), c);
  const __mmask16 neg = kFast ? _mm512_movepi32_mask(_mm512_castps_si512(v)) : _mm512_fpclass_ps_mask(v, 0x54);
  return _mm512_mask_or_epi32(mag, neg, mag, c.c8);
}

// The V4.1 packer's E2M1 code (Quantizer::kFp4Rne / kFp4TwoStage, row.h's e2m1_encode_rne) of any
// float v: mx_e2m1_encode's magnitude (ties to even, NaN -> 7), the sign only on a nonzero
// magnitude of a negative v, i.e. exactly when v < -0.25 (never for a NaN).
template <bool kFast = false>
inline __m512i rne_e2m1_encode(__m512 v, const Consts& c) {
  const __m512i mag = e2m1_grid_mag(min_abs6<kFast>(v, c), c);
  return _mm512_mask_or_epi32(mag, _mm512_cmp_ps_mask(v, c.cm025, _CMP_LT_OQ), mag, c.c8);
}

// Stage 1 of Quantizer::kFp4TwoStage on 16 values (row.h's stage1_value), by rounding u = x * inv1
// onto the E2M1 grid with one magic fma and taking it back with another (see kernel_avx2.cpp's
// stage1_values: the same operations, the same floats up to the sign of a zero): w = clamp(u, -6,
// 6) (NaN -> 6), p = 2^floor(log2 max(|w|, 1)) = max(the exponent bits of w alone, 1), t = fma(p,
// 1.5 * 2^22, w), then fma(-p, 1.5 * 2^22, t) * sc. 8 operations (11 before); kClamp = false (6):
// rows whose values are all finite (kernel_avx2.cpp's stage1_values says why the clamp is moot).
template <bool kClamp = true>
inline __m512 stage1_values(__m512 x, __m512 inv1, __m512 sc, const Consts& c) {
  const __m512 u = _mm512_mul_ps(x, inv1);
  const __m512 w = kClamp ? _mm512_max_ps(_mm512_min_ps(u, c.c6), c.cm6) : u;
  const __m512 p = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(w), c.expmask)), c.one_f);
  const __m512 t = _mm512_fmadd_ps(p, c.c15p22, w);
  return _mm512_mul_ps(_mm512_fnmadd_ps(p, c.c15p22, t), sc);
}

template <class R, bool kFast>
inline __m512i fp4_encode(__m512 v, const Consts& c) {
  if (kMxFp4<R>) return mx_e2m1_encode<kFast>(v, c);
  if (kRneFp4<R>) return rne_e2m1_encode<kFast>(v, c);
  return e2m1_encode<kFast>(v, c);
}

// vLLM's FP8 code of q = x * inv (row.h's vllm_fp8_code): clamp_encode (NaN -> min(NaN, 448) =
// 448, positive: 0x7e), or 1 on the NaN lanes (0x7f).
inline __m512i vllm_fp8_encode(__m512 q, const Consts& c) {
  const __m512i code = clamp_encode(q, c);
  return _mm512_mask_or_epi32(code, _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q), code, c.c1);
}

template <class R>
inline __m512i fp8_encode(__m512 q, const Consts& c) {
  // gfx942 (see kernel_avx2.cpp): kSglang224 clamps to [-224, 224] first (NaN -> 224); kVllmFnuz224
  // (q = 2 * x / q_scale) takes vLLM's code (NaN -> 0x7f), made e4m3fnuz in back_body.
  if constexpr (R::kQuant == Quantizer::kSglang224) {
    return clamp_encode(_mm512_max_ps(_mm512_min_ps(q, c.c224), c.cm224), c);
  }
  if constexpr (R::kQuant == Quantizer::kVllmFnuz224) return vllm_fp8_encode(q, c);
  if constexpr (kNanCode7f<R>) return vllm_fp8_encode(q, c);
  return clamp_encode<kNanCodeFe<R>>(q, c);
}

// Max of a 16-lane vector into 8 lanes (max is exact, order free; no NaN reaches here).
inline __m256 half_max(__m512 m) {
  return _mm256_max_ps(_mm512_castps512_ps256(m), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m), 1)));
}

// Stage 1 on a row in buf (block k = buf[32k .. 32k + 31]): its values replaced by their stage-1
// values, mb[k] = the maxima of their magnitudes in block k, 8 lanes (NaN ignored: maxps returns
// its 2nd operand).
template <bool kClamp>
__attribute__((always_inline)) inline void stage1_row(float* row, __m512 inv16, __m512 sc16, __m256 (&mb)[4],
                                                      const Consts& c) {
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i lane = _mm512_set1_epi32(k);
    const __m512 vinv = _mm512_permutexvar_ps(lane, inv16), vsc = _mm512_permutexvar_ps(lane, sc16);
    const __m512 e = stage1_values<kClamp>(_mm512_load_ps(row + 32 * k), vinv, vsc, c);
    const __m512 o = stage1_values<kClamp>(_mm512_load_ps(row + 32 * k + 16), vinv, vsc, c);
    mb[k] = half_max(_mm512_max_ps(abs_ps(e, c), _mm512_max_ps(abs_ps(o, c), _mm512_setzero_ps())));
    _mm512_store_ps(row + 32 * k, e);
    _mm512_store_ps(row + 32 * k + 16, o);
  }
}

// The amax by vrangeps (max of the magnitudes, sign cleared: |a| or |b|, one instruction for
// abs + max), for every recipe but the two-stage FP4 one. Like maxps it ignores a quiet NaN
// operand (it returns the other one), but a signalling NaN gives a NaN. Beside it, one fma per
// 32 values, f = fma(e, o, f), tells whether the step's values (1 or 2 rows) are all finite: a
// NaN or an infinity among them leaves f NaN or infinite for good (NaN * x, Inf * 0, Inf + -Inf:
// NaN; Inf * x, Inf + x: Inf), and finite values leave it finite unless a product or the sum
// overflows, which only sends a finite step down the exact path. A step whose f is not finite is
// re-reduced from buf the NaN-ignoring way (amax_exact) and encoded by the exact encoders;
// otherwise no value is NaN or infinite, not even q = y * inv (finite y, finite inv), so the
// encoders may drop the NaN cases (kFast; FP8 takes fp8_fast_pair, which drops the clamp too).
template <class R>
constexpr bool kRangeAmax = R::kQuant != Quantizer::kFp4TwoStage;
inline __m512 range_max(__m512 a, __m512 b) { return _mm512_range_ps(a, b, 0x0B); }
inline __m256 range_max(__m256 a, __m256 b) { return _mm256_range_ps(a, b, 0x0B); }
inline __m128 range_max(__m128 a, __m128 b) { return _mm_range_ps(a, b, 0x0B); }
inline __m256 half_range_max(__m512 m) {
  return range_max(_mm512_castps512_ps256(m), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m), 1)));
}
// max4x8 of kernel_common.h with NaN propagated (inputs >= 0 or NaN).
inline __m128 range_max4x8(__m256 m0, __m256 m1, __m256 m2, __m256 m3) {
  const __m256 a = range_max(_mm256_unpacklo_ps(m0, m1), _mm256_unpackhi_ps(m0, m1));
  const __m256 b = range_max(_mm256_unpacklo_ps(m2, m3), _mm256_unpackhi_ps(m2, m3));
  const __m256 c = range_max(_mm256_shuffle_ps(a, b, 0x44), _mm256_shuffle_ps(a, b, 0xEE));
  return range_max(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
}
// A row's amax from buf ignoring NaN (maxps returns its 2nd operand, the running max, for a NaN):
// FP8, every lane the row's; FP4, lane k block k's. Rare (rows with a NaN or an Inf).
template <bool kFp4>
__attribute__((noinline, cold)) __m128 amax_exact(const float* row, const Consts& c) {
  if (kFp4) {
    __m256 mb[4];
    for (int k = 0; k < 4; ++k) {
      const __m512 e = _mm512_load_ps(row + 32 * k), o = _mm512_load_ps(row + 32 * k + 16);
      mb[k] = half_max(_mm512_max_ps(abs_ps(e, c), _mm512_max_ps(abs_ps(o, c), _mm512_setzero_ps())));
    }
    return max4x8(mb[0], mb[1], mb[2], mb[3]);
  }
  __m512 m = _mm512_setzero_ps();
  for (int k = 0; k < 8; ++k) m = _mm512_max_ps(abs_ps(_mm512_load_ps(row + 16 * k), c), m);
  const __m256 m8 = half_max(m);
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_permute_ps(m4, 0x4E));
  return _mm_max_ps(m4, _mm_permute_ps(m4, 0xB1));
}

struct Avx512 {
  using Consts = cpu::Consts;
  // FP4 back bodies inlined into the driver (see back_of: left to GCC, some were called out of
  // line after the packing below changed their size, 232 -> 272 instructions per row for
  // vllm_v4_mxfp4).
  static constexpr bool kFp4FrontInline = true;  // FP4 fronts with the Hadamard (see front_of)
  static constexpr bool kFp4BackInline = true;
  struct Freqs {
    // Adjacent pairs: lane l of C[m] / S[m]: pair j = 16m + l. NeoX pairs (j, j + 32): C[0] / C[1]
    // lane l hold cos of the pairs j = 2l / 2l + 1 (those of E / O of the first rotated block).
    __m512 C[2], S[2];
  };

  template <class R, DType kDt>
  static void load_freqs(const float* f, const Consts& c, Freqs& fq) {
    if constexpr (R::kNeox) {
      static_assert(R::kFreqsLayout == FreqsLayout::kHalves, "NeoX pairs: halves freqs only (no recipe needs more)");
      const __m512 c0 = _mm512_loadu_ps(f), c1 = _mm512_loadu_ps(f + 16);
      const __m512 s0 = _mm512_loadu_ps(f + 32), s1 = _mm512_loadu_ps(f + 48);
      fq.C[0] = _mm512_permutex2var_ps(c0, c.even, c1);
      fq.C[1] = _mm512_permutex2var_ps(c0, c.odd, c1);
      fq.S[0] = _mm512_permutex2var_ps(s0, c.even, s1);
      fq.S[1] = _mm512_permutex2var_ps(s0, c.odd, s1);
      return;
    }
    for (int m = 0; m < 2; ++m) {
      if (R::kFreqsLayout == FreqsLayout::kInterleaved) {
        const __m512 a = _mm512_loadu_ps(f + 32 * m);
        const __m512 b = _mm512_loadu_ps(f + 32 * m + 16);
        fq.C[m] = _mm512_permutex2var_ps(a, c.even, b);
        fq.S[m] = _mm512_permutex2var_ps(a, c.odd, b);
      } else {
        fq.C[m] = _mm512_loadu_ps(f + 16 * m);
        fq.S[m] = _mm512_loadu_ps(f + 32 + 16 * m);
      }
    }
  }

  template <class R, DType kDt, int kRows>
  __attribute__((always_inline)) static RowScales front_body(const Problem& p, std::int64_t r0, const Freqs& fq,
                                                             const Consts& c, float (*buf)[128]) {
    constexpr int kRope0 = R::kRopeOffset / 32;
    __m512 E[kRows][4], O[kRows][4];
#pragma GCC unroll 2
    for (int n = 0; n < kRows; ++n) load_row<kDt>(p.q_input, r0 + n, c, E[n], O[n]);
    // Step 2: RoPE, x' = fma(xr, c, -(xi*s)), x'' = fma(xr, s, xi*c) (RopeFma::kFmaX0S) or
    // fma(xi, c, xr*s) (kFmaX1C); the bf16 rounding.
    // Adjacent pairs: (E, O) of each rotated block; NeoX pairs (j, j + 32): E (then O) of the
    // first rotated block with the same register of the second. No RoPE: nothing (fq unused).
    if constexpr (R::kRope) {
#pragma GCC unroll 2
      for (int n = 0; n < kRows; ++n)
#pragma GCC unroll 2
        for (int m = 0; m < 2; ++m) {
          __m512& x0 = R::kNeox ? (m == 0 ? E[n][kRope0] : O[n][kRope0]) : E[n][kRope0 + m];
          __m512& x1 = R::kNeox ? (m == 0 ? E[n][kRope0 + 1] : O[n][kRope0 + 1]) : O[n][kRope0 + m];
          const __m512 xr = x0, xi = x1;
          constexpr bool kX1C = R::kRopeFma == RopeFma::kFmaX1C;
          const __m512 xis = _mm512_mul_ps(xi, fq.S[m]);
          const __m512 p1 = kX1C ? _mm512_mul_ps(xr, fq.S[m]) : _mm512_mul_ps(xi, fq.C[m]);  // the second value's product
          __m512 e = _mm512_fmsub_ps(xr, fq.C[m], xis);
          __m512 o = kX1C ? _mm512_fmadd_ps(xi, fq.C[m], p1) : _mm512_fmadd_ps(xr, fq.S[m], p1);
          if (R::kBf16AfterRope) {
            e = round_bf16<kDt>(e, c);
            o = round_bf16<kDt>(o, c);
          }
          x0 = e;
          x1 = o;
        }
    }
    if (R::kHadamard) {
      // Step 3: strides 1; 2, 4, 8, 16; 32, 64.
#pragma GCC unroll 2
      for (int n = 0; n < kRows; ++n)
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          butterfly(E[n][k], O[n][k]);
          E[n][k] = inlane_stages(E[n][k], c);
          O[n][k] = inlane_stages(O[n][k], c);
        }
#pragma GCC unroll 2
      for (int n = 0; n < kRows; ++n) {
        butterfly(E[n][0], E[n][1]);
        butterfly(E[n][2], E[n][3]);
        butterfly(O[n][0], O[n][1]);
        butterfly(O[n][2], O[n][3]);
        butterfly(E[n][0], E[n][2]);
        butterfly(E[n][1], E[n][3]);
        butterfly(O[n][0], O[n][2]);
        butterfly(O[n][1], O[n][3]);
      }
    }
    // Step 4 (y = x * 1/sqrt(128)), the bf16 rounding (R::kBf16AfterHadamard), step 5: amax
    // ignoring NaN (maxps returns its 2nd operand, the running max, when the new value is NaN) of
    // the row (FP8) or of each block of 32 = E[k], O[k] (FP4). Results to buf for the back phase.
    __m128 amax[kRows];
    __m512 mrow[kRows];                // FP8, kRangeAmax: the row's 16 partial maxima
    __m512 fin = _mm512_setzero_ps();  // kRangeAmax: finite while every value of the step is
#pragma GCC unroll 2
    for (int n = 0; n < kRows; ++n) {
      __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
      __m256 mb[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512 e = E[n][k], o = O[n][k];
        if (R::kHadamard) {
          e = _mm512_mul_ps(e, c.hadamard);
          o = _mm512_mul_ps(o, c.hadamard);
        }
        if (R::kBf16AfterHadamard) {
          e = round_bf16<kDt>(e, c);
          o = round_bf16<kDt>(o, c);
        }
        // (the two-stage quantizer: for its stage 1, see there)
        if (kRangeAmax<R> || R::kQuant == Quantizer::kFp4TwoStage) fin = _mm512_fmadd_ps(e, o, fin);
        if (R::kFp4 && kRangeAmax<R>) {
          mb[k] = half_range_max(range_max(e, o));
        } else if (kRangeAmax<R>) {
          // (k = 0: the values themselves; the next vrangeps clears their signs.)
          m0 = k == 0 ? e : range_max(e, m0);
          m1 = k == 0 ? o : range_max(o, m1);
        } else if (R::kFp4) {
          // maxps returns its 2nd operand when either is NaN: the inner max turns a NaN of o
          // into 0, the outer one ignores a NaN of e.
          mb[k] = half_max(_mm512_max_ps(abs_ps(e, c), _mm512_max_ps(abs_ps(o, c), _mm512_setzero_ps())));
        } else {
          m0 = _mm512_max_ps(abs_ps(e, c), m0);
          m1 = _mm512_max_ps(abs_ps(o, c), m1);
        }
        _mm512_store_ps(buf[n] + 32 * k, e);
        _mm512_store_ps(buf[n] + 32 * k + 16, o);
      }
      if (R::kFp4 && kRangeAmax<R>) {
        amax[n] = range_max4x8(mb[0], mb[1], mb[2], mb[3]);  // lane k = block k
      } else if (R::kFp4) {
        amax[n] = max4x8(mb[0], mb[1], mb[2], mb[3]);  // lane k = block k
        if constexpr (R::kQuant == Quantizer::kFp4TwoStage) {
          // Stage 1 of the two-stage quantizer: the fake-quantized values replace the row in buf,
          // and their block amax (NaN ignored) is what the packer's scales see.
          // fin (kRangeAmax's test, here over the rows so far) finite: no NaN or infinity among
          // this row's values, whose stage 1 then skips its clamp (stage1_values<false>).
          __m128 inv1, sc;
          stage1_scales(amax[n], inv1, sc);
          const __m512 inv16 = _mm512_castps128_ps512(inv1), sc16 = _mm512_castps128_ps512(sc);
          if (__builtin_expect(_mm512_fpclass_ps_mask(fin, 0x99) == 0, 1))
            stage1_row<false>(buf[n], inv16, sc16, mb, c);
          else
            stage1_row<true>(buf[n], inv16, sc16, mb, c);
          amax[n] = max4x8(mb[0], mb[1], mb[2], mb[3]);
        }
      } else if (kRangeAmax<R>) {
        mrow[n] = range_max(m0, m1);  // reduced below, both rows at once
      } else {
        const __m256 m8 = half_max(_mm512_max_ps(m0, m1));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
        m4 = _mm_max_ps(m4, _mm_permute_ps(m4, 0x4E));
        amax[n] = _mm_max_ps(m4, _mm_permute_ps(m4, 0xB1));  // all lanes hold the max
      }
    }
    // FP8, kRangeAmax: the rows' maxima across lanes. Two rows share the steps: chunks 0-1 / 2-3
    // of one register take row 0 / row 1, then each 128-bit chunk is reduced, then the chunk pairs;
    // lane 0 / lane 1 of the result are the two rows' amax (the order of a max does not matter).
    __m128 am_pair = _mm_setzero_ps();
    if constexpr (!R::kFp4 && kRangeAmax<R>) {
      if constexpr (kRows == 2) {
        __m512 m = range_max(_mm512_shuffle_f32x4(mrow[0], mrow[1], 0x44), _mm512_shuffle_f32x4(mrow[0], mrow[1], 0xEE));
        m = range_max(m, _mm512_permute_ps(m, 0x4E));
        m = range_max(m, _mm512_permute_ps(m, 0xB1));
        m = range_max(m, _mm512_shuffle_f32x4(m, m, 0xB1));
        am_pair = _mm512_castps512_ps128(_mm512_permutexvar_ps(c.lane0_8, m));
      } else {
        const __m256 m8 = half_range_max(mrow[0]);
        __m128 m4 = range_max(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
        m4 = range_max(m4, _mm_permute_ps(m4, 0x4E));
        am_pair = range_max(m4, _mm_permute_ps(m4, 0xB1));  // all lanes hold the max
      }
    }
    // One test for the rows of the step: any lane of fin NaN (0x01 quiet, 0x80 signalling) or
    // infinite (0x08, 0x10).
    bool slow = false;
    if constexpr (kRangeAmax<R>) {
      if (__builtin_expect(_mm512_fpclass_ps_mask(fin, 0x99) != 0, 0)) {
#pragma GCC unroll 2
        for (int n = 0; n < kRows; ++n) amax[n] = amax_exact<R::kFp4>(buf[n], c);
        if (!R::kFp4) am_pair = _mm_unpacklo_ps(amax[0], amax[kRows - 1]);
        slow = true;
      }
    }
    RowScales rs;
    if constexpr (!R::kFp4 && kRangeAmax<R>) row_scales_fp8<R>(am_pair, rs.scale, rs.inv);  // lane n: row n
    else rs = scales_of<R, kRows>(amax);
    rs.slow = slow;
    return rs;
  }

  // Codes, sf bytes and weights_out of row n of the pair (kFast: see kRangeAmax).
  template <class R, DType kDt, int kRows, bool kFast>
  __attribute__((always_inline)) static void back_row(const Problem& p, std::int64_t r0, std::int64_t b, std::int64_t h0,
                                                      const Consts& c, const float (*buf)[128], const RowScales& rs,
                                                      int n) {
    if (R::kFp4) {
      // Block k: codes of E[k] (low nibbles) and O[k] (high nibbles), 16 bytes in order.
      std::uint8_t* out = p.q_out + (r0 + n) * 64;
      const __m512 inv8 = _mm512_castps256_ps512(rs.inv4);
      __m512i w[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512 vinv = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * n + k), inv8);
        const __m512i e = fp4_encode<R, kFast>(_mm512_mul_ps(_mm512_load_ps(buf[n] + 32 * k), vinv), c);
        const __m512i o = fp4_encode<R, kFast>(_mm512_mul_ps(_mm512_load_ps(buf[n] + 32 * k + 16), vinv), c);
        w[k] = _mm512_ternarylogic_epi32(e, _mm512_slli_epi32(o, 4), c.c0f, 0xE4);  // c ? e : o<<4 (0..255)
      }
      // The 64 bytes by two unsigned-saturating packs (exact: every lane is 0..255), which
      // interleave the blocks by 128-bit chunk (dword 4c + k = block k's lanes 4c..4c+3), and one
      // dword permutation back into block order.
      const __m512i b8 = _mm512_packus_epi16(_mm512_packus_epi32(w[0], w[1]), _mm512_packus_epi32(w[2], w[3]));
      _mm512_storeu_si512(out, _mm512_permutexvar_epi32(c.dperm, b8));
      const std::uint32_t sf = fp4_sf_word(rs.e4, n);
      std::memcpy(p.q_sf + 4 * (r0 + n), &sf, 4);
      write_weight<R>(p, r0 + n, b, h0 + n, 0.0f);
      return;
    }
    // Steps 8-9 (vLLM: x * (1 / q_scale), the same floats as x / q_scale, see vllm_fp8_scales);
    // the even/odd codes of each pair go to the two bytes of a 16-bit word.
    const __m512 vinv = _mm512_set1_ps(n == 0 ? lane_of<0>(rs.inv) : lane_of<1>(rs.inv));
    std::uint8_t* out = p.q_out + (r0 + n) * 128;
    __m512i w[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512 qe = _mm512_mul_ps(_mm512_load_ps(buf[n] + 32 * k), vinv);
      const __m512 qo = _mm512_mul_ps(_mm512_load_ps(buf[n] + 32 * k + 16), vinv);
      if (kFast) {
        w[k] = fp8_fast_pair(qe, qo, c);
      } else {
        const __m512i e = fp8_encode<R>(qe, c), o = fp8_encode<R>(qo, c);
        // (e & 0xff) | (o << 8), low 16 bits of each lane (the rest cleared).
        w[k] = _mm512_and_si512(_mm512_ternarylogic_epi32(e, _mm512_slli_epi32(o, 8), c.cff, 0xE4), c.cffff);
      }
    }
    // 64 bytes (blocks k, k + 1) by one unsigned-saturating pack (exact: every lane is 0..65535),
    // which interleaves the two blocks by 128-bit chunk, and one qword permutation.
#pragma GCC unroll 2
    for (int k = 0; k < 4; k += 2) {
      __m512i v = _mm512_permutexvar_epi64(c.qperm, _mm512_packus_epi32(w[k], w[k + 1]));
      if (R::kFnuz) v = _mm512_maskz_mov_epi8(_mm512_cmpneq_epi8_mask(v, c.c80_8), v);  // -0 -> +0
      if constexpr (R::kQuant == Quantizer::kVllmFnuz224)
        if (!kFast) v = _mm512_mask_mov_epi8(v, _mm512_cmpeq_epi8_mask(v, c.c7f_8), c.c80_8);  // NaN: 0x7f -> 0x80, e4m3fnuz's NaN
      _mm512_storeu_si512(out + 32 * k, v);
    }
    write_weight<R>(p, r0 + n, b, h0 + n, n == 0 ? lane_of<0>(rs.scale) : lane_of<1>(rs.scale));
    write_scale_out<R>(p, r0 + n, n == 0 ? lane_of<0>(rs.scale) : lane_of<1>(rs.scale));
  }

  template <class R, DType kDt, int kRows>
  __attribute__((always_inline)) static void back_body(const Problem& p, std::int64_t r0, std::int64_t b,
                                                       std::int64_t h0, const Consts& c, const float (*buf)[128],
                                                       const RowScales& rs) {
    if (kRangeAmax<R> && __builtin_expect(!rs.slow, 1)) {
#pragma GCC unroll 2
      for (int n = 0; n < kRows; ++n) back_row<R, kDt, kRows, kRangeAmax<R>>(p, r0, b, h0, c, buf, rs, n);
    } else {
#pragma GCC unroll 2
      for (int n = 0; n < kRows; ++n) back_row<R, kDt, kRows, false>(p, r0, b, h0, c, buf, rs, n);
    }
  }
};

}  // namespace

void kernel_avx512(const Problem& p, std::int64_t row_begin, std::int64_t row_end) {
  run_kernel<Avx512>(p, row_begin, row_end);
}

namespace {
// The test hooks: one encoder over n values (n a multiple of 16), each times inv first.
template <class Encode>
void encode_hook(const float* y, float inv, std::uint8_t* out, std::int64_t n, Encode encode) {
  const Consts c;
  const __m512 vinv = _mm512_set1_ps(inv);
  for (std::int64_t i = 0; i + 16 <= n; i += 16) {
    const __m512i code = encode(_mm512_mul_ps(_mm512_loadu_ps(y + i), vinv), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(code));
  }
}
}  // namespace

void quantize_avx512(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m512 v, const Consts& c) { return clamp_encode(v, c); });
}
void encode_fp4_avx512(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m512 v, const Consts& c) { return e2m1_encode(v, c); });
}
void quantize_vllm_avx512(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m512 v, const Consts& c) { return vllm_fp8_encode(v, c); });
}
void encode_mxfp4_avx512(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m512 v, const Consts& c) { return mx_e2m1_encode(v, c); });
}
// (the back phase's exact encoder)
void encode_rne_fp4_avx512(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m512 v, const Consts& c) { return rne_e2m1_encode(v, c); });
}
void stage1_fp4_avx512(const float* x, float inv1, float sc, float* out, std::int64_t n) {
  const Consts c;
  const __m512 vinv = _mm512_set1_ps(inv1), vsc = _mm512_set1_ps(sc);
  for (std::int64_t i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, stage1_values(_mm512_loadu_ps(x + i), vinv, vsc, c));
}
void rne_ue8m0_avx512(const float* amax, std::uint8_t* e, float* inv, std::int64_t n) {
  rne_ue8m0_hook(amax, e, inv, n);
}

namespace {
void quantize_fast_avx512(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  const Consts c;
  const __m512 vinv = _mm512_set1_ps(inv);
  for (std::int64_t i = 0; i + 32 <= n; i += 32) {
    const __m512i w = fp8_fast_pair(_mm512_mul_ps(_mm512_loadu_ps(y + i), vinv),
                                    _mm512_mul_ps(_mm512_loadu_ps(y + i + 16), vinv), c);
    alignas(32) std::uint8_t pairs[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), _mm512_cvtepi32_epi16(w));
    for (int l = 0; l < 16; ++l) {
      out[i + l] = pairs[2 * l];
      out[i + 16 + l] = pairs[2 * l + 1];
    }
  }
}
}  // namespace
QuantizeFn fp8_fast_encoder_avx512() { return quantize_fast_avx512; }

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q

// The key side's kernel on this file's encoders (docs/KSIDE-SPEC.md, src/cpu/kside_body.h).
#include "cpu/kside_avx512.inc"
