// The public API, part 2: the validator core (src/common/op_args.h) and the query side's op,
// described once as a table of its arguments. validate_op turns an OpArgs into the
// detail::Problem every backend receives, or a Status naming the offending argument; the key
// side's table and entry point are src/validate_kside.cpp.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "common/op_args.h"
#include "common/problem.h"
#include "common/validate.h"
#include "common/validate_text.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {

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

// ---------------------------------------------------------------------------------------
// the core: one checker for every op's table (src/common/op_args.h)
// ---------------------------------------------------------------------------------------
namespace detail {
namespace {

std::string device_full(const Device& d) {
  if (d.type == DeviceType::kCPU) return "cpu";
  return std::string(device_type_name(d.type)) + ":" + std::to_string(d.index);
}

// Everything below builds text, and runs only when a check fails.
struct Texts {
  const OpSpec& op;
  const OpCall& c;

  std::string sym_value(int s) const { return c.bound[s] ? std::to_string(c.sym[s]) : op.syms[s].name; }

  // "{name}" -> a string fact, a symbol's value (its name while unbound) or `guard`.
  std::string expand(const char* t, const char* guard = nullptr) const {
    std::string out;
    if (t == nullptr) return out;
    for (const char* p = t; *p;) {
      const char* close = *p == '{' ? std::strchr(p, '}') : nullptr;
      if (close == nullptr) {
        out += *p++;
        continue;
      }
      const std::string key(p + 1, close);
      p = close + 1;
      if (key == "guard" && guard) {
        out += guard;
        continue;
      }
      bool found = false;
      for (int i = 0; i < c.nstrs && !found; ++i)
        if (key == c.str_names[i]) out += c.str_values[i], found = true;
      for (int s = 0; s < op.nsyms && !found; ++s)
        if (key == op.syms[s].name) out += sym_value(s), found = true;
      if (!found) out += "{" + key + "}";
    }
    return out;
  }

