// The cross-backend conformance harness: every backend this build and machine can run
// (reference, cpu x each supported ISA x thread counts, cuda when a device is usable) against
// the scalar reference, on fresh random inputs, compared byte for byte.
//
// Grid: B in {0, 1, 7, 333} x H in {1, 8, 64, 128} x dtype {bf16, fp16, fp32} x positions
// {int32, int64} x weight row stride {H, H + 5}. Inputs come from iqtest::random_case (per-row
// magnitudes over decades, outlier channels, zero / tiny / integer / spike rows, rows holding
// Inf or NaN, random weight_scale). The expected outputs are the reference's, written over
// one poison pattern; each backend writes over another, so an unwritten byte is a difference.
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
  DType dtype;
  DType pos_dtype;
  bool padded_weight;  // weight row stride H + 5 instead of H
};

void PrintTo(const GridParam& p, std::ostream* os) {
  *os << dtype_name(p.dtype) << "/positions " << dtype_name(p.pos_dtype) << "/weight stride "
      << (p.padded_weight ? "H+5" : "H");
}

std::string param_name(const testing::TestParamInfo<GridParam>& info) {
  return std::string(dtype_name(info.param.dtype)) + "_pos" + dtype_name(info.param.pos_dtype) +
         (info.param.padded_weight ? "_wstride_H_plus_5" : "_wstride_H");
}

class Conformance : public testing::TestWithParam<GridParam> {};

TEST_P(Conformance, AllBackendsMatchReferenceBytes) {
  const GridParam gp = GetParam();
  // Threads 1 and 3: inline and an uneven split across the pool (2 is covered by the golden test).
  const std::vector<BackendUnderTest> backends = iqtest::backends_under_test({1, 3});
  BackendUnderTest reference = backends.front();
  ASSERT_EQ(reference.options.backend, Backend::kReference);
  std::uint64_t seed = 0x9e3779b97f4a7c15ull ^ (std::uint64_t(gp.dtype) << 8) ^
                       (std::uint64_t(gp.pos_dtype) << 16) ^ (gp.padded_weight ? 1ull << 24 : 0);
  int cases = 0;
  for (std::int64_t B : {0, 1, 7, 333}) {
    for (std::int64_t H : {1, 8, 64, 128}) {
      const std::int64_t stride = gp.padded_weight ? H + 5 : H;
      const HostCase c = iqtest::random_case(B, H, gp.dtype, gp.pos_dtype, stride, ++seed);
      SCOPED_TRACE(c.describe());
      Outputs want;
      Status s = iqtest::run_case(reference, c, &want, 0xA5);
      ASSERT_TRUE(s.ok()) << s.message();
      for (const BackendUnderTest& be : backends) {
        Outputs got;
        s = iqtest::run_case(be, c, &got, 0x5A);
        ASSERT_TRUE(s.ok()) << be.name << ": " << s.message();
        const iqtest::Comparison cmp = iqtest::compare(got, want, H);
        EXPECT_TRUE(cmp.exact()) << be.name << ": " << cmp.fp8_bytes << " fp8 bytes and " << cmp.weights
                                 << " weights_out differ from the reference;" << cmp.first;
      }
      ++cases;
    }
  }
  EXPECT_EQ(cases, 16);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, Conformance,
    testing::Values(GridParam{DType::kBFloat16, DType::kInt32, false}, GridParam{DType::kBFloat16, DType::kInt64, true},
                    GridParam{DType::kBFloat16, DType::kInt32, true}, GridParam{DType::kBFloat16, DType::kInt64, false},
                    GridParam{DType::kFloat16, DType::kInt32, false}, GridParam{DType::kFloat16, DType::kInt64, true},
                    GridParam{DType::kFloat16, DType::kInt32, true}, GridParam{DType::kFloat16, DType::kInt64, false},
                    GridParam{DType::kFloat32, DType::kInt32, false}, GridParam{DType::kFloat32, DType::kInt64, true},
                    GridParam{DType::kFloat32, DType::kInt32, true}, GridParam{DType::kFloat32, DType::kInt64, false}),
    param_name);

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
  b.q_fp8[200] ^= 1;
  b.weights_out[3] = std::nextafter(b.weights_out[3], INFINITY);
  const iqtest::Comparison cmp = iqtest::compare(a, b, 8);
  EXPECT_EQ(cmp.fp8_bytes, 1);
  EXPECT_EQ(cmp.weights, 1);
  Outputs poisoned;
  poisoned.q_fp8.assign(a.q_fp8.size(), 0xA5);
  poisoned.weights_out.assign(a.weights_out.size(), iqtest::float_of(0xA5A5A5A5u));
  EXPECT_GT(iqtest::compare(poisoned, a, 8).fp8_bytes, 0);
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

}  // namespace
