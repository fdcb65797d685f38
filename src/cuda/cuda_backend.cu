// The CUDA backend of fused_q_indexer_rope_hadamard_quant.
//
// Design (the "row-group" kernel): each row of 128 values is processed by LANES consecutive
// threads (LANES = 4, 8 or 16). A lane holds C = 128 / (8 * LANES) chunks of 8 contiguous
// values; element i of the row lives in
//     chunk c = i / (8 * LANES),   lane l = (i / 8) % LANES,   slot k = i % 8.
// Each chunk is one 16-byte load (bf16 / fp16) or two (fp32), and one 8-byte store of codes.
// The Hadamard butterflies run in the order SPEC.md fixes (strides 1, 2, 4, ..., 64):
//   strides 1, 2, 4            (bits of k)  inside a chunk, in registers;
//   strides 8 .. 4 * LANES     (bits of l)  across lanes, one shuffle per value;
//   strides 8 * LANES .. 64    (bits of c)  across a lane's chunks, in registers.
// Every add and subtract is the spec's: across lanes the low lane computes own + partner and
// the high lane partner - own, both written as one fma with a multiplier of +1 / -1, which
// rounds exactly like the plain add / subtract (the product by +-1 is exact).
//
// FP8 encoding uses Hopper's cvt.rn.satfinite.e4m3x2.f32 (round to nearest even, saturating
// to +-448). Step 8's clamp is kept as fminf(v, 448) only: it maps NaN to +448 exactly like
// the spec's fmax(fmin(v, 448), -448); every non-NaN value below -448 is saturated to -448
// by the conversion itself. tests/test_cuda.cu checks the conversion against the scalar
// encoder for every float32 bit pattern.
//
// Out-of-range positions. Positions live in device memory and cannot be checked on the host
// without a synchronization. A row whose position p is < 0 or >= max_pos reads no freqs row
// (no out-of-bounds access); its 128 codes are written as 0x00 and its weights_out as a quiet
// NaN, so the caller can detect it (isnan(weights_out)). No trap, no error code.
//
// Everything is enqueued on the caller's stream: no allocation, no host synchronization, so
// the call can be captured in a CUDA graph. With enable_pdl on an sm_90+ device the kernel
// is launched with programmatic stream serialization: it waits (griddepcontrol.wait) before
// its first global load and lets dependents launch (griddepcontrol.launch_dependents) after
// its last input load.
//
// Misaligned pointers (q_input / freqs not 16-byte aligned, q_fp8 not 8-byte aligned, e.g. a
// view at an odd element offset) take a simple one-thread-per-row kernel with the scalar row
// pipeline of src/common/row.h: same bytes, slower.
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda_fp16.h>
#include <string>

#include "common/problem.h"
#include "common/row.h"
#include "cuda/cuda_backend.h"
#include "cuda/fp8_e4m3.cuh"

