// indexer_q::fused_q_indexer_rope_hadamard_quant as ONE PyTorch operator, routed by the
// dispatcher:
//
//   CPU                        -> the library's CPU backend (threads = torch's intra-op count)
//   CUDA                       -> the library's CUDA backend on torch's current stream
//                                 (only when the build has CUDA: INDEXER_Q_TORCH_CUDA)
//   XPU, and every other device -> the composed ATen implementation (composed.cpp), registered
//   (CompositeExplicitAutograd)    for XPU and as the CompositeExplicitAutograd fallback
//   Meta / FakeTensor          -> python/indexer_q/_ops.py (torch.library.register_fake)
//
// A second operator, indexer_q::fused_q_indexer_rope_hadamard_quant_composed (same schema), runs
// the composed implementation on every device, CPU included, so it can be tested against the
// native kernels and the golden files.
//
// Everything here uses the LibTorch stable ABI (STABLE_TORCH_LIBRARY*, torch::stable::Tensor,
// the AOTI / stable C shims), built with TORCH_TARGET_VERSION = 2.11 (see CMakeLists.txt):
//  - intra-op thread count: torch_get_num_threads()             (stable C shim, torch >= 2.10)
//  - current CUDA stream:   aoti_torch_get_current_cuda_stream() (AOTI C shim, USE_CUDA builds;
//    torch::stable::accelerator::Stream::nativeHandle() would do it but needs torch >= 2.13)
//  - device guard:          torch::stable::accelerator::DeviceGuard (torch >= 2.9)
#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "binding.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace torch_binding {

namespace {

using torch::headeronly::ScalarType;
using StableDeviceType = torch::headeronly::DeviceType;

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

[[noreturn]] void fail(const char* arg, const std::string& what) {
  throw std::runtime_error(std::string("indexer_q: ") + arg + ": " + what);
}

// Expected dtypes per argument, used only when the tensor's dtype has no indexer_q::DType.
const char* expected_dtype_text(const char* arg) {
  const std::string a = arg;
  if (a == "q_input") return "bf16, fp16 or fp32";
  if (a == "weight") return "the dtype of q_input (bf16, fp16 or fp32)";
  if (a == "q_fp8") return "fp8_e4m3fn (torch.float8_e4m3fn)";
  if (a == "positions") return "int32 or int64";
  return "fp32";
}

TensorView view_of(const Tensor& t, const char* arg) {
  if (!t.defined()) fail(arg, "expected a tensor, got an undefined tensor");
  if (t.layout() != torch::headeronly::Layout::Strided)
    fail(arg, "expected a strided (dense) tensor, got a sparse or other non-strided layout");
  const std::int64_t nd = t.dim();
  if (nd > TensorView::kMaxDims)
    fail(arg, "expected at most 3 dims, got " + std::to_string(nd));

  TensorView v;
  switch (t.scalar_type()) {
    case ScalarType::BFloat16: v.dtype = DType::kBFloat16; break;
    case ScalarType::Half: v.dtype = DType::kFloat16; break;
    case ScalarType::Float: v.dtype = DType::kFloat32; break;
    case ScalarType::Float8_e4m3fn: v.dtype = DType::kFloat8E4M3; break;
    case ScalarType::Int: v.dtype = DType::kInt32; break;
    case ScalarType::Long: v.dtype = DType::kInt64; break;
    default:
      fail(arg, std::string("expected dtype ") + expected_dtype_text(arg) + ", got " +
                    torch_dtype_name(t.scalar_type()));
  }
  v.ndim = int(nd);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = strides[d];
  }
  v.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  const auto dev = t.device();
  if (dev.type() == StableDeviceType::CPU) {
    v.device = Device{DeviceType::kCPU, 0};
  } else {
    // CUDA tensors are CUDA memory; any other device is described as CUDA memory of the same
    // index, after make_views() checked that all six tensors share that device.
    v.device = Device{DeviceType::kCUDA, int(dev.index())};
  }
  return v;
}

}  // namespace

void throw_if_error(const Status& s) {
  if (s.ok()) return;
  // torch turns a std::exception escaping a kernel into a Python RuntimeError carrying what():
  // the library's message, "indexer_q: <argument>: <what was expected>, got <what>".
  throw std::runtime_error(s.message());
}

Views make_views(const OpArgs& a) {
  const struct {
    const char* name;
    const Tensor* t;
  } all[] = {{"q_input", &a.q_input}, {"q_fp8", &a.q_fp8},  {"weight", &a.weight},
             {"weights_out", &a.weights_out}, {"freqs", &a.freqs}, {"positions", &a.positions}};
  // Devices the library cannot name: check here that they all agree with q_input's.
  bool other_device = false;
  for (const auto& x : all) {
    if (!x.t->defined()) fail(x.name, "expected a tensor, got an undefined tensor");
    const auto ty = x.t->device().type();
    if (ty != StableDeviceType::CPU && ty != StableDeviceType::CUDA) other_device = true;
  }
  if (other_device) {
    const auto d0 = a.q_input.device();
    for (const auto& x : all) {
      const auto d = x.t->device();
      if (d.type() != d0.type() || d.index() != d0.index())
        fail(x.name, "expected the device of q_input (" + device_text(a.q_input) + "), got " +
                         device_text(*x.t));
    }
  }
  Views v;
  v.q_input = view_of(a.q_input, "q_input");
  v.q_fp8 = view_of(a.q_fp8, "q_fp8");
  v.weight = view_of(a.weight, "weight");
  v.weights_out = view_of(a.weights_out, "weights_out");
  v.freqs = view_of(a.freqs, "freqs");
  v.positions = view_of(a.positions, "positions");
  return v;
}

