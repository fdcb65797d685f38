// The CPU backend: every compiled-in and supported ISA variant, at several thread counts,
// byte-equal to the scalar reference on random inputs with NaN / Inf / zero / tiny / huge
// rows, for every input dtype and both position dtypes; the encoder swept over many float
// bit patterns; the INDEXER_Q_CPU_ISA override; the thread pool's behaviour.
// vLLM forms (Quantizer::kVllm): edge rows and head_scale on every ISA, and its FP8 / MXFP4
// encoders swept against row.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/row.h"
#include "cpu/cpu_internal.h"
#include "cpu/thread_pool.h"
#include "indexer_q/indexer_q.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;

using iqtest::to_f16;
inline std::uint32_t bits(float f) { return iqtest::bits_of(f); }
inline float from_bits(std::uint32_t u) { return iqtest::float_of(u); }

struct Case {
  std::int64_t B = 0, H = 0, max_pos = 0, wstride = 0;
  DType dt = DType::kBFloat16, pos_dt = DType::kInt64;
  float weight_scale = 1.0f;
  float head_scale = 1.0f;  // the two-factor folds' second factor (vllm_* recipes; others ignore it)
  std::vector<std::uint8_t> q, w, pos;
  std::vector<float> freqs;
};

void put(std::vector<std::uint8_t>& buf, DType dt, std::int64_t i, float v) {
  if (dt == DType::kFloat32) {
    std::memcpy(buf.data() + 4 * i, &v, 4);
  } else {
    const std::uint16_t h = dt == DType::kBFloat16 ? std::uint16_t(bits(v) >> 16) : to_f16(v);
    std::memcpy(buf.data() + 2 * i, &h, 2);
  }
}

// Weight (b, h) of case c, decoded to float.
float weight_of(const Case& c, std::int64_t b, std::int64_t h) {
  const std::int64_t i = b * c.wstride + h;
  if (c.dt == DType::kFloat32) {
    float w;
    std::memcpy(&w, c.w.data() + 4 * i, 4);
    return w;
  }
  std::uint16_t u;
  std::memcpy(&u, c.w.data() + 2 * i, 2);
  return c.dt == DType::kBFloat16 ? detail::bf16_to_f32(u) : detail::f16_to_f32(u);
}

// Rows of many kinds: ordinary values over many decades, zero, all-NaN, one NaN, +-Inf, tiny
// (near or below the 1e-4 scale floor, dtype subnormals), huge (near the dtype's maximum),
// a single spike, and raw random bit patterns.
Case make_case(std::int64_t B, std::int64_t H, DType dt, DType pos_dt, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  Case c;
  c.B = B;
  c.H = H;
  c.dt = dt;
  c.pos_dt = pos_dt;
  c.max_pos = 97;
  c.wstride = H + 3;
  c.weight_scale = 0.0883883f * (1.0f + 0.1f * uni(rng));
  c.head_scale = 0.1234567f + 0.01f * float(seed % 37);  // != 1, not a power of two (no rng draw)
  const std::size_t es = dtype_size(dt);
  c.q.assign(std::size_t(B * H * 128) * es, 0);
  c.w.assign(std::size_t((B > 0 ? (B - 1) * c.wstride + H : 0)) * es, 0);
  const float dt_max = dt == DType::kFloat16 ? 60000.0f : 1e30f;
  const float dt_tiny = dt == DType::kFloat16 ? 1e-7f : 1e-38f;
  for (std::int64_t r = 0; r < B * H; ++r) {
    const int kind = int(rng() % 14);
    const float mag = std::pow(10.0f, float(int(rng() % 17)) - 8.0f);
    for (int i = 0; i < 128; ++i) {
      float v = uni(rng) * (dt == DType::kFloat16 ? std::fmin(mag, 100.0f) : mag);
      switch (kind) {
        case 0: v = 0.0f; break;
        case 1: v = std::nanf(""); break;
        case 2: if (i == int(r % 128)) v = (r & 1) ? -std::nanf("") : std::nanf(""); break;
        case 3: if (i == 5) v = (r & 1) ? -INFINITY : INFINITY; break;
        case 4: v = uni(rng) * dt_tiny * 64.0f; break;
        case 5: v = uni(rng) * 3e-6f; break;
        case 6: v = uni(rng) * dt_max; break;
        case 7: v = (i == int(r % 128)) ? 300.0f * mag : 0.0f; break;
        case 8: {
          const std::uint32_t u = rng();
          v = dt == DType::kFloat32 ? from_bits(u) : from_bits(u << 16);
          break;
        }
        case 9: if (i % 2) v = -v; break;  // sign pattern
        case 10:  // two small-integer spikes: after the Hadamard few distinct magnitudes, ties likely
          v = (i == int(r % 64)) ? float(int(rng() % 13) + 1) : (i == int((r * 7 + 3) % 64)) ? -float(int(rng() % 13)) : 0.0f;
          break;
        case 11: {  // E2M1 grid points and thresholds, scaled by a power of two
          static const float g[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f};
          v = g[rng() % 15] * ((rng() & 1) ? -1.0f : 1.0f) * std::ldexp(1.0f, int(rng() % 9) - 4);
          break;
        }
        case 12: v = uni(rng) * 1e-39f * float(dt == DType::kFloat32); break;  // fp32 subnormals
        default: break;
      }
      if (dt == DType::kFloat16 && kind == 8) {
        const std::uint16_t h = std::uint16_t(rng());
        std::memcpy(c.q.data() + 2 * (r * 128 + i), &h, 2);
        continue;
      }
      put(c.q, dt, r * 128 + i, v);
    }
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      float v = uni(rng) * 4.0f;
      if ((b * H + h) % 23 == 0) v = 0.0f;
      put(c.w, dt, b * c.wstride + h, v);
    }
  c.freqs.resize(std::size_t(c.max_pos * 64));
  for (std::int64_t p = 0; p < c.max_pos; ++p)
    for (int j = 0; j < 32; ++j) {
      const double theta = double(p) * std::pow(10000.0, -double(j) / 32.0);
      c.freqs[p * 64 + 2 * j] = float(std::cos(theta));
      c.freqs[p * 64 + 2 * j + 1] = float(std::sin(theta));
    }
  c.pos.assign(std::size_t(B) * dtype_size(pos_dt), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t p = std::int64_t(rng() % std::uint32_t(c.max_pos));
    if (pos_dt == DType::kInt32) {
      const std::int32_t v = std::int32_t(p);
      std::memcpy(c.pos.data() + 4 * b, &v, 4);
    } else {
      std::memcpy(c.pos.data() + 8 * b, &p, 8);
    }
  }
  return c;
}

// One token, one head per special row (zero, NaN, tiny, Inf with weight 0, constant, -Inf, below
// the floor, huge, then the dtype's largest finite values), `rows` <= 10 of them: even dims hold
// the row's first value, odd dims its second.
Case special_rows_case(DType dt, int rows, std::uint32_t seed) {
  Case c = make_case(1, rows, dt, DType::kInt64, seed);
  const float big = dt == DType::kFloat16 ? 65504.0f : 3.3e38f;
  const float table[10][2] = {{0, 0}, {NAN, NAN}, {1e-7f, -1e-7f}, {INFINITY, 1.0f}, {1.0f, 1.0f},
                              {-INFINITY, -INFINITY}, {6e-5f, 0}, {1e4f, -1e4f}, {big, big}, {big, -big}};
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < 128; ++i) put(c.q, dt, r * 128 + i, table[r][i % 2]);
  put(c.w, dt, 3, 0.0f);  // the Inf row with weight 0 -> NaN weights_out
  return c;
}

struct Out {
  std::vector<std::uint8_t> q;
  std::vector<float> w;
};

Status run(const Case& c, const Options& opt, Out* out) {
  out->q.assign(std::size_t(c.B * c.H * 128), 0xAB);
  out->w.assign(std::size_t(c.B * c.H), -7.0f);
  const auto qv = TensorView::contiguous(c.q.data(), c.dt, {c.B, c.H, 128});
  const auto ov = TensorView::contiguous(out->q.data(), DType::kFloat8E4M3, {c.B, c.H, 128});
  const auto wv = TensorView::strided(c.w.data(), c.dt, {c.B, c.H}, {c.wstride, 1});
  const auto wov = TensorView::contiguous(out->w.data(), DType::kFloat32, {c.B, c.H, 1});
  const auto fv = TensorView::contiguous(c.freqs.data(), DType::kFloat32, {c.max_pos, 64});
  const auto pv = TensorView::contiguous(c.pos.data(), c.pos_dt, {c.B});
  return fused_q_indexer_rope_hadamard_quant(qv, ov, wv, wov, c.weight_scale, fv, pv, opt);
}