namespace indexer_q {
namespace detail {
namespace {

struct Args {
  const void* q;
  std::uint8_t* out;
  const void* w;
  std::int64_t w_stride;
  float* w_out;
  float w_scale;
  const float* freqs;
  std::int64_t max_pos;
  const void* pos;
  std::uint64_t rows;
  std::uint32_t H;
};

enum : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <bool POS64>
__device__ __forceinline__ std::int64_t load_pos(const void* pos, std::uint64_t b) {
  if (POS64) return __ldg(static_cast<const long long*>(pos) + b);
  return std::int64_t(__ldg(static_cast<const int*>(pos) + b));
}

template <int DT>
__device__ __forceinline__ float load_weight(const void* w, std::uint64_t idx) {
  if (DT == kBF16) {
    const unsigned short u = __ldg(static_cast<const unsigned short*>(w) + idx);
    return __uint_as_float(std::uint32_t(u) << 16);
  } else if (DT == kF16) {
    return __half2float(__ldg(static_cast<const __half*>(w) + idx));  // exact
  } else {
    return __ldg(static_cast<const float*>(w) + idx);
  }
}

// Loads the 8 values of chunk `idx` (in units of 8 elements) of a row, decoded to fp32.
template <int DT>
__device__ __forceinline__ void load8(const void* row, int idx, float* v) {
  if (DT == kF32) {
    const float4* p = static_cast<const float4*>(row) + 2 * idx;
    const float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    const uint4 u = __ldg(static_cast<const uint4*>(row) + idx);
    const std::uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (DT == kBF16) {
        v[2 * j] = __uint_as_float(w[j] << 16);
        v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      } else {
        __half2 h;
        *reinterpret_cast<std::uint32_t*>(&h) = w[j];
        const float2 f = __half22float2(h);  // exact conversion
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
      }
    }
  }
}

template <int LANES, int DT, bool POS64>
__global__ void __launch_bounds__(256) rowgroup_kernel(Args a) {
  constexpr int C = kHeadDim / (8 * LANES);  // chunks per lane
  const std::uint64_t t = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t row = t / LANES;
  const int l = int(threadIdx.x % LANES);
  // The LANES threads of a row are consecutive lanes of one warp and share every branch
  // below, so shuffles name only them (a partly filled last warp is fine).
  const unsigned gmask = LANES == 32 ? 0xffffffffu
                                     : ((1u << LANES) - 1u) << ((threadIdx.x & 31u) & ~unsigned(LANES - 1));
  pdl_wait();
  if (row >= a.rows) {
    pdl_launch_dependents();
    return;
  }
  const std::uint64_t b = (row >> 32) ? row / a.H : std::uint64_t(std::uint32_t(row) / a.H);
  const std::uint64_t h = row - b * a.H;

  // ---- loads: q chunks, position, then the freqs this lane needs, and the weight ----
  const char* qrow = static_cast<const char*>(a.q) + row * (kHeadDim * (DT == kF32 ? 4 : 2));
  float x[C][8];
#pragma unroll
  for (int c = 0; c < C; ++c) load8<DT>(qrow, c * LANES + l, x[c]);
  const std::int64_t p = load_pos<POS64>(a.pos, b);
  const bool valid = p >= 0 && p < a.max_pos;
  const float* frow = a.freqs + (valid ? p : 0) * kFreqsDim;  // row 0 always exists
  float w = 0.0f;
  if (l == 0) w = load_weight<DT>(a.w, b * std::uint64_t(a.w_stride) + h);

  // ---- RoPE on elements 64..127 (SPEC step 2) ----
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i0 = (c * LANES + l) * 8;  // first element of the chunk
    const bool rope = (C > 1) ? (c * 8 * LANES >= kRopeOffset) : (i0 >= kRopeOffset);
    if (rope) {
      const float4* fp = reinterpret_cast<const float4*>(frow + (i0 - kRopeOffset));
      const float4 f0 = __ldg(fp), f1 = __ldg(fp + 1);
      const float f[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float xr = x[c][2 * j], xi = x[c][2 * j + 1];
        const float cs = f[2 * j], sn = f[2 * j + 1];
        x[c][2 * j] = __fmaf_rn(xr, cs, -__fmul_rn(xi, sn));
        x[c][2 * j + 1] = __fmaf_rn(xr, sn, __fmul_rn(xi, cs));
      }
    }
  }
  pdl_launch_dependents();  // every input has been read (into registers)

  // ---- Hadamard (SPEC step 3), strides ascending ----
#pragma unroll
  for (int s = 1; s < 8; s <<= 1) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if ((k & s) == 0) {
          const float u = x[c][k], v = x[c][k + s];
          x[c][k] = __fadd_rn(u, v);
          x[c][k + s] = __fsub_rn(u, v);
        }
      }
    }
  }
#pragma unroll
  for (int s = 1; s < LANES; s <<= 1) {
    const float sgn = (l & s) ? -1.0f : 1.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float other = __shfl_xor_sync(gmask, x[c][k], s);
        x[c][k] = __fmaf_rn(x[c][k], sgn, other);
      }
    }
  }
#pragma unroll
  for (int s = 1; s < C; s <<= 1) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if ((c & s) == 0) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float u = x[c][k], v = x[c + s][k];
          x[c][k] = __fadd_rn(u, v);
          x[c + s][k] = __fsub_rn(u, v);
        }
      }
    }
  }

  // ---- scale, amax, row scale (steps 4..7) ----
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      x[c][k] = __fmul_rn(x[c][k], kHadamardScale);
      amax = fmaxf(amax, fabsf(x[c][k]));
    }
  }
#pragma unroll
  for (int s = 1; s < LANES; s <<= 1) amax = fmaxf(amax, __shfl_xor_sync(gmask, amax, s));
  const float scale = __fdiv_rn(fmaxf(kScaleFloor, amax), kFp8Max);
  const float inv = __fdiv_rn(1.0f, scale);

  // ---- quantize (steps 8, 9) and store ----
  std::uint8_t* orow = a.out + row * kHeadDim;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(x[c][k], inv);
    uint2 o;
    o.x = quantize4_e4m3(v[0], v[1], v[2], v[3]);
    o.y = quantize4_e4m3(v[4], v[5], v[6], v[7]);
    if (!valid) o = make_uint2(0u, 0u);
    *reinterpret_cast<uint2*>(orow + (c * LANES + l) * 8) = o;
  }
  // ---- step 10 ----
  if (l == 0)
    a.w_out[row] = valid ? __fmul_rn(__fmul_rn(w, a.w_scale), scale) : __uint_as_float(0x7fc00000u);
}

