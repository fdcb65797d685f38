// The key side's one validator (docs/KSIDE-SPEC.md): KStoreArgs -> detail::KProblem, or a Status
// naming the offending argument. Nothing is written by a rejected call.
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/kside_problem.h"
#include "common/kside_validate.h"
#include "common/validate_text.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace {

std::string device_of(const Device& d) {
  return d.type == DeviceType::kCPU ? std::string("cpu") : device_type_name(d.type) + (":" + std::to_string(d.index));
}

bool dtype_in(DType d, std::initializer_list<DType> allowed) {
  for (DType a : allowed)
    if (a == d) return true;
  return false;
}

// Byte range [lo, hi) a view spans (empty when it has no element or no data). False when it does
// not fit in the address space (a negative stride on a dimension of size > 1, or sizes x strides
// overflowing): no real tensor has such a view.
bool span(const TensorView& t, std::uintptr_t* lo, std::uintptr_t* hi) {
  *lo = *hi = 0;
  if (t.data == nullptr || t.numel() == 0 || t.ndim < 0 || t.ndim > TensorView::kMaxDims) return true;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] <= 1) continue;
    const std::int64_t n = t.sizes[d] - 1, st = t.strides[d];
    if (st < 0 || (st != 0 && n > kMax / st) || n * st > kMax - last) return false;
    last += n * st;
  }
  const std::uint64_t es = dtype_size(t.dtype), elems = std::uint64_t(last) + 1;
  if (es == 0 || elems > std::numeric_limits<std::uintptr_t>::max() / es) return false;
  *lo = reinterpret_cast<std::uintptr_t>(t.data);
  if (elems * es > std::numeric_limits<std::uintptr_t>::max() - *lo) return false;
  *hi = *lo + std::uintptr_t(elems * es);
  return true;
}

bool overlap(const TensorView& a, const TensorView& b) {
  if (a.device != b.device) return false;
  std::uintptr_t a0, a1, b0, b1;
  span(a, &a0, &a1);
  span(b, &b0, &b1);
  return a1 > a0 && b1 > b0 && a0 < b1 && b0 < a1;
}

}  // namespace

