// Per-device facts the CUDA launchers need (and the check of a pointer against the device), read once per device and cached (relaxed atomics:
// every writer stores the same value). Included by each CUDA translation unit of the backend;
// everything is internal to the including TU (its own probe kernel, its own cache).
#pragma once

#include <atomic>
#include <string>

#include <cuda_runtime.h>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {
namespace {

constexpr int kMaxDevices = 64;

// An empty kernel compiled with the TU's flags: its ptxVersion is that of every kernel of the TU
// on the current device (the PTX the running code was built from).
__global__ void device_facts_probe_kernel() {}

std::atomic<int> g_pdl_state[kMaxDevices];  // 0 = not read yet, 1 = no, 2 = yes

// May this TU's kernels be launched with programmatic dependent launch on device dev (the
// current device, dev < kMaxDevices)? Needs an sm_90+ device *and* code built from compute_90+
// PTX: a binary the driver JIT-compiled from older PTX (e.g. a build for 80-virtual run on an
// H100) has no griddepcontrol.wait, so a PDL launch would let it read its inputs before the
// previous kernel finished writing them. Such a launch runs without PDL instead.
bool pdl_supported(int dev) {
  int state = g_pdl_state[dev].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0;
    cudaFuncAttributes fa{};
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    cudaFuncGetAttributes(&fa, device_facts_probe_kernel) == cudaSuccess;
    if (!ok) {
      cudaGetLastError();
      return false;  // not cached: asked again next time
    }
    state = (major >= 9 && fa.ptxVersion >= 90) ? 2 : 1;
    g_pdl_state[dev].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

// Pointer check: device memory of another device, or plain host memory, is refused.
Status check_ptr(const char* name, const void* ptr, int dev) {
  cudaPointerAttributes at{};
  const cudaError_t e = cudaPointerGetAttributes(&at, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    return Status::InvalidArgument(std::string("indexer_q: ") + name +
                                   ": not a pointer the CUDA runtime knows (" + cudaGetErrorString(e) + ")");
  }
  if (at.type == cudaMemoryTypeUnregistered)
    return Status::InvalidArgument(std::string("indexer_q: ") + name +
                                   ": is pageable host memory, expected memory of cuda:" + std::to_string(dev));
  if (at.type == cudaMemoryTypeDevice && at.device != dev)
    return Status::InvalidArgument(std::string("indexer_q: ") + name + ": lives on cuda:" +
                                   std::to_string(at.device) + ", expected cuda:" + std::to_string(dev) +
                                   " (the device of the tensors)");
  return Status::Ok();
}

}  // namespace
}  // namespace detail
}  // namespace indexer_q