  static std::string tuple(const std::string* parts, int n) {
    std::string s = "(";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + parts[i];
    return s + (n == 1 ? ",)" : ")");
  }
  // "(7, 8, 128) = (B, H, 128)" (a bound symbol by value), or "(max_pos, 64)" (none bound).
  std::string form(const ShapeSpec& f) const {
    std::string values[TensorView::kMaxDims], symbolic[TensorView::kMaxDims];
    bool any_bound = false;
    for (int d = 0; d < f.rank; ++d) {
      const Dim& x = f.d[d];
      if (x.sym < 0) {
        values[d] = symbolic[d] = std::to_string(x.lit);
        continue;
      }
      const SymSpec& s = op.syms[x.sym];
      any_bound = any_bound || c.bound[x.sym];
      values[d] = sym_value(x.sym);
      symbolic[d] = s.show ? expand(s.show) : s.name;
    }
    const std::string sym_text = tuple(symbolic, f.rank);
    return any_bound ? tuple(values, f.rank) + " = " + sym_text : sym_text;
  }
  std::string shape(const ArgSpec& a) const {
    return form(a.form) + (a.alt.rank >= 0 ? " or " + form(a.alt) : "") + expand(a.shape_note);
  }
};

// The form a view is checked against: the alternative one when its rank is the view's.
const ShapeSpec& form_of(const ArgSpec& a, const TensorView& t) {
  return a.alt.rank >= 0 && t.ndim == a.alt.rank ? a.alt : a.form;
}

bool dim_ok(const OpCall& c, const OpSpec& op, const Dim& x, std::int64_t v) {
  if (x.sym < 0) return v == x.lit;
  return c.bound[x.sym] ? v == c.sym[x.sym] : v >= op.syms[x.sym].min;
}

// A failed check: its Status in *err (the checks return a bool, so an accepted call builds no
// Status on its way).
bool refused(Status* err, Status s) {
  *err = std::move(s);
  return false;
}

// Binds the view's sizes to the form's unbound symbols, then every derived symbol it can.
void bind_form(const OpSpec& op, OpCall* c, const ShapeSpec& f, const TensorView& t, bool derive = false) {
  for (int d = 0; d < f.rank; ++d)
    if (f.d[d].sym >= 0 && !c->bound[f.d[d].sym]) c->bind(f.d[d].sym, t.sizes[d]), derive = true;
  for (int s = 0; derive && s < op.nsyms; ++s) {
    const SymSpec& y = op.syms[s];
    if (y.factor_a >= 0 && !c->bound[s] && c->bound[y.factor_a] && c->bound[y.factor_b]) {
      // A product past int64 saturates (no signed overflow): the view that bound the factors is
      // then refused by its element-count check, and no real view has a dimension that large.
      std::int64_t v;
      if (__builtin_mul_overflow(c->sym[y.factor_a], c->sym[y.factor_b], &v)) v = std::numeric_limits<std::int64_t>::max();
      c->bind(s, v);
    }
  }
}

bool check_shape(const OpSpec& op, OpCall* c, const ArgSpec& a, const TensorView& t, Status* err) {
  const Texts tx{op, *c};
  if (a.shape_msg == ShapeMsg::kRankFirst) {
    if (t.ndim < 0) return refused(err, bad_arg(a.name, "sizes and strides have different lengths"));
    if (t.ndim > TensorView::kMaxDims)
      return refused(err, bad_arg(a.name, "ndim " + std::to_string(t.ndim) + " exceeds TensorView::kMaxDims = " +
                                 std::to_string(TensorView::kMaxDims)));
  }
  const ShapeSpec& f = form_of(a, t);
  if (a.shape_msg == ShapeMsg::kPerDim) {
    if (t.ndim != f.rank)
      return refused(err, bad_arg(a.name, "expected " + std::to_string(f.rank) + " dims " + tx.form(f) + ", got " +
                                 std::to_string(t.ndim)));
    for (int d = 0; d < f.rank; ++d) {
      const Dim& x = f.d[d];
      const std::int64_t v = t.sizes[d];
      if (dim_ok(*c, op, x, v)) continue;
      if (x.sym >= 0 && !c->bound[x.sym])
        return refused(err, bad_arg(a.name, std::string(op.syms[x.sym].what) + " must be >= " +
                                   std::to_string(op.syms[x.sym].min) + ", got " + std::to_string(v)));
      const std::string what = x.sym >= 0 ? op.syms[x.sym].what : x.what;
      const std::int64_t want = x.sym >= 0 ? c->sym[x.sym] : x.lit;
      return refused(err, bad_arg(a.name, what + " must be " + std::to_string(want) + ", got " + std::to_string(v) + " (shape " +
                                 shape_text(t) + ")"));
    }
  } else {
    bool ok = t.ndim == f.rank;
    for (int d = 0; ok && d < f.rank; ++d) ok = dim_ok(*c, op, f.d[d], t.sizes[d]);
    if (!ok) return refused(err, bad_arg(a.name, "expected shape " + tx.shape(a) + ", got " + shape_text(t)));
  }
  bind_form(op, c, f, t);
  return true;
}

// The element count (folded from the last dimension, each partial product within int64).
bool count_fits(const TensorView& t) {
  std::int64_t n = 1;
  for (int d = t.ndim - 1; d >= 0; --d)
    if (__builtin_mul_overflow(n, t.sizes[d], &n)) return false;
  return true;
}

bool check_dtype(const OpSpec& op, const OpCall& c, const ArgSpec& a, const TensorView& t, Status* err) {
  if (a.dtype_of >= 0) {
    const TensorView& o = *c.views[a.dtype_of];
    if (t.dtype == o.dtype) return true;
    const char* oname = "?";
    for (int i = 0; i < op.nargs; ++i)
      if (op.args[i].kind == ArgKind::kTensor && op.args[i].slot == a.dtype_of) oname = op.args[i].name;
    return refused(err, bad_arg(a.name, std::string("expected the dtype of ") + oname + " (" + dtype_name(o.dtype) + "), got " +
                               dtype_name(t.dtype)));
  }
  for (int i = 0; i < a.ndtypes; ++i)
    if (t.dtype == a.dtypes[i]) return true;
  return refused(err, bad_arg(a.name, "expected dtype " + Texts{op, c}.expand(a.dtype_text) + ", got " + dtype_name(t.dtype)));
}

bool check_strides(const OpSpec& op, const OpCall& c, const ArgSpec& a, const TensorView& t, Status* err) {
  const ShapeSpec& f = form_of(a, t);
  std::int64_t want = 1;  // the contiguous stride of dim d (the sizes passed the shape check)
  bool ok = true;
  for (int d = f.rank - 1; d >= 0 && ok; --d) {
    if (t.sizes[d] > 1)
      ok = (d == 0 && a.strides == StrideRule::kRowsAtLeast) ? t.strides[d] >= want : t.strides[d] == want;
    if (d > 0 && __builtin_mul_overflow(want, t.sizes[d], &want)) want = std::numeric_limits<std::int64_t>::max();
  }
  if (ok) return true;
  return refused(err, bad_arg(a.name, "unsupported strides " + strides_text(t) + "; expected " +
                                          Texts{op, c}.expand(form_of(a, t).strides_text)));
}

// Byte range [lo, hi) spanned by a view (empty if it has no element or no data).
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

bool is_empty_view(const TensorView& t) { return t.ndim == 0 && t.data == nullptr; }

std::int64_t index_value(const void* data, bool i32, std::int64_t r) {
  return i32 ? std::int64_t(static_cast<const std::int32_t*>(data)[r]) : static_cast<const std::int64_t*>(data)[r];
}
// The first row whose value is outside [0, bound), or n.
template <class T>
std::int64_t first_outside(const T* v, std::int64_t n, std::int64_t bound) {
  for (std::int64_t r = 0; r < n; ++r)
    if (std::int64_t(v[r]) < 0 || std::int64_t(v[r]) >= bound) return r;
  return n;
}
// The same for x where the guard g is >= 0 (a negative guard skips its row, x unread), and the
// guard itself in [0, gbound): the first row where either fails, or n.
template <class G, class X>
std::int64_t first_outside_guarded(const G* g, const X* x, std::int64_t n, std::int64_t gbound, std::int64_t xbound) {
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t gv = g[r];
    if (gv < 0) continue;
    if (gv >= gbound || std::int64_t(x[r]) < 0 || std::int64_t(x[r]) >= xbound) return r;
  }
  return n;
}

}  // namespace

