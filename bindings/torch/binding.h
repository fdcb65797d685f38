// Glue between torch tensors (LibTorch stable ABI) and the indexer_q C++ API.
//
// The binding does not validate the op's contract itself: it describes each tensor as an
// indexer_q::TensorView (data pointer, sizes, strides, dtype, device) and lets the library's one
// validator (indexer_q::validate / the op) decide. It only reports what a TensorView cannot
// express: a torch dtype the library has no DType for, a non-strided layout, more than 4 dims,
// and devices other than CPU and CUDA (see make_views below).
#pragma once

#include <cstdint>
#include <string>

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

// The op's tensor arguments, in schema order, with their names for messages.
struct OpArgs {
  const Tensor& q_input;
  const Tensor& q_fp8;
  const Tensor& weight;
  const Tensor& weights_out;
  double weight_scale;
  const Tensor& freqs;
  const Tensor& positions;
};

// Throws (a torch error: RuntimeError in Python) carrying the Status message, which names the
// offending argument. No-op for an ok Status.
void throw_if_error(const Status& s);

// The TensorViews of all six tensors. For tensors on a device the library cannot name (anything but CPU and CUDA, e.g. XPU), the binding first checks that every tensor
// is on q_input's device, then describes them all as CUDA memory of that index: the validator
// then checks shapes, dtypes, strides and overlap and does not read `positions` (device memory).
struct Views {
  TensorView q_input, q_fp8, weight, weights_out, freqs, positions;
};
Views make_views(const OpArgs& a);

// The validator alone (nothing is written). Throws on error.
void validate_or_throw(const OpArgs& a, const Views& v);

// The composed ATen implementation (composed.cpp): validates, then computes SPEC.md's steps with
// ATen operations on the tensors' device and writes q_fp8 and weights_out.
void composed_forward(const OpArgs& a);

}  // namespace torch_binding
}  // namespace indexer_q
