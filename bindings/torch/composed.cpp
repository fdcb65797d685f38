// The composed implementation: the arithmetic of every recipe (SPEC.md, docs/RECIPES.md,
// docs/RECIPES.md; the executable spec is src/common/row.h process_row<R>) as a
// sequence of ATen operations, so the operators run on any device torch supports (XPU, and
// whatever else reaches the CompositeExplicitAutograd fallback). It must give the same bytes as the
// native kernels. The per-recipe choices (which 64 dims are rotated, if any, and how they pair,
// the freqs layout, Hadamard on/off, the bf16 rounding points, the output format, the quantizer,
// the weight fold) are read from the library's descriptor, indexer_q::recipe(id).
//
// No float64 anywhere (devices such as many XPUs have none): float32, int32 / int64 and bool
// tensors only. Every ATen call goes through the dispatcher by the stable C shim
// (torch_call_dispatcher / the generated AOTI shims behind torch::stable::*), so this file is
// stable-ABI too. The shim cannot pass a `Scalar` argument, so only ops without Scalar arguments
// are called: constants are 0-dim (or full-shape) tensors on the tensors' device, a + b is
// subtract(a, b, alpha = -1) for floats, an int64 sum is aten::sum over a stacked pair (iadd, aten_ops.h).
//
// Exactness, step by step (float32 unless stated):
//  1. q_input -> float32: exact for bf16 / fp16.
//  2. RoPE (recipes with rope_dims last64 / first64) on the recipe's 64 dims, pairs (2j, 2j+1)
//     (adjacent) or (j, j+32) (neox) of them; c and s from the position's freqs row, interleaved
//     or in halves: x0' = fma(x0, c, -(x1*s)), x1' = fma(x0, s, x1*c) (rope_fma x0_s) or
//     fma(x1, c, x0*s) (x1_c), the products rounded first. ATen has no float32 fma:
//     rope_inplace (aten_ops.h, shared with the key side) takes fma_fast (float32 operations:
//     an exact product pair and Boldo-Melquiond's rounded sum of three) when every operand is
//     in range, else fma_exact, with integer significands in int64 (exact, one rounding
//     to nearest even). bf16_after_rope: the 64 rotated values rounded to bf16 by integer
//     operations on their bits (row.h round_bf16; NaN quieted). rope_dims none: no freqs, no
//     positions (empty views), every row valid.
//  3. butterflies (Hadamard recipes): strides 1, 2, 4, ..., 64 in that order, a + b and a - b.
//  4. y = x * 0x1.6a09e6p-4f with the Hadamard only; bf16_after_hadamard: all 128 rounded to bf16
//     (FP4, and FP8 before the amax: sglang_ue8m0).
//  Exponent arithmetic (UE8M0 bytes, power-of-two scales): a positive float's exponent rounded
//  up = exponent bits + (mantissa bits != 0) (int32 bit operations, the result as an exact small
//  float32 integer); the float with exponent bits n (n in -1..255) is the int32 n * 2^23 (an exact
//  float32 product converted to int32; n = -1 gives 0xff800000 = -Inf, as row.h's unsigned
//  (254 - e) << 23 for e = 255).
//  FP8 (codes through ATen's e4m3fn conversion, nearest even, always after a saturating
//  fmin / fmax to +-448 so it never meets the values it turns into NaN; -0 keeps its sign):
//   sglang     scale = fmax(1e-4, amax) / 448 (true division by a full-shape device tensor),
//              inv = 1 / scale, codes of fmax(fmin(y * inv, 448), -448) (NaN -> +448);
//              e4m3fnuz: 0x80 -> 0x00, weights_out times 2.
//   vllm       q_scale = pow2ceil(fmax(amax, 1e-4) / 448), codes of y / q_scale, NaN -> 0x7f.
//   vllm_cute  e = exponent of fmax(amax, 1e-4) * fl(1/448) rounded up (Inf: 255), q_scale =
//              bits(e << 23), inv = bits((254 - e) << 23), codes of y * inv, NaN -> 0x7f.
//   vllm_v32   q_scale = pow2ceil(fmax(amax, 1e-10) * fl(1/448)), codes of y / q_scale, NaN -> 0x7e.
//   sglang_ue8m0  q_scale = pow2ceil(fmax(amax, 1e-4) * fl(1/448)), codes of y / q_scale (IEEE
//              division), NaN -> 0xfe (-448).
//   sglang_224 (gfx942)  as sglang with 224 in place of 448: scale = fmax(1e-4, amax) / 224,
//              codes of fmax(fmin(y * inv, 224), -224) (NaN -> +224, code 0x76), e4m3fn.
//   vllm_fnuz224  q_scale = pow2ceil(fmax(amax, 1e-4) / 224) (true division); the e4m3fnuz code
//              of v = y / q_scale is the e4m3fn code of 2v (exact; |2v| <= 448 for a finite row,
//              and the +-448 saturation covers the rest), 0x80 (-0) -> 0x00, NaN v -> 0x80;
//              weights_out NOT doubled (only SGLang's FNUZ recipes double it).
//  scale_out: the FP8 row scale (q_scale) also written, as float32 into q_sf ((B, H, 1) or
//  (B, H)); +0 for a row whose position is out of range, as the CUDA backend.
//  FP4 (e2m1 + one UE8M0 byte per 32 values; the magnitude = a count of thresholds below
//  a = fmin(|v|, 6) (NaN -> 6): strictly above all seven (sglang: ties to the smaller), or
//  strictly above 0.25, 1.25, 2.5, 5 and at or above 0.75, 1.75, 3.5 (ties to even)):
//   sglang     e = exponent of fmax(1e-4, amax) / 6 rounded up, v = y * bits((254 - e) << 23),
//              ties to the smaller, sign on nonzero codes of negative v.
//   vllm       e = exponent of fmax(amax, 6 * 2^-126) * fl(1/6) rounded up (Inf: 254), ties to
//              even, the sign bit of v on every code, NaN -> 0x7.
//   vllm_cute  (CuTe's MXFP4) as vllm, but an infinite amax keeps e = 255 (inv = -Inf).
//   fp4_rne    e = exponent of fmax(amax / 6, 1e-4) rounded up, clamped to [1, 254];
//              v = y * 2^(127 - e) (e = 254: the subnormal 2^-127), ties to even, sign on
//              nonzero codes of negative v.
//   fp4_two_stage  stage 1: e1 = exponent of fmax(amax, 6 * 2^-126) * fl(1/6) rounded up (Inf:
//              255), u = y * bits((254 - e1) << 23) (= fma(y, inv, +0) up to the sign of a zero,
//              which no code sees), q = +-(E2M1 value of u, ties to even, NaN -> 6) * 2^(e1 - 127);
//              stage 2: the fp4_rne packer on q with inv2 = bits((254 - e2) << 23) (0 for 254).
//  Byte m = code(y[2m]) | code(y[2m+1]) << 4; q_sf: the four e bytes of a row, little-endian.
//  weights_out, as the fold says: times_scale (w * ws) * scale; no_scale w * ws;
//  scale_then_two_factors ((w * scale) * ws) * hs; two_factors (w * ws) * hs; head_scale_first
//  ((w * hs) * scale) * ws; no_scale_bf16 bf16(w * ws) (nearest even, as float); none: no
//  weight, no weights_out (empty views).
//  Written in the shape weights_out has, (B, H, 1) or (B, H). Rows whose position is out of range
//  (only reachable on a device: the validator rejects them on the CPU) get zero codes, zero block
//  scales and a NaN weights_out, as the CUDA backend.
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
constexpr ScalarType U8 = ScalarType::Byte;  // F, I32, L: aten_ops.h

