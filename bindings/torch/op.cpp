// The PyTorch operators of indexer_q, each ONE operator routed by the dispatcher:
//
//   indexer_q::quant_q(str recipe, ...)             every form of the op (a recipe of the library's
//                                                   list, include/indexer_q/recipes.inc, by name)
//   indexer_q::fused_q_indexer_rope_hadamard_quant  the v4_fp8 form with its historical schema
//
//   CPU                        -> the library's CPU backend (threads = torch's intra-op count)
//   CUDA                       -> the library's CUDA backend on torch's current stream
//                                 (only when the build has CUDA: INDEXER_Q_TORCH_CUDA)
//   XPU (CUDA without the CUDA  -> python/indexer_q/triton_dispatch.py: the Triton kernel where
//   backend: ROCm)                 Triton serves the device and its known-answer check passed,
//                                  else the composed path
//   every other device         -> the composed ATen implementation (composed.cpp), registered
//   (CompositeExplicitAutograd)    as the CompositeExplicitAutograd fallback
//   Meta / FakeTensor          -> python/indexer_q/_ops.py (torch.library.register_fake)
//
// q_sf carries the FP4 block scales (int32 (B, H)) or, for a recipe with scale_out, the FP8 row
// scale it also writes (float32 (B, H, 1) or (B, H), named q_scale in messages); None otherwise.
// Each has a `_composed` twin (same schema) that runs the composed implementation on every
// device, CPU included, so it can be tested against the native kernels and the golden files.
// quant_q_check (same schema) runs the library's validator alone, for the Triton kernel.
// indexer_q::recipe_table(int side, Tensor(a!) out) -> int gives the library's recipe lists to
// Python as text (no second table there), from which python/indexer_q/_ops.py serves
// indexer_q::recipes() -> str[] and indexer_q::recipe_info(str recipe) -> str[] (the descriptor's
// columns as "column=value", values named by the library's *_name functions).
//
// Everything here uses the LibTorch stable ABI (STABLE_TORCH_LIBRARY*, torch::stable::Tensor,
// the AOTI / stable C shims), built with TORCH_TARGET_VERSION = 2.11 (see CMakeLists.txt):
//  - intra-op thread count: torch_get_num_threads()             (stable C shim, torch >= 2.10)
//  - current CUDA stream:   aoti_torch_get_current_cuda_stream() (AOTI C shim, USE_CUDA builds;
//    torch::stable::accelerator::Stream::nativeHandle() would do it but needs torch >= 2.13)
//  - device guard:          torch::stable::accelerator::DeviceGuard (torch >= 2.9)
//  - int[] / Tensor? arguments and results: stable conversions of torch >= 2.10
//  - the str recipe argument: read through the C shim by IQ_BOX_RECIPE (binding.h), never the
//    stable std::string conversion, which leaks (torch 2.10 to 2.13); no kernel returns str[]
//    (recipes / recipe_info / krecipes are served by Python from recipe_table)
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "binding.h"
#include "indexer_q/indexer_q.h"
#include "op_glue.h"

