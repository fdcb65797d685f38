// The cross-backend conformance harness: every backend this build and machine can run
// (reference, cpu x each supported ISA x thread counts, cuda when a device is usable) against
// the scalar reference, on fresh random inputs, compared byte for byte (q_out codes, q_sf block
// scales of FP4 recipes, weights_out bits), for every recipe of all_recipes().
//
// Grid per recipe: B in {0, 1, 7, 333} x H in {1, 8, 64, 128} x dtype {bf16, fp16, fp32} x
// positions {int32, int64} x weight row stride {H, H + 5}. The v4_fp8 recipe runs the whole
// grid; the other recipes run, per dtype, every (B, H) pair with a rotating (positions, stride)
// choice, so that every value of every axis (and every pair of B, H, dtype) appears with every
// recipe while the runtime stays sensible on a small machine. FP8 recipes also rotate the q_out
// dtype through the recipe's fp8 dtype and the uint8 / int8 raw-code forms.
// Inputs come from iqtest::random_case (per-row magnitudes over decades, outlier channels, zero /
// tiny / integer / spike / subnormal / huge rows, rows holding Inf or NaN, FP8 rounding-tie rows,
// E2M1 threshold rows, bf16-tie rows, random weight_scale; freqs in the recipe's layout). The
// expected outputs are the reference's, written over one poison pattern; each backend writes over
// another, so an unwritten byte is a difference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>

#include "iq_test_util.h"

namespace {

using namespace indexer_q;
using iqtest::BackendUnderTest;
using iqtest::HostCase;
using iqtest::Outputs;

struct GridParam {
  RecipeId recipe;
  DType dtype;
};

void PrintTo(const GridParam& p, std::ostream* os) { *os << recipe_name(p.recipe) << "/" << dtype_name(p.dtype); }

std::string param_name(const testing::TestParamInfo<GridParam>& info) {
  return std::string(recipe_name(info.param.recipe)) + "_" + dtype_name(info.param.dtype);
}

std::vector<GridParam> grid_params() {
  std::vector<GridParam> v;
  for (RecipeId r : all_recipes())
    for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) v.push_back({r, dt});
  return v;
}

class Conformance : public testing::TestWithParam<GridParam> {};

