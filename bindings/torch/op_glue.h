// The torch glue of every operator of the extension (op.cpp: the query side; kside.cpp: the key
// side; the next op the same way). An operator brings only its own description:
//   - its arguments as torch tensors (a struct, Op::Torch) and their conversion to the library's
//     argument struct (Op::lib_args: one to_view per tensor, its own messages),
//   - its composed ATen implementation (Op::composed) and the tensor whose device a CUDA run takes
//     (Op::lead),
//   - its schema and one kernel template over Run, registered per dispatch key (IQ_BOX_RECIPE for a
//     str recipe argument).
// Everything else is here, once: the recipe names (a str read without the stable ABI's leaking
// std::string conversion; an int index), a torch tensor described as an indexer_q::TensorView, the
// check that tensors on a device the library cannot name share one device, the Status -> torch
// error translation, and the runs (run_op: the library's CPU / CUDA / reference backend, the
// validator alone, or the composed implementation). LibTorch stable ABI only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/shim_utils.h>

// Throws if a stable C shim call fails. torch >= 2.13 headers name it
// STABLE_TORCH_ERROR_CODE_CHECK; 2.11 / 2.12 headers only have TORCH_ERROR_CODE_CHECK.
#if defined(STABLE_TORCH_ERROR_CODE_CHECK)
#define IQ_SHIM_CHECK(call) STABLE_TORCH_ERROR_CODE_CHECK(call)
#else
#define IQ_SHIM_CHECK(call) TORCH_ERROR_CODE_CHECK(call)
#endif

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace torch_binding {

using torch::stable::Tensor;
using StableDeviceType = torch::headeronly::DeviceType;

// Throws (a torch error: RuntimeError in Python) carrying the Status message, which names the
// offending argument: torch turns a std::exception escaping a kernel into a Python RuntimeError
// carrying what(), the library's "indexer_q: <argument>: <what was expected>, got <what>".
// No-op for an ok Status.
inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.message());
}

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
  // The recipe at `index` in the library's list (an operator's int recipe argument: Python's
  // RECIPES.index(name) / KSIDE_RECIPES.index(name), cheaper per call than a str).
  Id at_index(std::int64_t index) const {
    if (index < 0 || index >= std::int64_t(entries.size()))
      fail("recipe", "expected the index of a " + std::string(side) + "recipe in the library's list (0 to " +
                         std::to_string(entries.size() - 1) + "), got " + std::to_string(index));
    return entries[std::size_t(index)].second;
  }
};

// ---- a str recipe argument: a str in every schema, never a std::string in a kernel -------------
// The stable ABI's conversion of a str argument to std::string (ToImpl<std::string>, torch 2.10 to
// 2.13) copies the string into a heap std::string it never frees: 48-80 bytes leaked per call.
// So no kernel here takes a std::string: IQ_BOX_RECIPE(kernel, lookup, unknown) boxes a kernel
// whose first parameter is the recipe's id (int64). Its boxed function reads the str argument
// itself through the stable C shim (length, c_str), looks the name up in a table built once (no
// allocation), frees the string handle as the conversion would, and puts the id in its place on
// the stack before the kernel's own unboxing (TORCH_BOX) runs: the same on every torch version
// with str arguments in the stable ABI, whether its conversion leaks or not.
//
// lookup(name) gives the id, or -1 for a name the library does not know: the kernel then runs
// with id -1 (its unboxing takes ownership of the stack's tensors, so they are freed; its first
// statement throws on the id) and the error thrown is unknown(name), the message naming it.
using BoxedKernel = void (*)(StableIValue* stack, std::uint64_t num_args, std::uint64_t num_outputs);
using RecipeLookup = std::int64_t (*)(std::string_view name) noexcept;
using UnknownRecipe = std::string (*)(std::string_view name);

template <BoxedKernel kernel, RecipeLookup lookup, UnknownRecipe unknown>
void recipe_boxed(StableIValue* stack, std::uint64_t num_args, std::uint64_t num_outputs) {
  if (num_args < 1) throw std::runtime_error("indexer_q: recipe: the schema has no arguments");
  StringHandle handle = torch::stable::detail::to<StringHandle>(stack[0]);
  std::size_t length = 0;
  const char* data = nullptr;
  std::int64_t id = -1;
  std::string message;
  try {
    IQ_SHIM_CHECK(torch_string_length(handle, &length));
    IQ_SHIM_CHECK(torch_string_c_str(handle, &data));
    const std::string_view name(data, length);
    id = lookup(name);
    if (id < 0) message = unknown(name);  // an error path: allocating is fine here
  } catch (...) {
    torch_delete_string(handle);
    throw;
  }
  IQ_SHIM_CHECK(torch_delete_string(handle));
  stack[0] = torch::stable::detail::from(id);
  if (id >= 0) return kernel(stack, num_args, num_outputs);
  try {
    kernel(stack, num_args, num_outputs);  // frees the stack's tensors; throws on id -1
  } catch (const std::exception&) {
  }
  throw std::runtime_error(message);
}

