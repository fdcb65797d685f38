// Standalone CUDA benchmark of the op (used when comparing kernel designs in one device
// call; `indexer-q bench --backend cuda` is the user-facing benchmark). For each size it
//   - fills device inputs with random data (bf16 / fp16 / fp32 rows with per-row magnitudes,
//     random weights, a real-looking freqs table, random positions),
//   - runs the library (automatic shape) and every entry of cli::cuda_baselines (the
//     one-warp-per-row baseline and the library kernel at fixed shapes) and checks that all
//     of them wrote the same bytes,
//   - times each with the CUDA DeviceRuntime (graph of 20 calls, median replay / 20), and a
//     device-to-device copy that moves the same number of bytes (read + write) as the op.
// Output: one CSV line per (size, variant) and a short table at the end.
//
//   cuda_bench [--tokens 1,64,1024] [--heads 64,16] [--dtype bf16|fp16|fp32] [--iters N]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../src/common/problem.h"
#include "../tools/device.h"
#include "indexer_q/indexer_q.h"

using namespace indexer_q;

namespace {

__device__ std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return std::uint32_t(x);
}
__device__ float uniform(std::uint64_t i, std::uint64_t salt) {
  return (hash32(i * 0x9e3779b97f4a7c15ull + salt) >> 8) * (1.0f / 16777216.0f);
}
// Roughly normal values (sum of uniforms) scaled per row.
__device__ float value(std::uint64_t i, std::uint64_t salt) {
  float s = 0.0f;
  for (int k = 0; k < 4; ++k) s += uniform(i * 4 + k, salt);
  const float row_mag = exp2f(-6.0f + 12.0f * uniform(i / 128, salt ^ 0x55));
  return (s - 2.0f) * row_mag;
}

__global__ void fill_kernel(void* dst, int dtype, std::uint64_t n, std::uint64_t salt) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const float v = value(i, salt);
    if (dtype == 2) {
      static_cast<float*>(dst)[i] = v;
    } else if (dtype == 1) {
      static_cast<__half*>(dst)[i] = __float2half_rn(v);
    } else {
      const std::uint32_t u = __float_as_uint(v);
      static_cast<std::uint16_t*>(dst)[i] = std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
}
__global__ void fill_freqs(float* f, std::uint64_t n) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const float a = 6.2831853f * uniform(i / 2, 7);
    f[i] = (i & 1) ? sinf(a) : cosf(a);
  }
}
__global__ void fill_pos(std::int64_t* p, std::uint64_t n, std::int64_t max_pos) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    p[i] = std::int64_t(hash32(i + 99) % std::uint32_t(max_pos));
}