TEST_P(Conformance, AllBackendsMatchReferenceBytes) {
  const GridParam gp = GetParam();
  const bool full = gp.recipe == RecipeId::kV4Fp8;
  const bool fp8 = recipe(gp.recipe).format != OutFormat::kE2M1;
  // Threads 1 and 3: inline and an uneven split across the pool (2 is covered by the golden test).
  const std::vector<BackendUnderTest> backends = iqtest::backends_under_test({1, 3});
  BackendUnderTest reference = backends.front();
  ASSERT_EQ(reference.options.backend, Backend::kReference);
  std::uint64_t seed = 0x9e3779b97f4a7c15ull ^ (std::uint64_t(gp.dtype) << 8) ^ (std::uint64_t(gp.recipe) << 32);
  const std::int64_t Bs[] = {0, 1, 7, 333}, Hs[] = {1, 8, 64, 128};
  const DType pos_types[] = {DType::kInt32, DType::kInt64};
  const int out_dtypes[] = {-1, int(DType::kUInt8), int(DType::kInt8)};
  int cases = 0, seen_combo[2][2] = {{0, 0}, {0, 0}}, seen_out[3] = {0, 0, 0};
  for (int ib = 0; ib < 4; ++ib) {
    for (int ih = 0; ih < 4; ++ih) {
      for (int combo = 0; combo < 4; ++combo) {  // (positions, padded weight)
        if (!full && combo != (ib + ih + int(gp.recipe)) % 4) continue;
        const DType pos_dtype = pos_types[combo & 1];
        const bool padded = (combo >> 1) != 0;
        const std::int64_t B = Bs[ib], H = Hs[ih];
        const std::int64_t stride = padded ? H + 5 : H;
        HostCase c = iqtest::random_case(B, H, gp.dtype, pos_dtype, stride, ++seed, gp.recipe);
        const int io = fp8 ? (ib * 4 + ih + combo) % 3 : 0;
        c.q_out_dtype = out_dtypes[io];
        SCOPED_TRACE(c.describe());
        Outputs want;
        Status s = iqtest::run_case(reference, c, &want, 0xA5);
        ASSERT_TRUE(s.ok()) << s.message();
        for (const BackendUnderTest& be : backends) {
          Outputs got;
          s = iqtest::run_case(be, c, &got, 0x5A);
          ASSERT_TRUE(s.ok()) << be.name << ": " << s.message();
          const iqtest::Comparison cmp = iqtest::compare(got, want, H);
          EXPECT_TRUE(cmp.exact()) << be.name << ": " << cmp.summary() << " (vs the reference)";
        }
        ++seen_combo[combo & 1][combo >> 1];
        ++seen_out[io];
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, full ? 64 : 16);
  // every value of every axis took part
  for (auto& row : seen_combo)
    for (int n : row) EXPECT_GT(n, 0);
  if (fp8)
    for (int n : seen_out) EXPECT_GT(n, 0);
}

INSTANTIATE_TEST_SUITE_P(Grid, Conformance, testing::ValuesIn(grid_params()), param_name);

// The harness itself must be able to fail: a single flipped output byte or weight is caught,
// and a reference run over a poison pattern differs from the same run over another poison when
// nothing is written (B = 1 compared against a poisoned buffer).
TEST(ConformanceHarness, DetectsOneWrongByteAndOneWrongWeight) {
  const HostCase c = iqtest::random_case(7, 8, DType::kBFloat16, DType::kInt64, 8, 1234);
  BackendUnderTest ref = iqtest::backends_under_test({1}).front();
  Outputs a, b;
  ASSERT_TRUE(iqtest::run_case(ref, c, &a, 0x00).ok());
  ASSERT_TRUE(iqtest::run_case(ref, c, &b, 0xff).ok());
  EXPECT_TRUE(iqtest::compare(a, b, 8).exact());
  b.q_out[200] ^= 1;
  b.weights_out[3] = std::nextafter(b.weights_out[3], INFINITY);
  const iqtest::Comparison cmp = iqtest::compare(a, b, 8);
  EXPECT_EQ(cmp.q_bytes, 1);
  EXPECT_EQ(cmp.weights, 1);
  Outputs poisoned;
  poisoned.q_out.assign(a.q_out.size(), 0xA5);
  poisoned.weights_out.assign(a.weights_out.size(), iqtest::float_of(0xA5A5A5A5u));
  EXPECT_GT(iqtest::compare(poisoned, a, 8).q_bytes, 0);
}

// Says in the test report whether CUDA took part: skipped when no device is usable.
TEST(ConformanceHarness, CudaTakesPartWhenAvailable) {
  const auto backends = iqtest::backends_under_test({1});
  const bool listed = std::any_of(backends.begin(), backends.end(), [](const BackendUnderTest& b) { return b.cuda; });
  if (!backend_available(Backend::kCuda)) {
    EXPECT_FALSE(listed);
    GTEST_SKIP() << "no usable CUDA device (or CUDA not built): the harness compared host backends only";
  }
#if defined(INDEXER_Q_WITH_CUDA)
  EXPECT_TRUE(listed);
#else
  ADD_FAILURE() << "backend_available(kCuda) is true in a build without CUDA";
#endif
}

// The random inputs really contain what the harness claims to exercise.
TEST(ConformanceHarness, RandomInputsCoverEdgeRows) {
  const HostCase c = iqtest::random_case(333, 128, DType::kFloat32, DType::kInt64, 128, 77);
  const float* q = reinterpret_cast<const float*>(c.q_input.data());
  std::int64_t zero_rows = 0, inf_rows = 0, nan_rows = 0, tiny_rows = 0;
  double lo = INFINITY, hi = 0;
  for (std::int64_t r = 0; r < c.B * c.H; ++r) {
    bool zero = true, inf = false, nan = false;
    float amax = 0;
    for (int i = 0; i < 128; ++i) {
      const float v = q[r * 128 + i];
      zero = zero && v == 0.0f;
      inf = inf || std::isinf(v);
      nan = nan || std::isnan(v);
      if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
    }
    zero_rows += zero;
    inf_rows += inf;
    nan_rows += nan;
    tiny_rows += (!zero && amax < 1e-20f);
    if (!zero && amax > 0) {
      lo = std::min(lo, double(amax));
      hi = std::max(hi, double(amax));
    }
  }
  EXPECT_GT(zero_rows, 0);
  EXPECT_GT(inf_rows, 0);
  EXPECT_GT(nan_rows, 0);
  EXPECT_GT(tiny_rows, 0);
  EXPECT_GT(hi / lo, 1e10) << "row magnitudes should span many decades";
}

// ... and the rows added for the other recipes: subnormal rows, huge rows, FP8 tie rows (exact
// midpoints between e4m3 values once scaled by the row's power-of-two scale) and E2M1 threshold
// rows (a two-spike row whose Hadamard outputs sit on the e2m1 thresholds).
TEST(ConformanceHarness, RandomInputsCoverTiesThresholdsSubnormalsAndHugeRows) {
  const HostCase c = iqtest::random_case(64, 64, DType::kFloat32, DType::kInt64, 64, 78, RecipeId::kV32Fp8);
  const float* q = reinterpret_cast<const float*>(c.q_input.data());
  std::int64_t subnormal_rows = 0, huge_rows = 0, tie_rows = 0, threshold_rows = 0;
  const float k = iqtest::hadamard_k();
  for (std::int64_t r = 0; r < c.B * c.H; ++r) {
    const float* x = q + r * 128;
    bool sub = true, huge = true, nonzero = false;
    float amax = 0;
    for (int i = 0; i < 128; ++i) {
      sub = sub && std::fabs(x[i]) < 0x1p-126f;
      huge = huge && std::fabs(x[i]) > 1e38f;
      nonzero = nonzero || x[i] != 0.0f;
      amax = std::max(amax, std::fabs(x[i]));
    }
    subnormal_rows += sub && nonzero;
    huge_rows += huge;
    // tie row: amax = 448 * 2^m in dims 64..127, every other value / 2^m an e4m3 midpoint
    int e = 0;
    if (amax > 0 && std::frexp(amax / 448.0f, &e) == 0.5f) {
      bool ties = true;
      for (int i = 64; i < 128 && ties; ++i) {
        const double v = std::fabs(double(x[i])) / std::ldexp(1.0, e - 1);
        if (v == 448.0) continue;
        bool mid = false;
        for (int code = 0; code < 126 && !mid; ++code)
          mid = v == 0.5 * (iqtest::e4m3_value(code) + iqtest::e4m3_value(code + 1));
        ties = mid;
      }
      tie_rows += ties;
    }
    // threshold row: two nonzero values x[0], x[j] with (x[0] + x[j]) * k rounding to 3.5, 5 or 6 * 2^m
    int nz = 0;
    for (int i = 0; i < 128; ++i) nz += x[i] != 0.0f;
    if (nz == 2 && x[0] != 0.0f) {
      float other = 0;
      for (int i = 1; i < 128; ++i) other = x[i] != 0.0f ? x[i] : other;
      const float t = std::fabs(iqtest::float_of((iqtest::bits_of((x[0] + other) * k) + 0x8000u) & 0xffff0000u));
      int te = 0;
      const float fr = std::frexp(t, &te);
      threshold_rows += fr == 0.875f || fr == 0.625f || fr == 0.75f;
    }
  }
  EXPECT_GT(subnormal_rows, 0);
  EXPECT_GT(huge_rows, 0);
  EXPECT_GT(tie_rows, 0);
  EXPECT_GT(threshold_rows, 0);
}

// FP4: the harness sees one wrong scale byte too.
TEST(ConformanceHarness, DetectsOneWrongScaleByte) {
  const HostCase c = iqtest::random_case(7, 8, DType::kBFloat16, DType::kInt64, 8, 1235, RecipeId::kV4Fp4);
  BackendUnderTest ref = iqtest::backends_under_test({1}).front();
  Outputs a, b;
  ASSERT_TRUE(iqtest::run_case(ref, c, &a, 0x00).ok());
  ASSERT_TRUE(iqtest::run_case(ref, c, &b, 0xff).ok());
  ASSERT_EQ(a.q_out.size(), 7u * 8 * 64);
  ASSERT_EQ(a.q_sf.size(), 7u * 8 * 4);
  EXPECT_TRUE(iqtest::compare(a, b, 8).exact()) << iqtest::compare(a, b, 8).summary();
  b.q_sf[13] ^= 1;
  const iqtest::Comparison cmp = iqtest::compare(a, b, 8);
  EXPECT_EQ(cmp.q_bytes, 0);
  EXPECT_EQ(cmp.sf_bytes, 1);
  EXPECT_EQ(cmp.weights, 0);
}

// B = 0 on every backend and recipe: ok, and the harness touches no null buffer (it used to
// memset a null pointer here, which UBSan reports).
TEST(ConformanceHarness, EmptyBatchOnEveryBackendAndRecipe) {
  for (RecipeId r : all_recipes()) {
    const HostCase c = iqtest::random_case(0, 8, DType::kBFloat16, DType::kInt32, 13, 5, r);
    for (const BackendUnderTest& be : iqtest::backends_under_test({1, 3})) {
      Outputs o;
      const Status s = iqtest::run_case(be, c, &o, 0xA5);
      EXPECT_TRUE(s.ok()) << recipe_name(r) << " " << be.name << ": " << s.message();
      EXPECT_TRUE(o.q_out.empty() && o.q_sf.empty() && o.weights_out.empty());
    }
  }
}

}  // namespace
