// The public API, part 2: the one validator, for every recipe. It turns an OpArgs into the
// detail::Problem every backend receives, or a Status naming the offending argument.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/problem.h"
#include "common/validate.h"
#include "common/validate_text.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {

// ---------------------------------------------------------------------------------------
// the validator
// ---------------------------------------------------------------------------------------
namespace {

constexpr std::int64_t kHeadDim = 128;
constexpr std::int64_t kFreqsDim = 64;

std::string device_full(const Device& d) {
  if (d.type == DeviceType::kCPU) return "cpu";
  return std::string(device_type_name(d.type)) + ":" + std::to_string(d.index);
}

// The "expected ..." part of a message: a string, or a callable that builds it. Callables run
// only when a check fails, so an accepted call allocates nothing (run() is a hot path).
inline std::string text(const char* s) { return s; }
template <class F, class = decltype(std::declval<const F&>()())>
std::string text(const F& f) {
  return f();
}

// Shape check: exact rank and sizes.
template <class Text>
Status check_shape(const char* arg, const TensorView& t, std::initializer_list<std::int64_t> want,
                   const Text& want_text) {
  if (t.ndim < 0) return detail::bad_arg(arg, "sizes and strides have different lengths");
  if (t.ndim > TensorView::kMaxDims)
    return detail::bad_arg(arg, "ndim " + std::to_string(t.ndim) + " exceeds TensorView::kMaxDims = " +
                        std::to_string(TensorView::kMaxDims));
  bool ok = t.ndim == int(want.size());
  if (ok) {
    int d = 0;
    for (std::int64_t w : want) ok = ok && t.sizes[d++] == w;
  }
  if (!ok) {
    std::ostringstream os;
    os << "expected shape " << text(want_text) << ", got " << detail::shape_text(t);
    return detail::bad_arg(arg, os.str());
  }
  return Status::Ok();
}

// Stride check: dims of size <= 1 may have any stride; the others must match `want`
// (for dim 0 of weight: >= want).
template <class Text>
Status check_strides(const char* arg, const TensorView& t, std::initializer_list<std::int64_t> want,
                     const Text& want_text, bool dim0_at_least = false) {
  int d = 0;
  for (std::int64_t w : want) {
    if (t.sizes[d] > 1) {
      const bool ok = (d == 0 && dim0_at_least) ? t.strides[d] >= w : t.strides[d] == w;
      if (!ok) {
        std::ostringstream os;
        os << "unsupported strides " << detail::strides_text(t) << "; expected " << text(want_text);
        return detail::bad_arg(arg, os.str());
      }
    }
    ++d;
  }
  return Status::Ok();
}

template <class Text>
Status check_dtype(const char* arg, const TensorView& t, std::initializer_list<DType> allowed,
                   const Text& want_text) {
  for (DType d : allowed)
    if (t.dtype == d) return Status::Ok();
  return detail::bad_arg(arg, "expected dtype " + text(want_text) + ", got " + dtype_name(t.dtype));
}

// Byte range [lo, hi) spanned by a view (empty if any size is 0).
struct Span {
  std::uintptr_t lo = 0, hi = 0;
  bool empty() const { return hi <= lo; }
};

// False when the range does not fit in the address space (a negative stride on a dimension of
// size > 1, or sizes and strides whose product overflows): no real tensor has such a view.
bool span_of(const TensorView& t, Span* s) {
  *s = Span{};
  if (t.numel() == 0 || t.data == nullptr) return true;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] <= 1) continue;
    const std::int64_t n = t.sizes[d] - 1, st = t.strides[d];
    if (st < 0 || (st != 0 && n > kMax / st)) return false;
    if (n * st > kMax - last) return false;
    last += n * st;
  }
  const std::uint64_t es = dtype_size(t.dtype);
  const std::uint64_t elems = std::uint64_t(last) + 1;
  if (es == 0 || elems > std::numeric_limits<std::uintptr_t>::max() / es) return false;
  s->lo = reinterpret_cast<std::uintptr_t>(t.data);
  if (elems * es > std::numeric_limits<std::uintptr_t>::max() - s->lo) return false;
  s->hi = s->lo + std::uintptr_t(elems * es);
  return true;
}

