// CPU backend: ISA detection and dispatch, the INDEXER_Q_CPU_ISA override, threads.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/float_env.h"
#include "common/problem.h"
#include "cpu/cpu_internal.h"
#include "cpu/thread_pool.h"
#include "indexer_q/indexer_q.h"

#if defined(__x86_64__) || defined(_M_X64)
#define IQ_CPU_X86 1
#if defined(_MSC_VER)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#endif

#if defined(__linux__)
#include <sched.h>
#endif

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

#if defined(IQ_CPU_X86)
void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
#if defined(_MSC_VER)
  int regs[4];
  __cpuidex(regs, int(leaf), int(sub));
  for (int i = 0; i < 4; ++i) r[i] = unsigned(regs[i]);
#else
  r[0] = r[1] = r[2] = r[3] = 0;
  __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}

std::uint64_t xgetbv0() {
#if defined(_MSC_VER)
  return _xgetbv(0);
#else
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t(hi) << 32) | lo;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned r[4];
  cpuid(0, 0, r);
  const unsigned max_leaf = r[0];
  if (max_leaf < 1) return f;
  cpuid(1, 0, r);
  const unsigned ecx1 = r[2];
  f.fma = (ecx1 >> 12) & 1;
  f.f16c = (ecx1 >> 29) & 1;
  const bool osxsave = (ecx1 >> 27) & 1;
  const bool avx = (ecx1 >> 28) & 1;
  if (osxsave && avx) {
    const std::uint64_t xcr0 = xgetbv0();
    f.os_avx = (xcr0 & 0x6) == 0x6;               // XMM + YMM state
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM state
  }
  if (max_leaf >= 7) {
    cpuid(7, 0, r);
    const unsigned ebx7 = r[1];
    f.avx2 = (ebx7 >> 5) & 1;
    f.avx512f = (ebx7 >> 16) & 1;
    f.avx512dq = (ebx7 >> 17) & 1;
    f.avx512bw = (ebx7 >> 30) & 1;
    f.avx512vl = (ebx7 >> 31) & 1;
  }
  if (!avx) f.os_avx = f.os_avx512 = false;
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

bool runtime_ok(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  (void)f;
#define IQ_CPU_VARIANT(Enum, suffix, check) \
  if (isa == CpuIsa::Enum) return (check);
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT
  return false;
}

std::string supported_list() {
  std::string s;
  for (CpuIsa i : supported_cpu_isas()) s += (s.empty() ? "" : ", ") + std::string(cpu_isa_name(i));
  return s;
}

int default_threads() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? int(n) : 1;
}

std::atomic<int> g_num_threads{0};  // 0 = not set yet: default_threads()
// Below this many rows a call stays on the calling thread. Measured on the 16-core AVX-512
// host (bench/HISTORY.md, "CPU"): with back-to-back calls, 2 threads through the pool were
// as fast as 1 inline at 64 rows (5.2 vs 5.0-5.5 us) and faster from 128 rows on (7.9 vs 9.5 us).
std::atomic<std::int64_t> g_inline_rows{128};

struct Job {
  const Problem* p;
  KernelFn kernel;
  std::int64_t rows;
  int nparts;
};

void run_part(void* ctx, int part) {
  const Job& j = *static_cast<const Job*>(ctx);
  const std::int64_t begin = j.rows * part / j.nparts;
  const std::int64_t end = j.rows * (part + 1) / j.nparts;
  if (end > begin) {
    const IeeeFloatScope ieee;  // this thread's MXCSR may have flush-to-zero set
    j.kernel(*j.p, begin, end);
  }
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

namespace {
// Every compiled-in variant's entry points, from the one ISA list.
struct VariantEntry {
  CpuIsa isa;
  KernelFn kernel;
  QuantizeFn quantize, encode_fp4, quantize_vllm, encode_mxfp4, encode_rne_fp4;
  Stage1Fn stage1_fp4;
  RneUe8m0Fn rne_ue8m0;
};
const VariantEntry kVariants[] = {
#define IQ_CPU_VARIANT(Enum, suffix, check)                                                       \
  {CpuIsa::Enum, &kernel_##suffix, &quantize_##suffix, &encode_fp4_##suffix, &quantize_vllm_##suffix, \
   &encode_mxfp4_##suffix, &encode_rne_fp4_##suffix, &stage1_fp4_##suffix, &rne_ue8m0_##suffix},
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT
};
const VariantEntry* variant_of(CpuIsa isa) {
  for (const VariantEntry& v : kVariants)
    if (v.isa == isa) return &v;
  return nullptr;
}
}  // namespace

KernelFn kernel_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->kernel : nullptr; }
QuantizeFn quantize_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->quantize : nullptr; }
QuantizeFn encode_fp4_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->encode_fp4 : nullptr; }
QuantizeFn quantize_vllm_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->quantize_vllm : nullptr; }
QuantizeFn encode_mxfp4_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->encode_mxfp4 : nullptr; }
QuantizeFn encode_rne_fp4_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->encode_rne_fp4 : nullptr; }
Stage1Fn stage1_fp4_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->stage1_fp4 : nullptr; }
RneUe8m0Fn rne_ue8m0_for(CpuIsa isa) { return variant_of(isa) ? variant_of(isa)->rne_ue8m0 : nullptr; }

