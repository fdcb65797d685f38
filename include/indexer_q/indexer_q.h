// indexer_q: the query side of DeepSeek-V4's sparse-attention indexer.
//
//   fused_q_indexer_rope_hadamard_quant: RoPE on the last 64 of 128 dims, a 128-point
//   Hadamard transform, FP8 E4M3 quantization with one scale per (token, head), the scale
//   folded into the head weight. That is the default form (recipe v4_fp8); the other forms
//   engines run (DeepSeek-V3.2's RoPE-first layout, FP4 with block scales, FNUZ FP8 for AMD)
//   are recipes of the same op: see `Recipe` and `run()` below.
//
// This header is the whole public C++ API. It depends on nothing but the C++ standard
// library: tensors are described by raw pointers, sizes, strides, a dtype and a device.
// Errors come back as a Status carrying a message that names the offending argument;
// the library never aborts and never prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace indexer_q {

// ---------------------------------------------------------------------------------------
// dtypes and devices
// ---------------------------------------------------------------------------------------
enum class DType : int {
  kBFloat16 = 0,   // bf16
  kFloat16 = 1,    // IEEE half
  kFloat32 = 2,    // IEEE single
  kFloat8E4M3 = 3, // float8_e4m3fn (no infinities, one NaN code per sign)
  kInt32 = 4,
  kInt64 = 5,
  kFloat8E4M3FNUZ = 6,  // float8_e4m3fnuz (AMD gfx942): no infinities, no -0, 0x80 is NaN
  kUInt8 = 7,           // raw codes (FP4 pairs, or FP8 codes where a caller has no fp8 dtype)
  kInt8 = 8,
};

// Size in bytes of one element of `dt`.
std::size_t dtype_size(DType dt) noexcept;
// Short name: "bf16", "fp16", "fp32", "fp8_e4m3fn", "int32", "int64", "fp8_e4m3fnuz", "uint8",
// "int8".
const char* dtype_name(DType dt) noexcept;

// The kinds of device memory (include/indexer_q/backends.inc): kCPU = 0, kCUDA = 1 (NVIDIA CUDA).
enum class DeviceType : int {
#define IQ_DEVICE(Enumerator, name, default_backend) Enumerator,
#include "indexer_q/backends.inc"
};
// "cpu", "cuda"; "unknown" for a value outside the list.
const char* device_type_name(DeviceType t) noexcept;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // ordinal for GPUs; ignored for the CPU
  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == DeviceType::kCPU || a.index == b.index);
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// A non-owning view of a strided tensor. Strides are in elements, not bytes.
struct TensorView {
  static constexpr int kMaxDims = 4;
  void* data = nullptr;  // aligned to dtype_size(dtype) when the call reads or writes it (validated)
  DType dtype = DType::kFloat32;
  int ndim = 0;
  std::int64_t sizes[kMaxDims] = {0, 0, 0, 0};
  std::int64_t strides[kMaxDims] = {0, 0, 0, 0};
  Device device{};

  // Builds a view with row-major contiguous strides.
  static TensorView contiguous(const void* data, DType dtype,
                               std::initializer_list<std::int64_t> sizes,
                               Device device = Device{});
  // Builds a view with explicit strides (same count as sizes).
  static TensorView strided(const void* data, DType dtype,
                            std::initializer_list<std::int64_t> sizes,
                            std::initializer_list<std::int64_t> strides,
                            Device device = Device{});
  std::int64_t numel() const noexcept;
};

