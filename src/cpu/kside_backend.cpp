// The key side of the CPU backend: the portable kernel (src/common/kside_row.h), the table of
// the ISA variants' kernels, and the split of a call's tokens over the thread pool.
#include <algorithm>
#include <cstdint>
#include <string>

#include "common/float_env.h"
#include "common/kside_problem.h"
#include "common/kside_row.h"
#include "common/rsq_sm90.h"
#include "cpu/cpu_internal.h"
#include "cpu/kside_internal.h"
#include "cpu/thread_pool.h"

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

template <class KR>
void kside_scalar_tokens(const KProblem& p, std::int64_t t_begin, std::int64_t t_end) {
  float w[kHeadDim], x[kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) w[i] = kside_load(p.weight, p.dtype, i);
  for (std::int64_t t = t_begin; t < t_end; ++t) {
    const std::int64_t slot = p.slots[t];
    if (slot < 0) continue;
    const std::int64_t pos = kside_position(p.positions, p.pos_dtype, t);
    for (int i = 0; i < kHeadDim; ++i) x[i] = kside_load(p.input, p.dtype, t * p.input_stride + i);
    std::uint8_t *codes, *scales;
    kside_token_ptrs<KR>(p.cache, p.page_bytes, p.page_size, p.log2_page, slot, &codes, &scales);
    kside_row<KR>(x, w, p.eps, p.freqs + pos * kFreqsDim, codes, scales, RsqSm90{});
  }
}

struct KJob {
  const KProblem* p;
  KsideKernelFn kernel;
  int nparts;
};

void kside_part(void* ctx, int part) {
  const KJob& j = *static_cast<const KJob*>(ctx);
  const std::int64_t begin = j.p->N * part / j.nparts;
  const std::int64_t end = j.p->N * (part + 1) / j.nparts;
  if (end > begin) {
    const IeeeFloatScope ieee;  // this thread's MXCSR may have flush-to-zero set
    j.kernel(*j.p, begin, end);
  }
}

}  // namespace

void kside_kernel_scalar(const KProblem& p, std::int64_t t_begin, std::int64_t t_end) {
  with_krecipe(p.recipe, [&](auto r) { kside_scalar_tokens<decltype(r)>(p, t_begin, t_end); });
}

KsideKernelFn kside_kernel_for(CpuIsa isa) {
#define IQ_CPU_VARIANT(Enum, suffix, check) \
  if (isa == CpuIsa::Enum) return &kside_kernel_##suffix;
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT
  return nullptr;
}

}  // namespace cpu

Status kside_cpu_run(const KProblem& p, CpuIsa isa, int num_threads) {
  const cpu::KsideKernelFn kernel = cpu::kside_kernel_for(isa);
  if (kernel == nullptr || !cpu_isa_supported(isa))
    return Status::Unavailable(std::string("indexer_q: cpu_isa: '") + cpu_isa_name(isa) +
                               "' is not supported by this build or processor");
  if (p.N <= 0) return Status::Ok();
  // Parts: at most one per thread, none smaller than 32 tokens; small calls stay inline (the
  // query side's row threshold, a token being about as much work as a row).
  std::int64_t nparts = num_threads < 1 ? 1 : num_threads;
  nparts = std::min<std::int64_t>(nparts, (p.N + 31) / 32);
  nparts = std::min<std::int64_t>(nparts, 1024);
  if (nparts > 1 && p.N >= cpu::inline_row_threshold()) {
    cpu::KJob job{&p, kernel, int(nparts)};
    if (cpu::pool_try_run(int(nparts), &cpu::kside_part, &job)) return Status::Ok();
  }
  const IeeeFloatScope ieee;
  kernel(p, 0, p.N);
  return Status::Ok();
}

}  // namespace detail
}  // namespace indexer_q
