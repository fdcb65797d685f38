// What the CUDA test files share (tests/test_cuda.cu, tests/test_cuda_kside.cu): the CUDA call
// assertion, the device check and skip, and an owning device buffer.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstddef>

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

}  // namespace iqtest