namespace indexer_q {
namespace torch_binding {

namespace {

using torch::headeronly::ScalarType;

// The op's names for a torch dtype the library has no DType for (messages only).
const char* torch_dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Double: return "torch.float64";
    case ScalarType::Float: return "torch.float32";
    case ScalarType::Half: return "torch.float16";
    case ScalarType::BFloat16: return "torch.bfloat16";
    case ScalarType::Float8_e4m3fn: return "torch.float8_e4m3fn";
    case ScalarType::Float8_e5m2: return "torch.float8_e5m2";
    case ScalarType::Float8_e4m3fnuz: return "torch.float8_e4m3fnuz";
    case ScalarType::Float8_e5m2fnuz: return "torch.float8_e5m2fnuz";
    case ScalarType::Byte: return "torch.uint8";
    case ScalarType::Char: return "torch.int8";
    case ScalarType::Short: return "torch.int16";
    case ScalarType::Int: return "torch.int32";
    case ScalarType::Long: return "torch.int64";
    case ScalarType::Bool: return "torch.bool";
    case ScalarType::ComplexFloat: return "torch.complex64";
    case ScalarType::ComplexDouble: return "torch.complex128";
    default: return "an unsupported dtype";
  }
}

const char* device_type_name(StableDeviceType t) {
  switch (t) {
    case StableDeviceType::CPU: return "cpu";
    case StableDeviceType::CUDA: return "cuda";
    case StableDeviceType::XPU: return "xpu";
    case StableDeviceType::Meta: return "meta";
    case StableDeviceType::MPS: return "mps";
    case StableDeviceType::HIP: return "hip";
    case StableDeviceType::PrivateUse1: return "privateuseone";
    default: return "an accelerator";
  }
}

std::string device_text(const Tensor& t) {
  const auto d = t.device();
  std::string s = device_type_name(d.type());
  if (d.type() != StableDeviceType::CPU) s += ":" + std::to_string(d.index());
  return s;
}

// Expected dtypes per argument, used only when the tensor's dtype has no indexer_q::DType.
std::string expected_dtype_text(const std::string& a, const Recipe& rec) {
  if (a == "q_input") return "bf16, fp16 or fp32";
  if (a == "weight") return "bf16, fp16 or fp32";
  if (a == "q_fp4") return "uint8 or int8 (two e2m1 codes per byte)";
  if (a == "q_sf") return "int32 (four UE8M0 bytes per row)";
  if (a == "q_scale") return "fp32 (the FP8 row scale of a recipe with scale_out)";
  if (a == "q_fp8")
    return std::string(rec.format == OutFormat::kE4M3FNUZ ? "fp8_e4m3fnuz (torch.float8_e4m3fnuz)"
                                                          : "fp8_e4m3fn (torch.float8_e4m3fn)") +
           " or uint8 / int8 raw codes, for recipe " + rec.name;
  if (a == "positions") return "int32 or int64";
  return "fp32";
}

TensorView view_of(const Tensor& t, const char* arg, const Recipe& rec) {
  return to_view(t, arg, "3", [&] {
    fail(arg, "expected dtype " + expected_dtype_text(arg, rec) + ", got " + torch_dtype_name(t.scalar_type()));
  });
}

// An argument the recipe does not take (no RoPE: freqs, positions; no weights: weight,
// weights_out), passed as a tensor with no elements: described as the empty view.
bool absent(const Tensor& t, bool recipe_takes_it) {
  return !recipe_takes_it && t.defined() && t.numel() == 0;
}

}  // namespace

namespace {
const RecipeNames<RecipeId>& names() {
  static const RecipeNames<RecipeId> t(all_recipes(), &recipe_name, "");
  return t;
}
}  // namespace

std::int64_t recipe_id_of(std::string_view name) noexcept { return names().id_of(name); }
std::string unknown_recipe_text(std::string_view name) { return names().unknown_text(name); }
RecipeId recipe_of_id(std::int64_t id) { return names().of_id(id); }

indexer_q::OpArgs make_args(const TorchArgs& a) {
  const Recipe& rec = recipe(a.recipe);
  const char* out_name = rec.format == OutFormat::kE2M1 ? "q_fp4" : "q_fp8";
  // q_sf carries FP4 block scales (int32) or, for a recipe with scale_out, the FP8 row scale
  // (float32 (B, H, 1) or (B, H)), which the library and its messages call q_scale.
  const char* sf_name = rec.scale_out ? "q_scale" : "q_sf";
  // (A fixed array, not a std::vector: an accepted call allocates nothing here.)
  NamedTensor list[7] = {{"q_input", &a.q_input}, {out_name, &a.q_out}};
  std::size_t n_list = 2;
  if (a.q_sf) list[n_list++] = {sf_name, a.q_sf};
  const bool has_rope = recipe_has_rope(rec), has_weights = recipe_has_weights(rec);
  for (NamedTensor n : {NamedTensor{"weight", &a.weight}, NamedTensor{"weights_out", &a.weights_out}})
    if (!absent(*n.t, has_weights)) list[n_list++] = n;
  for (NamedTensor n : {NamedTensor{"freqs", &a.freqs}, NamedTensor{"positions", &a.positions}})
    if (!absent(*n.t, has_rope)) list[n_list++] = n;
  // Devices the library cannot name: check here that they all agree with q_input's.
  check_devices(NamedList{list, n_list}, device_text);
  indexer_q::OpArgs o;
  o.recipe = a.recipe;
  o.q_input = view_of(a.q_input, "q_input", rec);
  o.q_out = view_of(a.q_out, out_name, rec);
  if (a.q_sf) o.q_scale = view_of(*a.q_sf, sf_name, rec);  // else: the empty view (ndim 0, no data)
  // A recipe without RoPE (or without weights) takes no freqs / positions (weight / weights_out):
  // the caller passes a tensor with no elements (Python: None becomes torch.empty(0)), which
  // becomes the library's empty view (ndim 0, no data); a tensor with elements stays a view and
  // the validator names it ("recipe ... has no RoPE: expected an empty view").
  o.weight = absent(a.weight, has_weights) ? TensorView{} : view_of(a.weight, "weight", rec);
  o.weights_out =
      absent(a.weights_out, has_weights) ? TensorView{} : view_of(a.weights_out, "weights_out", rec);
  // The Python floats (doubles), each checked against its spec on the double (a value that rounds
  // to inf or 0 in float32 is named as such) and rounded to float32 once: the library's one check.
  throw_if_error(check_scalar(ScalarArg::kWeightScale, a.weight_scale, &o.weight_scale));
  throw_if_error(check_scalar(ScalarArg::kHeadScale, a.head_scale, &o.head_scale));
  o.freqs = a.freqs_view ? *a.freqs_view : absent(a.freqs, has_rope) ? TensorView{} : view_of(a.freqs, "freqs", rec);
  o.positions = absent(a.positions, has_rope) ? TensorView{} : view_of(a.positions, "positions", rec);
  return o;
}

