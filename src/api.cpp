// The public API: tensor views, names, the one validator, and dispatch to a backend.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/problem.h"
#include "common/row.h"
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
// the validator
// ---------------------------------------------------------------------------------------
namespace {

using detail::kFreqsDim;
using detail::kHeadDim;

std::string shape_str(const TensorView& t) {
  std::ostringstream os;
  os << "(";
  for (int d = 0; d < t.ndim; ++d) os << (d ? ", " : "") << t.sizes[d];
  if (t.ndim == 1) os << ",";
  os << ")";
  return os.str();
}

std::string stride_str(const TensorView& t) {
  std::ostringstream os;
  os << "(";
  for (int d = 0; d < t.ndim; ++d) os << (d ? ", " : "") << t.strides[d];
  if (t.ndim == 1) os << ",";
  os << ")";
  return os.str();
}

const char* device_str(const Device& d) { return d.type == DeviceType::kCPU ? "cpu" : "cuda"; }

std::string device_full(const Device& d) {
  if (d.type == DeviceType::kCPU) return "cpu";
  return std::string("cuda:") + std::to_string(d.index);
}

Status bad(const char* arg, const std::string& what) {
  return Status::InvalidArgument(std::string("indexer_q: ") + arg + ": " + what);
}

// Shape check: exact rank and sizes.
Status check_shape(const char* arg, const TensorView& t, std::initializer_list<std::int64_t> want,
                   const char* want_text) {
  if (t.ndim < 0) return bad(arg, "sizes and strides have different lengths");
  bool ok = t.ndim == int(want.size());
  if (ok) {
    int d = 0;
    for (std::int64_t w : want) ok = ok && t.sizes[d++] == w;
  }
  if (!ok) {
    std::ostringstream os;
    os << "expected shape " << want_text << ", got " << shape_str(t);
    return bad(arg, os.str());
  }
  return Status::Ok();
}

// Stride check: dims of size <= 1 may have any stride; the others must match `want`
// (for dim 0 of weight: >= want).
Status check_strides(const char* arg, const TensorView& t, std::initializer_list<std::int64_t> want,
                     const char* want_text, bool dim0_at_least = false) {
  int d = 0;
  for (std::int64_t w : want) {
    if (t.sizes[d] > 1) {
      const bool ok = (d == 0 && dim0_at_least) ? t.strides[d] >= w : t.strides[d] == w;
      if (!ok) {
        std::ostringstream os;
        os << "unsupported strides " << stride_str(t) << "; expected " << want_text;
        return bad(arg, os.str());
      }
    }
    ++d;
  }
  return Status::Ok();
}

Status check_dtype(const char* arg, const TensorView& t, std::initializer_list<DType> allowed,
                   const char* want_text) {
  for (DType d : allowed)
    if (t.dtype == d) return Status::Ok();
  return bad(arg, std::string("expected dtype ") + want_text + ", got " + dtype_name(t.dtype));
}

// Byte range [lo, hi) spanned by a view (empty if any size is 0).
struct Span {
  std::uintptr_t lo = 0, hi = 0;
  bool empty() const { return hi <= lo; }
};

Span span_of(const TensorView& t) {
  Span s;
  if (t.numel() == 0 || t.data == nullptr) return s;
  std::int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) last += (t.sizes[d] - 1) * t.strides[d];
  s.lo = reinterpret_cast<std::uintptr_t>(t.data);
  s.hi = s.lo + std::uintptr_t(last + 1) * dtype_size(t.dtype);
  return s;
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (a.device != b.device) return false;
  const Span x = span_of(a), y = span_of(b);
  if (x.empty() || y.empty()) return false;
  return x.lo < y.hi && y.lo < x.hi;
}

