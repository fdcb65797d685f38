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
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
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

// Re-stores the case's weight in dtype dt (a bf16 / fp16 value is an exact fp32 one; fp32 -> bf16
// or fp16 rounds, which only changes the inputs), so weight and q_input dtypes differ.
static void retype_weight(HostCase& c, DType dt) {
  std::vector<std::uint8_t> w(std::size_t(c.B * c.weight_stride) * dtype_size(dt));
  for (std::size_t i = 0; i < std::size_t(c.B * c.weight_stride); ++i)
    iqtest::store_as(w, dt, i, iqtest::load_as(c.weight, c.wdtype(), i));
  c.weight = std::move(w);
  c.weight_dtype = int(dt);
}

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
  int cases = 0, seen_combo[2][2] = {{0, 0}, {0, 0}}, seen_out[3] = {0, 0, 0}, seen_wdtype[3] = {0, 0, 0};
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
        c.weights_out_2d = ((ib + ih + combo) & 1) != 0;  // (B, H) and (B, H, 1) in turn
        // The weight in every float dtype in turn, independently of q_input's.
        const DType wdts[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
        const int iw = (ib + 2 * ih + combo) % 3;
        if (wdts[iw] != c.dtype) retype_weight(c, wdts[iw]);
        ++seen_wdtype[iw];
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
  for (int n : seen_wdtype) EXPECT_GT(n, 0);
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

// ---------------------------------------------------------------------------------------
// vLLM's forms (docs/RECIPES.md): edge rows whose expected bytes are written out here, through
// every backend, and compared with the reference as well (bytes the spec leaves open).
// One token at position 0 (cos 1, sin 0: RoPE changes no nonzero value), fp32 inputs so that the
// values are exact; dims 0..63 pass through unrounded, dims 64..127 are rounded to bf16.
// ---------------------------------------------------------------------------------------
HostCase vllm_rows(RecipeId r, const std::vector<std::vector<float>>& rows, const std::vector<float>& w) {
  const std::int64_t H = std::int64_t(rows.size());
  HostCase c = iqtest::blank_case(1, H, DType::kFloat32, DType::kInt64, H, 4, r);
  for (std::size_t h = 0; h < rows.size(); ++h) {
    for (int i = 0; i < 128; ++i) iqtest::store_as(c.q_input, c.dtype, h * 128 + i, rows[h][std::size_t(i)]);
    iqtest::store_as(c.weight, c.dtype, h, w[h]);
  }
  c.weight_scale = float(1.0 / std::sqrt(128.0));  // softmax_scale
  c.head_scale = float(1.0 / std::sqrt(3.0));      // head_scale
  return c;
}

// Runs c on every backend (threads 1 and 2, both weights_out shapes): each result equals the
// reference's bytes; returns the reference's outputs for the by-hand checks.
Outputs run_everywhere(const HostCase& c0) {
  const std::vector<BackendUnderTest> backends = iqtest::backends_under_test({1, 2});
  Outputs want;
  HostCase c = c0;
  EXPECT_TRUE(iqtest::run_case(backends.front(), c, &want, 0xA5).ok());
  for (const BackendUnderTest& be : backends) {
    for (bool two_d : {false, true}) {
      c.weights_out_2d = two_d;
      Outputs got;
      const Status s = iqtest::run_case(be, c, &got, 0x5A);
      EXPECT_TRUE(s.ok()) << be.name << ": " << s.message();
      const iqtest::Comparison cmp = iqtest::compare(got, want, c.H);
      EXPECT_TRUE(cmp.exact()) << be.name << (two_d ? " (B, H)" : " (B, H, 1)") << ": " << cmp.summary();
    }
  }
  return want;
}

TEST(VllmEdgeRows, Fp8PowerOfTwoScaleSatfiniteAndSigns) {
  const float tie_bf16 = 1.0625f + 0x1p-12f;  // fp8 of it: 1.125; of bf16(it) = 1.0625 (a tie): 1.0
  std::vector<std::vector<float>> rows(6, std::vector<float>(128, 0.0f));
  // row 0: amax 56 = 448 * 2^-3: s = 2^-3 exactly, no rounding up: 56 -> 448 (0x7e), -1 -> -8
  //   (0xd0), 2.125 -> 17: a tie between 16 and 18, to even 16 (0x58)
  rows[0][0] = 56.0f, rows[0][1] = -1.0f, rows[0][2] = 2.125f;
  // row 1: amax one ulp above 56: s rounds up to 2^-2: -> 224 (0x76), -4 (0xc8), 8.5 -> 8 (0x50)
  rows[1][0] = std::nextafter(56.0f, 100.0f), rows[1][1] = -1.0f, rows[1][2] = 2.125f;
  // row 2: amax below the 1e-4 floor: q_scale = 2^-22 (1e-4 / 448 = 2.23e-7 rounded up);
  //   -0 -> 0x80, -1e-12 -> -4.2e-6 -> -0 (0x80), 1e-12 -> 0x00, 3 * 2^-32 -> 3 * 2^-10 (a tie
  //   between the subnormals 2^-9 and 2^-8: to even, 0x02), -2^-32 -> -2^-10 (a tie: -0, 0x80)
  rows[2][0] = -0.0f, rows[2][1] = -1e-12f, rows[2][2] = 1e-12f, rows[2][3] = 3 * 0x1p-32f, rows[2][4] = -0x1p-32f;
  // row 3: NaNs are ignored by amax (3: q_scale 2^-7) and stay NaN (0x7f, whatever their sign);
  //   2 -> 256 (0x78), -3 -> -384 (0xfc)
  rows[3][0] = NAN, rows[3][1] = 2.0f, rows[3][2] = -NAN, rows[3][3] = -3.0f;
  // row 4: an Inf: q_scale = +Inf: +-Inf / Inf = NaN (0x7f), 1 -> +0 (0x00), -0.5 -> -0 (0x80)
  rows[4][0] = INFINITY, rows[4][1] = -INFINITY, rows[4][2] = 1.0f, rows[4][3] = -0.5f;
  // row 5: q_scale 1 (amax 448): 17 -> 16 (0x58), 19 -> 20 (0x5a) (ties to even); dims 0..63 are
  //   not rounded (dim 5: 0x39), dims 64..127 are rounded to bf16 first (dims 64, 67: +-1.0)
  rows[5][0] = 448.0f, rows[5][1] = 17.0f, rows[5][2] = 19.0f, rows[5][5] = tie_bf16;
  rows[5][64] = tie_bf16, rows[5][67] = -tie_bf16;
  const std::vector<float> w = {1.5f, -0.75f, 3.0f, 0.5f, -2.0f, 1.0f};
  const float q_scale[6] = {0x1p-3f, 0x1p-2f, 0x1p-22f, 0x1p-7f, INFINITY, 1.0f};
  const HostCase c = vllm_rows(RecipeId::kVllmV4Fp8, rows, w);
  const Outputs o = run_everywhere(c);
  ASSERT_EQ(o.q_out.size(), 6u * 128);
  auto expect_row = [&](int r, std::vector<std::pair<int, int>> codes) {
    std::vector<int> want(128, 0x00);
    for (auto [i, code] : codes) want[std::size_t(i)] = code;
    for (int i = 0; i < 128; ++i)
      EXPECT_EQ(int(o.q_out[std::size_t(r * 128 + i)]), want[std::size_t(i)]) << "row " << r << " dim " << i;
    // weights_out = ((w * q_scale) * softmax_scale) * head_scale, three float32 multiplies
    const float wo = ((w[std::size_t(r)] * q_scale[r]) * c.weight_scale) * c.head_scale;
    EXPECT_EQ(iqtest::bits_of(o.weights_out[std::size_t(r)]), iqtest::bits_of(wo)) << "row " << r;
  };
  expect_row(0, {{0, 0x7e}, {1, 0xd0}, {2, 0x58}});
  expect_row(1, {{0, 0x76}, {1, 0xc8}, {2, 0x50}});
  expect_row(2, {{0, 0x80}, {1, 0x80}, {2, 0x00}, {3, 0x02}, {4, 0x80}});
  expect_row(3, {{0, 0x7f}, {1, 0x78}, {2, 0x7f}, {3, 0xfc}});
  expect_row(4, {{0, 0x7f}, {1, 0x7f}, {2, 0x00}, {3, 0x80}});
  expect_row(5, {{0, 0x7e}, {1, 0x58}, {2, 0x5a}, {5, 0x39}, {64, 0x38}, {67, 0xb8}});
  EXPECT_TRUE(std::isinf(o.weights_out[4]) && o.weights_out[4] < 0);
}

TEST(VllmEdgeRows, Mxfp4TiesFloorScalesAndSigns) {
  // e2m1 ties to even (docs/RECIPES.md step 8), then values just off the ties, signs on zero codes
  const float P[16] = {6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5, -0.125f};
  const int PC[16] = {7, 0, 2, 2, 4, 4, 6, 6, 8, 0xa, 0xa, 0xc, 0xc, 0xe, 0xe, 8};
  const float e = 0x1p-10f;
  const float P2[16] = {0.25f + e, 0.75f - e, 0.75f + e, 1.25f + e, 1.75f - e, 2.5f + e, 3.5f - e, 5 + e,
                        -(0.25f + e), -0.1f, -0.0f, 0.0f, 0.5f, 1.5f, 3, 4};
  const int P2C[16] = {1, 1, 2, 3, 3, 5, 5, 7, 9, 8, 8, 0, 1, 3, 5, 6};
  std::vector<std::vector<float>> rows(2, std::vector<float>(128, 0.0f));
  std::vector<int> want0(128, 0), want1(128, 0);
  // row 0, block 0 (dims 0..31): P, P2 at scale 1 (amax 6: 6 * fl(1/6) rounds to 1: e = 127)
  // block 1 (32..63): the same times 2^-10 (e = 117); block 3 (96..127, through RoPE and the bf16
  // rounding, exact here): P times 2^5 (e = 132), zeros after it; block 2 (64..95): amax 3 * 2^-130,
  // below the floor 6 * 2^-126: e = 1, inv = 2^126: 3 * 2^-130 -> 0.1875 (0), -2^-129 -> -0.125 (8)
  for (int i = 0; i < 16; ++i) {
    rows[0][std::size_t(i)] = P[i], want0[std::size_t(i)] = PC[i];
    rows[0][std::size_t(16 + i)] = P2[i], want0[std::size_t(16 + i)] = P2C[i];
    rows[0][std::size_t(32 + i)] = P[i] * 0x1p-10f, want0[std::size_t(32 + i)] = PC[i];
    rows[0][std::size_t(48 + i)] = P2[i] * 0x1p-10f, want0[std::size_t(48 + i)] = P2C[i];
    rows[0][std::size_t(96 + i)] = P[i] * 32.0f, want0[std::size_t(96 + i)] = PC[i];
  }
  rows[0][64] = 3 * 0x1p-130f, rows[0][66] = -0x1p-129f, want0[66] = 8;
  // row 1: block 0: an infinite amax: e = 254, inv = bits 0 = 0: -Inf * 0 -> NaN, 3 -> +0 (0),
  //   -0.5 -> -0 (8), NaN; a NaN's code is 0x7 whatever its sign bit (the library's choice where
  //   the spec is silent: x86 makes Inf * 0 a negative NaN, CUDA a positive one);
  // block 1: a -NaN is ignored by amax (1.5: 1.5 * fl(1/6) -> 0.25, e = 125, inv 4) and gives 0x7;
  //   1.5 -> 6 (7);
  // block 2: amax 6 + 2^-5 (a bf16 value): rounded up to e = 128, inv 0.5: -> 3.015625 (5);
  // block 3: amax 6 (e = 127); 1.25 + 2^-12 is rounded to bf16 (1.25, a tie: 1.0, code 2) before
  //   the e2m1 rounding (which alone would give 1.5, code 3).
  rows[1][0] = -INFINITY, rows[1][1] = 3.0f, rows[1][2] = -0.5f, rows[1][3] = NAN;
  want1[0] = 7, want1[2] = 8, want1[3] = 7;
  rows[1][32] = -NAN, rows[1][33] = 1.5f, want1[32] = 7, want1[33] = 7;
  rows[1][64] = 6.03125f, want1[64] = 5;
  rows[1][96] = 6.0f, want1[96] = 7, rows[1][98] = 1.25f + 0x1p-12f, want1[98] = 2;
  const std::vector<float> w = {-1.5f, 0.3f};
  const HostCase c = vllm_rows(RecipeId::kVllmV4Mxfp4, rows, w);
  const Outputs o = run_everywhere(c);
  ASSERT_EQ(o.q_out.size(), 2u * 64);
  ASSERT_EQ(o.q_sf.size(), 2u * 4);
  const std::vector<int>* want[2] = {&want0, &want1};
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 128; ++i) {
      const int byte = o.q_out[std::size_t(r * 64 + i / 2)];
      EXPECT_EQ((i & 1) ? byte >> 4 : byte & 0xf, (*want[r])[std::size_t(i)]) << "row " << r << " dim " << i;
    }
    // weights_out = (w * softmax_scale) * head_scale, two float32 multiplies, no scale folded in
    const float wo = (w[std::size_t(r)] * c.weight_scale) * c.head_scale;
    EXPECT_EQ(iqtest::bits_of(o.weights_out[std::size_t(r)]), iqtest::bits_of(wo)) << "row " << r;
  }
  const std::uint8_t sf0[4] = {127, 117, 1, 132}, sf1[4] = {254, 125, 128, 127};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(int(o.q_sf[std::size_t(k)]), int(sf0[k])) << "row 0 block " << k;
    EXPECT_EQ(int(o.q_sf[std::size_t(4 + k)]), int(sf1[k])) << "row 1 block " << k;
  }
}

