// The key side's one SIMD body (docs/KSIDE-SPEC.md section 2), included by each ISA translation unit
// (src/cpu/kside_avx2.inc at the end of kernel_avx2.cpp, src/cpu/kside_avx512.inc at the end of
// kernel_avx512.cpp) and compiled there with that TU's flags; everything has internal linkage
// (see cpu_internal.h). It is instantiated per ISA policy P and per key recipe KR.
//
// A token's 128 values live in kN = 128 / P::kW registers in natural order (register k, lane l
// = dim kW * k + l), so no step moves a value to another place:
//   - sum of squares per group of 4 dims and the xor butterfly over the 32 group sums: P::ss
//     (a 4 x 4 transpose inside 128-bit lanes, the fma chain, then the exact pairing of masks
//     16, 8, 4, 2, 1 as adds of registers and of permuted lanes);
//   - t = fma(ss, 2^-7, eps) and the MUFU.RSQ model (src/common/rsq_sm90.cpp) for 16 tokens at
//     once: P::rsq16, the table's rule in vectors (one gather of the 2-bit deltas, the
//     double-precision 1 / sqrt in vector registers), rsq_sm90 itself for any t that is not a
//     positive normal float;
//   - RoPE on dims 64..127: the freqs row is interleaved like the dims, so
//     out = fma(dup_even(x), f, (dup_odd(x) * swap_pairs(f)) with the even lanes negated);
//   - Hadamard strides below kW inside a register: fma(v, +-1, partner lanes) = a + b or a - b
//     exactly; the larger strides pair registers;
//   - FP8 / FP4 quantization with the query side's encoders of the same TU (clamp_encode: clip,
//     NaN -> +448, e4m3fn nearest even; P::fp8_codes may use a faster encoder for a token whose
//     128 values P::all_finite proved finite; the E2M1 encoder without bf16 rounding: ties toward
//     zero, no -0, NaN -> 0x7).
// Every value goes through the same IEEE operations, in the same order, as kside_row<KR>.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/kside_problem.h"
#include "common/rsq_sm90.h"
#include "cpu/kside_internal.h"

// The MUFU.RSQ model's 2-bit deltas (src/common/rsq_sm90.cpp): entry i is bits 2 * (i & 3) .. +1
// of byte i >> 2, holding delta + 2; the P::rsq16 of each ISA gathers them.
extern "C" __attribute__((visibility("hidden"))) const unsigned char indexer_q_rsq_sm90_delta2[];

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

constexpr float kKsideScaleFloor = 1e-4f;
constexpr float kKsideFp8Max = 448.0f;
constexpr float kKsideFp4Max = 6.0f;
constexpr float kKsideHadamard = 0x1.6a09e6p-4f;  // bits 0x3db504f3

