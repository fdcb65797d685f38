// Shared helpers of the GoogleTest suite: input encoders, random cases, the list of backends
// under test and a runner that moves a host case to any backend's device and back.
// Test-only code; independent of src/common/row.h on purpose (the tests check row.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "indexer_q/indexer_q.h"

#if defined(INDEXER_Q_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace iqtest {

using namespace indexer_q;

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float32 -> bf16, round to nearest even (NaN stays a quiet NaN with its sign).
inline std::uint16_t to_bf16(float f) {
  const std::uint32_t u = bits_of(f);
  if (std::isnan(f)) return std::uint16_t((u >> 16) | 0x40u);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// float32 -> IEEE half, round to nearest even, overflow to Inf. Computed in double.
inline std::uint16_t to_f16(float f) {
  const std::uint16_t sign = std::uint16_t((bits_of(f) >> 16) & 0x8000u);
  const double a = std::fabs(double(f));
  if (std::isnan(f)) return std::uint16_t(sign | 0x7e00u);
  if (a >= 65520.0) return std::uint16_t(sign | 0x7c00u);
  if (a < 0x1p-14) return std::uint16_t(sign | std::uint16_t(std::nearbyint(a * 0x1p24)));
  int e = 0;
  const double fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
  const std::uint32_t m = std::uint32_t(std::nearbyint((fr * 2.0 - 1.0) * 1024.0));
  return std::uint16_t(sign | ((std::uint32_t(e - 1 + 15) << 10) + m));  // a carry bumps the exponent
}

// An independent definition of float8_e4m3fn, by code: e = 0 -> m * 2^-9, else
// (1 + m/8) * 2^(e-7); bit 7 is the sign (0x7f / 0xff are NaN and not meant here).
inline double e4m3_value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}

// Stores v as element i of a buffer of dtype dt (bf16 / fp16 / fp32).
inline void store_as(std::vector<std::uint8_t>& buf, DType dt, std::size_t i, float v) {
  if (dt == DType::kFloat32) {
    std::memcpy(buf.data() + 4 * i, &v, 4);
  } else {
    const std::uint16_t h = dt == DType::kBFloat16 ? to_bf16(v) : to_f16(v);
    std::memcpy(buf.data() + 2 * i, &h, 2);
  }
}

// One call of the op, as host bytes (inputs) plus the layout facts.
struct HostCase {
  std::int64_t B = 0, H = 0, max_pos = 1;
  std::int64_t weight_stride = 0;  // elements between weight rows (>= H)
  DType dtype = DType::kBFloat16;
  DType pos_dtype = DType::kInt64;
  float weight_scale = 1.0f;
  std::vector<std::uint8_t> q_input;    // B*H*128 elements
  std::vector<std::uint8_t> weight;     // B*weight_stride elements (padding between rows)
  std::vector<float> freqs;             // max_pos*64
  std::vector<std::uint8_t> positions;  // B elements

  std::string describe() const {
    std::ostringstream os;
    os << "B=" << B << " H=" << H << " dtype=" << dtype_name(dtype) << " positions=" << dtype_name(pos_dtype)
       << " weight_stride=" << weight_stride << " weight_scale=" << weight_scale << " max_pos=" << max_pos;
    return os.str();
  }
};

struct Outputs {
  std::vector<std::uint8_t> q_fp8;
  std::vector<float> weights_out;
};

// Real RoPE tables: freqs[p, 2j] = cos(p * theta_j), freqs[p, 2j+1] = sin(p * theta_j).
inline std::vector<float> rope_freqs(std::int64_t max_pos, double base = 10000.0) {
  std::vector<float> f(std::size_t(max_pos) * 64);
  for (std::int64_t p = 0; p < max_pos; ++p)
    for (int j = 0; j < 32; ++j) {
      const double theta = std::pow(base, -2.0 * j / 64.0);
      f[std::size_t(p) * 64 + 2 * j] = float(std::cos(double(p) * theta));
      f[std::size_t(p) * 64 + 2 * j + 1] = float(std::sin(double(p) * theta));
    }
  return f;
}

