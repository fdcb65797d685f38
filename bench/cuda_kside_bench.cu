// Standalone CUDA benchmark of the key side (docs/KSIDE-SPEC.md; src/cuda/kside.cu), both recipes.
// For each token count it
//   - fills device inputs with random data (per-row magnitudes over decades, weight 1 + N(0, 1)/4,
//     a 4096-row (cos, sin) table, random positions, distinct random slots of a paged cache with
//     page_size 64),
//   - runs our kernel at its automatic shape (and with --shapes at every fixed shape), a baseline
//     of SGLang's design written here from the spec (one warp per token, lane l holding dims
//     4l..4l+3, 8 tokens per 256-thread block, same arithmetic and bytes), and a device-to-device
//     copy of half the op's bytes (so bytes read + written are equal), in the same run;
//   - checks every cache byte of each against the library's one-thread-per-token kernel
//     (kside_row<KR> of src/common/kside_row.h, the spec), so a faster wrong kernel cannot pass;
//   - times each the same way: 20 calls captured in one CUDA graph, the graph replayed, events
//     around each replay, median replay / 20.
// Bytes per call = detail::kside_bytes_moved: per token its input row, position, slot and freqs
// row read and its 132 / 68 cache bytes written; the weight once.
//
// The slots are distinct, so the duplicate-slot rule (docs/KSIDE.md) costs only its method: the
// scan inside the store kernel up to detail::kKsideScanMaxTokens tokens, the two claim kernels
// above, nothing at 1 token. --dup scan,claim also times the automatic shape with each method forced
// (rows ours-l<L>-b<B>-scan / -claim; the scan only up to 16384 tokens: its work grows as N^2),
// which shows where the threshold should be.
//
//   indexer_q_cuda_kside_bench [--tokens 1,8,64,512,1024,4096,16384,65536] [--dtype fp32|bf16|fp16]
//                              [--recipes v4_k_fp8,v4_k_fp4] [--iters N] [--shapes] [--pdl 0|1|both]
//                              [--dup scan,claim]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_bench_common.cuh"
#include "common/kside_problem.h"
#include "common/row.h"
#include "cuda/fp4_e2m1.cuh"
#include "cuda/fp8_e4m3.cuh"
#include "cuda/kside_cuda.h"
#include "indexer_q/indexer_q.h"

using namespace indexer_q;
using namespace indexer_q::bench;

