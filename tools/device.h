// Memory, streams and timing on the device a CLI command runs a backend on.
// tools/device_cpu.cpp implements the CPU runtime; tools/device_cuda.cu the CUDA one
// (compiled only with INDEXER_Q_CUDA; tools/device_nocuda.cpp otherwise). The CLI (run, verify,
// bench) is written against this and calls the op only through the public API (run()).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace cli {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;           // e.g. "cpu: AMD EPYC (2 threads)", "cuda:0 NVIDIA H200"
  // Memory. alloc never returns null: it throws std::runtime_error with the reason.
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill(void* dst, unsigned char value, std::size_t bytes) = 0;
  virtual void synchronize() = 0;
  virtual void* stream() = 0;                     // cudaStream_t for CUDA, nullptr for the CPU
  // Median time in microseconds of one call of fn (which enqueues its work on stream()).
  // CPU: wall clock per call. CUDA: fn is captured once into a CUDA graph of `per_graph`
  // calls, the graph is replayed, and the median per call is reported (events).
  virtual double time_median_us(const std::function<void()>& fn, int warmup, int iters) = 0;
  // Median time in microseconds of a plain copy of `bytes` bytes (memcpy on the CPU,
  // device-to-device copy on a GPU), timed the same way as time_median_us.
  virtual double copy_median_us(std::size_t bytes, int warmup, int iters) = 0;
};

std::unique_ptr<DeviceRuntime> make_cpu_runtime();
// Same, with copy_median_us splitting copies of 1 MiB and more over `copy_threads` threads
// (so a copy is compared with the op at the same thread count). make_cpu_runtime() uses 1.
std::unique_ptr<DeviceRuntime> make_cpu_runtime(int copy_threads);
// nullptr when the build has no CUDA or no device is usable (*why says which).
std::unique_ptr<DeviceRuntime> make_cuda_runtime(std::string* why);

}  // namespace cli
}  // namespace indexer_q
