// The key side's PyTorch operators (docs/KSIDE-SPEC.md, docs/TORCH.md "The key side"):
//
//   indexer_q::kside_store(str recipe, Tensor input, Tensor weight, float eps, Tensor freqs,
//                          Tensor positions, Tensor slots, Tensor(a!) kvcache, int page_size,
//                          bool enable_pdl=True) -> ()
//
//   CPU                        -> the library's CPU backend (threads = torch's intra-op count)
//   CUDA                       -> the library's CUDA backend on torch's current stream
//                                 (only when the build has CUDA: INDEXER_Q_TORCH_CUDA)
//   XPU, and every other device -> the composed ATen implementation (composed_kside.cpp)
//   Meta / FakeTensor          -> python/indexer_q/_ops.py (register_fake: no outputs to make)
// and a `kside_store_composed` twin (same schema) that runs the composed implementation on every
// device, CPU included, so it is tested against the native kernels and the golden files.
//
// As for the query side, the binding describes each tensor as an indexer_q::TensorView and lets
// the library's one validator (validate(KStoreArgs)) decide; it only reports what a TensorView
// cannot express (a dtype the library has no DType for, a non-strided layout, more than 4 dims,
// tensors on different devices of a kind the library cannot name).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "binding.h"
#include "indexer_q/indexer_q.h"
#include "kside_binding.h"
#include "op_glue.h"

