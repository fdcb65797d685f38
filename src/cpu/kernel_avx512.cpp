// AVX-512 kernel (F/BW/VL/DQ; compiled with those flags on this file only).
//
// Layout: a row of 128 floats lives in 8 registers of 16 lanes, split into even and odd
// elements: E[k] lane l = x[32k + 2l], O[k] lane l = x[32k + 2l + 1] (for bf16 this split
// is free: a 32-bit load holds one even and one odd element). Then
//   - the RoPE pairs (x[64+2j], x[65+2j]) are (E[2+m] lane l, O[2+m] lane l), j = 16m + l;
//   - butterfly stride 1 is E +/- O; strides 32, 64 pair registers (k bits 0, 1);
//   - strides 2, 4, 8, 16 pair lanes (lane bits 0..3) inside a register: with p the register
//     with its lanes swapped, each lane computes fma(r, +-1, p), i.e. exactly a + b or a - b
//     (the product by +-1 is exact, so the single rounding is the one of the add/sub).
// Every value goes through the same IEEE operations, in the same order, as SPEC.md.
// This file includes no shared header with inline functions (see cpu_internal.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/cpu_internal.h"

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

constexpr float kHadamard = 0x1.6a09e6p-4f;

inline float load_scalar(const void* base, DType dt, std::int64_t i) {
  if (dt == DType::kFloat32) return static_cast<const float*>(base)[i];
  const std::uint16_t h = static_cast<const std::uint16_t*>(base)[i];
  if (dt == DType::kFloat16) return _cvtsh_ss(h);
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Consts {
  __m512 sg0, sg1, sg2, sg3;  // +1 where the lane bit is clear, -1 where set
  __m512 hadamard, c448, cm448, c512, c2p23;
  __m512i even, odd, hi16, absmask, kp, bit20, one, min_normal, c80, cff;
  Consts() {
    sg0 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
    sg1 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
    sg2 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
    sg3 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
    hadamard = _mm512_set1_ps(kHadamard);
    c448 = _mm512_set1_ps(448.0f);
    cm448 = _mm512_set1_ps(-448.0f);
    c512 = _mm512_set1_ps(512.0f);
    c2p23 = _mm512_set1_ps(8388608.0f);
    even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    hi16 = _mm512_set1_epi32(int(0xffff0000u));
    absmask = _mm512_set1_epi32(0x7fffffff);
    kp = _mm512_set1_epi32(int(0x7ffffu - (960u << 20)));
    bit20 = _mm512_set1_epi32(1 << 20);
    one = _mm512_set1_epi32(1);
    min_normal = _mm512_set1_epi32(0x3c800000);
    c80 = _mm512_set1_epi32(0x80);
    cff = _mm512_set1_epi32(0xff);
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

// Steps 8..9 for 16 values already multiplied by inv: clamp (NaN -> +448) and encode.
// Returns the e4m3fn code in the low byte of each 32-bit lane (upper bytes: don't care).
inline __m512i clamp_encode(__m512 q, const Consts& c) {
  q = _mm512_min_ps(q, c.c448);  // minps returns its 2nd operand when one is NaN: NaN -> 448
  q = _mm512_max_ps(q, c.cm448);
  const __m512i u = _mm512_castps_si512(q);
  const __m512i a = _mm512_and_si512(u, c.absmask);
  // |v| < 2^-6: subnormal codes, |v| * 512 rounded to an integer (ties to even) by adding 2^23.
  const __m512i sub = _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(a), c.c512, c.c2p23));
  // Normal: round the mantissa to 3 bits (ties to even) and re-bias the exponent 127 -> 7.
  __m512i n = _mm512_add_epi32(u, c.kp);
  n = _mm512_mask_add_epi32(n, _mm512_test_epi32_mask(u, c.bit20), n, c.one);
  const __mmask16 normal = _mm512_cmpge_epu32_mask(a, c.min_normal);
  const __m512i code = _mm512_mask_srli_epi32(sub, normal, n, 20);
  return _mm512_mask_or_epi32(code, _mm512_movepi32_mask(u), code, c.c80);
}

// Lane n of v, as a float vector broadcast to all 16 lanes.
template <int kN>
inline __m512 broadcast_lane(__m128 v) {
  return _mm512_broadcastss_ps(_mm_shuffle_ps(v, v, _MM_SHUFFLE(kN, kN, kN, kN)));
}
template <int kN>
inline float lane(__m128 v) {
  return _mm_cvtss_f32(_mm_shuffle_ps(v, v, _MM_SHUFFLE(kN, kN, kN, kN)));
}

// kRows (1 or 2) consecutive rows of one token, interleaved so that the processor always has
// independent work (one row's chain of shuffles, reductions and divisions is long).
template <DType kDt, int kRows>
inline void process_rows(const Problem& p, std::int64_t r0, std::int64_t b, std::int64_t h0,
                         const __m512 C[2], const __m512 S[2], const Consts& c) {
  __m512 E[kRows][4], O[kRows][4];
#pragma GCC unroll 2
  for (int n = 0; n < kRows; ++n) load_row<kDt>(p.q_input, r0 + n, c, E[n], O[n]);
  // Step 2: RoPE, x' = fma(xr, c, -(xi*s)), x'' = fma(xr, s, xi*c).
#pragma GCC unroll 2
  for (int n = 0; n < kRows; ++n)
#pragma GCC unroll 2
    for (int m = 0; m < 2; ++m) {
      const __m512 xr = E[n][2 + m], xi = O[n][2 + m];
      const __m512 xis = _mm512_mul_ps(xi, S[m]);
      const __m512 xic = _mm512_mul_ps(xi, C[m]);
      E[n][2 + m] = _mm512_fmsub_ps(xr, C[m], xis);
      O[n][2 + m] = _mm512_fmadd_ps(xr, S[m], xic);
    }
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
  // Steps 4-5: y = x * 1/sqrt(128); amax ignoring NaN (maxps returns its 2nd operand, the
  // running max, when the new value is NaN). After the reduction all 4 lanes hold the max.
  __m128 amax[kRows];
#pragma GCC unroll 2
  for (int n = 0; n < kRows; ++n) {
    __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      E[n][k] = _mm512_mul_ps(E[n][k], c.hadamard);
      O[n][k] = _mm512_mul_ps(O[n][k], c.hadamard);
      m0 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(E[n][k]), c.absmask)), m0);
      m1 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(O[n][k]), c.absmask)), m1);
    }
    const __m512 m = _mm512_max_ps(m0, m1);
    const __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(m),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m), 1)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_permute_ps(m4, 0x4E));
    amax[n] = _mm_max_ps(m4, _mm_permute_ps(m4, 0xB1));
  }
  // Steps 6-7: true IEEE divisions, one division instruction for all the rows (lane n = row n).
  const __m128 am = kRows == 1 ? amax[0] : _mm_unpacklo_ps(amax[0], amax[kRows - 1]);
  const __m128 scale = _mm_div_ps(_mm_max_ps(am, _mm_set1_ps(1e-4f)), _mm_set1_ps(448.0f));
  const __m128 inv = _mm_div_ps(_mm_set1_ps(1.0f), scale);
  // Steps 8-9; the even/odd codes of each pair go to the two bytes of a 16-bit word.