void validate_or_throw(const indexer_q::OpArgs& args) { throw_if_error(indexer_q::validate(args)); }

namespace {

// ---- the kernels: one template over Run per operator (op_glue.h run_op) --------------------
// On CUDA, positions cannot be range-checked here without a device synchronization: the CUDA
// backend guards every read instead (see docs/TORCH.md). side_inputs_ready is
// Options::side_inputs_ready (the caller's promise that positions, freqs and weight are final
// before the kernel starts; docs/TORCH.md states it for torch callers), read by the CUDA backend
// only, like enable_pdl.

// the historical v4_fp8 operator
template <Run R>
void v4_kernel(Tensor q_input, Tensor q_fp8, Tensor weight, Tensor weights_out, double weight_scale,
               Tensor freqs, Tensor positions, bool enable_pdl, bool side_inputs_ready) {
  run_op<QuantQOp, R>(TorchArgs{RecipeId::kV4Fp8, q_input, q_fp8, nullptr, weight, weights_out, weight_scale,
                                freqs, positions},
                      enable_pdl, side_inputs_ready);
}

// the general operator, any recipe by name: quant_q (CPU, CUDA, composed), quant_q_composed,
// quant_q_reference (the library's scalar reference, the executable spec src/common/row.h; CPU
// tensors only: what the other implementations are tested against) and quant_q_check (the
// library's validator alone, for implementations outside it: the Triton kernel of
// python/indexer_q/triton_kernel.py)
template <Run R>
void quant_q_kernel(std::int64_t recipe, Tensor q_input, Tensor q_out, std::optional<Tensor> q_sf, Tensor weight,
                    Tensor weights_out, double weight_scale, Tensor freqs, Tensor positions, bool enable_pdl,
                    double head_scale, bool side_inputs_ready) {
  run_op<QuantQOp, R>(TorchArgs{recipe_of_id(recipe), q_input, q_out, q_sf ? &*q_sf : nullptr, weight, weights_out,
                                weight_scale, freqs, positions, head_scale},
                      enable_pdl, side_inputs_ready);
}

// ---- the allocating form, for the Python wrappers -------------------------------------------
// quant_q_alloc(int recipe, Tensor q_input, Tensor weight, float weight_scale, Tensor freqs,
//             Tensor positions, int out_kind=0, int weights_dims=3, bool enable_pdl=True,
//             float head_scale=1.0, *, bool side_inputs_ready=False) -> (Tensor, Tensor?, Tensor?)
// quant_q with its outputs allocated here, on q_input's device (contiguous, uninitialized), the
// recipe given by its index in the library's list (Python: RECIPES.index(name); an int costs the
// call less than a str, whose conversion and lookup IQ_BOX_RECIPE does per call),
// returned as (q_out, q_sf, weights_out): one call from Python instead of one torch.empty per
// output (each costs more than a microsecond from Python; bench/python_overhead.py). q_out is
// (B, H, 128) in the recipe's FP8 dtype, (B, H, 64) uint8 for FP4, or the raw codes out_kind asks
// for (0: the recipe's dtype, 1: uint8, 2: int8; plus 4: q_out as (B * H, D) rows and q_sf as
// (B * H,), SGLang's V4.1 shapes; with it a 2-D q_input (N, D) is read as (N, 1, D), the view
// reshape(-1, 1, D) would make); q_sf (B, H) int32 for FP4, (B, H, 1) float32
// for a recipe with scale_out, else None; weights_out (B, H) (weights_dims 2) or (B, H, 1)
// (weights_dims 3) float32, None for a recipe without weights. out_kind and weights_dims have
// defaults (0 and 3) so that the common call passes neither: each non-tensor argument costs the
// call from Python about 1.5k instructions (torch's __torch_function__ check and the argument
// parsing; bench/python_overhead.py, callgrind), more than any tensor does. freqs may also be SGLang's complex64
// (max_pos, 32) freq_cis (read as its float32 table; CPU and CUDA only: other paths refuse it,
// and the Python wrappers then pass the float32 view). The arguments a recipe does not take are 0-element tensors, as for quant_q. Then
// exactly quant_q: the same views, the one validator, the same backends (CPU, CUDA; the
// composed path for any other device, which only a call mixing devices reaches: the Python
// wrappers call this form for tensors on a device with a native kernel only).
namespace {

// out_kind: the dtype in the low bits, kRows for q_out / q_sf as rows.
constexpr std::int64_t kRows = 4;

std::int32_t out_dtype_code(const Recipe& rec, std::int64_t out_kind) {
  if (out_kind < 0 || out_kind > (kRows | 2) || (out_kind & 3) == 3)
    fail("out_kind", "expected 0 (the recipe's dtype), 1 (uint8) or 2 (int8), plus 4 for q_out "
                     "as (B * H, 128 or 64) rows and q_sf as (B * H,), got " + std::to_string(out_kind));
  out_kind &= 3;
  if (out_kind == 1) return aoti_torch_dtype_uint8();
  if (out_kind == 2) return aoti_torch_dtype_int8();
  if (rec.format == OutFormat::kE2M1) return aoti_torch_dtype_uint8();
  if (rec.format == OutFormat::kE4M3FNUZ) return aoti_torch_dtype_float8_e4m3fnuz();
  return aoti_torch_dtype_float8_e4m3fn();
}

// A contiguous, uninitialized tensor of `ndim` sizes on the device (type, index) given.
Tensor new_output(std::int64_t ndim, const std::int64_t* sizes, std::int32_t dtype,
                  std::int32_t device_type, std::int32_t device_index) {
  std::int64_t strides[3] = {1, 1, 1};
  for (std::int64_t d = ndim - 2; d >= 0; --d) strides[d] = strides[d + 1] * sizes[d + 1];
  AtenTensorHandle h = nullptr;
  IQ_SHIM_CHECK(aoti_torch_empty_strided(ndim, sizes, strides, dtype, device_type, device_index, &h));
  return Tensor(h);
}

// A view of the contiguous tensor t with `ndim` sizes (the same elements), for the library.
Tensor view_as(const Tensor& t, std::int64_t ndim, const std::int64_t* sizes) {
  std::int64_t strides[3] = {1, 1, 1};
  for (std::int64_t d = ndim - 2; d >= 0; --d) strides[d] = strides[d + 1] * sizes[d + 1];
  AtenTensorHandle h = nullptr;
  IQ_SHIM_CHECK(aoti_torch__reinterpret_tensor(t.get(), ndim, sizes, strides, 0, &h));
  return Tensor(h);
}

// The 2-D t (N, D) as (N, 1, D), the strides reshape(-1, 1, D) gives it: (s0, s1 * D, s1).
Tensor unit_heads_view(const Tensor& t) {
  const std::int64_t sizes[3] = {t.size(0), 1, t.size(1)};
  const std::int64_t strides[3] = {t.stride(0), t.stride(1) * t.size(1), t.stride(1)};
  std::int64_t offset = 0;
  IQ_SHIM_CHECK(aoti_torch_get_storage_offset(t.get(), &offset));
  AtenTensorHandle h = nullptr;
  IQ_SHIM_CHECK(aoti_torch__reinterpret_tensor(t.get(), 3, sizes, strides, offset, &h));
  return Tensor(h);
}

}  // namespace

using NewOutputs = std::tuple<Tensor, std::optional<Tensor>, std::optional<Tensor>>;

namespace {

template <Run R>
NewOutputs quant_q_alloc_kernel(std::int64_t recipe_index, Tensor q_input, Tensor weight, double weight_scale,
                                Tensor freqs, Tensor positions, std::int64_t out_kind, std::int64_t weights_dims,
                                bool enable_pdl, double head_scale, bool side_inputs_ready) {
  const RecipeId id = names().at_index(recipe_index);
  const Recipe& rec = recipe(id);
  check_viewable(q_input, "q_input", "3");
  // out_kind & kRows with a 2-D q_input (N, D): its rows, read as (N, 1, D) (the view
  // reshape(-1, 1, D) makes, here without a view op: SGLang's quantize_fp4_indexer_tensor(x))
  if ((out_kind & kRows) != 0 && out_kind >= 0 && q_input.dim() == 2) q_input = unit_heads_view(q_input);
  if (q_input.dim() != 3)
    fail("q_input", "expected 3 dims (B, H, 128), got " + std::to_string(q_input.dim()));
  if (weights_dims != 2 && weights_dims != 3)
    fail("weights_dims", "expected 2 ((B, H)) or 3 ((B, H, 1)), got " + std::to_string(weights_dims));
  const std::int32_t dtype = out_dtype_code(rec, out_kind);
  std::int32_t dev_type = 0, dev_index = 0;
  IQ_SHIM_CHECK(aoti_torch_get_device_type(q_input.get(), &dev_type));
  IQ_SHIM_CHECK(aoti_torch_get_device_index(q_input.get(), &dev_index));
  const std::int64_t B = q_input.size(0), H = q_input.size(1);
  const bool fp4 = recipe_has_block_scales(rec);
  const std::int64_t q_sizes[3] = {B, H, fp4 ? 64 : 128};
  const std::int64_t bh1[3] = {B, H, 1};
  // out_kind & kRows: q_out (B * H, D) and q_sf (B * H,) are allocated and returned; the
  // library gets (B, H, D) and (B, H) (or (B, H, 1)) views of them
  const bool rows = (out_kind & kRows) != 0;
  const std::int64_t q_rows[2] = {B * H, q_sizes[2]}, sf_rows[1] = {B * H};
  Tensor q_out = rows ? new_output(2, q_rows, dtype, dev_type, dev_index)
                      : new_output(3, q_sizes, dtype, dev_type, dev_index);
  const Tensor q_arg = rows ? view_as(q_out, 3, q_sizes) : q_out;
  // None where the recipe writes no such output (no 0-element tensor is made for it)
  std::optional<Tensor> q_sf, q_sf_arg;
  if (fp4 || rec.scale_out) {
    const std::int32_t sf_dtype = fp4 ? aoti_torch_dtype_int32() : aoti_torch_dtype_float32();
    const std::int64_t sf_ndim = fp4 ? 2 : 3;
    q_sf = rows ? new_output(1, sf_rows, sf_dtype, dev_type, dev_index)
                : new_output(sf_ndim, bh1, sf_dtype, dev_type, dev_index);
    q_sf_arg = rows ? view_as(*q_sf, sf_ndim, bh1) : *q_sf;
  }
  std::optional<Tensor> weights_out;
  if (recipe_has_weights(rec))
    weights_out = new_output(weights_dims, bh1, aoti_torch_dtype_float32(), dev_type, dev_index);
  // a recipe without weights: weight (and weights_out, here q_input's stand-in) are absent; the
  // binding skips a 0-element weights_out only, so pass the caller's 0-element weight for it
  const Tensor& w_out = weights_out ? *weights_out : weight;
  TorchArgs a{id,     q_input, q_arg, q_sf_arg ? &*q_sf_arg : nullptr, weight,
              w_out,  weight_scale, freqs, positions, head_scale};
  // freqs may be SGLang's complex64 (max_pos, 32) freq_cis, read as its float32 table here (no
  // view op per call); the composed implementation computes on a real table only
  std::optional<TensorView> freqs_real;
  if (freqs.defined() && is_complex(freqs.scalar_type())) {
    if (R == Run::kComposed) fail("freqs", "expected the float32 (max_pos, 64) table on this path");
    check_viewable(freqs, "freqs", "3");
    freqs_real = complex_table_view(freqs);
    a.freqs_view = &*freqs_real;
  }
  run_op<QuantQOp, R>(a, enable_pdl, side_inputs_ready);
  return {std::move(q_out), std::move(q_sf), std::move(weights_out)};
}

}  // namespace

// ---- the recipe lists, for Python -----------------------------------------------------------
// recipe_table(int side, Tensor(a!) out) -> int: the library's recipe list as text, one line per
// recipe, "name" then "\tcolumn=value" per column of the descriptor (side 0, the query side: the
// library's column list, include/indexer_q/recipe_columns.inc, generated by its generic column
// API recipe_column_count / recipe_column_name / recipe_column_value; values are the library's own
// names, "true" / "false" for a flag), or "name" alone (side 1, the key side). Returns the text's
// length in bytes and writes it into `out` (a 1-D uint8 CPU tensor) when `out` holds that many
// bytes; else writes nothing. Python reads it once at import and serves the operators
// recipes() -> str[], recipe_info(str) -> str[] and krecipes() -> str[] from it
// (python/indexer_q/_ops.py): a str[] result made here would go through the stable ABI's string
// conversion, which leaks every string it makes (torch 2.10 to 2.13: 750-1100 bytes a call).
std::string recipe_text(std::int64_t side) {
  std::string out;
  if (side == 0) {
    const int n = recipe_column_count();
    for (RecipeId r : all_recipes()) {
      out += recipe_name(r);
      for (int i = 0; i < n; ++i) {
        const char* col = recipe_column_name(i);
        const char* val = recipe_column_value(r, i);
        out += std::string("\t") + (col ? col : "?") + "=" + (val ? val : "unknown");
      }
      out += "\n";
    }
  } else if (side == 1) {
    for (KRecipeId r : all_krecipes()) out += std::string(krecipe_name(r)) + "\n";
  } else {
    fail("side", "expected 0 (the query side) or 1 (the key side), got " + std::to_string(side));
  }
  return out;
}

std::int64_t recipe_table_op(std::int64_t side, Tensor out) {
  const std::string text = recipe_text(side);
  if (out.scalar_type() != ScalarType::Byte || out.dim() != 1 ||
      out.device().type() != StableDeviceType::CPU || (out.numel() > 1 && out.stride(0) != 1))
    fail("out", "expected a 1-D contiguous uint8 CPU tensor");
  if (out.numel() >= std::int64_t(text.size()) && !text.empty())
    std::memcpy(out.data_ptr(), text.data(), text.size());
  return std::int64_t(text.size());
}

// The device types this build registers native kernels for, the same for every op of the
// extension (op.cpp and kside.cpp register their CUDA kernels under the one INDEXER_Q_TORCH_CUDA),
// as a bit set: 1 = cpu, 2 = cuda (an int, not a str[]: a str[] result allocates per call through
// the stable ABI, see IQ_RECIPE_BOX). python/indexer_q/routing.py builds its device ->
// implementation table from it.
std::int64_t native_devices_op() {
  std::int64_t bits = 1;
#if defined(INDEXER_Q_TORCH_CUDA)
  bits |= 2;
#endif
  return bits;
}

}  // namespace
}  // namespace torch_binding
}  // namespace indexer_q