// weights_out uses softmax_scale and head_scale as two separate float32 multiplies: on rows
// where that differs from one multiply by fl(softmax_scale * head_scale) (checked to happen
// here), every backend gives the two-step value.
TEST(VllmEdgeRows, HeadScaleIsASeparateMultiply) {
  for (RecipeId r : {RecipeId::kVllmV4Fp8, RecipeId::kVllmV4Mxfp4}) {
    SCOPED_TRACE(recipe_name(r));
    const std::int64_t H = 64;
    // every row: amax 37.5 -> fp8 q_scale 2^-3 (37.5 / 448 = 0.084 -> 0.125)
    std::vector<std::vector<float>> rows(std::size_t(H), std::vector<float>(128, 0.0f));
    std::vector<float> w(static_cast<std::size_t>(H));
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    for (std::int64_t h = 0; h < H; ++h) {
      rows[std::size_t(h)][0] = 37.5f;
      w[std::size_t(h)] = iqtest::float_of(std::uint32_t(iqtest::to_bf16(nd(rng))) << 16);  // bf16-exact weights
    }
    HostCase c = vllm_rows(r, rows, w);
    c.weight_scale = float(1.0 / std::sqrt(128.0));
    c.head_scale = float(1.0 / std::sqrt(64.0 * 3));
    const float q_scale = r == RecipeId::kVllmV4Fp8 ? 0.125f : 1.0f;
    const Outputs o = run_everywhere(c);
    int differs = 0;
    for (std::int64_t h = 0; h < H; ++h) {
      const float wq = w[std::size_t(h)] * q_scale;
      const float two_step = (wq * c.weight_scale) * c.head_scale;
      const float one_step = wq * (c.weight_scale * c.head_scale);
      differs += iqtest::bits_of(two_step) != iqtest::bits_of(one_step);
      EXPECT_EQ(iqtest::bits_of(o.weights_out[std::size_t(h)]), iqtest::bits_of(two_step)) << "row " << h;
    }
    EXPECT_GT(differs, 5) << "the case should separate the two-step product from the one-step one";
  }
}

}  // namespace