std::int64_t differing_bytes(const Out& a, const Out& b) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.q.size(); ++i) n += a.q[i] != b.q[i];
  for (std::size_t i = 0; i < a.w.size(); ++i) n += bits(a.w[i]) != bits(b.w[i]);
  return n;
}

Out reference(const Case& c) {
  Options opt;
  opt.backend = Backend::kReference;
  Out o;
  const Status s = run(c, opt, &o);
  EXPECT_TRUE(s.ok()) << s.message();
  return o;
}

// Restores the inline threshold when a test ends.
struct ThresholdGuard {
  std::int64_t saved = detail::cpu::inline_row_threshold();
  explicit ThresholdGuard(std::int64_t rows) { detail::cpu::set_inline_row_threshold(rows); }
  ~ThresholdGuard() { detail::cpu::set_inline_row_threshold(saved); }
};

Options cpu_options(CpuIsa isa, int threads) {
  Options opt;
  opt.backend = Backend::kCpu;
  opt.cpu_isa = isa;
  opt.num_threads = threads;
  return opt;
}

// The encoder of every supported ISA (encoder_for(isa): n values, n a multiple of 16) on vals
// with inv, code for code against want_of(value); `what` names the setting in failure messages.
template <class WantOf>
void expect_encoder_matches(detail::cpu::QuantizeFn (*encoder_for)(CpuIsa), const std::vector<float>& vals,
                            float inv, WantOf want_of, const std::string& what) {
  std::vector<std::uint8_t> want(vals.size()), got(vals.size());
  for (std::size_t i = 0; i < vals.size(); ++i) want[i] = want_of(vals[i]);
  for (CpuIsa isa : supported_cpu_isas()) {
    std::fill(got.begin(), got.end(), 0xAB);
    encoder_for(isa)(vals.data(), inv, got.data(), std::int64_t(vals.size()));
    std::int64_t bad = 0;
    std::size_t first = 0;
    for (std::size_t i = 0; i < vals.size(); ++i)
      if (got[i] != want[i] && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0) << cpu_isa_name(isa) << " " << what << " first value bits 0x" << std::hex << bits(vals[first])
                      << " got 0x" << int(got[first]) << " want 0x" << int(want[first]);
  }
}

TEST(CpuIsa, ListIsConsistent) {
  const std::vector<CpuIsa> isas = supported_cpu_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), CpuIsa::kScalar);
  for (std::size_t i = 1; i < isas.size(); ++i) EXPECT_LT(int(isas[i - 1]), int(isas[i]));
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    bool listed = false;
    for (CpuIsa i : isas) listed = listed || i == isa;
    EXPECT_EQ(cpu_isa_supported(isa), listed) << cpu_isa_name(isa);
    if (listed) {
      EXPECT_NE(detail::cpu::kernel_for(isa), nullptr);
      EXPECT_NE(detail::cpu::quantize_for(isa), nullptr);
    }
  }
  CpuIsa active = CpuIsa::kAuto;
  const char* env = std::getenv("INDEXER_Q_CPU_ISA");
  const Status s = active_cpu_isa(&active);
  if (env == nullptr || env[0] == '\0') {
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(active, isas.back());
  } else if (s.ok()) {
    EXPECT_EQ(std::string(cpu_isa_name(active)) == env || std::string(env) == "auto", true);
  }
  std::string names;
  for (CpuIsa i : isas) names += std::string(" ") + cpu_isa_name(i);
  const auto& f = detail::cpu::cpu_features();
  std::printf("supported CPU ISAs:%s (cpuid avx2=%d fma=%d f16c=%d os_avx=%d avx512f=%d bw=%d vl=%d dq=%d os_avx512=%d)\n",
              names.c_str(), f.avx2, f.fma, f.f16c, f.os_avx, f.avx512f, f.avx512bw, f.avx512vl,
              f.avx512dq, f.os_avx512);
}

TEST(CpuIsa, EnvValueParsing) {
  const CpuIsa best = supported_cpu_isas().back();
  CpuIsa out = CpuIsa::kAuto;
  ASSERT_TRUE(detail::cpu::isa_from_env_value(nullptr, &out).ok());
  EXPECT_EQ(out, best);
  out = CpuIsa::kAuto;
  ASSERT_TRUE(detail::cpu::isa_from_env_value("", &out).ok());
  EXPECT_EQ(out, best);
  out = CpuIsa::kAuto;
  ASSERT_TRUE(detail::cpu::isa_from_env_value("auto", &out).ok());
  EXPECT_EQ(out, best);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    out = CpuIsa::kAuto;
    const Status s = detail::cpu::isa_from_env_value(cpu_isa_name(isa), &out);
    if (cpu_isa_supported(isa)) {
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(out, isa);
    } else {
      EXPECT_EQ(s.code(), StatusCode::kUnavailable);
      EXPECT_NE(s.message().find("INDEXER_Q_CPU_ISA"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(cpu_isa_name(isa)), std::string::npos) << s.message();
      EXPECT_EQ(out, CpuIsa::kAuto);  // untouched
    }
  }
  for (const char* bad : {"avx3", "AVX2", "sse", " scalar", "avx512 "}) {
    out = CpuIsa::kAuto;
    const Status s = detail::cpu::isa_from_env_value(bad, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("INDEXER_Q_CPU_ISA"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string("'") + bad + "'"), std::string::npos) << s.message();
    EXPECT_EQ(out, CpuIsa::kAuto);
  }
}

// The real environment variable, read once per process: checked in a fresh child process.
void child_with_env(const char* value) {
  setenv("INDEXER_Q_CPU_ISA", value, 1);
  CpuIsa isa = CpuIsa::kAuto;
  const Status s = active_cpu_isa(&isa);
  Case c = make_case(2, 4, DType::kBFloat16, DType::kInt64, 3);
  Out o;
  const Status r = run(c, Options{}, &o);  // backend auto -> cpu, isa auto -> active_cpu_isa
  if (s.ok()) {
    if (!r.ok()) std::exit(10);
    std::exit(20 + int(isa));
  }
  if (r.ok() || r.message() != s.message()) std::exit(11);
  if (o.q[0] != 0xAB) std::exit(12);  // nothing written
  if (s.message().find("INDEXER_Q_CPU_ISA") == std::string::npos) std::exit(13);
  if (s.message().find(value) == std::string::npos) std::exit(14);
  std::exit(s.code() == StatusCode::kInvalidArgument ? 3 : 4);
}

TEST(CpuIsaDeathTest, EnvironmentOverride) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child_with_env("bogus"), ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(child_with_env("scalar"), ::testing::ExitedWithCode(20), "");
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa))
      EXPECT_EXIT(child_with_env(cpu_isa_name(isa)), ::testing::ExitedWithCode(20 + int(isa)), "");
    else
      EXPECT_EXIT(child_with_env(cpu_isa_name(isa)), ::testing::ExitedWithCode(4), "");
  }
}

struct Combo {
  DType dt;
  DType pos;
};

TEST(CpuIsa, BitExactWithReferenceAllIsasAndThreads) {
  ThresholdGuard guard(0);  // let even small cases use the pool
  const Combo combos[] = {{DType::kBFloat16, DType::kInt64}, {DType::kBFloat16, DType::kInt32},
                          {DType::kFloat16, DType::kInt64}, {DType::kFloat16, DType::kInt32},
                          {DType::kFloat32, DType::kInt64}, {DType::kFloat32, DType::kInt32}};
  const std::int64_t shapes[][2] = {{1, 1}, {3, 5}, {37, 16}, {11, 64}, {9, 7}};
  std::uint32_t seed = 1;
  for (const Combo& cb : combos) {
    for (const auto& sh : shapes) {
      const Case c = make_case(sh[0], sh[1], cb.dt, cb.pos, seed++);
      const Out ref = reference(c);
      for (CpuIsa isa : supported_cpu_isas()) {
        for (int threads : {1, 2, 3, 7}) {
          Out o;
          const Status s = run(c, cpu_options(isa, threads), &o);
          ASSERT_TRUE(s.ok()) << s.message();
          EXPECT_EQ(differing_bytes(o, ref), 0)
              << cpu_isa_name(isa) << " threads=" << threads << " dtype=" << dtype_name(cb.dt)
              << " pos=" << dtype_name(cb.pos) << " B=" << sh[0] << " H=" << sh[1];
        }
      }
    }
  }
}