namespace {

// ---------------------------------------------------------------------------------------
// The baseline: SGLang's launch design (one warp per token, 4 dims per lane, 8 tokens per
// block), our arithmetic (docs/KSIDE-SPEC.md section 2), PDL when asked. Written for this benchmark.
// ---------------------------------------------------------------------------------------
template <bool FP4, int DT>
__global__ void __launch_bounds__(256) baseline_warp_kernel(const detail::KProblem p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const std::int64_t t = std::int64_t(blockIdx.x) * 8 + threadIdx.x / 32;
  const int l = int(threadIdx.x % 32);
  if (t >= p.N) return;
  const std::int64_t slot = p.slots[t];
  if (slot < 0) return;  // the whole warp
  const std::int64_t pos = p.pos_dtype == DType::kInt32 ? std::int64_t(static_cast<const int*>(p.positions)[t])
                                                        : static_cast<const std::int64_t*>(p.positions)[t];
  float x[4], w[4];
  if (DT == 2) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(p.input) + t * p.input_stride + 4 * l);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(p.weight) + 4 * l);
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
    w[0] = b.x; w[1] = b.y; w[2] = b.z; w[3] = b.w;
  } else {
    const uint2 a = *reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(p.input) + t * p.input_stride + 4 * l);
    const uint2 b = *reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(p.weight) + 4 * l);
    const std::uint32_t aw[2] = {a.x, a.y}, bw[2] = {b.x, b.y};
    for (int j = 0; j < 2; ++j) {
      if (DT == 0) {
        x[2 * j] = __uint_as_float(aw[j] << 16); x[2 * j + 1] = __uint_as_float(aw[j] & 0xffff0000u);
        w[2 * j] = __uint_as_float(bw[j] << 16); w[2 * j + 1] = __uint_as_float(bw[j] & 0xffff0000u);
      } else {
        x[2 * j] = detail::f16_to_f32(std::uint16_t(aw[j])); x[2 * j + 1] = detail::f16_to_f32(std::uint16_t(aw[j] >> 16));
        w[2 * j] = detail::f16_to_f32(std::uint16_t(bw[j])); w[2 * j + 1] = detail::f16_to_f32(std::uint16_t(bw[j] >> 16));
      }
    }
  }
  if (pos < 0 || pos >= p.max_pos) return;  // the whole warp
  float4 f = make_float4(0, 0, 0, 0);
  if (l >= 16) f = *reinterpret_cast<const float4*>(p.freqs + pos * 64 + 4 * (l - 16));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  float ss = __fmaf_rn(x[3], x[3], __fmaf_rn(x[2], x[2], __fmaf_rn(x[1], x[1], __fmul_rn(x[0], x[0]))));
  for (int m = 16; m >= 1; m >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, m));
  const float nf = rsqrtf(__fmaf_rn(ss, 0x1p-7f, p.eps));
  float d[4];
  for (int k = 0; k < 4; ++k) d[k] = __fmul_rn(__fmul_rn(x[k], nf), w[k]);
  if (l >= 16) {
    const float c0 = f.x, s0 = f.y, c1 = f.z, s1 = f.w;
    const float a0 = d[0], b0 = d[1], a1 = d[2], b1 = d[3];
    d[0] = __fmaf_rn(a0, c0, -__fmul_rn(b0, s0));
    d[1] = __fmaf_rn(a0, s0, __fmul_rn(b0, c0));
    d[2] = __fmaf_rn(a1, c1, -__fmul_rn(b1, s1));
    d[3] = __fmaf_rn(a1, s1, __fmul_rn(b1, c1));
  }
  for (int st = 1; st < 4; st <<= 1)
    for (int k = 0; k < 4; ++k)
      if (!(k & st)) {
        const float u = d[k], v = d[k + st];
        d[k] = __fadd_rn(u, v);
        d[k + st] = __fsub_rn(u, v);
      }
  for (int m = 1; m < 32; m <<= 1)
    for (int k = 0; k < 4; ++k) {
      const float o = __shfl_xor_sync(0xffffffffu, d[k], m);
      d[k] = (l & m) ? __fsub_rn(o, d[k]) : __fadd_rn(d[k], o);
    }
  for (int k = 0; k < 4; ++k) d[k] = __fmul_rn(d[k], detail::kHadamardScale);
  std::uint8_t* page = p.cache + (slot >> p.log2_page) * p.page_bytes;
  const std::int64_t r = slot & (p.page_size - 1);
  if (FP4) {
    float amax = fmaxf(fmaxf(fabsf(d[0]), fabsf(d[1])), fmaxf(fabsf(d[2]), fabsf(d[3])));
    for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    const std::uint32_t e = detail::ue8m0_of_amax(amax);
    const float inv = detail::ue8m0_inverse(std::uint8_t(e));
    std::uint32_t codes = 0;
    for (int k = 0; k < 4; ++k) codes |= std::uint32_t(detail::e2m1_encode(__fmul_rn(d[k], inv))) << (4 * k);
    *reinterpret_cast<std::uint16_t*>(page + 64 * r + 2 * l) = std::uint16_t(codes);
    if ((l & 7) == 0) page[64 * p.page_size + 4 * r + l / 8] = std::uint8_t(e);
  } else {
    float amax = fmaxf(fmaxf(fabsf(d[0]), fabsf(d[1])), fmaxf(fabsf(d[2]), fabsf(d[3])));
    for (int m = 16; m >= 1; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    const float scale = __fdiv_rn(fmaxf(1e-4f, amax), 448.0f);
    const float inv = __fdiv_rn(1.0f, scale);
    *reinterpret_cast<std::uint32_t*>(page + 128 * r + 4 * l) = detail::quantize4_e4m3(
        __fmul_rn(d[0], inv), __fmul_rn(d[1], inv), __fmul_rn(d[2], inv), __fmul_rn(d[3], inv));
    if (l == 0) *reinterpret_cast<float*>(page + 128 * p.page_size + 4 * r) = scale;
  }
}

