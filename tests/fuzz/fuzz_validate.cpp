// libFuzzer target: the validators (validate(OpArgs) for the query side, validate(KStoreArgs) for
// the key side) on hostile arguments, and what they accept run on the CPU.
//
// The first byte picks the side. The input then picks a recipe (valid ids and invalid ones), a
// consistent set of views (query: B, H, dtypes, max_pos, weight row stride, weights_out rank; key:
// N, dtype, row stride, max_pos, page_size, pages) laid out in one arena, then up to 12 mutations
// of any field of any view (ndim, a size, a stride, the dtype, the device, the data pointer:
// another arena offset, which makes overlaps, or null) and of the options (backend, ISA,
// threads, the recipe id, page_size, including out-of-range values). Last, now and then, one data
// pointer is moved off its element alignment (1 to element size - 1 bytes): the call must then be
// rejected naming that tensor whenever the same call with the pointer aligned is accepted with
// work to do (B > 0 / N > 0), and get the aligned call's verdict otherwise.
//
// No false crashes: the validators read no tensor data except host positions (and the key side's
// slots), and only the elements a view that passed the checks describes. Those index views
// therefore always point at real memory holding what they claim: inside the arena when their
// extent fits, else their own heap buffer of exactly that extent (so ASan sees a read one past its
// end), else (over 4096 elements) null, which the validator must reject before reading. Every
// other pointer is an arena address or null and is never dereferenced by a validator.
//
// When a validator accepts a CPU call whose every view lies inside the arena (extents computed
// here with checked arithmetic), the op is run: on the reference, then on the CPU backend (each
// supported ISA, 1 and 2 threads). The harness checks that
//   - every accepted run returns ok,
//   - no byte of the arena outside the outputs' extents changes (nothing written but outputs),
//   - the CPU backend's bytes equal the reference's.
// A violation aborts (a finding), as does any sanitizer report.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "indexer_q/indexer_q.h"

using namespace indexer_q;

namespace {

constexpr std::size_t kArena = 1 << 16;
constexpr std::int64_t kMaxIndexElems = 4096;  // index views larger than this: null
alignas(64) std::uint8_t g_arena[kArena];
alignas(64) std::uint8_t g_before[kArena];
alignas(64) std::uint8_t g_ref[kArena];

[[noreturn]] void fail(const char* what, const Status& s = Status()) {
  std::fprintf(stderr, "fuzz_validate: %s %s\n", what, s.message().c_str());
  std::abort();
}

// Byte extent [0, bytes) a view touches from its data pointer; false when it cannot be computed
// (negative size or stride, overflow, unknown dtype, ndim out of range).
bool extent(const TensorView& t, std::uint64_t* bytes) {
  *bytes = 0;
  if (t.ndim < 0 || t.ndim > TensorView::kMaxDims) return false;
  const std::size_t es = dtype_size(t.dtype);
  if (es == 0) return false;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0) return false;
  }
  for (int d = 0; d < t.ndim; ++d)
    if (t.sizes[d] == 0) return true;  // empty: touches nothing
  std::int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) {
    std::int64_t term;
    if (__builtin_mul_overflow(t.sizes[d] - 1, t.strides[d], &term)) return false;
    if (__builtin_add_overflow(last, term, &last)) return false;
  }
  std::uint64_t b;
  if (__builtin_mul_overflow(std::uint64_t(last) + 1, std::uint64_t(es), &b)) return false;
  *bytes = b;
  return true;
}

bool in_arena(const TensorView& t) {
  std::uint64_t n;
  if (!extent(t, &n)) return false;
  if (n == 0) return true;
  const auto p = reinterpret_cast<std::uintptr_t>(t.data);
  const auto lo = reinterpret_cast<std::uintptr_t>(g_arena);
  return p >= lo && p - lo <= kArena && n <= kArena - (p - lo);
}

