// The composed implementation: SPEC.md's arithmetic as a sequence of ATen operations, so the
// operator runs on any device torch supports (XPU, and whatever else reaches the
// CompositeExplicitAutograd fallback). It must give the same bytes as the native kernels.
//
// Every ATen call goes through the dispatcher by the stable C shim (torch_call_dispatcher /
// the generated AOTI shims behind torch::stable::*), so this file is stable-ABI too. The shim
// cannot pass a `Scalar` argument (only Tensor, int, float, bool, ScalarType, Device, Layout,
// MemoryFormat, lists, optionals, strings), so only ops without Scalar arguments are called:
// constants are 0-dim (or full-shape) tensors on the tensors' device, a + b is a - (-b).
//
// Exactness, step by step (float32 unless stated):
//  1. q_input -> float32: exact for bf16 / fp16.
//  2. RoPE: fma(xr, c, -(xi*s)) and fma(xr, s, xi*c). ATen has no float32 fma, so fma_f32()
//     below computes it exactly in float64: P = xr*c is exact in double (24+24 bits <= 53, no
//     overflow or underflow in double's range); S = P + q rounds once; TwoSum gives the exact
//     error e = (P + q) - S; S is then turned into the round-to-odd result (one ulp toward e
//     when e != 0 and S's last bit is even). Rounding a round-to-odd double to float is the
//     correctly rounded float (53 >= 24 + 2), i.e. exactly fmaf. (Plain "P - xi*s in double,
//     then to float" is NOT always exact: when P is exactly halfway between two floats and
//     |q| is below half a double ulp of P, it double-rounds; e.g. xr = 97, c = 172961 * 2^-18.)
//  3. butterflies: strides 1, 2, 4, ..., 64 in that order, each a view (.., 2, stride) with
//     a + b and a - b written to the two halves: the same two float32 operations per pair.
//  4. y = x * 0x1.6a09e6p-4f (exact product rounding, as the spec).
//  5. amax with fmax semantics: |y| with NaN replaced by 0 (fmax(|y|, 0)), then amax; an all-NaN
//     row gives 0, which step 6 maps to 1e-4 exactly like fmax(1e-4, NaN).
//  6-7. scale = fmax(1e-4, amax) / 448 and inv = 1 / scale: true divisions by full-shape device
//     tensors (never a CPU scalar, which ATen's CUDA division turns into a reciprocal multiply).
//  8. v = fmax(fmin(y * inv, 448), -448): aten::fmin / fmax have C's fmin/fmax NaN semantics, so
//     NaN becomes +448 (torch.clamp would propagate NaN).
//  9. v -> float8_e4m3fn: ATen's conversion rounds to nearest even; |v| <= 448 so it never
//     reaches the values (>= 464) that it turns into NaN. Subnormals are tested.
// 10. weights_out = (float(weight) * float(weight_scale)) * scale, left product first.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "binding.h"

