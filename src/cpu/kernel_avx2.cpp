// AVX2 + FMA + F16C kernel (compiled with -mavx2 -mfma -mf16c on this file only): one body for
// every recipe (template on RecipeT<Id>, src/common/recipe.h), driven by run_rows of
// kernel_common.h.
//
// Layout: a row of 128 floats lives in 16 registers of 8 lanes, split into even and odd
// elements: E[k] lane l = x[16k + 2l], O[k] lane l = x[16k + 2l + 1]. Then
//   - the RoPE pairs (x[o+2j], x[o+1+2j]) are (E[o/16+m] lane l, O[o/16+m] lane l), j = 8m + l,
//     o = the recipe's rope offset (0 or 64);
//   - butterfly stride 1 is E +/- O; strides 16, 32, 64 pair registers (k bits 0, 1, 2);
//   - strides 2, 4, 8 pair lanes (lane bits 0, 1, 2) inside a register. Stride 2: with p the
//     register with its pairs of lanes swapped, addsub(r, p) gives a - b in the even lane and
//     b + a in the odd one (lane bit 0 = NOT x bit 1 from then on). The stride on lane bit 2
//     (halves): fma(r, +-1, swapped halves), exactly a + b or a - b (a product by +-1 is
//     exact, so the single rounding is the one of the add/sub). The stride on lane bit 1: two
//     shufps gather the partners of E[k] and O[k] into u and w, and u + w, u - w become the
//     S and D registers (that stride's x bit becomes the register, lane bit 1 = x bit 0).
// After the front phase, buf[half * 64 + 8k + lane] holds dim x with k = x bits 4..6,
// lane bit 0 = NOT x bit 1, lane bit 1 = x bit 0, and
//   natural lane order (bf16):        half = x bit 2, lane bit 2 = x bit 3;
//   shuffled lane order (fp16, fp32): half = x bit 3, lane bit 2 = x bit 2.
// A recipe without the Hadamard stores the same layout (two shufps per slice, no arithmetic),
// so the back phase (codes and their interleave) is one for every recipe. An FP4 block of 32
// dims (x bits 5, 6) is the 4 registers k = 2b, 2b + 1 of both halves.
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

// Two lane orders. kNatural: lane l of E[k] holds x[16k + 2l] (bf16: free from a 32-bit
// load). kShuffled: what one shufps of two registers gives, lanes 0..7 holding x[16k + 2l']
// with l' = 0, 1, 4, 5, 2, 3, 6, 7: lane bits 1 and 2 swap roles (used for fp16 and fp32,
// saving a cross-lane permute per register). The butterflies pick their shuffles and the
// output interleave its permute accordingly.
enum class Layout { kNatural, kShuffled };

template <DType kDt>
constexpr Layout layout_of() {
  return kDt == DType::kBFloat16 ? Layout::kNatural : Layout::kShuffled;
}

// Even/odd split of 16 consecutive fp32 values, natural lane order.
inline void split_f32(const float* src, __m256& even, __m256& odd) {
  const __m256 a = _mm256_loadu_ps(src);
  const __m256 b = _mm256_loadu_ps(src + 8);
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

// Even/odd split of 16 values, shuffled lane order.
inline void split_shuffled(__m256 a, __m256 b, __m256& even, __m256& odd) {
  even = _mm256_shuffle_ps(a, b, 0x88);
  odd = _mm256_shuffle_ps(a, b, 0xDD);
}

// 8 consecutive fp32 values in the shuffled lane order (0, 1, 4, 5, 2, 3, 6, 7).
inline __m256 load_shuffled8(const float* src) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(src)), 0xD8));
}

template <DType kDt>
__attribute__((always_inline)) inline void load_row(const void* base, std::int64_t r, __m256 E[8], __m256 O[8]) {
  if (kDt == DType::kBFloat16) {
    const __m256i* src = reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(base) + r * 128);
    const __m256i hi = _mm256_set1_epi32(int(0xffff0000u));
    for (int k = 0; k < 8; ++k) {
      const __m256i w = _mm256_loadu_si256(src + k);
      E[k] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
      O[k] = _mm256_castsi256_ps(_mm256_and_si256(w, hi));
    }
  } else if (kDt == DType::kFloat16) {
    const __m128i* src = reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(base) + r * 128);
    for (int k = 0; k < 8; ++k)
      split_shuffled(_mm256_cvtph_ps(_mm_loadu_si128(src + 2 * k)), _mm256_cvtph_ps(_mm_loadu_si128(src + 2 * k + 1)),
                     E[k], O[k]);
  } else {
    const float* src = static_cast<const float*>(base) + r * 128;
    for (int k = 0; k < 8; ++k)
      split_shuffled(_mm256_loadu_ps(src + 16 * k), _mm256_loadu_ps(src + 16 * k + 8), E[k], O[k]);
  }
}

