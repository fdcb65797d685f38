// The query side for the CUDA benchmark harness (cuda_harness.cuh): `indexer_q_cuda_bench
// [--op query]`, every recipe of include/indexer_q/recipes.inc. Per size it
//   - fills device inputs with random data (per-row magnitudes over decades, random weights,
//     a freqs table of (cos, sin) values, random positions),
//   - runs every recipe through the public API (run(OpArgs), automatic shape) and checks its
//     bytes (codes, FP4 block scales / FP8 row scales, weights_out) against the library's
//     one-thread-per-row fallback kernel (process_row<R> of src/common/row.h, the spec) on the
//     same inputs; for v4_fp8 also the one-warp-per-row baseline of bench/cuda_baseline.cuh,
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
//     dependents), the baseline with its trigger after the stores, and two floors at decode sizes.
// After the last recipe the first runs again (`<recipe>(again)`, auto shape): order effects show.
// vLLM's forms run with head_scale 0.125 (the others with 1).
// Effective bytes per call = detail::bytes_moved: per row 128 * input size read + weight read +
// codes written (128 fp8, or 64 fp4 + 4 block-scale bytes) + 4 weights_out; per token one
// position and one freqs row (256 bytes).
// Columns (unchanged since the query side's own benchmark; bench/plot_bench.py reads them):
//   csv,tokens,heads,dtype,recipe,shape,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,gbps_vs_v4_fp8,bytes_equal
// gbps_vs_v4_fp8: GB/s over that of v4_fp8's auto shape at the first --pdl mode, same size (0
// before that row is timed).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda_baseline.cuh"
#include "cuda_harness.cuh"
#include "common/problem.h"
#include "cuda/cuda_backend.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace bench {
namespace query_op {

// Roughly normal values (sum of uniforms) scaled per row.
__device__ inline float value(std::uint64_t i, std::uint64_t salt) {
  const float c = centered_sum4(i, salt);
  const float row_mag = exp2f(-6.0f + 12.0f * uniform(i / 128, salt ^ 0x55));
  return c * row_mag;
}

static __global__ void fill_kernel(void* dst, int dtype, std::uint64_t n, std::uint64_t salt) {
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
static __global__ void __launch_bounds__(256) floor_kernel(const detail::Problem p, int what) {
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

inline cudaError_t launch_floor(const detail::Problem& p, cudaStream_t s, bool pdl, int what) {
  const unsigned grid = unsigned((p.rows() * 16 + 255) / 256);
  const cudaError_t e = launch_pdl(floor_kernel, dim3(grid), dim3(256), s, pdl, p, what);
  return e != cudaSuccess ? e : cudaGetLastError();
}

class QueryOp : public CudaOp {
 public:
  const char* name() const override { return "query"; }
  Columns columns() const override {
    return {"csv,tokens,heads,dtype,recipe,shape,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,gbps_vs_v4_fp8,"
            "bytes_equal",
            "off", "on", "pdl ", 3, 22, "v4_fp8", "the fallback kernel"};
  }
  std::vector<std::int64_t> default_tokens() const override { return {1, 8, 64, 256, 1024, 4096, 16384, 65536}; }
  DType default_dtype() const override { return DType::kBFloat16; }
  bool has_heads() const override { return true; }
  bool repeat_first_recipe() const override { return true; }
  bool parse_recipes(const char* list) override {
    if (std::string(list) == "all") {
      recipes_ = all_recipes();
      return true;
    }
    return parse_recipe_list(list, parse_recipe, "unknown recipe", &recipes_);
  }
  int parse_option(const std::string& opt, const char*) override {
    if (opt == "--shapes") {
      shapes_ = true;
      return 1;
    }
    return 0;
  }
  std::string usage() const override {
    return "  --tokens    default 1,8,64,256,1024,4096,16384,65536; --heads default 64; --dtype default bf16\n"
           "  --recipes   query recipes, or all (the default)\n"
           "  --shapes    also every launch shape of src/cuda/launch_shapes.inc, the baseline's late trigger\n"
           "              and two floors at decode sizes\n";
  }
  std::string describe(DType dt) const override {
    return std::string(dtype_name(dt)) + " input, int64 positions, weight_scale 0.37";
  }

  void setup(std::int64_t T, std::int64_t H, DType dt, cudaStream_t s) override {
    q_.reset(); out_.reset(); sf_.reset(); w_.reset(); wo_.reset(); fr_.reset(); pos_.reset();
    T_ = T;
    H_ = H;
    dt_ = dt;
    s_ = s;
    const std::int64_t rows = T * H;
    const std::size_t es = dtype_size(dt);
    q_.reset(new Dev(std::size_t(rows) * 128 * es));
    out_.reset(new Dev(std::size_t(rows) * 128));
    sf_.reset(new Dev(std::size_t(rows) * 4));
    w_.reset(new Dev(std::size_t(rows) * es));
    wo_.reset(new Dev(std::size_t(rows) * 4));
    fr_.reset(new Dev(std::size_t(kMaxPos) * 64 * 4));
    pos_.reset(new Dev(std::size_t(T) * 8));
    const int dtc = dtype_code(dt);
    fill_kernel<<<1024, 256, 0, s>>>(q_->p, dtc, std::uint64_t(rows) * 128, 1);
    fill_kernel<<<256, 256, 0, s>>>(w_->p, dtc, std::uint64_t(rows), 2);
    fill_freqs<<<256, 256, 0, s>>>(static_cast<float*>(fr_->p), std::uint64_t(kMaxPos) * 64);
    fill_pos<<<64, 256, 0, s>>>(static_cast<std::int64_t*>(pos_->p), std::uint64_t(T), kMaxPos);
    ck(cudaGetLastError(), "fill");
    ck(cudaStreamSynchronize(s), "fill sync");
  }
  std::size_t recipe_count() const override { return recipes_.size(); }
  std::string recipe_name(std::size_t r) const override { return indexer_q::recipe_name(recipes_[r]); }
  std::int64_t bytes(std::size_t r) const override {
    return detail::bytes_moved(T_, H_, dt_, DType::kInt64, recipes_[r]);
  }

  void prepare(std::size_t r) override {
    const RecipeId rid = recipes_[r];
    rid_ = rid;
    const Device dev{DeviceType::kCUDA, 0};
    const std::int64_t T = T_, H = H_;
    const DType dt = dt_;
    const Recipe& rc = recipe(rid);
    fp4_ = rc.format == OutFormat::kE2M1;
    const std::int64_t ob = fp4_ ? 64 : 128;
    OpArgs a;
    a.recipe = rid;
    a.q_input = TensorView::contiguous(q_->p, dt, {T, H, 128}, dev);
    a.q_out = TensorView::contiguous(out_->p, fp4_ ? DType::kUInt8
                                             : rc.format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ
                                                                                  : DType::kFloat8E4M3,
                                     {T, H, ob}, dev);
    // q_scale: FP4 block scales, or the FP8 row scale of a recipe with scale_out
    wsf_ = recipe_writes_q_scale(rc);
    if (fp4_) a.q_scale = TensorView::contiguous(sf_->p, DType::kInt32, {T, H}, dev);
    else if (wsf_) a.q_scale = TensorView::contiguous(sf_->p, DType::kFloat32, {T, H}, dev);
    a.weight = TensorView::contiguous(w_->p, dt, {T, H}, dev);
    a.weights_out = TensorView::contiguous(wo_->p, DType::kFloat32, {T, H, 1}, dev);
    a.weight_scale = 0.37f;
    // vLLM's forms take a second factor (vLLM passes 64 ** -0.5); the others ignore it.
    const float head_scale = rc.quant == Quantizer::kVllm ? 0.125f : 1.0f;
    a.head_scale = head_scale;
    a.freqs = TensorView::contiguous(fr_->p, DType::kFloat32, {kMaxPos, 64}, dev);
    a.positions = TensorView::contiguous(pos_->p, DType::kInt64, {T}, dev);
    // A recipe without RoPE takes no freqs nor positions, one without weights no weight nor
    // weights_out (empty views; null in the Problem).
    const bool has_rope = recipe_has_rope(rc), has_weights = recipe_has_weights(rc);
    if (!has_rope) a.freqs = a.positions = TensorView{};
    if (!has_weights) a.weight = a.weights_out = TensorView{};
    a_ = a;
    detail::Problem p;
    p.recipe = rid;
    p.B = T;
    p.H = H;
    p.dtype = dt;
    p.q_input = q_->p;
    p.q_out = static_cast<std::uint8_t*>(out_->p);
    p.q_sf = wsf_ ? static_cast<std::uint8_t*>(sf_->p) : nullptr;
    p.weight = w_->p;
    p.weight_dtype = dt;  // the weight buffer holds the input dtype, as in SGLang's design
    p.weight_stride_b = H;
    p.weights_out = static_cast<float*>(wo_->p);
    p.weight_scale = 0.37f;
    p.head_scale = head_scale;
    p.freqs = static_cast<const float*>(fr_->p);
    p.max_pos = kMaxPos;
    p.positions = pos_->p;
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
    p_ = p;
  }
  // codes, then the scales when the recipe writes them, then weights_out (all rows, written or not)
  std::vector<Output> outputs() const override {
    const std::size_t rows = std::size_t(T_ * H_);
    std::vector<Output> o = {{out_->p, rows * (fp4_ ? 64 : 128)}};
    if (wsf_) o.push_back({sf_->p, rows * 4});
    o.push_back({wo_->p, rows * 4});
    return o;
  }
  void spec_kernel() override {
    detail::Variant fallback;
    fallback.lanes = 0;
    ck(detail::cuda_run_variant(p_, s_, false, fallback), "fallback");
  }

  std::vector<Case> cases(const std::vector<bool>& pdls, bool again) override {
    const std::int64_t rows = T_ * H_;
    const cudaStream_t s = s_;
    Options o;
    o.backend = Backend::kCuda;
    o.stream = s;
    std::vector<Case> v;
    auto add = [&](std::string variant, bool pdl, std::function<void()> fn) {
      Case c;
      c.variant = std::move(variant);
      c.pdl = pdl;
      c.fn = std::move(fn);
      v.push_back(std::move(c));
    };
    for (const bool pdl : pdls) {
      Options op = o;
      op.enable_pdl = pdl;
      add("auto", pdl, [this, op] { ck(run(a_, op), "run"); });
      // the ratio column's reference: v4_fp8's auto shape at the first PDL mode
      v.back().is_ref = rid_ == RecipeId::kV4Fp8 && pdl == pdls[0] && !again;
    }
    if (again) return v;
    // Options::side_inputs_ready (positions, freqs, weight read before griddepcontrol.wait:
    // true here, nothing writes them) at the decode sizes, PDL on.
    if (rows <= 16384) {
      for (const bool pdl : pdls) {
        if (!pdl) continue;
        Options op = o;
        op.enable_pdl = true;
        op.side_inputs_ready = true;
        add("auto-side-ready", pdl, [this, op] { ck(run(a_, op), "run"); });
      }
    }
    // Fixed shapes (--shapes): every entry of src/cuda/launch_shapes.inc (kLaunchShapes) at its
    // block and at 256, named l<lanes>-r<group_rows>-b<block>[-t<trigger>] (t0 at start, t1
    // after the loads; the trigger only matters with PDL on). Above 16384 rows the 16-lane
    // shapes are left out (latency shapes).
    if (shapes_) {
      std::vector<detail::Variant> list;
      for (const detail::LaunchShape& sh : detail::kLaunchShapes) {
        if (rows > 16384 && sh.lanes >= 16) continue;
        for (int b : {sh.block, 256}) {
          for (int t : {0, 1}) {
            detail::Variant x;
            x.lanes = sh.lanes;
            x.group_rows = sh.group_rows;
            x.block = b;
            x.trigger = t;
            bool dup = false;
            for (const detail::Variant& u : list)
              dup = dup || (u.lanes == x.lanes && u.group_rows == x.group_rows && u.block == x.block && u.trigger == x.trigger);
            if (!dup) list.push_back(x);
          }
        }
      }
      for (const bool pdl : pdls) {
        for (const detail::Variant& x : list) {
          if (!pdl && x.trigger != 1) continue;  // the trigger is a no-op without PDL
          add("l" + std::to_string(x.lanes) + "-r" + std::to_string(x.group_rows) + "-b" + std::to_string(x.block) +
                  (pdl ? "-t" + std::to_string(x.trigger) : std::string()),
              pdl, [this, x, pdl] { ck(detail::cuda_run_variant(p_, s_, pdl, x), "run_variant"); });
        }
      }
    }
    if (rid_ == RecipeId::kV4Fp8) {
      for (const bool pdl : pdls) {
        const BaselinePdl bp = pdl ? BaselinePdl::kTriggerEarly : BaselinePdl::kOff;
        add("baseline-warp-per-row", pdl, [this, bp] { ck(launch_baseline_warp(p_, s_, bp), "baseline"); });
        if (pdl && rows <= 16384)
          add("baseline-loads-before-wait", pdl,
              [this] { ck(launch_baseline_warp(p_, s_, BaselinePdl::kLoadsBeforeWait), "baseline"); });
        if (pdl && shapes_)
          add("baseline-trigger-late", pdl,
              [this] { ck(launch_baseline_warp(p_, s_, BaselinePdl::kTriggerLate), "baseline"); });
      }
    }
    if (shapes_ && rid_ == RecipeId::kV4Fp8 && rows <= 16384) {
      for (const bool pdl : pdls) {
        for (int what : {0, 1}) {
          add(what == 0 ? "floor-store-only" : "floor-pos-freqs-q", pdl,
              [this, pdl, what] { ck(launch_floor(p_, s_, pdl, what), "floor"); });
          v.back().compare = false;
        }
      }
    }
    return v;
  }

  std::string key_csv(std::int64_t T, std::int64_t H, DType dt, const std::string& recipe) const override {
    return strprintf("%lld,%lld,%s,%s", (long long)T, (long long)H, dtype_name(dt), recipe.c_str());
  }
  std::string key_table(std::int64_t T, std::int64_t H, const std::string& recipe) const override {
    return strprintf("%6lld %3lld %-18s", (long long)T, (long long)H, recipe.c_str());
  }

 private:
  static constexpr std::int64_t kMaxPos = 4096;
  std::vector<RecipeId> recipes_ = all_recipes();
  bool shapes_ = false;
  std::int64_t T_ = 0, H_ = 0;
  DType dt_ = DType::kBFloat16;
  cudaStream_t s_ = nullptr;
  std::unique_ptr<Dev> q_, out_, sf_, w_, wo_, fr_, pos_;
  // the prepared call
  RecipeId rid_ = RecipeId::kV4Fp8;
  bool fp4_ = false, wsf_ = false;
  OpArgs a_;
  detail::Problem p_;
};

}  // namespace query_op

inline std::unique_ptr<CudaOp> make_query_op() { return std::unique_ptr<CudaOp>(new query_op::QueryOp()); }

}  // namespace bench
}  // namespace indexer_q