namespace indexer_q {
namespace torch_binding {

namespace {

const char* kside_expected_dtype(const std::string& a) {
  if (a == "input" || a == "weight") return "fp32, bf16 or fp16 (weight: the dtype of input)";
  if (a == "freqs") return "fp32";
  if (a == "positions") return "int32 or int64";
  if (a == "slots") return "int64";
  return "uint8 or int8 (the paged cache's bytes)";
}

std::string device_text(const Tensor& t) {
  const auto d = t.device();
  switch (d.type()) {
    case StableDeviceType::CPU: return "cpu";
    case StableDeviceType::CUDA: return "cuda:" + std::to_string(d.index());
    case StableDeviceType::XPU: return "xpu:" + std::to_string(d.index());
    case StableDeviceType::Meta: return "meta";
    default: return "device type " + std::to_string(int(d.type())) + ":" + std::to_string(d.index());
  }
}

TensorView kview(const Tensor& t, const char* arg) {
  return to_view(  // the key side takes no FNUZ tensor
      t, arg, "2", [&] { fail(arg, std::string("expected dtype ") + kside_expected_dtype(arg) + ", got another dtype"); },
      /*take_fnuz=*/false);
}

}  // namespace

namespace {
const RecipeNames<KRecipeId>& knames() {
  static const RecipeNames<KRecipeId> t(all_krecipes(), &krecipe_name, "key-side ");
  return t;
}
std::int64_t krecipe_id_of(std::string_view name) noexcept { return knames().id_of(name); }
std::string unknown_krecipe_text(std::string_view name) { return knames().unknown_text(name); }
KRecipeId krecipe_of_id(std::int64_t id) { return knames().of_id(id); }
}  // namespace

KStoreArgs make_kargs(const KTorchArgs& a) {
  const NamedTensor all[] = {{"input", &a.input},         {"weight", &a.weight}, {"freqs", &a.freqs},
                             {"positions", &a.positions}, {"slots", &a.slots},   {"kvcache", &a.kvcache}};
  check_devices(all, device_text);  // devices the library cannot name: all on input's device
  KStoreArgs k;
  k.recipe = a.recipe;
  k.input = kview(a.input, "input");
  k.weight = kview(a.weight, "weight");
  // the Python float, checked on the double against eps's spec and rounded to float32 once
  throw_if_error(check_scalar(ScalarArg::kEps, a.eps, &k.eps));
  k.freqs = kview(a.freqs, "freqs");
  k.positions = kview(a.positions, "positions");
  k.slots = kview(a.slots, "slots");
  k.kvcache = kview(a.kvcache, "kvcache");
  k.page_size = a.page_size;
  return k;
}

namespace {

// kside_store (CPU, CUDA, XPU / composed) and kside_store_composed: one kernel template over Run
// (op_glue.h run_op). On CUDA, positions and slots cannot be range-checked here without a device
// synchronization: the CUDA backend skips (writes nothing for) a token whose position or slot is
// out of range.
template <Run R>
void kside_kernel(std::int64_t recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor positions,
                  Tensor slots, Tensor kvcache, std::int64_t page_size, bool enable_pdl) {
  run_op<KStoreOp, R>(
      KTorchArgs{krecipe_of_id(recipe), input, weight, eps, freqs, positions, slots, kvcache, page_size}, enable_pdl);
}

// ---- kside_store_plan: SGLang's plan-driven call, the plan decoded here (CPU) ------------------
// The recipe is its index in the library's key-side list (krecipes() in Python).
// out_loc's element at index i (any integer dtype, converted to int64 exactly as
// Tensor.to(torch.int64) does: unsigned 64-bit values wrap).
using torch::headeronly::ScalarType;
std::int64_t loc_at(const char* base, std::int64_t stride, ScalarType st, std::int64_t i) {
  const char* p = base;
  switch (st) {
    case ScalarType::Byte: return *reinterpret_cast<const std::uint8_t*>(p + i * stride * 1);
    case ScalarType::Char: return *reinterpret_cast<const std::int8_t*>(p + i * stride * 1);
    case ScalarType::Short: return *reinterpret_cast<const std::int16_t*>(p + i * stride * 2);
    case ScalarType::UInt16: return *reinterpret_cast<const std::uint16_t*>(p + i * stride * 2);
    case ScalarType::Int: return *reinterpret_cast<const std::int32_t*>(p + i * stride * 4);
    case ScalarType::UInt32: return *reinterpret_cast<const std::uint32_t*>(p + i * stride * 4);
    case ScalarType::Long: return *reinterpret_cast<const std::int64_t*>(p + i * stride * 8);
    default: return std::int64_t(*reinterpret_cast<const std::uint64_t*>(p + i * stride * 8));  // UInt64
  }
}

bool integer_dtype(ScalarType st) {
  switch (st) {
    case ScalarType::Byte: case ScalarType::Char: case ScalarType::Short: case ScalarType::UInt16:
    case ScalarType::Int: case ScalarType::UInt32: case ScalarType::Long: case ScalarType::UInt64:
      return true;
    default: return false;
  }
}

// Each token's position and slot from SGLang's plan (docs/KSIDE-SPEC.md section 1; the same rule
// as indexer_q.plan_positions_slots, which computes it with torch ops on a device): plan (N, 16)
// uint8 little-endian records, out_loc (M,) of any integer dtype, both in host memory. Extend
// {u32 seq_len, u16 ragged_id, ...}: seq_len 0xFFFFFFFF or ragged_id >= M skips the token, slot =
// out_loc[ragged_id]; decode {u32 seq_len, ...}: skipped unless seq_len % ratio == 0, slot =
// out_loc[t]. position = int32(seq_len - ratio) (unsigned 32-bit subtraction); a skipped token
// gets slot -1 and position 0. The checks and messages are plan_positions_slots's (kside.py).
void check_plan(const Tensor& plan, const Tensor& out_loc, bool is_decode, std::int64_t ratio) {
  check_viewable(plan, "plan", "2");
  if (plan.scalar_type() != ScalarType::Byte) fail("plan", "expected a uint8 tensor of shape (N, 16)");
  if (plan.dim() != 2 || plan.size(1) != 16) fail("plan", "expected shape (N, 16), got " + shape_text(plan));
  check_viewable(out_loc, "out_loc", "1");
  if (out_loc.dim() != 1 || !integer_dtype(out_loc.scalar_type()))
    fail("out_loc", "expected a 1-D integer tensor (int64, int32, ...)");
  const auto dp = plan.device(), dl = out_loc.device();
  if (dp.type() != dl.type() || dp.index() != dl.index())
    fail("out_loc", "expected the device of plan (" + device_text(plan) + "), got " + device_text(out_loc));
  if (dp.type() != StableDeviceType::CPU)
    fail("plan", "expected a CPU tensor (this kernel decodes the plan in host memory), got " + device_text(plan));
  if (ratio <= 0 || ratio > 0xFFFFFFFFll)
    fail("compress_ratio", "expected a positive 32-bit integer, got " + std::to_string(ratio));
  const std::int64_t n = plan.size(0), m = out_loc.size(0);
  if (is_decode && m != n)
    fail("out_loc", "expected " + std::to_string(n) + " entries (one per token, decode), got " + std::to_string(m));
  if (!is_decode && m < n)
    fail("out_loc", "expected at least " + std::to_string(n) + " entries (extend), got " + std::to_string(m));
}

void decode_plan(const Tensor& plan, const Tensor& out_loc, bool is_decode, std::int64_t ratio,
                 std::int64_t* positions, std::int64_t* slots) {
  const std::int64_t n = plan.size(0), m = out_loc.size(0);
  if (n == 0) return;
  const auto* pb = static_cast<const std::uint8_t*>(plan.const_data_ptr());
  const std::int64_t s0 = plan.stride(0), s1 = plan.stride(1);
  const char* lb = m > 0 ? static_cast<const char*>(out_loc.const_data_ptr()) : nullptr;
  const std::int64_t ls = out_loc.stride(0);
  const ScalarType lt = out_loc.scalar_type();
  const std::uint32_t r = std::uint32_t(ratio);
  for (std::int64_t t = 0; t < n; ++t) {
    const std::uint8_t* rec = pb + t * s0;
    const std::uint32_t seq = std::uint32_t(rec[0]) | std::uint32_t(rec[s1]) << 8 |
                              std::uint32_t(rec[2 * s1]) << 16 | std::uint32_t(rec[3 * s1]) << 24;
    bool take;
    std::int64_t at;
    if (is_decode) {
      take = seq % r == 0;
      at = t;
    } else {
      at = std::int64_t(std::uint32_t(rec[4 * s1]) | std::uint32_t(rec[5 * s1]) << 8);
      take = seq != 0xFFFFFFFFu && at < m;
    }
    slots[t] = take ? loc_at(lb, ls, lt, at) : -1;
    positions[t] = take ? std::int64_t(std::int32_t(seq - r)) : 0;
  }
}

// freqs as the library's (max_pos, 64) float32 table: the table itself, or SGLang's complex64
// (max_pos, 32) freq_cis read as its float32 view (complex_table_view, op_glue.h).
TensorView freqs_view(const Tensor& freqs) {
  check_viewable(freqs, "freqs", "2");
  if (is_complex(freqs.scalar_type())) return complex_table_view(freqs);
  return kview(freqs, "freqs");
}

void kside_plan_cpu(std::int64_t recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor plan,
                    Tensor out_loc, bool is_decode, std::int64_t compress_ratio, Tensor kvcache,
                    std::int64_t page_size, bool /*enable_pdl*/) {
  const KRecipeId id = knames().at_index(recipe);
  check_plan(plan, out_loc, is_decode, compress_ratio);
  const NamedTensor all[] = {{"input", &input}, {"weight", &weight},   {"freqs", &freqs},
                             {"plan", &plan},   {"out_loc", &out_loc}, {"kvcache", &kvcache}};
  check_devices(all, device_text);
  // positions and slots, int64 (N,) each, in host memory: on the stack for a decode-sized call
  const std::int64_t n = plan.size(0);
  constexpr std::int64_t kSmall = 64;
  std::int64_t small[2 * kSmall];
  std::vector<std::int64_t> large;
  std::int64_t* buf = small;
  if (n > kSmall) {
    large.resize(std::size_t(2 * n));
    buf = large.data();
  }
  decode_plan(plan, out_loc, is_decode, compress_ratio, buf, buf + n);
  KStoreArgs k;
  k.recipe = id;
  k.input = kview(input, "input");
  k.weight = kview(weight, "weight");
  throw_if_error(check_scalar(ScalarArg::kEps, eps, &k.eps));
  k.freqs = freqs_view(freqs);
  const Device cpu{DeviceType::kCPU, 0};
  k.positions = TensorView::contiguous(n > 0 ? buf : nullptr, DType::kInt64, {n}, cpu);
  k.slots = TensorView::contiguous(n > 0 ? buf + n : nullptr, DType::kInt64, {n}, cpu);
  k.kvcache = kview(kvcache, "kvcache");
  k.page_size = page_size;
  run_on_cpu(k);
}


}  // namespace
}  // namespace torch_binding
}  // namespace indexer_q

