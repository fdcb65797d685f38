// Glue between torch tensors (LibTorch stable ABI) and the indexer_q C++ API.
//
// The binding does not validate the op's contract itself: it describes each tensor as an
// indexer_q::TensorView (data pointer, sizes, strides, dtype, device), puts them into an
// indexer_q::OpArgs with the recipe, and lets the library's one validator (indexer_q::validate /
// indexer_q::run) decide. It only reports what an OpArgs cannot express: a recipe name the
// library does not know, a torch dtype the library has no DType for, a non-strided layout, more
// than 4 dims, and devices other than CPU and CUDA (see make_views below).
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
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

// The op's arguments as torch tensors, in schema order. q_sf is null when the caller passed None
// (FP8 recipes without scale_out; for FP4 and scale_out recipes the library's validator then
// names q_sf / q_scale as missing). For a recipe with scale_out it is the float32 row-scale output
// q_scale, (B, H, 1) or (B, H).
struct TorchArgs {
  RecipeId recipe;
  const Tensor& q_input;
  const Tensor& q_out;  // q_fp8 or q_fp4, as the recipe says
  const Tensor* q_sf;   // nullptr = None; FP4 block scales, or scale_out's q_scale
  const Tensor& weight;
  const Tensor& weights_out;
  double weight_scale;
  const Tensor& freqs;
  const Tensor& positions;
  double head_scale = 1.0;  // the folds' second factor (vllm_* recipes, head_scale_first)
};

// Throws (a torch error: RuntimeError in Python) carrying the Status message, which names the
// offending argument. No-op for an ok Status.
void throw_if_error(const Status& s);

// ---- the recipe argument: a str in every schema, never a std::string in a kernel -------------
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

// The query side's names for IQ_BOX_RECIPE: the id of a name (-1 if unknown, no allocation), the
// unknown-name message, and the recipe of an id (throws for an id outside the library's list).
std::int64_t recipe_id_of(std::string_view name) noexcept;
std::string unknown_recipe_text(std::string_view name);
RecipeId recipe_of_id(std::int64_t id);

// The recipe of a name ("v4_fp8", ...). Throws "indexer_q: recipe: unknown recipe '<name>';
// expected one of <every name of the library's list>" for a name the library does not know.
RecipeId recipe_or_throw(const std::string& name);

// The library's OpArgs for the tensors: one TensorView per tensor (q_scale stays an empty view
// when q_sf is None). For tensors on a device the library cannot name (anything but CPU and CUDA,
// e.g. XPU), the binding first checks that every tensor is on q_input's device, then describes
// them all as CUDA memory of that index: the validator then checks shapes, dtypes, strides and
// overlap and does not read `positions` (device memory).
indexer_q::OpArgs make_args(const TorchArgs& a);

// The validator alone (nothing is written). Throws on error.
void validate_or_throw(const indexer_q::OpArgs& args);

// The composed ATen implementation (composed.cpp): validates, then computes the recipe's steps
// (docs/SPEC.md, docs/RECIPES.md) with ATen operations on the tensors' device and writes the
// outputs.
void composed_forward(const TorchArgs& a);

}  // namespace torch_binding
}  // namespace indexer_q
