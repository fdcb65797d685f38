// Message pieces shared by the validators (src/validate.cpp, src/validate_kside.cpp): a view's
// sizes and strides as text, the InvalidArgument Status naming an argument, and the element
// alignment check of a data pointer (one rule, one message for both sides).
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

// "(2, 3, 128)", "(5,)" for one dim; never reads past TensorView::kMaxDims.
inline std::string dims_text(const TensorView& t, const std::int64_t* dims) {
  std::ostringstream os;
  os << "(";
  for (int d = 0; d < t.ndim && d < TensorView::kMaxDims; ++d) os << (d ? ", " : "") << dims[d];
  if (t.ndim == 1) os << ",";
  os << ")";
  return os.str();
}
inline std::string shape_text(const TensorView& t) { return dims_text(t, t.sizes); }
inline std::string strides_text(const TensorView& t) { return dims_text(t, t.strides); }

// The device's default backend (what Backend::kAuto runs its tensors on; backends.inc).
Backend default_backend(DeviceType t) noexcept;
// The options of every call (both sides) against the backend list: options.backend (kAuto
// resolved to the device's default backend, whose device must be the tensors'), options.cpu_isa
// and options.num_threads; *resolved gets the backend. Allocates only when it fails.
Status resolve_backend(const Options& options, const Device& dev, Backend* resolved);

// "indexer_q: <arg>: <what>"
inline Status bad_arg(const char* arg, const std::string& what) {
  return Status::InvalidArgument(std::string("indexer_q: ") + arg + ": " + what);
}

// A non-null data pointer must be aligned to its dtype's element size: the host code reads and
// writes typed elements (row.h's load_float) and the CUDA kernels fault on a misaligned one.
// Ok for a null pointer (the null check is the validators' own) and for an unknown dtype (size 0).
// Allocates only when it fails. element_aligned(): the rule alone.
inline bool element_aligned(const TensorView& t) {
  const std::size_t es = dtype_size(t.dtype);
  return t.data == nullptr || es <= 1 || reinterpret_cast<std::uintptr_t>(t.data) % es == 0;
}
inline Status check_element_aligned(const char* arg, const TensorView& t) {
  if (element_aligned(t)) return Status::Ok();
  const std::size_t es = dtype_size(t.dtype);
  const std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(t.data);
  std::ostringstream os;
  os << "data pointer 0x" << std::hex << addr << std::dec << " is not aligned to the " << es << "-byte elements of "
     << dtype_name(t.dtype);
  return bad_arg(arg, os.str());
}

}  // namespace detail
}  // namespace indexer_q