// The schemas, each defined once. enable_pdl is used by the CUDA backend only (programmatic
// dependent launch, sm_90+); other devices ignore it. head_scale (the second factor of the
// two-factor weight folds of the vllm_* recipes and of head_scale_first, OpArgs::head_scale; the
// other recipes ignore it)
// is a defaulted trailing argument, so calls written for the schema without it keep working.
// side_inputs_ready (keyword-only, default False, the safe default; every computing op of the query
// side has it) is Options::side_inputs_ready: the CUDA backend reads positions, freqs and weight
// before griddepcontrol.wait when the caller guarantees they are final before the kernel starts
// (docs/TORCH.md states the contract); the CPU, composed, reference and check kernels accept it and
// ignore it (they read nothing early).
// Every kernel taking the recipe (a str in the schema) is boxed by IQ_BOX_RECIPE (binding.h):
// its str is read without the stable ABI's std::string conversion, which leaks.
#define IQ_RECIPE_BOX(f, R)                                                         \
  IQ_BOX_RECIPE(IQ_KERNEL(f, R), &indexer_q::torch_binding::recipe_id_of, \
                &indexer_q::torch_binding::unknown_recipe_text)
#define IQ_QUANT_Q_ARGS                                                                      \
  "(str recipe, Tensor q_input, Tensor(a!) q_out, Tensor(b!)? q_sf, Tensor weight, "         \
  "Tensor(c!) weights_out, float weight_scale, Tensor freqs, Tensor positions, "             \
  "bool enable_pdl=True, float head_scale=1.0, *, bool side_inputs_ready=False) -> ()"
