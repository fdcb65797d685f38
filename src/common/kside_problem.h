// The key side (docs/KSIDE-SPEC.md): compile-time key recipes, the validated problem every backend
// receives, and the backends' entry points. Backends include this header and
// src/common/kside_row.h only; they never include each other.
#pragma once

#include <cstdint>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

// KRecipeT<Id>: the columns of include/indexer_q/kside_recipes.inc as constants, plus the fixed
// parts of the key pipeline in the member names the query side's row steps read (rope_row<R>:
// kRopeOffset, kFreqsLayout; scale_and_amax_row<R>: kHadamard), so those steps are reused as is.
template <KRecipeId kId>
struct KRecipeT;

#define IQ_KRECIPE(Id, Name, Fmt)                                                  \
  template <>                                                                      \
  struct KRecipeT<KRecipeId::Id> {                                                 \
    static constexpr KRecipeId kId = KRecipeId::Id;                                \
    static constexpr OutFormat kFormat = OutFormat::Fmt;                           \
    static constexpr bool kFp4 = OutFormat::Fmt == OutFormat::kE2M1;               \
    static constexpr int kCodeBytes = kFp4 ? 64 : 128; /* codes of one token */    \
    static constexpr int kTokenBytes = kCodeBytes + 4; /* + fp32 scale / 4 x e8 */ \
    static constexpr int kRopeOffset = 64;             /* dims 64..127 rotated */  \
    static constexpr FreqsLayout kFreqsLayout = FreqsLayout::kInterleaved;         \
    static constexpr bool kNeox = false;               /* pairs (2j, 2j + 1) */    \
    static constexpr RopeFma kRopeFma = RopeFma::kFmaX0S;                          \
    static constexpr bool kHadamard = true;                                        \
  };
#include "indexer_q/kside_recipes.inc"
#undef IQ_KRECIPE

// Calls f(KRecipeT<id>{}) and returns its result. f is a generic lambda (auto parameter).
template <class F>
decltype(auto) with_krecipe(KRecipeId id, F&& f) {
  switch (id) {
#define IQ_KRECIPE(Id, ...) \
  case KRecipeId::Id: return f(KRecipeT<KRecipeId::Id>{});
#include "indexer_q/kside_recipes.inc"
#undef IQ_KRECIPE
  }
  return f(KRecipeT<KRecipeId::kV4KFp8>{});  // unreachable for a validated id
}

// A key-side call that passed validate(KStoreArgs). Layout facts the backends may rely on:
//  - token t's 128 values start at element t * input_stride of input (dtype: fp32|bf16|fp16);
//    weight holds 128 values of the same dtype, contiguous;
//  - freqs row p starts at float p * 64 (interleaved cos, sin); positions[t] is int32 or int64;
//  - slots[t] is int64; slots[t] < 0 means "skip token t" (nothing written, its position unread);
//  - the cache is num_pages pages of page_bytes = KR::kTokenBytes * page_size bytes, page
//    p at byte p * page_bytes of cache; page_size = 1 << log2_page (kside_token_slot() below);
//  - on the host every non-skipped token has its position in [0, max_pos) and its slot in
//    [0, num_pages * page_size) (checked by the validator); device backends must guard every
//    position / slot read and skip an invalid token (write nothing for it);
//  - N >= 1 (N = 0 returns before any backend is called).
struct KProblem {
  KRecipeId recipe = KRecipeId::kV4KFp8;
  std::int64_t N = 0;
  DType dtype = DType::kFloat32;  // of input and weight
  const void* input = nullptr;
  std::int64_t input_stride = 128;  // elements between rows
  const void* weight = nullptr;
  float eps = 1e-6f;
  const float* freqs = nullptr;
  std::int64_t max_pos = 0;
  const void* positions = nullptr;
  DType pos_dtype = DType::kInt64;
  const std::int64_t* slots = nullptr;
  std::uint8_t* cache = nullptr;
  std::int64_t num_pages = 0;
  std::int64_t page_size = 64;
  int log2_page = 6;
  std::int64_t page_bytes = 0;
  Device device{};
};

// Bytes one key-side call moves through memory once: per token its input row, position, slot
// and freqs row read and its token bytes written; the weight read once.
inline std::int64_t kside_bytes_moved(std::int64_t N, DType dtype, DType pos_dtype, KRecipeId recipe) {
  const std::int64_t in = dtype == DType::kFloat32 ? 4 : 2;
  const std::int64_t pos = pos_dtype == DType::kInt32 ? 4 : 8;
  const std::int64_t tok = kside_token_bytes(recipe);
  return N * (128 * in + pos + 8 + 64 * 4 + tok) + 128 * in;
}

// ---- backends (each implemented in its own directory) ----
// src/reference/kside_reference.cpp: the scalar reference, single-threaded, host memory.
Status kside_reference_run(const KProblem& p);
// src/cpu: SIMD + threads, host memory. isa is never kAuto here.
Status kside_cpu_run(const KProblem& p, CpuIsa isa, int num_threads);
// src/cuda/kside.cu: device memory of p.device; stream is a cudaStream_t (may be null).
// Present only when the build has INDEXER_Q_CUDA.
Status kside_cuda_run(const KProblem& p, void* stream, bool enable_pdl);

}  // namespace detail
}  // namespace indexer_q
