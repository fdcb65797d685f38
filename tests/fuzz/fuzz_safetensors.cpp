// libFuzzer target: the safetensors reader (tools/io) on hostile bytes.
// Every input is parsed; a file that parses is also turned into a conformance case, and a case
// that loads is compared against itself (every output byte must match) and, for FP8 recipes of an
// FN format, turned into its FNUZ twin. The reader promises "false + a one-line reason, never a
// crash": any sanitizer report, abort or a true return without the promised shapes is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "io/safetensors.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace indexer_q::io;
  StFile file;
  std::string error;
  if (!parse_safetensors(data, size, &file, &error)) {
    if (error.empty()) fail("parse_safetensors returned false without a reason");
    return 0;
  }
  // A parsed tensor holds exactly prod(shape) * element size bytes.
  for (const auto& kv : file.tensors) {
    const StTensor& t = kv.second;
    std::int64_t n = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0) fail("a parsed tensor has a negative dimension");
      if (d != 0 && n > (std::int64_t(1) << 40) / d) fail("a parsed tensor is larger than its input");
      n *= d;
    }
    if (t.data.size() > size) fail("a parsed tensor holds more bytes than the file");
  }
  ConformanceCase c;
  error.clear();
  if (!load_case(file, &c, &error)) {
    if (error.empty()) fail("load_case returned false without a reason");
    return 0;
  }
  // The views of a loaded case describe exactly the bytes it holds.
  const std::int64_t rows = c.B * c.H;
  if (std::int64_t(c.q_out.size()) != rows * c.out_bytes_per_row()) fail("q_out size != B*H*row bytes");
  if (std::int64_t(c.weights_out.size()) != rows) fail("weights_out size != B*H");
  if (!c.q_sf.empty() && std::int64_t(c.q_sf.size()) != rows * 4) fail("q_sf size != B*H*4");
  const indexer_q::TensorView views[] = {c.q_input_view(), c.weight_view(), c.freqs_view(),
                                         c.positions_view()};
  const std::vector<std::uint8_t>* bufs[] = {&c.q_input, &c.weight, &c.freqs, &c.positions};
  for (int i = 0; i < 4; ++i) {
    const std::int64_t bytes = views[i].numel() * std::int64_t(indexer_q::dtype_size(views[i].dtype));
    if (bytes != std::int64_t(bufs[i]->size())) fail("a case view does not match its buffer");
  }
  const Diff d = compare_outputs(c, c.q_out.data(), c.q_sf.empty() ? nullptr : c.q_sf.data(),
                                 c.weights_out.data());
  if (!d.exact()) fail("a case differs from itself");
  ConformanceCase fnuz;
  derive_fnuz_case(c, &fnuz);
  return 0;
}