// Fallback for misaligned pointers: one thread per row, the scalar pipeline of row.h.
template <int DT, bool POS64>
__global__ void __launch_bounds__(128) scalar_kernel(Args a) {
  const std::uint64_t row = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  pdl_wait();
  if (row >= a.rows) {
    pdl_launch_dependents();
    return;
  }
  const std::uint64_t b = row / a.H, h = row - b * a.H;
  const std::int64_t p = load_pos<POS64>(a.pos, b);
  const bool valid = p >= 0 && p < a.max_pos;
  float x[kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) {
    if (DT == kBF16) x[i] = bf16_to_f32(static_cast<const std::uint16_t*>(a.q)[row * kHeadDim + i]);
    else if (DT == kF16) x[i] = f16_to_f32(static_cast<const std::uint16_t*>(a.q)[row * kHeadDim + i]);
    else x[i] = static_cast<const float*>(a.q)[row * kHeadDim + i];
  }
  float w;
  const std::uint64_t widx = b * std::uint64_t(a.w_stride) + h;
  if (DT == kBF16) w = bf16_to_f32(static_cast<const std::uint16_t*>(a.w)[widx]);
  else if (DT == kF16) w = f16_to_f32(static_cast<const std::uint16_t*>(a.w)[widx]);
  else w = static_cast<const float*>(a.w)[widx];
  float f[kFreqsDim];
  const float* frow = a.freqs + (valid ? p : 0) * kFreqsDim;
  for (int i = 0; i < kFreqsDim; ++i) f[i] = frow[i];
  pdl_launch_dependents();
  std::uint8_t* o = a.out + row * kHeadDim;
  if (!valid) {
    for (int i = 0; i < kHeadDim; ++i) o[i] = 0;
    a.w_out[row] = __uint_as_float(0x7fc00000u);
    return;
  }
  process_row(x, f, w, a.w_scale, o, a.w_out + row);
}

// ---- per-device facts, read once ----
struct DeviceInfo {
  int cc_major = 0;
  int sms = 0;
  bool ok = false;
};
constexpr int kMaxDevices = 64;
DeviceInfo g_info[kMaxDevices];

const DeviceInfo& device_info(int dev) {
  DeviceInfo& d = g_info[dev];
  if (!d.ok) {  // benign race: every thread writes the same values
    int major = 0, sms = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    d.cc_major = major;
    d.sms = sms;
    d.ok = true;
  }
  return d;
}

std::string cuda_err(const char* what, cudaError_t e) {
  return std::string("indexer_q: cuda backend: ") + what + ": " + cudaGetErrorName(e) + " (" +
         cudaGetErrorString(e) + ")";
}

// Pointer check: device memory of another device, or plain host memory, is refused.
Status check_ptr(const char* name, const void* ptr, int dev) {
  cudaPointerAttributes at{};
  const cudaError_t e = cudaPointerGetAttributes(&at, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    return Status::InvalidArgument(std::string("indexer_q: ") + name +
                                   ": not a pointer the CUDA runtime knows (" + cudaGetErrorString(e) + ")");
  }
  if (at.type == cudaMemoryTypeUnregistered)
    return Status::InvalidArgument(std::string("indexer_q: ") + name +
                                   ": is pageable host memory, expected memory of cuda:" + std::to_string(dev));
  if (at.type == cudaMemoryTypeDevice && at.device != dev)
    return Status::InvalidArgument(std::string("indexer_q: ") + name + ": lives on cuda:" +
                                   std::to_string(at.device) + ", expected cuda:" + std::to_string(dev) +
                                   " (the device of the tensors)");
  return Status::Ok();
}

template <typename K>
cudaError_t launch(K kernel, unsigned grid, unsigned block, cudaStream_t s, bool pdl, const Args& a) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, a);
}

template <int LANES, int DT>
cudaError_t launch_rowgroup(const Args& a, bool pos64, unsigned block, cudaStream_t s, bool pdl) {
  const std::uint64_t threads = a.rows * LANES;
  const std::uint64_t grid = (threads + block - 1) / block;
  if (pos64) return launch(rowgroup_kernel<LANES, DT, true>, unsigned(grid), block, s, pdl, a);
  return launch(rowgroup_kernel<LANES, DT, false>, unsigned(grid), block, s, pdl, a);
}

