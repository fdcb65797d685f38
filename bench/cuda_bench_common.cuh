// The pieces the CUDA benchmark harness (cuda_harness.cuh) and its op descriptions share: random device
// inputs, error checks that end the program, device buffers, a launch with programmatic
// dependent launch (PDL) as a switch, and the timing both report (calls captured in one CUDA
// graph, the graph replayed, events around each replay, the median replay per call), also of
// the device-to-device copy each compares with. Each benchmark is one translation unit that
// includes this once.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace bench {

// ---------------------------------------------------------------------------------------
// Random inputs: a hash of the element index, so every size and run gets the same data.
// ---------------------------------------------------------------------------------------
__device__ inline std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return std::uint32_t(x);
}
// Uniform in [0, 1).
__device__ inline float uniform(std::uint64_t i, std::uint64_t salt) {
  return (hash32(i * 0x9e3779b97f4a7c15ull + salt) >> 8) * (1.0f / 16777216.0f);
}
// Roughly normal (the sum of four uniforms, centred): each benchmark scales it its own way.
__device__ inline float centered_sum4(std::uint64_t i, std::uint64_t salt) {
  float s = 0.0f;
  for (int k = 0; k < 4; ++k) s += uniform(i * 4 + k, salt);
  return s - 2.0f;
}
// dst[i] = v in the input dtype (dtype: 0 bf16 rounded to nearest even, 1 fp16, 2 fp32).
__device__ inline void store_as(void* dst, int dtype, std::uint64_t i, float v) {
  if (dtype == 2) {
    static_cast<float*>(dst)[i] = v;
  } else if (dtype == 1) {
    static_cast<__half*>(dst)[i] = __float2half_rn(v);
  } else {
    const std::uint32_t u = __float_as_uint(v);
    static_cast<std::uint16_t*>(dst)[i] = std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

// The kernels are static: one copy per benchmark (each is a single translation unit).
// A (cos, sin) table of random angles, interleaved: n floats.
static __global__ void fill_freqs(float* f, std::uint64_t n) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const float a = 6.2831853f * uniform(i / 2, 7);
    f[i] = (i & 1) ? sinf(a) : cosf(a);
  }
}
// n random positions in [0, max_pos).
static __global__ void fill_pos(std::int64_t* p, std::uint64_t n, std::int64_t max_pos) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    p[i] = std::int64_t(hash32(i + 99) % std::uint32_t(max_pos));
}

// ---------------------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------------------

// The benchmark's name, the prefix of its error messages ("cuda_bench: what: why"); main sets it
// first.
inline const char* prog_name = "bench";

// Ends the program (status 1) with "<prog_name>: what: why" on stderr if e / s is an error.
inline void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", prog_name, what, cudaGetErrorString(e));
    std::exit(1);
  }
}
inline void ck(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", prog_name, what, s.message().c_str());
    std::exit(1);
  }
}

// Device 0's properties; ends the program (status 1, "<prog_name>: no CUDA device") if there is
// none.
inline cudaDeviceProp first_device_or_exit() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", prog_name);
    std::exit(1);
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  return prop;
}

// "a,b,,c" -> {"a", "b", "", "c"} (a trailing empty item is dropped).
inline std::vector<std::string> split(const char* s) {
  std::vector<std::string> v;
  std::string cur;
  for (; *s; ++s) {
    if (*s == ',') {
      v.push_back(cur);
      cur.clear();
    } else {
      cur += *s;
    }
  }
  if (!cur.empty()) v.push_back(cur);
  return v;
}

// --recipes: *out = the ids of the comma list `list` of names, each read by parse (parse_recipe or
// parse_krecipe); false, after "<unknown> <name>" on stderr, at the first name parse does not know.
template <class Id, class Parse>
bool parse_recipe_list(const char* list, Parse parse, const char* unknown, std::vector<Id>* out) {
  out->clear();
  for (const std::string& x : split(list)) {
    Id r;
    if (!parse(x, &r)) {
      std::fprintf(stderr, "%s %s\n", unknown, x.c_str());
      return false;
    }
    out->push_back(r);
  }
  return true;
}

// n bytes of device memory (16 when n is 0), freed at scope exit.
struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t n) { ck(cudaMalloc(&p, n ? n : 16), "cudaMalloc"); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

// Enqueues kernel<<<grid, block, 0, s>>>(args...) through cudaLaunchKernelEx, with programmatic
// stream serialization (PDL) when `pdl` is true; returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Median time per call (us) of fn, which enqueues one call on stream s: kPerGraph calls are
// captured into one graph; the graph is replayed `iters` times after `warmup` replays.
constexpr int kPerGraph = 20;
inline double time_median_us(cudaStream_t s, const std::function<void()>& fn, int warmup, int iters) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < kPerGraph; ++i) fn();
  ck(cudaStreamEndCapture(s, &g), "end capture");
  ck(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cudaEvent_t e0, e1;
  ck(cudaEventCreate(&e0), "event");
  ck(cudaEventCreate(&e1), "event");
  for (int i = 0; i < warmup; ++i) ck(cudaGraphLaunch(ge, s), "replay");
  std::vector<float> ms(std::size_t(std::max(iters, 1)));
  for (float& m : ms) {
    ck(cudaEventRecord(e0, s), "record");
    ck(cudaGraphLaunch(ge, s), "replay");
    ck(cudaEventRecord(e1, s), "record");
    ck(cudaEventSynchronize(e1), "sync");
    ck(cudaEventElapsedTime(&m, e0, e1), "elapsed");
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return double(ms[ms.size() / 2]) * 1000.0 / kPerGraph;
}

// The comparison point: a device-to-device copy of `bytes` bytes (src -> dst), timed the same way.
inline double copy_median_us(cudaStream_t s, void* dst, const void* src, std::size_t bytes, int warmup, int iters) {
  return time_median_us(
      s, [&] { ck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "copy"); }, warmup, iters);
}

// Effective bandwidth (GB/s) of `bytes` moved in `us` microseconds.
inline double to_gbps(std::int64_t bytes, double us) { return double(bytes) / us * 1e-3; }

}  // namespace bench
}  // namespace indexer_q
