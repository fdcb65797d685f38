// The key side for the CUDA benchmark harness (cuda_harness.cuh): `indexer_q_cuda_bench --op kside`
// (docs/KSIDE-SPEC.md; src/cuda/kside.cu), both key recipes. Per token count it
//   - fills device inputs with random data (per-row magnitudes over decades, weight 1 + N(0, 1)/4,
//     a 4096-row (cos, sin) table, random positions, distinct random slots of a paged cache with
//     page_size 64),
//   - runs our kernel at its automatic shape through the public API (run(KStoreArgs); with
//     --shapes also at every fixed shape) and a baseline of SGLang's design written here from the
//     spec (one warp per token, lane l holding dims 4l..4l+3, 8 tokens per 256-thread block, same
//     arithmetic and bytes), beside the harness's copy, in the same run;
//   - checks every cache byte of each against the library's one-thread-per-token kernel
//     (kside_row<KR> of src/common/kside_row.h, the spec), so a faster wrong kernel cannot pass.
// Bytes per call = detail::kside_bytes_moved: per token its input row, position, slot and freqs
// row read and its 132 / 68 cache bytes written; the weight once.
//
// The slots are distinct, so the duplicate-slot rule (docs/KSIDE.md) costs only its method: the
// scan inside the store kernel up to detail::kKsideScanMaxTokens tokens, the two claim kernels
// above, nothing at 1 token. --dup scan,claim also times the automatic shape with each method forced
// (rows ours-l<L>-b<B>-scan / -claim; the scan only up to 16384 tokens: its work grows as N^2),
// which shows where the threshold should be.
// Options of this op only (parse_option below; a next key-side variant to A/B adds one there and
// its rows in cases(), and leaves with the variant if it loses: bench/HISTORY.md): --shapes,
// --dup scan,claim.
// Columns (unchanged since the key side's own benchmark, indexer_q_cuda_kside_bench):
//   csv,tokens,dtype,recipe,impl,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,ratio_to_baseline,bytes_equal
// pdl 0 / 1; ratio_to_baseline: the baseline's time over this row's (same recipe, size and PDL mode).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_harness.cuh"
#include "common/kside_problem.h"
#include "common/row.h"
#include "cuda/fp4_e2m1.cuh"
#include "cuda/fp8_e4m3.cuh"
#include "cuda/kside_cuda.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace bench {
namespace kside_op {

// ---------------------------------------------------------------------------------------
// The baseline: SGLang's launch design (one warp per token, 4 dims per lane, 8 tokens per
// block), our arithmetic (docs/KSIDE-SPEC.md section 2), PDL when asked. Written for this benchmark.
// ---------------------------------------------------------------------------------------
template <bool FP4, int DT>
static __global__ void __launch_bounds__(256) baseline_warp_kernel(const detail::KProblem p) {
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

inline cudaError_t launch_baseline(const detail::KProblem& p, cudaStream_t s, bool pdl) {
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
__device__ inline float value(std::uint64_t i, std::uint64_t salt, bool row_scaled) {
  const float c = centered_sum4(i, salt);
  const float mag = row_scaled ? exp2f(-8.0f + 16.0f * uniform(i / 128, salt ^ 0x55)) : 0.25f;
  return c * mag + (row_scaled ? 0.0f : 1.0f);
}
static __global__ void fill_kernel(void* dst, int dtype, std::uint64_t n, std::uint64_t salt, bool row_scaled) {
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    store_as(dst, dtype, i, value(i, salt, row_scaled));
}

class KsideOp : public CudaOp {
 public:
  const char* name() const override { return "kside"; }
  Columns columns() const override {
    return {"csv,tokens,dtype,recipe,impl,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,ratio_to_baseline,"
            "bytes_equal",
            "0", "1", "pdl=", 0, 26, "baseline", "the one-thread-per-token kernel"};
  }
  std::vector<std::int64_t> default_tokens() const override { return {1, 8, 64, 512, 1024, 4096, 16384, 65536}; }
  DType default_dtype() const override { return DType::kFloat32; }  // SGLang's production dtype
  bool has_heads() const override { return false; }
  bool parse_recipes(const char* list) override {
    if (std::string(list) == "all") {
      recipes_ = all_krecipes();
      return true;
    }
    return parse_recipe_list(list, parse_krecipe, "unknown key recipe", &recipes_);
  }
  int parse_option(const std::string& opt, const char* value) override {
    if (opt == "--shapes") {
      shapes_ = true;
      return 1;
    }
    if (opt == "--dup" && value) {
      for (const std::string& x : split(value)) {
        if (x == "scan") dup_scan_ = true;
        else if (x == "claim") dup_claim_ = true;
        else {
          std::fprintf(stderr, "--dup: expected scan and / or claim, got %s\n", x.c_str());
          return -1;
        }
      }
      return 2;
    }
    return 0;
  }
  std::string usage() const override {
    return "  --tokens    default 1,8,64,512,1024,4096,16384,65536; no --heads; --dtype default fp32\n"
           "  --recipes   key recipes, or all (the default)\n"
           "  --shapes    also every fixed shape (lanes 4..32 x block 64..256)\n"
           "  --dup scan,claim  also the automatic shape with each duplicate-slot method forced\n";
  }
  std::string describe(DType dt) const override {
    return std::string(dtype_name(dt)) + " input, int64 positions, page_size 64, max_pos 4096";
  }

  void setup(std::int64_t T, std::int64_t, DType dt, cudaStream_t s) override {
    in_.reset(); w_.reset(); fr_.reset(); pos_.reset(); sl_.reset(); cache_.reset();
    T_ = T;
    dt_ = dt;
    s_ = s;
    const std::size_t es = dtype_size(dt);
    pages_ = (T + kPageSize - 1) / kPageSize;
    in_.reset(new Dev(std::size_t(T) * 128 * es));
    w_.reset(new Dev(128 * es));
    fr_.reset(new Dev(std::size_t(kMaxPos) * 64 * 4));
    pos_.reset(new Dev(std::size_t(T) * 8));
    sl_.reset(new Dev(std::size_t(T) * 8));
    cache_.reset(new Dev(std::size_t(pages_) * 132 * std::size_t(kPageSize)));
    const int dtc = dtype_code(dt);
    fill_kernel<<<1024, 256, 0, s>>>(in_->p, dtc, std::uint64_t(T) * 128, 1, true);
    fill_kernel<<<1, 128, 0, s>>>(w_->p, dtc, 128, 2, false);
    fill_freqs<<<256, 256, 0, s>>>(static_cast<float*>(fr_->p), std::uint64_t(kMaxPos) * 64);
    fill_pos<<<64, 256, 0, s>>>(static_cast<std::int64_t*>(pos_->p), std::uint64_t(T), kMaxPos);
    ck(cudaGetLastError(), "fill");
    {  // distinct slots, shuffled on the host
      std::vector<std::int64_t> h(static_cast<std::size_t>(T), 0);
      for (std::int64_t i = 0; i < T; ++i) h[std::size_t(i)] = i;
      std::uint64_t x = 12345;
      for (std::int64_t i = T - 1; i > 0; --i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(h[std::size_t(i)], h[std::size_t((x >> 33) % std::uint64_t(i + 1))]);
      }
      ck(cudaMemcpy(sl_->p, h.data(), h.size() * 8, cudaMemcpyHostToDevice), "slots");
    }
    ck(cudaStreamSynchronize(s), "fill sync");
  }
  std::size_t recipe_count() const override { return recipes_.size(); }
  std::string recipe_name(std::size_t r) const override { return krecipe_name(recipes_[r]); }
  std::int64_t bytes(std::size_t r) const override {
    return detail::kside_bytes_moved(T_, dt_, DType::kInt64, recipes_[r]);
  }

  void prepare(std::size_t r) override {
    const KRecipeId rid = recipes_[r];
    const Device dev{DeviceType::kCUDA, 0};
    const std::int64_t T = T_, tb = kside_token_bytes(rid);
    const DType dt = dt_;
    cache_bytes_ = std::size_t(pages_ * tb * kPageSize);
    detail::KProblem p;
    p.recipe = rid;
    p.N = T;
    p.dtype = dt;
    p.input = in_->p;
    p.input_stride = 128;
    p.weight = w_->p;
    p.eps = 1e-6f;
    p.freqs = static_cast<const float*>(fr_->p);
    p.max_pos = kMaxPos;
    p.positions = pos_->p;
    p.pos_dtype = DType::kInt64;
    p.slots = static_cast<const std::int64_t*>(sl_->p);
    p.cache = static_cast<std::uint8_t*>(cache_->p);
    p.num_pages = pages_;
    p.page_size = kPageSize;
    p.log2_page = 6;
    p.page_bytes = tb * kPageSize;
    p.device = dev;
    p_ = p;

    KStoreArgs a;
    a.recipe = rid;
    a.input = TensorView::contiguous(in_->p, dt, {T, 128}, dev);
    a.weight = TensorView::contiguous(w_->p, dt, {128}, dev);
    a.eps = 1e-6f;
    a.freqs = TensorView::contiguous(fr_->p, DType::kFloat32, {kMaxPos, 64}, dev);
    a.positions = TensorView::contiguous(pos_->p, DType::kInt64, {T}, dev);
    a.slots = TensorView::contiguous(sl_->p, DType::kInt64, {T}, dev);
    a.kvcache = TensorView::contiguous(cache_->p, DType::kUInt8, {pages_, tb * kPageSize}, dev);
    a.page_size = kPageSize;
    a_ = a;
  }
  std::vector<Output> outputs() const override { return {{cache_->p, cache_bytes_}}; }
  void spec_kernel() override {
    ck(detail::kside_cuda_run_variant(p_, s_, false, detail::KVariant{0, 128}), "fallback");
  }

  // Per PDL mode: the baseline (the ratio column's reference), ours at the automatic shape, the
  // forced duplicate-slot methods (--dup), every fixed shape (--shapes).
  std::vector<Case> cases(const std::vector<bool>& pdls, bool) override {
    const std::int64_t T = T_;
    const std::string group = krecipe_name(p_.recipe);
    std::vector<Case> v;
    auto add = [&](std::string variant, bool pdl, std::function<void()> fn) {
      Case c;
      c.variant = std::move(variant);
      c.pdl = pdl;
      c.fn = std::move(fn);
      c.ref_group = group + (pdl ? ",1" : ",0");
      v.push_back(std::move(c));
    };
    for (const bool pdl : pdls) {
      add("baseline-warp-per-token", pdl, [this, pdl] { ck(launch_baseline(p_, s_, pdl), "baseline"); });
      v.back().is_ref = true;
      const detail::KVariant av = detail::kside_choose_variant(T);
      add("ours-auto(l" + std::to_string(av.lanes) + "-b" + std::to_string(av.block) + ")", pdl, [this, pdl] {
        Options o;
        o.backend = Backend::kCuda;
        o.stream = s_;
        o.enable_pdl = pdl;
        ck(run(a_, o), "run");
      });
      for (const detail::KDup dup : {detail::KDup::kScan, detail::KDup::kClaim}) {
        const bool scan = dup == detail::KDup::kScan;
        if (!(scan ? dup_scan_ && T <= 16384 : dup_claim_)) continue;
        const detail::KVariant x{av.lanes, av.block, dup};
        add("ours-l" + std::to_string(av.lanes) + "-b" + std::to_string(av.block) + (scan ? "-scan" : "-claim"), pdl,
            [this, x, pdl] { ck(detail::kside_cuda_run_variant(p_, s_, pdl, x), "variant"); });
      }
      if (shapes_)
        for (int lanes : {4, 8, 16, 32})
          for (int block : {64, 128, 256}) {
            const detail::KVariant x{lanes, block};
            add("ours-l" + std::to_string(lanes) + "-b" + std::to_string(block), pdl,
                [this, x, pdl] { ck(detail::kside_cuda_run_variant(p_, s_, pdl, x), "variant"); });
          }
    }
    return v;
  }

  std::string key_csv(std::int64_t T, std::int64_t, DType dt, const std::string& recipe) const override {
    return strprintf("%lld,%s,%s", (long long)T, dtype_name(dt), recipe.c_str());
  }
  std::string key_table(std::int64_t T, std::int64_t, const std::string& recipe) const override {
    return strprintf("%6lld %-9s", (long long)T, recipe.c_str());
  }

 private:
  static constexpr std::int64_t kMaxPos = 4096, kPageSize = 64;
  std::vector<KRecipeId> recipes_ = all_krecipes();
  bool shapes_ = false, dup_scan_ = false, dup_claim_ = false;
  std::int64_t T_ = 0, pages_ = 0;
  DType dt_ = DType::kFloat32;
  cudaStream_t s_ = nullptr;
  std::unique_ptr<Dev> in_, w_, fr_, pos_, sl_, cache_;
  // the prepared call
  std::size_t cache_bytes_ = 0;
  detail::KProblem p_;
  KStoreArgs a_;
};

}  // namespace kside_op

inline std::unique_ptr<CudaOp> make_kside_op() { return std::unique_ptr<CudaOp>(new kside_op::KsideOp()); }

}  // namespace bench
}  // namespace indexer_q