struct Consts {
  __m256 sg2;  // +1 where lane bit 2 is clear, -1 where set
  __m256 hadamard, absmask, expmask, c448, cm448, c2p20;
  __m256i min_normal_bits, c56, c184;
  __m256i out_perm, fin_shuffled;
  __m256i ns0, nd0, ns1, nd1;  // FP8 output interleave: S/D registers of slices k, k + 1
  __m256i x7fff, one, hi16;    // bf16 rounding
  __m256 c6, c2m10, c2p22, cm025, one_f;
  __m256 cm6, c15p22;          // stage 1 (stage1_values)
  __m256i c4pos, c4neg;        // FP4 code offsets
  __m256i p4a, p4b;            // FP4 output interleave: two blocks
  __m256i c80;
  __m256 c224, cm224;  // gfx942: Quantizer::kSglang224's clamp
  __m256i c7f;         // gfx942: Quantizer::kVllmFnuz224's NaN code
  Consts() {
    sg2 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
    hadamard = _mm256_set1_ps(kHadamardK);
    absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    c448 = _mm256_set1_ps(kFp8MaxK);
    cm448 = _mm256_set1_ps(-kFp8MaxK);
    expmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
    c2p20 = _mm256_set1_ps(0x1p20f);
    c56 = _mm256_set1_epi32(56);    // (8 * 6 - 8 * 127) mod 256
    c184 = _mm256_set1_epi32(184);  // the same + 0x80 (sign)
    min_normal_bits = _mm256_set1_epi32(0x3c800000);  // 2^-6
    out_perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const char z = char(0x80);
    fin_shuffled = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
                                    0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    // In each 128-bit half of an S or D register, lanes 1, 3, 0, 2 hold 4 consecutive
    // elements (natural: half h of S / D of slice k = x[16k + 8h + 0..3] / x[16k + 8h + 4..7];
    // shuffled: x[16k + 4h + 0..3] / x[16k + 8 + 4h + 0..3]). Each goes to its own dword of
    // the half; the final permute puts the dwords in order.
    ns0 = _mm256_setr_epi8(4, 12, 0, 8, z, z, z, z, z, z, z, z, z, z, z, z,
                           4, 12, 0, 8, z, z, z, z, z, z, z, z, z, z, z, z);
    nd0 = _mm256_setr_epi8(z, z, z, z, 4, 12, 0, 8, z, z, z, z, z, z, z, z,
                           z, z, z, z, 4, 12, 0, 8, z, z, z, z, z, z, z, z);
    ns1 = _mm256_setr_epi8(z, z, z, z, z, z, z, z, 4, 12, 0, 8, z, z, z, z,
                           z, z, z, z, z, z, z, z, 4, 12, 0, 8, z, z, z, z);
    nd1 = _mm256_setr_epi8(z, z, z, z, z, z, z, z, z, z, z, z, 4, 12, 0, 8,
                           z, z, z, z, z, z, z, z, z, z, z, z, 4, 12, 0, 8);
    x7fff = _mm256_set1_epi32(0x7fff);
    one = _mm256_set1_epi32(1);
    hi16 = _mm256_set1_epi32(int(0xffff0000u));
    c6 = _mm256_set1_ps(kFp4MaxK);
    c2m10 = _mm256_set1_ps(0x1p-10f);
    cm025 = _mm256_set1_ps(-0.25f);
    one_f = _mm256_set1_ps(1.0f);
    c2p22 = _mm256_set1_ps(0x1p22f);
    cm6 = _mm256_set1_ps(-kFp4MaxK);
    c15p22 = _mm256_set1_ps(0x1.8p22f);
    c4pos = _mm256_set1_epi32(-(22 << 23) - 254);
    c4neg = _mm256_set1_epi32(-(22 << 23) - 254 + 8);
    // Block bytes (see back(), FP4): in each half, bytes 4d + i of the packed block.
    p4a = _mm256_setr_epi8(1, 0, 5, 4, 9, 8, 13, 12, z, z, z, z, z, z, z, z,
                           1, 0, 5, 4, 9, 8, 13, 12, z, z, z, z, z, z, z, z);
    p4b = _mm256_setr_epi8(z, z, z, z, z, z, z, z, 1, 0, 5, 4, 9, 8, 13, 12,
                           z, z, z, z, z, z, z, z, 1, 0, 5, 4, 9, 8, 13, 12);
    c80 = _mm256_set1_epi8(char(0x80));
    c224 = _mm256_set1_ps(kFp8Max224K);
    cm224 = _mm256_set1_ps(-kFp8Max224K);
    c7f = _mm256_set1_epi8(0x7f);
  }
};

inline void butterfly(__m256& a, __m256& b) {
  const __m256 t = a;
  a = _mm256_add_ps(t, b);
  b = _mm256_sub_ps(t, b);
}

// round_bf16 of row.h: nearest even on the 16 dropped bits. A NaN whose payload has low bits
// could carry into the exponent; it is kept as it is instead (only NaN-ness matters downstream:
// amax ignores NaN, every NaN code is the same). bf16 inputs only ever carry NaNs with 16 zero
// low bits (operations keep or quiet a payload), for which the rounding is the identity.
template <DType kDt>
inline __m256 round_bf16(__m256 x, const Consts& c) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), c.one);
  const __m256 r = _mm256_castsi256_ps(_mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, c.x7fff)), c.hi16));
  if (kDt == DType::kBFloat16) return r;
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Steps 8..9 for 8 values already multiplied by inv: clamp (NaN -> +448) and encode.
// Returns the e4m3fn code in the low byte of each 32-bit lane (upper bytes: don't care).
//
// After the clamp, a = |v| <= 448 is finite. With E the exponent of a and Ec = max(E, -6),
// m = 2^Ec, the e4m3fn grid around a has step 2^(Ec-3) (Ec = -6: the subnormal step 2^-9).
// t = a + 2^(Ec+20) lies in the binade [2^(Ec+20), 2^(Ec+21)) whose ulp is that step, so the
// single rounding of the fma is round-to-nearest-even of a onto the grid, and the low bits of
// t count grid steps: bits(t) = bits(m) + (20 << 23) + k, RNE(a) = k * 2^(Ec-3), 0 <= k <= 16.
// The code is k + 8 * (Ec + 6) (a carry k = 16 is the next exponent, k < 8 only occurs at
// Ec = -6 as a subnormal code), i.e. the low byte of bits(t) - bits(m) + (bits(m) >> 20) + 56,
// all in integers (no float32 subnormal is ever produced, which would be slow). The sign
// comes from v (so -0 and values rounding to zero from below keep 0x80).
// kNanNeg (Quantizer::kSglangUe8m0): the clamp in the other order, so that a NaN gives -448 (0xfe).
template <bool kNanNeg = false>
inline __m256i clamp_encode(__m256 q, const Consts& c) {
  // minps / maxps return their 2nd operand when one is NaN: NaN -> 448 (kNanNeg: -448). `hi` has
  // v's sign (the other bound keeps it) and serves as the sign mask.
  __m256 hi;
  if constexpr (kNanNeg) {
    hi = _mm256_max_ps(q, c.cm448);
    q = _mm256_min_ps(hi, c.c448);
  } else {
    hi = _mm256_min_ps(q, c.c448);
    q = _mm256_max_ps(hi, c.cm448);
  }
  const __m256 a = _mm256_and_ps(q, c.absmask);
  const __m256i m = _mm256_max_epi32(_mm256_castps_si256(_mm256_and_ps(q, c.expmask)), c.min_normal_bits);
  const __m256i t = _mm256_castps_si256(_mm256_fmadd_ps(_mm256_castsi256_ps(m), c.c2p20, a));  // the one rounding
  const __m256i raw = _mm256_add_epi32(_mm256_sub_epi32(t, m), _mm256_srli_epi32(m, 20));
  // The sign picks the constant (56, or 184 = 56 + 0x80) off the critical path: one add less.
  const __m256i k = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(c.c56), _mm256_castsi256_ps(c.c184), hi));
  return _mm256_add_epi32(raw, k);
}