std::vector<std::int64_t> parse_list(const char* s) {
  std::vector<std::int64_t> v;
  while (*s) {
    v.push_back(std::strtoll(s, const_cast<char**>(&s), 10));
    if (*s == ',') ++s;
    else break;
  }
  return v;
}

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> tokens = {1, 16, 64, 256, 1024, 4096, 16384, 65536};
  std::vector<std::int64_t> heads = {64, 16};
  std::string dts = "bf16";
  int iters = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokens")) tokens = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--heads")) heads = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype")) dts = argv[i + 1];
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const DType dt = dts == "fp32" ? DType::kFloat32 : dts == "fp16" ? DType::kFloat16 : DType::kBFloat16;
  const int dtc = dt == DType::kBFloat16 ? 0 : dt == DType::kFloat16 ? 1 : 2;
  std::string why;
  auto rt = cli::make_cuda_runtime(&why);
  if (!rt) {
    std::fprintf(stderr, "cuda_bench: %s\n", why.c_str());
    return 1;
  }
  std::printf("# device: %s\n", rt->name().c_str());
  std::printf("csv,tokens,heads,dtype,variant,us,gbps,copy_us,copy_gbps,ratio_to_copy,ratio_to_baseline,bytes_equal\n");
  std::string table;
  const std::int64_t max_pos = 4096;
  cudaStream_t s = static_cast<cudaStream_t>(rt->stream());
  for (std::int64_t H : heads) {
    for (std::int64_t T : tokens) {
      const std::int64_t rows = T * H;
      const std::size_t es = dtype_size(dt);
      void* q = rt->alloc(std::size_t(rows) * 128 * es);
      void* out = rt->alloc(std::size_t(rows) * 128);
      void* w = rt->alloc(std::size_t(rows) * es);
      float* wo = static_cast<float*>(rt->alloc(std::size_t(rows) * 4));
      float* fr = static_cast<float*>(rt->alloc(std::size_t(max_pos) * 64 * 4));
      std::int64_t* pos = static_cast<std::int64_t*>(rt->alloc(std::size_t(T) * 8));
      fill_kernel<<<1024, 256, 0, s>>>(q, dtc, std::uint64_t(rows) * 128, 1);
      fill_kernel<<<256, 256, 0, s>>>(w, dtc, std::uint64_t(rows), 2);
      fill_freqs<<<256, 256, 0, s>>>(fr, std::uint64_t(max_pos) * 64);
      fill_pos<<<64, 256, 0, s>>>(pos, std::uint64_t(T), max_pos);
      ck(cudaGetLastError(), "fill");
      rt->synchronize();

      const Device dev = rt->device();
      Options o;
      o.backend = Backend::kCuda;
      o.stream = rt->stream();
      auto lib = [&] {
        const Status st = fused_q_indexer_rope_hadamard_quant(
            TensorView::contiguous(q, dt, {T, H, 128}, dev),
            TensorView::contiguous(out, DType::kFloat8E4M3, {T, H, 128}, dev),
            TensorView::contiguous(w, dt, {T, H}, dev), TensorView::contiguous(wo, DType::kFloat32, {T, H, 1}, dev),
            0.37f, TensorView::contiguous(fr, DType::kFloat32, {max_pos, 64}, dev),
            TensorView::contiguous(pos, DType::kInt64, {T}, dev), o);
        if (!st.ok()) {
          std::fprintf(stderr, "cuda_bench: %s\n", st.message().c_str());
          std::exit(1);
        }
      };
      cli::OpBuffers bufs;
      bufs.B = T;
      bufs.H = H;
      bufs.dtype = dt;
      bufs.pos_dtype = DType::kInt64;
      bufs.q_input = q;
      bufs.q_fp8 = out;
      bufs.weight = w;
      bufs.weight_stride_b = H;
      bufs.weights_out = wo;
      bufs.weight_scale = 0.37f;
      bufs.freqs = fr;
      bufs.max_pos = max_pos;
      bufs.positions = pos;
      std::vector<cli::BaselineRun> runs = cli::cuda_baselines(bufs, *rt);
      runs.insert(runs.begin(), cli::BaselineRun{"library-auto", lib});
      runs.push_back(cli::BaselineRun{"library-auto-again", lib});  // order effects show here

      // Correctness: every variant writes the bytes of the library's automatic choice.
      std::vector<std::uint8_t> ref_codes(std::size_t(rows) * 128), codes(ref_codes.size());
      std::vector<std::uint32_t> ref_w(static_cast<std::size_t>(rows)), wv(ref_w.size());
      std::vector<bool> equal(runs.size(), true);
      for (std::size_t k = 0; k < runs.size(); ++k) {
        rt->fill(out, 0x5A, codes.size());
        rt->fill(wo, 0x5A, wv.size() * 4);
        runs[k].run();
        rt->synchronize();
        rt->to_host(k == 0 ? ref_codes.data() : codes.data(), out, codes.size());
        rt->to_host(k == 0 ? ref_w.data() : wv.data(), wo, wv.size() * 4);
        if (k > 0) equal[k] = codes == ref_codes && wv == ref_w;
      }

      const std::int64_t bytes = detail::bytes_moved(T, H, dt, DType::kInt64);
      const double copy_us = rt->copy_median_us(std::size_t(bytes / 2), 100, iters);
      const double copy_gbps = double(bytes) / copy_us * 1e-3;
      std::vector<double> us(runs.size());
      for (std::size_t k = 0; k < runs.size(); ++k) us[k] = rt->time_median_us(runs[k].run, 100, iters);
      double base_us = 0;
      for (std::size_t k = 0; k < runs.size(); ++k)
        if (runs[k].name == "warp-per-row") base_us = us[k];
      for (std::size_t k = 0; k < runs.size(); ++k) {
        const double gbps = double(bytes) / us[k] * 1e-3;
        char line[512];
        std::snprintf(line, sizeof line, "%lld,%lld,%s,%s,%.3f,%.1f,%.3f,%.1f,%.3f,%.3f,%s",
                      (long long)T, (long long)H, dtype_name(dt), runs[k].name.c_str(), us[k], gbps, copy_us,
                      copy_gbps, copy_us / us[k], base_us / us[k], equal[k] ? "yes" : "NO");
        std::printf("csv,%s\n", line);
        if (runs[k].name != "rowgroup-l16") {
          char t[256];
          std::snprintf(t, sizeof t, "%6lld %3lld %-13s %9.2f us %7.0f GB/s copy %6.0f GB/s  x%.2f copy  x%.2f base %s\n",
                        (long long)T, (long long)H, runs[k].name.c_str(), us[k], gbps, copy_gbps, copy_us / us[k],
                        base_us / us[k], equal[k] ? "" : "BYTES DIFFER");
          table += t;
        }
      }
      std::fflush(stdout);
      rt->release(q);
      rt->release(out);
      rt->release(w);
      rt->release(wo);
      rt->release(fr);
      rt->release(pos);
    }
  }
  std::printf("\n%s", table.c_str());
  return 0;
}