// ---------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // a tensor or option does not meet the contract; nothing written
  kUnavailable = 2,      // the backend / ISA asked for is not compiled in or not supported here
  kInternal = 3,         // a backend failed (e.g. a CUDA launch error)
};

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(StatusCode::kInvalidArgument, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(StatusCode::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }

  bool ok() const noexcept { return code_ == StatusCode::kOk; }
  StatusCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

 private:
  Status(StatusCode c, std::string m) : code_(c), message_(std::move(m)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// ---------------------------------------------------------------------------------------
// Backends and CPU instruction sets
// ---------------------------------------------------------------------------------------
// The backends (include/indexer_q/backends.inc, where each is described): kAuto = 0 (the device of
// the tensors decides: CPU tensors -> kCpu, CUDA -> kCuda), then kReference = 1, kCpu = 2,
// kCuda = 3.
enum class Backend : int {
  kAuto = 0,
#define IQ_BACKEND(Enumerator, name, device, doc) Enumerator,
#include "indexer_q/backends.inc"
};
const char* backend_name(Backend b) noexcept;  // "auto", "reference", "cpu", "cuda"; "unknown"
// Parses "auto" | "reference" | "cpu" | "cuda"; false if unknown.
bool parse_backend(const std::string& name, Backend* out) noexcept;
// The device whose tensors a backend runs (kAuto: any; the device's default backend runs them).
DeviceType backend_device(Backend b) noexcept;
// Every backend of the list (kAuto excluded), in list order.
std::vector<Backend> all_backends();
// True if the backend is compiled in and usable on this machine (for kCuda: a device exists).
bool backend_available(Backend b) noexcept;

enum class CpuIsa : int {
  kAuto = -1,   // the active ISA (see active_cpu_isa)
  kScalar = 0,  // portable C++
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ
};
const char* cpu_isa_name(CpuIsa isa) noexcept;  // "auto", "scalar", "avx2", "avx512"
bool parse_cpu_isa(const std::string& name, CpuIsa* out) noexcept;
// True if the ISA variant is compiled in and the processor (and OS) supports it.
bool cpu_isa_supported(CpuIsa isa) noexcept;
// Every ISA this build and this processor can run, best last. Tests and benchmarks loop over it.
std::vector<CpuIsa> supported_cpu_isas();
// The ISA the CPU backend uses when Options::cpu_isa is kAuto: chosen once per process, the
// best supported one, unless the environment variable INDEXER_Q_CPU_ISA=scalar|avx2|avx512
// names another. An unsupported or unknown value makes this return an error Status and
// leaves *out untouched; the CPU backend then refuses to run with the same message.
Status active_cpu_isa(CpuIsa* out);

// ---------------------------------------------------------------------------------------
// Threads of the CPU backend
// ---------------------------------------------------------------------------------------
// The CPU backend keeps one pool of worker threads for the process (created on first use,
// never per call). The default thread count is the number of hardware threads.
// Sets the default count used when Options::num_threads is 0. n must be >= 1.
Status set_cpu_num_threads(int n);
int cpu_num_threads() noexcept;

// ---------------------------------------------------------------------------------------
// Recipes: the forms of the op
// ---------------------------------------------------------------------------------------
// Each form of the op is one recipe: a row of include/indexer_q/recipes.inc, described by a
// Recipe. Every backend runs every recipe and gives the same bytes. The columns of a recipe, their
// enums and what each value means are declared once, in include/indexer_q/recipe_columns.inc;
// the enums (RopeDims, RopePairs, FreqsLayout, OutFormat, Quantizer, WeightFold) and the Recipe
// struct below are generated from it (their values and documentation: that file).
enum class RecipeColumnEnumsBegin : int {  // (only opens the generated list)
#define IQ_COLUMN(Type, member, doc) }; enum class Type : int {
#define IQ_VALUE(Type, Value, name, doc) Value,
#include "indexer_q/recipe_columns.inc"
};

enum class RecipeId : int {
#define IQ_RECIPE(Id, name, ...) Id,
#include "indexer_q/recipes.inc"
#undef IQ_RECIPE
};

struct Recipe {
  RecipeId id;
  const char* name;  // "v4_fp8", "v32_fp8", "rope_first_fp8", "v4_fp4", "v4_fp8_fnuz", ...
#define IQ_COLUMN(Type, member, doc) Type member;
#define IQ_FLAG(member, doc) bool member;
#include "indexer_q/recipe_columns.inc"
};

// The descriptor of a recipe; an unknown id returns the v4_fp8 descriptor with id kV4Fp8.
const Recipe& recipe(RecipeId id) noexcept;
const char* recipe_name(RecipeId id) noexcept;
// The name of a column value ("last64", "neox", "interleaved", "e4m3fn", "sglang",
// "times_scale", ...), for tools and bindings; "unknown" for a value outside the list.
#define IQ_COLUMN(Type, member, doc) const char* value_name(Type v) noexcept;
#include "indexer_q/recipe_columns.inc"
inline const char* rope_dims_name(RopeDims v) noexcept { return value_name(v); }
inline const char* rope_pairs_name(RopePairs v) noexcept { return value_name(v); }
inline const char* freqs_layout_name(FreqsLayout v) noexcept { return value_name(v); }
inline const char* out_format_name(OutFormat v) noexcept { return value_name(v); }
inline const char* quantizer_name(Quantizer v) noexcept { return value_name(v); }
inline const char* weight_fold_name(WeightFold v) noexcept { return value_name(v); }
// The columns, generically (for the torch binding's recipe_info, the CLI's summaries, docs): the
// count, column i's name ("rope_dims", ..., "hadamard", ...) and description, and the value of
// column i in a recipe as its name ("last64", ...; "true" / "false" for a flag) with the value's
// description (a flag: its description when set, "" when not). nullptr for i out of range.
int recipe_column_count() noexcept;
const char* recipe_column_name(int i) noexcept;
const char* recipe_column_doc(int i) noexcept;
const char* recipe_column_value(RecipeId id, int i) noexcept;
const char* recipe_column_value_doc(RecipeId id, int i) noexcept;
// Parses a recipe name ("v4_fp8", ...); false if unknown.
bool parse_recipe(const std::string& name, RecipeId* out) noexcept;
// Every recipe, in list order (v4_fp8 first).
std::vector<RecipeId> all_recipes();
// What a recipe reads and writes beyond q_input and its codes: RoPE (freqs, positions), weights
// (weight, weights_out), block scales (q_sf: FP4 formats).
inline bool recipe_has_rope(const Recipe& r) noexcept { return r.rope_dims != RopeDims::kNoRope; }
inline bool recipe_has_weights(const Recipe& r) noexcept { return r.fold != WeightFold::kNoWeights; }
inline bool recipe_has_block_scales(const Recipe& r) noexcept { return r.format == OutFormat::kE2M1; }
// Whether weights_out takes head_scale as a second factor (vLLM's Triton forms, SGLang's V3.2
// unfused form; weight_scale is then the softmax scale).
inline bool recipe_uses_head_scale(const Recipe& r) noexcept {
  return r.fold == WeightFold::kScaleThenTwoFactors || r.fold == WeightFold::kTwoFactors ||
         r.fold == WeightFold::kHeadScaleFirst;
}
// Whether the call writes 4 bytes per row into OpArgs::q_scale: FP4 block scales (int32 of four
// UE8M0 bytes) or, for a recipe with scale_out, the FP8 row scale (fp32).
inline bool recipe_writes_q_scale(const Recipe& r) noexcept { return recipe_has_block_scales(r) || r.scale_out; }

// ---------------------------------------------------------------------------------------
// The op
// ---------------------------------------------------------------------------------------
struct Options {
  Backend backend = Backend::kAuto;
  CpuIsa cpu_isa = CpuIsa::kAuto;  // CPU backend only
  int num_threads = 0;             // CPU backend only: 0 = cpu_num_threads(); 1 = inline
  void* stream = nullptr;          // CUDA backend only: a cudaStream_t; nullptr = default stream
  // CUDA backend only: programmatic dependent launch. true (the default, as engines launch on
  // Hopper): on sm_90+ devices the kernel is launched with programmatic stream serialization, so
  // it launches while the previous kernel of the stream still runs and waits
  // (griddepcontrol.wait) for it to finish before reading any tensor; it lets the next kernel
  // launch early too. Ignored on devices before sm_90. false: a plain launch.
  bool enable_pdl = true;
  // CUDA backend only, query side (run(OpArgs)), with enable_pdl on an sm_90+ device: an opt-in
  // for decode sizes. true: the caller guarantees that positions, freqs and weight hold their
  // final bytes before the op's kernel starts, i.e. no kernel still running on the stream (the
  // previous one, launched with PDL, may still be running) writes them; the kernel then reads
  // them before griddepcontrol.wait, so their round trips overlap the previous kernel, and only
  // q_input is read after the wait (as SGLang's kernel reads its position). false (the default):
  // every input is read after the wait, safe behind any producer. Ignored elsewhere.
  bool side_inputs_ready = false;
};

// The op's arguments, for every recipe: one model shared by the API, the CLI, the PyTorch
// binding, the tests and the benchmarks.
//
//   q_input     (B, H, 128)  bf16|fp16|fp32, contiguous
//   q_out       FP8 recipes: (B, H, 128) fp8_e4m3fn (kE4M3FN) or fp8_e4m3fnuz (kE4M3FNUZ),
//               uint8 or int8 taken as raw codes; FP4: (B, H, 64) uint8|int8; contiguous [written]
//   q_scale     FP4: (B, H) int32, contiguous (four UE8M0 bytes per row)          [written]
//               FP8 with scale_out: (B, H, 1) or (B, H) fp32, contiguous (the row scale) [written]
//               other FP8 recipes: must be empty (ndim 0, no data)
//   weight      (B, H)       bf16|fp16|fp32 (any, whatever q_input's), stride(1) = 1, stride(0) >= H
//   weights_out (B, H, 1) or (B, H)  fp32, contiguous                              [written]
//               (a recipe without weights, fold none: both must be empty views)
//   weight_scale, head_scale  float32 factors of weights_out as the recipe's fold says (head_scale
//               is used by the folds with two factors: softmax_scale = weight_scale)
//   freqs       (max_pos, 64) fp32, contiguous, laid out as the recipe says
//   positions   (B,)         int32|int64, contiguous, values in [0, max_pos)
//               (a recipe without RoPE, rope_dims none: both must be empty views)
struct OpArgs {
  RecipeId recipe = RecipeId::kV4Fp8;
  TensorView q_input;
  TensorView q_out;
  TensorView q_scale;
  TensorView weight;
  TensorView weights_out;
  float weight_scale = 1.0f;
  float head_scale = 1.0f;
  TensorView freqs;
  TensorView positions;
};

// ---- the scalar arguments: one check, one spec per argument ----------------------------------
// weight_scale and head_scale (OpArgs) and eps (KStoreArgs, below) are float32 in the API; the
// PyTorch binding and the CLI receive doubles and round them once. Each is checked against its
// spec, by validate() on the float32 value and by check_scalar() on a double before it is rounded:
//   weight_scale, head_scale  finite and > 0 (0, -0 and negative values refused), and its
//                             float32 value finite and > 0
//   eps                       finite and >= 0 (-0 refused), and its float32 value finite and,
//                             for a value > 0, > 0 (eps = 0 is the plain RMS norm)
// The message names the argument: "indexer_q: weight_scale: expected a finite number > 0, got
// nan", "... got -0.5", "... got 1e+300, which is inf in float32", "... got 1e-50, which rounds
// to 0 in float32".
// Every scalar is checked, whether the recipe reads it or not (the defaults, 1, are valid).
enum class ScalarArg { kWeightScale, kHeadScale, kEps };
// "weight_scale", "head_scale", "eps".
const char* scalar_arg_name(ScalarArg arg) noexcept;
// Checks `value` against the spec of `arg`; on success stores its float32 value in *out (if not
// null). The one check behind validate() (which passes the float32 field, widened exactly), the
// CLI and the PyTorch binding (which pass the double they received).
Status check_scalar(ScalarArg arg, double value, float* out = nullptr);

// The validator of every recipe (see validate() below for what it reads).
Status validate(const OpArgs& args, const Options& options = Options{});
// Validates, then runs the recipe on the chosen backend. On any error nothing is written.
Status run(const OpArgs& args, const Options& options = Options{});

// The v4_fp8 recipe with its historical signature (q_fp8 = OpArgs::q_out).
//
// Checks every argument against the contract (see SPEC.md and docs/API.md) without
// touching any data except `positions`, which is range-checked when it lives on the host.
// This is the one validator behind the C++ API, the CLI and the PyTorch binding.
//
//   q_input     (B, H, 128)  bf16|fp16|fp32, contiguous
//   q_fp8       (B, H, 128)  fp8_e4m3fn, contiguous                 [written]
//   weight      (B, H)       bf16|fp16|fp32 (any, whatever q_input's), stride(1) = 1, stride(0) >= H
//   weights_out (B, H, 1)    fp32, contiguous                       [written]
//   freqs       (max_pos, 64) fp32, contiguous: (cos, sin) per pair
//   positions   (B,)         int32|int64, contiguous, values in [0, max_pos)
Status validate(const TensorView& q_input, const TensorView& q_fp8, const TensorView& weight,
                const TensorView& weights_out, float weight_scale, const TensorView& freqs,
                const TensorView& positions, const Options& options = Options{});

// Validates, then runs the op on the chosen backend. On any error nothing is written.
// B = 0 is valid and writes nothing.
Status fused_q_indexer_rope_hadamard_quant(const TensorView& q_input, const TensorView& q_fp8,
                                           const TensorView& weight,
                                           const TensorView& weights_out, float weight_scale,
                                           const TensorView& freqs, const TensorView& positions,
                                           const Options& options = Options{});

// ---------------------------------------------------------------------------------------
// The key side (docs/KSIDE-SPEC.md, docs/KSIDE.md)
// ---------------------------------------------------------------------------------------
// Each key token (128 values) is normalized (RMSNorm with the GPU's MUFU.RSQ reciprocal square
// root, modelled exactly on the host), rotated (RoPE on dims 64..127, interleaved freqs), spread
// by the 128-point Hadamard transform, quantized and stored into one row of a paged cache.
// The forms are listed in include/indexer_q/kside_recipes.inc.
enum class KRecipeId : int {
#define IQ_KRECIPE(Id, name, format) Id,
#include "indexer_q/kside_recipes.inc"
#undef IQ_KRECIPE
};

// The arguments of a key-side store.
//
//   input      (N, 128)  fp32|bf16|fp16, stride(1) = 1 (rows may be strided); N may be 0
//   weight     (128,)    the RMSNorm weight, dtype of input, contiguous
//   eps        the RMSNorm epsilon (float32)
//   freqs      (max_pos, 64) fp32, contiguous: [p][2j] = cos, [p][2j + 1] = sin
//   positions  (N,)      int32|int64, contiguous: the RoPE row of each token
//   slots      (N,)      int64, contiguous: the cache row of each token; < 0 = skip the token
//   kvcache    (num_pages, page_bytes) uint8|int8, stride(1) = 1, stride(0) = page_bytes,
//              page_bytes = kside_token_bytes(recipe) * page_size                [written]
//   page_size  tokens per page, a power of two
// A token with slot s >= 0 writes exactly its kside_token_bytes(recipe) bytes of page
// s / page_size, row s % page_size; no other byte changes. With host indices every non-skipped
// token must have its position in [0, max_pos) and its slot in [0, num_pages * page_size), or the
// call is rejected before anything is written; a device backend skips such tokens.
struct KStoreArgs {
  KRecipeId recipe = KRecipeId::kV4KFp8;
  TensorView input;
  TensorView weight;
  float eps = 1e-6f;
  TensorView freqs;
  TensorView positions;
  TensorView slots;
  TensorView kvcache;
  std::int64_t page_size = 64;
};

// The key side's one validator: checks every argument (naming the offending one); reads no data
// except positions and slots when they live on the host (range check).
Status validate(const KStoreArgs& args, const Options& options = Options{});
// Validates, then stores the tokens on the chosen backend. On any error nothing is written.
Status run(const KStoreArgs& args, const Options& options = Options{});

// "v4_k_fp8", "v4_k_fp4"; "unknown" for an unknown id.
const char* krecipe_name(KRecipeId id) noexcept;
// Parses a key-side recipe name; false if unknown.
bool parse_krecipe(const std::string& name, KRecipeId* out) noexcept;
// Every key-side recipe, in list order.
std::vector<KRecipeId> all_krecipes();
// The cache format of a key-side recipe (kE4M3FN or kE2M1).
OutFormat krecipe_format(KRecipeId id) noexcept;
// Bytes one token occupies in the cache: 132 (v4_k_fp8) or 68 (v4_k_fp4); 0 for an unknown id.
std::int64_t kside_token_bytes(KRecipeId id) noexcept;

namespace detail {
// The table of the host's MUFU.RSQ model (docs/KSIDE-SPEC.md section 2 step 5; src/common/rsq_sm90.h): the bits
// of MUFU.RSQ(x_i) for i < 2^24, x_i = 2^(i >> 23) * (1 + (i & 0x7fffff) * 2^-23). For code that
// computes the key side outside the library's backends (the torch binding's composed path gathers
// from it on the tensors' device). Not a stable API.
std::uint32_t rsq_sm90_table(std::uint32_t i) noexcept;
}  // namespace detail

// The library version, "MAJOR.MINOR.PATCH".
const char* version() noexcept;

}  // namespace indexer_q
