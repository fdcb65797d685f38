// AVX2 + FMA + F16C kernel (compiled with -mavx2 -mfma -mf16c on this file only).
//
// Layout: a row of 128 floats lives in 16 registers of 8 lanes, split into even and odd
// elements: E[k] lane l = x[16k + 2l], O[k] lane l = x[16k + 2l + 1]. Then
//   - the RoPE pairs (x[64+2j], x[65+2j]) are (E[4+m] lane l, O[4+m] lane l), j = 8m + l;
//   - butterfly stride 1 is E +/- O; strides 16, 32, 64 pair registers (k bits 0, 1, 2);
//   - strides 2, 4, 8 pair lanes (lane bits 0, 1, 2) inside a register. Stride 2: with p the
//     register with its pairs of lanes swapped, addsub(r, p) gives a - b in the even lane and
//     b + a in the odd one (lane bit 0 = NOT x bit 1 from then on). The stride on lane bit 2
//     (halves): fma(r, +-1, swapped halves), exactly a + b or a - b (a product by +-1 is
//     exact, so the single rounding is the one of the add/sub). The stride on lane bit 1: two
//     shufps gather the partners of E[k] and O[k] into u and w, and u + w, u - w become the
//     S and D registers (that stride's x bit becomes the register, lane bit 1 = x bit 0).
//     Only the output interleave cares about where each value sits.
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

// Two lane orders. kNatural: lane l of E[k] holds x[16k + 2l] (bf16: free from a 32-bit
// load). kShuffled: what one shufps of two registers gives, lanes 0..7 holding x[16k + 2l']
// with l' = 0, 1, 4, 5, 2, 3, 6, 7: lane bits 1 and 2 swap roles (used for fp16 and fp32,
// saving a cross-lane permute per register). The butterflies pick their shuffles and the
// output interleave its permute accordingly.
enum class Layout { kNatural, kShuffled };

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

template <DType kDt>
constexpr Layout layout_of() {
  return kDt == DType::kBFloat16 ? Layout::kNatural : Layout::kShuffled;
}

template <DType kDt>
inline void load_row(const void* base, std::int64_t r, __m256 E[8], __m256 O[8]) {
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
  __m256i out_perm;
  __m256i ns0, nd0, ns1, nd1;  // output interleave: S/D registers of slices k, k + 1
  Consts() {
    sg2 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
    hadamard = _mm256_set1_ps(kHadamard);
    absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    c448 = _mm256_set1_ps(448.0f);
    cm448 = _mm256_set1_ps(-448.0f);
    expmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
    c2p20 = _mm256_set1_ps(0x1p20f);
    c56 = _mm256_set1_epi32(56);    // (8 * 6 - 8 * 127) mod 256
    c184 = _mm256_set1_epi32(184);  // the same + 0x80 (sign)
    min_normal_bits = _mm256_set1_epi32(0x3c800000);  // 2^-6
    out_perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const char z = char(0x80);
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
  }
};

inline void butterfly(__m256& a, __m256& b) {
  const __m256 t = a;
  a = _mm256_add_ps(t, b);
  b = _mm256_sub_ps(t, b);
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
inline __m256i clamp_encode(__m256 q, const Consts& c) {
  // minps returns its 2nd operand when one is NaN: NaN -> 448. `hi` has v's sign (the max
  // with -448 keeps it) and serves as the sign mask.
  const __m256 hi = _mm256_min_ps(q, c.c448);
  q = _mm256_max_ps(hi, c.cm448);
  const __m256 a = _mm256_and_ps(q, c.absmask);
  const __m256i m = _mm256_max_epi32(_mm256_castps_si256(_mm256_and_ps(q, c.expmask)), c.min_normal_bits);
  const __m256i t = _mm256_castps_si256(_mm256_fmadd_ps(_mm256_castsi256_ps(m), c.c2p20, a));  // the one rounding
  const __m256i raw = _mm256_add_epi32(_mm256_sub_epi32(t, m), _mm256_srli_epi32(m, 20));
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(_mm256_add_epi32(raw, c.c56)),
                                              _mm256_castsi256_ps(_mm256_add_epi32(raw, c.c184)), hi));
}