// enable_pdl is used by the CUDA backend only (programmatic dependent launch, sm_90+; on by
// default as for the query side's operators, ignored before sm_90 and by the other devices).
// The recipe (a str) is read without the stable ABI's leaking std::string conversion (binding.h).
#define IQ_KRECIPE_BOX(f, R)                                                 \
  IQ_BOX_RECIPE(IQ_KERNEL(f, R), &indexer_q::torch_binding::krecipe_id_of, \
                &indexer_q::torch_binding::unknown_krecipe_text)
#define IQ_KSIDE_ARGS                                                                             \
  "(str recipe, Tensor input, Tensor weight, float eps, Tensor freqs, Tensor positions, "        \
  "Tensor slots, Tensor(a!) kvcache, int page_size, bool enable_pdl=True) -> ()"
STABLE_TORCH_LIBRARY_FRAGMENT(indexer_q, m) {
  m.def("kside_store" IQ_KSIDE_ARGS);
  m.def("kside_store_composed" IQ_KSIDE_ARGS);
  m.def("krecipes() -> str[]");  // served by Python from recipe_table (op.cpp)
  // SGLang's plan-driven call in one operator: the recipe is its index in krecipes(); positions
  // and slots are derived from plan / out_loc / is_decode / compress_ratio (CPU: in the binding;
  // other devices: kside.py's CompositeExplicitAutograd kernel, with torch ops on the device);
  // freqs may be the complex64 (max_pos, 32) freq_cis table (read as its float32 view)
  m.def("kside_store_plan(int recipe, Tensor input, Tensor weight, float eps, Tensor freqs, "
        "Tensor plan, Tensor out_loc, bool is_decode, int compress_ratio, Tensor(a!) kvcache, "
        "int page_size, bool enable_pdl=True) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CPU, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_kernel, kCpu));
  m.impl("kside_store_plan", TORCH_BOX(&indexer_q::torch_binding::kside_plan_cpu));
}

#if defined(INDEXER_Q_TORCH_CUDA)
STABLE_TORCH_LIBRARY_IMPL(indexer_q, CUDA, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_kernel, kCuda));
}
#endif

STABLE_TORCH_LIBRARY_IMPL(indexer_q, XPU, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_kernel, kComposed));
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CompositeExplicitAutograd, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_kernel, kComposed));
  m.impl("kside_store_composed", IQ_KRECIPE_BOX(kside_kernel, kComposed));
}
