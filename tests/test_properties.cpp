// Properties of the arithmetic (SPEC.md) and of the element codecs in src/common/row.h:
//  - the Hadamard butterflies applied twice give 128 x the input;
//  - zero rows, tiny rows (the 1e-4 scale floor), Inf / NaN / overflow rows, exactly as SPEC.md
//    says, through every backend (reference, cpu x ISA, cuda when usable);
//  - the fp8 e4m3fn encoder over all 2^32 float32 bit patterns against an independent
//    definition (nearest representable value in double arithmetic, ties to the even code);
//  - the fp8 decoder for all 256 codes, the bf16 and fp16 decoders for all 2^16 patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/row.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;
using iqtest::bits_of;
using iqtest::float_of;

// ---------------------------------------------------------------------------------------
// An independent definition of float8_e4m3fn: the 127 non-negative finite values, by code.
// Code k = (e, m) = (k >> 3, k & 7): e = 0 -> m * 2^-9; else (1 + m/8) * 2^(e-7).
// Code 0x7f (e = 15, m = 7) is NaN; the sign bit is bit 7.
// ---------------------------------------------------------------------------------------
using iqtest::e4m3_value;

// Nearest e4m3fn code of x by brute force over all values (double arithmetic, ties to the
// even code, |x| beyond 448 or Inf -> +-448, NaN -> 0x7f with its sign). The slow definition.
int e4m3_nearest_bruteforce(float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | 0x7f;
  const double a = std::fabs(double(x));
  int best = 0;
  double best_d = INFINITY;
  for (int k = 0; k <= 126; ++k) {
    const double d = std::fabs(a - e4m3_value(k));
    if (d < best_d || (d == best_d && (k & 1) == 0)) {
      best = k;
      best_d = d;
    }
  }
  if (std::isinf(a)) best = 126;
  return sign | best;
}

// The same definition, fast: the midpoints between neighbouring values split the positive
// floats into intervals of one code each (values and midpoints are exact in double).
struct E4m3Midpoints {
  double mid[126];
  E4m3Midpoints() {
    for (int k = 0; k < 126; ++k) mid[k] = 0.5 * (e4m3_value(k) + e4m3_value(k + 1));
  }
  // Code of |x| given idx = number of midpoints below |x| (non-NaN |x|).
  int code(double a, int idx) const {
    if (idx < 126 && a == mid[idx]) return (idx & 1) ? idx + 1 : idx;  // tie: even code
    return idx;
  }
};