TEST(CpuIsa, SpecialRowsExact) {
  // Rows from SPEC.md's consequences: all zero, all NaN, amax below the floor, an Inf with a
  // zero weight, all equal, alternating +-448-ish spikes.
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const Case c = special_rows_case(dt, 8, 99);
    const Out ref = reference(c);
    for (CpuIsa isa : supported_cpu_isas()) {
      Out o;
      ASSERT_TRUE(run(c, cpu_options(isa, 1), &o).ok());
      EXPECT_EQ(differing_bytes(o, ref), 0) << cpu_isa_name(isa) << " " << dtype_name(dt);
      // The zero row and the all-NaN row get the floor scale 1e-4 / 448.
      const float floor_scale = 1e-4f / 448.0f;
      for (int r = 0; r < 2; ++r)
        EXPECT_EQ(bits(o.w[r]), bits((weight_of(c, 0, r) * c.weight_scale) * floor_scale)) << "row " << r;
    }
  }
}

TEST(CpuIsa, EncoderSweepMatchesRowH) {
  // Steps 8..9 of every variant against row.h's quantize_value: a strided sweep of all 2^32
  // float bit patterns, plus every e4m3 rounding midpoint and its neighbours, for several inv.
  std::vector<float> vals;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) vals.push_back(from_bits(std::uint32_t(u)));
  for (int code = 0; code < 127; ++code) {
    const float lo = detail::e4m3fn_decode(std::uint8_t(code));
    const float hi = detail::e4m3fn_decode(std::uint8_t(code + 1));
    const float mid = (lo + hi) * 0.5f;  // exact: e4m3 values have few mantissa bits
    for (int d = -3; d <= 3; ++d) {
      const float v = from_bits(std::uint32_t(std::int64_t(bits(mid)) + d));
      vals.push_back(v);
      vals.push_back(-v);
    }
    vals.push_back(lo);
    vals.push_back(-lo);
  }
  for (float v : {0.0f, -0.0f, 448.0f, -448.0f, 464.0f, -464.0f, 1e30f, -1e30f, INFINITY, -INFINITY,
                  NAN, -NAN, 1e-45f, -1e-45f, 0x1p-10f, -0x1p-10f})
    vals.push_back(v);
  while (vals.size() % 16) vals.push_back(0.0f);
  const float invs[] = {1.0f, 0.5f, 3.1f, 1.0f / 0.37f, 0.0f, INFINITY};
  for (float inv : invs)
    expect_encoder_matches(
        detail::cpu::quantize_for, vals, inv, [inv](float v) { return detail::quantize_value(v, inv); },
        "inv=" + testing::PrintToString(inv));
}

TEST(CpuIsa, Avx512FastFp8EncoderMatchesRowH) {
  // The AVX-512 kernel's encoder of NaN- and Inf-free rows (signed fma rounding, no clamp) against
  // row.h's quantize_value on its domain, finite values of magnitude below 464: a strided sweep of
  // those bit patterns (both signs), all of [256, 464) (the top binade, where a clamp would act),
  // all float32 subnormals' neighbourhood of 0, and every e4m3 rounding midpoint with neighbours.
  const detail::cpu::QuantizeFn fast = detail::cpu::fp8_fast_encoder_avx512();
  if (fast == nullptr || !cpu_isa_supported(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 variant here";
  const std::uint32_t top = bits(464.0f);
  std::vector<float> vals;
  auto both = [&vals](std::uint32_t u) {
    vals.push_back(from_bits(u));
    vals.push_back(from_bits(u | 0x80000000u));
  };
  for (std::uint32_t u = 0; u < top; u += 997) both(u);
  for (std::uint32_t u = bits(256.0f); u < top; ++u) both(u);
  for (std::uint32_t u = 0; u < 0x00100000u; ++u) both(u);
  for (int code = 0; code < 126; ++code) {
    const float mid = (detail::e4m3fn_decode(std::uint8_t(code)) + detail::e4m3fn_decode(std::uint8_t(code + 1))) * 0.5f;
    for (int d = -3; d <= 3; ++d) both(std::uint32_t(std::int64_t(bits(mid)) + d));
  }
  while (vals.size() % 32) vals.push_back(0.0f);
  std::vector<std::uint8_t> got(vals.size(), 0xAB);
  fast(vals.data(), 1.0f, got.data(), std::int64_t(vals.size()));
  std::int64_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < vals.size(); ++i)
    if (got[i] != detail::quantize_value(vals[i], 1.0f) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0) << "first value bits 0x" << std::hex << bits(vals[first]) << " got 0x" << int(got[first])
                    << " want 0x" << int(detail::quantize_value(vals[first], 1.0f));
  // The same values times a few inv (products still below 464 in magnitude).
  for (float inv : {0.5f, 0.37f, 0x1p-20f}) {
    std::fill(got.begin(), got.end(), 0xAB);
    fast(vals.data(), inv, got.data(), std::int64_t(vals.size()));
    bad = 0;
    for (std::size_t i = 0; i < vals.size(); ++i)
      if (got[i] != detail::quantize_value(vals[i], inv) && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0) << "inv=" << inv << " first value bits 0x" << std::hex << bits(vals[first]);
  }
}

// ---- every recipe ----

struct RecipeOut {
  std::vector<std::uint8_t> q, sf;
  std::vector<float> w;
};

Status run_recipe(const Case& c, RecipeId rid, const Options& opt, RecipeOut* out) {
  const Recipe& rc = recipe(rid);
  const bool fp4 = rc.format == OutFormat::kE2M1;
  const std::int64_t od = fp4 ? 64 : 128;
  const std::size_t rows = std::size_t(c.B * c.H);
  out->q.assign(std::max<std::size_t>(rows * std::size_t(od), 1), 0xAB);
  out->sf.assign(std::max<std::size_t>(rows * 4, 4), 0xCD);
  out->w.assign(std::max<std::size_t>(rows, 1), -7.0f);
  OpArgs a;
  a.recipe = rid;
  a.q_input = TensorView::contiguous(c.q.empty() ? nullptr : c.q.data(), c.dt, {c.B, c.H, 128});
  const DType qdt = fp4 ? DType::kUInt8
                        : rc.format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3;
  a.q_out = TensorView::contiguous(out->q.data(), qdt, {c.B, c.H, od});
  if (fp4) a.q_scale = TensorView::contiguous(out->sf.data(), DType::kInt32, {c.B, c.H});
  else if (rc.scale_out) a.q_scale = TensorView::contiguous(out->sf.data(), DType::kFloat32, {c.B, c.H});
  a.weight = TensorView::strided(c.w.empty() ? nullptr : c.w.data(), c.dt, {c.B, c.H}, {c.wstride, 1});
  a.weights_out = TensorView::contiguous(out->w.data(), DType::kFloat32, {c.B, c.H, 1});
  a.weight_scale = c.weight_scale;
  a.head_scale = c.head_scale;
  a.freqs = TensorView::contiguous(c.freqs.data(), DType::kFloat32, {c.max_pos, 64});
  a.positions = TensorView::contiguous(c.pos.empty() ? nullptr : c.pos.data(), c.pos_dt, {c.B});
  // A recipe without RoPE takes no freqs and no positions, one without weights no weight and no
  // weights_out (empty views; weights_out keeps its fill, compared as such).
  if (rc.rope_dims == RopeDims::kNoRope) a.freqs = a.positions = TensorView{};
  if (rc.fold == WeightFold::kNoWeights) a.weight = a.weights_out = TensorView{};
  return indexer_q::run(a, opt);
}

// Differing bytes of codes, sf bytes and weights_out bits; `where` names the first.
std::int64_t recipe_diff(const RecipeOut& a, const RecipeOut& b, std::string* where) {
  std::int64_t n = 0;
  auto note = [&](const char* what, std::size_t i) {
    if (n++ == 0) *where = std::string(what) + "[" + std::to_string(i) + "]";
  };
  for (std::size_t i = 0; i < a.q.size(); ++i)
    if (a.q[i] != b.q[i]) note("q", i);
  for (std::size_t i = 0; i < a.sf.size(); ++i)
    if (a.sf[i] != b.sf[i]) note("sf", i);
  for (std::size_t i = 0; i < a.w.size(); ++i)
    if (bits(a.w[i]) != bits(b.w[i])) note("weights_out", i);
  return n;
}

// Recipe rid of case c on the reference backend.
void run_recipe_reference(const Case& c, RecipeId rid, RecipeOut* ref) {
  Options ro;
  ro.backend = Backend::kReference;
  const Status s = run_recipe(c, rid, ro, ref);
  ASSERT_TRUE(s.ok()) << s.message();
}

// Recipe rid of case c on the CPU backend, every supported ISA at each thread count, byte for
// byte against ref; `what` is added to failure messages; *checked (if given) counts the comparisons.
void expect_every_isa_matches(const Case& c, RecipeId rid, const RecipeOut& ref, std::initializer_list<int> threads,
                              const std::string& what = "", int* checked = nullptr) {
  for (CpuIsa isa : supported_cpu_isas()) {
    for (int t : threads) {
      RecipeOut o;
      const Status s = run_recipe(c, rid, cpu_options(isa, t), &o);
      ASSERT_TRUE(s.ok()) << s.message();
      std::string where;
      EXPECT_EQ(recipe_diff(o, ref, &where), 0)
          << recipe_name(rid) << " " << cpu_isa_name(isa) << " threads=" << t << " dtype=" << dtype_name(c.dt)
          << " pos=" << dtype_name(c.pos_dt) << " B=" << c.B << " H=" << c.H << what << " first difference " << where;
      if (checked != nullptr) ++*checked;
    }
  }
}

// Every recipe x every supported ISA x bf16/fp16/fp32 x int32/int64 x B in {0, 1, 7, 333} x
// H in {1, 8, 64, 128}, byte for byte against the reference, at 1 and several threads. The
// grid is sampled: per recipe every (B, H) pair runs once, with the dtype and position dtype
// cycling, so every value of every axis meets every recipe and ISA.
TEST(CpuIsaRecipes, EveryRecipeBitExactWithReference) {
  ThresholdGuard guard(0);  // let even small cases use the pool
  const DType dts[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
  const DType pds[] = {DType::kInt32, DType::kInt64};
  const std::int64_t Bs[] = {0, 1, 7, 333};
  const std::int64_t Hs[] = {1, 8, 64, 128};
  std::uint32_t seed = 1000;
  int checked = 0;
  for (RecipeId rid : all_recipes()) {
    int i = 0;
    for (std::int64_t B : Bs)
      for (std::int64_t H : Hs) {
        if (B * H > 333 * 64 && (i % 2)) {  // keep runtime modest: the largest shapes every other recipe
          ++i;
          continue;
        }
        const int combo = (i + int(rid)) % 6;
        const DType dt = dts[combo % 3], pd = pds[combo / 3];
        ++i;
        const Case c = make_case(B, H, dt, pd, seed++);
        RecipeOut ref;
        ASSERT_NO_FATAL_FAILURE(run_recipe_reference(c, rid, &ref));
        ASSERT_NO_FATAL_FAILURE(expect_every_isa_matches(c, rid, ref, {1, 3}, "", &checked));
      }
  }
  std::printf("recipe x isa x threads cases checked: %d\n", checked);
}

// Rows with every dtype and several thread counts for each recipe on a mid-size case.
TEST(CpuIsaRecipes, EveryRecipeEveryDtypeAndThreads) {
  ThresholdGuard guard(0);
  std::uint32_t seed = 5000;
  for (RecipeId rid : all_recipes())
    for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
      for (DType pd : {DType::kInt32, DType::kInt64}) {
        const Case c = make_case(9, 13, dt, pd, seed++);  // odd H: single-row tails per token
        RecipeOut ref;
        ASSERT_NO_FATAL_FAILURE(run_recipe_reference(c, rid, &ref));
        ASSERT_NO_FATAL_FAILURE(expect_every_isa_matches(c, rid, ref, {1, 2, 7}));
      }
}

// The special rows of SpecialRowsExact for every recipe (zero, NaN, tiny, Inf with weight 0,
// constant, -Inf, below the floor, huge), plus a row of the largest finite values.
TEST(CpuIsaRecipes, SpecialRowsEveryRecipe) {
  for (RecipeId rid : all_recipes())
    for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      const Case c = special_rows_case(dt, 10, 77);
      RecipeOut ref;
      ASSERT_NO_FATAL_FAILURE(run_recipe_reference(c, rid, &ref));
      ASSERT_NO_FATAL_FAILURE(expect_every_isa_matches(c, rid, ref, {1}));
    }
}

TEST(CpuIsaRecipes, Fp4EncoderSweepMatchesRowH) {
  // The kernels' E2M1 encoder against row.h's e2m1_encode, on the values it can meet: bf16
  // values (every bf16 bit pattern) times power-of-two inverses, the thresholds and grid points
  // with their bf16 neighbours, zeros, infinities and NaNs.
  std::vector<float> vals;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) vals.push_back(from_bits(h << 16));
  for (float t : {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f})
    for (int d = -3; d <= 3; ++d)
      for (float sg : {1.0f, -1.0f}) vals.push_back(sg * from_bits(std::uint32_t(std::int64_t(bits(t)) + d * 0x10000)));
  while (vals.size() % 16) vals.push_back(0.0f);
  for (int e : {1, 100, 113, 120, 127, 130, 140, 200, 254, 255}) {
    const float inv = detail::ue8m0_inverse(std::uint8_t(e));
    expect_encoder_matches(
        detail::cpu::encode_fp4_for, vals, inv, [inv](float v) { return detail::e2m1_encode(v * inv); },
        "e=" + std::to_string(e));
  }
}