Status validate_impl(const TensorView& q_input, const TensorView& q_fp8, const TensorView& weight,
                     const TensorView& weights_out, const TensorView& freqs,
                     const TensorView& positions, const Options& options, detail::Problem* out) {
  // --- q_input fixes B, H and the dtype ---
  if (q_input.ndim != 3)
    return bad("q_input", "expected 3 dims (B, H, 128), got " + std::to_string(q_input.ndim));
  const std::int64_t B = q_input.sizes[0];
  const std::int64_t H = q_input.sizes[1];
  if (B < 0) return bad("q_input", "batch size B must be >= 0, got " + std::to_string(B));
  if (H <= 0) return bad("q_input", "head count H must be >= 1, got " + std::to_string(H));
  if (q_input.sizes[2] != kHeadDim)
    return bad("q_input", "head dim must be 128, got " + std::to_string(q_input.sizes[2]) +
                              " (shape " + shape_str(q_input) + ")");
  Status s = check_dtype("q_input", q_input, {DType::kBFloat16, DType::kFloat16, DType::kFloat32},
                         "bf16, fp16 or fp32");
  if (!s.ok()) return s;
  s = check_strides("q_input", q_input, {H * kHeadDim, kHeadDim, 1}, "contiguous rows (H*128, 128, 1)");
  if (!s.ok()) return s;

  // --- q_fp8 ---
  const std::string bh128 = "(" + std::to_string(B) + ", " + std::to_string(H) + ", 128) = (B, H, 128)";
  s = check_shape("q_fp8", q_fp8, {B, H, kHeadDim}, bh128.c_str());
  if (!s.ok()) return s;
  s = check_dtype("q_fp8", q_fp8, {DType::kFloat8E4M3}, "fp8_e4m3fn");
  if (!s.ok()) return s;
  s = check_strides("q_fp8", q_fp8, {H * kHeadDim, kHeadDim, 1}, "contiguous (H*128, 128, 1)");
  if (!s.ok()) return s;

  // --- weight ---
  const std::string bh = "(" + std::to_string(B) + ", " + std::to_string(H) + ") = (B, H)";
  s = check_shape("weight", weight, {B, H}, bh.c_str());
  if (!s.ok()) return s;
  if (weight.dtype != q_input.dtype)
    return bad("weight", std::string("expected the dtype of q_input (") + dtype_name(q_input.dtype) +
                             "), got " + dtype_name(weight.dtype));
  s = check_strides("weight", weight, {H, 1}, "stride(1) = 1 and stride(0) >= H", true);
  if (!s.ok()) return s;

  // --- weights_out ---
  const std::string bh1 = "(" + std::to_string(B) + ", " + std::to_string(H) + ", 1) = (B, H, 1)";
  s = check_shape("weights_out", weights_out, {B, H, 1}, bh1.c_str());
  if (!s.ok()) return s;
  s = check_dtype("weights_out", weights_out, {DType::kFloat32}, "fp32");
  if (!s.ok()) return s;
  s = check_strides("weights_out", weights_out, {H, 1, 1}, "contiguous (H, 1, 1)");
  if (!s.ok()) return s;

  // --- freqs ---
  if (freqs.ndim != 2 || freqs.sizes[1] != kFreqsDim || freqs.sizes[0] < 0)
    return bad("freqs", "expected shape (max_pos, 64), got " + shape_str(freqs));
  s = check_dtype("freqs", freqs, {DType::kFloat32}, "fp32");
  if (!s.ok()) return s;
  s = check_strides("freqs", freqs, {kFreqsDim, 1}, "contiguous (64, 1)");
  if (!s.ok()) return s;
  const std::int64_t max_pos = freqs.sizes[0];

  // --- positions ---
  const std::string b1 = "(" + std::to_string(B) + ",) = (B,)";
  s = check_shape("positions", positions, {B}, b1.c_str());
  if (!s.ok()) return s;
  s = check_dtype("positions", positions, {DType::kInt32, DType::kInt64}, "int32 or int64");
  if (!s.ok()) return s;
  s = check_strides("positions", positions, {1}, "contiguous (1,)");
  if (!s.ok()) return s;

  // --- devices ---
  const struct {
    const char* name;
    const TensorView* t;
  } all[] = {{"q_input", &q_input}, {"q_fp8", &q_fp8}, {"weight", &weight},
             {"weights_out", &weights_out}, {"freqs", &freqs}, {"positions", &positions}};
  for (const auto& a : all) {
    if (a.t->device != q_input.device)
      return bad(a.name, std::string("expected the device of q_input (") + device_full(q_input.device) +
                             "), got " + device_full(a.t->device));
  }
  const Device dev = q_input.device;

  // --- backend vs device ---
  Backend backend = options.backend;
  if (backend != Backend::kAuto && backend != Backend::kReference && backend != Backend::kCpu &&
      backend != Backend::kCuda)
    return bad("options.backend", "expected auto, reference, cpu or cuda, got the value " +
                                      std::to_string(int(backend)));
  if (options.cpu_isa != CpuIsa::kAuto && options.cpu_isa != CpuIsa::kScalar &&
      options.cpu_isa != CpuIsa::kAvx2 && options.cpu_isa != CpuIsa::kAvx512)
    return bad("options.cpu_isa", "expected auto, scalar, avx2 or avx512, got the value " +
                                      std::to_string(int(options.cpu_isa)));
  if (backend == Backend::kAuto) backend = dev.type == DeviceType::kCPU ? Backend::kCpu : Backend::kCuda;
  if ((backend == Backend::kReference || backend == Backend::kCpu) && dev.type != DeviceType::kCPU)
    return bad("options.backend", std::string("backend '") + backend_name(backend) +
                                      "' needs cpu tensors, got " + device_str(dev) + " tensors");
  if (backend == Backend::kCuda && dev.type != DeviceType::kCUDA)
    return bad("options.backend", std::string("backend 'cuda' needs cuda tensors, got ") +
                                      device_str(dev) + " tensors");
  if (options.num_threads < 0)
    return bad("options.num_threads", "expected >= 0 (0 = default), got " + std::to_string(options.num_threads));

  if (B == 0) {
    if (out) {
      *out = detail::Problem{};
      out->H = H;
    }
    return Status::Ok();  // valid, nothing to do, nothing to read
  }

  // --- null data (B > 0 from here) ---
  for (const auto& a : all) {
    if (a.t->data == nullptr && a.t->numel() > 0)
      return bad(a.name, "data pointer is null while the tensor has " + std::to_string(a.t->numel()) +
                             " elements");
  }
  if (max_pos == 0) return bad("freqs", "has 0 rows (max_pos = 0), so no position is valid");

  // --- outputs must not overlap inputs or each other ---
  const struct {
    const char* name;
    const TensorView* t;
  } outs[] = {{"q_fp8", &q_fp8}, {"weights_out", &weights_out}};
  for (const auto& o : outs) {
    for (const auto& a : all) {
      if (a.t == o.t) continue;
      if (overlaps(*o.t, *a.t))
        return bad(o.name, std::string("output memory overlaps ") + a.name);
    }
  }

  // --- positions in range, wherever the host can read them ---
  if (dev.type == DeviceType::kCPU) {
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t p = positions.dtype == DType::kInt32
                                 ? std::int64_t(static_cast<const std::int32_t*>(positions.data)[b])
                                 : static_cast<const std::int64_t*>(positions.data)[b];
      if (p < 0 || p >= max_pos)
        return bad("positions", "positions[" + std::to_string(b) + "] = " + std::to_string(p) +
                                    " is outside [0, max_pos) = [0, " + std::to_string(max_pos) + ")");
    }
  }

  if (out) {
    detail::Problem& p = *out;
    p.B = B;
    p.H = H;
    p.dtype = q_input.dtype;
    p.q_input = q_input.data;
    p.q_fp8 = static_cast<std::uint8_t*>(q_fp8.data);
    p.weight = weight.data;
    p.weight_stride_b = B > 1 ? weight.strides[0] : H;
    p.weights_out = static_cast<float*>(weights_out.data);
    p.freqs = static_cast<const float*>(freqs.data);
    p.max_pos = max_pos;
    p.positions = positions.data;
    p.pos_dtype = positions.dtype;
    p.device = dev;
  }
  return Status::Ok();
}

}  // namespace