TEST(Fp8Definition, FastDefinitionMatchesBruteForce) {
  // The fast (interval) form of the definition against the brute-force one: at every value,
  // every midpoint, two float ulps either side of each, and a sparse sweep of all patterns.
  const E4m3Midpoints mp;
  std::vector<float> probes;
  auto around = [&](double v) {
    float f = float(v);
    for (int i = 0; i < 2; ++i) f = std::nextafter(f, -INFINITY);
    for (int i = 0; i < 5; ++i) {
      probes.push_back(f);
      f = std::nextafter(f, INFINITY);
    }
  };
  for (int k = 0; k < 127; ++k) around(e4m3_value(k));
  for (int k = 0; k < 126; ++k) around(mp.mid[k]);
  around(464.0);
  for (std::uint32_t u = 0; u < 0x7f800000u; u += 65521u) probes.push_back(float_of(u));
  probes.push_back(INFINITY);
  int bad = 0;
  for (float f : probes) {
    if (std::signbit(f) || std::isnan(f)) continue;  // the definition is symmetric in the sign
    const double a = f;
    const int idx = int(std::lower_bound(mp.mid, mp.mid + 126, a) - mp.mid);  // midpoints below a
    const int fast = mp.code(a, idx);
    const int slow = e4m3_nearest_bruteforce(f);
    if (fast != slow && bad++ < 5) ADD_FAILURE() << "x=" << f << " fast " << fast << " slow " << slow;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(probes.size(), 30000u);
  // Anchors of the format: 448 is 0x7e, 2^-9 is 0x01, 2^-6 is 0x08, 1.0 is 0x38.
  EXPECT_EQ(e4m3_nearest_bruteforce(448.0f), 0x7e);
  EXPECT_EQ(e4m3_nearest_bruteforce(0x1p-9f), 0x01);
  EXPECT_EQ(e4m3_nearest_bruteforce(0x1p-6f), 0x08);
  EXPECT_EQ(e4m3_nearest_bruteforce(1.0f), 0x38);
  EXPECT_EQ(e4m3_nearest_bruteforce(-1.0f), 0xb8);
}

// All 2^32 patterns: for each non-negative pattern u (ascending bits = ascending values) the
// expected code is tracked by walking the midpoints; -x is checked in the same step.
TEST(Fp8Encode, ExhaustiveAgainstNearestDefinition) {
  const E4m3Midpoints mp;
  unsigned workers = std::max(2u, std::thread::hardware_concurrency());
  workers = std::min(workers, 16u);
  const std::uint64_t total = 0x80000000ull;  // non-negative patterns; negatives in the same loop
  std::atomic<std::uint64_t> checked{0}, mismatches{0};
  std::mutex mu;
  std::vector<std::string> examples;
  auto work = [&](std::uint64_t begin, std::uint64_t end) {
    // idx = number of midpoints strictly below the current value
    int idx = 0;
    const double a0 = double(float_of(std::uint32_t(begin)));
    if (!std::isnan(a0))
      while (idx < 126 && mp.mid[idx] < a0) ++idx;
    std::uint64_t bad = 0, n = 0;
    for (std::uint64_t uu = begin; uu < end; ++uu) {
      const std::uint32_t u = std::uint32_t(uu);
      const float f = float_of(u);
      int want;
      if (u > 0x7f800000u) {
        want = 0x7f;
      } else {
        const double a = f;
        while (idx < 126 && mp.mid[idx] < a) ++idx;
        want = mp.code(a, idx);
      }
      const std::uint8_t got_pos = detail::e4m3fn_encode(f);
      const std::uint8_t got_neg = detail::e4m3fn_encode(float_of(u | 0x80000000u));
      n += 2;
      if (got_pos != want || got_neg != (want | 0x80)) {
        if (bad++ < 3) {
          std::lock_guard<std::mutex> lock(mu);
          char buf[160];
          std::snprintf(buf, sizeof buf, "bits 0x%08x (%a): got 0x%02x / neg 0x%02x, want 0x%02x / 0x%02x", u,
                        double(f), got_pos, got_neg, want, want | 0x80);
          examples.push_back(buf);
        }
      }
    }
    checked += n;
    mismatches += bad;
  };
  std::vector<std::thread> threads;
  const std::uint64_t chunk = total / workers;
  for (unsigned w = 0; w < workers; ++w) {
    const std::uint64_t b = w * chunk, e = (w + 1 == workers) ? total : b + chunk;
    threads.emplace_back(work, b, e);
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(checked.load(), 0x100000000ull);
  EXPECT_EQ(mismatches.load(), 0u);
  for (const auto& s : examples) ADD_FAILURE() << s;
}

TEST(Fp8Decode, AllCodesAgainstTableDefinition) {
  for (int c = 0; c < 256; ++c) {
    const float got = detail::e4m3fn_decode(std::uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      EXPECT_EQ(bool(std::signbit(got)), bool(c & 0x80)) << "code " << c;
      continue;
    }
    const double want = e4m3_value(c);
    EXPECT_EQ(double(got), want) << "code " << c;
    EXPECT_EQ(bool(std::signbit(got)), bool(c & 0x80)) << "code " << c;  // -0 for 0x80
    // encode(decode(c)) == c for every non-NaN code
    EXPECT_EQ(int(detail::e4m3fn_encode(got)), c) << "code " << c;
  }
}

// Every pattern of a 16-bit format (bit 15 the sign, then `ebits` exponent and `mbits` mantissa
// bits, bias 2^(ebits-1) - 1) through decode, against the value by definition: exponent all ones
// with m != 0 -> NaN of that sign, with m = 0 -> Inf; exponent 0 -> m * 2^(1 - bias - mbits);
// else (1 + m / 2^mbits) * 2^(e - bias). Returns the mismatches (the first five are reported).
int decoder_mismatches(const char* name, int ebits, int mbits, float (*decode)(std::uint16_t)) {
  const int emax = (1 << ebits) - 1, bias = (1 << (ebits - 1)) - 1;
  int bad = 0;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const int e = int(h >> mbits) & emax, m = int(h) & ((1 << mbits) - 1);
    const bool neg = h & 0x8000;
    const float got = decode(std::uint16_t(h));
    bool ok;
    if (e == emax && m != 0) {
      ok = std::isnan(got) && std::signbit(got) == neg;
    } else {
      double v = e == emax ? INFINITY
                 : e == 0  ? std::ldexp(double(m), 1 - bias - mbits)
                           : std::ldexp(1.0 + std::ldexp(double(m), -mbits), e - bias);
      if (neg) v = -v;
      ok = double(got) == v && std::signbit(got) == neg;
    }
    if (!ok && bad++ < 5) ADD_FAILURE() << name << " 0x" << std::hex << h << " -> " << got;
  }
  return bad;
}

// bf16: sign, 8 exponent bits, 7 mantissa bits (subnormals m * 2^-133, normals (1 + m/128) 2^(e-127)).
TEST(InputDecoders, Bf16Exhaustive) { EXPECT_EQ(decoder_mismatches("bf16", 8, 7, detail::bf16_to_f32), 0); }

// fp16: sign, 5 exponent bits, 10 mantissa bits (subnormals m * 2^-24, normals (1 + m/1024) 2^(e-15)).
TEST(InputDecoders, Fp16Exhaustive) { EXPECT_EQ(decoder_mismatches("fp16", 5, 10, detail::f16_to_f32), 0); }

// The test's own input encoders (used by the other tests) round-trip through the decoders.
TEST(InputDecoders, TestEncodersRoundTrip) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float b = detail::bf16_to_f32(std::uint16_t(h));
    if (!std::isnan(b)) {
      EXPECT_EQ(iqtest::to_bf16(b), h);
    }
    const float f = detail::f16_to_f32(std::uint16_t(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(iqtest::to_f16(f), h);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Hadamard
// ---------------------------------------------------------------------------------------
TEST(Hadamard, TwiceIs128TimesIdentityOnSmallIntegers) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    float x[128], orig[128];
    for (int i = 0; i < 128; ++i) x[i] = orig[i] = float(int(rng() % 2001) - 1000);
    detail::hadamard_row(x);
    detail::hadamard_row(x);
    for (int i = 0; i < 128; ++i) ASSERT_EQ(x[i], 128.0f * orig[i]) << "trial " << trial << " i " << i;
  }
}

TEST(Hadamard, MatchesSylvesterSignsOnUnitVectors) {
  for (int j = 0; j < 128; ++j) {
    float x[128] = {};
    x[j] = 1.0f;
    detail::hadamard_row(x);
    for (int i = 0; i < 128; ++i) {
      const float want = (__builtin_popcount(unsigned(i & j)) & 1) ? -1.0f : 1.0f;
      ASSERT_EQ(x[i], want) << "column " << j << " row " << i;
    }
  }
}

// Random data: each pass is a depth-7 pairwise sum, whose rounding error per output is at most
// about 7 * u * sum|x| (u = 2^-24); the second pass adds 7 * u * 128 * sum|x| and carries the
// first pass's error times 128. So |H(Hx) - 128 x| <= 1792 u sum|x|; we allow 2000 u sum|x|.
TEST(Hadamard, TwiceIs128TimesIdentityUpToRounding) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  double worst = 0;
  for (int trial = 0; trial < 500; ++trial) {
    float x[128], orig[128];
    double sum_abs = 0;
    const float mag = std::pow(10.0f, float(int(rng() % 20)) - 10.0f);
    for (int i = 0; i < 128; ++i) {
      x[i] = orig[i] = nd(rng) * mag;
      sum_abs += std::fabs(double(orig[i]));
    }
    detail::hadamard_row(x);
    detail::hadamard_row(x);
    const double tol = 2000.0 * 0x1p-24 * sum_abs;
    for (int i = 0; i < 128; ++i) {
      const double err = std::fabs(double(x[i]) - 128.0 * orig[i]);
      worst = std::max(worst, err / (0x1p-24 * sum_abs));
      ASSERT_LE(err, tol) << "trial " << trial << " i " << i;
    }
  }
  EXPECT_GT(worst, 0.0) << "random data should show some rounding";
}

