// The CUDA DeviceRuntime of the indexer-q CLI (tools/device.h): device memory, a stream, and
// timing by CUDA-graph replay. The op itself is called through the public API only; the
// comparison with other kernel designs (e.g. the one-warp-per-row baseline) lives in bench/.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "device.h"

namespace indexer_q {
namespace cli {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

class CudaRuntime final : public DeviceRuntime {
 public:
  explicit CudaRuntime(int dev) : dev_(dev) {
    check(cudaSetDevice(dev_), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, dev_), "cudaGetDeviceProperties");
    name_ = "cuda:" + std::to_string(dev_) + " " + prop.name + " (sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaRuntime() override {
    for (auto& kv : copy_bufs_) {
      cudaFree(kv.second.first);
      cudaFree(kv.second.second);
    }
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device{DeviceType::kCUDA, dev_}; }
  std::string name() const override { return name_; }

  void* alloc(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc");
    return p;
  }
  void release(void* p) noexcept override {
    if (p) cudaFree(p);
  }
  void to_device(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void to_host(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void fill(void* dst, unsigned char value, std::size_t bytes) override {
    if (!bytes) return;
    check(cudaMemsetAsync(dst, value, bytes, stream_), "cudaMemset");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void* stream() override { return stream_; }

  // fn is captured kPerGraph times into one CUDA graph; the graph is replayed `warmup` /
  // kPerGraph times (at least 5) unmeasured, then max(15, iters / kPerGraph) times, each replay
  // between two events; the result is the median replay time divided by kPerGraph.
  double time_median_us(const std::function<void()>& fn, int warmup, int iters) override {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      for (int i = 0; i < kPerGraph; ++i) fn();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(e, "cudaGraphInstantiate");
    double med = 0;
    try {
      med = replay_median(exec, warmup, iters);
    } catch (...) {
      cudaGraphExecDestroy(exec);
      throw;
    }
    cudaGraphExecDestroy(exec);
    return med / kPerGraph;
  }

  double copy_median_us(std::size_t bytes, int warmup, int iters) override {
    auto it = copy_bufs_.find(bytes);
    if (it == copy_bufs_.end()) {
      void* a = alloc(bytes);
      void* b = nullptr;
      try {
        b = alloc(bytes);
      } catch (...) {
        release(a);
        throw;
      }
      check(cudaMemsetAsync(a, 0x3c, bytes, stream_), "cudaMemset");
      it = copy_bufs_.emplace(bytes, std::make_pair(a, b)).first;
    }
    void* src = it->second.first;
    void* dst = it->second.second;
    cudaStream_t s = stream_;
    return time_median_us(
        [=] { check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); },
        warmup, iters);
  }

 private:
  static constexpr int kPerGraph = 20;

  double replay_median(cudaGraphExec_t exec, int warmup, int iters) {
    const int w = std::max(5, warmup / kPerGraph);
    const int n = std::max(15, iters / kPerGraph);
    for (int i = 0; i < w; ++i) check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    std::vector<double> t(std::size_t(n), 0.0);
    for (int i = 0; i < n; ++i) {
      check(cudaEventRecord(start_, stream_), "cudaEventRecord");
      check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
      check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
      check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
      t[std::size_t(i)] = double(ms) * 1000.0;
    }
    std::sort(t.begin(), t.end());
    return n % 2 ? t[std::size_t(n / 2)] : 0.5 * (t[std::size_t(n / 2 - 1)] + t[std::size_t(n / 2)]);
  }

  int dev_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::map<std::size_t, std::pair<void*, void*>> copy_bufs_;
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_cuda_runtime(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (e != cudaSuccess) cudaGetLastError();
    if (why) *why = e != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(e)
                                     : std::string("no CUDA device");
    return nullptr;
  }
  try {
    return std::unique_ptr<DeviceRuntime>(new CudaRuntime(0));
  } catch (const std::exception& ex) {
    if (why) *why = ex.what();
    return nullptr;
  }
}

}  // namespace cli
}  // namespace indexer_q