Status validate(const TensorView& q_input, const TensorView& q_fp8, const TensorView& weight,
                const TensorView& weights_out, float /*weight_scale*/, const TensorView& freqs,
                const TensorView& positions, const Options& options) {
  return validate_impl(q_input, q_fp8, weight, weights_out, freqs, positions, options, nullptr);
}

Status fused_q_indexer_rope_hadamard_quant(const TensorView& q_input, const TensorView& q_fp8,
                                           const TensorView& weight,
                                           const TensorView& weights_out, float weight_scale,
                                           const TensorView& freqs, const TensorView& positions,
                                           const Options& options) {
  detail::Problem p;
  Status s = validate_impl(q_input, q_fp8, weight, weights_out, freqs, positions, options, &p);
  if (!s.ok()) return s;
  p.weight_scale = weight_scale;
  if (p.B == 0) return Status::Ok();

  Backend backend = options.backend;
  if (backend == Backend::kAuto)
    backend = p.device.type == DeviceType::kCPU ? Backend::kCpu : Backend::kCuda;
  switch (backend) {
    case Backend::kReference: return detail::reference_run(p);
    case Backend::kCpu: {
      CpuIsa isa = options.cpu_isa;
      if (isa == CpuIsa::kAuto) {
        s = active_cpu_isa(&isa);
        if (!s.ok()) return s;
      } else if (!cpu_isa_supported(isa)) {
        return Status::Unavailable(std::string("indexer_q: options.cpu_isa: '") + cpu_isa_name(isa) +
                                   "' is not supported by this build or processor");
      }
      const int threads = options.num_threads > 0 ? options.num_threads : cpu_num_threads();
      return detail::cpu_run(p, isa, threads);
    }
    case Backend::kCuda:
#if defined(INDEXER_Q_WITH_CUDA)
      if (!detail::cuda_available())
        return Status::Unavailable("indexer_q: options.backend: 'cuda' is compiled in but no CUDA device is usable");
      return detail::cuda_run(p, options.stream, options.enable_pdl);
#else
      return Status::Unavailable("indexer_q: options.backend: 'cuda' is not compiled into this build (INDEXER_Q_CUDA=OFF)");
#endif
    case Backend::kAuto: break;
  }
  return Status::Internal("indexer_q: unreachable backend");
}

}  // namespace indexer_q