// The E2M1 encoders' rounding (see e2m1_encode_bf16, mx_e2m1_encode): for a <= 6 (a >= 0, or
// e2m1_encode_bf16's a - 2^-10), bits(t) - bits(m) + (bits(m) >> 22) with m = 2^max(exponent of
// a, 0) and t = fma(m, 2^22, a) (a onto the E2M1 grid, nearest even); the magnitude is that
// minus (22 << 23) + 254, which the sign constants c4pos / c4neg fold in.
inline __m256i e2m1_grid_raw(__m256 a, const Consts& c) {
  const __m256i m = _mm256_max_epi32(_mm256_castps_si256(_mm256_and_ps(a, c.expmask)), _mm256_castps_si256(c.one_f));
  const __m256i t = _mm256_castps_si256(_mm256_fmadd_ps(_mm256_castsi256_ps(m), c.c2p22, a));
  return _mm256_add_epi32(_mm256_sub_epi32(t, m), _mm256_srli_epi32(m, 22));
}

// E2M1 code (0..15, clean 32-bit lanes) of v = y * inv, y a bf16 value and inv a power of two
// (so v has at most 8 significant bits, or is below 2^-126).
//
// a = min(|v|, 6) (NaN -> 6). The code's magnitude rounds a onto the E2M1 grid with ties toward
// zero (thresholds strictly below a). On the grid, ties are multiples of 2^-2 and every a >= 2^-2
// is a multiple of 2^-9, so a' = a - 2^-10 (exact there; below 2^-2 the result is tiny either
// way) is never a tie and round-to-nearest of a' is round-half-down of a. As in clamp_encode:
// Ec = max(exponent of a', 0), m = 2^Ec, t = a' + 2^(Ec+22) (one rounding, grid step 2^(Ec-1)),
// k = bits(t) - bits(m) - (22 << 23), magnitude = k + 2 * Ec = k + (bits(m) >> 22) - 254.
// Sign: v < -0.25 exactly when v < 0 and the magnitude is not 0 (a NaN is never below).
inline __m256i e2m1_encode_bf16(__m256 v, const Consts& c) {
  const __m256i raw = e2m1_grid_raw(_mm256_sub_ps(_mm256_min_ps(_mm256_and_ps(v, c.absmask), c.c6), c.c2m10), c);
  const __m256 neg = _mm256_cmp_ps(v, c.cm025, _CMP_LT_OQ);
  return _mm256_add_epi32(raw, _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(c.c4pos),
                                                                    _mm256_castsi256_ps(c.c4neg), neg)));
}

// The same for any v (recipes that do not round to bf16 before the codes): thresholds counted.
inline __m256i e2m1_encode_any(__m256 v, const Consts& c) {
  const __m256 a = _mm256_min_ps(_mm256_and_ps(v, c.absmask), c.c6);
  __m256i n = _mm256_setzero_si256();
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    n = _mm256_sub_epi32(n, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GT_OQ)));
  const __m256 neg = _mm256_cmp_ps(v, c.cm025, _CMP_LT_OQ);
  return _mm256_or_si256(n, _mm256_and_si256(_mm256_castps_si256(neg), _mm256_set1_epi32(8)));
}

// vLLM's E2M1 code (Quantizer::kVllm, row.h's mx_e2m1_encode) of any float v: round to nearest,
// ties to even, saturating at 6, bit 3 = the sign bit of v on every code (zero included); a NaN
// gives 0x7 whatever its sign. a = min(|v|, 6) (minps returns its 2nd operand: NaN -> 6); with
// Ec = max(exponent of a, 0) the E2M1 grid around a has step 2^(Ec-1), so t = a + 2^(Ec+22)
// (m = 2^Ec, the fma's one rounding) is a rounded onto the grid with ties to even:
// bits(t) = bits(m) + (22 << 23) + k, and k has the parity of the code k + 2 * Ec (a carry k = 4
// is the next binade's first code). The sign comes from hi = min(v, 6): v's sign bit, +6 for a
// NaN; it picks the constant.
inline __m256i mx_e2m1_encode(__m256 v, const Consts& c) {
  const __m256 hi = _mm256_min_ps(v, c.c6);
  const __m256i raw = e2m1_grid_raw(_mm256_min_ps(_mm256_and_ps(v, c.absmask), c.c6), c);
  return _mm256_add_epi32(raw, _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(c.c4pos),
                                                                    _mm256_castsi256_ps(c.c4neg), hi)));
}

