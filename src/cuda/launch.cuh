// What the two CUDA launchers share (cuda_backend.cu: the query side; kside.cu: the key side):
// the kernels' input dtype codes, the PDL (programmatic dependent launch) device primitives, the
// launch with the PDL attribute, the device and pointer checks before a launch, the device guard
// around it and the mapping of CUDA errors to a Status. Like device_facts.cuh (included here),
// everything is internal to the including translation unit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "cuda/device_facts.cuh"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {
namespace {

// The input dtype of a kernel instantiation (template argument DT).
enum : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

// ---- PDL, device side (no-ops before sm_90) ----
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- host side ----
bool aligned(const void* p, std::uintptr_t n) { return (reinterpret_cast<std::uintptr_t>(p) % n) == 0; }

// "indexer_q: <backend>: <what>: <error name> (<error string>)".
std::string cuda_err(const char* backend, const char* what, cudaError_t e) {
  return std::string("indexer_q: ") + backend + ": " + what + ": " + cudaGetErrorName(e) + " (" +
         cudaGetErrorString(e) + ")";
}

// Launches kernel(args...) on `grid` blocks of `block` threads on stream s, with programmatic
// stream serialization when pdl. An empty grid launches nothing; more than 2^31 - 1 blocks is
// cudaErrorInvalidConfiguration.
template <typename K, typename... Args>
cudaError_t launch(K kernel, std::uint64_t grid, unsigned block, cudaStream_t s, bool pdl, const Args&... args) {
  if (grid == 0) return cudaSuccess;
  if (grid > 0x7fffffffu) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(block);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// A pointer argument of a launch, by its argument name (messages).
struct NamedPtr {
  const char* name;
  const void* ptr;
};

// Before a launch on device dev: the device exists and every pointer is memory of it
// (check_ptr). A missing device is named after the first pointer (the input, whose device is
// the call's): "indexer_q: <first>: device cuda:<dev> does not exist (<n> devices)".
template <std::size_t N>
Status check_device(const char* backend, int dev, const NamedPtr (&ptrs)[N]) {
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) return Status::Unavailable(cuda_err(backend, "cudaGetDeviceCount", e));
  if (dev < 0 || dev >= ndev || dev >= kMaxDevices)
    return Status::InvalidArgument(std::string("indexer_q: ") + ptrs[0].name + ": device cuda:" +
                                   std::to_string(dev) + " does not exist (" + std::to_string(ndev) + " devices)");
  for (const auto& x : ptrs) {
    Status s = check_ptr(x.name, x.ptr, dev);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// Device guard: runs enqueue() (the launches; returns the first launch error or cudaSuccess)
// with device dev current, then restores the caller's current device. An error of enqueue(), or
// else one cudaGetLastError reports after it, is "<backend>: kernel launch failed".
template <class F>
Status run_on_device(const char* backend, int dev, F&& enqueue) {
  int prev = 0;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return Status::Internal(cuda_err(backend, "cudaGetDevice", e));
  if (prev != dev) {
    e = cudaSetDevice(dev);
    if (e != cudaSuccess) return Status::Internal(cuda_err(backend, "cudaSetDevice", e));
  }
  e = enqueue();
  const cudaError_t last = cudaGetLastError();
  if (e == cudaSuccess) e = last;
  if (prev != dev) cudaSetDevice(prev);
  if (e != cudaSuccess) return Status::Internal(cuda_err(backend, "kernel launch failed", e));
  return Status::Ok();
}

}  // namespace
}  // namespace detail
}  // namespace indexer_q
