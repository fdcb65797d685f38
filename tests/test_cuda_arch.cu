// The portable paths of the CUDA build (issue 10): the library is built for sm_80 .. sm_120
// (CMakeLists.txt, INDEXER_Q_CUDA_ARCHS), and below sm_89 the FP8 conversion instruction
// (cvt.rn.satfinite.e4m3x2.f32) is replaced by quantize4_e4m3_sat_sw, four calls of row.h's
// scalar encoder e4m3fn_encode (src/cuda/fp8_e4m3.cuh). Checked here:
//  - on the host (no GPU needed, so CI runs it): quantize4_e4m3_sat_sw in every byte position
//    against the spec's clamp-then-encode, e4m3fn_encode(fmax(fmin(v, 448), -448)), for every
//    non-NaN float32 whose low 12 bits are one of 0x000, 0x001, 0x7ff, 0x800, 0x801, 0xfff (all
//    signs, exponents and top 8 mantissa bits: the e4m3 rounding points, ties and sticky bits);
//  - on the GPU, for every float32 bit pattern: the same on the device, and where the device
//    pass has the instruction (sm_89+), the instruction against the software encoder for every
//    non-NaN input in every byte position. It prints which code the device runs (cubin or PTX
//    JIT, __CUDA_ARCH__ of the pass, hardware or software conversion), so a build of compute_80
//    PTX only, JIT-compiled on a newer GPU, runs the sm_80 path (scripts/check_cuda_archs.sh gpu).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "common/row.h"
#include "cuda/fp8_e4m3.cuh"
#include "indexer_q/indexer_q.h"

using namespace indexer_q;

namespace {

// The values of the other three positions.
__host__ __device__ float fixed_at(int j) { return j == 0 ? 1.0f : j == 1 ? -2.0f : j == 2 ? 0.0f : 0.5f; }

// The spec's steps 8, 9 (SPEC.md): clamp to [-448, 448] (NaN -> +448 by fmin), then encode.
// quantize4_e4m3_sat_sw skips the clamp of the top: equal for every non-NaN v. A NaN gives 0xfe
// on the GPU (CUDA's fmaxf(NaN, -448) is -448); on the host glibc's fmaxf keeps a signalling
// NaN, so NaN bytes are checked on the GPU only (no output byte depends on them anyway).
__host__ __device__ std::uint32_t want_sw_byte(float v) {
  if (v != v) return 0xfeu;
  return detail::e4m3fn_encode(::fmaxf(::fminf(v, detail::kFp8Max), -detail::kFp8Max));
}

// true when v in position pos (fixed_at elsewhere), and v in all four, give the expected bytes.
__host__ __device__ bool sw_ok(float v, int pos) {
#if !defined(__CUDA_ARCH__)
  if (v != v) return true;
#endif
  float a[4] = {fixed_at(0), fixed_at(1), fixed_at(2), fixed_at(3)};
  a[pos] = v;
  const std::uint32_t got = detail::quantize4_e4m3_sat_sw(a[0], a[1], a[2], a[3]);
  for (int j = 0; j < 4; ++j)
    if (((got >> (8 * j)) & 0xffu) != want_sw_byte(a[j])) return false;
  return detail::quantize4_e4m3_sat_sw(v, v, v, v) == want_sw_byte(v) * 0x01010101u;
}

TEST(CudaArch, SoftwareFp8EncoderMatchesSpecOnHost) {
  const std::uint32_t lows[6] = {0x000u, 0x001u, 0x7ffu, 0x800u, 0x801u, 0xfffu};
  std::uint64_t checked = 0, bad = 0;
  std::uint32_t first_bad = 0;
  for (std::uint32_t hi = 0; hi < (1u << 20); ++hi) {
    for (std::uint32_t lo : lows) {
      const std::uint32_t u = (hi << 12) | lo;
      const float v = detail::f32_from_bits(u);
      ++checked;
      if (!sw_ok(v, int(hi & 3u))) {
        if (bad++ == 0) first_bad = u;
      }
    }
  }
  EXPECT_EQ(checked, 6ull << 20);
  EXPECT_EQ(bad, 0ull) << "first differing input bits 0x" << std::hex << first_bad;
  // A few bytes by hand (e4m3fn: 448 = 0x7e, 2^-9 = 0x01, ties to even at 2^-10 and 3 * 2^-10).
  EXPECT_EQ(detail::quantize4_e4m3_sat_sw(448.0f, 1e30f, INFINITY, -INFINITY), 0xfe7e7e7eu);
  EXPECT_EQ(detail::quantize4_e4m3_sat_sw(-0.0f, 0x1p-9f, 0x1p-10f, 0x3p-10f), 0x02000180u);
}

// ---- on the device ----
bool have_device() { return backend_available(Backend::kCuda); }

// info[0] = __CUDA_ARCH__ of the device pass, info[1] = 1 when it has the instruction.
// bad[0]: software encoder vs spec (every float32, position u % 4, and all four);
// bad[1]: instruction vs software encoder, every non-NaN float32 in position u % 4 and all four.
__global__ void fp8_arch_sweep_kernel(unsigned long long* bad, unsigned int* first_bad, int* info) {
#if defined(__CUDA_ARCH__)
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    info[0] = __CUDA_ARCH__;
#if defined(INDEXER_Q_HW_FP8_CVT)
    info[1] = 1;
#else
    info[1] = 0;
#endif
  }
#endif
  const std::uint64_t n = 1ull << 32;
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  unsigned long long b0 = 0, b1 = 0;
  unsigned int f0 = 0xffffffffu, f1 = 0xffffffffu;
  for (std::uint64_t u = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += stride) {
    const float v = __uint_as_float(std::uint32_t(u));
    const int pos = int(u & 3u);
    if (!sw_ok(v, pos)) {
      ++b0;
      f0 = min(f0, std::uint32_t(u));
    }
    if (v == v) {
      float a[4] = {fixed_at(0), fixed_at(1), fixed_at(2), fixed_at(3)};
      a[pos] = v;
      const bool differ =
          detail::quantize4_e4m3_sat(a[0], a[1], a[2], a[3]) != detail::quantize4_e4m3_sat_sw(a[0], a[1], a[2], a[3]) ||
          detail::quantize4_e4m3_sat(v, v, v, v) != detail::quantize4_e4m3_sat_sw(v, v, v, v);
      if (differ) {
        ++b1;
        f1 = min(f1, std::uint32_t(u));
      }
    }
  }
  if (b0) {
    atomicAdd(bad + 0, b0);
    atomicMin(first_bad + 0, f0);
  }
  if (b1) {
    atomicAdd(bad + 1, b1);
    atomicMin(first_bad + 1, f1);
  }
}