#define IQ_BOX_RECIPE(func, lookup, unknown) \
  (&indexer_q::torch_binding::recipe_boxed<&TORCH_BOX(func), (lookup), (unknown)>)


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

// t as the TensorView of argument `arg`: check_viewable (max_dims_text: the operator's limit as
// its messages write it), then its dtype: one the library has no DType for, or FNUZ where the
// operator takes none (take_fnuz false), calls bad_dtype(), which throws the operator's own message.
template <class BadDType>
TensorView to_view(const Tensor& t, const char* arg, const char* max_dims_text, BadDType bad_dtype,
                   bool take_fnuz = true) {
  check_viewable(t, arg, max_dims_text);
  const std::optional<DType> dtype = library_dtype(t.scalar_type());
  if (!dtype || (!take_fnuz && *dtype == DType::kFloat8E4M3FNUZ)) bad_dtype();
  return view_with_dtype(t, *dtype);
}

// As Python writes tuple(t.shape): "(4, 8)", "(4,)", "()".
inline std::string shape_text(const Tensor& t) {
  std::string s = "(";
  for (std::int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + (t.dim() == 1 ? ",)" : ")");
}

inline bool is_complex(torch::headeronly::ScalarType t) {
  using torch::headeronly::ScalarType;
  return t == ScalarType::ComplexHalf || t == ScalarType::ComplexFloat || t == ScalarType::ComplexDouble;
}

// A RoPE table given as SGLang's complex64 (max_pos, 32) freq_cis (checked by check_viewable):
// the library's (max_pos, 64) float32 table as its float32 view (the same bytes; what
// python/indexer_q/_glue.py freqs_table makes with a view op, without the op). Other complex
// dtypes, shapes and strides are refused naming freqs_cis, with freqs_table's messages.
inline TensorView complex_table_view(const Tensor& freqs) {
  if (freqs.scalar_type() != torch::headeronly::ScalarType::ComplexFloat)
    fail("freqs_cis", "expected complex64 (max_pos, 32) or float32 (max_pos, 64), got another complex dtype");
  if (freqs.dim() != 2 || freqs.size(1) != 32)
    fail("freqs_cis", "expected shape (max_pos, 32) for a complex64 table, got " + shape_text(freqs));
  if (freqs.stride(1) != 1 || (freqs.size(0) > 1 && freqs.stride(0) != 32))
    fail("freqs_cis", "expected a contiguous table");
  TensorView v = view_with_dtype(freqs, DType::kFloat32);
  v.sizes[1] = 64;
  v.strides[0] = 64;
  v.strides[1] = 1;
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

// Where an operator's kernel runs the call: the library's CPU, CUDA or scalar reference backend,
// the library's validator alone (nothing written), or the operator's composed ATen
// implementation. Each operator has ONE kernel template over Run; its registration picks the
// instance per dispatch key.
enum class Run { kCpu, kCuda, kReference, kCheck, kComposed };

// Runs a call of operator Op (its description: Op::Torch, the arguments as torch tensors;
// Op::lib_args(a), the library's argument struct; Op::composed(a); Op::lead(a), the tensor whose
// device and current stream a CUDA run takes) where R says. enable_pdl / side_inputs_ready:
// Options' fields, read by the CUDA backend only.
template <class Op, Run R>
void run_op(const typename Op::Torch& a, [[maybe_unused]] bool enable_pdl = true,
            [[maybe_unused]] bool side_inputs_ready = false) {
  if constexpr (R == Run::kComposed) {
    Op::composed(a);
  } else if constexpr (R == Run::kCheck) {
    throw_if_error(indexer_q::validate(Op::lib_args(a)));
  } else if constexpr (R == Run::kCpu) {
    run_on_cpu(Op::lib_args(a));
  } else if constexpr (R == Run::kReference) {
    Options o;
    o.backend = Backend::kReference;
    throw_if_error(indexer_q::run(Op::lib_args(a), o));
  } else {
#if defined(INDEXER_Q_TORCH_CUDA)
    run_on_cuda(Op::lead(a), Op::lib_args(a), enable_pdl, side_inputs_ready);
#else
    static_assert(R != Run::kCuda, "Run::kCuda needs a build with the CUDA backend");
#endif
  }
}

}  // namespace torch_binding
}  // namespace indexer_q

// The instance of an operator's kernel template f for Run::R, for the registrations:
// TORCH_BOX(IQ_KERNEL(f, kCpu)), or IQ_BOX_RECIPE(IQ_KERNEL(f, kCpu), ...) for a str recipe.
#define IQ_KERNEL(f, R) (&indexer_q::torch_binding::f<indexer_q::torch_binding::Run::R>)