void validate_or_throw(const OpArgs& a, const Views& v) {
  throw_if_error(indexer_q::validate(v.q_input, v.q_fp8, v.weight, v.weights_out,
                                     float(a.weight_scale), v.freqs, v.positions));
}

namespace {

// ---- CPU: the library's CPU backend -------------------------------------------------------
void cpu_kernel(Tensor q_input, Tensor q_fp8, Tensor weight, Tensor weights_out,
                double weight_scale, Tensor freqs, Tensor positions, bool /*enable_pdl*/) {
  const OpArgs a{q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions};
  const Views v = make_views(a);
  Options o;
  o.backend = Backend::kCpu;
  // torch's intra-op thread count (torch.get_num_threads()), through the stable C shim.
  o.num_threads = int(std::max<std::uint32_t>(1u, torch::stable::get_num_threads()));
  throw_if_error(indexer_q::fused_q_indexer_rope_hadamard_quant(
      v.q_input, v.q_fp8, v.weight, v.weights_out, float(weight_scale), v.freqs, v.positions, o));
}

#if defined(INDEXER_Q_TORCH_CUDA)
// ---- CUDA: the library's CUDA backend on torch's current stream ---------------------------
// positions cannot be range-checked here without a device synchronization: the CUDA backend
// guards every read instead (see docs/TORCH.md).
void cuda_kernel(Tensor q_input, Tensor q_fp8, Tensor weight, Tensor weights_out,
                 double weight_scale, Tensor freqs, Tensor positions, bool enable_pdl) {
  const OpArgs a{q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions};
  const Views v = make_views(a);
  Options o;
  o.backend = Backend::kCuda;
  o.enable_pdl = enable_pdl;
  // The dispatcher also lands here when q_input is on the CPU but another tensor is on CUDA:
  // then no guard or stream is needed, the validator reports the device mismatch.
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  if (q_input.is_cuda()) {
    const int32_t index = q_input.get_device_index();
    guard.emplace(index);
    void* stream = nullptr;
    IQ_SHIM_CHECK(aoti_torch_get_current_cuda_stream(index, &stream));
    o.stream = stream;
  }
  throw_if_error(indexer_q::fused_q_indexer_rope_hadamard_quant(
      v.q_input, v.q_fp8, v.weight, v.weights_out, float(weight_scale), v.freqs, v.positions, o));
}
#endif

// ---- every other device: the composed ATen implementation ---------------------------------
void composed_kernel(Tensor q_input, Tensor q_fp8, Tensor weight, Tensor weights_out,
                     double weight_scale, Tensor freqs, Tensor positions, bool /*enable_pdl*/) {
  composed_forward(OpArgs{q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions});
}

}  // namespace
}  // namespace torch_binding
}  // namespace indexer_q

// The schema, defined once. enable_pdl is used by the CUDA backend only (programmatic dependent
// launch, sm_90+); other devices ignore it.
STABLE_TORCH_LIBRARY(indexer_q, m) {
  m.def(
      "fused_q_indexer_rope_hadamard_quant(Tensor q_input, Tensor(a!) q_fp8, Tensor weight, "
      "Tensor(b!) weights_out, float weight_scale, Tensor freqs, Tensor positions, "
      "bool enable_pdl=False) -> ()");
  m.def(
      "fused_q_indexer_rope_hadamard_quant_composed(Tensor q_input, Tensor(a!) q_fp8, "
      "Tensor weight, Tensor(b!) weights_out, float weight_scale, Tensor freqs, "
      "Tensor positions, bool enable_pdl=False) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CPU, m) {
  m.impl("fused_q_indexer_rope_hadamard_quant", TORCH_BOX(&indexer_q::torch_binding::cpu_kernel));
}

#if defined(INDEXER_Q_TORCH_CUDA)
STABLE_TORCH_LIBRARY_IMPL(indexer_q, CUDA, m) {
  m.impl("fused_q_indexer_rope_hadamard_quant", TORCH_BOX(&indexer_q::torch_binding::cuda_kernel));
}
#endif

STABLE_TORCH_LIBRARY_IMPL(indexer_q, XPU, m) {
  m.impl("fused_q_indexer_rope_hadamard_quant",
         TORCH_BOX(&indexer_q::torch_binding::composed_kernel));
}

STABLE_TORCH_LIBRARY_IMPL(indexer_q, CompositeExplicitAutograd, m) {
  m.impl("fused_q_indexer_rope_hadamard_quant",
         TORCH_BOX(&indexer_q::torch_binding::composed_kernel));
  m.impl("fused_q_indexer_rope_hadamard_quant_composed",
         TORCH_BOX(&indexer_q::torch_binding::composed_kernel));
}