inline void set_position(HostCase& c, std::int64_t b, std::int64_t p) {
  if (c.pos_dtype == DType::kInt32) {
    const std::int32_t v = std::int32_t(p);
    std::memcpy(c.positions.data() + 4 * b, &v, 4);
  } else {
    std::memcpy(c.positions.data() + 8 * b, &p, 8);
  }
}

// Allocates every buffer of a case (zero inputs, position 0, real freqs).
inline HostCase blank_case(std::int64_t B, std::int64_t H, DType dtype, DType pos_dtype,
                           std::int64_t weight_stride, std::int64_t max_pos) {
  HostCase c;
  c.B = B;
  c.H = H;
  c.dtype = dtype;
  c.pos_dtype = pos_dtype;
  c.weight_stride = weight_stride;
  c.max_pos = max_pos;
  c.q_input.assign(std::size_t(B * H * 128) * dtype_size(dtype), 0);
  c.weight.assign(std::size_t(B * weight_stride) * dtype_size(dtype), 0);
  c.freqs = rope_freqs(max_pos);
  c.positions.assign(std::size_t(B) * dtype_size(pos_dtype), 0);
  return c;
}

// Random inputs that exercise rounding and the edge behaviours: normal values with per-row
// magnitudes spanning decades, a few outlier channels, and now and then a zero row, a tiny
// row, a row of small integers, a single spike, a row holding an Inf or a NaN. Weights are
// random (some zero, some negative); the padding between weight rows holds NaN so that a
// backend reading it would show.
inline HostCase random_case(std::int64_t B, std::int64_t H, DType dtype, DType pos_dtype,
                            std::int64_t weight_stride, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const std::int64_t max_pos = 1 + std::int64_t(rng() % 4096);
  HostCase c = blank_case(B, H, dtype, pos_dtype, weight_stride, max_pos);
  // Every fifth table row holds arbitrary values instead of (cos, sin): the op must not care.
  for (std::int64_t p = 3; p < max_pos; p += 5) {
    const float m = std::pow(10.0f, float(int(rng() % 5)) - 2.0f);
    for (int j = 0; j < 64; ++j) c.freqs[std::size_t(p * 64 + j)] = normal(rng) * m;
  }
  {
    std::uniform_real_distribution<float> ls(-2.0f, 1.0f);
    c.weight_scale = std::pow(10.0f, ls(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  }
  const bool f16 = dtype == DType::kFloat16;
  // decades of row magnitude: fp16 has a narrow range (6e-8 .. 65504)
  const double lo_dec = f16 ? -4.0 : -7.0, hi_dec = f16 ? 2.0 : 4.0;
  int outlier[4];
  for (int& o : outlier) o = int(rng() % 128);
  const float tiny = f16 ? 3e-7f : 1e-30f;
  std::vector<float> row(128);
  for (std::int64_t r = 0; r < B * H; ++r) {
    const double kind = uni(rng);
    const float mag = float(std::pow(10.0, lo_dec + (hi_dec - lo_dec) * uni(rng)));
    if (kind < 0.76) {  // normal row with outlier channels
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * mag;
      for (int o : outlier) row[o] *= 30.0f;
    } else if (kind < 0.80) {  // zero row (signed zeros now and then)
      for (int i = 0; i < 128; ++i) row[i] = (rng() & 7) == 0 ? -0.0f : 0.0f;
    } else if (kind < 0.84) {  // tiny row: amax far below the 1e-4 floor
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * tiny;
    } else if (kind < 0.88) {  // small integers (exact Hadamard sums: ties happen)
      for (int i = 0; i < 128; ++i) row[i] = float(int(rng() % 17) - 8);
    } else if (kind < 0.92) {  // one spike
      for (int i = 0; i < 128; ++i) row[i] = 0.0f;
      row[rng() % 128] = normal(rng) * mag;
    } else if (kind < 0.96) {  // normal row with one +-Inf
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * mag;
      row[rng() % 128] = (rng() & 1) ? -INFINITY : INFINITY;
    } else {  // normal row with one NaN
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * mag;
      row[rng() % 128] = NAN;
    }
    for (int i = 0; i < 128; ++i) store_as(c.q_input, dtype, std::size_t(r * 128 + i), row[i]);
  }
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < weight_stride; ++h) {
      float w = normal(rng);
      if (h >= H) w = NAN;             // padding: never read
      else if (rng() % 20 == 0) w = 0.0f;
      store_as(c.weight, dtype, std::size_t(b * weight_stride + h), w);
    }
    std::int64_t p = std::int64_t(rng() % std::uint64_t(max_pos));
    if (b == 0) p = max_pos - 1;
    if (b == 1) p = 0;
    set_position(c, b, p);
  }
  return c;
}