// The V4.1 packer's E2M1 code (Quantizer::kFp4Rne / kFp4TwoStage, row.h's e2m1_encode_rne) of any
// float v: the magnitude of mx_e2m1_encode (nearest, ties to even, saturating at 6, NaN -> 7) and
// the sign bit only on a nonzero magnitude of a negative v, i.e. exactly when v < -0.25.
inline __m256i rne_e2m1_encode(__m256 v, const Consts& c) {
  const __m256i raw = e2m1_grid_raw(_mm256_min_ps(_mm256_and_ps(v, c.absmask), c.c6), c);
  const __m256 neg = _mm256_cmp_ps(v, c.cm025, _CMP_LT_OQ);
  return _mm256_add_epi32(raw, _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(c.c4pos),
                                                                    _mm256_castsi256_ps(c.c4neg), neg)));
}

// Stage 1 of Quantizer::kFp4TwoStage on 8 values (row.h's stage1_value(x, inv1, sc): u = fma(x,
// inv1, +0), its E2M1 value with ties to even, saturating at 6, NaN -> +6, with u's sign, times sc)
// by rounding u itself onto the grid (the CUDA kernel's stage1_value_fast): the E2M1 values are
// the multiples of 1/2 on [0, 2], of 1 on [2, 4], of 2 on [4, 6], and on each range a multiple
// k * s of the step s has the code of k's parity, so ties to the even code are ties to the even
// multiple. w = clamp(u, -6, 6) (minps returns its 2nd operand: NaN -> 6), p = 2^floor(log2
// max(|w|, 1)) in {1, 2, 4} (the step is p / 2), i.e. max(the exponent bits of w alone, 1) (a
// positive power of two, or +0 for a zero or subnormal w): t = fma(p, 1.5 * 2^22, w) rounds w to a multiple
// of p / 2 with ties to even (ulp(t) = p / 2), and fma(-p, 1.5 * 2^22, t) gives it back exactly.
// The same floats as stage1_value but for the sign of a zero (u = x * inv1 and a negative u that
// rounds to 0 give +0 where stage1_value may give -0): the result only feeds the block maximum of
// |.| and the packer, whose code of +-0 is 0 either way (and +-0 * sc is NaN alike at sc = Inf).
// 8 operations (12 before).
// kClamp = false skips the clamp of u (6 operations), for a row whose values are all finite (see
// front_body): then the block's inverse is 2^-k with 2^k >= RN(amax * fl(1/6)), fl(1/6) > 1/6, so
// |u| <= amax * 2^-k <= 6 (1 + 2^-23), which the step-2 grid rounds to +-6 as the clamp's +-6, and
// u is never NaN.
template <bool kClamp = true>
inline __m256 stage1_values(__m256 x, __m256 inv1, __m256 sc, const Consts& c) {
  const __m256 u = _mm256_mul_ps(x, inv1);
  const __m256 w = kClamp ? _mm256_max_ps(_mm256_min_ps(u, c.c6), c.cm6) : u;
  const __m256 p = _mm256_max_ps(_mm256_and_ps(w, c.expmask), c.one_f);
  const __m256 t = _mm256_fmadd_ps(p, c.c15p22, w);
  return _mm256_mul_ps(_mm256_fnmadd_ps(p, c.c15p22, t), sc);
}

// Stage 1 on a row in buf: its values replaced by their stage-1 values, mb[b] = the lanes' maxima of
// their magnitudes in block b (NaN ignored: maxps returns its 2nd operand, the running max).
template <bool kClamp>
__attribute__((always_inline)) inline void stage1_row(float* row, const __m256 (&vinv)[4], const __m256 (&vsc)[4],
                                                      __m256 (&mb)[4], const Consts& c) {
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half)
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      float* q = row + 64 * half + 8 * k;
      const __m256 v = stage1_values<kClamp>(_mm256_load_ps(q), vinv[k >> 1], vsc[k >> 1], c);
      mb[k >> 1] = _mm256_max_ps(_mm256_and_ps(v, c.absmask), mb[k >> 1]);
      _mm256_store_ps(q, v);
    }
}

template <class R>
inline __m256i e2m1_encode(__m256 v, const Consts& c) {
  if (kMxFp4<R>) return mx_e2m1_encode(v, c);
  if (kRneFp4<R>) return rne_e2m1_encode(v, c);
  return R::kBf16AfterHadamard ? e2m1_encode_bf16(v, c) : e2m1_encode_any(v, c);
}

// vLLM's FP8 code of q = x * inv (row.h's vllm_fp8_code): clamp_encode, whose clamp turns NaN into
// +448 (0x7e), plus one on NaN lanes (0x7f; the all-ones compare is -1). Saturation of +-Inf and
// |q| > 448, nearest even and the sign of zero are clamp_encode's already.
inline __m256i vllm_fp8_encode(__m256 q, const Consts& c) {
  return _mm256_sub_epi32(clamp_encode(q, c), _mm256_castps_si256(_mm256_cmp_ps(q, q, _CMP_UNORD_Q)));
}

template <class R>
inline __m256i fp8_encode(__m256 q, const Consts& c) {
  // gfx942. kSglang224: row.h's clamp to [-224, 224] (minps: NaN -> 224, code 0x76), after which
  // clamp_encode's own clamp changes nothing. kVllmFnuz224 (q = 2 * x / q_scale): vLLM's code
  // (NaN -> 0x7f), made e4m3fnuz after the interleave (back_body).
  if constexpr (R::kQuant == Quantizer::kSglang224)
    return clamp_encode(_mm256_max_ps(_mm256_min_ps(q, c.c224), c.cm224), c);
  if constexpr (R::kQuant == Quantizer::kVllmFnuz224) return vllm_fp8_encode(q, c);
  return kNanCode7f<R> ? vllm_fp8_encode(q, c) : clamp_encode<kNanCodeFe<R>>(q, c);
}

