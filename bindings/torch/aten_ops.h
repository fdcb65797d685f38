// The ATen operations both composed implementations are written in (composed.cpp: the query
// side; composed_kside.cpp: the key side), and their constants. Every call goes through the
// dispatcher by the stable C shim (torch_call_dispatcher, or the generated AOTI shims behind
// torch::stable::*), so the callers are stable-ABI too. The shim cannot pass a `Scalar` argument,
// so only ops without Scalar arguments are called: constants are 0-dim (or full-shape) tensors
// on the tensors' device (Consts), a + b is a - (-b).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "binding.h"

namespace indexer_q {
namespace torch_binding {

using Shape = std::vector<std::int64_t>;

// Calls an ATen operator through the dispatcher (stable C shim) and returns its first result.
// `args` must be the schema's complete argument list.
template <class... A>
Tensor aten(const char* name, const char* overload, const A&... args) {
  std::array<StableIValue, sizeof...(A)> stack{torch::stable::detail::from(args)...};
  IQ_SHIM_CHECK(torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

inline Tensor mul(const Tensor& a, const Tensor& b) { return aten("aten::mul", "Tensor", a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return aten("aten::div", "Tensor", a, b); }
inline Tensor neg(const Tensor& a) { return aten("aten::neg", "", a); }
// Floating-point tensors only (ATen's integer add / sub take an alpha Scalar, which the shim can
// only pass as a double, and integer tensors refuse that).
inline Tensor sub(const Tensor& a, const Tensor& b) { return torch::stable::subtract(a, b); }
inline Tensor add(const Tensor& a, const Tensor& b) { return sub(a, neg(b)); }  // a - (-b) == a + b
inline Tensor abs(const Tensor& a) { return aten("aten::abs", "", a); }
inline Tensor fmax(const Tensor& a, const Tensor& b) { return aten("aten::fmax", "", a, b); }
inline Tensor fmin(const Tensor& a, const Tensor& b) { return aten("aten::fmin", "", a, b); }
inline Tensor floor(const Tensor& a) { return aten("aten::floor", "", a); }
inline Tensor isnan(const Tensor& a) { return aten("aten::isnan", "", a); }
// comparisons
inline Tensor gt(const Tensor& a, const Tensor& b) { return aten("aten::gt", "Tensor", a, b); }
inline Tensor lt(const Tensor& a, const Tensor& b) { return aten("aten::lt", "Tensor", a, b); }
inline Tensor ge(const Tensor& a, const Tensor& b) { return aten("aten::ge", "Tensor", a, b); }
inline Tensor eq(const Tensor& a, const Tensor& b) { return aten("aten::eq", "Tensor", a, b); }
inline Tensor ne(const Tensor& a, const Tensor& b) { return aten("aten::ne", "Tensor", a, b); }
// logical (bool) and bitwise (integer) operations
inline Tensor land(const Tensor& a, const Tensor& b) { return aten("aten::logical_and", "", a, b); }
inline Tensor lor(const Tensor& a, const Tensor& b) { return aten("aten::logical_or", "", a, b); }
inline Tensor lnot(const Tensor& a) { return aten("aten::logical_not", "", a); }
inline Tensor lxor(const Tensor& a, const Tensor& b) { return aten("aten::logical_xor", "", a, b); }
inline Tensor band(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_and", "Tensor", a, b); }
inline Tensor bor(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_or", "Tensor", a, b); }
inline Tensor bxor(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_xor", "Tensor", a, b); }
inline Tensor shl(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_left_shift", "Tensor", a, b); }
inline Tensor shr(const Tensor& a, const Tensor& b) { return aten("aten::bitwise_right_shift", "Tensor", a, b); }
// selection, indexing, shapes, dtypes
inline Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return aten("aten::where", "self", c, a, b); }
inline Tensor index_select(const Tensor& a, std::int64_t dim, const Tensor& index) {
  return aten("aten::index_select", "", a, dim, index);
}
inline Tensor view_as_dtype(const Tensor& a, torch::headeronly::ScalarType t) {
  return aten("aten::view", "dtype", a, t);
}
inline Tensor view(const Tensor& a, const Shape& shape) { return torch::stable::view(a, shape); }
inline Tensor reshape(const Tensor& a, const Shape& shape) { return torch::stable::reshape(a, shape); }
inline Tensor pick(const Tensor& a, std::int64_t dim, std::int64_t i) { return torch::stable::select(a, dim, i); }
// A new tensor of dtype t (always a copy, so the result never aliases the input).
inline Tensor to_dtype(const Tensor& a, torch::headeronly::ScalarType t) {
  return torch::stable::to(a, t, std::nullopt, std::nullopt, std::nullopt, false, /*copy=*/true);
}

// Constants on the computation's device.
struct Consts {
  torch::stable::Device dev;
  Tensor scalar(double v, torch::headeronly::ScalarType t) const {
    return torch::stable::full(Shape{}, v, t, std::nullopt, dev);
  }
  Tensor filled(const Shape& shape, double v, torch::headeronly::ScalarType t) const {
    return torch::stable::full(shape, v, t, std::nullopt, dev);
  }
  Tensor li(std::int64_t v) const { return scalar(double(v), torch::headeronly::ScalarType::Long); }  // |v| < 2^53: exact
  Tensor f(double v) const { return scalar(v, torch::headeronly::ScalarType::Float); }  // a float32 value: exact
};

}  // namespace torch_binding
}  // namespace indexer_q
