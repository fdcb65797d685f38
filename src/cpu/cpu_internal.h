// Internals of the CPU backend shared by its translation units, its tests and its benchmark.
// Kernel translation units (kernel_*.cpp) are compiled with ISA flags: they include only this
// header, src/common/problem.h and intrinsics, and call no inline function of a shared header
// (an out-of-line copy compiled with AVX-512 could otherwise be picked by the linker for the
// portable code).
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {
namespace cpu {

// Processes rows [row_begin, row_end) of p (row r = b * H + h). Same bytes as reference_run.
using KernelFn = void (*)(const Problem& p, std::int64_t row_begin, std::int64_t row_end);

// quantize_<suffix>: steps 8..9 alone (v = clamp(y[i] * inv), e4m3fn code) for n values,
// n a multiple of 16: the same code path as the kernel's, exposed so that tests can sweep
// the encoder over many bit patterns.
// encode_fp4_<suffix>: the E2M1 code of y[i] * inv (one code per byte, 0..15) for n values, n a
// multiple of 16, by the kernel's FP4 encoder. The kernels see only y rounded to bf16 (v4_fp4
// rounds after the Hadamard multiply) and inv a power of two; callers of this hook keep to that.
// quantize_vllm_<suffix> (Quantizer::kVllm, FP8): the code of y[i] * inv by the kernel's encoder,
// which is row.h's vllm_fp8_code(y[i], q_scale) when inv = 1 / q_scale (q_scale a power of two
// in [2^-22, 2^120] or +Inf, inv = 0); n a multiple of 16.
// encode_mxfp4_<suffix> (Quantizer::kVllm, E2M1): row.h's mx_e2m1_encode(y[i] * inv), one code per
// byte (0..15), for any float y and any inv; n a multiple of 16.
// SGLang V4.1's FP4 steps (Quantizer::kFp4Rne, kFp4TwoStage), by the kernel's code, n a multiple
// of 16: encode_rne_fp4_<suffix>: row.h's e2m1_encode_rne(y[i] * inv) for any float y and inv;
// stage1_fp4_<suffix>: row.h's stage1_value(x[i], inv1, sc) (the kernels may give +0 for its -0);
// rne_ue8m0_<suffix>: row.h's rne_ue8m0_of_amax(amax[i]) and rne_inverse of it, for amax >= 0 or
// NaN.
#define IQ_CPU_VARIANT(Enum, suffix, check)                                                        \
  void kernel_##suffix(const Problem& p, std::int64_t row_begin, std::int64_t row_end);           \
  void quantize_##suffix(const float* y, float inv, std::uint8_t* out, std::int64_t n);           \
  void encode_fp4_##suffix(const float* y, float inv, std::uint8_t* out, std::int64_t n);         \
  void quantize_vllm_##suffix(const float* y, float inv, std::uint8_t* out, std::int64_t n);      \
  void encode_mxfp4_##suffix(const float* y, float inv, std::uint8_t* out, std::int64_t n);       \
  void encode_rne_fp4_##suffix(const float* y, float inv, std::uint8_t* out, std::int64_t n);     \
  void stage1_fp4_##suffix(const float* x, float inv1, float sc, float* out, std::int64_t n);     \
  void rne_ue8m0_##suffix(const float* amax, std::uint8_t* e, float* inv, std::int64_t n);
#include "cpu/isa_list.inc"
#undef IQ_CPU_VARIANT

// What the processor (cpuid) and the OS (xgetbv) support.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, os_avx = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, os_avx512 = false;
};
const CpuFeatures& cpu_features();

// The kernel of a compiled-in variant (nullptr if `isa` is not compiled in).
KernelFn kernel_for(CpuIsa isa);
using QuantizeFn = void (*)(const float* y, float inv, std::uint8_t* out, std::int64_t n);
QuantizeFn quantize_for(CpuIsa isa);
QuantizeFn encode_fp4_for(CpuIsa isa);
QuantizeFn quantize_vllm_for(CpuIsa isa);
QuantizeFn encode_mxfp4_for(CpuIsa isa);
QuantizeFn encode_rne_fp4_for(CpuIsa isa);
using Stage1Fn = void (*)(const float* x, float inv1, float sc, float* out, std::int64_t n);
Stage1Fn stage1_fp4_for(CpuIsa isa);
using RneUe8m0Fn = void (*)(const float* amax, std::uint8_t* e, float* inv, std::int64_t n);
RneUe8m0Fn rne_ue8m0_for(CpuIsa isa);
// The AVX-512 kernel's FP8 encoder of rows known to hold no NaN or Inf (the kernel's fast path):
// the e4m3fn code of y[i] * inv for finite products of magnitude below 464 (no clamp needed there:
// they all round to at most 448), n a multiple of 32. nullptr where that variant is not compiled in.
QuantizeFn fp8_fast_encoder_avx512();

// Interprets a value of INDEXER_Q_CPU_ISA (nullptr or "" = unset): the ISA to use, or an error
// Status naming INDEXER_Q_CPU_ISA and the value. active_cpu_isa() caches this for the process.
Status isa_from_env_value(const char* value, CpuIsa* out);

// Rows below which a call runs on the calling thread even when more threads are allowed
// (chosen by measurement, see bench/HISTORY.md). Adjustable for benchmarks and tests.
std::int64_t inline_row_threshold();
void set_inline_row_threshold(std::int64_t rows);

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
