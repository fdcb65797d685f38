// The comparison point for the CUDA backend's benchmarks: the one-warp-per-row design of the
// engines' own CUDA kernel for this op (SGLang's V4 FP8 indexer kernel, whose measured figures
// are in docs/PERFORMANCE.md), written here from its published design facts only, in SGLang 0.5.23's
// launch configuration:
//   - one warp per row, 8 rows per 256-thread block (8 warps; 4 rows per 128-thread block
//     before 0.5.23), 4 contiguous values per lane (one 8-byte load for bf16 / fp16);
//   - weight in the input dtype, int64 (or int32) positions, the freqs row read by the lanes of
//     the rotated half after the position load (the one dependent round trip);
//   - Hadamard butterflies at strides 1 and 2 in registers, then 5 shuffle stages (strides
//     4 .. 64), a warp-wide amax by 5 shuffles;
//   - the clamp to [-448, 448] and then the hardware conversion cvt.rn.satfinite.e4m3x2.f32;
//   - programmatic dependent launch (PDL) as a switch: by default (kTriggerEarly) the position is
//     read before griddepcontrol.wait (0.5.23 does so), everything else after it, and
//     griddepcontrol.launch_dependents follows the RoPE; `BaselinePdl` names the other placements.
// It computes the same bytes as the library's v4_fp8 (SPEC.md; cuda_bench compares every row it
// times with the library's scalar kernel), so timings compare like with like. v4_fp8 only. It
// takes the library's validated Problem (src/common/problem.h), the one model of the arguments.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../src/common/problem.h"
#include "../src/common/row.h"
#include "cuda_bench_common.cuh"

