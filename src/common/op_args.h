// The validator core (src/validate.cpp): an op's arguments described once, as a table of
// per-argument specs, and one checker that walks any op's table. Each op (the query side's OpArgs,
// the key side's KStoreArgs, the next one) writes its table and a thin entry point that resolves
// its recipe, runs check_op_args() and fills the validated problem its backends receive
// (src/validate.cpp: validate_op; src/validate_kside.cpp: validate_kstore).
//
// What the checker does, for a table and the views of one call:
//  1. every argument in table order (scalars included: the table order is the check order):
//     - a scalar: check_scalar(); an integer scalar: its range rule (binds its size symbol);
//     - a tensor the recipe does not take (its `when` features missing): the empty view
//       (ndim 0, no data), else "<name>: recipe <r> <absent>: expected an empty view ...";
//     - a tensor it takes: shape (binding the op's size symbols from the first argument that
//       names them), element count within int64, dtype, strides, in that order;
//  2. every tensor on the first tensor's device; options.backend / cpu_isa / num_threads;
//  3. no work (the op's work symbol, B or N, is 0): ok, nothing else looked at;
//  4. no null data, every pointer aligned to its element size, a tensor that needs rows has
//     some, every view within the address space, no output overlapping another tensor;
//  5. on the host, the values of the index tensors (positions, slots) within their bound.
// Accepted calls allocate nothing: message texts are built only when a check fails.
#pragma once

#include <cstdint>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

constexpr int kOpMaxSyms = 12;    // size symbols of one op
constexpr int kOpMaxViews = 8;    // tensor arguments of one op
constexpr int kOpMaxScalars = 4;  // float scalars of one op
constexpr int kOpMaxInts = 2;     // integer scalars of one op
constexpr int kOpMaxStrs = 3;     // string facts of one call (recipe name, ...)

// A size symbol of an op (B, H, N, max_pos, page_size, ...). A symbol is bound by the recipe or
// an integer scalar before the tensors are checked, by the first tensor whose shape names it, or
// as the product of two bound symbols (derived).
struct SymSpec {
  const char* name;      // in messages and templates: "B", "max_pos"
  const char* show;      // its text in a symbolic shape (template); null: the name
  std::int64_t min;      // the least value a tensor may bind it to
  const char* what;      // per-dimension messages: "batch size B"
  int factor_a, factor_b;  // derived: the product of these two symbols; -1: not derived
};
constexpr SymSpec sym(const char* name, std::int64_t min = 0, const char* what = nullptr, const char* show = nullptr) {
  return SymSpec{name, show, min, what, -1, -1};
}
constexpr SymSpec derived_sym(const char* name, int a, int b, const char* show = nullptr) {
  return SymSpec{name, show, 0, nullptr, a, b};
}

// One dimension of a shape: a symbol of the op, or a literal size.
struct Dim {
  int sym = -1;              // >= 0: index into the op's symbols
  std::int64_t lit = 0;      // when sym < 0
  const char* what = nullptr;  // a literal's name in per-dimension messages ("head dim")
};
constexpr Dim S(int s) { return Dim{s, 0, nullptr}; }
constexpr Dim L(std::int64_t v, const char* what = nullptr) { return Dim{-1, v, what}; }

struct ShapeSpec {
  int rank = -1;  // -1: no such form
  Dim d[TensorView::kMaxDims] = {};
  const char* strides_text = nullptr;  // template: what the strides must be
};
constexpr ShapeSpec shape(const char* strides_text, Dim a) {
  ShapeSpec s;
  s.rank = 1;
  s.d[0] = a;
  s.strides_text = strides_text;
  return s;
}
constexpr ShapeSpec shape(const char* strides_text, Dim a, Dim b) {
  ShapeSpec s = shape(strides_text, a);
  s.rank = 2;
  s.d[1] = b;
  return s;
}
constexpr ShapeSpec shape(const char* strides_text, Dim a, Dim b, Dim c) {
  ShapeSpec s = shape(strides_text, a, b);
  s.rank = 3;
  s.d[2] = c;
  return s;
}

enum class ArgKind : std::uint8_t { kTensor, kScalar, kIntScalar };
enum class Role : std::uint8_t { kIn, kOut };
// How a shape mismatch is told.
enum class ShapeMsg : std::uint8_t {
  kWhole,       // "expected shape <shape>, got <got>"
  kRankFirst,   // a rank outside the view's range told as such, then kWhole
  kPerDim,      // "expected <rank> dims <shape>, got <ndim>", then one message per dimension
};
// Strides: those of the contiguous layout of the shape; kRowsAtLeast: dim 0 at least that (a row
// pitch). A dimension of size <= 1 may have any stride.
enum class StrideRule : std::uint8_t { kContiguous, kRowsAtLeast };

// The values of an index tensor (positions, slots), checked on the host.
struct IndexSpec {
  int bound = -1;               // symbol: every value in [0, bound); -1: not an index tensor
  const char* bound_text = nullptr;  // "max_pos", "num_pages * page_size"
  bool skip_negative = false;   // a negative value skips its row (checked before the row's others)
  const char* note = nullptr;   // template appended to the message; "{guard}": the row's skip value
};