template <int DT>
cudaError_t launch_dt(const Args& a, bool pos64, int lanes, unsigned block, cudaStream_t s, bool pdl) {
  if (lanes == 0) {
    const std::uint64_t grid = (a.rows + 127) / 128;
    if (pos64) return launch(scalar_kernel<DT, true>, unsigned(grid), 128, s, pdl, a);
    return launch(scalar_kernel<DT, false>, unsigned(grid), 128, s, pdl, a);
  }
  if (lanes == 16) return launch_rowgroup<16, DT>(a, pos64, block, s, pdl);
  if (lanes == 8) return launch_rowgroup<8, DT>(a, pos64, block, s, pdl);
  return launch_rowgroup<4, DT>(a, pos64, block, s, pdl);
}

bool aligned(const void* p, std::uintptr_t n) { return (reinterpret_cast<std::uintptr_t>(p) % n) == 0; }

}  // namespace

bool cuda_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

Status cuda_run_variant(const Problem& p, void* stream, bool enable_pdl, int lanes, int block) {
  const int dev = p.device.index;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) return Status::Unavailable(cuda_err("cudaGetDeviceCount", e));
  if (dev < 0 || dev >= ndev || dev >= kMaxDevices)
    return Status::InvalidArgument("indexer_q: q_input: device cuda:" + std::to_string(dev) +
                                   " does not exist (" + std::to_string(ndev) + " devices)");
  const struct {
    const char* name;
    const void* ptr;
  } ptrs[] = {{"q_input", p.q_input}, {"q_fp8", p.q_fp8},     {"weight", p.weight},
              {"weights_out", p.weights_out}, {"freqs", p.freqs}, {"positions", p.positions}};
  for (const auto& x : ptrs) {
    Status s = check_ptr(x.name, x.ptr, dev);
    if (!s.ok()) return s;
  }
  if (p.rows() > (std::int64_t(1) << 40) || p.H > 0x7fffffff)
    return Status::InvalidArgument("indexer_q: q_input: too many rows for the CUDA backend");

  // Device guard: launch on the tensors' device, restore the caller's current device.
  int prev = 0;
  e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return Status::Internal(cuda_err("cudaGetDevice", e));
  if (prev != dev) {
    e = cudaSetDevice(dev);
    if (e != cudaSuccess) return Status::Internal(cuda_err("cudaSetDevice", e));
  }
  const DeviceInfo& info = device_info(dev);

  Args a{p.q_input, p.q_fp8, p.weight, p.weight_stride_b, p.weights_out, p.weight_scale,
         p.freqs, p.max_pos, p.positions, std::uint64_t(p.rows()), std::uint32_t(p.H)};
  const bool fast_ok = aligned(p.q_input, 16) && aligned(p.freqs, 16) && aligned(p.q_fp8, 8);
  if (!fast_ok) lanes = 0;
  if (lanes < 0) {  // automatic choice
    const std::int64_t rows = p.rows();
    // Small batches: more lanes per row, so more threads share the latency-bound work.
    lanes = rows <= 4 * std::int64_t(info.sms) ? 16 : (rows <= 64 * std::int64_t(info.sms) ? 8 : 4);
  }
  if (block <= 0) block = 256;
  const bool pdl = enable_pdl && info.cc_major >= 9;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool pos64 = p.pos_dtype == DType::kInt64;
  switch (p.dtype) {
    case DType::kBFloat16: e = launch_dt<kBF16>(a, pos64, lanes, unsigned(block), s, pdl); break;
    case DType::kFloat16: e = launch_dt<kF16>(a, pos64, lanes, unsigned(block), s, pdl); break;
    case DType::kFloat32: e = launch_dt<kF32>(a, pos64, lanes, unsigned(block), s, pdl); break;
    default: e = cudaErrorInvalidValue; break;
  }
  const cudaError_t last = cudaGetLastError();
  if (e == cudaSuccess) e = last;
  if (prev != dev) cudaSetDevice(prev);
  if (e != cudaSuccess) return Status::Internal(cuda_err("kernel launch failed", e));
  return Status::Ok();
}

Status cuda_run(const Problem& p, void* stream, bool enable_pdl) {
  return cuda_run_variant(p, stream, enable_pdl, -1, 0);
}

}  // namespace detail
}  // namespace indexer_q