Status check_op_args(const OpSpec& op, const Options& options, OpCall* c) {
  // --- which tensors the recipe takes ---
  for (int i = 0; i < op.nargs; ++i) {
    const ArgSpec& a = op.args[i];
    if (a.kind == ArgKind::kTensor && (a.when & c->features) == a.when) c->taken[a.slot] = true;
  }
  // The tensors taken, in table order: at most one entry per slot.
  const ArgSpec* all[kOpMaxViews];
  int n = 0;
  bool listed[kOpMaxViews] = {};

  // --- 1. every argument in table order ---
  for (int i = 0; i < op.nargs; ++i) {
    const ArgSpec& a = op.args[i];
    if (a.kind == ArgKind::kScalar) {
      const Status s = check_scalar(a.scalar, c->scalars[a.slot]);
      if (!s.ok()) return s;
      continue;
    }
    if (a.kind == ArgKind::kIntScalar) {
      const std::int64_t v = c->ints[a.slot];
      if (v < a.int_min || v > a.int_max || (a.int_pow2 && (v & (v - 1)) != 0))
        return bad_arg(a.name, std::string("expected ") + a.int_text + ", got " + std::to_string(v));
      if (a.binds >= 0) {
        c->bind(a.binds, v);
        bind_form(op, c, ShapeSpec{}, TensorView{}, true);  // the symbols derived from it
      }
      continue;
    }
    const TensorView& t = *c->views[a.slot];
    if ((a.when & c->features) != a.when) {  // not taken by this recipe: the empty view
      if (a.absent && !c->taken[a.slot] && !is_empty_view(t))
        return bad_arg(a.name, "recipe " + Texts{op, *c}.expand("{recipe}") + " " + a.absent +
                                   ": expected an empty view (ndim 0, no data)");
      continue;
    }
    Status err;
    if (!check_shape(op, c, a, t, &err)) return err;
    if (a.overflow && !count_fits(t))
      return bad_arg(a.name, std::string(a.overflow) + " int64 (shape " + shape_text(t) + ")");
    if (!check_dtype(op, *c, a, t, &err) || !check_strides(op, *c, a, t, &err)) return err;
    if (!listed[a.slot]) all[n++] = &a, listed[a.slot] = true;
  }
  if (n == 0) return Status::Internal("indexer_q: an op without tensors");

  // --- 2. devices, then the options against them (the list: backends.inc) ---
  const TensorView& first = *c->views[all[0]->slot];
  for (int i = 0; i < n; ++i) {
    const TensorView& t = *c->views[all[i]->slot];
    if (t.device != first.device)
      return bad_arg(all[i]->name, std::string("expected the device of ") + all[0]->name + " (" +
                                       device_full(first.device) + "), got " + device_full(t.device));
  }
  c->device = first.device;
  Backend backend;
  {
    Status s = resolve_backend(options, c->device, &backend);
    if (!s.ok()) return s;
  }

  // --- 3. nothing to do: nothing to read ---
  if (c->sym[op.work] == 0) {
    c->no_work = true;
    return Status::Ok();
  }

  // --- 4. data pointers, extents, overlaps ---
  for (int i = 0; i < n; ++i) {
    const TensorView& t = *c->views[all[i]->slot];
    if (t.data == nullptr && t.numel() > 0)
      return bad_arg(all[i]->name, "data pointer is null while the tensor has " + std::to_string(t.numel()) +
                                       " elements");
  }
  for (int i = 0; i < n; ++i)
    if (!element_aligned(*c->views[all[i]->slot])) return check_element_aligned(all[i]->name, *c->views[all[i]->slot]);
  for (int i = 0; i < n; ++i)
    if (all[i]->rows_needed && c->views[all[i]->slot]->numel() == 0) return bad_arg(all[i]->name, all[i]->rows_needed);
  Span spans[kOpMaxViews];
  for (int i = 0; i < n; ++i) {
    const TensorView& t = *c->views[all[i]->slot];
    if (!span_of(t, &spans[i]))
      return bad_arg(all[i]->name, "sizes " + shape_text(t) + " and strides " + strides_text(t) +
                                       " span more bytes than the address space holds");
  }
  for (int i = 0; i < n; ++i) {
    if (all[i]->role != Role::kOut) continue;
    for (int j = 0; j < n; ++j) {
      if (j == i || c->views[all[j]->slot]->device != c->views[all[i]->slot]->device) continue;
      if (overlaps(spans[i], spans[j]))
        return bad_arg(all[i]->name, std::string("output memory overlaps ") + all[j]->name);
    }
  }

  // --- 5. index values, wherever the host can read them (a guard first: a negative one skips) ---
  if (c->device.type != DeviceType::kCPU) return Status::Ok();
  struct Index {
    const ArgSpec* a;
    const void* data;
    bool i32;
    std::int64_t bound;
  } idx[kOpMaxViews];
  int ni = 0, guard = -1;
  for (int i = 0; i < n; ++i) {
    const IndexSpec& x = all[i]->index;
    if (x.bound < 0) continue;
    const TensorView& t = *c->views[all[i]->slot];
    if (x.skip_negative) guard = ni;
    idx[ni++] = Index{all[i], t.data, t.dtype == DType::kInt32, c->sym[x.bound]};
  }
  if (ni == 0) return Status::Ok();
  const auto refuse = [&](const Index& x, std::int64_t r, std::int64_t v, std::int64_t g) {
    const char* name = x.a->name;
    return bad_arg(name, std::string(name) + "[" + std::to_string(r) + "] = " + std::to_string(v) + " is outside [0, " +
                             x.a->index.bound_text + ") = [0, " + std::to_string(x.bound) + ")" +
                             Texts{op, *c}.expand(x.a->index.note, std::to_string(g).c_str()));
  };
  const std::int64_t rows = c->views[idx[0].a->slot]->sizes[0];
  // The common forms in tight loops (the call's hot path): one index, or a guard and one index.
  if (ni == 1 && guard < 0) {
    const Index& x = idx[0];
    const std::int64_t r = x.i32 ? first_outside(static_cast<const std::int32_t*>(x.data), rows, x.bound)
                                 : first_outside(static_cast<const std::int64_t*>(x.data), rows, x.bound);
    return r < rows ? refuse(x, r, index_value(x.data, x.i32, r), 0) : Status::Ok();
  }
  if (ni == 2 && guard >= 0) {
    const Index &g = idx[guard], &x = idx[1 - guard];
    std::int64_t r;
    if (g.i32) {
      const auto* gp = static_cast<const std::int32_t*>(g.data);
      r = x.i32 ? first_outside_guarded(gp, static_cast<const std::int32_t*>(x.data), rows, g.bound, x.bound)
                : first_outside_guarded(gp, static_cast<const std::int64_t*>(x.data), rows, g.bound, x.bound);
    } else {
      const auto* gp = static_cast<const std::int64_t*>(g.data);
      r = x.i32 ? first_outside_guarded(gp, static_cast<const std::int32_t*>(x.data), rows, g.bound, x.bound)
                : first_outside_guarded(gp, static_cast<const std::int64_t*>(x.data), rows, g.bound, x.bound);
    }
    if (r >= rows) return Status::Ok();
    const std::int64_t gv = index_value(g.data, g.i32, r);
    return gv >= g.bound ? refuse(g, r, gv, gv) : refuse(x, r, index_value(x.data, x.i32, r), gv);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t g = 0;
    if (guard >= 0) {
      g = index_value(idx[guard].data, idx[guard].i32, r);
      if (g < 0) continue;  // the row is skipped: its other indices unread
      if (g >= idx[guard].bound) return refuse(idx[guard], r, g, g);
    }
    for (int k = 0; k < ni; ++k) {
      if (k == guard) continue;
      const std::int64_t v = index_value(idx[k].data, idx[k].i32, r);
      if (v < 0 || v >= idx[k].bound) return refuse(idx[k], r, v, g);
    }
  }
  return Status::Ok();
}

}  // namespace detail