STABLE_TORCH_LIBRARY(indexer_q, m) {
  m.def(
      "fused_q_indexer_rope_hadamard_quant(Tensor q_input, Tensor(a!) q_fp8, Tensor weight, "
      "Tensor(b!) weights_out, float weight_scale, Tensor freqs, Tensor positions, "
      "bool enable_pdl=True, *, bool side_inputs_ready=False) -> ()");
  m.def(
      "fused_q_indexer_rope_hadamard_quant_composed(Tensor q_input, Tensor(a!) q_fp8, "
      "Tensor weight, Tensor(b!) weights_out, float weight_scale, Tensor freqs, "
      "Tensor positions, bool enable_pdl=True, *, bool side_inputs_ready=False) -> ()");
  m.def("quant_q" IQ_QUANT_Q_ARGS);
  m.def("quant_q_composed" IQ_QUANT_Q_ARGS);
  m.def("quant_q_check" IQ_QUANT_Q_ARGS);  // the validator alone (writes nothing)
  m.def("quant_q_reference" IQ_QUANT_Q_ARGS);  // the scalar reference (CPU tensors)
  // quant_q with its outputs allocated (see quant_q_alloc_kernel above): for the Python wrappers
  m.def(
      "quant_q_alloc(int recipe, Tensor q_input, Tensor weight, float weight_scale, Tensor freqs, "
      "Tensor positions, int out_kind=0, int weights_dims=3, bool enable_pdl=True, "
      "float head_scale=1.0, *, bool side_inputs_ready=False) -> (Tensor, Tensor?, Tensor?)");
  // Served by Python from recipe_table (python/indexer_q/_ops.py; see recipe_table_op above).
  m.def("recipes() -> str[]");
  m.def("recipe_info(str recipe) -> str[]");
  m.def("native_devices() -> int");
  m.def("recipe_table(int side, Tensor(a!) out) -> int");
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CPU, m) {
  m.impl("fused_q_indexer_rope_hadamard_quant", TORCH_BOX(IQ_KERNEL(v4_kernel, kCpu)));
  m.impl("quant_q", IQ_RECIPE_BOX(quant_q_kernel, kCpu));
  m.impl("quant_q_reference", IQ_RECIPE_BOX(quant_q_kernel, kReference));
  m.impl("quant_q_alloc", TORCH_BOX(IQ_KERNEL(quant_q_alloc_kernel, kCpu)));
}

