// The validated problem every backend receives, and the backends' entry points.
// Backends include this header and src/common/row.h only; they never include each other.
#pragma once

#include <cstdint>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

// A call that passed validate(). Layout facts the backends may rely on:
//  - recipe is one of the list (include/indexer_q/recipes.inc); run it through with_recipe()
//    (src/common/recipe.h) and process_row<R> (src/common/row.h);
//  - row r = b * H + h of q_input starts at element r * 128 (rows contiguous, batch contiguous);
//  - q_out: row r's codes start at byte r * R::kOutBytes (128 fp8 codes, or 64 fp4 pairs);
//  - q_sf (FP4 recipes: row r's 4 UE8M0 bytes at q_sf + 4 * r; recipes with scale_out: row r's
//    fp32 scale at q_sf + 4 * r; else null);
//  - weights_out[r] is the float of row r;
//  - weight[b, h] is at element b * weight_stride_b + h;
//  - freqs row p starts at float p * 64; positions[b] is int32 or int64;
//  - on the host every positions[b] is in [0, max_pos) (checked by the validator); on a
//    device that cannot be checked without a synchronization, so device backends must
//    guard every read (see docs/API.md for what an out-of-range row gets).
//  - B >= 1 (B = 0 returns before any backend is called), H >= 1.
struct Problem {
  RecipeId recipe = RecipeId::kV4Fp8;
  std::int64_t B = 0;
  std::int64_t H = 0;
  DType dtype = DType::kBFloat16;         // of q_input
  DType weight_dtype = DType::kBFloat16;  // of weight (bf16, fp16 or fp32, independent of dtype)
  const void* q_input = nullptr;
  std::uint8_t* q_out = nullptr;
  std::uint8_t* q_sf = nullptr;
  const void* weight = nullptr;
  std::int64_t weight_stride_b = 0;  // elements
  float* weights_out = nullptr;
  float weight_scale = 1.0f;
  float head_scale = 1.0f;  // the second factor of the two-factor folds (vllm_* recipes)
  const float* freqs = nullptr;
  std::int64_t max_pos = 0;
  const void* positions = nullptr;
  DType pos_dtype = DType::kInt64;
  Device device{};

  std::int64_t rows() const { return B * H; }
};

// Bytes a call moves through memory once: q rows read, codes (and FP4 block scales) written,
// weights read and written, one position and one freqs row per token. Used by the CLI's
// reports and benchmarks.
inline std::int64_t bytes_moved(std::int64_t B, std::int64_t H, DType dtype, DType pos_dtype,
                                RecipeId recipe = RecipeId::kV4Fp8) {
  const Recipe& r = indexer_q::recipe(recipe);
  const std::int64_t in = dtype == DType::kFloat32 ? 4 : 2;
  const std::int64_t pos = pos_dtype == DType::kInt32 ? 4 : 8;
  const std::int64_t out = r.format == OutFormat::kE2M1 ? 64 + 4 : 128;
  const std::int64_t weights = recipe_has_weights(r) ? in + 4 : 0;  // weight read, weights_out written
  const std::int64_t rope = recipe_has_rope(r) ? pos + 64 * 4 : 0;  // a position and a freqs row per token
  return B * H * (128 * in + out + weights) + B * rope;
}

// ---- backends (each implemented in its own directory) ----
// src/reference: the scalar reference, single-threaded, host memory.
Status reference_run(const Problem& p);

// src/cpu: SIMD kernels + thread pool, host memory. isa is never kAuto here.
Status cpu_run(const Problem& p, CpuIsa isa, int num_threads);

// src/cuda: device memory of p.device; stream is a cudaStream_t (may be null).
// Present only when the build has INDEXER_Q_CUDA; otherwise api.cpp reports kUnavailable.
// side_inputs_ready: Options::side_inputs_ready.
Status cuda_run(const Problem& p, void* stream, bool enable_pdl, bool side_inputs_ready);
bool cuda_available();

}  // namespace detail
}  // namespace indexer_q