// ---------------------------------------------------------------------------------------
// the query side's op: OpArgs (indexer_q.h), every recipe of recipes.inc
// ---------------------------------------------------------------------------------------
namespace detail {
namespace {

// The sizes its shapes are written in (D: the codes per row, 128 or 64, fixed by the recipe).
enum QSym { kB, kH, kD, kMaxPos, kQSyms };
constexpr SymSpec kQuerySyms[kQSyms] = {
    sym("B", 0, "batch size B"), sym("H", 1, "head count H"), sym("D", 0, nullptr, "{D}"), sym("max_pos")};

// The views of a call (OpArgs fields) and its scalars.
enum QSlot { kQInput, kQOut, kQScale, kWeight, kWeightsOut, kFreqs, kPositions, kQSlots };
enum QScalar { kWeightScale, kHeadScale };

// The recipe's features that decide which tensors it takes (and their dtypes).
enum QFeature : unsigned {
  kFn = 1u << 0,        // E4M3FN codes
  kFnuz = 1u << 1,      // E4M3FNUZ codes
  kFp4 = 1u << 2,       // E2M1 pairs with UE8M0 block scales (q_sf)
  kScaleOut = 1u << 3,  // FP8 with its row scale returned (q_scale)
  kWeights = 1u << 4,   // weight -> weights_out
  kRope = 1u << 5,      // freqs, positions
};

constexpr DType kBF16 = DType::kBFloat16, kF16 = DType::kFloat16, kF32 = DType::kFloat32, kI32 = DType::kInt32,
                kI64 = DType::kInt64, kU8 = DType::kUInt8, kI8 = DType::kInt8;
constexpr ShapeMsg kRankFirst = ShapeMsg::kRankFirst;

constexpr ArgSpec kQueryArgs[] = {
    scalar(ScalarArg::kWeightScale, kWeightScale),
    scalar(ScalarArg::kHeadScale, kHeadScale),
    tensor("q_input", kQInput)
        .of(shape("contiguous rows (H*128, 128, 1)", S(kB), S(kH), L(128, "head dim")), ShapeMsg::kPerDim)
        .counted("B * H * 128 elements overflow")
        .dtype("bf16, fp16 or fp32", kBF16, kF16, kF32),
    tensor("q_fp8", kQOut).out().is(kFn, nullptr)
        .of(shape("contiguous (H*{D}, {D}, 1)", S(kB), S(kH), S(kD)), kRankFirst)
        .dtype("fp8_e4m3fn (or uint8 / int8 raw codes) for recipe {recipe}", DType::kFloat8E4M3, kU8, kI8),
    tensor("q_fp8", kQOut).out().is(kFnuz, nullptr)
        .of(shape("contiguous (H*{D}, {D}, 1)", S(kB), S(kH), S(kD)), kRankFirst)
        .dtype("fp8_e4m3fnuz (or uint8 / int8 raw codes) for recipe {recipe}", DType::kFloat8E4M3FNUZ, kU8, kI8),
    tensor("q_fp4", kQOut).out().is(kFp4, nullptr)
        .of(shape("contiguous (H*{D}, {D}, 1)", S(kB), S(kH), S(kD)), kRankFirst)
        .dtype("uint8 or int8 (two e2m1 codes per byte)", kU8, kI8),
    tensor("q_sf", kQScale).out().is(kFp4, "has no block scales")
        .of(shape("contiguous (H, 1)", S(kB), S(kH)), kRankFirst)
        .dtype("int32 (four UE8M0 bytes per row)", kI32),
    // The FP8 row scale as an output: (B, H, 1) as SGLang allocates it, or (B, H).
    tensor("q_scale", kQScale).out().is(kScaleOut, nullptr)
        .of(shape("contiguous (H, 1, 1)", S(kB), S(kH), L(1)), kRankFirst)
        .or_(shape("contiguous (H, 1)", S(kB), S(kH)))
        .dtype("fp32 (the row scale of recipe with scale_out)", kF32),
    // Any float dtype, independently of q_input's: every bf16 / fp16 value is exactly an fp32 one.
    tensor("weight", kWeight).is(kWeights, "has no weights")
        .of(shape("stride(1) = 1 and stride(0) >= H", S(kB), S(kH)), kRankFirst)
        .dtype("bf16, fp16 or fp32", kBF16, kF16, kF32)
        .rows_at_least(),
    // (B, H, 1) as SGLang allocates it, or (B, H) as vLLM does
    tensor("weights_out", kWeightsOut).out().is(kWeights, "has no weights")
        .of(shape("contiguous (H, 1, 1)", S(kB), S(kH), L(1)), kRankFirst)
        .or_(shape("contiguous (H, 1)", S(kB), S(kH)))
        .dtype("fp32", kF32),
    tensor("freqs", kFreqs).is(kRope, "has no RoPE")
        .of(shape("contiguous (64, 1)", S(kMaxPos), L(64)), ShapeMsg::kWhole, " ({layout} for recipe {recipe})")
        .counted("max_pos * 64 elements overflow")
        .dtype("fp32", kF32)
        .needs_rows("has 0 rows (max_pos = 0), so no position is valid"),
    tensor("positions", kPositions).is(kRope, "has no RoPE")
        .of(shape("contiguous (1,)", S(kB)), kRankFirst)
        .dtype("int32 or int64", kI32, kI64)
        .indexes(kMaxPos, "max_pos"),
};

constexpr OpSpec kQueryOp{"query", kQuerySyms, kQSyms, kQueryArgs, int(sizeof kQueryArgs / sizeof kQueryArgs[0]), kB};

}  // namespace

Status validate_op(const OpArgs& args, const Options& options, Problem* out) {
  // --- the recipe fixes which tensors are taken, and the output forms ---
  const int rid = int(args.recipe);
  const bool known = int(recipe(args.recipe).id) == rid;  // recipe() maps unknown ids to id 0
  if (!known) {
    std::string names;
    for (RecipeId r : all_recipes()) names += (names.empty() ? "" : ", ") + std::string(recipe_name(r));
    return bad_arg("recipe", "unknown recipe id " + std::to_string(rid) + "; expected one of " + names);
  }
  const Recipe& rec = recipe(args.recipe);
  const bool fp4 = rec.format == OutFormat::kE2M1;
  OpCall c;
  c.features = (rec.format == OutFormat::kE4M3FN ? kFn : 0u) | (rec.format == OutFormat::kE4M3FNUZ ? kFnuz : 0u) |
               (fp4 ? kFp4 : 0u) | (rec.scale_out && !fp4 ? kScaleOut : 0u) |
               (recipe_has_weights(rec) ? kWeights : 0u) | (recipe_has_rope(rec) ? kRope : 0u);
  c.str("recipe", rec.name);
  c.str("layout", rec.freqs_layout == FreqsLayout::kInterleaved ? "(cos, sin) per pair" : "[cos x32 | sin x32]");
  c.bind(kD, fp4 ? 64 : 128);
  c.views[kQInput] = &args.q_input;
  c.views[kQOut] = &args.q_out;
  c.views[kQScale] = &args.q_scale;
  c.views[kWeight] = &args.weight;
  c.views[kWeightsOut] = &args.weights_out;
  c.views[kFreqs] = &args.freqs;
  c.views[kPositions] = &args.positions;
  c.scalars[kWeightScale] = double(args.weight_scale);
  c.scalars[kHeadScale] = double(args.head_scale);

  const Status s = check_op_args(kQueryOp, options, &c);
  if (!s.ok() || out == nullptr) return s;
  const std::int64_t B = c.sym[kB], H = c.sym[kH];
  Problem& p = *out;
  p = Problem{};
  p.recipe = args.recipe;
  p.H = H;
  if (c.no_work) return s;  // valid, nothing to do, nothing to read
  p.B = B;
  p.dtype = args.q_input.dtype;
  p.q_input = args.q_input.data;
  p.q_out = static_cast<std::uint8_t*>(args.q_out.data);
  p.q_sf = recipe_writes_q_scale(rec) ? static_cast<std::uint8_t*>(args.q_scale.data) : nullptr;
  p.weight_scale = args.weight_scale;
  p.head_scale = args.head_scale;
  p.weight = args.weight.data;
  p.weight_dtype = args.weight.dtype;
  p.weight_stride_b = B > 1 ? args.weight.strides[0] : H;
  p.weights_out = static_cast<float*>(args.weights_out.data);
  p.freqs = static_cast<const float*>(args.freqs.data);
  p.max_pos = c.taken[kFreqs] ? c.sym[kMaxPos] : 0;
  p.positions = args.positions.data;
  p.pos_dtype = args.positions.dtype;
  p.device = c.device;
  return s;
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
