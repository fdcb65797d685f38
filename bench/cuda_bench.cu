// Standalone CUDA benchmark of every recipe (needs only the library, its src/ internals,
// bench/cuda_baseline.cuh and bench/cuda_bench_common.cuh; nothing from tools/). For each size it
//   - fills device inputs with random data (per-row magnitudes over decades, random weights,
//     a freqs table of (cos, sin) values, random positions),
//   - runs every recipe through the public API (run(OpArgs), automatic shape) and checks its
//     bytes (codes, FP4 block scales, weights_out) against the library's one-thread-per-row
//     fallback kernel (process_row<R> of src/common/row.h, the spec) on the same inputs; for
//     v4_fp8 also the one-warp-per-row baseline of bench/cuda_baseline.cuh,
//   - times each call and a device-to-device copy of half the op's bytes (so bytes read +
//     written are equal) the same way, in the same run: 20 calls captured in one CUDA graph,
//     the graph replayed, events around each replay, median replay / 20,
//   - with PDL off and on (--pdl; a `pdl` column): each call of the captured graph is launched
//     with programmatic stream serialization, so call n + 1 launches while call n runs (the
//     engines launch this op that way on sm_90+); the baseline likewise (SGLang 0.5.23's
//     placement: its position before griddepcontrol.wait, launch_dependents after the RoPE), and
//     at decode sizes also with the position, freqs row and weight read before the wait
//     (baseline-loads-before-wait: what the library does with Options::side_inputs_ready),
//   - at decode sizes (up to 16384 rows) with PDL on, also with Options::side_inputs_ready
//     (auto-side-ready: position, freqs row and weight read before griddepcontrol.wait),
//   - optionally (--shapes) times each recipe at every launch shape of src/cuda/launch_shapes.inc
//     too (lanes per row, rows per group, block, and with PDL on, where the kernel triggers its
//     dependents), and the baseline with its trigger after the stores.
// vLLM's forms run with head_scale 0.125 (the others with 1).
// Effective bytes per call = detail::bytes_moved: per row 128 * input size read + weight read +
// codes written (128 fp8, or 64 fp4 + 4 block-scale bytes) + 4 weights_out; per token one
// position and one freqs row (256 bytes).
//
//   indexer_q_cuda_bench [--tokens 1,8,64,256,1024,4096,16384,65536] [--heads 64] [--dtype bf16|fp16|fp32]
//                        [--recipes v4_fp8,v4_fp4,...] [--iters N] [--pdl off,on] [--shapes]
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

#include "cuda_baseline.cuh"
#include "cuda_bench_common.cuh"
#include "common/problem.h"
#include "cuda/cuda_backend.h"
#include "indexer_q/indexer_q.h"

using namespace indexer_q;
using namespace indexer_q::bench;

namespace {

// Roughly normal values (sum of uniforms) scaled per row.
__device__ float value(std::uint64_t i, std::uint64_t salt) {
  const float c = centered_sum4(i, salt);
  const float row_mag = exp2f(-6.0f + 12.0f * uniform(i / 128, salt ^ 0x55));
  return c * row_mag;
}

__global__ void fill_kernel(void* dst, int dtype, std::uint64_t n, std::uint64_t salt) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    store_as(dst, dtype, i, value(i, salt));
}