// RoPE of one register pair (x0, x1) = pairs j of the recipe: x0' = fma(x0, c, -(x1*s)),
// x1' = fma(x0, s, x1*c) (RopeFma::kFmaX0S) or fma(x1, c, x0*s) (kFmaX1C), then the bf16
// rounding when the recipe has it.
template <class R, DType kDt>
inline void rope_pair(__m256& x0, __m256& x1, __m256 C, __m256 S, const Consts& c) {
  constexpr bool kX1C = R::kRopeFma == RopeFma::kFmaX1C;
  const __m256 xis = _mm256_mul_ps(x1, S);
  const __m256 p1 = kX1C ? _mm256_mul_ps(x0, S) : _mm256_mul_ps(x1, C);  // the second value's product
  __m256 e = _mm256_fmsub_ps(x0, C, xis);
  __m256 o = kX1C ? _mm256_fmadd_ps(x1, C, p1) : _mm256_fmadd_ps(x0, S, p1);
  if (R::kBf16AfterRope) {
    e = round_bf16<kDt>(e, c);
    o = round_bf16<kDt>(o, c);
  }
  x0 = e;
  x1 = o;
}

struct Avx2 {
  using Consts = cpu::Consts;
  static constexpr bool kFp4FrontInline = false;
  static constexpr bool kFp4BackInline = false;  // see back_of (kernel_common.h)
  struct Freqs {
    // Adjacent pairs: lane l of C[m] / S[m]: pair j = 8m + l (in the row's lane order).
    // NeoX pairs (j, j + 32): C[2k] / C[2k + 1] hold cos of the pairs j = 16k + 2l / 16k + 2l + 1
    // (lane l, the row's lane order), the pairs of E[k] / O[k] of the rotated slices; S the same.
    __m256 C[4], S[4];
  };

  template <class R, DType kDt>
  static void load_freqs(const float* f, const Consts&, Freqs& fq) {
    if constexpr (R::kNeox) {
      static_assert(R::kFreqsLayout == FreqsLayout::kHalves, "NeoX pairs: halves freqs only (no recipe needs more)");
      for (int k = 0; k < 2; ++k) {
        if (layout_of<kDt>() == Layout::kNatural) {
          split_f32(f + 16 * k, fq.C[2 * k], fq.C[2 * k + 1]);
          split_f32(f + 32 + 16 * k, fq.S[2 * k], fq.S[2 * k + 1]);
        } else {
          split_shuffled(_mm256_loadu_ps(f + 16 * k), _mm256_loadu_ps(f + 16 * k + 8), fq.C[2 * k], fq.C[2 * k + 1]);
          split_shuffled(_mm256_loadu_ps(f + 32 + 16 * k), _mm256_loadu_ps(f + 40 + 16 * k), fq.S[2 * k],
                         fq.S[2 * k + 1]);
        }
      }
      return;
    }
    for (int m = 0; m < 4; ++m) {
      if (R::kFreqsLayout == FreqsLayout::kInterleaved) {
        if (layout_of<kDt>() == Layout::kNatural)
          split_f32(f + 16 * m, fq.C[m], fq.S[m]);
        else
          split_shuffled(_mm256_loadu_ps(f + 16 * m), _mm256_loadu_ps(f + 16 * m + 8), fq.C[m], fq.S[m]);
      } else {
        if (layout_of<kDt>() == Layout::kNatural) {
          fq.C[m] = _mm256_loadu_ps(f + 8 * m);
          fq.S[m] = _mm256_loadu_ps(f + 32 + 8 * m);
        } else {
          fq.C[m] = load_shuffled8(f + 8 * m);
          fq.S[m] = load_shuffled8(f + 32 + 8 * m);
        }
      }
    }
  }