template <int kN>
inline float lane(__m128 v) {
  return _mm_cvtss_f32(_mm_shuffle_ps(v, v, _MM_SHUFFLE(kN, kN, kN, kN)));
}

// kRows (1 or 2) consecutive rows of one token, phase by phase, so that the processor always
// has independent work. The work is split in two: front (steps 1-7: everything up to the
// divisions, results left in buf) and back (steps 8-10, from buf). run_rows issues the front of
// the next rows before the back of the previous ones, so that the long chain of the amax
// reduction and the two divisions overlaps with independent encoding work instead of stalling
// the pipeline. Lane n of scale / inv belongs to row n.
struct RowScale {
  __m128 scale, inv;
};

template <DType kDt, int kRows>
inline RowScale front_rows(const Problem& p, std::int64_t r0, const __m256 C[4], const __m256 S[4],
                           const Consts& c, float (*buf)[16 * 8]) {
  constexpr Layout kL = layout_of<kDt>();
  // Phase 1, per 16-element slice k: even/odd split, RoPE (k >= 4), butterfly stride 1, then
  // strides 2, 4, 8 (see the top of the file).
#pragma GCC unroll 2
  for (int n = 0; n < kRows; ++n) {
    __m256 E[8], O[8];
    load_row<kDt>(p.q_input, r0 + n, E, O);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m256 e = E[k], o = O[k];
      if (k >= 4) {
        // Step 2: RoPE, x' = fma(xr, c, -(xi*s)), x'' = fma(xr, s, xi*c).
        const __m256 xis = _mm256_mul_ps(o, S[k - 4]);
        const __m256 xic = _mm256_mul_ps(o, C[k - 4]);
        const __m256 xr = e;
        e = _mm256_fmsub_ps(xr, C[k - 4], xis);
        o = _mm256_fmadd_ps(xr, S[k - 4], xic);
      }
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
      __m256 sum = _mm256_add_ps(u, w), dif = _mm256_sub_ps(u, w);
      if (kL == Layout::kNatural) {
        sum = _mm256_fmadd_ps(sum, c.sg2, _mm256_permute2f128_ps(sum, sum, 0x01));
        dif = _mm256_fmadd_ps(dif, c.sg2, _mm256_permute2f128_ps(dif, dif, 0x01));
      }
      // buf[n][8k] = S, buf[n][64 + 8k] = D.
      _mm256_store_ps(buf[n] + 8 * k, sum);
      _mm256_store_ps(buf[n] + 64 + 8 * k, dif);
    }
  }
  // Phase 2, each half (S, then D) on its own: strides 16, 32, 64; step 4 (y = x / sqrt(128));
  // step 5 (amax ignoring NaN: maxps returns its 2nd operand, the running max, for a NaN).
  __m128 amax[kRows];
#pragma GCC unroll 2
  for (int n = 0; n < kRows; ++n) {
    __m256 m = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      float* hb = buf[n] + 64 * half;
      __m256 v[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) v[k] = _mm256_load_ps(hb + 8 * k);
#pragma GCC unroll 3
      for (int s = 1; s < 8; s <<= 1) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k)
          if ((k & s) == 0) butterfly(v[k], v[k + s]);
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        v[k] = _mm256_mul_ps(v[k], c.hadamard);
        m = _mm256_max_ps(_mm256_and_ps(v[k], c.absmask), m);
        _mm256_store_ps(hb + 8 * k, v[k]);
      }
    }
    m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 0x01));
    m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4E));
    m = _mm256_max_ps(m, _mm256_permute_ps(m, 0xB1));
    amax[n] = _mm256_castps256_ps128(m);  // all lanes hold the max
  }
  // Steps 6-7: true IEEE divisions, one division instruction for all the rows (lane n = row n).
  const __m128 am = kRows == 1 ? amax[0] : _mm_unpacklo_ps(amax[0], amax[kRows - 1]);
  const __m128 scale = _mm_div_ps(_mm_max_ps(am, _mm_set1_ps(1e-4f)), _mm_set1_ps(448.0f));
  const __m128 inv = _mm_div_ps(_mm_set1_ps(1.0f), scale);
  return RowScale{scale, inv};
}