// SGLang V4.1's FP4 steps (Quantizer::kFp4Rne, kFp4TwoStage) by every ISA's kernel code against
// row.h, on every float32 input of each step: the packer's E2M1 code of every float v
// (e2m1_encode_rne), stage 1's value of every float x at inv1 = sc = 1 (stage1_value: the same
// bits, but a zero may have either sign and a NaN any payload: neither matters downstream), and the
// packer's UE8M0 byte and inverse of every float amax (rne_ue8m0_of_amax, rne_inverse: a negative
// amax is floored like a small one). The chunks of the 2^32 bit patterns are shared among threads.
// Every chunk with INDEXER_Q_FULL_SWEEP=1 (about 9 CPU-minutes; the device scripts set it), else
// every 61st chunk (70,000 chunks would take the sanitizer builds of CI past their limits): 2^26
// bit patterns spread over every exponent. Then both steps at the scales the kernels meet, on
// every bf16 value and a strided float sweep.
TEST(CpuIsaRecipes, V41Fp4StepsEveryFloatMatchRowH) {
  const std::vector<CpuIsa> isas = supported_cpu_isas();
  constexpr std::int64_t kChunk = 1 << 16;
  constexpr std::uint64_t kChunks = (1ull << 32) / kChunk;
  const char* full = std::getenv("INDEXER_Q_FULL_SWEEP");
  const std::uint64_t kStep = full && std::string(full) == "1" ? 1 : 61;
  auto stage1_same = [](float g, float w) {
    return bits(g) == bits(w) || (g == 0.0f && w == 0.0f) || (g != g && w != w);
  };
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::int64_t> bad_code{0}, bad_stage1{0}, bad_e{0};
  std::atomic<std::uint32_t> first_code{0}, first_stage1{0}, first_e{0};
  auto work = [&] {
    std::vector<float> x(kChunk), gf(kChunk), wf(kChunk), ginv(kChunk), winv(kChunk);
    std::vector<std::uint8_t> g(kChunk), w(kChunk), ge(kChunk), we(kChunk);
    for (std::uint64_t ch = kStep * next++; ch < kChunks; ch = kStep * next++) {
      const std::uint64_t base = ch * kChunk;
      for (std::int64_t i = 0; i < kChunk; ++i) {
        x[i] = from_bits(std::uint32_t(base + i));
        w[i] = detail::e2m1_encode_rne(x[i]);
        wf[i] = detail::stage1_value(x[i], 1.0f, 1.0f);
        const std::uint32_t e = detail::rne_ue8m0_of_amax(x[i]);
        we[i] = std::uint8_t(e);
        winv[i] = detail::rne_inverse(e);
      }
      for (CpuIsa isa : isas) {
        detail::cpu::encode_rne_fp4_for(isa)(x.data(), 1.0f, g.data(), kChunk);
        detail::cpu::stage1_fp4_for(isa)(x.data(), 1.0f, 1.0f, gf.data(), kChunk);
        detail::cpu::rne_ue8m0_for(isa)(x.data(), ge.data(), ginv.data(), kChunk);
        for (std::int64_t i = 0; i < kChunk; ++i) {
          if (g[i] != w[i] && bad_code++ == 0) first_code = bits(x[i]);
          if (!stage1_same(gf[i], wf[i]) && bad_stage1++ == 0) first_stage1 = bits(x[i]);
          if ((ge[i] != we[i] || bits(ginv[i]) != bits(winv[i])) && bad_e++ == 0) first_e = bits(x[i]);
        }
      }
    }
  };
  const unsigned n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> team;
  for (unsigned t = 0; t < n_threads; ++t) team.emplace_back(work);
  for (std::thread& t : team) t.join();
  EXPECT_EQ(bad_code.load(), 0) << "e2m1_encode_rne, first x bits 0x" << std::hex << first_code.load();
  EXPECT_EQ(bad_stage1.load(), 0) << "stage1_value, first x bits 0x" << std::hex << first_stage1.load();
  EXPECT_EQ(bad_e.load(), 0) << "rne_ue8m0_of_amax, first amax bits 0x" << std::hex << first_e.load();

  std::vector<float> vals;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) vals.push_back(from_bits(h << 16));
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) vals.push_back(from_bits(std::uint32_t(u)));
  while (vals.size() % 16) vals.push_back(0.0f);
  // The packer's inverses (rne_inverse: 2^(127 - e), the subnormal 2^-127 at 254; stage 2's
  // ue8m0_inverse: 0 at 254) times every value.
  for (int e : {1, 100, 114, 127, 140, 200, 253, 254}) {
    for (float inv : {detail::rne_inverse(std::uint32_t(e)), detail::ue8m0_inverse(std::uint8_t(e))})
      expect_encoder_matches(
          detail::cpu::encode_rne_fp4_for, vals, inv, [inv](float v) { return detail::e2m1_encode_rne(v * inv); },
          "e=" + std::to_string(e));
  }
  // Stage 1 at the block exponents e1 (stage1_exponent: 1..254, 255 for an infinite amax):
  // inv1 = cute_inverse(e1) (0 at 254, -Inf at 255), sc = 2^(e1 - 127) (+Inf at 255).
  std::vector<float> got(vals.size());
  for (std::uint32_t e1 : {1u, 2u, 100u, 126u, 127u, 128u, 200u, 253u, 254u, 255u}) {
    const float inv1 = detail::cute_inverse(e1), sc = from_bits(e1 << 23);
    for (CpuIsa isa : isas) {
      detail::cpu::stage1_fp4_for(isa)(vals.data(), inv1, sc, got.data(), std::int64_t(vals.size()));
      std::int64_t bad = 0;
      std::size_t first = 0;
      for (std::size_t i = 0; i < vals.size(); ++i)
        if (!stage1_same(got[i], detail::stage1_value(vals[i], inv1, sc)) && bad++ == 0) first = i;
      EXPECT_EQ(bad, 0) << cpu_isa_name(isa) << " e1=" << e1 << " first x bits 0x" << std::hex << bits(vals[first]);
    }
  }
}