const DType kFloatIn[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
// Interesting values for sizes / strides / options.
const std::int64_t kInteresting[] = {0, 1, 2, 3, 63, 64, 65, 127, 128, 129, 132, 68, -1, -128,
                                     INT32_MAX, std::int64_t(INT32_MAX) + 1, INT64_MAX, INT64_MIN,
                                     INT64_MAX / 128, std::int64_t(1) << 32, std::int64_t(1) << 62};

std::int64_t pick_value(FuzzedDataProvider& f) {
  if (f.ConsumeBool()) return kInteresting[f.ConsumeIntegralInRange<int>(0, int(std::size(kInteresting)) - 1)];
  return f.ConsumeIntegral<std::int64_t>();
}

// Consecutive 64-byte aligned regions of the arena.
struct Layout {
  std::size_t at = 0;
  std::uint8_t* take(std::size_t bytes) {
    std::uint8_t* p = g_arena + std::min(at, kArena - 64);
    at = (at + bytes + 63) & ~std::size_t(63);
    return p;
  }
};

// Fills the laid-out part of the arena from the input (the kernels see NaN, Inf, anything).
void fill_arena(FuzzedDataProvider& f, std::size_t used) {
  std::memset(g_arena, 0, kArena);
  const std::vector<std::uint8_t> fill = f.ConsumeBytes<std::uint8_t>(f.ConsumeIntegralInRange<int>(0, 256));
  for (std::size_t i = 0; i < std::min(used, kArena) && !fill.empty(); ++i) g_arena[i] = fill[i % fill.size()];
}

// Data pointers moved here stay aligned to 8 bytes (so to every element size): misalignment is
// the separate last step (misalign_one), whose verdict the harness knows.
void mutate_view(FuzzedDataProvider& f, TensorView& t) {
  switch (f.ConsumeIntegralInRange<int>(0, 6)) {
    case 0: t.ndim = f.ConsumeIntegralInRange<int>(-2, 6); break;
    case 1: t.sizes[f.ConsumeIntegralInRange<int>(0, 3)] = pick_value(f); break;
    case 2: t.strides[f.ConsumeIntegralInRange<int>(0, 3)] = pick_value(f); break;
    case 3: t.dtype = DType(f.ConsumeIntegralInRange<int>(-1, 10)); break;
    case 4:
      t.device.type = DeviceType(f.ConsumeIntegralInRange<int>(0, 2));
      t.device.index = f.ConsumeIntegralInRange<int>(-1, 2);
      break;
    case 5: {  // another place in the arena, aligned to 8 (see above)
      std::size_t o = f.ConsumeIntegralInRange<std::size_t>(0, kArena - 1) & ~std::size_t(7);
      t.data = g_arena + o;
      break;
    }
    default: t.data = nullptr; break;
  }
}

// Now and then (from the input's last bytes) moves one view's data pointer 1 to element size - 1
// bytes off its element alignment; returns the view's index, or -1 if none was moved (a null
// pointer or 1-byte elements cannot be misaligned). The pointer is only compared by the
// validators, never read: they must reject it first.
int misalign_one(FuzzedDataProvider& f, TensorView* const* views, int n) {
  if (f.remaining_bytes() == 0 || f.ConsumeIntegralInRange<int>(0, 7) != 0) return -1;
  const int i = f.ConsumeIntegralInRange<int>(0, n - 1);
  TensorView& t = *views[i];
  const std::size_t es = (t.dtype >= DType::kBFloat16 && t.dtype <= DType::kInt8) ? dtype_size(t.dtype) : 0;
  if (t.data == nullptr || es <= 1) return -1;
  const std::size_t off = f.ConsumeIntegralInRange<std::size_t>(1, es - 1);
  t.data = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(t.data) + off);
  return i;
}