// Floors for the decode sizes (--shapes), on the library's small-batch grid (16 threads per row,
// 256-thread blocks), launched like the library (PDL on: trigger at the first instruction, then
// griddepcontrol.wait): what = 0 stores one word per row and nothing else (launch, dependency
// and completion alone); what = 1 adds the loads the op cannot avoid (the position, then the
// freqs row it selects, and the q chunk) and stores 8 bytes per thread made from them (the
// dependent round trip positions -> freqs). Their outputs are not the op's (not compared).
__global__ void __launch_bounds__(256) floor_kernel(const detail::Problem p, int what) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const std::int64_t rows = p.B * p.H;
  const std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 16;
  const int l = threadIdx.x % 16;
  if (row >= rows) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (what == 0) {
    if (l == 0) p.weights_out[row] = 1.0f;
    return;
  }
  const std::int64_t b = row / p.H;
  const std::int64_t pos = static_cast<const std::int64_t*>(p.positions)[b];
  const uint4 q = static_cast<const uint4*>(p.q_input)[row * 16 + l];
  const float4 f = reinterpret_cast<const float4*>(p.freqs + (pos >= 0 && pos < p.max_pos ? pos : 0) * 64)[l];
  uint2 o;
  o.x = q.x ^ q.y ^ __float_as_uint(f.x) ^ __float_as_uint(f.y);
  o.y = q.z ^ q.w ^ __float_as_uint(f.z) ^ __float_as_uint(f.w);
  reinterpret_cast<uint2*>(p.q_out)[row * 16 + l] = o;
  if (l == 0) p.weights_out[row] = __uint_as_float(o.x);
}

cudaError_t launch_floor(const detail::Problem& p, cudaStream_t s, bool pdl, int what) {
  const unsigned grid = unsigned((p.rows() * 16 + 255) / 256);
  const cudaError_t e = launch_pdl(floor_kernel, dim3(grid), dim3(256), s, pdl, p, what);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// The outputs of one call, copied to the host.
struct Result {
  std::vector<std::uint8_t> out, sf;
  std::vector<std::uint32_t> w;
  bool operator==(const Result& o) const { return out == o.out && sf == o.sf && w == o.w; }
};

}  // namespace

