// The key side of the CPU backend (docs/KSIDE-SPEC.md): one kernel per ISA variant of
// src/cpu/isa_list.inc, each the generic body of src/cpu/kside_body.h instantiated per key
// recipe (kside_kernel_scalar: src/common/kside_row.h as is).
#pragma once

#include <cstdint>

#include "common/kside_problem.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {
namespace cpu {

// Stores tokens [t_begin, t_end) of p (tokens with a negative slot are skipped). Same bytes as
// kside_reference_run.
using KsideKernelFn = void (*)(const KProblem& p, std::int64_t t_begin, std::int64_t t_end);

#define IQ_CPU_VARIANT(Enum, suffix, check) \
  void kside_kernel_##suffix(const KProblem& p, std::int64_t t_begin, std::int64_t t_end);
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT

// The key-side kernel of a compiled-in variant (nullptr if `isa` is not compiled in).
KsideKernelFn kside_kernel_for(CpuIsa isa);

// Step 5 of 16 values in place, as the variant's kernel computes it (for the tests: same bits as
// rsq_sm90 for every input). kside_rsq16_scalar is rsq_sm90 itself.
using KsideRsqFn = void (*)(float* v16);
#define IQ_CPU_VARIANT(Enum, suffix, check) void kside_rsq16_##suffix(float* v16);
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT
KsideRsqFn kside_rsq16_for(CpuIsa isa);  // nullptr if `isa` is not compiled in

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