// ---- vLLM's quantizer (Quantizer::kVllm, docs/RECIPES.md) ----

// Edge rows of the vLLM forms, every ISA (scalar included) byte for byte against the reference,
// with a few bytes checked against values written out by hand (independent of row.h). Position 0
// has cos = 1, sin = 0, so the rotated dims 64..127 keep the written values (then bf16-rounded).
// FP8: amax exactly 448 * 2^k (q_scale = 2^k) and its neighbours, amax below the 1e-4 floor,
// negative values that round to zero (0x80), signed zeros, NaN (0x7f, any sign), +-Inf (q_scale
// = Inf: finite values become +-0, the infinities NaN -> 0x7f), values near the dtype's maximum.
// Edge rows for every recipe (written for the quantizers of vLLM V3.2 / CuTe and SGLang V4.1's
// FP4 ones, NeoX RoPE, no RoPE, no weights): per-block extremes (one Inf, one NaN, the dtype's
// largest value in one block, so that some blocks' inverses are 0, -Inf or the subnormal 2^-127
// and others ordinary), values at V3.2's 1e-10 floor, E2M1 / e4m3 ties times powers of two, signed
// zeros, dtype subnormals; weights of every kind (NaN, +-Inf, huge for the bf16 fold, -0, ties of
// the bf16 rounding). Every ISA, 1 and 3 threads, against the reference.
TEST(CpuIsaRecipes, EdgeRowsEveryRecipe) {
  const float kTies[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 448.0f, 416.0f, 0.0625f};
  int checked = 0;
  for (RecipeId rid : all_recipes())
    for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      constexpr int kH = 13, kB = 2, kRows = kB * kH;
      Case c = make_case(kB, kH, dt, DType::kInt32, 9100 + int(rid));
      const bool f16 = dt == DType::kFloat16;
      const float dmax = f16 ? 65504.0f : dt == DType::kBFloat16 ? 3.3895314e38f : 3.4028235e38f;
      const float sub = f16 ? 0x1p-24f : dt == DType::kBFloat16 ? 0x1p-133f : 0x1p-140f;
      std::mt19937 rng(31 + int(rid));
      std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
      for (int r = 0; r < kRows; ++r) {
        const int blk = r % 4;  // the block (32 dims) the row's special value goes to
        for (int i = 0; i < 128; ++i) {
          const bool in_blk = i / 32 == blk;
          float v = uni(rng) * std::ldexp(1.0f, (r * 5) % 23 - 11);
          switch (r % 13) {
            case 0: if (in_blk && i % 32 == 7) v = INFINITY; break;
            case 1: if (in_blk && i % 32 == 9) v = -INFINITY; break;
            case 2: if (in_blk && i % 5 == 0) v = (i % 2) ? -NAN : NAN; break;
            case 3: if (in_blk) v = (i % 3 ? dmax : -dmax) * (i % 2 ? 1.0f : 0.75f); break;
            case 4: v = uni(rng) * 1e-12f; break;                   // V3.2's floor 1e-10
            case 5: v = (i % 2 ? -1.0f : 1.0f) * (in_blk ? sub * float(1 + i % 5) : 0.0f); break;
            case 6: v = (i % 2) ? -0.0f : 0.0f; break;
            case 7: case 8: {  // ties times 2^k (f16: small k)
              const int k = r % 13 == 7 ? (f16 ? -3 : -20) : (f16 ? 2 : 9);
              v = kTies[i % 11] * ((i / 11) % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, k);
              break;
            }
            case 9: v = (i % 32 == 0) ? 6.0f : uni(rng) * 0.3f; break;  // codes around 0 and 0.5
            case 10: if (i == 64 + blk) v = 1e-30f * (f16 ? 0.0f : 1.0f); else v = 0.0f; break;
            case 11: if (in_blk && i % 32 == 1) v = f16 ? 60000.0f : 2.9e38f; break;
            case 12:  // finite inputs whose Hadamard overflows (bf16 / fp32): +-Inf, Inf - Inf = NaN and
                      // finite sums in one row (an infinite q_scale: finite / Inf = +-0, NaN -> 0xfe)
              if (i % 32 < 4) v = (i % 64 < 32 ? 1.0f : -1.0f) * 0.75f * dmax;
              break;
            default: break;
          }
          put(c.q, dt, r * 128 + i, v);
        }
      }
      const float wv[] = {NAN, -NAN, INFINITY, -INFINITY, dmax, -0.0f, 0.0f, 1.00390625f, 1.01171875f, 3.0f,
                          -2.5f, 1e-30f, 7.0f};
      for (int b = 0; b < kB; ++b)
        for (int h = 0; h < kH; ++h) put(c.w, dt, b * c.wstride + h, wv[(b * kH + h) % 13]);
      c.weight_scale = 3.0f;  // w * 3 lands between bf16 values; dmax * 3 overflows
      RecipeOut ref;
      ASSERT_NO_FATAL_FAILURE(run_recipe_reference(c, rid, &ref));
      if (recipe(rid).scale_out && !f16) {
        // The rows reach act_quant's corners: an infinite row scale and NaN codes (0xfe).
        int inf_scales = 0, fe = 0;
        for (int r = 0; r < kRows; ++r) {
          float s;
          std::memcpy(&s, &ref.sf[4 * r], 4);
          inf_scales += s == INFINITY;
        }
        for (std::uint8_t q : ref.q) fe += q == 0xfe;
        EXPECT_GT(inf_scales, 0) << recipe_name(rid) << " " << dtype_name(dt);
        EXPECT_GT(fe, 0) << recipe_name(rid) << " " << dtype_name(dt);
      }
      if (recipe(rid).quant == Quantizer::kVllmCute && recipe(rid).format == OutFormat::kE2M1) {
        // vLLM's CuTe MXFP4 (docs/RECIPES.md step 15): the rows reach its infinite blocks (e = 255,
        // inverse -Inf: every code 0x7 or 0xf) and its finite ones
        EXPECT_GT(std::count(ref.sf.begin(), ref.sf.end(), std::uint8_t(255)), 0) << dtype_name(dt);
        EXPECT_GT(std::count_if(ref.sf.begin(), ref.sf.end(), [](std::uint8_t e) { return e < 255; }), 0);
      }
      ThresholdGuard guard(0);
      ASSERT_NO_FATAL_FAILURE(expect_every_isa_matches(c, rid, ref, {1, 3}, " (edge rows)", &checked));
    }
  std::printf("edge rows: recipe x dtype x isa x threads cases checked: %d\n", checked);
}

