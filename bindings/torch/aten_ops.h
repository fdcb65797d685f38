// The ATen operations both composed implementations are written in (composed.cpp: the query
// side; composed_kside.cpp: the key side), and their constants. Every call goes through the
// dispatcher by the stable C shim (torch_call_dispatcher, or the generated AOTI shims behind
// torch::stable::*), so the callers are stable-ABI too. The shim cannot pass a `Scalar` argument,
// so only ops without Scalar arguments are called: constants are 0-dim (or full-shape) tensors
// on the tensors' device (Consts); a + b is subtract(a, b, alpha = -1) (the one shim that takes
// an alpha, as a double).
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <utility>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "binding.h"

namespace indexer_q {
namespace torch_binding {

using Shape = std::vector<std::int64_t>;

// Calls an ATen operator through the dispatcher (stable C shim) and returns its first result.
// `args` must be the schema's complete argument list.
template <class... A>
Tensor aten(const char* name, const char* overload, const A&... args) {
  std::array<StableIValue, sizeof...(A)> stack{torch::stable::detail::from(args)...};
  IQ_SHIM_CHECK(torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

inline Tensor mul(const Tensor& a, const Tensor& b) { return aten("aten::mul", "Tensor", a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return aten("aten::div", "Tensor", a, b); }
inline Tensor neg(const Tensor& a) { return aten("aten::neg", "", a); }
// Floating-point tensors only (ATen's integer add / sub take an alpha Scalar, which the shim can
// only pass as a double, and integer tensors refuse that).
inline Tensor sub(const Tensor& a, const Tensor& b) { return torch::stable::subtract(a, b); }
// a + b as a - (-1) * b: ATen's subtract with alpha -1 is its add with alpha 1, one rounding of
// the exact sum (signed zeros as IEEE a + b).
inline Tensor add(const Tensor& a, const Tensor& b) { return torch::stable::subtract(a, b, -1.0); }
inline Tensor abs(const Tensor& a) { return aten("aten::abs", "", a); }
inline Tensor fmax(const Tensor& a, const Tensor& b) { return aten("aten::fmax", "", a, b); }
inline Tensor fmin(const Tensor& a, const Tensor& b) { return aten("aten::fmin", "", a, b); }
inline Tensor floor(const Tensor& a) { return aten("aten::floor", "", a); }
inline Tensor isnan(const Tensor& a) { return aten("aten::isnan", "", a); }
inline Tensor nextafter(const Tensor& a, const Tensor& b) { return aten("aten::nextafter", "", a, b); }
// NaN -> nan, +Inf -> posinf, -Inf -> neginf (float? arguments, no Scalar); finite values unchanged
inline Tensor nan_to_num(const Tensor& a, double nan, double posinf, double neginf) {
  return aten("aten::nan_to_num", "", a, std::optional<double>(nan), std::optional<double>(posinf),
              std::optional<double>(neginf));
}
// C's fmax(fmin(v, lim), -lim) (NaN -> +lim, +-Inf -> +-lim; -0 keeps its sign) for lim > 0: NaN
// and the infinities replaced, then a clamp with tensor bounds (one pass each, vectorized; ATen's
// fmin / fmax are several times slower on the CPU)
inline Tensor clamp_sym(const Tensor& v, double lim, const Tensor& lo, const Tensor& hi) {
  return aten("aten::clamp", "Tensor", nan_to_num(v, lim, lim, -lim), std::optional<Tensor>(lo),
              std::optional<Tensor>(hi));
}
// comparisons
inline Tensor gt(const Tensor& a, const Tensor& b) { return aten("aten::gt", "Tensor", a, b); }
inline Tensor lt(const Tensor& a, const Tensor& b) { return aten("aten::lt", "Tensor", a, b); }
inline Tensor ge(const Tensor& a, const Tensor& b) { return aten("aten::ge", "Tensor", a, b); }
inline Tensor eq(const Tensor& a, const Tensor& b) { return aten("aten::eq", "Tensor", a, b); }
inline Tensor ne(const Tensor& a, const Tensor& b) { return aten("aten::ne", "Tensor", a, b); }
// logical (bool) and bitwise (integer) operations
inline Tensor land(const Tensor& a, const Tensor& b) { return aten("aten::logical_and", "", a, b); }
inline Tensor lor(const Tensor& a, const Tensor& b) { return aten("aten::logical_or", "", a, b); }
inline Tensor lnot(const Tensor& a) { return aten("aten::logical_not", "", a); }
inline Tensor lxor(const Tensor& a, const Tensor& b) { return aten("aten::logical_xor", "", a, b); }
inline Tensor band(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_and", "Tensor", a, b); }
inline Tensor bor(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_or", "Tensor", a, b); }
inline Tensor bxor(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_xor", "Tensor", a, b); }
inline Tensor shl(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_left_shift", "Tensor", a, b); }
inline Tensor shr(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_right_shift", "Tensor", a, b); }
// selection, indexing, shapes, dtypes
inline Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return aten("aten::where", "self", c, a, b); }
inline Tensor index_select(const Tensor& a, std::int64_t dim, const Tensor& index) {
  return aten("aten::index_select", "", a, dim, index);
}
inline Tensor view_as_dtype(const Tensor& a, torch::headeronly::ScalarType t) {
  return aten("aten::view", "dtype", a, t);
}
inline Tensor view(const Tensor& a, const Shape& shape) { return torch::stable::view(a, shape); }
inline Tensor reshape(const Tensor& a, const Shape& shape) { return torch::stable::reshape(a, shape); }
inline Tensor pick(const Tensor& a, std::int64_t dim, std::int64_t i) { return torch::stable::select(a, dim, i); }
// A new tensor of dtype t (always a copy, so the result never aliases the input).
inline Tensor to_dtype(const Tensor& a, torch::headeronly::ScalarType t) {
  return torch::stable::to(a, t, std::nullopt, std::nullopt, std::nullopt, false, /*copy=*/true);
}

// Constants on the computation's device.
struct Consts {
  torch::stable::Device dev;
  Tensor scalar(double v, torch::headeronly::ScalarType t) const {
    return torch::stable::full(Shape{}, v, t, std::nullopt, dev);
  }
  Tensor filled(const Shape& shape, double v, torch::headeronly::ScalarType t) const {
    return torch::stable::full(shape, v, t, std::nullopt, dev);
  }
  Tensor li(std::int64_t v) const { return scalar(double(v), torch::headeronly::ScalarType::Long); }  // |v| < 2^53: exact
  Tensor f(double v) const { return scalar(v, torch::headeronly::ScalarType::Float); }  // a float32 value: exact
};


// ---- exact arithmetic without float64 (both composed files; devices such as many XPUs have no
// float64): float32, int32 / int64 and bool tensors only. See composed_kside.cpp's file comment
// for why fma_exact is exactly fmaf.
namespace exact_detail {
using torch::headeronly::ScalarType;
constexpr ScalarType F = ScalarType::Float, I32 = ScalarType::Int, L = ScalarType::Long;
}  // namespace exact_detail
using exact_detail::F;
using exact_detail::I32;
using exact_detail::L;

inline Tensor isfinite(const Tensor& a) { return aten("aten::isfinite", "", a); }
inline Tensor stack(const std::vector<Tensor>& ts, std::int64_t dim) { return aten("aten::stack", "", ts, dim); }
inline Tensor narrow(const Tensor& a, std::int64_t d, std::int64_t start, std::int64_t len) {
  Tensor t = a;  // a handle: narrow takes a non-const reference
  return torch::stable::narrow(t, d, start, len);
}

// int64 a + b (same shape): the sum over a stacked pair.
inline Tensor iadd(const Tensor& a, const Tensor& b) {
  return torch::stable::sum(stack({a, b}, 0), std::vector<std::int64_t>{0}, false, L);
}
inline Shape shape_of(const Tensor& t) {
  const auto s = t.sizes();
  return Shape(s.begin(), s.end());
}

// Float32 tensor (integer values, |v| < 2^24) -> int64 tensor.
inline Tensor to_long(const Tensor& f) { return to_dtype(f, L); }
// 2^n as float32, for integer-valued float32 n in [-126, 127].
inline Tensor pow2(const Tensor& n, const Consts& k) {
  return view_as_dtype(to_dtype(shl(to_long(add(n, k.f(127.0))), k.li(23)), I32), F);
}
// Index (float32, integer-valued) of the highest set bit of int64 v > 0 (v < 2^63); anything for 0.
inline Tensor top_bit(const Tensor& v, const Consts& k) {
  const Tensor fb = to_long(view_as_dtype(to_dtype(v, F), I32));  // float32 bits of v (rounded)
  Tensor t = sub(to_dtype(band(shr(fb, k.li(23)), k.li(0xff)), F), k.f(127.0));
  t = fmax(t, k.f(0.0));
  // the conversion may have rounded up to the next power of two
  return where(eq(shr(v, to_long(t)), k.li(0)), fmax(sub(t, k.f(1.0)), k.f(0.0)), t);
}

// A finite float32 as sign, significand (int64) and exponent (float32, integer-valued).
struct Dec {
  Tensor neg, m, e;
};
inline Dec decompose(const Tensor& x, const Consts& k) {
  const Tensor u = view_as_dtype(x, I32);
  const Tensor u64 = band(to_dtype(u, L), k.li(0xffffffffLL));
  const Tensor E = band(shr(u64, k.li(23)), k.li(0xff));
  const Tensor M = band(u64, k.li(0x7fffff));
  const Tensor normal = gt(E, k.li(0));
  Dec d;
  d.neg = lt(u, k.scalar(0.0, I32));
  d.m = where(normal, bor(M, k.li(0x800000)), M);
  d.e = where(normal, sub(to_dtype(E, F), k.f(150.0)), k.f(-149.0));
  return d;
}
// v (int64 >= 0) times 2^sh (sh float32, integer-valued): exact for sh >= 0 (the caller keeps the
// result below 2^63); for sh < 0 shifted right with a sticky low bit.
inline Tensor align(const Tensor& v, const Tensor& sh, const Consts& k) {
  const Tensor ls = to_long(fmin(fmax(sh, k.f(0.0)), k.f(62.0)));
  const Tensor rs = to_long(fmin(fmax(neg(sh), k.f(0.0)), k.f(60.0)));
  const Tensor right = shr(v, rs);
  const Tensor lost = ne(bxor(v, shl(right, rs)), k.li(0));
  return where(ge(sh, k.f(0.0)), shl(v, ls), bor(right, to_dtype(lost, L)));
}

// fmaf(a, b, c) for float32 tensors of one shape, exactly (see the file comment).
inline Tensor fma_exact(const Tensor& a, const Tensor& b, const Tensor& c, const Consts& k) {
  const Dec A = decompose(a, k), B = decompose(b, k), C = decompose(c, k);
  const Tensor mp = mul(A.m, B.m);  // < 2^48, exact
  const Tensor ep = add(A.e, B.e);
  const Tensor sp = lxor(A.neg, B.neg);
  const Tensor pz = eq(mp, k.li(0)), cz = eq(C.m, k.li(0));
  const Tensor none = k.f(-10000.0);
  const Tensor tp = where(pz, none, add(add(top_bit(mp, k), k.f(1.0)), ep));  // exclusive tops
  const Tensor tc = where(cz, none, add(add(top_bit(C.m, k), k.f(1.0)), C.e));
  const Tensor e0 = sub(fmax(tp, tc), k.f(62.0));
  const Tensor P = align(mp, sub(ep, e0), k), Cv = align(C.m, sub(C.e, e0), k);
  const Tensor S = iadd(where(sp, neg(P), P), where(C.neg, neg(Cv), Cv));  // |S| < 2^63
  const Tensor sneg = lt(S, k.li(0));
  const Tensor Aa = abs(S);
  // round |S| * 2^e0 to float32 (nearest even)
  const Tensor top = top_bit(Aa, k);
  const Tensor ulp = fmax(sub(add(top, e0), k.f(23.0)), k.f(-149.0));
  const Tensor sh = sub(ulp, e0);
  const Tensor shL = to_long(fmin(fmax(neg(sh), k.f(0.0)), k.f(40.0)));
  const Tensor shR = to_long(fmin(fmax(sh, k.f(0.0)), k.f(62.0)));
  const Tensor qR = shr(Aa, shR);
  const Tensor rem = bxor(Aa, shl(qR, shR));
  const Tensor half = shr(shl(k.li(1), shR), k.li(1));
  const Tensor odd = eq(band(qR, k.li(1)), k.li(1));
  const Tensor up = land(gt(shR, k.li(0)), lor(gt(rem, half), land(eq(rem, half), odd)));
  Tensor q = add(to_dtype(qR, F), to_dtype(up, F));                      // <= 2^24: exact
  q = where(lt(sh, k.f(0.0)), to_dtype(shl(Aa, shL), F), q);              // < 2^24: exact
  const Tensor at63 = land(eq(sh, k.f(63.0)), gt(Aa, k.li(std::int64_t(1) << 62)));
  q = where(gt(sh, k.f(62.0)), to_dtype(at63, F), q);
  const Tensor h1 = floor(div(ulp, k.f(2.0)));
  const Tensor mag = mul(mul(q, pow2(h1, k)), pow2(sub(ulp, h1), k));
  Tensor r = where(sneg, neg(mag), mag);
  // an exactly zero sum: +0, or -0 when both addends are -0 (or a -0 addend and a zero product of
  // negative sign)
  const Tensor zero = eq(S, k.li(0));
  const Tensor neg_zero = land(land(pz, cz), land(sp, C.neg));
  r = where(zero, where(neg_zero, k.f(-0.0), k.f(0.0)), r);
  const Tensor finite = land(land(isfinite(a), isfinite(b)), isfinite(c));
  return where(finite, r, add(mul(a, b), c));
}

// ---- the fast exact fma: float32 operations only, for operands in range ----
// fmaf(a, b, c) = RN(a*b + c) from float32 operations (no integer significands): the product as
// an exact pair uh + ul (uh = fl(a*b); ul by Dekker's product with Veltkamp's 12 + 12-bit split,
// or, for an `a` of at most 12 significant bits (bf16 / fp16 inputs), ul = (a*b_hi - uh) + a*b_lo,
// every product exact and the difference exact by Sterbenz), then Boldo and Melquiond's correctly
// rounded sum of three: (th, tl) = TwoSum(c, uh), v = round-to-odd(tl + ul), z = fl(th + v). An
// exactly zero sum takes th = fl(c + uh), IEEE's signed zero. Exact when every operand is finite,
// a, b, c, a*b below 2^110 and a*b is zero or at least 2^-100 (no overflow in the split, no bits
// of ul below 2^-149); FastFmaRange checks that on whole tensors (one host read), and callers
// take fma_exact() (integer significands) otherwise.
struct Split {
  Tensor hi, lo;  // hi: the top 12 significant bits; lo = v - hi (exact), at most 12 bits
};
inline Split veltkamp(const Tensor& v, const Consts& k) {
  const Tensor t = mul(v, k.f(4097.0));  // 2^12 + 1
  const Tensor hi = sub(t, sub(t, v));
  return Split{hi, sub(v, hi)};
}
// (s, e) with s = fl(a + b), e = a + b - s exactly (TwoSum, any order of magnitudes).
inline std::pair<Tensor, Tensor> two_sum(const Tensor& a, const Tensor& b) {
  const Tensor s = add(a, b);
  const Tensor bb = sub(s, a);
  return {s, add(sub(a, sub(s, bb)), sub(b, bb))};
}
// fl(uh + ul + c) with one rounding (Boldo-Melquiond), uh + ul an exact product pair.
inline Tensor sum3_rn(const Tensor& uh, const Tensor& ul, const Tensor& c, const Consts& k) {
  const auto [th, tl] = two_sum(c, uh);
  const auto [s, e] = two_sum(tl, ul);
  // round to odd: an inexact s with an even last bit moves one step toward the exact value
  const Tensor even = eq(band(view_as_dtype(s, I32), k.scalar(1.0, I32)), k.scalar(0.0, I32));
  const Tensor fix = land(even, ne(e, k.f(0.0)));
  const Tensor v = where(fix, nextafter(s, mul(e, k.f(std::numeric_limits<double>::infinity()))), s);
  const Tensor z = add(th, v);
  return where(eq(z, k.f(0.0)), th, z);
}
// fmaf(a, b, c), b given with its split (b may broadcast against a and c); a_narrow: every a
// has at most 12 significant bits.
inline Tensor fma_fast(const Tensor& a, const Tensor& b, const Split& bs, const Tensor& c, bool a_narrow,
                       const Consts& k) {
  const Tensor uh = mul(a, b);
  Tensor ul;
  if (a_narrow) {
    ul = add(sub(mul(a, bs.hi), uh), mul(a, bs.lo));
  } else {
    const Split as = veltkamp(a, k);
    ul = add(add(add(sub(mul(as.hi, bs.hi), uh), mul(as.hi, bs.lo)), mul(as.lo, bs.hi)), mul(as.lo, bs.lo));
  }
  return sum3_rn(uh, ul, c, k);
}

// Whether every value of each tensor is finite and zero or of magnitude in [2^lo, 2^hi): one
// host read for all of them (a synchronization on a device).
inline bool all_in_range(const std::vector<std::pair<Tensor, std::pair<int, int>>>& ts, const Consts& k) {
  std::vector<Tensor> mm;
  for (const auto& [t, r] : ts) {
    if (t.numel() == 0) continue;
    const Tensor m = abs(t);
    const Tensor nz = where(eq(m, k.f(0.0)), k.f(1.0), m);  // zeros pass
    const Tensor flat = reshape(nz, Shape{-1});
    mm.push_back(torch::stable::amax(flat, 0, false));
    mm.push_back(aten("aten::amin", "", flat, std::vector<std::int64_t>{0}, false));
  }
  if (mm.empty()) return true;
  const Tensor host = torch::stable::to(stack(mm, 0), F, std::nullopt,
                                        torch::stable::Device(torch::headeronly::DeviceType::CPU),
                                        std::nullopt, false, /*copy=*/true);
  const float* v = static_cast<const float*>(host.const_data_ptr());
  std::size_t i = 0;
  for (const auto& [t, r] : ts) {
    if (t.numel() == 0) continue;
    const float mx = v[i++], mn = v[i++];
    if (!(mx < std::ldexp(1.0f, r.second) && mn >= std::ldexp(1.0f, r.first))) return false;
  }
  return true;
}

// ---- the steps both sides share (composed.cpp, composed_kside.cpp) ----

// RoPE in place on `part` (..., 64), pairs (2j, 2j+1) (adjacent) or (j, j+32) (neox); c, s of
// shape (..., 32) or broadcasting to it: x0' = fma(x0, c, -(x1*s)), x1' = fma(x0, s, x1*c)
// (x1_c: fma(x1, c, x0*s)), the products rounded first. The fast fma where every operand is in
// range (inputs magnitudes in [2^-60, 2^60), c and s in [2^-40, 2^40), zeros allowed), else
// fma_exact. narrow: every value of `part` has at most 12 significant bits (bf16 / fp16 input).
inline void rope_inplace(const Tensor& part, bool neox, bool fma_x1_c, const Tensor& c, const Tensor& s,
                         bool narrow_in, const Consts& k) {
  Shape sh = shape_of(part);
  sh.back() = 32;
  Tensor x0, x1;
  if (neox) {
    x0 = narrow(part, part.dim() - 1, 0, 32);
    x1 = narrow(part, part.dim() - 1, 32, 32);
  } else {
    Shape s2 = sh;
    s2.push_back(2);
    const Tensor v = view(part, s2);
    x0 = pick(v, part.dim(), 0);
    x1 = pick(v, part.dim(), 1);
  }
  Tensor n0, n1;
  if (all_in_range({{part, {-60, 60}}, {c, {-40, 40}}, {s, {-40, 40}}}, k)) {
    const Split cs = veltkamp(c, k), ss = veltkamp(s, k);
    n0 = fma_fast(x0, c, cs, neg(mul(x1, s)), narrow_in, k);
    n1 = fma_x1_c ? fma_fast(x1, c, cs, mul(x0, s), narrow_in, k) : fma_fast(x0, s, ss, mul(x1, c), narrow_in, k);
  } else {
    const Tensor cf = mul(c, torch::stable::full(sh, 1.0, F, std::nullopt, k.dev));  // full shape (exact)
    const Tensor sf = mul(s, torch::stable::full(sh, 1.0, F, std::nullopt, k.dev));
    n0 = fma_exact(x0, cf, neg(mul(x1, sf)), k);
    n1 = fma_x1_c ? fma_exact(x1, cf, mul(x0, sf), k) : fma_exact(x0, sf, mul(x1, cf), k);
  }
  torch::stable::copy_(x0, n0);
  torch::stable::copy_(x1, n1);
}

// The butterflies of the 128-point Hadamard transform over the last dim of x (..., 128)
// (strides 1, 2, 4, ..., 64 in that order, a + b and a - b); the caller scales.
inline Tensor hadamard(Tensor x) {
  const Shape sh = shape_of(x);
  for (std::int64_t st = 1; st < 128; st *= 2) {
    Shape split(sh.begin(), sh.end() - 1);
    split.push_back(128 / (2 * st));
    split.push_back(2);
    split.push_back(st);
    const Tensor xv = view(x, split);
    const std::int64_t d = std::int64_t(split.size()) - 2;
    const Tensor lo = pick(xv, d, 0), hi = pick(xv, d, 1);
    x = reshape(stack({add(lo, hi), sub(lo, hi)}, d), sh);
  }
  return x;
}

// ---- helpers of the quantizers (both sides) ----
// Number of non-zero (true) elements along `dim` (int64).
inline Tensor count_nonzero(const Tensor& a, std::int64_t dim) {
  return aten("aten::count_nonzero", "dim_IntList", a, std::vector<std::int64_t>{dim});
}
inline Tensor cat2(const Tensor& a, const Tensor& b, std::int64_t dim) {
  return aten("aten::cat", "", std::vector<Tensor>{a, b}, dim);
}
inline void copy_into(Tensor dst, const Tensor& src) { torch::stable::copy_(dst, src); }
// Rounds float32 values to the nearest bf16 (ties to even) and back: round_bf16() of
// src/common/row.h on the bits, u -> (u + 0x7fff + lsb) & 0xffff0000 (NaN: quieted, u | 0x400000),
// written as: the high half hi of u plus one where the low half lo is above 0x8000, or equal to it
// with hi odd (a float32 integer below 2^17, exact), as a signed 16-bit value times 2^16 (an exact
// float32 product in the int32 range) converted to int32.
inline Tensor round_bf16(const Tensor& x, const Consts& k) {
  const Tensor u = view_as_dtype(x, I32);
  const Tensor I = k.scalar(0.0, I32);
  auto ic = [&](double v) { return k.scalar(v, I32); };
  (void)I;
  const Tensor hi = band(shr(u, ic(16.0)), ic(65535.0));
  const Tensor lo = band(u, ic(65535.0));
  const Tensor up = lor(gt(lo, ic(32768.0)), land(eq(lo, ic(32768.0)), eq(band(hi, ic(1.0)), ic(1.0))));
  Tensor t = add(to_dtype(hi, F), to_dtype(up, F));                      // 0 .. 65536, exact
  t = where(ge(t, k.f(32768.0)), sub(t, k.f(65536.0)), t);              // as a signed half
  const Tensor r = view_as_dtype(to_dtype(mul(t, k.f(65536.0)), I32), F);  // exact, int32 range
  const Tensor quiet = view_as_dtype(bor(u, ic(double(0x00400000))), F);
  return where(isnan(x), quiet, r);
}

// The exponent byte of positive float32 values rounded up to a power of two, from their bits:
// exponent bits + (mantissa bits != 0), as exact float32 integers (0..255; +Inf gives 255).
// Equals ((bits + 0x7fffff) >> 23) & 0xff of row.h's pow2_ceil / cute_exponent for s > 0.
inline Tensor exponent_rounded_up(const Tensor& s, const Consts& k) {
  const Tensor bits = view_as_dtype(s, I32);  // s > 0: sign bit clear
  const Tensor expo = band(shr(bits, k.scalar(23.0, I32)), k.scalar(255.0, I32));
  const Tensor mant_nz = ne(band(bits, k.scalar(double(0x7fffff), I32)), k.scalar(0.0, I32));
  return add(to_dtype(expo, F), to_dtype(mant_nz, F));
}

// The float32 whose bits are n << 23 for float32 integers n in [-1, 255] (n = -1: 0xff800000 =
// -Inf, n = 255: +Inf, n = 0: +0): the int32 n * 2^23, an exact float32 product.
inline Tensor float_with_exponent(const Tensor& n, const Consts& k) {
  return view_as_dtype(to_dtype(mul(n, k.f(8388608.0)), I32), F);
}

// Writes byte codes (uint8, shape of `out`) into `out`, whatever its 1-byte dtype: fp8 codes,
// uint8 or int8 raw codes. Same-size dtype views, so every byte lands unchanged.
inline void write_bytes(const Tensor& out, const Tensor& bytes_u8) {
  copy_into(view_as_dtype(out, torch::headeronly::ScalarType::Byte), bytes_u8);
}

// The (n,) float32 device tensor of the values th.
inline Tensor thresholds(std::initializer_list<double> th, const Consts& k) {
  const Tensor t = k.filled(Shape{std::int64_t(th.size())}, 0.0, F);
  std::int64_t i = 0;
  for (double x : th) copy_into(pick(t, 0, i++), k.f(x));
  return t;
}

// The E2M1 magnitude (int64, 0..7) of a = fmin(|v|, 6) (NaN -> 6, hence 7) for v of shape
// (..., n): ties to even (strictly above 0.25, 1.25, 2.5, 5; at or above 0.75, 1.75, 3.5), or
// ties to the smaller magnitude (strictly above all seven).
inline Tensor e2m1_magnitude(const Tensor& v, bool ties_to_even, const Consts& k) {
  const Tensor av = fmin(abs(v), k.f(6.0));
  const std::int64_t nd = v.dim();
  Shape s5 = shape_of(v);
  s5.push_back(1);
  const Tensor a5 = view(av, s5);
  if (!ties_to_even)
    return count_nonzero(gt(a5, thresholds({0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0}, k)), nd);
  const Tensor above = cat2(gt(a5, thresholds({0.25, 1.25, 2.5, 5.0}, k)),
                            ge(a5, thresholds({0.75, 1.75, 3.5}, k)), nd);
  return count_nonzero(above, nd);
}

// The value of an E2M1 magnitude m (int64 0..7): 0, 0.5, 1, 1.5, 2, 3, 4, 6 (row.h e2m1_value).
inline Tensor e2m1_value(const Tensor& m, const Consts& k) {
  const Tensor mf = to_dtype(m, F);
  return where(lt(mf, k.f(4.0)), mul(mf, k.f(0.5)),
               where(lt(mf, k.f(6.0)), sub(mf, k.f(2.0)),
                     where(eq(mf, k.f(6.0)), k.f(4.0), k.f(6.0))));
}

// The UE8M0 byte of SGLang V4.1's packer (row.h rne_ue8m0_of_amax): the exponent of
// fmax(amax / 6, 1e-4) rounded up, clamped to [1, 254] (an IEEE division by a full-shape tensor).
inline Tensor rne_exponent(const Tensor& amax, const Consts& k) {
  const Tensor sf = fmax(div(amax, k.filled(shape_of(amax), 6.0, F)), k.f(double(1e-4f)));
  return fmin(fmax(exponent_rounded_up(sf, k), k.f(1.0)), k.f(254.0));
}

// Row maxima of |y| over `dim` with NaN ignored (NaN -> 0, as fmax(|y|, 0)), keepdim.
inline Tensor amax_ignoring_nan(const Tensor& y, std::int64_t dim, const Consts& k) {
  const double inf = std::numeric_limits<double>::infinity();
  return torch::stable::amax(nan_to_num(abs(y), 0.0, inf, inf), dim, /*keepdim=*/true);
}


// SGLang's FP8 quantizer on rows y (..., 128): scale = fmax(1e-4, amax) / lim (lim 448, or 224 for
// sglang_224), inv = 1 / scale (true divisions by full-shape tensors), codes e4m3fn of
// fmax(fmin(y * inv, lim), -lim) (NaN -> +lim; -0 keeps its sign). valid (bool, broadcasting to
// y, or nullptr): rows written as +0 (code 0x00) where false. Returns (codes uint8, scale (..., 1)).
inline std::pair<Tensor, Tensor> fp8_sglang(const Tensor& y, double lim_v, const Tensor* valid, const Consts& k) {
  const Tensor amax = amax_ignoring_nan(y, y.dim() - 1, k);  // (..., 1)
  const Shape s1 = shape_of(amax);
  const Tensor scale = div(fmax(k.filled(s1, double(1e-4f), F), amax), k.filled(s1, lim_v, F));
  const Tensor inv = div(k.filled(s1, 1.0, F), scale);
  const Tensor lim = k.f(lim_v);
  Tensor v = clamp_sym(mul(y, inv), lim_v, k.f(-lim_v), lim);
  if (valid) v = where(*valid, v, k.f(0.0));
  return {view_as_dtype(to_dtype(v, torch::headeronly::ScalarType::Float8_e4m3fn), torch::headeronly::ScalarType::Byte),
          scale};
}

// SGLang's V4 FP4 block exponent (blocks' amax, NaN ignored): fmax(1e-4, amax) / 6 rounded up to
// a power of two, as the UE8M0 byte (float32 integers; 255 for an infinite amax).
inline Tensor fp4_sglang_exponent(const Tensor& amax, const Consts& k) {
  const Shape s1 = shape_of(amax);
  return exponent_rounded_up(div(fmax(k.filled(s1, double(1e-4f), F), amax), k.filled(s1, 6.0, F)), k);
}

// E2M1 code pairs of v (..., 4, 32) as int64 bytes (..., 64): magnitude ties to even or to the
// smaller one (e2m1_magnitude); sign_on_zero: the sign bit of v on every code, zero included (NaN
// v: 0x7 whatever its sign), else on nonzero codes of negative v. Byte m = code(2m) | code(2m+1) << 4.
inline Tensor fp4_code_pairs(const Tensor& v, bool ties_to_even, bool sign_on_zero, const Consts& k) {
  const Tensor mag = e2m1_magnitude(v, ties_to_even, k);
  const Tensor negative = sign_on_zero ? land(lt(view_as_dtype(v, I32), k.scalar(0.0, I32)), lnot(isnan(v)))
                                       : land(lt(v, k.f(0.0)), ne(mag, k.li(0)));
  const Tensor code = where(negative, bor(mag, k.li(8)), mag);  // int64
  Shape s = shape_of(v);
  s.pop_back();
  s.pop_back();
  s.push_back(64);
  s.push_back(2);
  const Tensor pairs = view(code, s);
  const std::int64_t d = std::int64_t(s.size()) - 1;
  return bor(pick(pairs, d, 0), mul(pick(pairs, d, 1), k.li(16)));
}

}  // namespace torch_binding
}  // namespace indexer_q
