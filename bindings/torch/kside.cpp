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
#include "torch_views.h"

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
  check_viewable(t, arg, "2");
  const std::optional<DType> dtype = library_dtype(t.scalar_type());
  if (!dtype || *dtype == DType::kFloat8E4M3FNUZ)  // the key side takes no FNUZ tensor
    fail(arg, std::string("expected dtype ") + kside_expected_dtype(arg) + ", got another dtype");
  return view_with_dtype(t, *dtype);
}

}  // namespace

namespace {
// The library's key-side names, read once: a name is looked up with no allocation.
struct KNameTable {
  std::vector<std::pair<std::string, KRecipeId>> entries;
  KNameTable() {
    for (KRecipeId r : all_krecipes()) entries.emplace_back(krecipe_name(r), r);
  }
};
const KNameTable& knames() {
  static const KNameTable t;
  return t;
}

std::int64_t krecipe_id_of(std::string_view name) noexcept {
  for (const auto& e : knames().entries)
    if (name == e.first) return std::int64_t(e.second);
  return -1;
}

std::string unknown_krecipe_text(std::string_view name) {
  std::string list;
  for (const auto& e : knames().entries) list += (list.empty() ? "" : ", ") + e.first;
  return "indexer_q: recipe: unknown key-side recipe '" + std::string(name) + "'; expected one of " + list;
}

KRecipeId krecipe_of_id(std::int64_t id) {
  for (const auto& e : knames().entries)
    if (std::int64_t(e.second) == id) return e.second;
  fail("recipe", "unknown key-side recipe id " + std::to_string(id));
}
}  // namespace

KRecipeId krecipe_or_throw(const std::string& name) {
  const std::int64_t id = krecipe_id_of(name);
  if (id < 0) throw std::runtime_error(unknown_krecipe_text(name));
  return KRecipeId(id);
}

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

void kside_cpu(std::int64_t recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor positions,
               Tensor slots, Tensor kvcache, std::int64_t page_size, bool /*enable_pdl*/) {
  const KTorchArgs a{krecipe_of_id(recipe), input, weight, eps, freqs, positions, slots, kvcache, page_size};
  run_on_cpu(make_kargs(a));
}

#if defined(INDEXER_Q_TORCH_CUDA)
// positions and slots cannot be range-checked here without a device synchronization: the CUDA
// backend skips (writes nothing for) a token whose position or slot is out of range.
void kside_cuda(std::int64_t recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor positions,
                Tensor slots, Tensor kvcache, std::int64_t page_size, bool enable_pdl) {
  const KTorchArgs a{krecipe_of_id(recipe), input, weight, eps, freqs, positions, slots, kvcache, page_size};
  run_on_cuda(input, make_kargs(a), enable_pdl);
}
#endif

void kside_composed(std::int64_t recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor positions,
                    Tensor slots, Tensor kvcache, std::int64_t page_size, bool /*enable_pdl*/) {
  kside_composed_forward(
      KTorchArgs{krecipe_of_id(recipe), input, weight, eps, freqs, positions, slots, kvcache, page_size});
}


}  // namespace
}  // namespace torch_binding
}  // namespace indexer_q

// enable_pdl is used by the CUDA backend only (programmatic dependent launch, sm_90+; on by
// default as for the query side's operators, ignored before sm_90 and by the other devices).
// The recipe (a str) is read without the stable ABI's leaking std::string conversion (binding.h).
#define IQ_KRECIPE_BOX(f)                                                                   \
  IQ_BOX_RECIPE(&indexer_q::torch_binding::f, &indexer_q::torch_binding::krecipe_id_of, \
                &indexer_q::torch_binding::unknown_krecipe_text)
#define IQ_KSIDE_ARGS                                                                             \
  "(str recipe, Tensor input, Tensor weight, float eps, Tensor freqs, Tensor positions, "        \
  "Tensor slots, Tensor(a!) kvcache, int page_size, bool enable_pdl=True) -> ()"
STABLE_TORCH_LIBRARY_FRAGMENT(indexer_q, m) {
  m.def("kside_store" IQ_KSIDE_ARGS);
  m.def("kside_store_composed" IQ_KSIDE_ARGS);
  m.def("krecipes() -> str[]");  // served by Python from recipe_table (op.cpp)
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CPU, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_cpu));
}

#if defined(INDEXER_Q_TORCH_CUDA)
STABLE_TORCH_LIBRARY_IMPL(indexer_q, CUDA, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_cuda));
}
#endif

STABLE_TORCH_LIBRARY_IMPL(indexer_q, XPU, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_composed));
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CompositeExplicitAutograd, m) {
  m.impl("kside_store", IQ_KRECIPE_BOX(kside_composed));
  m.impl("kside_store_composed", IQ_KRECIPE_BOX(kside_composed));
}
