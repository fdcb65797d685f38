// The composed implementation: the arithmetic of every recipe (SPEC.md, SPEC-variants.md,
// SPEC-vllm.md; the executable spec is src/common/row.h) as a sequence of ATen operations, so the operators run on
// any device torch supports (XPU, and whatever else reaches the CompositeExplicitAutograd
// fallback). It must give the same bytes as the native kernels. The per-recipe choices (which 64
// dims are rotated, the freqs layout, Hadamard on/off, the bf16 rounding points, the output
// format, the quantizer, the weight fold) are read from the library's descriptor,
// indexer_q::recipe(id).
//
// Every ATen call goes through the dispatcher by the stable C shim (torch_call_dispatcher /
// the generated AOTI shims behind torch::stable::*), so this file is stable-ABI too. The shim
// cannot pass a `Scalar` argument (only Tensor, int, float, bool, ScalarType, Device, Layout,
// MemoryFormat, lists, optionals, strings), so only ops without Scalar arguments are called:
// constants are 0-dim (or full-shape) tensors on the tensors' device, a + b is a - (-b).
//
// Exactness, step by step (float32 unless stated):
//  1. q_input -> float32: exact for bf16 / fp16.
//  2. RoPE on the recipe's 64 dims (0..63 or 64..127), interleaved (re, im) pairs; c and s from
//     the freqs row, interleaved (c, s) per pair or in halves [c x32 | s x32] as the recipe says:
//     fma(xr, c, -(xi*s)) and fma(xr, s, xi*c). ATen has no float32 fma, so fma_f32()
//     below computes it exactly in float64: P = xr*c is exact in double (24+24 bits <= 53, no
//     overflow or underflow in double's range); S = P + q rounds once; TwoSum gives the exact
//     error e = (P + q) - S; S is then turned into the round-to-odd result (one ulp toward e
//     when e != 0 and S's last bit is even). Rounding a round-to-odd double to float is the
//     correctly rounded float (53 >= 24 + 2), i.e. exactly fmaf. (Plain "P - xi*s in double,
//     then to float" is NOT always exact: when P is exactly halfway between two floats and
//     |q| is below half a double ulp of P, it double-rounds; e.g. xr = 97, c = 172961 * 2^-18.)
//     bf16_after_rope (FP4): the 64 rotated values are rounded to bf16 by integer arithmetic on
//     their bits (round_bf16 of row.h: + 0x7fff + lsb, low 16 bits cleared; NaN stays NaN).
//  3. butterflies (recipes with the Hadamard): strides 1, 2, 4, ..., 64 in that order, each a
//     view (.., 2, stride) with a + b and a - b written to the two halves: the same two float32
//     operations per pair.
//  4. y = x * 0x1.6a09e6p-4f (exact product rounding, as the spec), with the Hadamard only;
//     bf16_after_hadamard (FP4): all 128 values rounded to bf16 as in step 2.
//  FP8 formats (e4m3fn, e4m3fnuz):
//  5. amax with fmax semantics: |y| with NaN replaced by 0 (fmax(|y|, 0)), then amax; an all-NaN
//     row gives 0, which step 6 maps to 1e-4 exactly like fmax(1e-4, NaN).
//  6-7. scale = fmax(1e-4, amax) / 448 and inv = 1 / scale: true divisions by full-shape device
//     tensors (never a CPU scalar, which ATen's CUDA division turns into a reciprocal multiply).
//  8. v = fmax(fmin(y * inv, 448), -448): aten::fmin / fmax have C's fmin/fmax NaN semantics, so
//     NaN becomes +448 (torch.clamp would propagate NaN).
//  9. v -> float8_e4m3fn: ATen's conversion rounds to nearest even; |v| <= 448 so it never
//     reaches the values (>= 464) that it turns into NaN. Subnormals are tested. e4m3fnuz: the
//     same bytes with 0x80 (-0) written as 0x00. The codes are written as bytes through a uint8
//     view of q_fp8, so fp8 and uint8 / int8 (raw code) outputs get the same bytes.
// 10. weights_out = (float(weight) * float(weight_scale)) * scale, left product first; times 2
//     (exact) for e4m3fnuz.
//  FP4 (e2m1 + UE8M0 per 32 values):
//  5. per block of 32: amax as in FP8 step 5; s = fmax(1e-4, amax) / 6 (true division);
//     e = exponent bits of s + (mantissa bits != 0), from s's int32 bits; inv = the float whose
//     bits are (254 - e) << 23, computed as the int32 (254 - e) * 2^23 (e = 255 gives the bits
//     0xff800000 = -Inf, as the 32-bit unsigned arithmetic of the spec).
//  6. v = y * inv; a = fmin(|v|, 6) (NaN -> 6); code = count of the 7 thresholds strictly below
//     a; + 8 where v < 0 and the code is not 0; byte m = code(y[2m]) | code(y[2m+1]) << 4.
//  7. q_sf: the four e bytes of a row, in block order, are the int32's little-endian bytes.
//  8. weights_out = float(weight) * float(weight_scale).
//  vLLM's quantizer (Quantizer::kVllm, SPEC-vllm.md; row.h pow2_ceil, vllm_fp8_code,
//  mx_ue8m0_of_amax, mx_e2m1_encode, weights_out_of):
//  FP8 5. amax as above; s = fmax(amax, 1e-4) / 448 (true division); q_scale = s rounded up to a
//     power of two from its bits: e = exponent bits + (mantissa bits != 0) (== ((bits + 0x7fffff)
//     >> 23) & 0xff for a positive float; +Inf gives 255), q_scale = the float with bits e << 23
//     (+Inf for e = 255).
//  6. v = x / q_scale (true division by the (B, H, 1) device tensor, exact: a power of two); codes of fmax(fmin(v, 448), -448)
//     by ATen's e4m3fn conversion (nearest even, sign of zero kept: -0 and negative values that
//     round to 0 give 0x80; Inf saturates to 0x7e / 0xfe), then 0x7f where v is NaN (any sign).
//  7. weights_out = ((w * q_scale) * weight_scale) * head_scale: three float32 multiplies in that
//     order (kScaleThenTwoFactors); the two factors are never multiplied together first.
//  MXFP4 5. per block: amax as above, fmax(amax, 6 * 2^-126), ratio = amax * 0x1.555556p-3f (one
//     multiply); e = exponent bits + (mantissa bits != 0) for a finite ratio, 254 for an infinite
//     one; inv = the float with bits (254 - e) << 23 (+0 for e = 254).
//  6. v = x * inv; a = fmin(|v|, 6) (NaN -> 6); code = #{a > 0.25} + #{a >= 0.75} + #{a > 1.25} +
//     #{a >= 1.75} + #{a > 2.5} + #{a >= 3.5} + #{a > 5} (ties to even), + 8 where the sign bit of
//     v is set (its int32 bits are negative), zero codes included; a NaN v gives 0x7 whatever its
//     sign bit (devices disagree on NaN signs).
//  7. weights_out = (w * weight_scale) * head_scale (kTwoFactors), two float32 multiplies.
//  weights_out is written in the shape it has, (B, H, 1) or (B, H).
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "aten_ops.h"
#include "binding.h"