// One argument of an op.
struct ArgSpec {
  ArgKind kind = ArgKind::kTensor;
  const char* name = nullptr;
  int slot = 0;                // tensor: index into the call's views; scalar: into its floats / ints
  Role role = Role::kIn;
  unsigned when = 0;           // features the recipe must have for the argument to be taken
  const char* absent = nullptr;  // why not, when not taken: "has no RoPE" (null: never checked)
  ShapeSpec form, alt;         // alt: a second form, chosen when ndim == alt.rank
  const char* shape_note = nullptr;  // template appended to the shape text
  ShapeMsg shape_msg = ShapeMsg::kWhole;
  const char* overflow = nullptr;    // "B * H * 128 elements overflow": its element count checked
  DType dtypes[4] = {};
  int ndtypes = 0;
  const char* dtype_text = nullptr;  // template
  int dtype_of = -1;           // >= 0: the dtype of that slot ("expected the dtype of input (fp32)")
  StrideRule strides = StrideRule::kContiguous;
  const char* rows_needed = nullptr;  // with work, a tensor without elements is refused so
  IndexSpec index;
  // scalars
  ScalarArg scalar = ScalarArg::kWeightScale;
  bool int_pow2 = false;       // integer scalar: a power of two in [int_min, int_max]
  std::int64_t int_min = 0, int_max = 0;
  int binds = -1;              // integer scalar: the symbol it binds
  const char* int_text = nullptr;  // its "expected ..." text

  // builders (the tables read as one line per property)
  constexpr ArgSpec& is(unsigned features, const char* why_absent) {
    when = features;
    absent = why_absent;
    return *this;
  }
  constexpr ArgSpec& out() {
    role = Role::kOut;
    return *this;
  }
  constexpr ArgSpec& of(ShapeSpec f, ShapeMsg m = ShapeMsg::kWhole, const char* note = nullptr) {
    form = f;
    shape_msg = m;
    shape_note = note;
    return *this;
  }
  constexpr ArgSpec& or_(ShapeSpec f) {
    alt = f;
    return *this;
  }
  constexpr ArgSpec& counted(const char* text) {
    overflow = text;
    return *this;
  }
  constexpr ArgSpec& dtype(const char* text, DType a, DType b = DType(-1), DType c = DType(-1), DType d = DType(-1)) {
    dtype_text = text;
    const DType all[4] = {a, b, c, d};
    ndtypes = 0;
    for (DType x : all)
      if (int(x) >= 0) dtypes[ndtypes++] = x;
    return *this;
  }
  constexpr ArgSpec& dtype_as(int other_slot) {
    dtype_of = other_slot;
    return *this;
  }
  constexpr ArgSpec& rows_at_least() {
    strides = StrideRule::kRowsAtLeast;
    return *this;
  }
  constexpr ArgSpec& needs_rows(const char* text) {
    rows_needed = text;
    return *this;
  }
  constexpr ArgSpec& indexes(int bound_sym, const char* text, bool skip_neg = false, const char* note_tmpl = nullptr) {
    index = IndexSpec{bound_sym, text, skip_neg, note_tmpl};
    return *this;
  }
};
constexpr ArgSpec tensor(const char* name, int slot) {
  ArgSpec a;
  a.name = name;
  a.slot = slot;
  return a;
}
constexpr ArgSpec scalar(ScalarArg arg, int slot) {
  ArgSpec a;
  a.kind = ArgKind::kScalar;
  a.name = nullptr;  // check_scalar names it
  a.scalar = arg;
  a.slot = slot;
  return a;
}
constexpr ArgSpec int_pow2(const char* name, int slot, std::int64_t lo, std::int64_t hi, int binds,
                           const char* text) {
  ArgSpec a;
  a.kind = ArgKind::kIntScalar;
  a.name = name;
  a.slot = slot;
  a.int_pow2 = true;
  a.int_min = lo;
  a.int_max = hi;
  a.binds = binds;
  a.int_text = text;
  return a;
}

// An op: its size symbols and its arguments, in check order.
struct OpSpec {
  const char* name;       // "query", "key"
  const SymSpec* syms;
  int nsyms;
  const ArgSpec* args;
  int nargs;
  int work;               // the symbol whose 0 means "nothing to do" (B, N)
};

// One call being checked: what the op's entry point knows before the checker runs, and what
// the checker found.
struct OpCall {
  const TensorView* views[kOpMaxViews] = {};
  double scalars[kOpMaxScalars] = {};
  std::int64_t ints[kOpMaxInts] = {};
  unsigned features = 0;  // of the recipe
  // named string facts for templates ("recipe" -> "v4_fp8")
  const char* str_names[kOpMaxStrs] = {};
  const char* str_values[kOpMaxStrs] = {};
  int nstrs = 0;
  // size symbols: the entry point binds the recipe's (head dim, token bytes), the checker the rest
  std::int64_t sym[kOpMaxSyms] = {};
  bool bound[kOpMaxSyms] = {};
  // results
  Device device{};
  bool no_work = false;
  bool taken[kOpMaxViews] = {};  // the recipe takes this slot

  void bind(int s, std::int64_t v) {
    sym[s] = v;
    bound[s] = true;
  }
  void str(const char* name, const char* value) {
    str_names[nstrs] = name;
    str_values[nstrs++] = value;
  }
};

// Runs the checks above; Ok when the call is valid (call->no_work says whether there is work).
Status check_op_args(const OpSpec& op, const Options& options, OpCall* call);

}  // namespace detail
}  // namespace indexer_q
