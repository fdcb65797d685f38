// Message pieces shared by the validators (src/validate.cpp, src/validate_kside.cpp): a view's
// sizes and strides as text, and the InvalidArgument Status naming an argument.
#pragma once

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

// "indexer_q: <arg>: <what>"
inline Status bad_arg(const char* arg, const std::string& what) {
  return Status::InvalidArgument(std::string("indexer_q: ") + arg + ": " + what);
}

}  // namespace detail
}  // namespace indexer_q