namespace indexer_q {
namespace torch_binding {

namespace {

using torch::headeronly::ScalarType;

// The ATen operations shared with composed_kside.cpp (aten, mul, ..., land, band, shr, where,
// view, to_dtype, Consts): aten_ops.h. Those only this file needs:

// Number of non-zero (true) elements along `dim` (int64).
Tensor count_nonzero(const Tensor& a, std::int64_t dim) {
  return aten("aten::count_nonzero", "dim_IntList", a, std::vector<std::int64_t>{dim});
}
Tensor nextafter(const Tensor& a, const Tensor& toward) {
  return aten("aten::nextafter", "", a, toward);
}
void copy_into(Tensor dst, const Tensor& src) { torch::stable::copy_(dst, src); }

// fmaf(a, b, c) element-wise for float32 tensors (broadcasting), exactly: see step 2 above.
Tensor fma_f32(const Tensor& a, const Tensor& b, const Tensor& c, const Consts& k) {
  const Tensor A = to_dtype(a, ScalarType::Double);
  const Tensor Bv = to_dtype(b, ScalarType::Double);
  const Tensor C = to_dtype(c, ScalarType::Double);
  const Tensor P = mul(A, Bv);  // exact
  // rounded once (to double). add() is a - (-b), which would flip the sign of a NaN c: where
  // only c is NaN the result is c itself, as fmaf returns it (the sign of a NaN matters for
  // the e2m1 codes of the vllm_* recipes: the sign bit of v is kept on every code).
  const Tensor S = where(land(isnan(C), lnot(isnan(P))), C, add(P, C));
  // TwoSum (Knuth): err = (P + C) - S exactly, for any magnitudes (no overflow here).
  const Tensor bv = sub(S, P);
  const Tensor av = sub(S, bv);
  const Tensor err = add(sub(P, av), sub(C, bv));
  // Round to odd: where S is inexact (err != 0; a NaN err means an Inf/NaN operand, left as
  // is) and S's significand is even, step one ulp toward the exact sum.
  const Tensor zero = k.scalar(0.0, ScalarType::Double);
  const Tensor pos = gt(err, zero);
  const Tensor inexact = lor(pos, lt(err, zero));
  const Tensor bits = view_as_dtype(S, ScalarType::Long);
  const Tensor even = eq(band(bits, k.scalar(1.0, ScalarType::Long)),
                         k.scalar(0.0, ScalarType::Long));
  const Tensor toward = where(pos, k.scalar(std::numeric_limits<double>::infinity(), ScalarType::Double),
                              k.scalar(-std::numeric_limits<double>::infinity(), ScalarType::Double));
  const Tensor odd = where(land(inexact, even), nextafter(S, toward), S);
  return to_dtype(odd, ScalarType::Float);  // correctly rounded: == fmaf(a, b, c)
}

// Rounds float32 values to the nearest bf16 (ties to even) and back: round_bf16() of
// src/common/row.h on the bits, u -> (u + 0x7fff + lsb) & 0xffff0000 (NaN: quieted, u | 0x400000).
// Integer additions go through float64 (exact below 2^53): ATen's integer add / sub take a
// Scalar alpha, which the stable shim can only pass as a double, and integer tensors refuse that.
Tensor round_bf16(const Tensor& x, const Consts& k) {
  const ScalarType I = ScalarType::Int, D = ScalarType::Double;
  const Tensor u = view_as_dtype(x, I);
  Tensor ud = to_dtype(u, D);  // the signed value of the bits
  ud = where(lt(ud, k.scalar(0.0, D)), add(ud, k.scalar(4294967296.0, D)), ud);  // unsigned
  const Tensor lsb = to_dtype(
      band(shr(u, k.scalar(16.0, I)), k.scalar(1.0, I)), D);
  const Tensor sum = add(add(ud, k.scalar(32767.0, D)), lsb);           // < 2^33, exact
  const Tensor masked = mul(floor(div(sum, k.scalar(65536.0, D))), k.scalar(65536.0, D));
  const Tensor bits = where(ge(masked, k.scalar(2147483648.0, D)),
                            sub(masked, k.scalar(4294967296.0, D)), masked);  // int32 range
  const Tensor r = view_as_dtype(to_dtype(bits, I), ScalarType::Float);
  const Tensor quiet =
      view_as_dtype(bor(u, k.scalar(double(0x00400000), I)), ScalarType::Float);
  return where(isnan(x), quiet, r);
}

// The UE8M0-style exponent byte of positive float32 values rounded up to a power of two, from
// their bits: exponent bits + (mantissa bits != 0), as float64 integers (0..255; +Inf gives 255).
// Equals ((bits + 0x7fffff) >> 23) & 0xff of row.h's pow2_ceil / mx_ue8m0_of_amax for s > 0.
Tensor exponent_rounded_up(const Tensor& s, const Consts& k) {
  const ScalarType I = ScalarType::Int, D = ScalarType::Double;
  const Tensor bits = view_as_dtype(s, I);  // s > 0: sign bit clear
  const Tensor expo = band(shr(bits, k.scalar(23.0, I)), k.scalar(255.0, I));
  const Tensor mant_nz = ne(band(bits, k.scalar(double(0x7fffff), I)), k.scalar(0.0, I));
  return add(to_dtype(expo, D), to_dtype(mant_nz, D));
}

// The float32 whose bits are the float64 integers bits_d (in the int32 range).
Tensor float_from_bits(const Tensor& bits_d) {
  return view_as_dtype(to_dtype(bits_d, ScalarType::Int), ScalarType::Float);
}

// Writes byte codes (uint8, shape of `out`) into `out`, whatever its 1-byte dtype: fp8 codes,
// uint8 or int8 raw codes. Same-size dtype views, so every byte lands unchanged.
void write_bytes(const Tensor& out, const Tensor& bytes_u8) {
  copy_into(view_as_dtype(out, ScalarType::Byte), bytes_u8);
}

}  // namespace

void composed_forward(const TorchArgs& a) {
  const indexer_q::OpArgs args = make_args(a);
  validate_or_throw(args);  // the library's validator: nothing is written on error
  const Recipe& rec = recipe(a.recipe);
  const bool fp4 = rec.format == OutFormat::kE2M1;
  const bool fnuz = rec.format == OutFormat::kE4M3FNUZ;
  const std::int64_t B = args.q_input.sizes[0];
  const std::int64_t H = args.q_input.sizes[1];
  if (B == 0) return;

  const Consts k{a.q_input.device()};
  const ScalarType F = ScalarType::Float;
  const ScalarType U8 = ScalarType::Byte;

  // 1. decode
  Tensor x = to_dtype(a.q_input, F);  // (B, H, 128), contiguous, owned

  // Out-of-range positions: the validator rejects them where the host can read positions (CPU).
  // On a device they cannot be checked without a synchronization; such a row gets what the CUDA
  // backend gives it (zero codes, zero block scales, a NaN weights_out) and no out-of-bounds read.
  const ScalarType pt = a.positions.scalar_type();
  const Tensor valid = land(ge(a.positions, k.scalar(0.0, pt)),
                            lt(a.positions, k.scalar(double(a.freqs.size(0)), pt)));
  const Tensor safe_positions = where(valid, a.positions, k.scalar(0.0, pt));
  const Tensor valid_rows = view(valid, Shape{B, 1, 1});

  // 2. RoPE on the recipe's 64 dims, interleaved (re, im) pairs
  Tensor fr = view(index_select(a.freqs, 0, safe_positions), Shape{B, 1, 64});
  Tensor c, s;
  if (rec.freqs_layout == FreqsLayout::kInterleaved) {
    const Tensor pairs = view(fr, Shape{B, 1, 32, 2});
    c = pick(pairs, 3, 0);  // (B, 1, 32)
    s = pick(pairs, 3, 1);
  } else {  // halves: [cos x32 | sin x32]
    c = torch::stable::narrow(fr, 2, 0, 32);
    s = torch::stable::narrow(fr, 2, 32, 32);
  }
  const std::int64_t rope_offset = rec.rope_dims == RopeDims::kLast64 ? 64 : 0;
  Tensor rope_part = torch::stable::narrow(x, 2, rope_offset, 64);  // view (B, H, 64)
  const Tensor rope = view(rope_part, Shape{B, H, 32, 2});
  const Tensor xr = pick(rope, 3, 0);  // (B, H, 32) views into x
  const Tensor xi = pick(rope, 3, 1);
  const Tensor xis = mul(xi, s);
  const Tensor xic = mul(xi, c);
  const Tensor new_r = fma_f32(xr, c, neg(xis), k);
  const Tensor new_i = fma_f32(xr, s, xic, k);
  copy_into(xr, new_r);
  copy_into(xi, new_i);
  if (rec.bf16_after_rope) copy_into(rope_part, round_bf16(rope_part, k));

  // 3. butterflies, strides 1, 2, 4, ..., 64 in that order
  if (rec.hadamard) {
    for (std::int64_t st = 1; st < 128; st *= 2) {
      const Shape split{B, H, 128 / (2 * st), 2, st};
      const Tensor xv = view(x, split);
      const Tensor lo = pick(xv, 3, 0);  // x[i]           (bit `st` of i clear)
      const Tensor hi = pick(xv, 3, 1);  // x[i + st]
      Tensor next = torch::stable::new_empty(x, split);
      copy_into(pick(next, 3, 0), add(lo, hi));
      copy_into(pick(next, 3, 1), sub(lo, hi));
      x = view(next, Shape{B, H, 128});
    }
  }

  // 4. scale by 1/sqrt(128) (the float32 0x1.6a09e6p-4, exactly representable as a double)
  Tensor y = rec.hadamard ? mul(x, k.scalar(0x1.6a09e6p-4, F)) : x;
  if (rec.bf16_after_hadamard) y = round_bf16(y, k);

  const Shape bh1{B, H, 1};
  const Tensor w = reshape(to_dtype(a.weight, F), bh1);  // handles weight row stride > H
  const Tensor ws = k.scalar(double(float(a.weight_scale)), F);
  const Tensor hs = k.scalar(double(float(a.head_scale)), F);
  const Tensor nan = k.scalar(std::numeric_limits<double>::quiet_NaN(), F);
  const bool vllm = rec.quant == Quantizer::kVllm;
  const ScalarType I = ScalarType::Int;
  const ScalarType D = ScalarType::Double;
  const ScalarType L = ScalarType::Long;
  // weights_out in the shape the caller gave it: (B, H, 1) or (B, H)
  const auto wo_sizes = a.weights_out.sizes();
  const Shape wo_shape(wo_sizes.begin(), wo_sizes.end());
  auto write_weights = [&](const Tensor& folded_bh1) {
    copy_into(a.weights_out, reshape(where(valid_rows, folded_bh1, nan), wo_shape));
  };

  if (fp4) {
    // 5. UE8M0 exponent per block of 32
    const Shape blocks{B, H, 4, 32};
    const Tensor yb = view(y, blocks);
    const Tensor ay = fmax(abs(yb), k.scalar(0.0, F));
    const Tensor amax = torch::stable::amax(ay, 3, /*keepdim=*/true);  // (B, H, 4, 1)
    const Shape bh41{B, H, 4, 1};
    Tensor e;  // 0..255 as float64 integers
    if (vllm) {
      // amax floored at 6 * 2^-126, times fl(1/6), rounded up (Inf: 254)
      const Tensor ratio = mul(fmax(amax, k.scalar(0x1.8p-124, F)), k.scalar(0x1.555556p-3, F));
      const Tensor inf = k.scalar(std::numeric_limits<double>::infinity(), F);
      e = where(eq(ratio, inf), k.scalar(254.0, D), exponent_rounded_up(ratio, k));
    } else {
      const Tensor sc =
          div(fmax(k.filled(bh41, double(1e-4f), F), amax), k.filled(bh41, 6.0, F));
      e = exponent_rounded_up(sc, k);
    }
    // inv's bits (254 - e) * 2^23, as exact float64 integers (see round_bf16 on integer
    // additions); e = 255 (SGLang, s = Inf) gives -2^23 = the bits of -Inf, e = 254 gives +0.
    const Tensor inv = float_from_bits(mul(sub(k.scalar(254.0, D), e), k.scalar(8388608.0, D)));

    // 6. E2M1 codes: count of thresholds below min(|v|, 6)
    const Tensor v = mul(yb, inv);                            // (B, H, 4, 32)
    const Tensor av = fmin(abs(v), k.scalar(6.0, F));         // NaN -> 6
    const Tensor av5 = view(av, Shape{B, H, 4, 32, 1});
    auto thresholds = [&](std::initializer_list<double> th) {  // a (n,) device tensor
      const Tensor t = k.filled(Shape{std::int64_t(th.size())}, 0.0, F);
      std::int64_t i = 0;
      for (double x : th) copy_into(pick(t, 0, i++), k.scalar(x, F));
      return t;
    };
    Tensor mag, negative;
    if (vllm) {
      // ties to even: strictly above 0.25, 1.25, 2.5, 5; at or above 0.75, 1.75, 3.5
      // (the two int64 counts added through float64, exact: see round_bf16 on integer additions)
      mag = to_dtype(add(to_dtype(count_nonzero(gt(av5, thresholds({0.25, 1.25, 2.5, 5.0})), 4), D),
                         to_dtype(count_nonzero(ge(av5, thresholds({0.75, 1.75, 3.5})), 4), D)),
                     L);
      // the sign bit of v on every code, zero included; a NaN v gives 0x7 whatever its sign
      // (mag is 7 there: fmin(NaN, 6) = 6)
      negative = land(lt(view_as_dtype(v, I), k.scalar(0.0, I)), lnot(isnan(v)));
    } else {
      // ties to the smaller magnitude: strictly above every threshold; sign on nonzero codes
      mag = count_nonzero(gt(av5, thresholds({0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0})), 4);
      negative = land(lt(v, k.scalar(0.0, F)), ne(mag, k.scalar(0.0, L)));
    }
    const Tensor code = where(negative, bor(mag, k.scalar(8.0, L)), mag);  // int64
    const Tensor pairs = view(code, Shape{B, H, 64, 2});
    const Tensor packed =
        bor(pick(pairs, 3, 0), mul(pick(pairs, 3, 1), k.scalar(16.0, L)));  // (B, H, 64)
    const Tensor rows_ok = view(valid, Shape{B, 1, 1});
    write_bytes(a.q_out, to_dtype(where(rows_ok, packed, k.scalar(0.0, L)), U8));

    // 7. q_sf: the four exponent bytes of a row are its int32's little-endian bytes
    const Tensor e_bytes = to_dtype(where(view(valid, Shape{B, 1, 1, 1}), e, k.scalar(0.0, D)),
                                    U8);                                    // (B, H, 4, 1) owned
    const Tensor sf = view(view_as_dtype(view(e_bytes, Shape{B, H, 4}), I), Shape{B, H});
    copy_into(*a.q_sf, sf);

    // 8. weights_out: w * weight_scale (no scale folded in), or (w * weight_scale) * head_scale
    Tensor folded = mul(w, ws);
    if (rec.fold == WeightFold::kTwoFactors) folded = mul(folded, hs);
    write_weights(folded);
    return;
  }

  // 5. amax with fmax semantics (NaN ignored)
  const Tensor ay = fmax(abs(y), k.scalar(0.0, F));
  const Tensor amax = torch::stable::amax(ay, 2, /*keepdim=*/true);  // (B, H, 1)

  // 6-7. scale: an IEEE division by a full-shape device tensor
  const Tensor quotient =
      div(fmax(k.filled(bh1, double(1e-4f), F), amax), k.filled(bh1, 448.0, F));

  if (vllm) {
    // q_scale: the quotient rounded up to a power of two from its bits (+Inf stays +Inf)
    const Tensor q_scale =
        float_from_bits(mul(exponent_rounded_up(quotient, k), k.scalar(8388608.0, D)));
    // codes of x / q_scale: saturating (fmin/fmax keep +-Inf at +-448), sign of zero kept by
    // the e4m3fn conversion, NaN -> 0x7f
    // (a power of two, so even a reciprocal multiply would give the same bytes)
    const Tensor v = div(y, q_scale);
    const Tensor sat = fmax(fmin(v, k.scalar(448.0, F)), k.scalar(-448.0, F));
    Tensor bytes = view_as_dtype(to_dtype(sat, ScalarType::Float8_e4m3fn), U8);
    bytes = where(isnan(v), k.scalar(127.0, U8), bytes);
    bytes = where(valid_rows, bytes, k.scalar(0.0, U8));
    write_bytes(a.q_out, bytes);
    // ((w * q_scale) * weight_scale) * head_scale: three multiplies, left to right
    Tensor folded = mul(mul(w, q_scale), ws);
    if (rec.fold == WeightFold::kScaleThenTwoFactors) folded = mul(folded, hs);
    write_weights(folded);
    return;
  }

  const Tensor& scale = quotient;
  const Tensor inv = div(k.filled(bh1, 1.0, F), scale);

  // 8. clamp with fmin/fmax (NaN -> +448), 9. encode
  const Tensor clamped = fmax(fmin(mul(y, inv), k.scalar(448.0, F)), k.scalar(-448.0, F));
  const Tensor codes = where(valid_rows, clamped, k.scalar(0.0, F));  // +0 -> code 0x00
  Tensor bytes = view_as_dtype(to_dtype(codes, ScalarType::Float8_e4m3fn), U8);
  if (fnuz) bytes = where(eq(bytes, k.scalar(128.0, U8)), k.scalar(0.0, U8), bytes);  // -0 -> +0
  write_bytes(a.q_out, bytes);

  // 10. fold the scale into the head weight: (w * weight_scale) * scale (times 2 for e4m3fnuz)
  Tensor folded = rec.fold == WeightFold::kTimesScale ? mul(mul(w, ws), scale) : mul(w, ws);
  if (fnuz) folded = mul(folded, k.scalar(2.0, F));
  write_weights(folded);
}

}  // namespace torch_binding
}  // namespace indexer_q