  // Steps 1-7 of kRows (1 or 2) consecutive rows of one token; results in buf (layout at the
  // top of the file).
  template <class R, DType kDt, int kRows>
  __attribute__((always_inline)) static RowScales front_body(const Problem& p, std::int64_t r0, const Freqs& fq,
                                                             const Consts& c, float (*buf)[128]) {
    constexpr Layout kL = layout_of<kDt>();
    constexpr int kRope0 = R::kRopeOffset / 16;  // first slice of the rotated dims
    // FP4 recipes that rewrite nothing in phase 2 (no Hadamard, no rounding after it) take the
    // block maxima here, from the registers (slices 2b, 2b + 1 = block b), not from buf.
    constexpr bool kAmaxInPhase1 = R::kFp4 && !(R::kHadamard || R::kBf16AfterHadamard);
    __m256 mb1[kRows][4];
    // The two-stage quantizer: fin1[n] = fma(e, o, fin1[n]) over the row's registers is finite only
    // if no NaN or infinity is among the row's values (one leaves it NaN or infinite for good:
    // NaN * x, Inf * 0, Inf - Inf are NaN, Inf * x and Inf + x infinite); an overflowing product
    // or sum of finite values only sends a finite row down the clamping path. A row with a finite
    // fin1 takes stage 1 without the clamp (stage1_values<false>).
    constexpr bool kFin = R::kQuant == Quantizer::kFp4TwoStage && kAmaxInPhase1;
    __m256 fin1[kRows];
    // Phase 1, per 16-element slice k: even/odd split, RoPE, butterfly stride 1, then
    // strides 2, 4, 8 (see the top of the file).
#pragma GCC unroll 2
    for (int n = 0; n < kRows; ++n) {
      if (kAmaxInPhase1)
#pragma GCC unroll 4
        for (int blk = 0; blk < 4; ++blk) mb1[n][blk] = _mm256_setzero_ps();
      if (kFin) fin1[n] = _mm256_setzero_ps();
      __m256 E[8], O[8];
      load_row<kDt>(p.q_input, r0 + n, E, O);
      if constexpr (R::kRope && R::kNeox) {
        // Step 2, NeoX pairs (j, j + 32): slice kRope0 + k with slice kRope0 + k + 2, lane by lane.
#pragma GCC unroll 2
        for (int k = 0; k < 2; ++k) {
          rope_pair<R, kDt>(E[kRope0 + k], E[kRope0 + k + 2], fq.C[2 * k], fq.S[2 * k], c);
          rope_pair<R, kDt>(O[kRope0 + k], O[kRope0 + k + 2], fq.C[2 * k + 1], fq.S[2 * k + 1], c);
        }
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m256 e = E[k], o = O[k];
        if (R::kRope && !R::kNeox && k >= kRope0 && k < kRope0 + 4) {
          // Step 2: RoPE, x' = fma(xr, c, -(xi*s)), x'' = fma(xr, s, xi*c) (or fma(xi, c, xr*s)).
          const __m256 C = fq.C[k - kRope0], S = fq.S[k - kRope0];
          constexpr bool kX1C = R::kRopeFma == RopeFma::kFmaX1C;
          const __m256 xis = _mm256_mul_ps(o, S);
          const __m256 p1 = kX1C ? _mm256_mul_ps(e, S) : _mm256_mul_ps(o, C);
          const __m256 xr = e;
          e = _mm256_fmsub_ps(xr, C, xis);
          o = kX1C ? _mm256_fmadd_ps(o, C, p1) : _mm256_fmadd_ps(xr, S, p1);
          if (R::kBf16AfterRope) {
            e = round_bf16<kDt>(e, c);
            o = round_bf16<kDt>(o, c);
          }
        }
        if (kAmaxInPhase1)  // (maxps returns its 2nd operand, the running max, for a NaN)
          mb1[n][k >> 1] = _mm256_max_ps(_mm256_and_ps(o, c.absmask),
                                         _mm256_max_ps(_mm256_and_ps(e, c.absmask), mb1[n][k >> 1]));
        if (kFin) fin1[n] = _mm256_fmadd_ps(e, o, fin1[n]);
        __m256 sum, dif;
        if (R::kHadamard) {
          // Step 3: stride 1, then 2, 4, 8.
          butterfly(e, o);
          // Stride 2 (x bit 1 = lane bit 0) in each register by addsub: a - b lands in the even
          // lane and b + a in the odd lane of each pair, so from here on lane bit 0 = NOT x bit 1.
          e = _mm256_addsub_ps(e, _mm256_permute_ps(e, 0xB1));
          o = _mm256_addsub_ps(o, _mm256_permute_ps(o, 0xB1));
          // Natural layout: stride 4 is lane bit 1, stride 8 lane bit 2 (128-bit halves).
          // Shuffled layout: stride 4 is lane bit 2, stride 8 lane bit 1.
          // The lane-bit-2 stage: each lane computes fma(r, +-1, swapped halves) = a + b or a - b.
          if (kL == Layout::kShuffled) {
            e = _mm256_fmadd_ps(e, c.sg2, _mm256_permute2f128_ps(e, e, 0x01));
            o = _mm256_fmadd_ps(o, c.sg2, _mm256_permute2f128_ps(o, o, 0x01));
          }
          // The lane-bit-1 stage across the pair: u holds lanes 0,1 (4,5) of e and of o, w lanes
          // 2,3 (6,7), so u + w / u - w are the sums / differences. In the S (sum) and D
          // (difference) registers, lane bit 1 = x bit 0 and the register is that stage's x bit.
          const __m256 u = _mm256_shuffle_ps(e, o, 0x44);
          const __m256 w = _mm256_shuffle_ps(e, o, 0xEE);
          sum = _mm256_add_ps(u, w);
          dif = _mm256_sub_ps(u, w);
          if (kL == Layout::kNatural) {
            sum = _mm256_fmadd_ps(sum, c.sg2, _mm256_permute2f128_ps(sum, sum, 0x01));
            dif = _mm256_fmadd_ps(dif, c.sg2, _mm256_permute2f128_ps(dif, dif, 0x01));
          }
        } else {
          // No butterflies: the same places, by moving values only. In each 128-bit half,
          // S = (e1, e0, o1, o0) and D = (e3, e2, o3, o2): lane bit 0 = NOT x bit 1, lane bit 1 =
          // x bit 0, and the register is lane bit 1 of e / o (natural: x bit 2; shuffled: x bit 3).
          sum = _mm256_shuffle_ps(e, o, 0x11);
          dif = _mm256_shuffle_ps(e, o, 0xBB);
        }
        _mm256_store_ps(buf[n] + 8 * k, sum);
        _mm256_store_ps(buf[n] + 64 + 8 * k, dif);
      }
    }
    // Phase 2, each half (S, then D) on its own: strides 16, 32, 64; step 4 (y = x / sqrt(128));
    // the bf16 rounding (R::kBf16AfterHadamard, FP4 or FP8); step 5, amax ignoring NaN (maxps
    // returns its 2nd operand, the running max, for a NaN): of the row (FP8) or of each block of
    // 32 (FP4).
    constexpr bool kRewrite = R::kHadamard || R::kBf16AfterHadamard;
    __m128 amax[kRows];
#pragma GCC unroll 2
    for (int n = 0; n < kRows; ++n) {
      __m256 m = _mm256_setzero_ps();
      __m256 mb[4] = {m, m, m, m};
      if (kAmaxInPhase1)
#pragma GCC unroll 4
        for (int blk = 0; blk < 4; ++blk) mb[blk] = mb1[n][blk];
#pragma GCC unroll 2
      for (int half = 0; half < 2 && !kAmaxInPhase1; ++half) {
        float* hb = buf[n] + 64 * half;
        __m256 v[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) v[k] = _mm256_load_ps(hb + 8 * k);
        if (R::kHadamard) {
#pragma GCC unroll 3
          for (int s = 1; s < 8; s <<= 1) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k)
              if ((k & s) == 0) butterfly(v[k], v[k + s]);
          }
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          if (R::kHadamard) v[k] = _mm256_mul_ps(v[k], c.hadamard);
          if (R::kBf16AfterHadamard) v[k] = round_bf16<kDt>(v[k], c);
          if (R::kFp4)
            mb[k >> 1] = _mm256_max_ps(_mm256_and_ps(v[k], c.absmask), mb[k >> 1]);
          else
            m = _mm256_max_ps(_mm256_and_ps(v[k], c.absmask), m);
          if (kRewrite) _mm256_store_ps(hb + 8 * k, v[k]);
        }
      }
      if (R::kFp4) {
        amax[n] = max4x8(mb[0], mb[1], mb[2], mb[3]);  // lane k = block k
        if constexpr (R::kQuant == Quantizer::kFp4TwoStage) {
          // Stage 1 of the two-stage quantizer: the fake-quantized values replace the row in buf,
          // and their block amax (NaN ignored) is what the packer's scales see.
          __m128 inv1, sc;
          stage1_scales(amax[n], inv1, sc);
          __m256 vinv[4], vsc[4];
#pragma GCC unroll 4
          for (int blk = 0; blk < 4; ++blk) {
            vinv[blk] = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(inv1), _mm256_set1_epi32(blk));
            vsc[blk] = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(sc), _mm256_set1_epi32(blk));
            mb[blk] = _mm256_setzero_ps();
          }
          // fin1 - fin1 is 0 in every lane exactly when fin1 is finite.
          const __m256 z = _mm256_sub_ps(fin1[n], fin1[n]);
          if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q)) == 0, 1))
            stage1_row<false>(buf[n], vinv, vsc, mb, c);
          else
            stage1_row<true>(buf[n], vinv, vsc, mb, c);
          amax[n] = max4x8(mb[0], mb[1], mb[2], mb[3]);
        }
      } else {
        m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 0x01));
        m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4E));
        m = _mm256_max_ps(m, _mm256_permute_ps(m, 0xB1));
        amax[n] = _mm256_castps256_ps128(m);  // all lanes hold the max
      }
    }
    return scales_of<R, kRows>(amax);
  }

  // Codes, sf bytes and weights_out of the rows whose front left buf and rs.
  template <class R, DType kDt, int kRows>
  __attribute__((always_inline)) static void back_body(const Problem& p, std::int64_t r0, std::int64_t b,
                                                       std::int64_t h0, const Consts& c, const float (*buf)[128],
                                                       const RowScales& rs) {
    constexpr Layout kL = layout_of<kDt>();
#pragma GCC unroll 2
    for (int n = 0; n < kRows; ++n) {
      if (R::kFp4) {
        // Per block of 32 dims: registers A, B (k = 2b; S, D) and C, D (k = 2b + 1; S, D).
        // packus (clean codes 0..15 never saturate) gives, in each 128-bit half, bytes 4d + i =
        // the code of lane 4h + i of register d; or-ing in the dword shifted right by 12 puts
        // the code of lane 4h + i + 2 (the odd partner: lane bit 1 = x bit 0) in the high
        // nibble of bytes 4d + 0 and 4d + 1. p4a / p4b then gather those 8 bytes per half
        // (natural: half 0 holds pairs 0-3, 8-11, half 1 pairs 4-7, 12-15 of the block;
        // shuffled: half 0 pairs 0,1,4,5,8,9,12,13, half 1 the rest), and one permute (natural:
        // dwords; shuffled: qwords, then bytes) puts them in order.
        std::uint8_t* out = p.q_out + (r0 + n) * 64;
        __m256i packed[4];
#pragma GCC unroll 4
        for (int blk = 0; blk < 4; ++blk) {
          const __m256 vinv = _mm256_permutevar8x32_ps(rs.inv4, _mm256_set1_epi32(4 * n + blk));
          const float* s0 = buf[n] + 16 * blk;
          const __m256i A = e2m1_encode<R>(_mm256_mul_ps(_mm256_load_ps(s0), vinv), c);
          const __m256i B = e2m1_encode<R>(_mm256_mul_ps(_mm256_load_ps(s0 + 64), vinv), c);
          const __m256i C = e2m1_encode<R>(_mm256_mul_ps(_mm256_load_ps(s0 + 8), vinv), c);
          const __m256i D = e2m1_encode<R>(_mm256_mul_ps(_mm256_load_ps(s0 + 72), vinv), c);
          const __m256i z = _mm256_packus_epi16(_mm256_packus_epi32(A, B), _mm256_packus_epi32(C, D));
          packed[blk] = _mm256_or_si256(z, _mm256_srli_epi32(z, 12));
        }
#pragma GCC unroll 2
        for (int hb = 0; hb < 2; ++hb) {
          __m256i v = _mm256_or_si256(_mm256_shuffle_epi8(packed[2 * hb], c.p4a),
                                      _mm256_shuffle_epi8(packed[2 * hb + 1], c.p4b));
          if (kL == Layout::kNatural) {
            v = _mm256_permutevar8x32_epi32(v, c.out_perm);
          } else {
            v = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(v, 0xD8), c.fin_shuffled);
          }
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * hb), v);
        }
        const std::uint32_t sf = fp4_sf_word(rs.e4, n);
        std::memcpy(p.q_sf + 4 * (r0 + n), &sf, 4);
        write_weight<R>(p, r0 + n, b, h0 + n, 0.0f);
        continue;
      }
      // Steps 8-9 (vLLM: x * (1 / q_scale), the same floats as x / q_scale, see vllm_fp8_scales),
      // then interleave the codes back into element order.
      const __m256 vinv = _mm256_set1_ps(n == 0 ? lane_of<0>(rs.inv) : lane_of<1>(rs.inv));
      std::uint8_t* out = p.q_out + (r0 + n) * 128;