int main(int argc, char** argv) {
  prog_name = "cuda_bench";
  std::vector<std::int64_t> tokens = {1, 8, 64, 256, 1024, 4096, 16384, 65536};
  std::vector<bool> pdls = {false, true};
  std::vector<std::int64_t> heads = {64};
  std::vector<RecipeId> recipes = all_recipes();
  std::string dts = "bf16";
  int iters = 100;
  bool shapes = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--shapes") {
      shapes = true;
      continue;
    }
    if (a == "--tokens" || a == "--heads") {
      std::vector<std::int64_t>& v = a == "--tokens" ? tokens : heads;
      v.clear();
      for (const std::string& x : split(val)) v.push_back(std::atoll(x.c_str()));
    } else if (a == "--pdl") {
      pdls.clear();
      for (const std::string& x : split(val)) {
        if (x != "on" && x != "off") {
          std::fprintf(stderr, "--pdl: expected a list of on|off, got %s\n", x.c_str());
          return 2;
        }
        pdls.push_back(x == "on");
      }
    } else if (a == "--dtype") {
      dts = val;
    } else if (a == "--iters") {
      iters = std::atoi(val);
    } else if (a == "--recipes") {
      if (!parse_recipe_list(val, parse_recipe, "unknown recipe", &recipes)) return 2;
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  const DType dt = dts == "fp32" ? DType::kFloat32 : dts == "fp16" ? DType::kFloat16 : DType::kBFloat16;
  const int dtc = dt == DType::kBFloat16 ? 0 : dt == DType::kFloat16 ? 1 : 2;
  const cudaDeviceProp prop = first_device_or_exit();
  std::printf("# device: %s, %d SMs; %s input, int64 positions, weight_scale 0.37; median of %d replays of %d calls\n",
              prop.name, prop.multiProcessorCount, dtype_name(dt), iters, kPerGraph);
  std::printf("csv,tokens,heads,dtype,recipe,shape,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,gbps_vs_v4_fp8,bytes_equal\n");
  std::string table;
  const std::int64_t max_pos = 4096;
  cudaStream_t s = nullptr;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const Device dev{DeviceType::kCUDA, 0};
  bool all_equal = true;
  for (std::int64_t H : heads) {
    for (std::int64_t T : tokens) {
      const std::int64_t rows = T * H;
      const std::size_t es = dtype_size(dt);
      Dev q(std::size_t(rows) * 128 * es), out(std::size_t(rows) * 128), sf(std::size_t(rows) * 4),
          w(std::size_t(rows) * es), wo(std::size_t(rows) * 4), fr(std::size_t(max_pos) * 64 * 4),
          pos(std::size_t(T) * 8);
      fill_kernel<<<1024, 256, 0, s>>>(q.p, dtc, std::uint64_t(rows) * 128, 1);
      fill_kernel<<<256, 256, 0, s>>>(w.p, dtc, std::uint64_t(rows), 2);
      fill_freqs<<<256, 256, 0, s>>>(static_cast<float*>(fr.p), std::uint64_t(max_pos) * 64);
      fill_pos<<<64, 256, 0, s>>>(static_cast<std::int64_t*>(pos.p), std::uint64_t(T), max_pos);
      ck(cudaGetLastError(), "fill");
      ck(cudaStreamSynchronize(s), "fill sync");

      // The copy first (same bytes read + written as the op), then the recipes.
      const std::int64_t bytes_v4 = detail::bytes_moved(T, H, dt, DType::kInt64, RecipeId::kV4Fp8);
      Dev c0(std::size_t(bytes_v4 / 2)), c1(std::size_t(bytes_v4 / 2));
      double v4_gbps = 0.0;
      for (std::size_t ri = 0; ri <= recipes.size(); ++ri) {
        // The last entry repeats the first recipe (order effects show there).
        const RecipeId rid = recipes[ri < recipes.size() ? ri : 0];
        const bool fp4 = recipe(rid).format == OutFormat::kE2M1;
        const std::int64_t ob = fp4 ? 64 : 128;
        const std::int64_t bytes = detail::bytes_moved(T, H, dt, DType::kInt64, rid);
        const double copy_us = copy_median_us(s, c1.p, c0.p, std::size_t(bytes / 2), 10, iters);
        const double copy_gbps = to_gbps(bytes, copy_us);

        OpArgs a;
        a.recipe = rid;
        a.q_input = TensorView::contiguous(q.p, dt, {T, H, 128}, dev);
        a.q_out = TensorView::contiguous(out.p, fp4 ? DType::kUInt8
                                               : recipe(rid).format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ
                                                                                             : DType::kFloat8E4M3,
                                         {T, H, ob}, dev);
        // q_scale: FP4 block scales, or the FP8 row scale of a recipe with scale_out
        const bool wsf = recipe_writes_q_scale(recipe(rid));
        if (fp4) a.q_scale = TensorView::contiguous(sf.p, DType::kInt32, {T, H}, dev);
        else if (wsf) a.q_scale = TensorView::contiguous(sf.p, DType::kFloat32, {T, H}, dev);
        a.weight = TensorView::contiguous(w.p, dt, {T, H}, dev);
        a.weights_out = TensorView::contiguous(wo.p, DType::kFloat32, {T, H, 1}, dev);
        a.weight_scale = 0.37f;
        // vLLM's forms take a second factor (vLLM passes 64 ** -0.5); the others ignore it.
        const float head_scale = recipe(rid).quant == Quantizer::kVllm ? 0.125f : 1.0f;
        a.head_scale = head_scale;
        a.freqs = TensorView::contiguous(fr.p, DType::kFloat32, {max_pos, 64}, dev);
        a.positions = TensorView::contiguous(pos.p, DType::kInt64, {T}, dev);
        // A recipe without RoPE takes no freqs nor positions, one without weights no weight nor
        // weights_out (empty views; null in the Problem).
        const bool has_rope = recipe_has_rope(recipe(rid)), has_weights = recipe_has_weights(recipe(rid));
        if (!has_rope) a.freqs = a.positions = TensorView{};
        if (!has_weights) a.weight = a.weights_out = TensorView{};
        Options o;
        o.backend = Backend::kCuda;
        o.stream = s;
        detail::Problem p;
        p.recipe = rid;
        p.B = T;
        p.H = H;
        p.dtype = dt;
        p.q_input = q.p;
        p.q_out = static_cast<std::uint8_t*>(out.p);
        p.q_sf = wsf ? static_cast<std::uint8_t*>(sf.p) : nullptr;
        p.weight = w.p;
        p.weight_dtype = dt;  // the weight buffer holds the input dtype, as in SGLang's design
        p.weight_stride_b = H;
        p.weights_out = static_cast<float*>(wo.p);
        p.weight_scale = 0.37f;
        p.head_scale = head_scale;
        p.freqs = static_cast<const float*>(fr.p);
        p.max_pos = max_pos;
        p.positions = pos.p;
        p.pos_dtype = DType::kInt64;
        if (!has_rope) {
          p.freqs = nullptr;
          p.positions = nullptr;
        }
        if (!has_weights) {
          p.weight = nullptr;
          p.weights_out = nullptr;
        }
        p.device = dev;

        struct Entry {
          std::string shape;
          bool pdl;
          std::function<void()> fn;
          bool op = true;  // computes the op (bytes compared); false: a floor
        };
        std::vector<Entry> entries;
        for (const bool pdl : pdls) {
          Options op = o;
          op.enable_pdl = pdl;
          entries.push_back({"auto", pdl, [&, op] { ck(run(a, op), "run"); }});
        }
        // Options::side_inputs_ready (positions, freqs, weight read before griddepcontrol.wait:
        // true here, nothing writes them) at the decode sizes, PDL on.
        if (rows <= 16384 && ri < recipes.size()) {
          for (const bool pdl : pdls) {
            if (!pdl) continue;
            Options op = o;
            op.enable_pdl = true;
            op.side_inputs_ready = true;
            entries.push_back({"auto-side-ready", pdl, [&, op] { ck(run(a, op), "run"); }});
          }
        }
        // Fixed shapes (--shapes): every entry of src/cuda/launch_shapes.inc (kLaunchShapes) at its
        // block and at 256, named l<lanes>-r<group_rows>-b<block>[-t<trigger>] (t0 at start, t1
        // after the loads; the trigger only matters with PDL on). Above 16384 rows the 16-lane
        // shapes are left out (latency shapes).
        if (shapes && ri < recipes.size()) {
          std::vector<detail::Variant> list;
          for (const detail::LaunchShape& sh : detail::kLaunchShapes) {
            if (rows > 16384 && sh.lanes >= 16) continue;
            for (int b : {sh.block, 256}) {
              for (int t : {0, 1}) {
                detail::Variant v;
                v.lanes = sh.lanes;
                v.group_rows = sh.group_rows;
                v.block = b;
                v.trigger = t;
                bool dup = false;
                for (const detail::Variant& u : list)
                  dup = dup || (u.lanes == v.lanes && u.group_rows == v.group_rows && u.block == v.block && u.trigger == v.trigger);
                if (!dup) list.push_back(v);
              }
            }
          }
          for (const bool pdl : pdls) {
            for (const detail::Variant& v : list) {
              if (!pdl && v.trigger != 1) continue;  // the trigger is a no-op without PDL
              entries.push_back({"l" + std::to_string(v.lanes) + "-r" + std::to_string(v.group_rows) + "-b" +
                                     std::to_string(v.block) + (pdl ? "-t" + std::to_string(v.trigger) : std::string()),
                                 pdl, [&, v, pdl] { ck(detail::cuda_run_variant(p, s, pdl, v), "run_variant"); }});
            }
          }
        }
        if (rid == RecipeId::kV4Fp8 && ri < recipes.size()) {
          for (const bool pdl : pdls) {
            const bench::BaselinePdl bp = pdl ? bench::BaselinePdl::kTriggerEarly : bench::BaselinePdl::kOff;
            entries.push_back({"baseline-warp-per-row", pdl, [&, bp] { ck(bench::launch_baseline_warp(p, s, bp), "baseline"); }});
            if (pdl && rows <= 16384)
              entries.push_back({"baseline-loads-before-wait", pdl, [&] {
                                   ck(bench::launch_baseline_warp(p, s, bench::BaselinePdl::kLoadsBeforeWait), "baseline");
                                 }});
            if (pdl && shapes)
              entries.push_back({"baseline-trigger-late", pdl, [&] {
                                   ck(bench::launch_baseline_warp(p, s, bench::BaselinePdl::kTriggerLate), "baseline");
                                 }});
          }
        }
        if (shapes && rid == RecipeId::kV4Fp8 && ri < recipes.size() && rows <= 16384) {
          for (const bool pdl : pdls) {
            for (int what : {0, 1}) {
              Entry e{what == 0 ? "floor-store-only" : "floor-pos-freqs-q", pdl,
                      [&, pdl, what] { ck(launch_floor(p, s, pdl, what), "floor"); }};
              e.op = false;
              entries.push_back(e);
            }
          }
        }

        // Expected bytes: the fallback kernel (process_row<R>).
        auto collect = [&](const std::function<void()>& fn) {
          ck(cudaMemsetAsync(out.p, 0x5A, std::size_t(rows * ob), s), "poison");
          ck(cudaMemsetAsync(sf.p, 0x5A, std::size_t(rows) * 4, s), "poison");
          ck(cudaMemsetAsync(wo.p, 0x5A, std::size_t(rows) * 4, s), "poison");
          fn();
          ck(cudaStreamSynchronize(s), "sync");
          Result r;
          r.out.resize(std::size_t(rows * ob));
          r.sf.resize(wsf ? std::size_t(rows) * 4 : 0);
          r.w.resize(std::size_t(rows));
          ck(cudaMemcpy(r.out.data(), out.p, r.out.size(), cudaMemcpyDeviceToHost), "to host");
          if (wsf) ck(cudaMemcpy(r.sf.data(), sf.p, r.sf.size(), cudaMemcpyDeviceToHost), "to host");
          ck(cudaMemcpy(r.w.data(), wo.p, r.w.size() * 4, cudaMemcpyDeviceToHost), "to host");
          return r;
        };
        detail::Variant fallback;
        fallback.lanes = 0;
        const Result want = collect([&] { ck(detail::cuda_run_variant(p, s, false, fallback), "fallback"); });

        for (const Entry& e : entries) {
          const bool equal = e.op ? collect(e.fn) == want : true;
          all_equal = all_equal && equal;
          const double us = time_median_us(s, e.fn, 10, iters);
          const double gbps = to_gbps(bytes, us);
          const bool again = ri == recipes.size();
          const std::string name = std::string(recipe_name(rid)) + (again ? "(again)" : "");
          if (rid == RecipeId::kV4Fp8 && e.shape == "auto" && e.pdl == pdls[0] && !again) v4_gbps = gbps;
          const double vs_v4 = v4_gbps > 0 ? gbps / v4_gbps : 0.0;
          std::printf("csv,%lld,%lld,%s,%s,%s,%s,%lld,%.3f,%.1f,%.3f,%.1f,%.3f,%.3f,%s\n", (long long)T, (long long)H,
                      dtype_name(dt), name.c_str(), e.shape.c_str(), e.pdl ? "on" : "off", (long long)bytes, us, gbps,
                      copy_us, copy_gbps, copy_us / us, vs_v4, !e.op ? "-" : equal ? "yes" : "NO");
          char t[320];
          std::snprintf(t, sizeof t, "%6lld %3lld %-18s %-22s pdl %-3s %10lld B %9.3f us %7.1f GB/s  copy %7.1f GB/s  x%.3f copy  x%.3f v4_fp8 %s\n",
                        (long long)T, (long long)H, name.c_str(), e.shape.c_str(), e.pdl ? "on" : "off",
                        (long long)bytes, us, gbps, copy_gbps, copy_us / us, vs_v4, equal ? "" : "BYTES DIFFER");
          table += t;
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n%s", table.c_str());
  std::printf("all bytes equal to the fallback kernel: %s\n", all_equal ? "yes" : "NO");
  cudaStreamDestroy(s);
  return all_equal ? 0 : 3;
}