bool overlaps(const Span& x, const Span& y) {
  if (x.empty() || y.empty()) return false;
  return x.lo < y.hi && y.lo < x.hi;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// the scalar arguments: one spec per argument, one check (indexer_q.h, check_scalar)
// ---------------------------------------------------------------------------------------
namespace {

enum class ScalarRange {
  kPositive,     // > 0: its float32 value finite and > 0 (0, -0, negative and tiny values refused)
  kNonNegative,  // >= 0 and not -0: its float32 value finite and, for a value > 0, > 0
};

struct ScalarSpec {
  const char* name;
  ScalarRange range;
  const char* expected;  // the message's "expected ..." text
};

// weight_scale and head_scale are factors of every weights_out (w * weight_scale (* head_scale)):
// 0 makes every output 0 (or NaN for an infinite weight), a negative factor flips every sign the
// scorer ranks by; no engine passes either (softmax_scale = d^-0.5, head_scale = H^-0.5), so both
// are refused. eps is the RMS norm's epsilon: 0 is the plain norm, a negative one can make the
// sum negative (a NaN row).
const ScalarSpec& scalar_spec(ScalarArg arg) {
  static const ScalarSpec kWeightScale{"weight_scale", ScalarRange::kPositive, "a finite number > 0"};
  static const ScalarSpec kHeadScale{"head_scale", ScalarRange::kPositive, "a finite number > 0"};
  static const ScalarSpec kEps{"eps", ScalarRange::kNonNegative, "a finite number >= 0"};
  switch (arg) {
    case ScalarArg::kHeadScale: return kHeadScale;
    case ScalarArg::kEps: return kEps;
    case ScalarArg::kWeightScale: break;
  }
  return kWeightScale;
}

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

const char* scalar_arg_name(ScalarArg arg) noexcept {
  switch (arg) {
    case ScalarArg::kWeightScale: return "weight_scale";
    case ScalarArg::kHeadScale: return "head_scale";
    case ScalarArg::kEps: return "eps";
  }
  return "unknown scalar";
}

Status check_scalar(ScalarArg arg, double value, float* out) {
  const ScalarSpec& spec = scalar_spec(arg);
  const auto refuse = [&](const char* why) {
    return detail::bad_arg(spec.name, std::string("expected ") + spec.expected + ", got " + number_text(value) + why);
  };
  // -0 is refused by both ranges: its sign says it came from a negative value
  if (!std::isfinite(value) || std::signbit(value)) return refuse("");
  if (spec.range == ScalarRange::kPositive && value == 0.0) return refuse("");
  const float f = static_cast<float>(value);  // round to nearest, as every caller rounds it
  if (!std::isfinite(f)) return refuse(", which is inf in float32");
  if (f == 0.0f && value != 0.0) return refuse(", which rounds to 0 in float32");
  if (out) *out = f;
  return Status::Ok();
}

namespace detail {

Status validate_op(const OpArgs& args, const Options& options, Problem* out) {
  const TensorView& q_input = args.q_input;
  const TensorView& q_out = args.q_out;
  const TensorView& q_scale = args.q_scale;
  const TensorView& weight = args.weight;
  const TensorView& weights_out = args.weights_out;
  const TensorView& freqs = args.freqs;
  const TensorView& positions = args.positions;

  // --- the recipe fixes the output tensors ---
  const int rid = int(args.recipe);
  const bool known = int(recipe(args.recipe).id) == rid;  // recipe() maps unknown ids to id 0
  if (!known) {
    std::string names;
    for (RecipeId r : all_recipes()) names += (names.empty() ? "" : ", ") + std::string(recipe_name(r));
    return detail::bad_arg("recipe", "unknown recipe id " + std::to_string(rid) + "; expected one of " + names);
  }
  // --- the scalars (each against its spec; see check_scalar) ---
  for (const auto& [arg, v] : {std::pair<ScalarArg, float>{ScalarArg::kWeightScale, args.weight_scale},
                                std::pair<ScalarArg, float>{ScalarArg::kHeadScale, args.head_scale}}) {
    const Status sc = check_scalar(arg, double(v));
    if (!sc.ok()) return sc;
  }
  const Recipe& rec = recipe(args.recipe);
  const bool fp4 = rec.format == OutFormat::kE2M1;
  const bool has_rope = recipe_has_rope(rec), has_weights = recipe_has_weights(rec);
  const char* out_name = fp4 ? "q_fp4" : "q_fp8";
  // A recipe without RoPE (or without weights) takes empty views for those tensors: nothing is
  // read or written through them.
  const auto empty_view = [](const TensorView& t) { return t.ndim == 0 && t.data == nullptr; };
  if (!has_rope) {
    if (!empty_view(freqs))
      return detail::bad_arg("freqs", std::string("recipe ") + rec.name +
                                          " has no RoPE: expected an empty view (ndim 0, no data)");
    if (!empty_view(positions))
      return detail::bad_arg("positions", std::string("recipe ") + rec.name +
                                              " has no RoPE: expected an empty view (ndim 0, no data)");
  }
  if (!has_weights) {
    if (!empty_view(weight))
      return detail::bad_arg("weight", std::string("recipe ") + rec.name +
                                           " has no weights: expected an empty view (ndim 0, no data)");
    if (!empty_view(weights_out))
      return detail::bad_arg("weights_out", std::string("recipe ") + rec.name +
                                                " has no weights: expected an empty view (ndim 0, no data)");
  }

  // --- q_input fixes B, H and the dtype ---
  if (q_input.ndim != 3)
    return detail::bad_arg("q_input", "expected 3 dims (B, H, 128), got " + std::to_string(q_input.ndim));
  const std::int64_t B = q_input.sizes[0];
  const std::int64_t H = q_input.sizes[1];
  if (B < 0) return detail::bad_arg("q_input", "batch size B must be >= 0, got " + std::to_string(B));
  if (H <= 0) return detail::bad_arg("q_input", "head count H must be >= 1, got " + std::to_string(H));
  if (q_input.sizes[2] != kHeadDim)
    return detail::bad_arg("q_input", "head dim must be 128, got " + std::to_string(q_input.sizes[2]) +
                              " (shape " + detail::shape_text(q_input) + ")");
  // (H alone too: with B = 0 the product is 0, but H * 128 is still formed below.)
  if (H > std::numeric_limits<std::int64_t>::max() / kHeadDim ||
      B > std::numeric_limits<std::int64_t>::max() / kHeadDim / H)
    return detail::bad_arg("q_input", "B * H * 128 elements overflow int64 (shape " + detail::shape_text(q_input) + ")");
  Status s = check_dtype("q_input", q_input, {DType::kBFloat16, DType::kFloat16, DType::kFloat32},
                         "bf16, fp16 or fp32");
  if (!s.ok()) return s;
  s = check_strides("q_input", q_input, {H * kHeadDim, kHeadDim, 1}, "contiguous rows (H*128, 128, 1)");
  if (!s.ok()) return s;

  // --- q_out (q_fp8 / q_fp4) and q_scale ---
  const std::int64_t out_dim = fp4 ? kHeadDim / 2 : kHeadDim;
  const auto bhd = [&] {
    return "(" + std::to_string(B) + ", " + std::to_string(H) + ", " + std::to_string(out_dim) + ") = (B, H, " +
           std::to_string(out_dim) + ")";
  };
  s = check_shape(out_name, q_out, {B, H, out_dim}, bhd);
  if (!s.ok()) return s;
  if (fp4) {
    s = check_dtype(out_name, q_out, {DType::kUInt8, DType::kInt8},
                    "uint8 or int8 (two e2m1 codes per byte)");
  } else if (rec.format == OutFormat::kE4M3FNUZ) {
    s = check_dtype(out_name, q_out, {DType::kFloat8E4M3FNUZ, DType::kUInt8, DType::kInt8},
                    [&] { return std::string("fp8_e4m3fnuz (or uint8 / int8 raw codes) for recipe ") + rec.name; });
  } else {
    s = check_dtype(out_name, q_out, {DType::kFloat8E4M3, DType::kUInt8, DType::kInt8},
                    [&] { return std::string("fp8_e4m3fn (or uint8 / int8 raw codes) for recipe ") + rec.name; });
  }
  if (!s.ok()) return s;
  const auto contig = [&] {
    return "contiguous (H*" + std::to_string(out_dim) + ", " + std::to_string(out_dim) + ", 1)";
  };
  s = check_strides(out_name, q_out, {H * out_dim, out_dim, 1}, contig);
  if (!s.ok()) return s;
  const auto bh_sf = [&] { return "(" + std::to_string(B) + ", " + std::to_string(H) + ") = (B, H)"; };
  if (fp4) {
    s = check_shape("q_sf", q_scale, {B, H}, bh_sf);
    if (!s.ok()) return s;
    s = check_dtype("q_sf", q_scale, {DType::kInt32}, "int32 (four UE8M0 bytes per row)");
    if (!s.ok()) return s;
    s = check_strides("q_sf", q_scale, {H, 1}, "contiguous (H, 1)");
    if (!s.ok()) return s;
  } else if (rec.scale_out) {
    // The FP8 row scale as an output: (B, H, 1) as SGLang allocates it, or (B, H).
    const auto bh1 = [&] {
      return "(" + std::to_string(B) + ", " + std::to_string(H) + ", 1) = (B, H, 1) or (" + std::to_string(B) +
             ", " + std::to_string(H) + ") = (B, H)";
    };
    if (q_scale.ndim == 2) {
      s = check_shape("q_scale", q_scale, {B, H}, bh1);
      if (!s.ok()) return s;
      s = check_strides("q_scale", q_scale, {H, 1}, "contiguous (H, 1)");
    } else {
      s = check_shape("q_scale", q_scale, {B, H, 1}, bh1);
      if (!s.ok()) return s;
      s = check_strides("q_scale", q_scale, {H, 1, 1}, "contiguous (H, 1, 1)");
    }
    if (!s.ok()) return s;
    s = check_dtype("q_scale", q_scale, {DType::kFloat32}, "fp32 (the row scale of recipe with scale_out)");
    if (!s.ok()) return s;
  } else if (q_scale.ndim != 0 || q_scale.data != nullptr) {
    return detail::bad_arg("q_sf", std::string("recipe ") + rec.name +
                           " has no block scales: expected an empty view (ndim 0, no data)");
  }

  // --- weight ---
  if (has_weights) {
  const auto bh = [&] { return "(" + std::to_string(B) + ", " + std::to_string(H) + ") = (B, H)"; };
  s = check_shape("weight", weight, {B, H}, bh);
  if (!s.ok()) return s;
  // Any float dtype, independently of q_input's: every bf16 / fp16 value is exactly an fp32 one.
  s = check_dtype("weight", weight, {DType::kBFloat16, DType::kFloat16, DType::kFloat32}, "bf16, fp16 or fp32");
  if (!s.ok()) return s;
  s = check_strides("weight", weight, {H, 1}, "stride(1) = 1 and stride(0) >= H", true);
  if (!s.ok()) return s;

  // --- weights_out: (B, H, 1) as SGLang allocates it, or (B, H) as vLLM does ---
  const auto bh1 = [&] {
    return "(" + std::to_string(B) + ", " + std::to_string(H) + ", 1) = (B, H, 1) or (" + std::to_string(B) + ", " +
           std::to_string(H) + ") = (B, H)";
  };
  if (weights_out.ndim == 2) {
    s = check_shape("weights_out", weights_out, {B, H}, bh1);
    if (!s.ok()) return s;
    s = check_strides("weights_out", weights_out, {H, 1}, "contiguous (H, 1)");
  } else {
    s = check_shape("weights_out", weights_out, {B, H, 1}, bh1);
    if (!s.ok()) return s;
    s = check_strides("weights_out", weights_out, {H, 1, 1}, "contiguous (H, 1, 1)");
  }
  if (!s.ok()) return s;
  s = check_dtype("weights_out", weights_out, {DType::kFloat32}, "fp32");
  if (!s.ok()) return s;
  }  // has_weights

  // --- freqs ---
  std::int64_t max_pos = 0;
  if (has_rope) {
  if (freqs.ndim != 2 || freqs.sizes[1] != kFreqsDim || freqs.sizes[0] < 0)
    return detail::bad_arg("freqs", std::string("expected shape (max_pos, 64) (") +
                            (rec.freqs_layout == FreqsLayout::kInterleaved ? "(cos, sin) per pair"
                                                                           : "[cos x32 | sin x32]") +
                            " for recipe " + rec.name + "), got " + detail::shape_text(freqs));
  s = check_dtype("freqs", freqs, {DType::kFloat32}, "fp32");
  if (!s.ok()) return s;
  s = check_strides("freqs", freqs, {kFreqsDim, 1}, "contiguous (64, 1)");
  if (!s.ok()) return s;
  max_pos = freqs.sizes[0];
  if (max_pos > std::numeric_limits<std::int64_t>::max() / kFreqsDim)
    return detail::bad_arg("freqs", "max_pos * 64 elements overflow int64 (shape " + detail::shape_text(freqs) + ")");

  // --- positions ---
  const auto b1 = [&] { return "(" + std::to_string(B) + ",) = (B,)"; };
  s = check_shape("positions", positions, {B}, b1);
  if (!s.ok()) return s;
  s = check_dtype("positions", positions, {DType::kInt32, DType::kInt64}, "int32 or int64");
  if (!s.ok()) return s;
  s = check_strides("positions", positions, {1}, "contiguous (1,)");
  if (!s.ok()) return s;
  }  // has_rope

  // --- devices ---
  // The tensors of this recipe, in argument order (q_sf takes part only in FP4 recipes).
  struct Named {
    const char* name;
    const TensorView* t;
    bool output;
  };
  struct NamedList {  // at most 8 entries; no heap
    Named v[8];
    int n = 0;
    void push_back(const Named& x) { v[n++] = x; }
    const Named* begin() const { return v; }
    const Named* end() const { return v + n; }
  } all;
  all.push_back({"q_input", &q_input, false});
  all.push_back({out_name, &q_out, true});
  if (fp4) all.push_back({"q_sf", &q_scale, true});
  if (rec.scale_out) all.push_back({"q_scale", &q_scale, true});
  if (has_weights) {
    all.push_back({"weight", &weight, false});
    all.push_back({"weights_out", &weights_out, true});
  }
  if (has_rope) {
    all.push_back({"freqs", &freqs, false});
    all.push_back({"positions", &positions, false});
  }
  for (const auto& a : all) {
    if (a.t->device != q_input.device)
      return detail::bad_arg(a.name, std::string("expected the device of q_input (") + device_full(q_input.device) +
                             "), got " + device_full(a.t->device));
  }
  const Device dev = q_input.device;

  // --- options: backend (vs the tensors' device), ISA, threads (the list: backends.inc) ---
  Backend backend;
  s = detail::resolve_backend(options, dev, &backend);
  if (!s.ok()) return s;

  if (B == 0) {
    if (out) {
      *out = Problem{};
      out->recipe = args.recipe;
      out->H = H;
    }
    return Status::Ok();  // valid, nothing to do, nothing to read
  }

  // --- null data (B > 0 from here) ---
  for (const auto& a : all) {
    if (a.t->data == nullptr && a.t->numel() > 0)
      return detail::bad_arg(a.name, "data pointer is null while the tensor has " + std::to_string(a.t->numel()) +
                             " elements");
  }
  // --- every data pointer aligned to its element size (the kernels read typed elements) ---
  for (const auto& a : all) {
    s = detail::check_element_aligned(a.name, *a.t);
    if (!s.ok()) return s;
  }
  if (has_rope && max_pos == 0) return detail::bad_arg("freqs", "has 0 rows (max_pos = 0), so no position is valid");

  // --- every view within the address space; outputs must not overlap inputs or each other ---
  Span spans[8];
  for (int i = 0; i < all.n; ++i)
    if (!span_of(*all.v[i].t, &spans[i]))
      return detail::bad_arg(all.v[i].name, "sizes " + detail::shape_text(*all.v[i].t) + " and strides " + detail::strides_text(*all.v[i].t) +
                                    " span more bytes than the address space holds");
  for (int i = 0; i < all.n; ++i) {
    if (!all.v[i].output) continue;
    for (int j = 0; j < all.n; ++j) {
      if (j == i || all.v[j].t->device != all.v[i].t->device) continue;
      if (overlaps(spans[i], spans[j]))
        return detail::bad_arg(all.v[i].name, std::string("output memory overlaps ") + all.v[j].name);
    }
  }

  // --- positions in range, wherever the host can read them ---
  if (has_rope && dev.type == DeviceType::kCPU) {
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t p = positions.dtype == DType::kInt32
                                 ? std::int64_t(static_cast<const std::int32_t*>(positions.data)[b])
                                 : static_cast<const std::int64_t*>(positions.data)[b];
      if (p < 0 || p >= max_pos)
        return detail::bad_arg("positions", "positions[" + std::to_string(b) + "] = " + std::to_string(p) +
                                    " is outside [0, max_pos) = [0, " + std::to_string(max_pos) + ")");
    }
  }

  if (out) {
    Problem& p = *out;
    p.recipe = args.recipe;
    p.B = B;
    p.H = H;
    p.dtype = q_input.dtype;
    p.q_input = q_input.data;
    p.q_out = static_cast<std::uint8_t*>(q_out.data);
    p.q_sf = recipe_writes_q_scale(rec) ? static_cast<std::uint8_t*>(q_scale.data) : nullptr;
    p.weight_scale = args.weight_scale;
    p.head_scale = args.head_scale;
    p.weight = weight.data;
    p.weight_dtype = weight.dtype;
    p.weight_stride_b = B > 1 ? weight.strides[0] : H;
    p.weights_out = static_cast<float*>(weights_out.data);
    p.freqs = static_cast<const float*>(freqs.data);
    p.max_pos = max_pos;
    p.positions = positions.data;
    p.pos_dtype = positions.dtype;
    p.device = dev;
  }
  return Status::Ok();
}

}  // namespace detail

Status validate(const OpArgs& args, const Options& options) {
  return detail::validate_op(args, options, nullptr);
}

Status validate(const TensorView& q_input, const TensorView& q_fp8, const TensorView& weight,
                const TensorView& weights_out, float weight_scale, const TensorView& freqs,
                const TensorView& positions, const Options& options) {
  return validate(detail::v4_fp8_args(q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions),
                  options);
}

}  // namespace indexer_q