// The verdict on a call with one misaligned pointer (view `name`), given the verdict `aligned` on
// the same call with that pointer aligned and whether that call has work (B > 0 / N > 0): with
// work, an accepted call must become a rejection naming the view's alignment; otherwise the
// verdict must not change (the checks before the alignment one never look at pointer values
// beyond null, and a call without work reads nothing, so its pointers are not checked).
void check_misaligned(const Status& s, const Status& aligned, bool work, const char* name) {
  if (aligned.ok() && work) {
    if (s.ok()) fail("a misaligned data pointer was accepted:", s);
    const std::string want = std::string("indexer_q: ") + name + ": data pointer 0x";
    if (s.message().rfind(want, 0) != 0 || s.message().find(" is not aligned to the ") == std::string::npos)
      fail("a misaligned data pointer rejected without naming it:", s);
  } else if (s.ok() != aligned.ok()) {
    fail(s.ok() ? "a misaligned data pointer made a rejected call valid:"
                : "a misaligned data pointer in a call without work was rejected:",
         s);
  }
}

void mutate_options(FuzzedDataProvider& f, Options& o) {
  switch (f.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: o.backend = Backend(f.ConsumeIntegralInRange<int>(-1, 5)); break;
    case 1: o.cpu_isa = CpuIsa(f.ConsumeIntegralInRange<int>(-2, 4)); break;
    default: o.num_threads = int(pick_value(f)); break;
  }
}

// An index view the validator may read (positions, slots): make it describe real memory. What a
// validator may read is sizes[0] elements from data (it checks rank 1 and stride 1 first).
void back_index_view(TensorView& p, std::vector<std::uint8_t>& own) {
  if (p.data == nullptr || p.device.type != DeviceType::kCPU) return;
  const bool known = p.ndim >= 1 && p.ndim <= TensorView::kMaxDims && p.sizes[0] >= 0 &&
                     (p.dtype == DType::kInt32 || p.dtype == DType::kInt64);
  if (!known || p.sizes[0] > kMaxIndexElems) {
    p.data = nullptr;  // cannot back it: null (must be rejected, never read)
    return;
  }
  const std::size_t bytes = std::size_t(p.sizes[0]) * dtype_size(p.dtype);
  const auto o = std::size_t(static_cast<std::uint8_t*>(p.data) - g_arena);
  if (o + bytes > kArena) {  // does not fit: its own buffer of exactly that extent
    own.assign(g_arena + o, g_arena + kArena);
    own.resize(bytes);
    p.data = own.empty() ? nullptr : own.data();
  }
}

// Runs an accepted call on the reference, then on the CPU backend for every ISA and 1, 2
// threads; checks status, nothing written outside `outs`, CPU bytes == reference bytes.
void run_and_check(const char* what, const std::vector<const TensorView*>& outs,
                   const std::function<Status(const Options&)>& call) {
  std::memcpy(g_before, g_arena, kArena);
  Options ro;
  ro.backend = Backend::kReference;
  Status rs = call(ro);
  if (!rs.ok()) fail("validate accepted, the reference refused:", rs);
  std::vector<std::uint8_t> is_out(kArena, 0);
  for (const TensorView* o : outs) {
    std::uint64_t n;
    extent(*o, &n);
    if (n == 0) continue;
    const auto off = std::size_t(static_cast<std::uint8_t*>(o->data) - g_arena);
    std::memset(is_out.data() + off, 1, std::size_t(n));
  }
  for (std::size_t i = 0; i < kArena; ++i)
    if (!is_out[i] && g_arena[i] != g_before[i]) fail("the reference wrote outside the outputs");
  std::memcpy(g_ref, g_arena, kArena);
  for (CpuIsa isa : supported_cpu_isas()) {
    for (int threads : {1, 2}) {
      std::memcpy(g_arena, g_before, kArena);
      Options co;
      co.backend = Backend::kCpu;
      co.cpu_isa = isa;
      co.num_threads = threads;
      rs = call(co);
      if (!rs.ok()) fail("validate accepted, the cpu backend refused:", rs);
      if (std::memcmp(g_arena, g_ref, kArena) != 0) {
        for (std::size_t i = 0; i < kArena; ++i)
          if (g_arena[i] != g_ref[i]) {
            std::fprintf(stderr, "fuzz_validate: %s isa %s threads %d: byte %zu is %02x, reference %02x (%s)\n", what,
                         cpu_isa_name(isa), threads, i, g_arena[i], g_ref[i],
                         is_out[i] ? "an output byte" : "outside the outputs");
            break;
          }
        fail("cpu backend bytes differ from the reference");
      }
    }
  }
}