#define ARCH_CUDA_OK(expr)                                                 \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

TEST(CudaArch, SoftwareFp8EncoderMatchesHardwareForEveryFloat) {
  if (!have_device()) GTEST_SKIP() << "no usable CUDA device";
  int dev = 0, major = 0, minor = 0;
  ARCH_CUDA_OK(cudaGetDevice(&dev));
  ARCH_CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  ARCH_CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  cudaFuncAttributes fa{};
  ARCH_CUDA_OK(cudaFuncGetAttributes(&fa, fp8_arch_sweep_kernel));

  void* mem = nullptr;
  ARCH_CUDA_OK(cudaMalloc(&mem, 64));
  auto* bad_d = static_cast<unsigned long long*>(mem);
  auto* first_d = reinterpret_cast<unsigned int*>(static_cast<char*>(mem) + 16);
  auto* info_d = reinterpret_cast<int*>(static_cast<char*>(mem) + 32);
  cudaMemset(mem, 0, 64);
  cudaMemset(first_d, 0xff, 8);
  fp8_arch_sweep_kernel<<<4096, 256>>>(bad_d, first_d, info_d);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  unsigned long long bad[2] = {};
  unsigned int first[2] = {};
  int info[2] = {};
  if (e == cudaSuccess) e = cudaMemcpy(bad, bad_d, sizeof bad, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(first, first_d, sizeof first, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(info, info_d, sizeof info, cudaMemcpyDeviceToHost);
  cudaFree(mem);
  ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);

  // binaryVersion: the machine code that runs (major * 10 + minor); ptxVersion: the PTX it came
  // from, when there was one. __CUDA_ARCH__ of the pass decides the code paths.
  std::printf("[arch] device cc %d.%d runs sm_%d machine code (ptxVersion %d), device pass __CUDA_ARCH__=%d: "
              "FP8 conversion by %s\n",
              major, minor, fa.binaryVersion, fa.ptxVersion, info[0],
              info[1] ? "the instruction (cvt.rn.satfinite.e4m3x2.f32)" : "row.h's e4m3fn_encode (software)");
  EXPECT_EQ(info[1], info[0] >= 890 ? 1 : 0);
  EXPECT_EQ(bad[0], 0ull) << "software encoder vs spec: first differing input bits 0x" << std::hex << first[0];
  EXPECT_EQ(bad[1], 0ull) << "instruction vs software encoder: first differing input bits 0x" << std::hex << first[1];
}

}  // namespace
