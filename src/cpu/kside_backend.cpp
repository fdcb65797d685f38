// The key side of the CPU backend: the portable kernel (src/common/kside_row.h), the table of
// the ISA variants' kernels, and the split of a call's tokens over the thread pool.
//
// Duplicate slots (docs/KSIDE.md): the result is the one-thread result at every thread count,
// i.e. the last token (in token order) of a slot decides its row. The kernels store tokens in
// order, so one thread gives it; parts on several threads would race on a shared row (a row
// could even mix two tokens' bytes). So before a parallel call writes anything, two parallel
// passes look for a duplicate: the first sets one byte of every destination row to 0, the
// second exchanges it for 1 (an atomic test-and-set): a token that finds 1 shares its row with
// an earlier one. No memory is allocated; the marked bytes are in rows the call writes anyway.
// A call with a duplicate then runs on the calling thread (the rare case: engines give every
// token its own slot).
#include <algorithm>
#include <atomic>
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

// The duplicate-slot check (see the top of the file).
struct KDupJob {
  const KProblem* p;
  int nparts;
  std::atomic<bool> dup{false};
};

template <class KR, bool kTestAndSet>
void kside_mark_tokens(KDupJob& j, std::int64_t t_begin, std::int64_t t_end) {
  const KProblem& p = *j.p;
  for (std::int64_t t = t_begin; t < t_end; ++t) {
    const std::int64_t slot = p.slots[t];
    if (slot < 0) continue;
    std::uint8_t *codes, *scales;
    kside_token_ptrs<KR>(p.cache, p.page_bytes, p.page_size, p.log2_page, slot, &codes, &scales);
    if (!kTestAndSet) {
      __atomic_store_n(codes, std::uint8_t(0), __ATOMIC_RELAXED);
    } else if (__atomic_exchange_n(codes, std::uint8_t(1), __ATOMIC_RELAXED) != 0) {
      j.dup.store(true, std::memory_order_relaxed);
      return;
    }
  }
}

template <bool kTestAndSet>
void kside_mark_part(void* ctx, int part) {
  KDupJob& j = *static_cast<KDupJob*>(ctx);
  const std::int64_t begin = j.p->N * part / j.nparts;
  const std::int64_t end = j.p->N * (part + 1) / j.nparts;
  if (kTestAndSet && j.dup.load(std::memory_order_relaxed)) return;
  with_krecipe(j.p->recipe, [&](auto r) { kside_mark_tokens<decltype(r), kTestAndSet>(j, begin, end); });
}

// True when the two passes ran on the pool and found no two stored tokens sharing a slot;
// false for a duplicate, or when the pool is busy (the caller then runs inline anyway). Writes
// one byte of each destination row (every one of them is written again by the call).
bool kside_parallel_without_duplicates(const KProblem& p, int nparts) {
  KDupJob job;
  job.p = &p;
  job.nparts = nparts;
  if (!pool_try_run(nparts, &kside_mark_part<false>, &job)) return false;
  if (!pool_try_run(nparts, &kside_mark_part<true>, &job)) return false;
  return !job.dup.load(std::memory_order_relaxed);
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
  // Parallel only when no two stored tokens share a slot (else, or with a busy pool: inline, in
  // token order: the last token of a slot wins, as on one thread).
  if (nparts > 1 && p.N >= cpu::inline_row_threshold() && cpu::kside_parallel_without_duplicates(p, int(nparts))) {
    cpu::KJob job{&p, kernel, int(nparts)};
    if (cpu::pool_try_run(int(nparts), &cpu::kside_part, &job)) return Status::Ok();
  }
  const IeeeFloatScope ieee;
  kernel(p, 0, p.N);
  return Status::Ok();
}

}  // namespace detail
}  // namespace indexer_q