namespace indexer_q {
namespace bench {

// Where the baseline triggers its dependents when launched with PDL.
enum class BaselinePdl : int {
  kOff = 0,          // plain launch (no PDL attribute; griddepcontrol.* are no-ops then)
  kTriggerEarly = 1, // SGLang 0.5.23's placement: the position before the wait, the other loads
                     // after it, launch_dependents after the RoPE
  kTriggerLate = 2,  // wait first, launch_dependents after the stores
  // launch_dependents at once, the position, the freqs row it selects and the weight read BEFORE
  // griddepcontrol.wait, q_input after it: correct only when positions, freqs and weight are not
  // written by the previous kernel (true in the benchmark, not assumed by the library). It
  // measures what that assumption is worth at decode sizes.
  kLoadsBeforeWait = 3,
};

namespace detail_baseline {

__device__ __forceinline__ void grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Two clamped values -> two e4m3fn codes (a in the low byte).
__device__ __forceinline__ std::uint32_t e4m3x2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  return r;
#else
  return std::uint32_t(indexer_q::detail::e4m3fn_encode(a)) |
         (std::uint32_t(indexer_q::detail::e4m3fn_encode(b)) << 8);
#endif
}

template <int DT>
__device__ __forceinline__ float weight_at(const void* w, std::int64_t i) {
  using namespace indexer_q::detail;
  if (DT == 0) return bf16_to_f32(static_cast<const std::uint16_t*>(w)[i]);
  if (DT == 1) return f16_to_f32(static_cast<const std::uint16_t*>(w)[i]);
  return static_cast<const float*>(w)[i];
}

}  // namespace detail_baseline

// DT: 0 bf16, 1 fp16, 2 fp32.
constexpr int kBaselineRowsPerBlock = 8;  // 8 warps per 256-thread block (SGLang 0.5.23)

template <int DT, bool POS64>
__global__ void __launch_bounds__(32 * kBaselineRowsPerBlock) baseline_warp_kernel(const detail::Problem a, int pdl) {
  using namespace indexer_q::detail;
  namespace db = detail_baseline;
  const std::int64_t row = std::int64_t(blockIdx.x) * kBaselineRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const bool early_loads = pdl == int(BaselinePdl::kLoadsBeforeWait);
  const bool early_pos = pdl == int(BaselinePdl::kTriggerEarly);
  if (early_loads) db::grid_trigger();
  if (row >= a.B * a.H) return;
  const std::int64_t b = row / a.H, h = row - b * a.H;
  std::int64_t p = 0;
  float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
  float w = 0.0f;
  if (early_pos) {
    p = POS64 ? static_cast<const std::int64_t*>(a.positions)[b]
              : std::int64_t(static_cast<const std::int32_t*>(a.positions)[b]);
    db::grid_wait();
  } else if (!early_loads) {
    db::grid_wait();
  }
  if (early_loads) {
    p = POS64 ? static_cast<const std::int64_t*>(a.positions)[b]
              : std::int64_t(static_cast<const std::int32_t*>(a.positions)[b]);
    if (lane >= 16)
      f = reinterpret_cast<const float4*>(a.freqs + (p >= 0 && p < a.max_pos ? p : 0) * kFreqsDim)[lane - 16];
    if (lane == 0) w = db::weight_at<DT>(a.weight, b * a.weight_stride_b + h);
    db::grid_wait();
  }
  float x[4];
  if (DT == 2) {
    const float4 v = reinterpret_cast<const float4*>(a.q_input)[row * 32 + lane];
    x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
  } else {
    const uint2 u = reinterpret_cast<const uint2*>(a.q_input)[row * 32 + lane];
    const std::uint16_t e[4] = {std::uint16_t(u.x), std::uint16_t(u.x >> 16), std::uint16_t(u.y),
                                std::uint16_t(u.y >> 16)};
    for (int k = 0; k < 4; ++k) x[k] = DT == 0 ? bf16_to_f32(e[k]) : f16_to_f32(e[k]);
  }
  if (!early_loads && !early_pos)
    p = POS64 ? static_cast<const std::int64_t*>(a.positions)[b]
              : std::int64_t(static_cast<const std::int32_t*>(a.positions)[b]);
  const bool valid = p >= 0 && p < a.max_pos;
  // RoPE (v4: dims 64..127, interleaved freqs): lanes 16..31 hold two pairs each.
  if (lane >= 16) {
    if (!early_loads) f = reinterpret_cast<const float4*>(a.freqs + (valid ? p : 0) * kFreqsDim)[lane - 16];
    const float xr0 = x[0], xi0 = x[1], xr1 = x[2], xi1 = x[3];
    x[0] = __fmaf_rn(xr0, f.x, -__fmul_rn(xi0, f.y));
    x[1] = __fmaf_rn(xr0, f.y, __fmul_rn(xi0, f.x));
    x[2] = __fmaf_rn(xr1, f.z, -__fmul_rn(xi1, f.w));
    x[3] = __fmaf_rn(xr1, f.w, __fmul_rn(xi1, f.z));
  }
  if (early_pos) db::grid_trigger();
  // strides 1, 2 in registers
  for (int s = 1; s < 4; s <<= 1)
    for (int k = 0; k < 4; ++k)
      if ((k & s) == 0) {
        const float u = x[k], v = x[k + s];
        x[k] = __fadd_rn(u, v);
        x[k + s] = __fsub_rn(u, v);
      }
  // strides 4 .. 64 across lanes
  for (int m = 1; m < 32; m <<= 1) {
    const bool hi = (lane & m) != 0;
    for (int k = 0; k < 4; ++k) {
      const float o = __shfl_xor_sync(0xffffffffu, x[k], m);
      x[k] = hi ? __fsub_rn(o, x[k]) : __fadd_rn(x[k], o);
    }
  }
  float amax = 0.0f;
  for (int k = 0; k < 4; ++k) {
    x[k] = __fmul_rn(x[k], kHadamardScale);
    amax = fmaxf(amax, fabsf(x[k]));
  }
  for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float scale = __fdiv_rn(fmaxf(kScaleFloor, amax), kFp8Max);
  const float inv = __fdiv_rn(1.0f, scale);
  float v[4];
  for (int k = 0; k < 4; ++k) v[k] = fmaxf(fminf(__fmul_rn(x[k], inv), kFp8Max), -kFp8Max);  // NaN -> 448
  std::uint32_t packed = db::e4m3x2(v[0], v[1]) | (db::e4m3x2(v[2], v[3]) << 16);
  if (!valid) packed = 0;
  reinterpret_cast<std::uint32_t*>(a.q_out)[row * 32 + lane] = packed;
  if (lane == 0) {
    if (!early_loads) w = db::weight_at<DT>(a.weight, b * a.weight_stride_b + h);
    a.weights_out[row] = valid ? __fmul_rn(__fmul_rn(w, a.weight_scale), scale) : __uint_as_float(0x7fc00000u);
  }
  if (pdl == int(BaselinePdl::kTriggerLate)) db::grid_trigger();
}

// Enqueues the baseline on `stream`; returns the launch error, if any.
inline cudaError_t launch_baseline_warp(const detail::Problem& a, cudaStream_t stream,
                                        BaselinePdl pdl = BaselinePdl::kOff) {
  if (a.recipe != RecipeId::kV4Fp8) return cudaErrorInvalidValue;
  const int dtype = a.dtype == DType::kBFloat16 ? 0 : a.dtype == DType::kFloat16 ? 1 : 2;
  const bool pos64 = a.pos_dtype == DType::kInt64;
  const unsigned grid = unsigned((a.rows() + kBaselineRowsPerBlock - 1) / kBaselineRowsPerBlock);
  if (grid == 0) return cudaSuccess;
  const bool with_pdl = pdl != BaselinePdl::kOff;  // the launch attribute; `mode` places the trigger
  const int mode = int(pdl);
  auto go = [&](auto kernel) { return launch_pdl(kernel, dim3(grid), dim3(32 * kBaselineRowsPerBlock), stream, with_pdl, a, mode); };
  cudaError_t e;
  if (dtype == 0) e = pos64 ? go(baseline_warp_kernel<0, true>) : go(baseline_warp_kernel<0, false>);
  else if (dtype == 1) e = pos64 ? go(baseline_warp_kernel<1, true>) : go(baseline_warp_kernel<1, false>);
  else e = pos64 ? go(baseline_warp_kernel<2, true>) : go(baseline_warp_kernel<2, false>);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace bench
}  // namespace indexer_q
