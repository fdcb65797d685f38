// Per-device facts the CUDA launchers need, read once per device and cached (relaxed atomics:
// every writer stores the same value). Included by each CUDA translation unit of the backend;
// everything is internal to the including TU (its own probe kernel, its own cache).
#pragma once

#include <atomic>

#include <cuda_runtime.h>

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

}  // namespace
}  // namespace detail
}  // namespace indexer_q
