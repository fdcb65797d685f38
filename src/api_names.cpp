// The public API, part 1: tensor views and the names of dtypes, backends, ISAs and recipes.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/problem.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {

// ---------------------------------------------------------------------------------------
// small helpers
// ---------------------------------------------------------------------------------------
std::size_t dtype_size(DType dt) noexcept {
  switch (dt) {
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kFloat32: return 4;
    case DType::kFloat8E4M3: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFloat8E4M3FNUZ: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt8: return 1;
  }
  return 0;
}

const char* dtype_name(DType dt) noexcept {
  switch (dt) {
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
    case DType::kFloat32: return "fp32";
    case DType::kFloat8E4M3: return "fp8_e4m3fn";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat8E4M3FNUZ: return "fp8_e4m3fnuz";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
  }
  return "unknown";
}

namespace {
TensorView make_view(const void* data, DType dtype, std::initializer_list<std::int64_t> sizes,
                     const std::int64_t* strides, Device device) {
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.device = device;
  v.ndim = int(std::min<std::size_t>(sizes.size(), TensorView::kMaxDims));
  int i = 0;
  for (std::int64_t s : sizes) {
    if (i >= TensorView::kMaxDims) break;
    v.sizes[i++] = s;
  }
  if (strides) {
    for (int d = 0; d < v.ndim; ++d) v.strides[d] = strides[d];
  } else {
    std::int64_t st = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      v.strides[d] = st;
      st *= std::max<std::int64_t>(v.sizes[d], 1);
    }
  }
  return v;
}
}  // namespace

TensorView TensorView::contiguous(const void* data, DType dtype,
                                  std::initializer_list<std::int64_t> sizes, Device device) {
  return make_view(data, dtype, sizes, nullptr, device);
}

TensorView TensorView::strided(const void* data, DType dtype,
                               std::initializer_list<std::int64_t> sizes,
                               std::initializer_list<std::int64_t> strides, Device device) {
  std::int64_t st[kMaxDims] = {0, 0, 0, 0};
  int i = 0;
  for (std::int64_t s : strides) {
    if (i >= kMaxDims) break;
    st[i++] = s;
  }
  TensorView v = make_view(data, dtype, sizes, st, device);
  if (int(strides.size()) != v.ndim) v.ndim = -1;  // rejected by validate(): "strides do not match"
  return v;
}

std::int64_t TensorView::numel() const noexcept {
  if (ndim < 0) return 0;
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  return n;
}

const char* backend_name(Backend b) noexcept {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kReference: return "reference";
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "unknown";
}

bool parse_backend(const std::string& name, Backend* out) noexcept {
  for (Backend b : {Backend::kAuto, Backend::kReference, Backend::kCpu, Backend::kCuda}) {
    if (name == backend_name(b)) {
      *out = b;
      return true;
    }
  }
  return false;
}

bool backend_available(Backend b) noexcept {
  switch (b) {
    case Backend::kAuto:
    case Backend::kReference:
    case Backend::kCpu: return true;
    case Backend::kCuda:
#if defined(INDEXER_Q_WITH_CUDA)
      return detail::cuda_available();
#else
      return false;
#endif
  }
  return false;
}