namespace detail {

Status validate_kstore(const KStoreArgs& args, const Options& options, KProblem* out) {
  const TensorView& input = args.input;
  const TensorView& weight = args.weight;
  const TensorView& freqs = args.freqs;
  const TensorView& positions = args.positions;
  const TensorView& slots = args.slots;
  const TensorView& kvcache = args.kvcache;

  // --- recipe ---
  const std::int64_t token_bytes = kside_token_bytes(args.recipe);
  if (token_bytes == 0) {
    std::string names;
    for (KRecipeId r : all_krecipes()) names += (names.empty() ? "" : ", ") + std::string(krecipe_name(r));
    return detail::bad_arg("recipe", "unknown key-side recipe id " + std::to_string(int(args.recipe)) + "; expected one of " +
                             names);
  }
  const char* rname = krecipe_name(args.recipe);

  // --- input fixes N and the dtype ---
  if (input.ndim != 2 || input.sizes[1] != 128 || input.sizes[0] < 0)
    return detail::bad_arg("input", "expected shape (N, 128), got " + detail::shape_text(input));
  const std::int64_t N = input.sizes[0];
  if (N > std::numeric_limits<std::int64_t>::max() / 128)
    return detail::bad_arg("input", "N * 128 elements overflow int64 (shape " + detail::shape_text(input) + ")");
  if (!dtype_in(input.dtype, {DType::kFloat32, DType::kBFloat16, DType::kFloat16}))
    return detail::bad_arg("input", std::string("expected dtype fp32, bf16 or fp16, got ") + dtype_name(input.dtype));
  if (input.strides[1] != 1 || (N > 1 && input.strides[0] < 128))
    return detail::bad_arg("input", "unsupported strides " + detail::strides_text(input) +
                            "; expected stride(1) = 1 and stride(0) >= 128 (rows of 128 contiguous values)");

  // --- weight ---
  if (weight.ndim != 1 || weight.sizes[0] != 128)
    return detail::bad_arg("weight", "expected shape (128,), got " + detail::shape_text(weight));
  if (weight.dtype != input.dtype)
    return detail::bad_arg("weight", std::string("expected the dtype of input (") + dtype_name(input.dtype) + "), got " +
                             dtype_name(weight.dtype));
  if (weight.strides[0] != 1)
    return detail::bad_arg("weight", "unsupported strides " + detail::strides_text(weight) + "; expected contiguous (1,)");

  // --- freqs ---
  if (freqs.ndim != 2 || freqs.sizes[1] != 64 || freqs.sizes[0] < 0)
    return detail::bad_arg("freqs", "expected shape (max_pos, 64) ((cos, sin) per pair, interleaved), got " + detail::shape_text(freqs));
  if (freqs.dtype != DType::kFloat32)
    return detail::bad_arg("freqs", std::string("expected dtype fp32, got ") + dtype_name(freqs.dtype));
  if ((freqs.sizes[0] > 1 && freqs.strides[0] != 64) || freqs.strides[1] != 1)
    return detail::bad_arg("freqs", "unsupported strides " + detail::strides_text(freqs) + "; expected contiguous (64, 1)");
  const std::int64_t max_pos = freqs.sizes[0];
  if (max_pos > std::numeric_limits<std::int64_t>::max() / 64)
    return detail::bad_arg("freqs", "max_pos * 64 elements overflow int64 (shape " + detail::shape_text(freqs) + ")");

  // --- positions, slots ---
  // (The expected-shape texts are built only when a check fails: an accepted call allocates nothing.)
  const auto n1 = [N] { return "(" + std::to_string(N) + ",) = (N,)"; };
  if (positions.ndim != 1 || positions.sizes[0] != N)
    return detail::bad_arg("positions", "expected shape " + n1() + ", got " + detail::shape_text(positions));
  if (!dtype_in(positions.dtype, {DType::kInt32, DType::kInt64}))
    return detail::bad_arg("positions", std::string("expected dtype int32 or int64, got ") + dtype_name(positions.dtype));
  if (N > 1 && positions.strides[0] != 1)
    return detail::bad_arg("positions", "unsupported strides " + detail::strides_text(positions) + "; expected contiguous (1,)");
  if (slots.ndim != 1 || slots.sizes[0] != N)
    return detail::bad_arg("slots", "expected shape " + n1() + ", got " + detail::shape_text(slots));
  if (slots.dtype != DType::kInt64)
    return detail::bad_arg("slots", std::string("expected dtype int64, got ") + dtype_name(slots.dtype));
  if (N > 1 && slots.strides[0] != 1)
    return detail::bad_arg("slots", "unsupported strides " + detail::strides_text(slots) + "; expected contiguous (1,)");

  // --- eps (its spec: see check_scalar, indexer_q.h) ---
  {
    const Status sc = check_scalar(ScalarArg::kEps, double(args.eps));
    if (!sc.ok()) return sc;
  }

  // --- page_size, kvcache ---
  const std::int64_t ps = args.page_size;
  if (ps < 1 || ps > (std::int64_t(1) << 32) || (ps & (ps - 1)) != 0)
    return detail::bad_arg("page_size", "expected a power of two in [1, 2^32], got " + std::to_string(ps));
  int log2_page = 0;
  while ((std::int64_t(1) << log2_page) < ps) ++log2_page;
  const std::int64_t page_bytes = token_bytes * ps;
  const auto want_cache = [&] {
    return "(num_pages, " + std::to_string(page_bytes) + ") = (num_pages, " + std::to_string(token_bytes) +
           " * page_size) for recipe " + rname + " and page_size " + std::to_string(ps);
  };
  if (kvcache.ndim != 2 || kvcache.sizes[1] != page_bytes || kvcache.sizes[0] < 0)
    return detail::bad_arg("kvcache", "expected shape " + want_cache() + ", got " + detail::shape_text(kvcache));
  if (!dtype_in(kvcache.dtype, {DType::kUInt8, DType::kInt8}))
    return detail::bad_arg("kvcache", std::string("expected dtype uint8 or int8 (raw bytes), got ") + dtype_name(kvcache.dtype));
  const std::int64_t num_pages = kvcache.sizes[0];
  if (num_pages > std::numeric_limits<std::int64_t>::max() / page_bytes)
    return detail::bad_arg("kvcache", "num_pages * page_bytes overflows int64 (shape " + detail::shape_text(kvcache) + ")");
  if (kvcache.strides[1] != 1 || (num_pages > 1 && kvcache.strides[0] != page_bytes))
    return detail::bad_arg("kvcache", "unsupported strides " + detail::strides_text(kvcache) + "; expected (" +
                              std::to_string(page_bytes) + ", 1): pages of page_bytes contiguous bytes");

  // --- devices ---
  struct Named {
    const char* name;
    const TensorView* t;
  };
  const Named all[] = {{"input", &input},         {"weight", &weight}, {"freqs", &freqs},
                       {"positions", &positions}, {"slots", &slots},   {"kvcache", &kvcache}};
  for (const Named& a : all)
    if (a.t->device != input.device)
      return detail::bad_arg(a.name, "expected the device of input (" + device_of(input.device) + "), got " +
                             device_of(a.t->device));
  const Device dev = input.device;

  // --- options: backend (vs the tensors' device), ISA, threads (the list: backends.inc) ---
  Backend backend;
  {
    const Status so = detail::resolve_backend(options, dev, &backend);
    if (!so.ok()) return so;
  }

  if (N == 0) {
    if (out) {
      *out = KProblem{};
      out->recipe = args.recipe;
    }
    return Status::Ok();  // valid, nothing to read or write
  }

  // --- data (N > 0 from here) ---
  for (const Named& a : all)
    if (a.t->data == nullptr && a.t->numel() > 0)
      return detail::bad_arg(a.name, "data pointer is null while the tensor has " + std::to_string(a.t->numel()) + " elements");
  // every data pointer aligned to its element size (the kernels read typed elements)
  for (const Named& a : all) {
    Status s = detail::check_element_aligned(a.name, *a.t);
    if (!s.ok()) return s;
  }
  for (const Named& a : all) {
    std::uintptr_t lo, hi;
    if (!span(*a.t, &lo, &hi))
      return detail::bad_arg(a.name, "sizes " + detail::shape_text(*a.t) + " and strides " + detail::strides_text(*a.t) +
                             " span more bytes than the address space holds");
  }
  for (const Named& a : all)
    if (a.t != &kvcache && overlap(kvcache, *a.t))
      return detail::bad_arg("kvcache", std::string("output memory overlaps ") + a.name);

  // --- every stored token's position and slot, wherever the host can read them ---
  if (dev.type == DeviceType::kCPU) {
    const std::int64_t* sl = static_cast<const std::int64_t*>(slots.data);
    const std::int64_t capacity = num_pages * ps;
    for (std::int64_t t = 0; t < N; ++t) {
      const std::int64_t s = sl[t];
      if (s < 0) continue;  // no destination: skipped, its position is not looked at
      if (s >= capacity)
        return detail::bad_arg("slots", "slots[" + std::to_string(t) + "] = " + std::to_string(s) +
                                " is outside [0, num_pages * page_size) = [0, " + std::to_string(capacity) +
                                ") (negative = skip the token)");
      const std::int64_t p = positions.dtype == DType::kInt32
                                 ? std::int64_t(static_cast<const std::int32_t*>(positions.data)[t])
                                 : static_cast<const std::int64_t*>(positions.data)[t];
      if (p < 0 || p >= max_pos)
        return detail::bad_arg("positions", "positions[" + std::to_string(t) + "] = " + std::to_string(p) +
                                    " is outside [0, max_pos) = [0, " + std::to_string(max_pos) + ") (token with slot " +
                                    std::to_string(s) + ")");
    }
  }

  if (out) {
    KProblem& p = *out;
    p.recipe = args.recipe;
    p.N = N;
    p.dtype = input.dtype;
    p.input = input.data;
    p.input_stride = N > 1 ? input.strides[0] : 128;
    p.weight = weight.data;
    p.eps = args.eps;
    p.freqs = static_cast<const float*>(freqs.data);
    p.max_pos = max_pos;
    p.positions = positions.data;
    p.pos_dtype = positions.dtype;
    p.slots = static_cast<const std::int64_t*>(slots.data);
    p.cache = static_cast<std::uint8_t*>(kvcache.data);
    p.num_pages = num_pages;
    p.page_size = ps;
    p.log2_page = log2_page;
    p.page_bytes = page_bytes;
    p.device = dev;
  }
  return Status::Ok();
}

}  // namespace detail

Status validate(const KStoreArgs& args, const Options& options) {
  return detail::validate_kstore(args, options, nullptr);
}

}  // namespace indexer_q