template <class P, class KR, DType kDt>
void kside_simd_tokens(const KProblem& p, std::int64_t t_begin, std::int64_t t_end) {
  using V = typename P::V;
  constexpr int kW = P::kW;
  constexpr int kN = 128 / kW;
  const typename P::Consts c;
  alignas(64) float w[128];
  for (int i = 0; i < 128; ++i) w[i] = load_scalar(p.weight, p.dtype, i);
  const V hscale = P::set1(kKsideHadamard);
  constexpr int kBlock = 16;
  constexpr int kB = 32 / kW;  // registers per FP4 block of 32 dims
  // A token whose values and scales are ready and whose codes are not yet written: the encoding
  // of token i runs after the front of token i + 1 (its products, butterflies and scale
  // divisions), so the two overlap.
  struct Pending {
    alignas(64) float y[128];
    float scale, inv[4];
    std::uint8_t e[4];
    bool finite;  // FP8: every y finite (P::fp8_codes may take its fast encoder)
    std::uint8_t *codes, *scales;
  };
  Pending pend[2];
  std::int64_t np = 0;
  auto back = [&](const Pending& q) {
    V Y[kN];
#pragma GCC unroll 16
    for (int k = 0; k < kN; ++k) Y[k] = P::load(q.y + kW * k);
    if (!KR::kFp4) {
      P::fp8_codes(Y, q.inv[0], q.codes, q.finite, c);
      std::memcpy(q.scales, &q.scale, 4);
    } else {
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) P::fp4_block_codes(Y + kB * b, q.inv[b], q.codes + 16 * b, c);
      std::memcpy(q.scales, q.e, 4);
    }
  };
  // Tokens go in blocks of kBlock stored tokens (skipped ones dropped here). Pass 1 per token: its
  // destination and freqs row (both prefetched), its values as floats (kept in xs, in L1, so pass
  // 2 neither reloads nor converts them) and t = fma(ss, 2^-7, eps). Then the block's MUFU.RSQ
  // model in one vector call (P::rsq16: the table look-ups of the block gathered together).
  // Pass 2 per token: the rest, software-pipelined as above.
  alignas(64) float xs[kBlock][128];
  float nfs[kBlock];
  const float* frs[kBlock];
  std::uint8_t* dst_codes[kBlock];
  std::uint8_t* dst_scales[kBlock];
  std::int64_t t = t_begin;
  while (t < t_end) {
    int n = 0;
    for (; t < t_end && n < kBlock; ++t) {
      const std::int64_t slot = p.slots[t];
      if (slot < 0) continue;  // no destination
      const std::int64_t pos = p.pos_dtype == DType::kInt32
                                   ? std::int64_t(static_cast<const std::int32_t*>(p.positions)[t])
                                   : static_cast<const std::int64_t*>(p.positions)[t];
      const float* fr = p.freqs + pos * 64;
      for (int l = 0; l < 256; l += 64) __builtin_prefetch(reinterpret_cast<const char*>(fr) + l);
      // Section 3: the token's row of its page.
      std::uint8_t* page = p.cache + (slot >> p.log2_page) * p.page_bytes;
      const std::int64_t r = slot & (p.page_size - 1);
      std::uint8_t* row = page + KR::kCodeBytes * r;
      for (int l = 0; l < KR::kCodeBytes; l += 64) __builtin_prefetch(row + l, 1);
      frs[n] = fr;
      dst_codes[n] = row;
      dst_scales[n] = page + KR::kCodeBytes * p.page_size + 4 * r;
      V R[kN];
      P::template load<kDt>(p.input, t * p.input_stride, R);
#pragma GCC unroll 16
      for (int k = 0; k < kN; ++k) P::store(xs[n] + kW * k, R[k]);
      // Steps 2-4: t = fma(ss, 2^-7, eps).
      nfs[n] = std::fmaf(P::ss(R, c), 0x1p-7f, p.eps);
      ++n;
    }
    for (int j = n; j < kBlock; ++j) nfs[j] = 1.0f;  // unused lanes: a plain input
    P::rsq16(nfs);  // step 5: nf = MUFU.RSQ(t)
    for (int j = 0; j < n; ++j) {
      V R[kN];
      // Step 6: d = (x * nf) * w.
      const V vnf = P::set1(nfs[j]);
#pragma GCC unroll 16
      for (int k = 0; k < kN; ++k) R[k] = P::mul(P::mul(P::load(xs[j] + kW * k), vnf), P::load(w + kW * k));
      // Step 7: RoPE on dims 64..127.
      const float* f = frs[j];
#pragma GCC unroll 16
      for (int k = 64 / kW; k < kN; ++k) R[k] = P::rope(R[k], P::load(f + kW * k - 64), c);
      // Step 8: butterflies at strides 1, 2, 4, ... (inside registers, then across), * 1/sqrt(128).
      P::inreg_stages(R, c);
#pragma GCC unroll 4
      for (int s = 1; s < kN; s <<= 1)
#pragma GCC unroll 16
        for (int k = 0; k < kN; ++k)
          if ((k & s) == 0) {
            const V a = R[k], b = R[k + s];
            R[k] = P::add(a, b);
            R[k + s] = P::sub(a, b);
          }
#pragma GCC unroll 16
      for (int k = 0; k < kN; ++k) R[k] = P::mul(R[k], hscale);
      Pending& cur = pend[np & 1];
      cur.codes = dst_codes[j];
      cur.scales = dst_scales[j];
#pragma GCC unroll 16
      for (int k = 0; k < kN; ++k) P::store(cur.y + kW * k, R[k]);
      // The scales: amax (NaN ignored), then the divisions, a dependency chain that runs while
      // the previous token's codes are encoded below.
      if (!KR::kFp4) {
        V m = P::zero();
#pragma GCC unroll 16
        for (int k = 0; k < kN; ++k) m = P::absmax(m, R[k], c);
        const float amax = P::hmax(m);  // never NaN
        cur.scale = (amax > kKsideScaleFloor ? amax : kKsideScaleFloor) / kKsideFp8Max;
        cur.inv[0] = 1.0f / cur.scale;
        cur.finite = P::all_finite(R);
      } else {
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) {
          V m = P::zero();
#pragma GCC unroll 4
          for (int k = kB * b; k < kB * b + kB; ++k) m = P::absmax(m, R[k], c);
          const float amax = P::hmax(m);  // never NaN
          const float sr = (amax > kKsideScaleFloor ? amax : kKsideScaleFloor) / kKsideFp4Max;
          std::uint32_t sb;
          std::memcpy(&sb, &sr, 4);
          const std::uint32_t e = ((sb >> 23) & 0xffu) + ((sb & 0x7fffffu) != 0u ? 1u : 0u);
          const std::uint32_t ib = (254u - e) << 23;  // 2^(127 - e); e = 255 gives -inf
          std::memcpy(&cur.inv[b], &ib, 4);
          cur.e[b] = std::uint8_t(e);
        }
      }
      if (np > 0) back(pend[(np - 1) & 1]);
      ++np;
    }
  }
  if (np > 0) back(pend[(np - 1) & 1]);
}

// The kernel entry of policy P: recipe and dtype dispatch.
template <class P>
void kside_simd_kernel(const KProblem& p, std::int64_t t_begin, std::int64_t t_end) {
  with_krecipe(p.recipe, [&](auto rec) {
    using KR = decltype(rec);
    switch (p.dtype) {
      case DType::kBFloat16: kside_simd_tokens<P, KR, DType::kBFloat16>(p, t_begin, t_end); break;
      case DType::kFloat16: kside_simd_tokens<P, KR, DType::kFloat16>(p, t_begin, t_end); break;
      default: kside_simd_tokens<P, KR, DType::kFloat32>(p, t_begin, t_end); break;
    }
  });
}

}  // namespace
}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
