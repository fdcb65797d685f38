// The key side (docs/KSIDE-SPEC.md section 2) as ATen operations, for devices without a native
// kernel (XPU and whatever reaches CompositeExplicitAutograd) and as kside_store_composed on any
// device. It must give the native kernels' bytes, and it uses no float64 (devices such as many
// XPUs have none): float32, int32 / int64 and bool tensors only.
//
// Every ATen call goes through the dispatcher by the stable C shim (as composed.cpp), which cannot
// pass a Scalar: constants are device tensors; a float add is subtract(a, b, alpha = -1); an int64 add is the sum
// over a stacked pair (aten::add / sub take an alpha Scalar that integer tensors refuse as a
// double).
//
// Exactness, step by step:
//  - fmaf has no ATen op. Token rows in range take aten_ops.h's fma_fast (float32 operations; see
//    there) and, for bf16 / fp16 inputs, the sums of squares as exact products plus one addition;
//    the RoPE and the butterflies are aten_ops.h's (the query side's). Otherwise
//    fma_exact() computes it with integers: each float32 operand is
//    (sign, 24-bit integer significand m, exponent e) with value m * 2^e; the product's
//    significand ma * mb (< 2^48) is exact in int64; both addends are aligned to a common
//    exponent e0 = (higher top) - 62 (left shifts are exact; an operand shifted right keeps a
//    sticky bit, and it is then so far below the other that the sum keeps >= 60 significant bits,
//    so one sticky bit decides the rounding), added once in int64 (|sum| < 2^63), and the sum is
//    rounded to nearest even at 24 bits (or at 2^-149 for subnormal results) by shifts and
//    masks; the rounded significand q (<= 2^24) times 2^ulp is formed by two exact float32
//    multiplies by powers of two (overflow gives Inf, as rounding does). Exponent arithmetic is
//    small integers in float32 (exact below 2^24). An exactly zero sum is +0, or -0 when both
//    addends are -0 (IEEE). Operands with an Inf or NaN take a * b + c in float32, which gives
//    fmaf's Inf / NaN results (the sign of a NaN does not reach any byte here).
//  - the reciprocal square root is the library's MUFU.RSQ model (docs/KSIDE-SPEC.md section 2 step 5): its 2^24
//    table entries (indexer_q::detail::rsq_sm90_table) as an int32 tensor on the device (64 MiB,
//    built once per device in a CPU tensor, uploaded and released on other devices), gathered by
//    index_select; the even power of two is
//    applied by an exact float32 multiply (the results are normal for every argument).
//  - everything else is the spec's float32 operation by the same ATen operation: products,
//    sums, differences, divisions by device tensors (true IEEE divisions), fmin / fmax with C
//    semantics (NaN ignored: fmax(|y|, 0) before amax; fmin(v, 448) maps NaN to 448), the
//    e4m3fn conversion (round to nearest even; |v| <= 448), e2m1 codes by counting thresholds.
//  - tokens: a token is written when slot >= 0, slot < num_pages * page_size and position in
//    [0, max_pos) (on the CPU the validator has already rejected every other non-negative slot);
//    its 132 / 68 bytes are index_copy_'d into the flat cache at docs/KSIDE-SPEC.md section 3's place.
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "aten_ops.h"
#include "kside_binding.h"

