// The key side's PyTorch operators (SPEC-kside.md, docs/TORCH.md "The key side"):
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
#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "binding.h"
#include "indexer_q/indexer_q.h"
#include "kside_binding.h"

namespace indexer_q {
namespace torch_binding {

namespace {

using torch::headeronly::ScalarType;
using StableDeviceType = torch::headeronly::DeviceType;

[[noreturn]] void fail(const char* arg, const std::string& what) {
  throw std::runtime_error(std::string("indexer_q: ") + arg + ": " + what);
}

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
  if (!t.defined()) fail(arg, "expected a tensor, got an undefined tensor");
  if (t.layout() != torch::headeronly::Layout::Strided)
    fail(arg, "expected a strided (dense) tensor, got a sparse or other non-strided layout");
  const std::int64_t nd = t.dim();
  if (nd > TensorView::kMaxDims) fail(arg, "expected at most 2 dims, got " + std::to_string(nd));
  TensorView v;
  switch (t.scalar_type()) {
    case ScalarType::BFloat16: v.dtype = DType::kBFloat16; break;
    case ScalarType::Half: v.dtype = DType::kFloat16; break;
    case ScalarType::Float: v.dtype = DType::kFloat32; break;
    case ScalarType::Byte: v.dtype = DType::kUInt8; break;
    case ScalarType::Char: v.dtype = DType::kInt8; break;
    case ScalarType::Int: v.dtype = DType::kInt32; break;
    case ScalarType::Long: v.dtype = DType::kInt64; break;
    case ScalarType::Float8_e4m3fn: v.dtype = DType::kFloat8E4M3; break;
    default: fail(arg, std::string("expected dtype ") + kside_expected_dtype(arg) + ", got another dtype");
  }
  v.ndim = int(nd);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = strides[d];
  }
  v.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  const auto dev = t.device();
  v.device = dev.type() == StableDeviceType::CPU ? Device{DeviceType::kCPU, 0}
                                                 : Device{DeviceType::kCUDA, int(dev.index())};
  return v;
}

}  // namespace

KRecipeId krecipe_or_throw(const std::string& name) {
  KRecipeId id;
  if (parse_krecipe(name, &id)) return id;
  std::string names;
  for (KRecipeId r : all_krecipes()) names += (names.empty() ? "" : ", ") + std::string(krecipe_name(r));
  fail("recipe", "unknown key-side recipe '" + name + "'; expected one of " + names);
}

KStoreArgs make_kargs(const KTorchArgs& a) {
  struct Named {
    const char* name;
    const Tensor* t;
  };
  const Named all[] = {{"input", &a.input},         {"weight", &a.weight}, {"freqs", &a.freqs},
                       {"positions", &a.positions}, {"slots", &a.slots},   {"kvcache", &a.kvcache}};
  bool other_device = false;
  for (const auto& x : all) {
    if (!x.t->defined()) fail(x.name, "expected a tensor, got an undefined tensor");
    const auto ty = x.t->device().type();
    if (ty != StableDeviceType::CPU && ty != StableDeviceType::CUDA) other_device = true;
  }
  if (other_device) {  // devices the library cannot name: all on input's device
    const auto d0 = a.input.device();
    for (const auto& x : all) {
      const auto d = x.t->device();
      if (d.type() != d0.type() || d.index() != d0.index())
        fail(x.name, "expected the device of input (" + device_text(a.input) + "), got " + device_text(*x.t));
    }
  }
  KStoreArgs k;
  k.recipe = a.recipe;
  k.input = kview(a.input, "input");
  k.weight = kview(a.weight, "weight");
  k.eps = float(a.eps);  // the Python float, rounded to float32 once
  k.freqs = kview(a.freqs, "freqs");
  k.positions = kview(a.positions, "positions");
  k.slots = kview(a.slots, "slots");
  k.kvcache = kview(a.kvcache, "kvcache");
  k.page_size = a.page_size;
  return k;
}