// MXFP4: the E2M1 ties 0.25 .. 5 times 2^k in a block whose amax is 6 * 2^k (inv = 2^-k exactly),
// negative values rounding to zero (0x8), block amax below 6 * 2^-126 (subnormal inputs), a block
// amax past 2^126 (e = 254, inv = 0), NaN (0x7) and +-Inf in a block.
TEST(CpuIsaVllm, EdgeRowsEveryIsa) {
  std::vector<RecipeId> vllm;
  for (RecipeId rid : all_recipes())
    if (recipe(rid).quant == Quantizer::kVllm) vllm.push_back(rid);
  ASSERT_EQ(vllm.size(), 2u);
  const float kTies[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const std::uint8_t kTieCodes[] = {0, 2, 2, 4, 4, 6, 6};  // ties to even: 0, 1, 1, 2, 2, 4, 4
  constexpr int kRows = 24;
  int hand_checked = 0;
  for (RecipeId rid : vllm) {
    const bool fp4 = recipe(rid).format == OutFormat::kE2M1;
    for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      Case c = make_case(2, kRows / 2, dt, DType::kInt64, 4242);
      c.head_scale = 0.3f;
      for (int j = 0; j < 32; ++j) {  // position 0: cos 1 (first half), sin 0 (second half)
        c.freqs[j] = 1.0f;
        c.freqs[32 + j] = 0.0f;
      }
      std::memset(c.pos.data(), 0, c.pos.size());
      const bool f16 = dt == DType::kFloat16;
      const float dmax = f16 ? 65504.0f : dt == DType::kBFloat16 ? 3.3895314e38f : 3.4028235e38f;
      const float sub = f16 ? 0x1p-24f : dt == DType::kBFloat16 ? 0x1p-133f : 0x1p-140f;  // a dtype subnormal
      std::mt19937 rng(17);
      std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
      const int ks[] = {-12, -3, 0, 1, 4};
      for (int r = 0; r < kRows; ++r) {
        const int k = ks[r % 5];
        const float p2k = std::ldexp(1.0f, k);
        for (int i = 0; i < 128; ++i) {
          float v = uni(rng) * p2k;
          switch (r) {
            case 0: case 1: case 2: case 3: case 4:  // amax exactly 448 * 2^k (f16: k <= 1 fits)
              if (i == 7 || i == 100) v = (i == 7 ? 448.0f : -448.0f) * p2k;
              break;
            case 5:  // amax just above 448 (next bf16 / f16 value): q_scale 2
              if (i == 9) v = 450.0f;
              break;
            case 6:  // just below 448: q_scale 1
              if (i == 70) v = -446.0f;
              break;
            case 7: v = uni(rng) * 1e-6f; break;                      // below the 1e-4 floor
            case 8: v = (i == 3) ? 448.0f : (i % 2 ? -4e-4f : 4e-4f); break;  // < 2^-10: -0 / +0 codes
            case 9: v = (i % 2) ? -0.0f : 0.0f; break;
            case 10: if (i % 17 == 0) v = (i % 34) ? -NAN : NAN; break;
            case 11: if (i == 5 || i == 80) v = INFINITY; break;
            case 12: if (i == 6 || i == 90) v = -INFINITY; break;
            case 13: v = (i % 3 ? dmax : -dmax); break;
            case 14: case 15: case 16: {  // E2M1 ties times 2^k, block amax 6 * 2^k, every block
              const int kk = r == 14 ? 0 : r == 15 ? -5 : 3;
              const int j = i % 32;
              v = (j < 14 ? kTies[j % 7] * ((j / 7) ? -1.0f : 1.0f) : j == 31 ? 6.0f : uni(rng) * 5.0f) *
                  std::ldexp(1.0f, kk);
              break;
            }
            case 17: v = (i % 32 == 0) ? 6.0f : (i % 2 ? -0.2f : 0.2f); break;  // |v| < 0.25 -> 0x8 / 0x0
            case 18: v = (i % 4 ? -sub : sub) * float(1 + i % 3); break;    // below 6 * 2^-126
            case 19: if (i % 32 == 1) v = f16 ? 60000.0f : 2.9e38f; break;  // e = 254 (fp32 / bf16)
            case 20: if (i % 32 == 2) v = (i / 32) % 2 ? -NAN : NAN; break;
            case 21: if (i % 32 == 3) v = (i / 32) % 2 ? -INFINITY : INFINITY; break;
            case 22: v = 0.0f; break;
            default: break;  // ordinary row
          }
          put(c.q, dt, r * 128 + i, v);
        }
      }
      RecipeOut ref;
      ASSERT_NO_FATAL_FAILURE(run_recipe_reference(c, rid, &ref));
      // By hand: FP8 row 2 (k = 0) has q_scale 1: 448 -> 0x7e, -448 -> 0xfe, weights_out =
      // ((w * 1) * weight_scale) * head_scale; row 8: +-4e-4 -> 0x00 / 0x80; row 10: NaN -> 0x7f
      // whatever its sign; row 11 (+Inf): q_scale = Inf, finite -> +-0, Inf -> NaN -> 0x7f.
      // MXFP4 row 14 (k = 0): block 0 dims 0..13 = ties, codes kTieCodes, sign 8 on 7..13.
      if (!fp4) {
        EXPECT_EQ(ref.q[2 * 128 + 7], 0x7e);
        EXPECT_EQ(ref.q[2 * 128 + 100], 0xfe);
        EXPECT_EQ(bits(ref.w[2]), bits(((weight_of(c, 0, 2) * 1.0f) * c.weight_scale) * c.head_scale));
        EXPECT_EQ(ref.q[8 * 128 + 0], 0x00);
        EXPECT_EQ(ref.q[8 * 128 + 1], 0x80);
        EXPECT_EQ(ref.q[10 * 128 + 0], 0x7f);
        EXPECT_EQ(ref.q[10 * 128 + 17], 0x7f);
        EXPECT_EQ(ref.q[11 * 128 + 5], 0x7f);
        EXPECT_EQ(ref.q[11 * 128 + 6] & 0x7f, 0x00);
        EXPECT_TRUE(std::isinf(ref.w[11]) || std::isnan(ref.w[11]));
        hand_checked += 10;
      } else {
        for (int j = 0; j < 14; ++j) {
          const std::uint8_t byte = ref.q[14 * 64 + j / 2];
          const std::uint8_t code = (j % 2) ? byte >> 4 : byte & 15;
          EXPECT_EQ(code, kTieCodes[j % 7] | (j >= 7 ? 8 : 0)) << "tie " << j << " " << dtype_name(dt);
          ++hand_checked;
        }
        EXPECT_EQ(ref.sf[14 * 4 + 0], 127);  // block 0: amax 6 -> ratio 1 -> e = 127
        EXPECT_EQ(ref.q[17 * 64 + 0] >> 4, 0x8);  // -0.2 (dim 1) -> sign on a zero code
        EXPECT_EQ(ref.q[17 * 64 + 1] & 15, 0x0);  // +0.2 (dim 2)
        EXPECT_EQ(ref.q[20 * 64 + 1] & 15, 0x7);  // NaN (dim 2) -> 0x7
        EXPECT_EQ(ref.q[20 * 64 + 16 + 1] & 15, 0x7);  // -NaN (dim 34) -> 0x7 too
        EXPECT_EQ(ref.sf[21 * 4 + 0], 254);  // Inf in block 0
        EXPECT_EQ(bits(ref.w[2]), bits((weight_of(c, 0, 2) * c.weight_scale) * c.head_scale));
        hand_checked += 6;
      }
      ThresholdGuard guard(0);
      ASSERT_NO_FATAL_FAILURE(expect_every_isa_matches(c, rid, ref, {1, 3}));
    }
  }
  std::printf("vLLM edge rows: %d bytes checked by hand\n", hand_checked);
}

// head_scale reaches weights_out as the last factor of both two-factor folds, on every ISA:
// several values (1, powers of two, others, a float32 subnormal) against the reference. head_scale
// must be > 0 (0, negative and non-finite values are refused by the validator:
// tests/test_validation.cpp, ScalarSpecs); the signs of weights_out are covered by the weights
// (uniform in (-4, 4), some 0) and, for 2.5, by the same case with every weight negated: its
// weights_out must be the exact negation (RNE is symmetric), -0 for a zero weight included
// (NaN rows excepted: a NaN keeps the sign it has).
void negate_weights(Case& c) {
  const std::size_t es = dtype_size(c.dt);
  for (std::size_t i = es - 1; i < c.w.size(); i += es) c.w[i] ^= 0x80;  // little-endian sign bit
}