template <DType kDt, int kRows>
inline void back_rows(const Problem& p, std::int64_t r0, std::int64_t b, std::int64_t h0, const Consts& c,
                      const float (*buf)[16 * 8], RowScale rs) {
  constexpr Layout kL = layout_of<kDt>();
  const __m128 scale = rs.scale, inv = rs.inv;
  // Steps 8-9, then interleave the even/odd codes back into element order.
#pragma GCC unroll 2
  for (int n = 0; n < kRows; ++n) {
    const __m256 vinv = _mm256_set1_ps(n == 0 ? lane<0>(inv) : lane<1>(inv));
    std::uint8_t* out = p.q_out + (r0 + n) * 128;
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2) {
      const __m256i e0 = clamp_encode(_mm256_mul_ps(_mm256_load_ps(buf[n] + 8 * k), vinv), c);
      const __m256i o0 = clamp_encode(_mm256_mul_ps(_mm256_load_ps(buf[n] + 64 + 8 * k), vinv), c);
      const __m256i e1 = clamp_encode(_mm256_mul_ps(_mm256_load_ps(buf[n] + 8 * k + 8), vinv), c);
      const __m256i o1 = clamp_encode(_mm256_mul_ps(_mm256_load_ps(buf[n] + 64 + 8 * k + 8), vinv), c);
      __m256i v = _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(e0, c.ns0), _mm256_shuffle_epi8(o0, c.nd0)),
                                  _mm256_or_si256(_mm256_shuffle_epi8(e1, c.ns1), _mm256_shuffle_epi8(o1, c.nd1)));
      // Natural: 8-byte groups (k lanes 0-3, k+1 lanes 0-3 | k lanes 4-7, k+1 lanes 4-7).
      // Shuffled: 4-byte groups x0-3, x8-11 of k, of k+1 | x4-7, x12-15 of k, of k+1.
      if (kL == Layout::kNatural)
        v = _mm256_permute4x64_epi64(v, 0xD8);
      else
        v = _mm256_permutevar8x32_epi32(v, c.out_perm);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * k), v);
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
    __m256 C[4], S[4];
    for (int m = 0; m < 4; ++m) {
      if (layout_of<kDt>() == Layout::kNatural)
        split_f32(f + 16 * m, C[m], S[m]);
      else
        split_shuffled(_mm256_loadu_ps(f + 16 * m), _mm256_loadu_ps(f + 16 * m + 8), C[m], S[m]);
    }
    // Pairs of rows, software-pipelined: front of pair i, then back of pair i - 1.
    if (r + 2 <= token_end) {
      alignas(32) float buf[2][2][16 * 8];
      int cur = 0;
      RowScale prev = front_rows<kDt, 2>(p, r, C, S, c, buf[cur]);
      std::int64_t prev_r = r;
      for (r += 2; r + 2 <= token_end; r += 2) {
        const RowScale rs = front_rows<kDt, 2>(p, r, C, S, c, buf[cur ^ 1]);
        back_rows<kDt, 2>(p, prev_r, b, prev_r - b * H, c, buf[cur], prev);
        prev = rs;
        prev_r = r;
        cur ^= 1;
      }
      back_rows<kDt, 2>(p, prev_r, b, prev_r - b * H, c, buf[cur], prev);
    }
    if (r < token_end) {
      alignas(32) float buf[1][16 * 8];
      back_rows<kDt, 1>(p, r, b, r - b * H, c, buf, front_rows<kDt, 1>(p, r, C, S, c, buf));
      ++r;
    }
  }
}

}  // namespace

void kernel_avx2(const Problem& p, std::int64_t row_begin, std::int64_t row_end) {
  switch (p.dtype) {
    case DType::kBFloat16: run_rows<DType::kBFloat16>(p, row_begin, row_end); break;
    case DType::kFloat16: run_rows<DType::kFloat16>(p, row_begin, row_end); break;
    default: run_rows<DType::kFloat32>(p, row_begin, row_end); break;
  }
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

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