// ---------------------------------------------------------------------------------------
// Edge rows through every backend
// ---------------------------------------------------------------------------------------
// One token, one head per given row, weights as given (weight_scale 1), position `pos` of real freqs.
iqtest::HostCase rows_case(DType dt, const std::vector<std::vector<float>>& rows, const std::vector<float>& w,
                           std::int64_t pos = 0) {
  iqtest::HostCase c = iqtest::blank_case(1, std::int64_t(rows.size()), dt, DType::kInt64,
                                          std::int64_t(rows.size()), 64);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int i = 0; i < 128; ++i) iqtest::store_as(c.q_input, dt, r * 128 + i, rows[r][i]);
  for (std::size_t r = 0; r < rows.size(); ++r) iqtest::store_as(c.weight, dt, r, w[r]);
  iqtest::set_position(c, 0, pos);
  return c;
}

// Runs the case on every backend, checks they all agree, returns the outputs.
iqtest::Outputs run_everywhere(const iqtest::HostCase& c) {
  iqtest::Outputs first;
  bool have = false;
  for (const auto& be : iqtest::backends_under_test({1, 2})) {
    iqtest::Outputs got;
    const Status s = iqtest::run_case(be, c, &got, 0xA5);
    EXPECT_TRUE(s.ok()) << be.name << ": " << s.message();
    if (!have) {
      first = got;
      have = true;
    } else {
      const iqtest::Comparison cmp = iqtest::compare(got, first, c.H);
      EXPECT_TRUE(cmp.exact()) << be.name << " differs from the reference:" << cmp.first;
    }
  }
  return first;
}