#pragma GCC unroll 4
      for (int k = 0; k < 8; k += 2) {
        const __m256i e0 = fp8_encode<R>(_mm256_mul_ps(_mm256_load_ps(buf[n] + 8 * k), vinv), c);
        const __m256i o0 = fp8_encode<R>(_mm256_mul_ps(_mm256_load_ps(buf[n] + 64 + 8 * k), vinv), c);
        const __m256i e1 = fp8_encode<R>(_mm256_mul_ps(_mm256_load_ps(buf[n] + 8 * k + 8), vinv), c);
        const __m256i o1 = fp8_encode<R>(_mm256_mul_ps(_mm256_load_ps(buf[n] + 64 + 8 * k + 8), vinv), c);
        __m256i v = _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(e0, c.ns0), _mm256_shuffle_epi8(o0, c.nd0)),
                                    _mm256_or_si256(_mm256_shuffle_epi8(e1, c.ns1), _mm256_shuffle_epi8(o1, c.nd1)));
        // Natural: 8-byte groups (k lanes 0-3, k+1 lanes 0-3 | k lanes 4-7, k+1 lanes 4-7).
        // Shuffled: 4-byte groups x0-3, x8-11 of k, of k+1 | x4-7, x12-15 of k, of k+1.
        if (kL == Layout::kNatural)
          v = _mm256_permute4x64_epi64(v, 0xD8);
        else
          v = _mm256_permutevar8x32_epi32(v, c.out_perm);
        if (R::kFnuz) v = _mm256_andnot_si256(_mm256_cmpeq_epi8(v, c.c80), v);  // -0 -> +0
        if constexpr (R::kQuant == Quantizer::kVllmFnuz224)
          v = _mm256_sub_epi8(v, _mm256_cmpeq_epi8(v, c.c7f));  // NaN: 0x7f -> 0x80, e4m3fnuz's NaN
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * k), v);
      }
      write_weight<R>(p, r0 + n, b, h0 + n, n == 0 ? lane_of<0>(rs.scale) : lane_of<1>(rs.scale));
      write_scale_out<R>(p, r0 + n, n == 0 ? lane_of<0>(rs.scale) : lane_of<1>(rs.scale));
    }
  }
};

}  // namespace