// ---------------------------------------------------------------------------------------
// backends under test
// ---------------------------------------------------------------------------------------
struct BackendUnderTest {
  std::string name;
  Options options;
  bool cuda = false;
};

// reference, cpu for every supported ISA and each thread count, cuda when usable.
inline std::vector<BackendUnderTest> backends_under_test(std::vector<int> cpu_threads = {1, 2, 3}) {
  std::vector<BackendUnderTest> v;
  BackendUnderTest ref;
  ref.name = "reference";
  ref.options.backend = Backend::kReference;
  v.push_back(ref);
  for (CpuIsa isa : supported_cpu_isas()) {
    for (int t : cpu_threads) {
      BackendUnderTest b;
      b.name = std::string("cpu/") + cpu_isa_name(isa) + "/threads=" + std::to_string(t);
      b.options.backend = Backend::kCpu;
      b.options.cpu_isa = isa;
      b.options.num_threads = t;
      v.push_back(b);
    }
  }
  if (backend_available(Backend::kCuda)) {
    BackendUnderTest b;
    b.name = "cuda";
    b.options.backend = Backend::kCuda;
    b.cuda = true;
    v.push_back(b);
  }
  return v;
}

// Runs one case on a backend; the outputs are filled with `poison` first (on the device for CUDA),
// so that any byte the backend does not write shows up as a difference.
inline Status run_case(const BackendUnderTest& be, const HostCase& c, Outputs* out,
                       std::uint8_t poison) {
  const std::int64_t rows = c.B * c.H;
  out->q_fp8.assign(std::size_t(rows * 128), poison);
  out->weights_out.assign(std::size_t(rows), 0.0f);
  std::memset(out->weights_out.data(), poison, out->weights_out.size() * 4);
  if (!be.cuda) {
    return fused_q_indexer_rope_hadamard_quant(
        TensorView::contiguous(c.q_input.data(), c.dtype, {c.B, c.H, 128}),
        TensorView::contiguous(out->q_fp8.data(), DType::kFloat8E4M3, {c.B, c.H, 128}),
        TensorView::strided(c.weight.data(), c.dtype, {c.B, c.H}, {c.weight_stride, 1}),
        TensorView::contiguous(out->weights_out.data(), DType::kFloat32, {c.B, c.H, 1}),
        c.weight_scale, TensorView::contiguous(c.freqs.data(), DType::kFloat32, {c.max_pos, 64}),
        TensorView::contiguous(c.positions.data(), c.pos_dtype, {c.B}), be.options);
  }
#if defined(INDEXER_Q_WITH_CUDA)
  struct Buf {
    void* p = nullptr;
    ~Buf() {
      if (p) cudaFree(p);
    }
  };
  auto upload = [](Buf& b, const void* src, std::size_t n) -> bool {
    if (cudaMalloc(&b.p, n ? n : 16) != cudaSuccess) return false;
    return n == 0 || cudaMemcpy(b.p, src, n, cudaMemcpyHostToDevice) == cudaSuccess;
  };
  Buf dq, dfp8, dw, dwo, df, dp;
  const std::size_t nq = c.q_input.size(), nfp8 = out->q_fp8.size(), nwo = out->weights_out.size() * 4;
  if (!upload(dq, c.q_input.data(), nq) || !upload(dw, c.weight.data(), c.weight.size()) ||
      !upload(df, c.freqs.data(), c.freqs.size() * 4) ||
      !upload(dp, c.positions.data(), c.positions.size()) ||
      !upload(dfp8, out->q_fp8.data(), nfp8) || !upload(dwo, out->weights_out.data(), nwo))
    return Status::Internal("test: cudaMalloc/cudaMemcpy failed");
  const Device dev{DeviceType::kCUDA, 0};
  Status s = fused_q_indexer_rope_hadamard_quant(
      TensorView::contiguous(dq.p, c.dtype, {c.B, c.H, 128}, dev),
      TensorView::contiguous(dfp8.p, DType::kFloat8E4M3, {c.B, c.H, 128}, dev),
      TensorView::strided(dw.p, c.dtype, {c.B, c.H}, {c.weight_stride, 1}, dev),
      TensorView::contiguous(dwo.p, DType::kFloat32, {c.B, c.H, 1}, dev), c.weight_scale,
      TensorView::contiguous(df.p, DType::kFloat32, {c.max_pos, 64}, dev),
      TensorView::contiguous(dp.p, c.pos_dtype, {c.B}, dev), be.options);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return Status::Internal(std::string("test: CUDA error: ") + cudaGetErrorString(e));
  if (!s.ok()) return s;
  if ((nfp8 && cudaMemcpy(out->q_fp8.data(), dfp8.p, nfp8, cudaMemcpyDeviceToHost) != cudaSuccess) ||
      (nwo && cudaMemcpy(out->weights_out.data(), dwo.p, nwo, cudaMemcpyDeviceToHost) != cudaSuccess))
    return Status::Internal("test: cudaMemcpy back failed");
  return s;
#else
  return Status::Unavailable("test: CUDA is not built");
#endif
}

