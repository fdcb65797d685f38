// The op's bytes must not depend on the caller's floating-point environment: a thread that runs
// with flush-to-zero and denormals-are-zero (torch.set_flush_denormal(True) does that) gets the
// same bytes as one with the IEEE defaults, and gets its own MXCSR back afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "iq_test_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define IQ_HAVE_MXCSR 1
#endif

namespace {

using namespace indexer_q;
using iqtest::HostCase;
using iqtest::Outputs;

// Rows whose Hadamard output is 128 * z for a chosen z (position 0: cos 1, sin 0, so RoPE leaves
// the row unchanged): z[0] = 1 makes the row's amax, the other z[i] land on fp8 subnormal codes
// (|v| = 448 |z[i]| below 2^-6) and on small normal ones, positive and negative.
HostCase subnormal_case(std::int64_t B, std::int64_t H, RecipeId r = RecipeId::kV4Fp8) {
  HostCase c = iqtest::blank_case(B, H, DType::kFloat32, DType::kInt64, H, 16, r);
  c.weight_scale = 0.75f;
  for (std::int64_t r = 0; r < B * H; ++r) {
    double z[128];
    z[0] = 1.0 + 0.01 * double(r % 7);
    for (int i = 1; i < 128; ++i)
      z[i] = double(int((i * 7 + r) % 17) - 8) * std::ldexp(1.0, -9 - int(r % 3)) / 448.0 * 1.1;
    for (int j = 0; j < 128; ++j) {
      double x = 0.0;
      for (int i = 0; i < 128; ++i) x += (__builtin_popcount(unsigned(i & j)) & 1) ? -z[i] : z[i];
      iqtest::store_as(c.q_input, c.dtype, std::size_t(r * 128 + j), float(x / 128.0 * std::sqrt(128.0)));
    }
    iqtest::store_as(c.weight, c.dtype, std::size_t(r), 1.0f + float(r % 5));
  }
  return c;  // positions all 0
}

int count_subnormal_codes(const Outputs& o) {
  int n = 0;
  for (std::uint8_t c : o.q_out) n += ((c & 0x78) == 0 && (c & 0x07) != 0);
  return n;
}

#if defined(IQ_HAVE_MXCSR)
constexpr unsigned kFtzDaz = 0x8040u;  // MXCSR flush-to-zero (bit 15) + denormals-are-zero (bit 6)

TEST(FloatEnv, FlushToZeroCallerGetsTheSameBytesAndItsMxcsrBack) {
  const HostCase c = subnormal_case(7, 8);
  for (const auto& be : iqtest::backends_under_test({1, 2})) {
    if (be.cuda) continue;  // the device has no MXCSR
    SCOPED_TRACE(be.name);
    Outputs ieee, ftz;
    ASSERT_TRUE(iqtest::run_case(be, c, &ieee, 0xa5).ok());
    ASSERT_GT(count_subnormal_codes(ieee), 50) << "the case must produce fp8 subnormal codes";

    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | kFtzDaz);
    volatile float tiny = 1e-39f;  // a float32 denormal: read as zero under DAZ
    volatile float two = 2.0f;
    const bool flags_active = (tiny * two) == 0.0f;
    const Status s = iqtest::run_case(be, c, &ftz, 0x5a);
    const unsigned after = _mm_getcsr();
    _mm_setcsr(saved);

    ASSERT_TRUE(flags_active) << "setting FTZ/DAZ had no effect: the test would prove nothing";
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(after & 0xffc0u, (saved | kFtzDaz) & 0xffc0u) << "the caller's MXCSR control bits were not restored";
    const iqtest::Comparison d = iqtest::compare(ftz, ieee, c.H);
    EXPECT_TRUE(d.exact()) << d.summary();
  }
}

// Every other recipe under FTZ/DAZ too: the same subnormal-heavy rows, plus rows of float32
// subnormal inputs (read as zero under DAZ if a backend let the caller's MXCSR through).
TEST(FloatEnv, FlushToZeroCallerGetsTheSameBytesForEveryRecipe) {
  for (RecipeId r : all_recipes()) {
    HostCase c = subnormal_case(5, 8, r);
    for (std::int64_t i = 0; i < 8 * 128; ++i)  // token 4: float32 subnormals
      iqtest::store_as(c.q_input, c.dtype, std::size_t(4 * 8 * 128 + i), float(i % 13 - 6) * 0x1p-140f);
    for (const auto& be : iqtest::backends_under_test({1, 2})) {
      if (be.cuda) continue;
      SCOPED_TRACE(std::string(recipe_name(r)) + " " + be.name);
      Outputs ieee, ftz;
      ASSERT_TRUE(iqtest::run_case(be, c, &ieee, 0xa5).ok());
      const unsigned saved = _mm_getcsr();
      _mm_setcsr(saved | kFtzDaz);
      const Status s = iqtest::run_case(be, c, &ftz, 0x5a);
      _mm_setcsr(saved);
      ASSERT_TRUE(s.ok()) << s.message();
      const iqtest::Comparison d = iqtest::compare(ftz, ieee, c.H);
      EXPECT_TRUE(d.exact()) << d.summary();
    }
  }
}
#else
TEST(FloatEnv, FlushToZeroCallerGetsTheSameBytesAndItsMxcsrBack) { GTEST_SKIP() << "x86 only"; }
#endif

}  // namespace
