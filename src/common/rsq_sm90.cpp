// Host model of MUFU.RSQ on sm_90 (docs/KSIDE-SPEC.md section 2 step 5): a table of the 2^24 results
// for x in [1, 4), each stored as a 2-bit delta (-2..+1) against fl32(1 / sqrt((double)x)), and
// the exact even-power-of-two scaling that maps every other float onto that range.
#include "common/rsq_sm90.h"

#include <cmath>
#include <cstring>
#include <limits>

// 4 MiB, src/common/rsq_sm90_data.S (.incbin of src/common/data/rsq_sm90_delta2.bin): entry i is
// bits 2 * (i & 3) .. +1 of byte i >> 2, holding delta + 2.
extern "C" const unsigned char indexer_q_rsq_sm90_delta2[];

namespace indexer_q {
namespace detail {
namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

namespace {
// Entry i of the table (shared by the exported look-up and the model, so both inline it).
inline std::uint32_t table_entry(std::uint32_t i) {
  i &= 0xffffffu;
  const float x = float_of(((127u + (i >> 23)) << 23) | (i & 0x7fffffu));
  const float nearest = float(1.0 / std::sqrt(double(x)));  // both double ops rounded, then to float
  const int delta = int((indexer_q_rsq_sm90_delta2[i >> 2] >> (2 * (i & 3u))) & 3u) - 2;
  return std::uint32_t(std::int64_t(bits_of(nearest)) + delta);
}
}  // namespace

std::uint32_t rsq_sm90_table(std::uint32_t i) noexcept { return table_entry(i); }

float rsq_sm90(float x) noexcept {
  std::uint32_t b = bits_of(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return std::numeric_limits<float>::quiet_NaN();
  if (b == 0x80000000u) return -std::numeric_limits<float>::infinity();
  if (b >> 31) return std::numeric_limits<float>::quiet_NaN();
  if (b == 0) return std::numeric_limits<float>::infinity();
  if (b == 0x7f800000u) return 0.0f;
  int s12 = 0;
  if (b < 0x00800000u) {  // subnormal: x * 2^24 is exact and normal; the result scales by 2^12
    b = bits_of(float_of(b) * 0x1p24f);
    s12 = 12;
  }
  const int e = int(b >> 23) - 127;
  const int p = e & 1;
  const int k = (e - p) / 2;
  const std::uint32_t t = table_entry((std::uint32_t(p) << 23) | (b & 0x7fffffu));
  return float_of(std::uint32_t(std::int64_t(t) - std::int64_t(k - s12) * (std::int64_t(1) << 23)));
}

void rsq_sm90_n(const float* x, float* out, int n) noexcept {
  for (int j = 0; j < n; ++j) {
    std::uint32_t b = bits_of(x[j]);
    if (b - 1u >= 0x7f7fffffu) continue;  // not a positive finite nonzero float: no lookup
    if (b < 0x00800000u) b = bits_of(float_of(b) * 0x1p24f);
    const std::uint32_t i = (((b >> 23) & 1u) ^ 1u) << 23 | (b & 0x7fffffu);  // p = (e - 127) & 1
    __builtin_prefetch(indexer_q_rsq_sm90_delta2 + (i >> 2));
  }
  for (int j = 0; j < n; ++j) out[j] = rsq_sm90(x[j]);
}

}  // namespace detail
}  // namespace indexer_q