namespace indexer_q {
namespace torch_binding {

namespace {

using torch::headeronly::ScalarType;
using Shape = std::vector<std::int64_t>;

// Calls an ATen operator through the dispatcher (stable C shim) and returns its first result.
// `args` must be the schema's complete argument list.
template <class... A>
Tensor aten(const char* name, const char* overload, const A&... args) {
  std::array<StableIValue, sizeof...(A)> stack{torch::stable::detail::from(args)...};
  IQ_SHIM_CHECK(
      torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

Tensor mul(const Tensor& a, const Tensor& b) { return aten("aten::mul", "Tensor", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return aten("aten::div", "Tensor", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return torch::stable::subtract(a, b); }
Tensor neg(const Tensor& a) { return aten("aten::neg", "", a); }
Tensor add(const Tensor& a, const Tensor& b) { return sub(a, neg(b)); }  // a - (-b) == a + b
Tensor abs(const Tensor& a) { return aten("aten::abs", "", a); }
Tensor fmax(const Tensor& a, const Tensor& b) { return aten("aten::fmax", "", a, b); }
Tensor fmin(const Tensor& a, const Tensor& b) { return aten("aten::fmin", "", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return aten("aten::gt", "Tensor", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return aten("aten::lt", "Tensor", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return aten("aten::ge", "Tensor", a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return aten("aten::eq", "Tensor", a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return aten("aten::logical_or", "", a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return aten("aten::logical_and", "", a, b); }
Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  return aten("aten::bitwise_and", "Tensor", a, b);
}
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) {
  return aten("aten::where", "self", c, a, b);
}
Tensor nextafter(const Tensor& a, const Tensor& toward) {
  return aten("aten::nextafter", "", a, toward);
}
Tensor view_as_dtype(const Tensor& a, ScalarType t) { return aten("aten::view", "dtype", a, t); }
Tensor index_select(const Tensor& a, std::int64_t dim, const Tensor& index) {
  return aten("aten::index_select", "", a, dim, index);
}
Tensor view(const Tensor& a, const Shape& shape) { return torch::stable::view(a, shape); }
Tensor reshape(const Tensor& a, const Shape& shape) { return torch::stable::reshape(a, shape); }
Tensor pick(const Tensor& a, std::int64_t dim, std::int64_t i) {
  return torch::stable::select(a, dim, i);
}
// A new tensor of dtype t (always a copy, so the result never aliases the input).
Tensor to_dtype(const Tensor& a, ScalarType t) {
  return torch::stable::to(a, t, std::nullopt, std::nullopt, std::nullopt, false, /*copy=*/true);
}
void copy_into(Tensor dst, const Tensor& src) { torch::stable::copy_(dst, src); }

// Constants on the computation's device.
struct Consts {
  torch::stable::Device dev;
  Tensor scalar(double v, ScalarType t) const {
    return torch::stable::full(Shape{}, v, t, std::nullopt, dev);
  }
  Tensor filled(const Shape& shape, double v, ScalarType t) const {
    return torch::stable::full(shape, v, t, std::nullopt, dev);
  }
};

// fmaf(a, b, c) element-wise for float32 tensors (broadcasting), exactly: see step 2 above.
Tensor fma_f32(const Tensor& a, const Tensor& b, const Tensor& c, const Consts& k) {
  const Tensor A = to_dtype(a, ScalarType::Double);
  const Tensor Bv = to_dtype(b, ScalarType::Double);
  const Tensor C = to_dtype(c, ScalarType::Double);
  const Tensor P = mul(A, Bv);  // exact
  const Tensor S = add(P, C);   // rounded once (to double)
  // TwoSum (Knuth): err = (P + C) - S exactly, for any magnitudes (no overflow here).
  const Tensor bv = sub(S, P);
  const Tensor av = sub(S, bv);
  const Tensor err = add(sub(P, av), sub(C, bv));
  // Round to odd: where S is inexact (err != 0; a NaN err means an Inf/NaN operand, left as
  // is) and S's significand is even, step one ulp toward the exact sum.
  const Tensor zero = k.scalar(0.0, ScalarType::Double);
  const Tensor pos = gt(err, zero);
  const Tensor inexact = logical_or(pos, lt(err, zero));
  const Tensor bits = view_as_dtype(S, ScalarType::Long);
  const Tensor even = eq(bitwise_and(bits, k.scalar(1.0, ScalarType::Long)),
                         k.scalar(0.0, ScalarType::Long));
  const Tensor toward = where(pos, k.scalar(std::numeric_limits<double>::infinity(), ScalarType::Double),
                              k.scalar(-std::numeric_limits<double>::infinity(), ScalarType::Double));
  const Tensor odd = where(logical_and(inexact, even), nextafter(S, toward), S);
  return to_dtype(odd, ScalarType::Float);  // correctly rounded: == fmaf(a, b, c)
}

}  // namespace

void composed_forward(const OpArgs& a) {
  const Views v = make_views(a);
  validate_or_throw(a, v);  // the library's validator: nothing is written on error
  const std::int64_t B = v.q_input.sizes[0];
  const std::int64_t H = v.q_input.sizes[1];
  if (B == 0) return;

  const Consts k{a.q_input.device()};
  const ScalarType F = ScalarType::Float;

  // 1. decode
  Tensor x = to_dtype(a.q_input, F);  // (B, H, 128), contiguous, owned

  // Out-of-range positions: the validator rejects them where the host can read positions (CPU).
  // On a device they cannot be checked without a synchronization; such a row gets what the CUDA
  // backend gives it (128 zero codes, a NaN weights_out) and no out-of-bounds read.
  const ScalarType pt = a.positions.scalar_type();
  const Tensor valid = logical_and(ge(a.positions, k.scalar(0.0, pt)),
                                   lt(a.positions, k.scalar(double(a.freqs.size(0)), pt)));
  const Tensor safe_positions = where(valid, a.positions, k.scalar(0.0, pt));
  const Tensor valid_rows = view(valid, Shape{B, 1, 1});

  // 2. RoPE on dims 64..127, interleaved (re, im) pairs
  const Tensor fr = view(index_select(a.freqs, 0, safe_positions), Shape{B, 1, 32, 2});
  const Tensor c = pick(fr, 3, 0);  // (B, 1, 32)
  const Tensor s = pick(fr, 3, 1);
  Tensor rope_part = torch::stable::narrow(x, 2, 64, 64);  // view (B, H, 64)
  const Tensor rope = view(rope_part, Shape{B, H, 32, 2});
  const Tensor xr = pick(rope, 3, 0);  // (B, H, 32) views into x
  const Tensor xi = pick(rope, 3, 1);
  const Tensor xis = mul(xi, s);
  const Tensor xic = mul(xi, c);
  const Tensor new_r = fma_f32(xr, c, neg(xis), k);
  const Tensor new_i = fma_f32(xr, s, xic, k);
  copy_into(xr, new_r);
  copy_into(xi, new_i);

  // 3. butterflies, strides 1, 2, 4, ..., 64 in that order
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

  // 4. scale by 1/sqrt(128) (the float32 0x1.6a09e6p-4, exactly representable as a double)
  const Tensor y = mul(x, k.scalar(0x1.6a09e6p-4, F));

  // 5. amax with fmax semantics (NaN ignored)
  const Tensor ay = fmax(abs(y), k.scalar(0.0, F));
  const Tensor amax = torch::stable::amax(ay, 2, /*keepdim=*/true);  // (B, H, 1)

  // 6-7. scale and its inverse: IEEE divisions by full-shape device tensors
  const Shape bh1{B, H, 1};
  const Tensor scale = div(fmax(k.filled(bh1, double(1e-4f), F), amax), k.filled(bh1, 448.0, F));
  const Tensor inv = div(k.filled(bh1, 1.0, F), scale);

  // 8. clamp with fmin/fmax (NaN -> +448), 9. encode
  const Tensor clamped = fmax(fmin(mul(y, inv), k.scalar(448.0, F)), k.scalar(-448.0, F));
  const Tensor codes = where(valid_rows, clamped, k.scalar(0.0, F));  // +0 -> code 0x00
  copy_into(a.q_fp8, to_dtype(codes, ScalarType::Float8_e4m3fn));

  // 10. fold the scale into the head weight: (w * weight_scale) * scale
  const Tensor w = reshape(to_dtype(a.weight, F), bh1);  // handles weight row stride > H
  const Tensor ws = k.scalar(double(float(a.weight_scale)), F);
  const Tensor folded = mul(mul(w, ws), scale);
  copy_into(a.weights_out,
            where(valid_rows, folded, k.scalar(std::numeric_limits<double>::quiet_NaN(), F)));
}

}  // namespace torch_binding
}  // namespace indexer_q