namespace {

void kside_cpu(std::string recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor positions,
               Tensor slots, Tensor kvcache, std::int64_t page_size, bool /*enable_pdl*/) {
  const KTorchArgs a{krecipe_or_throw(recipe), input, weight, eps, freqs, positions, slots, kvcache, page_size};
  Options o;
  o.backend = Backend::kCpu;
  o.num_threads = int(std::max<std::uint32_t>(1u, torch::stable::get_num_threads()));
  throw_if_error(indexer_q::run(make_kargs(a), o));
}

#if defined(INDEXER_Q_TORCH_CUDA)
// positions and slots cannot be range-checked here without a device synchronization: the CUDA
// backend skips (writes nothing for) a token whose position or slot is out of range.
void kside_cuda(std::string recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor positions,
                Tensor slots, Tensor kvcache, std::int64_t page_size, bool enable_pdl) {
  const KTorchArgs a{krecipe_or_throw(recipe), input, weight, eps, freqs, positions, slots, kvcache, page_size};
  const KStoreArgs k = make_kargs(a);
  Options o;
  o.backend = Backend::kCuda;
  o.enable_pdl = enable_pdl;
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  if (input.is_cuda()) {
    const int32_t index = input.get_device_index();
    guard.emplace(index);
    void* stream = nullptr;
    IQ_SHIM_CHECK(aoti_torch_get_current_cuda_stream(index, &stream));
    o.stream = stream;
  }
  throw_if_error(indexer_q::run(k, o));
}
#endif

void kside_composed(std::string recipe, Tensor input, Tensor weight, double eps, Tensor freqs, Tensor positions,
                    Tensor slots, Tensor kvcache, std::int64_t page_size, bool /*enable_pdl*/) {
  kside_composed_forward(
      KTorchArgs{krecipe_or_throw(recipe), input, weight, eps, freqs, positions, slots, kvcache, page_size});
}

std::vector<std::string> krecipes_op() {
  std::vector<std::string> out;
  for (KRecipeId r : all_krecipes()) out.emplace_back(krecipe_name(r));
  return out;
}

}  // namespace
}  // namespace torch_binding
}  // namespace indexer_q

// enable_pdl is used by the CUDA backend only (programmatic dependent launch, sm_90+; on by
// default as for the query side's operators, ignored before sm_90 and by the other devices).
#define IQ_KSIDE_ARGS                                                                             \
  "(str recipe, Tensor input, Tensor weight, float eps, Tensor freqs, Tensor positions, "        \
  "Tensor slots, Tensor(a!) kvcache, int page_size, bool enable_pdl=True) -> ()"
STABLE_TORCH_LIBRARY_FRAGMENT(indexer_q, m) {
  m.def("kside_store" IQ_KSIDE_ARGS);
  m.def("kside_store_composed" IQ_KSIDE_ARGS);
  m.def("krecipes() -> str[]");
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CPU, m) {
  m.impl("kside_store", TORCH_BOX(&indexer_q::torch_binding::kside_cpu));
}

#if defined(INDEXER_Q_TORCH_CUDA)
STABLE_TORCH_LIBRARY_IMPL(indexer_q, CUDA, m) {
  m.impl("kside_store", TORCH_BOX(&indexer_q::torch_binding::kside_cuda));
}
#endif

STABLE_TORCH_LIBRARY_IMPL(indexer_q, XPU, m) {
  m.impl("kside_store", TORCH_BOX(&indexer_q::torch_binding::kside_composed));
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CompositeExplicitAutograd, m) {
  m.impl("kside_store", TORCH_BOX(&indexer_q::torch_binding::kside_composed));
  m.impl("kside_store_composed", TORCH_BOX(&indexer_q::torch_binding::kside_composed));
  m.impl("krecipes", TORCH_BOX(&indexer_q::torch_binding::krecipes_op));
}
