// What the operators' glue shares (op.cpp: the query side; kside.cpp: the key side): the
// binding's argument errors, a torch tensor described as an indexer_q::TensorView, the check
// that tensors on a device the library cannot name share one device, and the runs on the
// library's CPU and CUDA backends. LibTorch stable ABI only, like binding.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>
#include <utility>
#include <string_view>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "binding.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace torch_binding {

using StableDeviceType = torch::headeronly::DeviceType;

// Throws "indexer_q: <arg>: <what>" (a RuntimeError in Python).
[[noreturn]] inline void fail(const char* arg, const std::string& what) {
  throw std::runtime_error(std::string("indexer_q: ") + arg + ": " + what);
}

// One side's recipe names (the library's list), read once: a name is looked up with no
// allocation. `side` goes into the messages ("" for the query side, "key-side " for the other).
template <class Id>
struct RecipeNames {
  std::vector<std::pair<std::string, Id>> entries;
  const char* side;
  RecipeNames(const std::vector<Id>& ids, const char* (*name_of)(Id) noexcept, const char* side_) : side(side_) {
    for (Id r : ids) entries.emplace_back(name_of(r), r);
  }
  std::int64_t id_of(std::string_view name) const noexcept {
    for (const auto& e : entries)
      if (name == e.first) return std::int64_t(e.second);
    return -1;
  }
  std::string unknown_text(std::string_view name) const {
    std::string list;
    for (const auto& e : entries) list += (list.empty() ? "" : ", ") + e.first;
    return "indexer_q: recipe: unknown " + std::string(side) + "recipe '" + std::string(name) + "'; expected one of " +
           list;
  }
  Id of_id(std::int64_t id) const {
    for (const auto& e : entries)
      if (std::int64_t(e.second) == id) return e.second;
    fail("recipe", "unknown " + std::string(side) + "recipe id " + std::to_string(id));
  }
};

// The library's DType of a torch dtype; none for a dtype the library has no DType for.
inline std::optional<DType> library_dtype(torch::headeronly::ScalarType t) {
  using torch::headeronly::ScalarType;
  switch (t) {
    case ScalarType::BFloat16: return DType::kBFloat16;
    case ScalarType::Half: return DType::kFloat16;
    case ScalarType::Float: return DType::kFloat32;
    case ScalarType::Float8_e4m3fn: return DType::kFloat8E4M3;
    case ScalarType::Float8_e4m3fnuz: return DType::kFloat8E4M3FNUZ;
    case ScalarType::Byte: return DType::kUInt8;
    case ScalarType::Char: return DType::kInt8;
    case ScalarType::Int: return DType::kInt32;
    case ScalarType::Long: return DType::kInt64;
    default: return std::nullopt;
  }
}

// What a TensorView needs of t before its dtype: defined, strided, at most TensorView::kMaxDims
// dims. The last message gives the operator's own limit as its callers have always written it
// ("expected at most <max_dims_text> dims, got <n>").
inline void check_viewable(const Tensor& t, const char* arg, const char* max_dims_text) {
  if (!t.defined()) fail(arg, "expected a tensor, got an undefined tensor");
  if (t.layout() != torch::headeronly::Layout::Strided)
    fail(arg, "expected a strided (dense) tensor, got a sparse or other non-strided layout");
  const std::int64_t nd = t.dim();
  if (nd > TensorView::kMaxDims)
    fail(arg, std::string("expected at most ") + max_dims_text + " dims, got " + std::to_string(nd));
}

// t (checked by check_viewable) as a TensorView of dtype `dtype`: sizes, strides, the data
// pointer (null when empty) and the device. CUDA tensors are CUDA memory; any other device is
// described as CUDA memory of the same index, after check_devices made sure that all tensors
// share that device.
inline TensorView view_with_dtype(const Tensor& t, DType dtype) {
  TensorView v;
  v.dtype = dtype;
  v.ndim = int(t.dim());
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

// A tensor argument and its name.
struct NamedTensor {
  const char* name;
  const Tensor* t;
};

// Every tensor of `all` is defined; where any is on a device the library cannot name (neither
// CPU nor CUDA: XPU, ...), all are on the device of the first (the operator's input):
// "expected the device of <first> (<its device>), got <device>", devices written by
// device_text (each operator family's own).
// A list of NamedTensor held in a caller's fixed array (no allocation).
struct NamedList {
  const NamedTensor* first;
  std::size_t count;
  const NamedTensor* begin() const { return first; }
  const NamedTensor* end() const { return first + count; }
};

template <class List>
void check_devices(const List& all, std::string (*device_text)(const Tensor&)) {
  bool other_device = false;
  for (const NamedTensor& x : all) {
    if (!x.t->defined()) fail(x.name, "expected a tensor, got an undefined tensor");
    const auto ty = x.t->device().type();
    if (ty != StableDeviceType::CPU && ty != StableDeviceType::CUDA) other_device = true;
  }
  if (!other_device) return;
  const NamedTensor& first = *std::begin(all);
  const auto d0 = first.t->device();
  for (const NamedTensor& x : all) {
    const auto d = x.t->device();
    if (d.type() != d0.type() || d.index() != d0.index())
      fail(x.name, std::string("expected the device of ") + first.name + " (" + device_text(*first.t) + "), got " +
                       device_text(*x.t));
  }
}

// Runs the library's CPU backend on a call's arguments (OpArgs or KStoreArgs) with torch's
// intra-op thread count (torch.get_num_threads(), through the stable C shim).
template <class Args>
void run_on_cpu(const Args& args) {
  Options o;
  o.backend = Backend::kCpu;
  o.num_threads = int(std::max<std::uint32_t>(1u, torch::stable::get_num_threads()));
  throw_if_error(indexer_q::run(args, o));
}

#if defined(INDEXER_Q_TORCH_CUDA)
// Runs the library's CUDA backend on a call's arguments, on torch's current stream of the
// device of `lead` (the operator's input), that device current. The dispatcher also lands here
// when lead is on the CPU but another tensor is on CUDA: then no guard or stream is needed, the
// validator reports the device mismatch.
// side_inputs_ready: Options::side_inputs_ready (query side only; the key side passes false).
template <class Args>
void run_on_cuda(const Tensor& lead, const Args& args, bool enable_pdl, bool side_inputs_ready = false) {
  Options o;
  o.backend = Backend::kCuda;
  o.enable_pdl = enable_pdl;
  o.side_inputs_ready = side_inputs_ready;
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  if (lead.is_cuda()) {
    const int32_t index = lead.get_device_index();
    guard.emplace(index);
    void* stream = nullptr;
    IQ_SHIM_CHECK(aoti_torch_get_current_cuda_stream(index, &stream));
    o.stream = stream;
  }
  throw_if_error(indexer_q::run(args, o));
}
#endif

}  // namespace torch_binding
}  // namespace indexer_q