#pragma GCC unroll 2
  for (int n = 0; n < kRows; ++n) {
    const __m512 vinv = n == 0 ? broadcast_lane<0>(inv) : broadcast_lane<1>(inv);
    std::uint8_t* out = p.q_out + (r0 + n) * 128;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i e = clamp_encode(_mm512_mul_ps(E[n][k], vinv), c);
      const __m512i o = clamp_encode(_mm512_mul_ps(O[n][k], vinv), c);
      // (e & 0xff) | (o << 8), low 16 bits of each lane, then narrowed to 16 words.
      const __m512i w = _mm512_ternarylogic_epi32(e, _mm512_slli_epi32(o, 8), c.cff, 0xE4);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * k), _mm512_cvtepi32_epi16(w));
    }
    // Step 10.
    const float w = load_scalar(p.weight, p.dtype, b * p.weight_stride_b + h0 + n);
    p.weights_out[r0 + n] = (w * p.weight_scale) * (n == 0 ? lane<0>(scale) : lane<1>(scale));
  }
}

template <DType kDt>
void run_rows(const Problem& p, std::int64_t row_begin, std::int64_t row_end) {
  const Consts c;
  const std::int64_t H = p.H;
  std::int64_t r = row_begin;
  while (r < row_end) {
    const std::int64_t b = r / H;
    const std::int64_t token_end = b * H + H < row_end ? b * H + H : row_end;
    const std::int64_t pos = p.pos_dtype == DType::kInt32
                                 ? std::int64_t(static_cast<const std::int32_t*>(p.positions)[b])
                                 : static_cast<const std::int64_t*>(p.positions)[b];
    const float* f = p.freqs + pos * 64;
    __m512 C[2], S[2];
    for (int m = 0; m < 2; ++m) {
      const __m512 a = _mm512_loadu_ps(f + 32 * m);
      const __m512 bb = _mm512_loadu_ps(f + 32 * m + 16);
      C[m] = _mm512_permutex2var_ps(a, c.even, bb);
      S[m] = _mm512_permutex2var_ps(a, c.odd, bb);
    }
    for (; r + 2 <= token_end; r += 2) process_rows<kDt, 2>(p, r, b, r - b * H, C, S, c);
    if (r < token_end) {
      process_rows<kDt, 1>(p, r, b, r - b * H, C, S, c);
      ++r;
    }
  }
}

}  // namespace

void kernel_avx512(const Problem& p, std::int64_t row_begin, std::int64_t row_end) {
  switch (p.dtype) {
    case DType::kBFloat16: run_rows<DType::kBFloat16>(p, row_begin, row_end); break;
    case DType::kFloat16: run_rows<DType::kFloat16>(p, row_begin, row_end); break;
    default: run_rows<DType::kFloat32>(p, row_begin, row_end); break;
  }
}

void quantize_avx512(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  const Consts c;
  const __m512 vinv = _mm512_set1_ps(inv);
  for (std::int64_t i = 0; i + 16 <= n; i += 16) {
    const __m512i code = clamp_encode(_mm512_mul_ps(_mm512_loadu_ps(y + i), vinv), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(code));
  }
}

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