TEST(CpuIsaVllm, HeadScaleEveryIsa) {
  struct Hs {
    float hs;
    bool negate;
  };
  for (RecipeId rid : all_recipes()) {
    if (recipe(rid).quant != Quantizer::kVllm) continue;
    RecipeOut pos25;  // the reference for head_scale 2.5 and the weights as drawn
    for (const Hs& v : {Hs{1.0f, false}, Hs{0.125f, false}, Hs{0.1234567f, false}, Hs{3.0f, false},
                        Hs{1e-40f, false}, Hs{2.5f, false}, Hs{2.5f, true}}) {
      Case c = make_case(3, 8, DType::kBFloat16, DType::kInt32, 606);
      c.head_scale = v.hs;
      if (v.negate) negate_weights(c);
      RecipeOut ref;
      ASSERT_NO_FATAL_FAILURE(run_recipe_reference(c, rid, &ref));
      ASSERT_NO_FATAL_FAILURE(expect_every_isa_matches(
          c, rid, ref, {1}, " head_scale=" + testing::PrintToString(v.hs) + (v.negate ? " negated weights" : "")));
      if (v.hs == 0.1234567f && recipe(rid).format == OutFormat::kE2M1) {  // (w * weight_scale) * head_scale
        for (int r = 0; r < 24; ++r)
          EXPECT_EQ(bits(ref.w[r]), bits((weight_of(c, r / 8, r % 8) * c.weight_scale) * v.hs)) << r;
      }
      if (v.hs == 2.5f && !v.negate) pos25 = ref;
      if (v.negate) {
        ASSERT_EQ(ref.w.size(), pos25.w.size());
        int negative_zeros = 0;
        for (std::size_t r = 0; r < ref.w.size(); ++r) {
          if (std::isnan(pos25.w[r])) {  // a NaN row (its q_scale NaN, or 0 * Inf): NaN either way
            EXPECT_TRUE(std::isnan(ref.w[r])) << r;
            continue;
          }
          EXPECT_EQ(bits(ref.w[r]), bits(pos25.w[r]) ^ 0x80000000u) << r;
          negative_zeros += bits(ref.w[r]) == 0x80000000u;
        }
        EXPECT_GT(negative_zeros, 0) << "a zero weight, negated, gives -0";
      }
    }
  }
}

// The kernels' vLLM FP8 encoder (x * (1 / q_scale), clamp-encode, NaN -> 0x7f) against row.h's
// vllm_fp8_code(x, q_scale) for every power-of-two q_scale the kernels can meet (2^-22 .. 2^120)
// and +Inf (inv 0): a strided sweep of all float bit patterns, and every e4m3 rounding midpoint,
// its neighbours and the grid values times q_scale (float32-subnormal quotients included).
TEST(CpuIsaVllm, Fp8EncoderSweepMatchesRowH) {
  std::vector<float> sweep;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) sweep.push_back(from_bits(std::uint32_t(u)));
  for (float v : {0.0f, -0.0f, 448.0f, -448.0f, 464.0f, -464.0f, 480.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN,
                  -NAN, from_bits(0x7f800001u), from_bits(0xff800001u), 1e-45f, -1e-45f, 0x1p-10f, -0x1p-10f})
    sweep.push_back(v);
  int scales = 0;
  for (int k : {-22, -20, -9, -1, 0, 1, 3, 8, 40, 100, 120, 128}) {  // 128: +Inf
    const float q_scale = k == 128 ? INFINITY : std::ldexp(1.0f, k);
    const float inv = 1.0f / q_scale;
    std::vector<float> vals = sweep;
    for (int code = 0; code < 127; ++code) {
      const float lo = detail::e4m3fn_decode(std::uint8_t(code));
      const float hi = detail::e4m3fn_decode(std::uint8_t(code + 1));
      const float mid = (lo + hi) * 0.5f;
      for (int d = -2; d <= 2; ++d)
        for (float g : {mid, lo}) {
          const float v = from_bits(std::uint32_t(std::int64_t(bits(g * (k == 128 ? 1.0f : q_scale))) + d));
          vals.push_back(v);
          vals.push_back(-v);
        }
    }
    while (vals.size() % 16) vals.push_back(0.0f);
    expect_encoder_matches(
        detail::cpu::quantize_vllm_for, vals, inv, [q_scale](float v) { return detail::vllm_fp8_code(v, q_scale); },
        "q_scale=2^" + std::to_string(k));
    ++scales;
  }
  EXPECT_EQ(scales, 12);
}

// The kernels' vLLM E2M1 encoder against row.h's mx_e2m1_encode(y * inv) for every inv a block can
// get (2^(127 - e), e = 1..253; 0 at e = 254): a strided sweep of all float bit patterns, every
// bf16 pattern, and the E2M1 ties and grid points with their float32 neighbours times 2^k.
TEST(CpuIsaVllm, Mxfp4EncoderSweepMatchesRowH) {
  std::vector<float> vals;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) vals.push_back(from_bits(std::uint32_t(u)));
  for (std::uint32_t h = 0; h < 0x10000u; h += 3) vals.push_back(from_bits(h << 16));
  const float grid[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f};
  for (int k : {-130, -126, -20, -1, 0, 1, 20, 100, 126})
    for (float t : grid)
      for (int d = -2; d <= 2; ++d)
        for (float sg : {1.0f, -1.0f}) vals.push_back(sg * from_bits(std::uint32_t(std::int64_t(bits(std::ldexp(t, k))) + d)));
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, from_bits(0x7f800001u), from_bits(0xff800001u),
                  from_bits(0xffc00000u), 1e-45f, -1e-45f})
    vals.push_back(v);
  while (vals.size() % 16) vals.push_back(0.0f);
  for (int e : {1, 2, 3, 100, 126, 127, 128, 130, 147, 200, 253, 254}) {
    const float inv = detail::ue8m0_inverse(std::uint8_t(e));
    expect_encoder_matches(
        detail::cpu::encode_mxfp4_for, vals, inv, [inv](float v) { return detail::mx_e2m1_encode(v * inv); },
        "e=" + std::to_string(e));
  }
  // The ties by hand: t * 2^-k with inv = 2^k (no row.h).
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const std::uint8_t codes[] = {0, 2, 2, 4, 4, 6, 6};
  std::vector<float> tv;
  std::vector<std::uint8_t> tw;
  for (int i = 0; i < 7; ++i)
    for (float sg : {1.0f, -1.0f}) {
      tv.push_back(sg * std::ldexp(ties[i], -3));
      tw.push_back(std::uint8_t(codes[i] | (sg < 0 ? 8 : 0)));
    }
  tv.push_back(-0.1f * 0.125f), tw.push_back(8);  // -0.1 -> 0x8
  tv.push_back(NAN * -1.0f), tw.push_back(7);
  tv.push_back(-1e30f), tw.push_back(0xf);
  tv.push_back(0.0f), tw.push_back(0);
  ASSERT_EQ(tv.size(), 18u);
  tv.resize(32, 0.0f);
  tw.resize(32, 0);
  std::vector<std::uint8_t> tg(32);
  for (CpuIsa isa : supported_cpu_isas()) {
    detail::cpu::encode_mxfp4_for(isa)(tv.data(), 8.0f, tg.data(), 32);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(tg[i], tw[i]) << cpu_isa_name(isa) << " value " << tv[i];
  }
}

// ---- the gfx942 forms (Quantizer::kSglang224, kVllmFnuz224) ----