void check_rejection(const Status& s) {
  if (s.message().empty() || s.message().rfind("indexer_q: ", 0) != 0)
    fail("a rejection without a message naming the argument:", s);
}

// ---- the query side: validate(OpArgs) ----
void fuzz_query(FuzzedDataProvider& f) {
  const std::vector<RecipeId> recipes = all_recipes();
  const int nrec = int(recipes.size());
  OpArgs a;
  const int rid = f.ConsumeIntegralInRange<int>(-1, nrec);  // -1 and nrec: not recipes
  a.recipe = (rid >= 0 && rid < nrec) ? recipes[rid] : RecipeId(rid);
  const Recipe& rec = recipe(a.recipe);
  const bool fp4 = rec.format == OutFormat::kE2M1;
  const std::int64_t B = f.ConsumeIntegralInRange<std::int64_t>(0, 6);
  const std::int64_t H = f.ConsumeIntegralInRange<std::int64_t>(1, 8);
  const DType in_dt = kFloatIn[f.ConsumeIntegralInRange<int>(0, 2)];
  const DType w_dt = f.ConsumeBool() ? in_dt : kFloatIn[f.ConsumeIntegralInRange<int>(0, 2)];
  const DType pos_dt = f.ConsumeBool() ? DType::kInt64 : DType::kInt32;
  const std::int64_t max_pos = f.ConsumeIntegralInRange<std::int64_t>(0, 16);
  const std::int64_t w_stride = H + f.ConsumeIntegralInRange<std::int64_t>(0, 3);
  const bool wo_2d = f.ConsumeBool();
  const DType out_dt = fp4 ? (f.ConsumeBool() ? DType::kUInt8 : DType::kInt8)
                     : rec.format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3;
  // The factors must be finite and > 0 and are checked first: a raw float (half of them negative)
  // would stop most inputs there. Each is taken as |x| unless the low 3 bits of x are 0 (1 in 8:
  // the raw value, so that 0, -0, negative and non-finite factors are still fed to the validator).
  const auto factor = [&f]() {
    const float x = f.ConsumeFloatingPoint<float>();
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return (u & 7u) == 0 ? x : std::fabs(x);
  };
  a.weight_scale = factor();
  a.head_scale = factor();

  Layout L;
  const std::int64_t rows = B * H;
  a.q_input = TensorView::contiguous(L.take(std::size_t(rows) * 128 * dtype_size(in_dt)), in_dt, {B, H, 128});
  a.q_out = TensorView::contiguous(L.take(std::size_t(rows) * (fp4 ? 64 : 128)), out_dt, {B, H, fp4 ? 64 : 128});
  if (fp4) a.q_scale = TensorView::contiguous(L.take(std::size_t(rows) * 4), DType::kInt32, {B, H});
  a.weight = TensorView::strided(L.take(std::size_t(B * w_stride) * dtype_size(w_dt)), w_dt, {B, H}, {w_stride, 1});
  a.weights_out = wo_2d ? TensorView::contiguous(L.take(std::size_t(rows) * 4), DType::kFloat32, {B, H})
                        : TensorView::contiguous(L.take(std::size_t(rows) * 4), DType::kFloat32, {B, H, 1});
  a.freqs = TensorView::contiguous(L.take(std::size_t(max_pos) * 64 * 4), DType::kFloat32, {max_pos, 64});
  a.positions = TensorView::contiguous(L.take(std::size_t(B) * 8), pos_dt, {B});
  Options opt;
  opt.num_threads = f.ConsumeIntegralInRange<int>(0, 2);

  fill_arena(f, L.at);
  for (std::int64_t b = 0; b < B; ++b) {  // positions mostly in range
    std::int64_t p = max_pos > 0 ? f.ConsumeIntegralInRange<std::int64_t>(0, max_pos - 1) : 0;
    if (f.ConsumeProbability<float>() < 0.05f) p = pick_value(f);
    if (pos_dt == DType::kInt64)
      static_cast<std::int64_t*>(a.positions.data)[b] = p;
    else
      static_cast<std::int32_t*>(a.positions.data)[b] = std::int32_t(p);
  }

  TensorView* views[] = {&a.q_input, &a.q_out, &a.q_scale, &a.weight, &a.weights_out, &a.freqs, &a.positions};
  const int nmut = f.ConsumeIntegralInRange<int>(0, 12);
  for (int m = 0; m < nmut && f.remaining_bytes() > 0; ++m) {
    const int which = f.ConsumeIntegralInRange<int>(0, 8);
    if (which == 7) mutate_options(f, opt);
    else if (which == 8) a.recipe = RecipeId(f.ConsumeIntegralInRange<int>(-3, nrec + 2));
    else mutate_view(f, *views[which]);
  }
  std::vector<std::uint8_t> own_positions;
  back_index_view(a.positions, own_positions);
  const OpArgs aligned = a;
  const int mis = misalign_one(f, views, 7);

  const Status s = validate(a, opt);
  if (mis >= 0) {
    const Status sa = validate(aligned, opt);
    const bool f4a = recipe(aligned.recipe).format == OutFormat::kE2M1;
    const char* names[] = {"q_input", f4a ? "q_fp4" : "q_fp8", "q_sf", "weight", "weights_out", "freqs", "positions"};
    check_misaligned(s, sa, sa.ok() && aligned.q_input.sizes[0] > 0, names[mis]);
  }
  if (!s.ok()) return check_rejection(s);
  const Status s2 = validate(a, opt);  // the same verdict twice (no hidden state)
  if (!s2.ok()) fail("validate changed its mind:", s2);

  const bool f4 = recipe(a.recipe).format == OutFormat::kE2M1;
  std::vector<const TensorView*> used = {&a.q_input, &a.q_out, &a.weight, &a.weights_out, &a.freqs, &a.positions};
  if (f4) used.push_back(&a.q_scale);
  for (const TensorView* t : used)
    if (t->device.type != DeviceType::kCPU || !in_arena(*t)) return;
  if (a.q_input.sizes[0] * a.q_input.sizes[1] > 256) return;  // (it lies in the arena: no overflow)
  std::vector<const TensorView*> outs = {&a.q_out, &a.weights_out};
  if (f4) outs.push_back(&a.q_scale);
  run_and_check(recipe_name(a.recipe), outs, [&](const Options& o) { return run(a, o); });
}