const float kFloorScale = 1e-4f / 448.0f;

TEST(EdgeRows, ZeroRowGivesFloorScaleAndZeroCodes) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::vector<float> zero(128, 0.0f);
    // position 0: cos 1, sin 0, so every RoPE output is +0 and every code is exactly 0x00
    const iqtest::Outputs o = run_everywhere(rows_case(dt, {zero, zero}, {1.0f, -3.0f}, 0));
    for (int i = 0; i < 256; ++i) ASSERT_EQ(o.q_out[i], 0x00) << i;
    EXPECT_EQ(bits_of(o.weights_out[0]), bits_of(kFloorScale));
    EXPECT_EQ(bits_of(o.weights_out[1]), bits_of(-3.0f * kFloorScale));
    // any position: RoPE may produce -0 (fma(0, c<0, -0) = -0), so codes are zeros of either sign
    const iqtest::Outputs o2 = run_everywhere(rows_case(dt, {zero}, {1.0f}, 37));
    for (int i = 0; i < 128; ++i) ASSERT_TRUE(o2.q_out[i] == 0x00 || o2.q_out[i] == 0x80) << i;
    EXPECT_EQ(bits_of(o2.weights_out[0]), bits_of(kFloorScale));
  }
}

TEST(EdgeRows, TinyRowKeepsTheFloor) {
  // x[0] = t, rest 0, position 0: every Hadamard output is t, y = t * k (k = 0x1.6a09e6p-4f).
  for (float t : {1e-5f, 1e-4f, 1e-30f}) {
    std::vector<float> row(128, 0.0f);
    row[0] = t;
    const iqtest::Outputs o = run_everywhere(rows_case(DType::kFloat32, {row}, {2.0f}, 0));
    const float y = t * 0x1.6a09e6p-4f;
    ASSERT_LT(y, 1e-4f);
    EXPECT_EQ(bits_of(o.weights_out[0]), bits_of(2.0f * kFloorScale)) << "t=" << t;
    // v = y / floor-scale, nearest code by the independent definition (not near a tie here)
    const double v = double(y) / double(kFloorScale);
    const int want = e4m3_nearest_bruteforce(float(v));
    for (int i = 0; i < 128; ++i) ASSERT_EQ(o.q_out[i], want) << "t=" << t << " i=" << i;
  }
  // amax just above the floor: the scale is amax / 448, no longer the floor, and codes hit 448
  std::vector<float> row(128, 0.0f);
  row[0] = 2e-3f;
  const iqtest::Outputs o = run_everywhere(rows_case(DType::kFloat32, {row}, {1.0f}, 0));
  const float y = 2e-3f * 0x1.6a09e6p-4f;
  ASSERT_GT(y, 1e-4f);
  EXPECT_EQ(bits_of(o.weights_out[0]), bits_of(y / 448.0f));
  for (int i = 0; i < 128; ++i) ASSERT_EQ(o.q_out[i], 0x7e) << i;
}

TEST(EdgeRows, InfInRowGives448AndInfiniteWeights) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    std::vector<float> row(128);
    for (float& v : row) v = nd(rng);
    std::vector<float> pos_inf = row, neg_inf = row;
    pos_inf[5] = INFINITY;
    neg_inf[63] = -INFINITY;
    // The Hadamard spreads the Inf to every output: scale = Inf, inv = 0, Inf * 0 = NaN -> +448.
    const iqtest::Outputs o =
        run_everywhere(rows_case(dt, {pos_inf, pos_inf, pos_inf, neg_inf}, {2.0f, -3.0f, 0.0f, 1.0f}, 11));
    for (int i = 0; i < 4 * 128; ++i) ASSERT_EQ(o.q_out[i], 0x7e) << i;
    EXPECT_EQ(bits_of(o.weights_out[0]), bits_of(INFINITY));
    EXPECT_EQ(bits_of(o.weights_out[1]), bits_of(-INFINITY));
    EXPECT_TRUE(std::isnan(o.weights_out[2])) << "weight 0 times Inf";
    EXPECT_EQ(bits_of(o.weights_out[3]), bits_of(INFINITY));
    // an Inf in the rotated half: codes are still all +448
    std::vector<float> rope_inf = row;
    rope_inf[100] = -INFINITY;
    const iqtest::Outputs o2 = run_everywhere(rows_case(dt, {rope_inf}, {1.0f}, 11));
    for (int i = 0; i < 128; ++i) ASSERT_EQ(o2.q_out[i], 0x7e) << i;
  }
}

