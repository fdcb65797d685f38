// What the CUDA test files share (tests/test_cuda.cu, tests/test_cuda_kside.cu): the CUDA call
// assertion, the device check and skip, an owning device buffer, and the PDL producer kernel that
// writes an op's inputs after letting its dependents launch.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "indexer_q/indexer_q.h"

// Asserts that a CUDA runtime call succeeded, naming the call and the error.
#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// Skips the test where the library's CUDA backend has no usable device (CI has none).
#define SKIP_WITHOUT_DEVICE() \
  if (!iqtest::have_device()) GTEST_SKIP() << "no usable CUDA device"

namespace iqtest {

inline bool have_device() { return indexer_q::backend_available(indexer_q::Backend::kCuda); }

// Device memory freed on scope exit. alloc(0) takes 16 bytes, so the pointer is never null.
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  bool alloc(std::size_t n) { return cudaMalloc(&p, n ? n : 16) == cudaSuccess; }
  // alloc(n), then n bytes copied from the host.
  bool put(const void* src, std::size_t n) {
    return alloc(n) && (n == 0 || cudaMemcpy(p, src, n, cudaMemcpyHostToDevice) == cudaSuccess);
  }
};

// ---- a PDL producer that lets its dependents launch at once ----
// Up to three byte copies (n[k] bytes from src[k] to dst[k]; n[k] = 0: none).
struct ByteCopies {
  const unsigned char* src[3];
  unsigned char* dst[3];
  std::size_t n[3];
};

namespace {  // kernels: one copy per test file (internal linkage)

__device__ __forceinline__ void trigger_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_primary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// A kernel of an engine's stream that writes an op's inputs and, as PDL producers may, executes
// griddepcontrol.launch_dependents first, then spins `cycles` clock cycles before copying: the op
// launched after it with PDL is resident while it spins, and only the op's griddepcontrol.wait
// keeps it from reading the old bytes.
__global__ void early_trigger_producer(ByteCopies c, long long cycles) {
  trigger_dependents();
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (int k = 0; k < 3; ++k)
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n[k]; i += stride)
      c.dst[k][i] = c.src[k][i];
}

}  // namespace

}  // namespace iqtest