const char* cpu_isa_name(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool parse_cpu_isa(const std::string& name, CpuIsa* out) noexcept {
  for (CpuIsa i : {CpuIsa::kAuto, CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == cpu_isa_name(i)) {
      *out = i;
      return true;
    }
  }
  return false;
}

const char* version() noexcept { return INDEXER_Q_VERSION; }

// ---------------------------------------------------------------------------------------
// recipes (the list: include/indexer_q/recipes.inc)
// ---------------------------------------------------------------------------------------
namespace {
constexpr Recipe kRecipes[] = {
#define IQ_RECIPE(Id, Name, Rope, Freqs, Had, Bf16Rope, Bf16Had, Fmt, Quant, Fold)               \
  Recipe{RecipeId::Id, Name, RopeDims::Rope, FreqsLayout::Freqs, Had, Bf16Rope, Bf16Had, OutFormat::Fmt, \
         Quantizer::Quant, WeightFold::Fold},
#include "indexer_q/recipes.inc"
#undef IQ_RECIPE
};
constexpr int kNumRecipes = int(sizeof kRecipes / sizeof kRecipes[0]);
}  // namespace

const Recipe& recipe(RecipeId id) noexcept {
  const int i = int(id);
  return (i >= 0 && i < kNumRecipes) ? kRecipes[i] : kRecipes[0];
}

const char* recipe_name(RecipeId id) noexcept {
  const int i = int(id);
  return (i >= 0 && i < kNumRecipes) ? kRecipes[i].name : "unknown";
}

bool parse_recipe(const std::string& name, RecipeId* out) noexcept {
  for (const Recipe& r : kRecipes) {
    if (name == r.name) {
      *out = r.id;
      return true;
    }
  }
  return false;
}

const char* rope_dims_name(RopeDims v) noexcept {
  switch (v) {
    case RopeDims::kLast64: return "last64";
    case RopeDims::kFirst64: return "first64";
  }
  return "unknown";
}
const char* freqs_layout_name(FreqsLayout v) noexcept {
  switch (v) {
    case FreqsLayout::kInterleaved: return "interleaved";
    case FreqsLayout::kHalves: return "halves";
  }
  return "unknown";
}
const char* out_format_name(OutFormat v) noexcept {
  switch (v) {
    case OutFormat::kE4M3FN: return "e4m3fn";
    case OutFormat::kE4M3FNUZ: return "e4m3fnuz";
    case OutFormat::kE2M1: return "e2m1";
  }
  return "unknown";
}
const char* quantizer_name(Quantizer v) noexcept {
  switch (v) {
    case Quantizer::kSglang: return "sglang";
    case Quantizer::kVllm: return "vllm";
  }
  return "unknown";
}
const char* weight_fold_name(WeightFold v) noexcept {
  switch (v) {
    case WeightFold::kTimesScale: return "times_scale";
    case WeightFold::kNoScale: return "no_scale";
    case WeightFold::kScaleThenTwoFactors: return "scale_then_two_factors";
    case WeightFold::kTwoFactors: return "two_factors";
  }
  return "unknown";
}

std::vector<RecipeId> all_recipes() {
  std::vector<RecipeId> v;
  for (const Recipe& r : kRecipes) v.push_back(r.id);
  return v;
}

// ---------------------------------------------------------------------------------------
// key-side recipes (the list: include/indexer_q/kside_recipes.inc)
// ---------------------------------------------------------------------------------------
namespace {
struct KRecipeRow {
  KRecipeId id;
  const char* name;
  OutFormat format;
};
constexpr KRecipeRow kKRecipes[] = {
#define IQ_KRECIPE(Id, Name, Fmt) KRecipeRow{KRecipeId::Id, Name, OutFormat::Fmt},
#include "indexer_q/kside_recipes.inc"
#undef IQ_KRECIPE
};
constexpr int kNumKRecipes = int(sizeof kKRecipes / sizeof kKRecipes[0]);
const KRecipeRow* krow(KRecipeId id) {
  const int i = int(id);
  return (i >= 0 && i < kNumKRecipes) ? &kKRecipes[i] : nullptr;
}
}  // namespace

const char* krecipe_name(KRecipeId id) noexcept {
  const KRecipeRow* r = krow(id);
  return r ? r->name : "unknown";
}

bool parse_krecipe(const std::string& name, KRecipeId* out) noexcept {
  for (const KRecipeRow& r : kKRecipes) {
    if (name == r.name) {
      *out = r.id;
      return true;
    }
  }
  return false;
}

std::vector<KRecipeId> all_krecipes() {
  std::vector<KRecipeId> v;
  for (const KRecipeRow& r : kKRecipes) v.push_back(r.id);
  return v;
}

OutFormat krecipe_format(KRecipeId id) noexcept {
  const KRecipeRow* r = krow(id);
  return r ? r->format : OutFormat::kE4M3FN;
}

std::int64_t kside_token_bytes(KRecipeId id) noexcept {
  const KRecipeRow* r = krow(id);
  if (!r) return 0;
  return r->format == OutFormat::kE2M1 ? 64 + 4 : 128 + 4;
}

}  // namespace indexer_q
