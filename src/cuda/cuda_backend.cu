// CUDA backend (first version: one thread per row, the scalar row pipeline).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/problem.h"
#include "common/row.h"

namespace indexer_q {
namespace detail {
namespace {


struct Args {
  const void* q;
  std::uint8_t* out;
  const void* w;
  std::int64_t w_stride;
  float* w_out;
  float w_scale;
  const float* freqs;
  std::int64_t max_pos;
  const void* pos;
  std::int64_t B, H;
};

template <int DT, bool POS64>
__global__ void simple_kernel(Args a) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.B * a.H) return;
  const std::int64_t b = r / a.H, h = r % a.H;
  const std::int64_t p = POS64 ? static_cast<const std::int64_t*>(a.pos)[b]
                               : std::int64_t(static_cast<const std::int32_t*>(a.pos)[b]);
  std::uint8_t* o = a.out + r * kHeadDim;
  if (p < 0 || p >= a.max_pos) {
    for (int i = 0; i < kHeadDim; ++i) o[i] = 0;
    a.w_out[r] = __int_as_float(0x7fc00000);
    return;
  }
  float x[kHeadDim];
  float w;
  if (DT == 0) {
    const std::uint16_t* q = static_cast<const std::uint16_t*>(a.q) + r * kHeadDim;
    for (int i = 0; i < kHeadDim; ++i) x[i] = bf16_to_f32(q[i]);
    w = bf16_to_f32(static_cast<const std::uint16_t*>(a.w)[b * a.w_stride + h]);
  } else if (DT == 1) {
    const std::uint16_t* q = static_cast<const std::uint16_t*>(a.q) + r * kHeadDim;
    for (int i = 0; i < kHeadDim; ++i) x[i] = f16_to_f32(q[i]);
    w = f16_to_f32(static_cast<const std::uint16_t*>(a.w)[b * a.w_stride + h]);
  } else {
    const float* q = static_cast<const float*>(a.q) + r * kHeadDim;
    for (int i = 0; i < kHeadDim; ++i) x[i] = q[i];
    w = static_cast<const float*>(a.w)[b * a.w_stride + h];
  }
  process_row(x, a.freqs + p * kFreqsDim, w, a.w_scale, o, a.w_out + r);
}

}  // namespace

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Status cuda_run(const Problem& p, void* stream, bool /*enable_pdl*/) {
  Args a{p.q_input, p.q_fp8, p.weight, p.weight_stride_b, p.weights_out, p.weight_scale,
         p.freqs, p.max_pos, p.positions, p.B, p.H};
  const std::int64_t rows = p.rows();
  const int threads = 128;
  const unsigned blocks = unsigned((rows + threads - 1) / threads);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool p64 = p.pos_dtype == DType::kInt64;
  switch (p.dtype) {
    case DType::kBFloat16:
      if (p64) simple_kernel<0, true><<<blocks, threads, 0, s>>>(a);
      else simple_kernel<0, false><<<blocks, threads, 0, s>>>(a);
      break;
    case DType::kFloat16:
      if (p64) simple_kernel<1, true><<<blocks, threads, 0, s>>>(a);
      else simple_kernel<1, false><<<blocks, threads, 0, s>>>(a);
      break;
    default:
      if (p64) simple_kernel<2, true><<<blocks, threads, 0, s>>>(a);
      else simple_kernel<2, false><<<blocks, threads, 0, s>>>(a);
      break;
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Internal(std::string("indexer_q: cuda: launch failed: ") + cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace detail
}  // namespace indexer_q