void kernel_avx2(const Problem& p, std::int64_t row_begin, std::int64_t row_end) {
  run_kernel<Avx2>(p, row_begin, row_end);
}

void quantize_avx2(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  const Consts c;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -128, -128, -128, -128, -128, -128, -128, -128,
                                        -128, -128, -128, -128, 0, 4, 8, 12, -128, -128, -128, -128,
                                        -128, -128, -128, -128, -128, -128, -128, -128);
  for (std::int64_t i = 0; i + 8 <= n; i += 8) {
    const __m256i code = _mm256_shuffle_epi8(clamp_encode(_mm256_mul_ps(_mm256_loadu_ps(y + i), vinv), c), pick);
    const std::uint32_t lo = std::uint32_t(_mm256_extract_epi32(code, 0));
    const std::uint32_t hi = std::uint32_t(_mm256_extract_epi32(code, 4));
    std::memcpy(out + i, &lo, 4);
    std::memcpy(out + i + 4, &hi, 4);
  }
}

namespace {
// The test hooks: one encoder over n values (n a multiple of 8), each times inv first.
template <class Encode>
void encode_hook(const float* y, float inv, std::uint8_t* out, std::int64_t n, Encode encode) {
  const Consts c;
  const __m256 vinv = _mm256_set1_ps(inv);
  for (std::int64_t i = 0; i + 8 <= n; i += 8) {
    alignas(32) std::int32_t code[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(code), encode(_mm256_mul_ps(_mm256_loadu_ps(y + i), vinv), c));
    for (int j = 0; j < 8; ++j) out[i + j] = std::uint8_t(code[j]);
  }
}
}  // namespace

void encode_fp4_avx2(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m256 v, const Consts& c) { return e2m1_encode_bf16(v, c); });
}
void quantize_vllm_avx2(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m256 v, const Consts& c) { return vllm_fp8_encode(v, c); });
}
void encode_mxfp4_avx2(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m256 v, const Consts& c) { return mx_e2m1_encode(v, c); });
}
void encode_rne_fp4_avx2(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  encode_hook(y, inv, out, n, [](__m256 v, const Consts& c) { return rne_e2m1_encode(v, c); });
}
void stage1_fp4_avx2(const float* x, float inv1, float sc, float* out, std::int64_t n) {
  const Consts c;
  const __m256 vinv = _mm256_set1_ps(inv1), vsc = _mm256_set1_ps(sc);
  for (std::int64_t i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, stage1_values(_mm256_loadu_ps(x + i), vinv, vsc, c));
}
void rne_ue8m0_avx2(const float* amax, std::uint8_t* e, float* inv, std::int64_t n) {
  rne_ue8m0_hook(amax, e, inv, n);
}

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q

// The key side's kernel on this file's encoders (docs/KSIDE-SPEC.md, src/cpu/kside_body.h).
#include "cpu/kside_avx2.inc"