#if defined(INDEXER_Q_TORCH_CUDA)
STABLE_TORCH_LIBRARY_IMPL(indexer_q, CUDA, m) {
  m.impl("fused_q_indexer_rope_hadamard_quant", TORCH_BOX(IQ_KERNEL(v4_kernel, kCuda)));
  m.impl("quant_q", IQ_RECIPE_BOX(quant_q_kernel, kCuda));
  m.impl("quant_q_alloc", TORCH_BOX(IQ_KERNEL(quant_q_alloc_kernel, kCuda)));
}
#endif

// XPU (and CUDA in a build without the CUDA backend, e.g. ROCm) get no C++ kernel here:
// python/indexer_q/triton_dispatch.py registers one for those keys that runs the Triton kernel
// where Triton serves the device and its known-answer check passed, else quant_q_composed.
// Without the Python package they fall to the CompositeExplicitAutograd (composed) kernel below.
STABLE_TORCH_LIBRARY_IMPL(indexer_q, CompositeExplicitAutograd, m) {
  m.impl("fused_q_indexer_rope_hadamard_quant", TORCH_BOX(IQ_KERNEL(v4_kernel, kComposed)));
  m.impl("fused_q_indexer_rope_hadamard_quant_composed", TORCH_BOX(IQ_KERNEL(v4_kernel, kComposed)));
  m.impl("quant_q", IQ_RECIPE_BOX(quant_q_kernel, kComposed));
  m.impl("quant_q_composed", IQ_RECIPE_BOX(quant_q_kernel, kComposed));
  m.impl("quant_q_check", IQ_RECIPE_BOX(quant_q_kernel, kCheck));
  m.impl("quant_q_alloc", TORCH_BOX(IQ_KERNEL(quant_q_alloc_kernel, kComposed)));
  m.impl("recipe_table", TORCH_BOX(&indexer_q::torch_binding::recipe_table_op));
  m.impl("native_devices", TORCH_BOX(&indexer_q::torch_binding::native_devices_op));
}
