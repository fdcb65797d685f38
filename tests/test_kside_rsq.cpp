// The host model of MUFU.RSQ (src/common/rsq_sm90.*, docs/KSIDE-SPEC.md section 2 step 5): the embedded 2-bit
// table reproduces every one of the 2^24 entries of the golden table
// tests/data/golden/kside/mufu_rsq_sm90.safetensors, the scaling follows the spec's rules, and the
// special values and the spec's stated values come out.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/rsq_sm90.h"
#include "io/safetensors.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;
using iqtest::bits_of;
using iqtest::float_of;

TEST(KsideRsq, EveryTableEntryMatchesTheGoldenTable) {
  const std::string path = std::string(INDEXER_Q_TEST_DATA_DIR) + "/golden/kside/mufu_rsq_sm90.safetensors";
  io::StFile f;
  std::string err;
  ASSERT_TRUE(io::read_safetensors(path, &f, &err)) << err;
  const auto& d4 = f.tensors.at("delta4").data;
  ASSERT_EQ(d4.size(), std::size_t(1) << 23);
  std::int64_t bad = 0, first = -1;
  std::int64_t hist[4] = {0, 0, 0, 0};
  for (std::uint32_t i = 0; i < (1u << 24); ++i) {
    int delta = (d4[i >> 1] >> (4 * (i & 1))) & 0xf;
    if (delta >= 8) delta -= 16;
    ASSERT_NE(delta, -8) << "exception entries are not expected";
    const float x = float_of(((127u + (i >> 23)) << 23) | (i & 0x7fffffu));
    const std::uint32_t want = bits_of(float(1.0 / std::sqrt(double(x)))) + std::uint32_t(delta);
    if (detail::rsq_sm90_table(i) != want) {
      if (first < 0) first = i;
      ++bad;
    }
    if (delta >= -2 && delta <= 1) hist[delta + 2]++;
    // rsq_sm90 on [1, 4) is the table itself.
    if ((i & 0xfff) == 0) {
      ASSERT_EQ(bits_of(detail::rsq_sm90(x)), want) << "x = " << x;
    }
  }
  EXPECT_EQ(bad, 0) << "first mismatching index " << first;
  // The spec's histogram: -2: 8, -1: 2,344,391, 0: 13,143,086, +1: 1,289,731.
  EXPECT_EQ(hist[0], 8);
  EXPECT_EQ(hist[1], 2344391);
  EXPECT_EQ(hist[2], 13143086);
  EXPECT_EQ(hist[3], 1289731);
}

TEST(KsideRsq, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits_of(detail::rsq_sm90(1e-6f)), 0x447a0000u);  // 1000.0f
  EXPECT_EQ(bits_of(detail::rsq_sm90(128.0f)), 0x3db504f2u);  // not the correctly rounded 0x3db504f3
  EXPECT_TRUE(std::isnan(detail::rsq_sm90(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(detail::rsq_sm90(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(detail::rsq_sm90(float_of(0x7f800001u))));  // signaling NaN
  EXPECT_EQ(detail::rsq_sm90(-0.0f), -inf);
  EXPECT_EQ(detail::rsq_sm90(0.0f), inf);
  EXPECT_EQ(bits_of(detail::rsq_sm90(inf)), 0u);
  EXPECT_TRUE(std::isnan(detail::rsq_sm90(-1.0f)));
  EXPECT_TRUE(std::isnan(detail::rsq_sm90(-inf)));
  EXPECT_TRUE(std::isnan(detail::rsq_sm90(-float_of(1u))));  // negative subnormal
  EXPECT_EQ(detail::rsq_sm90(1.0f), 1.0f);
  EXPECT_EQ(detail::rsq_sm90(4.0f), 0.5f);
  EXPECT_EQ(detail::rsq_sm90(0.25f), 2.0f);
}

// Every other float maps onto [1, 4) by an even power of two; subnormals by 2^24 first.
TEST(KsideRsq, ScalingRules) {
  for (std::uint32_t i = 0; i < (1u << 24); i += 4099) {
    const std::uint32_t t = detail::rsq_sm90_table(i);
    const float x = float_of(((127u + (i >> 23)) << 23) | (i & 0x7fffffu));
    for (int k = -63; k <= 63; ++k) {  // x * 4^k stays normal
      const float xs = std::ldexp(x, 2 * k);
      ASSERT_EQ(bits_of(detail::rsq_sm90(xs)), std::uint32_t(std::int64_t(t) - std::int64_t(k) * (1 << 23)))
          << "i " << i << " k " << k;
    }
  }
  // Subnormals: rsq(x) = rsq(x * 2^24) * 2^12, exactly (a power-of-two shift of the result's exponent).
  for (std::uint32_t b = 1; b < 0x00800000u; b = b * 3 + 7) {
    const float x = float_of(b);
    const float r = detail::rsq_sm90(x * 0x1p24f);
    EXPECT_EQ(bits_of(detail::rsq_sm90(x)), bits_of(r) + (12u << 23)) << "bits " << b;
  }
  // 2^-148 (subnormal, an even power): table entry 0 times 2^74.
  EXPECT_EQ(bits_of(detail::rsq_sm90(float_of(1u << 1))), detail::rsq_sm90_table(0) + (74u << 23));
}

}  // namespace