// ---- the key side: validate(KStoreArgs) ----
void fuzz_key(FuzzedDataProvider& f) {
  const std::vector<KRecipeId> recipes = all_krecipes();
  const int nrec = int(recipes.size());
  KStoreArgs k;
  const int rid = f.ConsumeIntegralInRange<int>(-1, nrec);
  k.recipe = (rid >= 0 && rid < nrec) ? recipes[rid] : KRecipeId(rid);
  const std::int64_t token_bytes = std::max<std::int64_t>(1, kside_token_bytes(k.recipe));
  const std::int64_t N = f.ConsumeIntegralInRange<std::int64_t>(0, 12);
  const DType dt = kFloatIn[f.ConsumeIntegralInRange<int>(0, 2)];
  const std::int64_t row_stride = 128 + 8 * f.ConsumeIntegralInRange<std::int64_t>(0, 2);
  const std::int64_t max_pos = f.ConsumeIntegralInRange<std::int64_t>(0, 16);
  const DType pos_dt = f.ConsumeBool() ? DType::kInt64 : DType::kInt32;
  k.page_size = std::int64_t(1) << f.ConsumeIntegralInRange<int>(0, 4);
  const std::int64_t pages = f.ConsumeIntegralInRange<std::int64_t>(0, 6);
  const std::int64_t page_bytes = token_bytes * k.page_size;
  k.eps = f.ConsumeFloatingPoint<float>();

  Layout L;
  k.input = TensorView::strided(L.take(std::size_t(N * row_stride) * dtype_size(dt)), dt, {N, 128}, {row_stride, 1});
  k.weight = TensorView::contiguous(L.take(128 * dtype_size(dt)), dt, {128});
  k.freqs = TensorView::contiguous(L.take(std::size_t(max_pos) * 64 * 4), DType::kFloat32, {max_pos, 64});
  k.positions = TensorView::contiguous(L.take(std::size_t(N) * 8), pos_dt, {N});
  k.slots = TensorView::contiguous(L.take(std::size_t(N) * 8), DType::kInt64, {N});
  k.kvcache = TensorView::contiguous(L.take(std::size_t(pages * page_bytes)),
                                     f.ConsumeBool() ? DType::kUInt8 : DType::kInt8, {pages, page_bytes});
  Options opt;
  opt.num_threads = f.ConsumeIntegralInRange<int>(0, 2);

  fill_arena(f, L.at);
  const std::int64_t capacity = pages * k.page_size;
  // Positions mostly in range; slots distinct ((7t + 3) mod capacity, t < capacity: capacity =
  // pages * 2^k with pages <= 6 is never a multiple of 7), now and then skipped (-1) or any value.
  for (std::int64_t t = 0; t < N; ++t) {
    std::int64_t p = max_pos > 0 ? f.ConsumeIntegralInRange<std::int64_t>(0, max_pos - 1) : 0;
    if (f.ConsumeProbability<float>() < 0.05f) p = pick_value(f);
    if (pos_dt == DType::kInt64)
      static_cast<std::int64_t*>(k.positions.data)[t] = p;
    else
      static_cast<std::int32_t*>(k.positions.data)[t] = std::int32_t(p);
    std::int64_t sl = capacity > 0 && t < capacity ? (t * 7 + 3) % capacity : -1;
    if (f.ConsumeProbability<float>() < 0.1f) sl = f.ConsumeBool() ? -1 : pick_value(f);
    static_cast<std::int64_t*>(k.slots.data)[t] = sl;
  }
  TensorView* views[] = {&k.input, &k.weight, &k.freqs, &k.positions, &k.slots, &k.kvcache};
  const int nmut = f.ConsumeIntegralInRange<int>(0, 12);
  for (int m = 0; m < nmut && f.remaining_bytes() > 0; ++m) {
    const int which = f.ConsumeIntegralInRange<int>(0, 8);
    if (which == 6) mutate_options(f, opt);
    else if (which == 7) k.recipe = KRecipeId(f.ConsumeIntegralInRange<int>(-3, nrec + 2));
    else if (which == 8) k.page_size = pick_value(f);
    else mutate_view(f, *views[which]);
  }
  std::vector<std::uint8_t> own_positions, own_slots;
  back_index_view(k.positions, own_positions);
  back_index_view(k.slots, own_slots);
  const KStoreArgs aligned = k;
  const int mis = misalign_one(f, views, 6);

  const Status s = validate(k, opt);
  if (mis >= 0) {
    const Status sa = validate(aligned, opt);
    const char* names[] = {"input", "weight", "freqs", "positions", "slots", "kvcache"};
    check_misaligned(s, sa, sa.ok() && aligned.input.sizes[0] > 0, names[mis]);
  }
  if (!s.ok()) return check_rejection(s);
  const Status s2 = validate(k, opt);
  if (!s2.ok()) fail("validate(KStoreArgs) changed its mind:", s2);

  for (const TensorView* t : views)
    if (t->device.type != DeviceType::kCPU || !in_arena(*t)) return;
  if (k.input.sizes[0] > 64) return;
  // Two tokens with one slot: the stored row is whichever wrote last (unspecified): skip the
  // comparison run for such inputs.
  const std::int64_t n = k.input.sizes[0];
  const auto* sl = static_cast<const std::int64_t*>(k.slots.data);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = i + 1; j < n; ++j)
      if (sl[i] >= 0 && sl[i] == sl[j]) return;
  run_and_check(krecipe_name(k.recipe), {&k.kvcache}, [&](const Options& o) { return run(k, o); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider f(data, size);
  if (f.ConsumeIntegralInRange<int>(0, 3) == 3)
    fuzz_key(f);
  else
    fuzz_query(f);
  return 0;
}