// Edge rows of the two gfx942 recipes, every ISA (scalar included) byte for byte against the
// reference, plus a few bytes by hand. Position 0 (cos 1, sin 0): the RoPE keeps the written values.
// Rows: amax exactly 224 * 2^k (vllm_fnuz224: q_scale = 2^k) with e4m3fnuz ties and subnormals of
// x / q_scale around it, amax just above / below 224, below the 1e-4 floor (q_scale 2^-21), the whole
// e4m3fnuz subnormal range with its ties, signed zeros, NaN of both signs, +-Inf, the dtype's
// maximum, and Hadamard rows whose values land near 224 and its neighbours after SGLang's scale.
TEST(CpuIsaRecipes, Gfx942EdgeRowsEveryIsa) {
  // v such that 2v is an e4m3fn tie or grid point (e4m3fnuz: v's own grid), times 2^k in a row.
  const float kV[] = {108.0f, 104.0f, 116.0f, 0.53125f, 0x1p-11f, 0x1.8p-10f, 0x1.ep-8f, 0x1.4p-9f,
                      0x1p-12f, 223.0f, 220.0f, 216.0f, 0.0f, 1.0f, 3.0f, 0x1.2p-7f};
  constexpr int kH = 11, kB = 2, kRows = kB * kH;
  int checked = 0;
  for (RecipeId rid : {RecipeId::kSglangV4Fp8Gfx942, RecipeId::kVllmV4Fp8Fnuz224})
    for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      const bool fnuz = rid == RecipeId::kVllmV4Fp8Fnuz224;
      Case c = make_case(kB, kH, dt, DType::kInt32, 7700 + int(dt));
      for (int j = 0; j < 32; ++j) {  // position 0: cos 1, sin 0, in the recipe's freqs layout
        const bool inter = recipe(rid).freqs_layout == FreqsLayout::kInterleaved;
        c.freqs[inter ? 2 * j : j] = 1.0f;
        c.freqs[inter ? 2 * j + 1 : 32 + j] = 0.0f;
      }
      std::memset(c.pos.data(), 0, c.pos.size());
      const bool f16 = dt == DType::kFloat16;
      const float dmax = f16 ? 65504.0f : dt == DType::kBFloat16 ? 3.3895314e38f : 3.4028235e38f;
      std::mt19937 rng(23);
      std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
      const int ks[] = {-12, -3, 0, 1, 4};
      for (int r = 0; r < kRows; ++r) {
        for (int i = 0; i < 128; ++i) {
          float v = uni(rng);
          switch (r) {
            case 0: case 1: case 2: case 3: case 4: {  // amax exactly 224 * 2^k, ties times 2^k
              const float p2k = std::ldexp(1.0f, ks[r]);
              v = (i == 7 ? 224.0f : i == 100 ? -224.0f : kV[i % 16] * ((i / 16) % 2 ? -1.0f : 1.0f)) * p2k;
              break;
            }
            case 5: v = (i == 9) ? 225.0f : uni(rng) * 200.0f; break;  // just above 224: q_scale 2
            case 6: v = (i == 70) ? -223.0f : uni(rng) * 200.0f; break;  // just below: q_scale 1
            case 7: v = uni(rng) * 1e-6f; break;                         // below the 1e-4 floor
            case 8: case 9: {  // x / q_scale = (i - 64) * 2^-11: every e4m3fnuz subnormal and tie
              const int k = r == 8 ? 4 : -8;
              v = (i == 0 ? 224.0f : float(i - 64) * 0x1p-11f) * std::ldexp(1.0f, k);
              break;
            }
            case 10: v = float(i - 64) * 0x1p-32f; break;  // q_scale 2^-21 (fp16: zeros)
            case 11: v = (i % 2) ? -0.0f : 0.0f; break;
            case 12: if (i % 9 == 0) v = (i % 18) ? -NAN : NAN; break;
            case 13: if (i == 5 || i == 80) v = INFINITY; break;
            case 14: if (i == 6 || i == 90) v = -INFINITY; break;
            case 15: v = (i % 3 ? dmax : -dmax); break;
            case 16: case 17: case 18: {  // Hadamard: spikes a, b at dims 0, 1 give (a + b)h, (a - b)h
              const float t = r == 16 ? 216.0f : r == 17 ? 208.0f : 232.0f;
              v = i == 0 ? (224.0f + t) / 2 : i == 1 ? (224.0f - t) / 2 : 0.0f;
              break;
            }
            case 19: v = (i == 0) ? 1.0f : 0.0f; break;  // Hadamard: all 128 values h
            default: break;  // ordinary rows
          }
          put(c.q, dt, r * 128 + i, v);
        }
      }
      RecipeOut ref;
      ASSERT_NO_FATAL_FAILURE(run_recipe_reference(c, rid, &ref));
      if (fnuz) {
        // By hand (row 2: q_scale 1, no Hadamard): 224 -> 0x7e, -224 -> 0xfe; the code of v is the
        // e4m3fn code of 2v: 108 (2v = 216, a tie) -> 0x76, -108 -> 0xf6, 2^-11 (2v = 2^-10, a
        // tie) -> 0x00 and -2^-11 -> 0x00 (no -0), 0x1.8p-10 (2v = 1.5 * 2^-9) -> 0x02; NaN -> 0x80.
        EXPECT_EQ(ref.q[2 * 128 + 7], 0x7e);
        EXPECT_EQ(ref.q[2 * 128 + 100], 0xfe);
        EXPECT_EQ(ref.q[2 * 128 + 0], 0x76);
        EXPECT_EQ(ref.q[2 * 128 + 16], 0xf6);
        EXPECT_EQ(ref.q[2 * 128 + 4], 0x00);
        EXPECT_EQ(ref.q[2 * 128 + 20], 0x00);
        EXPECT_EQ(ref.q[2 * 128 + 5], 0x02);
        EXPECT_EQ(ref.q[12 * 128 + 0], 0x80);
        EXPECT_EQ(ref.q[12 * 128 + 9], 0x80);
        // weights_out = ((w * q_scale) * weight_scale) * head_scale, q_scale 1, no x2.
        EXPECT_EQ(bits(ref.w[2]), bits(((weight_of(c, 0, 2) * 1.0f) * c.weight_scale) * c.head_scale));
      } else {
        // By hand: row 19 (one spike) and row 12 (NaN everywhere after the Hadamard) give 224 = 0x76
        // in every dim.
        for (int i = 0; i < 128; ++i) {
          EXPECT_EQ(ref.q[19 * 128 + i], 0x76) << i;
          EXPECT_EQ(ref.q[12 * 128 + i], 0x76) << i;
        }
      }
      ThresholdGuard guard(0);
      ASSERT_NO_FATAL_FAILURE(expect_every_isa_matches(c, rid, ref, {1, 3}, " (gfx942 edge rows)", &checked));
    }
  std::printf("gfx942 edge rows: recipe x dtype x isa x threads cases checked: %d\n", checked);
}

TEST(CpuThreads, SetAndDefault) {
  const int before = cpu_num_threads();
  EXPECT_GE(before, 1);
  const Status bad = set_cpu_num_threads(0);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("n"), std::string::npos);
  EXPECT_EQ(cpu_num_threads(), before);
  ASSERT_TRUE(set_cpu_num_threads(3).ok());
  EXPECT_EQ(cpu_num_threads(), 3);
  // Options::num_threads = 0 uses that default; result unchanged.
  ThresholdGuard guard(0);
  const Case c = make_case(13, 16, DType::kBFloat16, DType::kInt64, 7);
  const Out ref = reference(c);
  Out o;
  Options opt;
  opt.backend = Backend::kCpu;
  ASSERT_TRUE(run(c, opt, &o).ok());
  EXPECT_EQ(differing_bytes(o, ref), 0);
  // A thread count far above the rows' worth of parts is capped, not an error.
  opt.num_threads = 5000;
  ASSERT_TRUE(run(c, opt, &o).ok());
  EXPECT_EQ(differing_bytes(o, ref), 0);
  ASSERT_TRUE(set_cpu_num_threads(before).ok());
}

TEST(CpuThreads, PoolIsReusedNotGrownPerCall) {
  ThresholdGuard guard(0);
  const Case c = make_case(16, 16, DType::kBFloat16, DType::kInt32, 8);
  const Out ref = reference(c);
  Options opt;
  opt.backend = Backend::kCpu;
  opt.num_threads = 4;
  Out o;
  ASSERT_TRUE(run(c, opt, &o).ok());
  const int workers = detail::cpu::pool_worker_count();
  EXPECT_GE(workers, 3);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(run(c, opt, &o).ok());
    ASSERT_EQ(differing_bytes(o, ref), 0);
  }
  EXPECT_EQ(detail::cpu::pool_worker_count(), workers);
}

TEST(CpuThreads, ConcurrentCallersAndNestedUse) {
  // Several threads call the op at once (as torch's intra-op threads may): one gets the pool,
  // the others run inline; all results exact, no deadlock. A call made from inside a pool
  // worker also runs inline.
  ThresholdGuard guard(0);
  const Case c = make_case(24, 16, DType::kFloat16, DType::kInt64, 9);
  const Out ref = reference(c);
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 6; ++t) {
    ts.emplace_back([&, t] {
      Options opt;
      opt.backend = Backend::kCpu;
      opt.num_threads = 1 + t % 4;
      for (int i = 0; i < 20; ++i) {
        Out o;
        if (!run(c, opt, &o).ok() || differing_bytes(o, ref) != 0) ++failures;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);

  struct Nested {
    const Case* c;
    const Out* ref;
    std::atomic<int> bad{0};
  } nested{&c, &ref};
  const bool ran = detail::cpu::pool_try_run(
      3,
      [](void* ctx, int) {
        auto* n = static_cast<Nested*>(ctx);
        Options opt;
        opt.backend = Backend::kCpu;
        opt.num_threads = 3;
        Out o;
        if (!run(*n->c, opt, &o).ok() || differing_bytes(o, *n->ref) != 0) ++n->bad;
      },
      &nested);
  EXPECT_TRUE(ran);
  EXPECT_EQ(nested.bad.load(), 0);
}

}  // namespace