Status isa_from_env_value(const char* value, CpuIsa* out) {
  if (value == nullptr || value[0] == '\0') {
    *out = supported_cpu_isas().back();
    return Status::Ok();
  }
  const std::string v(value);
  CpuIsa isa;
  if (!parse_cpu_isa(v, &isa)) {
    return Status::InvalidArgument("indexer_q: INDEXER_Q_CPU_ISA: unknown value '" + v +
                                   "'; expected scalar, avx2, avx512 or auto");
  }
  if (isa == CpuIsa::kAuto) {
    *out = supported_cpu_isas().back();
    return Status::Ok();
  }
  if (!cpu_isa_supported(isa)) {
    return Status::Unavailable("indexer_q: INDEXER_Q_CPU_ISA: '" + v +
                               "' is not supported by this build or processor (supported: " +
                               supported_list() + ")");
  }
  *out = isa;
  return Status::Ok();
}

std::int64_t inline_row_threshold() { return g_inline_rows.load(std::memory_order_relaxed); }
void set_inline_row_threshold(std::int64_t rows) {
  g_inline_rows.store(rows < 0 ? 0 : rows, std::memory_order_relaxed);
}

}  // namespace cpu

Status cpu_run(const Problem& p, CpuIsa isa, int num_threads) {
  const cpu::KernelFn kernel = cpu::kernel_for(isa);
  if (kernel == nullptr || !cpu_isa_supported(isa))
    return Status::Unavailable(std::string("indexer_q: cpu_isa: '") + cpu_isa_name(isa) +
                               "' is not supported by this build or processor");
  const std::int64_t rows = p.B * p.H;
  if (rows <= 0) return Status::Ok();
  // Parts: at most one per thread, and no part smaller than a few dozen rows.
  std::int64_t nparts = num_threads < 1 ? 1 : num_threads;
  nparts = std::min<std::int64_t>(nparts, (rows + 31) / 32);
  nparts = std::min<std::int64_t>(nparts, 1024);  // the pool's worker cap + the caller
  if (nparts > 1 && rows >= cpu::inline_row_threshold()) {
    cpu::Job job{&p, kernel, rows, int(nparts)};
    if (cpu::pool_try_run(int(nparts), &cpu::run_part, &job)) return Status::Ok();
  }
  const IeeeFloatScope ieee;
  kernel(p, 0, rows);  // small batch, busy pool, or nested call: inline on this thread
  return Status::Ok();
}

}  // namespace detail

bool cpu_isa_supported(CpuIsa isa) noexcept {
  if (isa == CpuIsa::kAuto) return true;
  return detail::cpu::kernel_for(isa) != nullptr && detail::cpu::runtime_ok(isa);
}

std::vector<CpuIsa> supported_cpu_isas() {
  std::vector<CpuIsa> v;
#define IQ_CPU_VARIANT(Enum, suffix, check) \
  if (cpu_isa_supported(CpuIsa::Enum)) v.push_back(CpuIsa::Enum);
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT
  return v;
}

Status active_cpu_isa(CpuIsa* out) {
  struct Choice {
    Status status;
    CpuIsa isa = CpuIsa::kScalar;
  };
  static const Choice choice = [] {
    Choice c;
    c.status = detail::cpu::isa_from_env_value(std::getenv("INDEXER_Q_CPU_ISA"), &c.isa);
    return c;
  }();
  if (!choice.status.ok()) return choice.status;
  if (out) *out = choice.isa;
  return Status::Ok();
}

Status set_cpu_num_threads(int n) {
  if (n < 1)
    return Status::InvalidArgument("indexer_q: set_cpu_num_threads: n: expected >= 1, got " +
                                   std::to_string(n));
  detail::cpu::g_num_threads.store(n, std::memory_order_relaxed);
  return Status::Ok();
}

int cpu_num_threads() noexcept {
  const int n = detail::cpu::g_num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  static const int hw = detail::cpu::default_threads();  // the process's CPUs, read once
  return hw;
}

}  // namespace indexer_q
