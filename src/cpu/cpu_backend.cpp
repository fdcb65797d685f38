// CPU backend: ISA dispatch and threads. (Initial version: scalar kernel, inline.)
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/problem.h"
#include "common/row.h"

namespace indexer_q {

bool cpu_isa_supported(CpuIsa isa) noexcept { return isa == CpuIsa::kScalar; }

std::vector<CpuIsa> supported_cpu_isas() { return {CpuIsa::kScalar}; }

Status active_cpu_isa(CpuIsa* out) {
  *out = CpuIsa::kScalar;
  return Status::Ok();
}

static int g_threads = 1;
Status set_cpu_num_threads(int n) {
  if (n < 1) return Status::InvalidArgument("indexer_q: n: expected >= 1 threads, got " + std::to_string(n));
  g_threads = n;
  return Status::Ok();
}
int cpu_num_threads() noexcept { return g_threads; }

namespace detail {
Status reference_run(const Problem& p);
Status cpu_run(const Problem& p, CpuIsa, int) { return reference_run(p); }
}  // namespace detail
}  // namespace indexer_q