cudaError_t launch_baseline(const detail::KProblem& p, cudaStream_t s, bool pdl) {
  const dim3 grid(unsigned((p.N + 7) / 8)), block(256);
  const bool fp4 = p.recipe == KRecipeId::kV4KFp4;
  const int dt = p.dtype == DType::kFloat32 ? 2 : p.dtype == DType::kFloat16 ? 1 : 0;
  if (fp4) {
    if (dt == 2) return launch_pdl(baseline_warp_kernel<true, 2>, grid, block, s, pdl, p);
    if (dt == 1) return launch_pdl(baseline_warp_kernel<true, 1>, grid, block, s, pdl, p);
    return launch_pdl(baseline_warp_kernel<true, 0>, grid, block, s, pdl, p);
  }
  if (dt == 2) return launch_pdl(baseline_warp_kernel<false, 2>, grid, block, s, pdl, p);
  if (dt == 1) return launch_pdl(baseline_warp_kernel<false, 1>, grid, block, s, pdl, p);
  return launch_pdl(baseline_warp_kernel<false, 0>, grid, block, s, pdl, p);
}

// ---------------------------------------------------------------------------------------
// inputs
// ---------------------------------------------------------------------------------------
// Input rows (row_scaled): roughly normal, times a per-row magnitude over decades; the weight:
// 1 + roughly normal / 4.
__device__ float value(std::uint64_t i, std::uint64_t salt, bool row_scaled) {
  const float c = centered_sum4(i, salt);
  const float mag = row_scaled ? exp2f(-8.0f + 16.0f * uniform(i / 128, salt ^ 0x55)) : 0.25f;
  return c * mag + (row_scaled ? 0.0f : 1.0f);
}
__global__ void fill_kernel(void* dst, int dtype, std::uint64_t n, std::uint64_t salt, bool row_scaled) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    store_as(dst, dtype, i, value(i, salt, row_scaled));
}

}  // namespace

