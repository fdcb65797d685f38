// Shared helpers of the GoogleTest suite: input encoders, random cases, the list of backends
// under test and a runner that moves a host case to any backend's device and back.
// Test-only code; independent of src/common/row.h on purpose (the tests check row.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <algorithm>
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

// Element i of a bf16 / fp16 / fp32 buffer, as a float (exact; an independent decoder).
inline float load_as(const std::vector<std::uint8_t>& buf, DType dt, std::size_t i) {
  if (dt == DType::kFloat32) {
    float v;
    std::memcpy(&v, buf.data() + 4 * i, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, buf.data() + 2 * i, 2);
  if (dt == DType::kBFloat16) return float_of(std::uint32_t(h) << 16);
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(double(m), -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return float((h & 0x8000) ? -mag : mag);
}

// One call of the op, as host bytes (inputs) plus the layout facts.
struct HostCase {
  RecipeId recipe = RecipeId::kV4Fp8;
  int q_out_dtype = -1;  // a DType, or -1: the recipe's own (fp8_e4m3fn / fp8_e4m3fnuz / uint8 for FP4)
  std::int64_t B = 0, H = 0, max_pos = 1;
  std::int64_t weight_stride = 0;  // elements between weight rows (>= H)
  DType dtype = DType::kBFloat16;
  int weight_dtype = -1;  // a DType, or -1: q_input's dtype
  DType pos_dtype = DType::kInt64;
  float weight_scale = 1.0f;       // vllm_* recipes: softmax_scale
  float head_scale = 1.0f;         // vllm_* recipes (the two-factor folds); ignored by the others
  bool weights_out_2d = false;     // weights_out passed as (B, H) (vLLM's shape) instead of (B, H, 1)
  std::vector<std::uint8_t> q_input;    // B*H*128 elements
  std::vector<std::uint8_t> weight;     // B*weight_stride elements (padding between rows)
  std::vector<float> freqs;             // max_pos*64
  std::vector<std::uint8_t> positions;  // B elements

  bool fp4() const { return indexer_q::recipe(recipe).format == OutFormat::kE2M1; }
  // 4 bytes per row in q_sf: FP4 block scales, or the FP8 row scale of a recipe with scale_out.
  bool sf() const { return recipe_writes_q_scale(indexer_q::recipe(recipe)); }
  DType wdtype() const { return weight_dtype >= 0 ? DType(weight_dtype) : dtype; }
  std::int64_t out_bytes_per_row() const { return fp4() ? 64 : 128; }
  DType out_dtype() const {
    if (q_out_dtype >= 0) return DType(q_out_dtype);
    const OutFormat f = indexer_q::recipe(recipe).format;
    return f == OutFormat::kE2M1 ? DType::kUInt8 : f == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3;
  }

  std::string describe() const {
    std::ostringstream os;
    os << "recipe=" << recipe_name(recipe) << " q_out=" << dtype_name(out_dtype()) << " B=" << B << " H=" << H << " dtype=" << dtype_name(dtype) << " weight=" << dtype_name(wdtype()) << " positions=" << dtype_name(pos_dtype)
       << " weight_stride=" << weight_stride << " weight_scale=" << weight_scale << " head_scale=" << head_scale
       << " weights_out=" << (weights_out_2d ? "(B,H)" : "(B,H,1)") << " max_pos=" << max_pos;
    return os.str();
  }
};

// The outputs of one call: q_out (fp8 codes, 128 bytes a row, or fp4 code pairs, 64 bytes a
// row), q_sf (FP4 recipes: 4 UE8M0 bytes a row, the int32 (B, H) tensor's bytes; else empty).
struct Outputs {
  std::vector<std::uint8_t> q_out;
  std::vector<std::uint8_t> q_sf;
  std::vector<float> weights_out;
};

// Real RoPE tables. Interleaved: freqs[p, 2j] = cos(p * theta_j), freqs[p, 2j+1] = sin(p * theta_j);
// halves (v32 / rope-first recipes): freqs[p, j] = cos, freqs[p, 32 + j] = sin.
inline std::vector<float> rope_freqs(std::int64_t max_pos, double base = 10000.0,
                                     FreqsLayout layout = FreqsLayout::kInterleaved) {
  std::vector<float> f(std::size_t(max_pos) * 64);
  const bool inter = layout == FreqsLayout::kInterleaved;
  for (std::int64_t p = 0; p < max_pos; ++p)
    for (int j = 0; j < 32; ++j) {
      const double theta = std::pow(base, -2.0 * j / 64.0);
      f[std::size_t(p) * 64 + (inter ? 2 * j : j)] = float(std::cos(double(p) * theta));
      f[std::size_t(p) * 64 + (inter ? 2 * j + 1 : 32 + j)] = float(std::sin(double(p) * theta));
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

// Allocates every buffer of a case (zero inputs, position 0, real freqs in the recipe's layout).
inline HostCase blank_case(std::int64_t B, std::int64_t H, DType dtype, DType pos_dtype,
                           std::int64_t weight_stride, std::int64_t max_pos,
                           RecipeId recipe_id = RecipeId::kV4Fp8) {
  HostCase c;
  c.recipe = recipe_id;
  c.B = B;
  c.H = H;
  c.dtype = dtype;
  c.pos_dtype = pos_dtype;
  c.weight_stride = weight_stride;
  c.max_pos = max_pos;
  c.q_input.assign(std::size_t(B * H * 128) * dtype_size(dtype), 0);
  c.weight.assign(std::size_t(B * weight_stride) * dtype_size(dtype), 0);
  c.freqs = rope_freqs(max_pos, 10000.0, indexer_q::recipe(recipe_id).freqs_layout);
  c.positions.assign(std::size_t(B) * dtype_size(pos_dtype), 0);
  return c;
}

// The float32 nearest 1/sqrt(128) (SPEC.md step 4), as the test writes it.
// The recipes no engine kernel could be run for (AMD gfx942 and vLLM's CuTe MXFP4 kernel, sm_100:
// no such GPU here; docs/RECIPES.md steps 14, 15 say what is assumed): no golden file holds them;
// they are checked against the reference and the independent model (the CuTe MXFP4 form also
// against the vllm_v4_mxfp4 files on finite rows), until files made on MI300 / sm_100 exist.
inline bool source_only(RecipeId r) {
  const std::string n = recipe_name(r);
  return n == "sglang_v4_fp8_gfx942" || n == "vllm_v4_fp8_fnuz224" || n == "vllm_v4_mxfp4_cute";
}

inline float hadamard_k() { return float_of(0x3db504f3u); }

// Random inputs that exercise rounding and the edge behaviours: normal values with per-row
// magnitudes spanning decades, a few outlier channels, and now and then a zero row, a tiny
// row, a row of small integers, a single spike, a row holding an Inf or a NaN, a row of
// subnormals of the input dtype, a huge row (near the dtype's largest finite value), an FP8
// rounding-tie row and an E2M1 threshold row (see below). Weights are random (some zero, some
// negative); the padding between weight rows holds NaN so that a backend reading it would show.
// Freqs are real tables in the recipe's layout, except every fifth row (arbitrary values: the
// op must not care).
//
// FP8 tie row: dims 0..63 zero (RoPE of zeros is zero in every layout), dims 64..127 hold
// +-(midpoint between two neighbouring e4m3 values) * 2^m and one +-448 * 2^m: without a
// Hadamard (v32_fp8) and RoPE on dims 0..63, scale = 2^m exactly and every value is a tie.
// E2M1 threshold row: dims 64..127 zero, x[0] = a, x[j] = b with (a +- b) * k = T1 * 2^m,
// T2 * 2^m (T1 in {3.5, 5, 6}, T2 an e2m1 threshold or value): with the Hadamard every output
// is (a + s b) k, so after the bf16 rounding point the block values sit exactly on the e2m1
// thresholds (fp32 inputs; bf16 / fp16 inputs land near them).
// bf16-tie rows (fp32 inputs only): values whose low 16 bits are 0x8000 (ties of the bf16
// rounding points of FP4 recipes; token 1 has position 0, where RoPE changes nothing).
inline HostCase random_case(std::int64_t B, std::int64_t H, DType dtype, DType pos_dtype,
                            std::int64_t weight_stride, std::uint64_t seed,
                            RecipeId recipe_id = RecipeId::kV4Fp8) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const std::int64_t max_pos = 1 + std::int64_t(rng() % 4096);
  HostCase c = blank_case(B, H, dtype, pos_dtype, weight_stride, max_pos, recipe_id);
  for (std::int64_t p = 3; p < max_pos; p += 5) {
    const float m = std::pow(10.0f, float(int(rng() % 5)) - 2.0f);
    for (int j = 0; j < 64; ++j) c.freqs[std::size_t(p * 64 + j)] = normal(rng) * m;
  }
  bool flip_weights = false;  // negative weights: the sign coverage of weights_out
  {
    std::uniform_real_distribution<float> ls(-2.0f, 1.0f);
    // The factors must be > 0 (the validator refuses 0 and negative ones); the sign drawn for
    // each (these cases once drew negative factors) negates the weights instead (below), so that
    // weights_out = w * weight_scale (* head_scale) meets the values and signs a negative factor
    // gave, -0 included (a zero weight becomes -0): RNE is symmetric, (-w) * a = -(w * a).
    c.weight_scale = std::pow(10.0f, ls(rng));
    flip_weights = (rng() & 1) != 0;
    // Two-factor folds (vllm_*): a head_scale != 1 too, so that a backend ignoring it (or
    // multiplying in another order) shows.
    const WeightFold fold = indexer_q::recipe(recipe_id).fold;
    if (fold == WeightFold::kScaleThenTwoFactors || fold == WeightFold::kTwoFactors) {
      c.head_scale = std::pow(10.0f, ls(rng));
      flip_weights ^= (rng() & 1) != 0;
    } else
      c.head_scale = 0.75f;  // the other folds ignore it: a backend that does not would show
  }
  const bool f16 = dtype == DType::kFloat16;
  // decades of row magnitude: fp16 has a narrow range (6e-8 .. 65504)
  const double lo_dec = f16 ? -4.0 : -7.0, hi_dec = f16 ? 2.0 : 4.0;
  int outlier[4];
  for (int& o : outlier) o = int(rng() % 128);
  const float tiny = f16 ? 3e-7f : 1e-30f;
  // smallest normal of the input dtype (subnormal rows lie below it); largest finite value
  const float min_normal = f16 ? 0x1p-14f : 0x1p-126f;
  const float huge = f16 ? 60000.0f : 3.0e38f;
  const double k = double(hadamard_k());
  static const double kE2m1[] = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0};
  static const double kTop[] = {3.5, 5.0, 6.0};
  std::vector<float> row(128);
  auto sgn = [&]() { return (rng() & 1) ? -1.0f : 1.0f; };
  for (std::int64_t r = 0; r < B * H; ++r) {
    const double kind = uni(rng);
    const float mag = float(std::pow(10.0, lo_dec + (hi_dec - lo_dec) * uni(rng)));
    if (kind < 0.60) {  // normal row with outlier channels
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * mag;
      for (int o : outlier) row[o] *= 30.0f;
    } else if (kind < 0.64) {  // zero row (signed zeros now and then)
      for (int i = 0; i < 128; ++i) row[i] = (rng() & 7) == 0 ? -0.0f : 0.0f;
    } else if (kind < 0.68) {  // tiny row: amax far below the 1e-4 floor
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * tiny;
    } else if (kind < 0.71) {  // small integers (exact Hadamard sums: ties happen)
      for (int i = 0; i < 128; ++i) row[i] = float(int(rng() % 17) - 8);
    } else if (kind < 0.74) {  // one spike
      for (int i = 0; i < 128; ++i) row[i] = 0.0f;
      row[rng() % 128] = normal(rng) * mag;
    } else if (kind < 0.77) {  // normal row with one +-Inf
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * mag;
      row[rng() % 128] = (rng() & 1) ? -INFINITY : INFINITY;
    } else if (kind < 0.80) {  // normal row with one NaN
      for (int i = 0; i < 128; ++i) row[i] = normal(rng) * mag;
      row[rng() % 128] = NAN;
    } else if (kind < 0.83) {  // subnormals of the input dtype (and a few zeros)
      for (int i = 0; i < 128; ++i) row[i] = float(uni(rng)) * min_normal * sgn();
    } else if (kind < 0.86) {  // huge values: the butterflies overflow to Inf (and Inf - Inf)
      for (int i = 0; i < 128; ++i) row[i] = float(0.5 + 0.5 * uni(rng)) * huge * sgn();
    } else if (kind < 0.91) {  // FP8 rounding ties (exact without the Hadamard)
      const int m = f16 ? int(rng() % 7) - 9 : int(rng() % 40) - 30;
      for (int i = 0; i < 64; ++i) row[i] = 0.0f;
      for (int i = 64; i < 128; ++i) {
        const int code = int(rng() % 126);  // midpoint between code and code + 1 (both finite)
        const double a = 0.5 * (e4m3_value(code) + e4m3_value(code + 1));
        row[i] = float(std::ldexp(a, m)) * sgn();
      }
      row[64 + rng() % 64] = float(std::ldexp(448.0, m)) * sgn();
    } else if (kind < 0.96) {  // E2M1 thresholds after the Hadamard and the bf16 rounding
      const int m = f16 ? int(rng() % 5) - 2 : int(rng() % 40) - 20;
      const double t1 = kTop[rng() % 3], t2 = kE2m1[rng() % 14] * sgn();
      const double a = 0.5 * (t1 + t2) / k, b = 0.5 * (t1 - t2) / k;
      for (int i = 0; i < 128; ++i) row[i] = 0.0f;
      const float s = sgn();
      row[0] = float(std::ldexp(a, m)) * s;
      row[1 + rng() % 63] = float(std::ldexp(b, m)) * s;
    } else {  // bf16 rounding ties (fp32), else a normal row
      for (int i = 0; i < 128; ++i) {
        row[i] = normal(rng) * mag;
        if (dtype == DType::kFloat32 && std::isfinite(row[i]))
          row[i] = float_of((bits_of(row[i]) & 0xffff0000u) | 0x8000u);
      }
    }
    for (int i = 0; i < 128; ++i) store_as(c.q_input, dtype, std::size_t(r * 128 + i), row[i]);
  }
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < weight_stride; ++h) {
      float w = normal(rng);
      if (h >= H) w = NAN;             // padding: never read
      else if (rng() % 20 == 0) w = 0.0f;
      if (flip_weights && h < H) w = -w;
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

// The views of one call (q_sf only for FP4 recipes; else an empty view).
inline OpArgs op_args(const HostCase& c, const void* q_input, void* q_out, void* q_sf, const void* weight,
                      void* weights_out, const void* freqs, const void* positions, Device dev = Device{}) {
  OpArgs a;
  a.recipe = c.recipe;
  a.q_input = TensorView::contiguous(q_input, c.dtype, {c.B, c.H, 128}, dev);
  a.q_out = TensorView::contiguous(q_out, c.out_dtype(), {c.B, c.H, c.out_bytes_per_row()}, dev);
  if (c.fp4()) a.q_scale = TensorView::contiguous(q_sf, DType::kInt32, {c.B, c.H}, dev);
  else if (c.sf()) a.q_scale = TensorView::contiguous(q_sf, DType::kFloat32, {c.B, c.H, 1}, dev);
  // A recipe without weights (without RoPE) takes empty views for them.
  const Recipe& r = indexer_q::recipe(c.recipe);
  if (recipe_has_weights(r)) {
    a.weight = TensorView::strided(weight, c.wdtype(), {c.B, c.H}, {c.weight_stride, 1}, dev);
    a.weights_out = c.weights_out_2d ? TensorView::contiguous(weights_out, DType::kFloat32, {c.B, c.H}, dev)
                                     : TensorView::contiguous(weights_out, DType::kFloat32, {c.B, c.H, 1}, dev);
  }
  a.weight_scale = c.weight_scale;
  a.head_scale = c.head_scale;
  if (recipe_has_rope(r)) {
    a.freqs = TensorView::contiguous(freqs, DType::kFloat32, {c.max_pos, 64}, dev);
    a.positions = TensorView::contiguous(positions, c.pos_dtype, {c.B}, dev);
  }
  return a;
}

// Fills a buffer with a poison byte; an empty buffer (B = 0: data() may be null) is left alone.
inline void poison_fill(void* p, std::uint8_t poison, std::size_t n) {
  if (n != 0 && p != nullptr) std::memset(p, poison, n);
}

// Runs one case on a backend (the case's recipe, through indexer_q::run); the outputs are
// filled with `poison` first (on the device for CUDA), so that any byte the backend does not
// write shows up as a difference.
inline Status run_case(const BackendUnderTest& be, const HostCase& c, Outputs* out,
                       std::uint8_t poison) {
  const std::int64_t rows = c.B * c.H;
  out->q_out.assign(std::size_t(rows * c.out_bytes_per_row()), poison);
  out->q_sf.assign(c.sf() ? std::size_t(rows * 4) : 0, poison);
  out->weights_out.assign(recipe_has_weights(indexer_q::recipe(c.recipe)) ? std::size_t(rows) : 0, 0.0f);
  poison_fill(out->weights_out.data(), poison, out->weights_out.size() * 4);
  if (!be.cuda) {
    return run(op_args(c, c.q_input.data(), out->q_out.data(), c.sf() ? out->q_sf.data() : nullptr,
                       c.weight.data(), out->weights_out.data(), c.freqs.data(), c.positions.data()),
               be.options);
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
  Buf dq, dout, dsf, dw, dwo, df, dp;
  const std::size_t nq = c.q_input.size(), nout = out->q_out.size(), nsf = out->q_sf.size(),
                    nwo = out->weights_out.size() * 4;
  if (!upload(dq, c.q_input.data(), nq) || !upload(dw, c.weight.data(), c.weight.size()) ||
      !upload(df, c.freqs.data(), c.freqs.size() * 4) ||
      !upload(dp, c.positions.data(), c.positions.size()) ||
      !upload(dout, out->q_out.data(), nout) || !upload(dsf, out->q_sf.data(), nsf) ||
      !upload(dwo, out->weights_out.data(), nwo))
    return Status::Internal("test: cudaMalloc/cudaMemcpy failed");
  const Device dev{DeviceType::kCUDA, 0};
  Status s = run(op_args(c, dq.p, dout.p, c.sf() ? dsf.p : nullptr, dw.p, dwo.p, df.p, dp.p, dev), be.options);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return Status::Internal(std::string("test: CUDA error: ") + cudaGetErrorString(e));
  if (!s.ok()) return s;
  if ((nout && cudaMemcpy(out->q_out.data(), dout.p, nout, cudaMemcpyDeviceToHost) != cudaSuccess) ||
      (nsf && cudaMemcpy(out->q_sf.data(), dsf.p, nsf, cudaMemcpyDeviceToHost) != cudaSuccess) ||
      (nwo && cudaMemcpy(out->weights_out.data(), dwo.p, nwo, cudaMemcpyDeviceToHost) != cudaSuccess))
    return Status::Internal("test: cudaMemcpy back failed");
  return s;
#else
  return Status::Unavailable("test: CUDA is not built");
#endif
}

// Bitwise comparison (NaN bits too) with a short report of the first differences.
struct Comparison {
  std::int64_t q_bytes = 0;   // q_out (fp8 codes or fp4 code pairs)
  std::int64_t sf_bytes = 0;  // q_sf (FP4 block scales)
  std::int64_t weights = 0;
  std::string first;  // the first few differences, readable
  bool exact() const { return q_bytes == 0 && sf_bytes == 0 && weights == 0; }
  std::string summary() const {
    return std::to_string(q_bytes) + " q_out bytes, " + std::to_string(sf_bytes) + " q_sf bytes and " +
           std::to_string(weights) + " weights_out differ;" + first;
  }
};

// Intermediates (the engines' diagnostic tensors, whose NaN bits vary): any NaN equals any NaN.
// Outputs (weights_out) compare bit for bit, NaN included (docs/RECIPES.md "NaN").
inline bool same_float(float a, float b) {
  return bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b));
}

// Row width of q_out is taken from `want` (q_out bytes / rows).
inline Comparison compare(const Outputs& got, const Outputs& want, std::int64_t H) {
  Comparison c;
  std::ostringstream os;
  int shown = 0;
  const std::size_t rows = want.weights_out.size();
  const std::size_t width = rows ? std::max<std::size_t>(1, want.q_out.size() / rows) : 128;
  auto bytes = [&](const std::vector<std::uint8_t>& g, const std::vector<std::uint8_t>& w, std::size_t row_bytes,
                   const char* name, std::int64_t* count) {
    const std::size_t n = std::min(g.size(), w.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (g[i] != w[i]) {
        ++*count;
        if (shown++ < 4) {
          const std::int64_t row = std::int64_t(i / row_bytes);
          os << " " << name << "[b=" << row / H << ",h=" << row % H << ",i=" << i % row_bytes << "] got 0x"
             << std::hex << int(g[i]) << " want 0x" << int(w[i]) << std::dec << ";";
        }
      }
    }
    *count += std::int64_t(std::max(g.size(), w.size()) - n);
  };
  bytes(got.q_out, want.q_out, width, "q_out", &c.q_bytes);
  bytes(got.q_sf, want.q_sf, 4, "q_sf(byte)", &c.sf_bytes);
  const std::size_t m = std::min(got.weights_out.size(), want.weights_out.size());
  for (std::size_t i = 0; i < m; ++i) {
    if (bits_of(got.weights_out[i]) != bits_of(want.weights_out[i])) {
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
