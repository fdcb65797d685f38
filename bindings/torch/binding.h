// The query side's operators (op.cpp, composed.cpp) as the glue (op_glue.h) sees them: their
// arguments as torch tensors and their conversion to the library's OpArgs.
//
// The binding does not validate the op's contract itself: it describes each tensor as an
// indexer_q::TensorView (data pointer, sizes, strides, dtype, device), puts them into an
// indexer_q::OpArgs with the recipe, and lets the library's one validator (indexer_q::validate /
// indexer_q::run) decide. It only reports what an OpArgs cannot express: a recipe name the
// library does not know, a torch dtype the library has no DType for, a non-strided layout, more
// than 4 dims, and devices other than CPU and CUDA (see make_args below).
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "indexer_q/indexer_q.h"
#include "op_glue.h"

namespace indexer_q {
namespace torch_binding {

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
  // Set: the library's view of freqs, made by the caller (quant_q_alloc: a complex64 freq_cis
  // read as its float32 table, complex_table_view); freqs is then used for its device only.
  const TensorView* freqs_view = nullptr;
};

// The query side's names for IQ_BOX_RECIPE: the id of a name (-1 if unknown, no allocation), the
// unknown-name message, and the recipe of an id (throws for an id outside the library's list).
std::int64_t recipe_id_of(std::string_view name) noexcept;
std::string unknown_recipe_text(std::string_view name);
RecipeId recipe_of_id(std::int64_t id);

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

// The query-side operators' description for the glue (op_glue.h run_op).
struct QuantQOp {
  using Torch = TorchArgs;
  static indexer_q::OpArgs lib_args(const TorchArgs& a) { return make_args(a); }
  static void composed(const TorchArgs& a) { composed_forward(a); }
  static const Tensor& lead(const TorchArgs& a) { return a.q_input; }
};

}  // namespace torch_binding
}  // namespace indexer_q
