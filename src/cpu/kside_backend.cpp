// The key side of the CPU backend: the portable kernel (src/common/kside_row.h), the table of
// the ISA variants' kernels, and the split of a call's tokens over the thread pool.
//
// Duplicate slots (docs/KSIDE.md): the result is the one-thread result at every thread count,
// i.e. the last token (in token order) of a slot decides its row. The kernels store tokens in
// order, so one thread gives it, and so does one part of a threaded call; two parts storing
// into one row would race (a row could even mix two tokens' bytes). So before a threaded call
// writes anything, kside_parts_share_no_row makes sure no row belongs to two parts (without
// allocating); a call where one does runs on the calling thread (the rare case: engines give
// every token its own slot).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>
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

constexpr int kMaxParts = 1024;  // parts of one call at most

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
  std::int64_t lo[kMaxParts], hi[kMaxParts];  // each part's smallest and largest stored slot
  std::atomic<bool> shared{false};             // a row of two parts
};

void kside_range_part(void* ctx, int part) {
  KDupJob& j = *static_cast<KDupJob*>(ctx);
  const KProblem& p = *j.p;
  std::int64_t lo = INT64_MAX, hi = -1;
  for (std::int64_t t = p.N * part / j.nparts, end = p.N * (part + 1) / j.nparts; t < end; ++t) {
    const std::int64_t slot = p.slots[t];
    if (slot < 0) continue;
    lo = std::min(lo, slot);
    hi = std::max(hi, slot);
  }
  j.lo[part] = lo;
  j.hi[part] = hi;
}

// CHECK false: write the part's number into the first two code bytes of each of its rows;
// CHECK true: find whether one of them holds another number (the row is another part's too).
template <class KR, bool CHECK>
void kside_mark_tokens(KDupJob& j, int part) {
  const KProblem& p = *j.p;
  const std::uint8_t b0 = std::uint8_t(part), b1 = std::uint8_t(part >> 8);
  for (std::int64_t t = p.N * part / j.nparts, end = p.N * (part + 1) / j.nparts; t < end; ++t) {
    const std::int64_t slot = p.slots[t];
    if (slot < 0) continue;
    std::uint8_t *codes, *scales;
    kside_token_ptrs<KR>(p.cache, p.page_bytes, p.page_size, p.log2_page, slot, &codes, &scales);
    if (!CHECK) {
      __atomic_store_n(codes, b0, __ATOMIC_RELAXED);
      __atomic_store_n(codes + 1, b1, __ATOMIC_RELAXED);
    } else if (__atomic_load_n(codes, __ATOMIC_RELAXED) != b0 || __atomic_load_n(codes + 1, __ATOMIC_RELAXED) != b1) {
      j.shared.store(true, std::memory_order_relaxed);
      return;
    }
  }
}

template <bool CHECK>
void kside_mark_part(void* ctx, int part) {
  KDupJob& j = *static_cast<KDupJob*>(ctx);
  if (CHECK && j.shared.load(std::memory_order_relaxed)) return;
  with_krecipe(j.p->recipe, [&](auto r) { kside_mark_tokens<decltype(r), CHECK>(j, part); });
}

// True when the parts of a threaded call share no row: each row is then stored by one part,
// in token order (the last token of a slot wins, as on one thread). First the parts' slot
// ranges (slots read once, in order): disjoint ranges (the usual case: an engine's slots grow
// with the tokens) settle it. Otherwise each part writes its number into the first two code
// bytes of its rows, then checks them: a row of two parts ends with at most one part's number,
// so some part finds another's (exact; every marked row is written again by the call). False
// also when the pool is busy (the caller then runs inline anyway).
bool kside_parts_share_no_row(const KProblem& p, int nparts) {
  KDupJob job;
  job.p = &p;
  job.nparts = nparts;
  if (!pool_try_run(nparts, &kside_range_part, &job)) return false;
  std::pair<std::int64_t, std::int64_t> r[kMaxParts];
  int n = 0;
  for (int k = 0; k < nparts; ++k)
    if (job.hi[k] >= 0) r[n++] = {job.lo[k], job.hi[k]};
  std::sort(r, r + n);
  bool disjoint = true;
  for (int k = 1; k < n; ++k) disjoint = disjoint && r[k - 1].second < r[k].first;
  if (disjoint) return true;
  if (!pool_try_run(nparts, &kside_mark_part<false>, &job)) return false;
  if (!pool_try_run(nparts, &kside_mark_part<true>, &job)) return false;
  return !job.shared.load(std::memory_order_relaxed);
}

}  // namespace

void kside_kernel_scalar(const KProblem& p, std::int64_t t_begin, std::int64_t t_end) {
  with_krecipe(p.recipe, [&](auto r) { kside_scalar_tokens<decltype(r)>(p, t_begin, t_end); });
}

void kside_rsq16_scalar(float* v16) {
  for (int j = 0; j < 16; ++j) v16[j] = rsq_sm90(v16[j]);
}

KsideRsqFn kside_rsq16_for(CpuIsa isa) {
#define IQ_CPU_VARIANT(Enum, suffix, check) \
  if (isa == CpuIsa::Enum) return &kside_rsq16_##suffix;
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT
  return nullptr;
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
  nparts = std::min<std::int64_t>(nparts, cpu::kMaxParts);
  // Parallel only when no two stored tokens share a slot (else, or with a busy pool: inline, in
  // token order: the last token of a slot wins, as on one thread).
  if (nparts > 1 && p.N >= cpu::inline_row_threshold() && cpu::kside_parts_share_no_row(p, int(nparts))) {
    cpu::KJob job{&p, kernel, int(nparts)};
    if (cpu::pool_try_run(int(nparts), &cpu::kside_part, &job)) return Status::Ok();
  }
  const IeeeFloatScope ieee;
  kernel(p, 0, p.N);
  return Status::Ok();
}

}  // namespace detail
}  // namespace indexer_q
