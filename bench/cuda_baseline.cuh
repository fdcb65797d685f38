// The comparison point for the CUDA backend's benchmarks: the one-warp-per-row design that
// inference engines use today for this op. One warp per row, 4 contiguous values per lane
// (one 8-byte load for bf16 / fp16), butterflies at strides 1 and 2 in registers, then 5
// shuffle stages (strides 4 .. 64), a warp-wide amax, the software e4m3fn encoder; 4 warps
// per block. It computes the same bytes as the SPEC (checked by `indexer-q bench`'s own
// comparison of every row it times), so timings compare like with like. v4_fp8 only. It takes
// the library's validated Problem (src/common/problem.h), the one model of the op's arguments.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../src/common/problem.h"
#include "../src/common/row.h"

namespace indexer_q {
namespace bench {

// DT: 0 bf16, 1 fp16, 2 fp32.
template <int DT, bool POS64>
__global__ void __launch_bounds__(128) baseline_warp_kernel(const detail::Problem a) {
  using namespace indexer_q::detail;
  const std::int64_t row = std::int64_t(blockIdx.x) * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= a.B * a.H) return;
  const std::int64_t b = row / a.H, h = row % a.H;
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
  const std::int64_t p = POS64 ? static_cast<const std::int64_t*>(a.positions)[b]
                               : std::int64_t(static_cast<const std::int32_t*>(a.positions)[b]);
  const bool valid = p >= 0 && p < a.max_pos;
  // RoPE: lanes 16..31 hold elements 64..127 (two pairs each).
  if (lane >= 16) {
    const float4 f = reinterpret_cast<const float4*>(a.freqs + (valid ? p : 0) * kFreqsDim)[lane - 16];
    const float c0 = f.x, s0 = f.y, c1 = f.z, s1 = f.w;
    const float xr0 = x[0], xi0 = x[1], xr1 = x[2], xi1 = x[3];
    x[0] = __fmaf_rn(xr0, c0, -__fmul_rn(xi0, s0));
    x[1] = __fmaf_rn(xr0, s0, __fmul_rn(xi0, c0));
    x[2] = __fmaf_rn(xr1, c1, -__fmul_rn(xi1, s1));
    x[3] = __fmaf_rn(xr1, s1, __fmul_rn(xi1, c1));
  }
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
  std::uint32_t packed = 0;
  for (int k = 0; k < 4; ++k) {
    const float v = fmaxf(fminf(__fmul_rn(x[k], inv), kFp8Max), -kFp8Max);
    packed |= std::uint32_t(e4m3fn_encode(v)) << (8 * k);
  }
  if (!valid) packed = 0;
  reinterpret_cast<std::uint32_t*>(a.q_out)[row * 32 + lane] = packed;
  if (lane == 0) {
    float w;
    const std::int64_t wi = b * a.weight_stride_b + h;
    if (DT == 0) w = bf16_to_f32(static_cast<const std::uint16_t*>(a.weight)[wi]);
    else if (DT == 1) w = f16_to_f32(static_cast<const std::uint16_t*>(a.weight)[wi]);
    else w = static_cast<const float*>(a.weight)[wi];
    a.weights_out[row] = valid ? __fmul_rn(__fmul_rn(w, a.weight_scale), scale) : __uint_as_float(0x7fc00000u);
  }
}

// Enqueues the baseline on `stream`; returns the launch error, if any.
inline cudaError_t launch_baseline_warp(const detail::Problem& a, cudaStream_t stream) {
  if (a.recipe != RecipeId::kV4Fp8) return cudaErrorInvalidValue;
  const int dtype = a.dtype == DType::kBFloat16 ? 0 : a.dtype == DType::kFloat16 ? 1 : 2;
  const bool pos64 = a.pos_dtype == DType::kInt64;
  const unsigned grid = unsigned((a.rows() + 3) / 4);
  if (grid == 0) return cudaSuccess;
#define IQ_BASELINE_LAUNCH(DT)                                                     \
  (pos64 ? (baseline_warp_kernel<DT, true><<<grid, 128, 0, stream>>>(a), 0)       \
         : (baseline_warp_kernel<DT, false><<<grid, 128, 0, stream>>>(a), 0))
  if (dtype == 0) IQ_BASELINE_LAUNCH(0);
  else if (dtype == 1) IQ_BASELINE_LAUNCH(1);
  else IQ_BASELINE_LAUNCH(2);
#undef IQ_BASELINE_LAUNCH
  return cudaGetLastError();
}

}  // namespace bench
}  // namespace indexer_q