TEST(EdgeRows, OverflowGivesSignedZerosForFiniteValues) {
  // x0 = x1 = 3e38, x2 = 1: the stride-1 butterfly overflows to Inf. Outputs by i & 3:
  // 0 -> Inf, 1 -> +1, 2 -> Inf, 3 -> -1 (times k). amax = Inf, inv = 0: Inf -> NaN -> +448
  // (0x7e), +k * 0 = +0 (0x00), -k * 0 = -0 (0x80). weights_out = +-Inf, NaN for weight 0.
  for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<float> row(128, 0.0f);
    row[0] = row[1] = 3e38f;
    row[2] = 1.0f;
    const iqtest::Outputs o = run_everywhere(rows_case(dt, {row, row, row}, {1.5f, -1.0f, 0.0f}, 0));
    const std::uint8_t want[4] = {0x7e, 0x00, 0x7e, 0x80};
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 128; ++i) ASSERT_EQ(o.q_out[r * 128 + i], want[i & 3]) << "row " << r << " i " << i;
    EXPECT_EQ(bits_of(o.weights_out[0]), bits_of(INFINITY));
    EXPECT_EQ(bits_of(o.weights_out[1]), bits_of(-INFINITY));
    EXPECT_TRUE(std::isnan(o.weights_out[2]));
  }
}

TEST(EdgeRows, NaNInRowGives448AndFloorScale) {
  // A NaN input reaches every Hadamard output: every y is NaN, amax is NaN, the scale is the
  // 1e-4 floor (fmax ignores NaN), every v is NaN -> +448 (also for a negative NaN).
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<float> row(128);
    for (int i = 0; i < 128; ++i) row[i] = float(i % 7) - 3.0f;
    std::vector<float> a = row, b = row;
    a[17] = NAN;
    b[90] = -NAN;
    const iqtest::Outputs o = run_everywhere(rows_case(dt, {a, b}, {1.0f, -2.0f}, 3));
    for (int i = 0; i < 256; ++i) ASSERT_EQ(o.q_out[i], 0x7e) << i;
    EXPECT_EQ(bits_of(o.weights_out[0]), bits_of(kFloorScale));
    EXPECT_EQ(bits_of(o.weights_out[1]), bits_of(-2.0f * kFloorScale));
  }
}

// Steps 5 and 8 directly: a NaN among finite y is ignored by amax and becomes +448 itself;
// the others are quantized with the finite amax.
TEST(EdgeRows, NaNAmongFiniteValuesAtTheQuantizeStep) {
  float y[128];
  for (int i = 0; i < 128; ++i) y[i] = float(i) - 60.0f;  // after the 1/sqrt(128) factor: amax = 67 k
  y[3] = NAN;
  y[4] = -NAN;
  float scaled[128];
  for (int i = 0; i < 128; ++i) scaled[i] = y[i] * 0x1.6a09e6p-4f;
  const float scale = detail::scale_and_amax_row<detail::RecipeT<RecipeId::kV4Fp8>>(y);  // multiplies y by k in place
  EXPECT_EQ(bits_of(scale), bits_of((67.0f * 0x1.6a09e6p-4f) / 448.0f));
  const float inv = 1.0f / scale;
  for (int i = 0; i < 128; ++i) {
    const std::uint8_t got = detail::quantize_value(y[i], inv);
    if (i == 3 || i == 4) {
      EXPECT_EQ(got, 0x7e) << i;
    } else {
      const float v = scaled[i] * inv;
      EXPECT_EQ(int(got), e4m3_nearest_bruteforce(v)) << i;
    }
  }
  EXPECT_EQ(detail::quantize_value(127.0f * 0x1.6a09e6p-4f, inv), 0x7e);  // saturates at 448
}

}  // namespace