namespace indexer_q {
namespace torch_binding {

namespace {

using torch::headeronly::ScalarType;
constexpr ScalarType U8 = ScalarType::Byte;  // F, I32, L: aten_ops.h

// The ATen operations shared with composed.cpp (aten, mul, ..., sub / add (float only), land, band,
// shr, where, view, to_dtype, Consts with li / f, iadd, and the exact fma_exact): aten_ops.h. Those
// only this file needs:
Tensor nonzero(const Tensor& a) { return aten("aten::nonzero", "", a); }
Tensor cat(const std::vector<Tensor>& ts, std::int64_t dim) { return aten("aten::cat", "", ts, dim); }

// ---- the MUFU.RSQ model's table on a device, built once per device (never freed) ----
std::mutex g_table_mu;
std::map<std::pair<int, int>, Tensor*> g_tables;

const Tensor& rsq_table_on(const torch::stable::Device& dev) {
  std::lock_guard<std::mutex> lock(g_table_mu);
  const auto key = std::make_pair(int(dev.type()), int(dev.index()));
  auto it = g_tables.find(key);
  if (it != g_tables.end()) return *it->second;
  // filled in place in a CPU tensor (no second host copy): 64 MiB, kept when the device is the
  // CPU, else copied to the device and released (64 MiB on the device, none left on the host)
  const torch::stable::Device cpu_dev(torch::headeronly::DeviceType::CPU);
  Tensor cpu = torch::stable::empty(Shape{std::int64_t(1) << 24}, I32, std::nullopt, cpu_dev);
  auto* p = static_cast<std::int32_t*>(cpu.mutable_data_ptr());
  for (std::uint32_t i = 0; i < (1u << 24); ++i) p[i] = std::int32_t(detail::rsq_sm90_table(i));
  Tensor* t = new Tensor(dev.type() == torch::headeronly::DeviceType::CPU
                             ? cpu
                             : torch::stable::to(cpu, I32, std::nullopt, dev, std::nullopt, false, /*copy=*/true));
  g_tables[key] = t;
  return *t;
}

// rsq_mufu(t) of docs/KSIDE-SPEC.md section 2 step 5, element-wise.
Tensor rsq_model(const Tensor& t, const Consts& k) {
  const Tensor b = band(to_dtype(view_as_dtype(t, I32), L), k.li(0xffffffffLL));
  const Tensor subn = land(lt(b, k.li(0x00800000)), ne(b, k.li(0)));
  const Tensor tt = where(subn, mul(t, k.f(0x1p24)), t);  // exact
  const Tensor s12 = where(subn, k.f(12.0), k.f(0.0));
  const Tensor bb = band(to_dtype(view_as_dtype(tt, I32), L), k.li(0xffffffffLL));
  const Tensor E = band(shr(bb, k.li(23)), k.li(0xff));
  const Tensor p = bxor(band(E, k.li(1)), k.li(1));  // (E - 127) & 1
  const Tensor kk = div(sub(sub(to_dtype(E, F), k.f(127.0)), to_dtype(p, F)), k.f(2.0));  // exact
  const Tensor idx = bor(shl(p, k.li(23)), band(bb, k.li(0x7fffff)));
  const Tensor T = view_as_dtype(index_select(rsq_table_on(t.device()), 0, reshape(idx, Shape{-1})), F);
  const Tensor n = fmin(fmax(sub(s12, kk), k.f(-126.0)), k.f(127.0));  // in [-64, 75] for real inputs
  Tensor r = mul(reshape(T, shape_of(t)), pow2(n, k));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  r = where(eq(b, k.li(0x7f800000)), k.f(0.0), r);
  r = where(eq(b, k.li(0)), k.f(inf), r);
  r = where(gt(b, k.li(0x80000000LL)), k.f(nan), r);  // negative (and negative NaN)
  r = where(eq(b, k.li(0x80000000LL)), k.f(-inf), r);
  r = where(isnan(t), k.f(nan), r);
  return r;
}

}  // namespace

void kside_composed_forward(const KTorchArgs& a) {
  const KStoreArgs args = make_kargs(a);
  throw_if_error(indexer_q::validate(args));  // nothing is written on error
  const std::int64_t N = args.input.sizes[0];
  if (N == 0) return;
  const bool fp4 = krecipe_format(a.recipe) == OutFormat::kE2M1;
  const std::int64_t CB = fp4 ? 64 : 128, ps = a.page_size;
  const std::int64_t num_pages = args.kvcache.sizes[0], page_bytes = args.kvcache.sizes[1];
  const std::int64_t max_pos = args.freqs.sizes[0];
  int log2_ps = 0;
  while ((std::int64_t(1) << log2_ps) < ps) ++log2_ps;
  const Consts k{a.input.device()};

  // the tokens to write
  const Tensor pos = to_dtype(a.positions, L), slots = a.slots;
  const Tensor valid = land(land(ge(slots, k.li(0)), lt(slots, k.li(num_pages * ps))),
                            land(ge(pos, k.li(0)), lt(pos, k.li(max_pos))));
  Tensor idx = reshape(nonzero(valid), Shape{-1});
  if (idx.sizes()[0] > 1) {
    // Duplicate slots (docs/KSIDE.md): the last token of a slot wins, so only it is stored:
    // index_copy_ leaves the order of duplicate destinations open (CPU threads race on them).
    // A stable sort by slot keeps token order within a slot; a token is the last of its slot
    // when the next one in that order has another slot (-1 after the end: no valid slot).
    const std::int64_t n = idx.sizes()[0];
    const Tensor order = aten("aten::argsort", "stable", index_select(slots, 0, idx), true, std::int64_t(0), false);
    const Tensor ss = cat({index_select(index_select(slots, 0, idx), 0, order), k.filled(Shape{1}, -1.0, L)}, 0);
    const Tensor last = reshape(nonzero(ne(narrow(ss, 0, 0, n), narrow(ss, 0, 1, n))), Shape{-1});
    idx = index_select(idx, 0, index_select(order, 0, last));
  }
  const std::int64_t K = idx.sizes()[0];
  if (K == 0) return;
  const Tensor tok_pos = index_select(pos, 0, idx), tok_slot = index_select(slots, 0, idx);

  // 1. x, w as float32 (exact)
  const Tensor x = to_dtype(index_select(a.input, 0, idx), F);  // (K, 128)
  const Tensor w = view(to_dtype(a.weight, F), Shape{1, 128});
  // 2-3. sums of squares per group of 4, fma-chained; the xor butterfly (halving, masks 16..1)
  const Tensor g = view(x, Shape{K, 32, 4});
  const Tensor g0 = pick(g, 2, 0), g1 = pick(g, 2, 1), g2 = pick(g, 2, 2), g3 = pick(g, 2, 3);
  const ScalarType in = a.input.scalar_type();
  const bool narrow_in = in == ScalarType::BFloat16 || in == ScalarType::Half;
  const Tensor eps = k.f(double(float(a.eps)));
  Tensor s = mul(g0, g0), t;
  // nonzero |x| in [2^-48, 2^56): squares in [2^-96, 2^112), sums below 2^114; ss * 2^-7 exact
  if (all_in_range({{x, {-48, 56}}}, k)) {
    if (narrow_in) {  // g * g exact (at most 22 significant bits): fma(g, g, s) = fl(g * g + s)
      s = add(mul(g1, g1), s);
      s = add(mul(g2, g2), s);
      s = add(mul(g3, g3), s);
    } else {
      s = fma_fast(g1, g1, veltkamp(g1, k), s, false, k);
      s = fma_fast(g2, g2, veltkamp(g2, k), s, false, k);
      s = fma_fast(g3, g3, veltkamp(g3, k), s, false, k);
    }
    for (std::int64_t m = 16; m >= 1; m /= 2) s = add(narrow(s, 1, 0, m), narrow(s, 1, m, m));
    // 4. t = fma(ss, 2^-7, eps) = fl(ss * 2^-7 + eps): the product is exact (ss zero or >= 2^-96)
    t = add(mul(reshape(s, Shape{K}), k.f(0x1p-7)), eps);
  } else {
    s = fma_exact(g1, g1, s, k);
    s = fma_exact(g2, g2, s, k);
    s = fma_exact(g3, g3, s, k);
    for (std::int64_t m = 16; m >= 1; m /= 2) s = add(narrow(s, 1, 0, m), narrow(s, 1, m, m));
    t = fma_exact(reshape(s, Shape{K}), k.filled(Shape{K}, 0x1p-7, F), k.filled(Shape{K}, double(float(a.eps)), F), k);
  }
  // 5. nf = rsq_mufu(t)
  const Tensor nf = view(rsq_model(t, k), Shape{K, 1});
  // 6. d = (x * nf) * w
  Tensor d = mul(mul(x, nf), w);  // (K, 128), owned
  // 7. RoPE on dims 64..127, adjacent pairs: fma(xr, c, -(xi * s)), fma(xr, s, xi * c)
  const Tensor fr = view(index_select(a.freqs, 0, tok_pos), Shape{K, 32, 2});
  rope_inplace(narrow(d, 1, 64, 64), /*neox=*/false, /*fma_x1_c=*/false, pick(fr, 2, 0), pick(fr, 2, 1),
               /*narrow=*/false, k);
  // 8. Hadamard, strides 1, 2, ..., 64, then * 0x1.6a09e6p-4
  d = hadamard(d);
  const Tensor y = mul(d, k.f(0x1.6a09e6p-4));

  Tensor codes, scale_bytes;  // (K, CB), (K, 4) uint8
  if (!fp4) {  // SGLang's FP8 quantizer (aten_ops.h, as the query side's)
    const auto [c8, scale] = fp8_sglang(y, 448.0, nullptr, k);
    codes = c8;
    scale_bytes = view(view_as_dtype(torch::stable::contiguous(scale), U8), Shape{K, 4});
  } else {  // SGLang's V4 FP4 quantizer (aten_ops.h, as the query side's)
    const Tensor yb = view(y, Shape{K, 4, 32});
    const Tensor e = fp4_sglang_exponent(amax_ignoring_nan(yb, 2, k), k);  // (K, 4, 1), 0..255
    const Tensor inv = float_with_exponent(sub(k.f(254.0), e), k);          // e = 255: -Inf
    codes = to_dtype(fp4_code_pairs(mul(yb, inv), /*ties_to_even=*/false, /*sign_on_zero=*/false, k), U8);
    scale_bytes = to_dtype(view(e, Shape{K, 4}), U8);
  }

  // docs/KSIDE-SPEC.md section 3: flat byte offsets of each token's code and scale bytes
  const Tensor page = shr(tok_slot, k.li(log2_ps)), row = band(tok_slot, k.li(ps - 1));
  const Tensor base = mul(page, k.li(page_bytes));
  const Tensor code0 = iadd(base, mul(row, k.li(CB)));
  const Tensor scale0 = iadd(base, iadd(mul(row, k.li(4)), k.filled(Shape{K}, double(CB * ps), L)));
  auto offsets = [&](const Tensor& start, std::int64_t n) {
    const Tensor ones = k.filled(Shape{K, n}, 1.0, L);
    // 0, 1, ..., n - 1 (exact small integers in float32): a cumulative sum of ones, minus one
    const Tensor ramp = sub(aten("aten::cumsum", "", k.filled(Shape{n}, 1.0, F), std::int64_t(0),
                                 std::optional<ScalarType>(F)),
                            k.f(1.0));
    const Tensor ar = mul(ones, view(to_long(ramp), Shape{1, n}));
    return reshape(iadd(mul(ones, view(start, Shape{K, 1})), ar), Shape{-1});
  };
  const Tensor dst = cat({offsets(code0, CB), offsets(scale0, 4)}, 0);
  const Tensor src = cat({reshape(codes, Shape{-1}), reshape(scale_bytes, Shape{-1})}, 0);
  Tensor flat = view(view_as_dtype(a.kvcache, U8), Shape{-1});
  aten("aten::index_copy_", "", flat, std::int64_t(0), dst, src);
}

}  // namespace torch_binding
}  // namespace indexer_q