int main(int argc, char** argv) {
  prog_name = "cuda_kside_bench";
  std::vector<std::int64_t> tokens = {1, 8, 64, 512, 1024, 4096, 16384, 65536};
  std::vector<KRecipeId> recipes = all_krecipes();
  std::string dts = "fp32", pdl_mode = "both";
  int iters = 100;
  bool shapes = false, dup_scan = false, dup_claim = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--shapes") {
      shapes = true;
      continue;
    }
    if (a == "--tokens") {
      tokens.clear();
      for (const std::string& x : split(val)) tokens.push_back(std::atoll(x.c_str()));
    } else if (a == "--dtype") {
      dts = val;
    } else if (a == "--iters") {
      iters = std::atoi(val);
    } else if (a == "--dup") {
      for (const std::string& x : split(val)) {
        if (x == "scan") dup_scan = true;
        else if (x == "claim") dup_claim = true;
        else {
          std::fprintf(stderr, "--dup: expected scan and / or claim, got %s\n", x.c_str());
          return 2;
        }
      }
    } else if (a == "--pdl") {
      pdl_mode = val;
    } else if (a == "--recipes") {
      if (!parse_recipe_list(val, parse_krecipe, "unknown key recipe", &recipes)) return 2;
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  const DType dt = dts == "bf16" ? DType::kBFloat16 : dts == "fp16" ? DType::kFloat16 : DType::kFloat32;
  const int dtc = dt == DType::kBFloat16 ? 0 : dt == DType::kFloat16 ? 1 : 2;
  std::vector<bool> pdls;
  if (pdl_mode != "1") pdls.push_back(false);
  if (pdl_mode != "0") pdls.push_back(true);
  const cudaDeviceProp prop = first_device_or_exit();
  std::printf("# device: %s, %d SMs; %s input, int64 positions, page_size 64, max_pos 4096; median of %d replays of %d calls\n",
              prop.name, prop.multiProcessorCount, dtype_name(dt), iters, kPerGraph);
  std::printf("csv,tokens,dtype,recipe,impl,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,ratio_to_baseline,bytes_equal\n");
  std::string table;
  const std::int64_t max_pos = 4096, page_size = 64;
  cudaStream_t s = nullptr;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const Device dev{DeviceType::kCUDA, 0};
  bool all_equal = true;
  for (std::int64_t T : tokens) {
    const std::size_t es = dtype_size(dt);
    const std::int64_t pages = (T + page_size - 1) / page_size;
    Dev in(std::size_t(T) * 128 * es), w(128 * es), fr(std::size_t(max_pos) * 64 * 4), pos(std::size_t(T) * 8),
        sl(std::size_t(T) * 8), cache(std::size_t(pages) * 132 * std::size_t(page_size));
    fill_kernel<<<1024, 256, 0, s>>>(in.p, dtc, std::uint64_t(T) * 128, 1, true);
    fill_kernel<<<1, 128, 0, s>>>(w.p, dtc, 128, 2, false);
    fill_freqs<<<256, 256, 0, s>>>(static_cast<float*>(fr.p), std::uint64_t(max_pos) * 64);
    fill_pos<<<64, 256, 0, s>>>(static_cast<std::int64_t*>(pos.p), std::uint64_t(T), max_pos);
    ck(cudaGetLastError(), "fill");
    {  // distinct slots, shuffled on the host
      std::vector<std::int64_t> h(static_cast<std::size_t>(T), 0);
      for (std::int64_t i = 0; i < T; ++i) h[std::size_t(i)] = i;
      std::uint64_t x = 12345;
      for (std::int64_t i = T - 1; i > 0; --i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(h[std::size_t(i)], h[std::size_t((x >> 33) % std::uint64_t(i + 1))]);
      }
      ck(cudaMemcpy(sl.p, h.data(), h.size() * 8, cudaMemcpyHostToDevice), "slots");
    }
    ck(cudaStreamSynchronize(s), "fill sync");

    for (KRecipeId rid : recipes) {
      const std::int64_t tb = kside_token_bytes(rid);
      const std::size_t cache_bytes = std::size_t(pages * tb * page_size);
      const std::int64_t bytes = detail::kside_bytes_moved(T, dt, DType::kInt64, rid);
      Dev c0(std::size_t(bytes / 2) + 16), c1(std::size_t(bytes / 2) + 16);
      const double copy_us = copy_median_us(s, c1.p, c0.p, std::size_t(bytes / 2), 10, iters);
      const double copy_gbps = to_gbps(bytes, copy_us);

      detail::KProblem p;
      p.recipe = rid;
      p.N = T;
      p.dtype = dt;
      p.input = in.p;
      p.input_stride = 128;
      p.weight = w.p;
      p.eps = 1e-6f;
      p.freqs = static_cast<const float*>(fr.p);
      p.max_pos = max_pos;
      p.positions = pos.p;
      p.pos_dtype = DType::kInt64;
      p.slots = static_cast<const std::int64_t*>(sl.p);
      p.cache = static_cast<std::uint8_t*>(cache.p);
      p.num_pages = pages;
      p.page_size = page_size;
      p.log2_page = 6;
      p.page_bytes = tb * page_size;
      p.device = dev;

      KStoreArgs a;
      a.recipe = rid;
      a.input = TensorView::contiguous(in.p, dt, {T, 128}, dev);
      a.weight = TensorView::contiguous(w.p, dt, {128}, dev);
      a.eps = 1e-6f;
      a.freqs = TensorView::contiguous(fr.p, DType::kFloat32, {max_pos, 64}, dev);
      a.positions = TensorView::contiguous(pos.p, DType::kInt64, {T}, dev);
      a.slots = TensorView::contiguous(sl.p, DType::kInt64, {T}, dev);
      a.kvcache = TensorView::contiguous(cache.p, DType::kUInt8, {pages, tb * page_size}, dev);
      a.page_size = page_size;

      auto collect = [&](const std::function<void()>& fn) {
        ck(cudaMemsetAsync(cache.p, 0x5A, cache_bytes, s), "poison");
        fn();
        ck(cudaStreamSynchronize(s), "sync");
        std::vector<std::uint8_t> h(cache_bytes);
        ck(cudaMemcpy(h.data(), cache.p, cache_bytes, cudaMemcpyDeviceToHost), "to host");
        return h;
      };
      const std::vector<std::uint8_t> want =
          collect([&] { ck(detail::kside_cuda_run_variant(p, s, false, detail::KVariant{0, 128}), "fallback"); });

      for (bool pdl : pdls) {
        struct Entry {
          std::string name;
          std::function<void()> fn;
        };
        std::vector<Entry> entries;
        entries.push_back({"baseline-warp-per-token", [&, pdl] { ck(launch_baseline(p, s, pdl), "baseline"); }});
        const detail::KVariant av = detail::kside_choose_variant(T);
        entries.push_back({"ours-auto(l" + std::to_string(av.lanes) + "-b" + std::to_string(av.block) + ")",
                           [&, pdl] {
                             Options o;
                             o.backend = Backend::kCuda;
                             o.stream = s;
                             o.enable_pdl = pdl;
                             ck(run(a, o), "run");
                           }});
        for (const detail::KDup dup : {detail::KDup::kScan, detail::KDup::kClaim}) {
          const bool scan = dup == detail::KDup::kScan;
          if (!(scan ? dup_scan && T <= 16384 : dup_claim)) continue;
          const detail::KVariant v{av.lanes, av.block, dup};
          entries.push_back({"ours-l" + std::to_string(av.lanes) + "-b" + std::to_string(av.block) +
                                 (scan ? "-scan" : "-claim"),
                             [&, v, pdl] { ck(detail::kside_cuda_run_variant(p, s, pdl, v), "variant"); }});
        }
        if (shapes)
          for (int lanes : {4, 8, 16, 32})
            for (int block : {64, 128, 256}) {
              const detail::KVariant v{lanes, block};
              entries.push_back({"ours-l" + std::to_string(lanes) + "-b" + std::to_string(block),
                                 [&, v, pdl] { ck(detail::kside_cuda_run_variant(p, s, pdl, v), "variant"); }});
            }
        double base_us = 0.0;
        for (const Entry& e : entries) {
          const bool equal = collect(e.fn) == want;
          all_equal = all_equal && equal;
          const double us = time_median_us(s, e.fn, 10, iters);
          if (base_us == 0.0) base_us = us;
          const double gbps = to_gbps(bytes, us);
          std::printf("csv,%lld,%s,%s,%s,%d,%lld,%.3f,%.1f,%.3f,%.1f,%.3f,%.3f,%s\n", (long long)T, dtype_name(dt),
                      krecipe_name(rid), e.name.c_str(), int(pdl), (long long)bytes, us, gbps, copy_us, copy_gbps,
                      copy_us / us, base_us / us, equal ? "yes" : "NO");
          char t[360];
          std::snprintf(t, sizeof t,
                        "%6lld %-9s %-26s pdl=%d %10lld B %9.3f us %7.1f GB/s  copy %7.1f GB/s  x%.3f copy  x%.3f baseline %s\n",
                        (long long)T, krecipe_name(rid), e.name.c_str(), int(pdl), (long long)bytes, us, gbps, copy_gbps,
                        copy_us / us, base_us / us, equal ? "" : "BYTES DIFFER");
          table += t;
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n%s", table.c_str());
  std::printf("all bytes equal to the one-thread-per-token kernel: %s\n", all_equal ? "yes" : "NO");
  cudaStreamDestroy(s);
  return all_equal ? 0 : 3;
}