// The ATen operations shared with composed_kside.cpp (aten, mul, ..., land, band, shr, where,
// view, narrow, to_dtype, Consts, fma_exact): aten_ops.h. Those only this file needs:

// (the steps and helpers both sides share are in aten_ops.h)

}  // namespace

void composed_forward(const TorchArgs& a) {
  const indexer_q::OpArgs args = make_args(a);
  validate_or_throw(args);  // the library's validator: nothing is written on error
  const Recipe& rec = recipe(a.recipe);
  const bool fp4 = rec.format == OutFormat::kE2M1;
  const bool fnuz = rec.format == OutFormat::kE4M3FNUZ;
  const bool sglang224 = rec.quant == Quantizer::kSglang224;
  // SGLang's FNUZ recipes: the FN result re-encoded, weights_out doubled (vllm_fnuz224: neither)
  const bool sglang_fnuz = fnuz && rec.quant == Quantizer::kSglang;
  const bool has_rope = recipe_has_rope(rec);
  const bool has_weights = recipe_has_weights(rec);
  const std::int64_t B = args.q_input.sizes[0];
  const std::int64_t H = args.q_input.sizes[1];
  if (B == 0 || H == 0) return;

  const Consts k{a.q_input.device()};
  const Shape bh1{B, H, 1};

  // 1. decode
  Tensor x = to_dtype(a.q_input, F);  // (B, H, 128), contiguous, owned

  // Out-of-range positions: the validator rejects them where the host can read positions (CPU).
  // On a device they cannot be checked without a synchronization; such a row gets what the CUDA
  // backend gives it (zero codes, zero block scales, a NaN weights_out) and no out-of-bounds read.
  Tensor valid = k.filled(Shape{B}, 1.0, ScalarType::Bool);
  if (has_rope) {
    const ScalarType pt = a.positions.scalar_type();
    valid = land(ge(a.positions, k.scalar(0.0, pt)),
                 lt(a.positions, k.scalar(double(a.freqs.size(0)), pt)));
    const Tensor safe_positions = where(valid, a.positions, k.scalar(0.0, pt));

    // 2. RoPE on the recipe's 64 dims
    const Tensor fr = view(index_select(a.freqs, 0, safe_positions), Shape{B, 1, 64});
    Tensor c, s;
    if (rec.freqs_layout == FreqsLayout::kInterleaved) {
      const Tensor pairs = view(fr, Shape{B, 1, 32, 2});
      c = pick(pairs, 3, 0);  // (B, 1, 32)
      s = pick(pairs, 3, 1);
    } else {  // halves: [cos x32 | sin x32]
      c = narrow(fr, 2, 0, 32);
      s = narrow(fr, 2, 32, 32);
    }
    const std::int64_t rope_offset = rec.rope_dims == RopeDims::kLast64 ? 64 : 0;
    const Tensor rope_part = narrow(x, 2, rope_offset, 64);  // view (B, H, 64)
    const ScalarType in = a.q_input.scalar_type();
    rope_inplace(rope_part, rec.rope_pairs == RopePairs::kNeox, rec.rope_fma == RopeFma::kFmaX1C, c, s,
                 in == ScalarType::BFloat16 || in == ScalarType::Half, k);
    if (rec.bf16_after_rope) copy_into(rope_part, round_bf16(rope_part, k));
  }
  const Tensor valid_rows = view(valid, Shape{B, 1, 1});

  // 3. butterflies, strides 1, 2, 4, ..., 64 in that order
  if (rec.hadamard) x = hadamard(x);

  // 4. scale by 1/sqrt(128) (the float32 0x1.6a09e6p-4)
  Tensor y = rec.hadamard ? mul(x, k.f(0x1.6a09e6p-4)) : x;
  if (rec.bf16_after_hadamard) y = round_bf16(y, k);

  // weights_out, as the recipe's fold says (scale: the row's FP8 scale; unused by FP4 folds)
  // the one NaN of weights_out (row.h nan_weight_bits, docs/RECIPES.md "NaN"), also for rows whose
  // position is out of range
  const Tensor nan = view_as_dtype(
      k.scalar(rec.fold == WeightFold::kNoScaleBf16 ? double(0x7fff0000) : double(0x7fffffff), I32), F);
  auto write_weights = [&](const Tensor* scale) {
    if (!has_weights) return;
    const Tensor w = reshape(to_dtype(a.weight, F), bh1);  // handles weight row stride > H
    const Tensor ws = k.f(double(float(a.weight_scale)));
    const Tensor hs = k.f(double(float(a.head_scale)));
    Tensor folded;
    switch (rec.fold) {
      case WeightFold::kTimesScale: folded = mul(mul(w, ws), *scale); break;
      case WeightFold::kNoScale: folded = mul(w, ws); break;
      case WeightFold::kScaleThenTwoFactors: folded = mul(mul(mul(w, *scale), ws), hs); break;
      case WeightFold::kTwoFactors: folded = mul(mul(w, ws), hs); break;
      case WeightFold::kHeadScaleFirst: folded = mul(mul(mul(w, hs), *scale), ws); break;
      case WeightFold::kNoScaleBf16: folded = round_bf16(mul(w, ws), k); break;
      case WeightFold::kNoWeights: return;
    }
    if (sglang_fnuz) folded = mul(folded, k.f(2.0));  // exact; SGLang's FNUZ recipes only
    const auto wo_sizes = a.weights_out.sizes();
    const Shape wo_shape(wo_sizes.begin(), wo_sizes.end());
    copy_into(a.weights_out, reshape(where(land(valid_rows, lnot(isnan(folded))), folded, nan), wo_shape));
  };

  if (fp4) {
    // 5. one exponent per block of 32
    const Shape blocks{B, H, 4, 32};
    Tensor yb = view(y, blocks);
    const Tensor amax = amax_ignoring_nan(yb, 3, k);  // (B, H, 4, 1)
    Tensor e;    // the UE8M0 bytes as float32 integers
    Tensor inv;  // the multiplier of the codes' values
    bool ties_to_even = true, sign_on_zero = false;
    switch (rec.quant) {
      case Quantizer::kVllm:       // amax floored at 6 * 2^-126, times fl(1/6), rounded up (Inf: 254)
      case Quantizer::kVllmCute: {  // CuTe's MXFP4: the same unclamped (Inf: 255, inv -Inf)
        const Tensor ratio = mul(fmax(amax, k.f(0x1.8p-124)), k.f(0x1.555556p-3));
        e = exponent_rounded_up(ratio, k);
        if (rec.quant == Quantizer::kVllm)
          e = where(eq(ratio, k.f(std::numeric_limits<double>::infinity())), k.f(254.0), e);
        inv = float_with_exponent(sub(k.f(254.0), e), k);
        sign_on_zero = true;
        break;
      }
      case Quantizer::kFp4Rne: {
        e = rne_exponent(amax, k);
        // 2^(127 - e); e = 254: the subnormal 2^-127 (bits 0x00400000)
        inv = where(eq(e, k.f(254.0)), k.f(0x1p-127), float_with_exponent(sub(k.f(254.0), e), k));
        break;
      }
      case Quantizer::kFp4TwoStage: {
        // stage 1: fake quantization of the block (no clamp: Inf gives 255, inv -Inf)
        const Tensor e1 = exponent_rounded_up(mul(fmax(amax, k.f(0x1.8p-124)), k.f(0x1.555556p-3)), k);
        const Tensor sc = float_with_exponent(e1, k);
        const Tensor inv1 = float_with_exponent(sub(k.f(254.0), e1), k);
        const Tensor u = mul(yb, inv1);
        const Tensor g = e2m1_value(e2m1_magnitude(u, true, k), k);
        yb = mul(where(lt(u, k.f(0.0)), neg(g), g), sc);
        // stage 2: the packer on the fake-quantized values (e = 254: inv 0, as the engine's)
        e = rne_exponent(amax_ignoring_nan(yb, 3, k), k);
        inv = float_with_exponent(sub(k.f(254.0), e), k);
        break;
      }
      default: {  // SGLang's V4: fmax(1e-4, amax) / 6 rounded up; ties to the smaller magnitude
        e = fp4_sglang_exponent(amax, k);
        inv = float_with_exponent(sub(k.f(254.0), e), k);  // e = 255: -Inf
        ties_to_even = false;
        break;
      }
    }

    // 6. E2M1 codes
    const Tensor packed = fp4_code_pairs(mul(yb, inv), ties_to_even, sign_on_zero, k);  // (B, H, 64)
    write_bytes(a.q_out, to_dtype(where(valid_rows, packed, k.li(0)), U8));

    // 7. q_sf: the four exponent bytes of a row are its int32's little-endian bytes
    const Tensor e_bytes =
        to_dtype(where(view(valid, Shape{B, 1, 1, 1}), e, k.f(0.0)), U8);  // (B, H, 4, 1) owned
    copy_into(*a.q_sf, view(view_as_dtype(view(e_bytes, Shape{B, H, 4}), I32), Shape{B, H}));

    // 8. weights_out (no scale folded in)
    write_weights(nullptr);
    return;
  }

  // 5. amax with fmax semantics (NaN ignored)
  const Tensor amax = amax_ignoring_nan(y, 2, k);  // (B, H, 1)
  const Tensor f448 = k.f(448.0);
  auto codes_of = [&](const Tensor& v, double nan_code) {
    // e4m3fn codes of v: saturating (fmin / fmax keep +-Inf at +-448), the sign of zero kept
    Tensor bytes = view_as_dtype(to_dtype(clamp_sym(v, 448.0, neg(f448), f448), ScalarType::Float8_e4m3fn), U8);
    bytes = where(isnan(v), k.scalar(nan_code, U8), bytes);
    return where(valid_rows, bytes, k.scalar(0.0, U8));
  };

  // scale_out: the row scale as float32 into q_sf, in its shape; +0 where the position is out of
  // range (the CUDA backend's value)
  auto write_scale = [&](const Tensor& q_scale) {
    if (!rec.scale_out) return;
    const auto sizes = a.q_sf->sizes();
    const Shape shape(sizes.begin(), sizes.end());
    copy_into(*a.q_sf, reshape(where(valid_rows, q_scale, k.f(0.0)), shape));
  };

  switch (rec.quant) {
    case Quantizer::kVllm: {
      // q_scale = pow2ceil(fmax(amax, 1e-4) / 448) (true division), codes of x / q_scale
      const Tensor quotient = div(fmax(k.filled(bh1, double(1e-4f), F), amax), k.filled(bh1, 448.0, F));
      const Tensor q_scale = float_with_exponent(exponent_rounded_up(quotient, k), k);
      write_bytes(a.q_out, codes_of(div(y, q_scale), 127.0));
      write_weights(&q_scale);
      write_scale(q_scale);
      return;
    }
    case Quantizer::kVllmCute: {
      // e of fmax(amax, 1e-4) * fl(1/448) rounded up (Inf: 255), codes of x * 2^(127 - e)
      const Tensor e = exponent_rounded_up(mul(fmax(amax, k.f(double(1e-4f))), k.f(0x1.24924ap-9)), k);
      const Tensor q_scale = float_with_exponent(e, k);
      const Tensor inv = float_with_exponent(sub(k.f(254.0), e), k);  // e = 255: -Inf
      write_bytes(a.q_out, codes_of(mul(y, inv), 127.0));
      write_weights(&q_scale);
      write_scale(q_scale);
      return;
    }
    case Quantizer::kVllmV32:
    case Quantizer::kSglangUe8m0: {
      // q_scale = pow2ceil(fmax(amax, floor) * fl(1/448)), codes of x / q_scale (IEEE division);
      // vllm_v32: floor 1e-10, NaN -> 0x7e; sglang_ue8m0: floor 1e-4, NaN -> 0xfe (-448)
      const bool ue8m0 = rec.quant == Quantizer::kSglangUe8m0;
      const Tensor t = mul(fmax(amax, k.f(double(ue8m0 ? 1e-4f : 1e-10f))), k.f(0x1.24924ap-9));
      const Tensor q_scale = float_with_exponent(exponent_rounded_up(t, k), k);
      write_bytes(a.q_out, codes_of(div(y, q_scale), ue8m0 ? 254.0 : 126.0));
      write_weights(&q_scale);
      write_scale(q_scale);
      return;
    }
    case Quantizer::kVllmFnuz224: {
      // q_scale = pow2ceil(fmax(amax, 1e-4) / 224) (true division); the e4m3fnuz code of
      // v = y / q_scale is the e4m3fn code of 2v (exact), -0 (0x80) written as 0x00, NaN v -> 0x80
      const Tensor quotient = div(fmax(k.filled(bh1, double(1e-4f), F), amax), k.filled(bh1, 224.0, F));
      const Tensor q_scale = float_with_exponent(exponent_rounded_up(quotient, k), k);
      const Tensor v = div(y, q_scale);
      const Tensor two_v = clamp_sym(mul(v, k.f(2.0)), 448.0, neg(f448), f448);
      Tensor bytes = view_as_dtype(to_dtype(two_v, ScalarType::Float8_e4m3fn), U8);
      bytes = where(eq(bytes, k.scalar(128.0, U8)), k.scalar(0.0, U8), bytes);  // -0 -> +0
      bytes = where(isnan(v), k.scalar(128.0, U8), bytes);                     // NaN -> 0x80
      write_bytes(a.q_out, where(valid_rows, bytes, k.scalar(0.0, U8)));
      write_weights(&q_scale);  // no x2: vLLM's ROCm kernel folds q_scale as it is
      write_scale(q_scale);
      return;
    }
    default: break;  // SGLang's (sglang, sglang_224)
  }

  // 6-9. scale = fmax(1e-4, amax) / lim, inv = 1 / scale, codes of the clamped y * inv (lim = 448,
  // or 224 for sglang_224; invalid rows +0, code 0x00)
  auto [bytes, scale] = fp8_sglang(y, sglang224 ? 224.0 : 448.0, &valid_rows, k);
  if (sglang_fnuz) bytes = where(eq(bytes, k.scalar(128.0, U8)), k.scalar(0.0, U8), bytes);  // -0 -> +0
  write_bytes(a.q_out, bytes);
  // 10. fold the scale into the head weight
  write_weights(&scale);
}

}  // namespace torch_binding
}  // namespace indexer_q