// Bitwise comparison (NaN equals NaN) with a short report of the first differences.
struct Comparison {
  std::int64_t fp8_bytes = 0;
  std::int64_t weights = 0;
  std::string first;  // the first few differences, readable
  bool exact() const { return fp8_bytes == 0 && weights == 0; }
};

inline bool same_float(float a, float b) {
  return bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b));
}

inline Comparison compare(const Outputs& got, const Outputs& want, std::int64_t H) {
  Comparison c;
  std::ostringstream os;
  int shown = 0;
  const std::size_t n = std::min(got.q_fp8.size(), want.q_fp8.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (got.q_fp8[i] != want.q_fp8[i]) {
      ++c.fp8_bytes;
      if (shown++ < 4) {
        const std::int64_t row = std::int64_t(i / 128);
        os << " q_fp8[b=" << row / H << ",h=" << row % H << ",i=" << i % 128 << "] got 0x" << std::hex
           << int(got.q_fp8[i]) << " want 0x" << int(want.q_fp8[i]) << std::dec << ";";
      }
    }
  }
  c.fp8_bytes += std::int64_t(std::max(got.q_fp8.size(), want.q_fp8.size()) - n);
  const std::size_t m = std::min(got.weights_out.size(), want.weights_out.size());
  for (std::size_t i = 0; i < m; ++i) {
    if (!same_float(got.weights_out[i], want.weights_out[i])) {
      ++c.weights;
      if (shown++ < 8) {
        os << " weights_out[b=" << std::int64_t(i) / H << ",h=" << std::int64_t(i) % H << "] got "
           << got.weights_out[i] << " (0x" << std::hex << bits_of(got.weights_out[i]) << ") want "
           << std::dec << want.weights_out[i] << " (0x" << std::hex << bits_of(want.weights_out[i])
           << ")" << std::dec << ";";
      }
    }
  }
  c.weights += std::int64_t(std::max(got.weights_out.size(), want.weights_out.size()) - m);
  c.first = os.str();
  return c;
}

}  // namespace iqtest
