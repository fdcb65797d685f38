// The public API, part 1: tensor views and the names of dtypes, backends, ISAs and recipes.
#include <algorithm>
#include <cstring>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/problem.h"
#include "common/recipe.h"
#include "common/validate_text.h"
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

// ---- devices and backends (the lists: include/indexer_q/backends.inc) ----
const char* device_type_name(DeviceType t) noexcept {
  switch (t) {
#define IQ_DEVICE(Enumerator, name, default_backend) \
  case DeviceType::Enumerator: return name;
#include "indexer_q/backends.inc"
  }
  return "unknown";
}

const char* backend_name(Backend b) noexcept {
  switch (b) {
    case Backend::kAuto: return "auto";
#define IQ_BACKEND(Enumerator, name, device, doc) \
  case Backend::Enumerator: return name;
#include "indexer_q/backends.inc"
  }
  return "unknown";
}

bool parse_backend(const std::string& name, Backend* out) noexcept {
  if (name == backend_name(Backend::kAuto)) {
    *out = Backend::kAuto;
    return true;
  }
#define IQ_BACKEND(Enumerator, bname, device, doc) \
  if (name == bname) {                            \
    *out = Backend::Enumerator;                   \
    return true;                                  \
  }
#include "indexer_q/backends.inc"
  return false;
}

DeviceType backend_device(Backend b) noexcept {
  switch (b) {
#define IQ_BACKEND(Enumerator, name, device, doc) \
  case Backend::Enumerator: return DeviceType::device;
#include "indexer_q/backends.inc"
    case Backend::kAuto: break;
  }
  return DeviceType::kCPU;
}

std::vector<Backend> all_backends() {
  return {
#define IQ_BACKEND(Enumerator, name, device, doc) Backend::Enumerator,
#include "indexer_q/backends.inc"
  };
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

namespace detail {

Backend default_backend(DeviceType t) noexcept {
  switch (t) {
#define IQ_DEVICE(Enumerator, name, default_backend) \
  case DeviceType::Enumerator: return Backend::default_backend;
#include "indexer_q/backends.inc"
  }
  return Backend::kCpu;
}

// The options every call takes, against the list: the backend (kAuto resolved to the device's
// default backend; the backend's device must be the tensors'), the CPU ISA, the thread count.
// Allocates only when it fails.
Status resolve_backend(const Options& options, const Device& dev, Backend* resolved) {
  const Backend backend = options.backend;
  if (backend != Backend::kAuto && std::strcmp(backend_name(backend), "unknown") == 0) {
    std::string choices = backend_name(Backend::kAuto);
    const std::vector<Backend> all = all_backends();
    for (std::size_t i = 0; i < all.size(); ++i)
      choices += (i + 1 == all.size() ? " or " : ", ") + std::string(backend_name(all[i]));
    return bad_arg("options.backend", "expected " + choices + ", got the value " + std::to_string(int(backend)));
  }
  if (options.cpu_isa != CpuIsa::kAuto && options.cpu_isa != CpuIsa::kScalar && options.cpu_isa != CpuIsa::kAvx2 &&
      options.cpu_isa != CpuIsa::kAvx512)
    return bad_arg("options.cpu_isa", "expected auto, scalar, avx2 or avx512, got the value " +
                                          std::to_string(int(options.cpu_isa)));
  const Backend b = backend == Backend::kAuto ? default_backend(dev.type) : backend;
  if (backend_device(b) != dev.type)
    return bad_arg("options.backend", std::string("backend '") + backend_name(b) + "' needs " +
                                          device_type_name(backend_device(b)) + " tensors, got " +
                                          device_type_name(dev.type) + " tensors");
  if (options.num_threads < 0)
    return bad_arg("options.num_threads", "expected >= 0 (0 = default), got " + std::to_string(options.num_threads));
  *resolved = b;
  return Status::Ok();
}

}  // namespace detail

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
using detail::kNumRecipes;
using detail::kRecipeTable;
}  // namespace

const Recipe& recipe(RecipeId id) noexcept {
  const int i = int(id);
  return (i >= 0 && i < kNumRecipes) ? kRecipeTable[i] : kRecipeTable[0];
}

const char* recipe_name(RecipeId id) noexcept {
  const int i = int(id);
  return (i >= 0 && i < kNumRecipes) ? kRecipeTable[i].name : "unknown";
}

bool parse_recipe(const std::string& name, RecipeId* out) noexcept {
  for (const Recipe& r : kRecipeTable) {
    if (name == r.name) {
      *out = r.id;
      return true;
    }
  }
  return false;
}

// ---- the columns (include/indexer_q/recipe_columns.inc) ----
namespace {
struct ValueRow {
  const char* type;  // the column's enum, as written in recipe_columns.inc
  int value;
  const char* name;
  const char* doc;
};
constexpr ValueRow kValues[] = {
#define IQ_VALUE(Type, Value, name, doc) ValueRow{#Type, int(Type::Value), name, doc},
#include "indexer_q/recipe_columns.inc"
};
struct ColumnRow {
  const char* name;
  const char* doc;
  const char* type;  // nullptr for a flag
};
constexpr ColumnRow kColumns[] = {
#define IQ_COLUMN(Type, member, doc) ColumnRow{#member, doc, #Type},
#define IQ_FLAG(member, doc) ColumnRow{#member, doc, nullptr},
#include "indexer_q/recipe_columns.inc"
};
constexpr int kNumColumns = int(sizeof kColumns / sizeof kColumns[0]);

const ValueRow* find_value(const char* type, int v) noexcept {
  for (const ValueRow& r : kValues)
    if (r.value == v && std::strcmp(r.type, type) == 0) return &r;
  return nullptr;
}

// Column i of r as an int (a flag: 0 / 1); -1 for i out of range.
int column_int(const Recipe& r, int i) noexcept {
  int k = 0;
#define IQ_COLUMN(Type, member, doc) \
  if (i == k++) return int(r.member);
#define IQ_FLAG(member, doc) \
  if (i == k++) return r.member ? 1 : 0;
#include "indexer_q/recipe_columns.inc"
  return -1;
}
}  // namespace

#define IQ_COLUMN(Type, member, doc)                  \
  const char* value_name(Type v) noexcept {           \
    const ValueRow* r = find_value(#Type, int(v));    \
    return r ? r->name : "unknown";                   \
  }
#include "indexer_q/recipe_columns.inc"

int recipe_column_count() noexcept { return kNumColumns; }
const char* recipe_column_name(int i) noexcept { return i >= 0 && i < kNumColumns ? kColumns[i].name : nullptr; }
const char* recipe_column_doc(int i) noexcept { return i >= 0 && i < kNumColumns ? kColumns[i].doc : nullptr; }
const char* recipe_column_value(RecipeId id, int i) noexcept {
  if (i < 0 || i >= kNumColumns) return nullptr;
  const int v = column_int(recipe(id), i);
  if (!kColumns[i].type) return v ? "true" : "false";
  const ValueRow* r = find_value(kColumns[i].type, v);
  return r ? r->name : "unknown";
}
const char* recipe_column_value_doc(RecipeId id, int i) noexcept {
  if (i < 0 || i >= kNumColumns) return nullptr;
  const int v = column_int(recipe(id), i);
  if (!kColumns[i].type) return v ? kColumns[i].doc : "";
  const ValueRow* r = find_value(kColumns[i].type, v);
  return r ? r->doc : "";
}

std::vector<RecipeId> all_recipes() {
  std::vector<RecipeId> v;
  for (const Recipe& r : kRecipeTable) v.push_back(r.id);
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
