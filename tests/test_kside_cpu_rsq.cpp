// The CPU key-side kernels' vector MUFU.RSQ model (P::rsq16 in src/cpu/kside_avx2.inc and
// kside_avx512.inc) against the host model rsq_sm90 (src/common/rsq_sm90.cpp), bit for bit: every
// input of the table's range [1, 4), the same mantissas in other binades, a strided sweep of all
// 2^32 float bit patterns, and the special values, on every compiled-in ISA this processor runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/rsq_sm90.h"
#include "cpu/kside_internal.h"
#include "indexer_q/indexer_q.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;
using iqtest::bits_of;
using iqtest::float_of;

std::string hex32(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", u);
  return b;
}

// Runs the ISA's rsq16 over `in` (padded to 16) and counts the outputs whose bits differ from
// rsq_sm90's; reports the first.
std::int64_t count_mismatches(detail::cpu::KsideRsqFn fn, const std::vector<std::uint32_t>& in, std::string* first) {
  std::int64_t bad = 0;
  alignas(64) float v[16];
  for (std::size_t i = 0; i < in.size(); i += 16) {
    for (int j = 0; j < 16; ++j) v[j] = float_of(i + j < in.size() ? in[i + j] : 0x3f800000u);
    fn(v);
    for (int j = 0; j < 16 && i + j < in.size(); ++j) {
      const std::uint32_t want = bits_of(detail::rsq_sm90(float_of(in[i + j])));
      if (bits_of(v[j]) != want && bad++ == 0)
        *first = "input 0x" + hex32(in[i + j]) + " got 0x" + hex32(bits_of(v[j])) + " want 0x" +
                 hex32(want);
    }
  }
  return bad;
}

TEST(KsideCpuRsq, VectorModelMatchesRsqSm90) {
  std::vector<std::uint32_t> in;
  in.reserve((std::size_t(1) << 24) + (std::size_t(1) << 21));
  // Every table entry: x = 2^p * (1 + m 2^-23), p in {0, 1}.
  for (std::uint32_t i = 0; i < (1u << 24); ++i) in.push_back(((127u + (i >> 23)) << 23) | (i & 0x7fffffu));
  // A strided sweep of every bit pattern (both signs, every exponent, NaN payloads, subnormals).
  for (std::uint64_t u = 0; u < (std::uint64_t(1) << 32); u += 4093) in.push_back(std::uint32_t(u));
  // Both ends of the normal range and of the subnormals, zeros, infinities, NaNs.
  for (std::uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x00800001u,
                          0x7f7fffffu, 0x7f7ffffeu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                          0xffc00000u, 0xbf800000u, 0x3f800000u, 0x40000000u, 0x407fffffu, 0x3f7fffffu})
    in.push_back(u);
  int tested = 0;
  for (CpuIsa isa : supported_cpu_isas()) {
    const detail::cpu::KsideRsqFn fn = detail::cpu::kside_rsq16_for(isa);
    if (fn == nullptr) continue;
    ++tested;
    std::string first;
    EXPECT_EQ(count_mismatches(fn, in, &first), 0) << cpu_isa_name(isa) << ": first " << first;
  }
  EXPECT_GT(tested, 0);
}

}  // namespace
