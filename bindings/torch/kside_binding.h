// Glue of the key side's torch operators (kside.cpp) and their composed ATen implementation
// (composed_kside.cpp). LibTorch stable ABI only, like binding.h.
#pragma once

#include <cstdint>
#include <string>

#include "binding.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace torch_binding {

// The key-side operator's arguments as torch tensors, in schema order.
struct KTorchArgs {
  KRecipeId recipe;
  const Tensor& input;
  const Tensor& weight;
  double eps;
  const Tensor& freqs;
  const Tensor& positions;
  const Tensor& slots;
  const Tensor& kvcache;
  std::int64_t page_size;
};

// The library's KStoreArgs for the tensors (one TensorView each). Tensors on a device the library
// cannot name (XPU, ...) must all be on input's device; they are then described as CUDA memory of
// that index, so the validator checks shapes, dtypes and strides without reading positions/slots.
KStoreArgs make_kargs(const KTorchArgs& a);

// The composed ATen implementation (composed_kside.cpp): validates, then computes docs/KSIDE-SPEC.md
// section 2 with ATen operations on the tensors' device and writes the valid tokens' cache rows.
void kside_composed_forward(const KTorchArgs& a);

// The key-side operator's description for the glue (op_glue.h run_op).
struct KStoreOp {
  using Torch = KTorchArgs;
  static KStoreArgs lib_args(const KTorchArgs& a) { return make_kargs(a); }
  static void composed(const KTorchArgs& a) { kside_composed_forward(a); }
  static const Tensor& lead(const KTorchArgs& a) { return a.input; }
};

}  // namespace torch_binding
}  // namespace indexer_q
