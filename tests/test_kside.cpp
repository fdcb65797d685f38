// Key side (docs/KSIDE-SPEC.md) on fresh inputs: every host backend (cpu for each supported ISA and
// 1, 2, 3 threads) gives the reference's bytes over the whole cache (N = 0, 1, 7, 333; fp32, bf16,
// fp16; int32 / int64 positions; both recipes; page sizes 1, 16, 64; strided input rows); skipped
// tokens (slot < 0) write nothing; every byte outside the written rows is untouched; invalid
// calls are rejected with an error naming the argument and nothing written. Plus the reference's
// bytes for hand-checked rows (section 4's all-zero and NaN rows) and the plan convention.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/kside_case.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;

struct KCall {
  KRecipeId recipe = KRecipeId::kV4KFp8;
  std::int64_t N = 0, page_size = 64, num_pages = 1, max_pos = 256, in_stride = 128;
  DType dtype = DType::kFloat32, pos_dtype = DType::kInt64;
  float eps = 1e-6f;
  std::vector<std::uint8_t> input, weight;
  std::vector<float> freqs;
  std::vector<std::uint8_t> positions;
  std::vector<std::int64_t> slots;

  std::int64_t page_bytes() const { return kside_token_bytes(recipe) * page_size; }
  std::size_t cache_size() const { return std::size_t(num_pages * page_bytes()); }
  KStoreArgs args(std::uint8_t* cache) const {
    KStoreArgs a;
    a.recipe = recipe;
    a.input = TensorView::strided(input.data(), dtype, {N, 128}, {in_stride, 1});
    a.weight = TensorView::contiguous(weight.data(), dtype, {128});
    a.eps = eps;
    a.freqs = TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64});
    a.positions = TensorView::contiguous(positions.data(), pos_dtype, {N});
    a.slots = TensorView::contiguous(slots.data(), DType::kInt64, {N});
    a.kvcache = TensorView::contiguous(cache, DType::kUInt8, {num_pages, page_bytes()});
    a.page_size = page_size;
    return a;
  }
  void set_position(std::int64_t t, std::int64_t p) {
    if (pos_dtype == DType::kInt32) {
      const std::int32_t v = std::int32_t(p);
      std::memcpy(positions.data() + 4 * t, &v, 4);
    } else {
      std::memcpy(positions.data() + 8 * t, &p, 8);
    }
  }
};

// Random tokens: rows of N(0, 1) * 2^[-8, 8] with a few exact zeros, outliers and (optionally)
// non-finite values; every slot distinct, about one in eight skipped (-1 or another negative).
KCall random_call(KRecipeId recipe, std::int64_t N, DType dtype, DType pos_dtype, std::int64_t page_size,
                  std::uint32_t seed, bool nonfinite = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  KCall c;
  c.recipe = recipe;
  c.N = N;
  c.dtype = dtype;
  c.pos_dtype = pos_dtype;
  c.page_size = page_size;
  c.in_stride = 128 + (seed % 3 == 0 ? 64 : 0);
  const std::int64_t capacity = std::max<std::int64_t>(N + N / 2 + 3, page_size);
  c.num_pages = (capacity + page_size - 1) / page_size;
  c.freqs = iqtest::rope_freqs(c.max_pos);
  const std::size_t es = dtype_size(dtype);
  c.input.assign(std::size_t(std::max<std::int64_t>(N, 1) * c.in_stride) * es, 0);
  for (std::int64_t t = 0; t < N; ++t) {
    const float mag = std::ldexp(1.0f, int(rng() % 17) - 8);
    const int kind = int(rng() % 16);
    for (int i = 0; i < 128; ++i) {
      float v = nd(rng) * mag;
      if (kind == 0) v = 0.0f;
      if (kind == 1 && i == 5) v = 3e4f;
      if (kind == 2) v = (i & 1) ? -1e-30f : 1e-30f;
      if (nonfinite && kind == 3 && i == 77) v = std::numeric_limits<float>::quiet_NaN();
      if (nonfinite && kind == 4 && i == 3) v = -std::numeric_limits<float>::infinity();
      iqtest::store_as(c.input, dtype, std::size_t(t * c.in_stride + i), v);
    }
  }
  c.weight.assign(128 * es, 0);
  for (int i = 0; i < 128; ++i) iqtest::store_as(c.weight, dtype, std::size_t(i), 1.0f + 0.25f * nd(rng));
  c.positions.assign(std::size_t(std::max<std::int64_t>(N, 1)) * dtype_size(pos_dtype), 0);
  std::vector<std::int64_t> perm(std::size_t(c.num_pages * page_size));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.slots.assign(std::size_t(std::max<std::int64_t>(N, 1)), -1);
  for (std::int64_t t = 0; t < N; ++t) {
    c.set_position(t, std::int64_t(rng() % std::uint32_t(c.max_pos)));
    c.slots[std::size_t(t)] = (rng() % 8 == 0) ? -1 - std::int64_t(rng() % 3) * 1000 : perm[std::size_t(t)];
  }
  if (N > 0) c.set_position(N - 1, c.max_pos - 1);
  return c;
}

std::vector<std::uint8_t> run_ok(const KCall& c, const Options& o, std::uint8_t fill) {
  std::vector<std::uint8_t> cache(c.cache_size(), fill);
  const Status s = run(c.args(cache.data()), o);
  EXPECT_TRUE(s.ok()) << s.message();
  return cache;
}

Options reference_options() {
  Options o;
  o.backend = Backend::kReference;
  return o;
}

// True when byte i of the cache belongs to a written row of c.
std::vector<bool> written_mask(const KCall& c) {
  std::vector<bool> m(c.cache_size(), false);
  const std::int64_t cb = kside_token_bytes(c.recipe) - 4;
  for (std::int64_t t = 0; t < c.N; ++t) {
    const std::int64_t s = c.slots[std::size_t(t)];
    if (s < 0) continue;
    const std::int64_t page = s / c.page_size, r = s % c.page_size;
    for (std::int64_t i = 0; i < cb; ++i) m[std::size_t(page * c.page_bytes() + cb * r + i)] = true;
    for (std::int64_t i = 0; i < 4; ++i) m[std::size_t(page * c.page_bytes() + cb * c.page_size + 4 * r + i)] = true;
  }
  return m;
}

TEST(Kside, EveryBackendMatchesTheReference) {
  int cases = 0;
  std::uint32_t seed = 1;
  for (KRecipeId recipe : all_krecipes())
    for (std::int64_t N : {0, 1, 7, 333})
      for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
        for (std::int64_t ps : {1, 16, 64}) {
          const DType pdt = (seed & 1) ? DType::kInt32 : DType::kInt64;
          const KCall c = random_call(recipe, N, dt, pdt, ps, seed++, /*nonfinite=*/true);
          const auto want = run_ok(c, reference_options(), 0xA5);
          // Reference: untouched bytes keep the fill, with either fill.
          const auto want2 = run_ok(c, reference_options(), 0x3C);
          const auto mask = written_mask(c);
          for (std::size_t i = 0; i < want.size(); ++i) {
            if (mask[i]) {
              ASSERT_EQ(want[i], want2[i]) << "written byte depends on the fill";
            } else {
              ASSERT_EQ(want[i], 0xA5);
              ASSERT_EQ(want2[i], 0x3C);
            }
          }
          for (const auto& be : iqtest::backends_under_test({1, 2, 3})) {
            if (be.cuda || be.options.backend == Backend::kReference) continue;
            const auto got = run_ok(c, be.options, 0xA5);
            std::int64_t diff = 0, first = -1;
            for (std::size_t i = 0; i < got.size(); ++i)
              if (got[i] != want[i]) {
                if (first < 0) first = std::int64_t(i);
                ++diff;
              }
            EXPECT_EQ(diff, 0) << krecipe_name(recipe) << " N=" << N << " " << dtype_name(dt) << " page_size=" << ps
                               << " " << be.name << ": first differing byte " << first;
            ++cases;
          }
        }
  EXPECT_GT(cases, 0);
}

// Section 4 by hand: an all-zero row and a row with one NaN.
TEST(Kside, HandCheckedRows) {
  for (KRecipeId recipe : all_krecipes()) {
    KCall c = random_call(recipe, 2, DType::kFloat32, DType::kInt64, 64, 99);
    c.slots = {0, 1};
    c.in_stride = 128;
    c.input.assign(2 * 128 * 4, 0);
    float* x = reinterpret_cast<float*>(c.input.data());
    for (int i = 0; i < 128; ++i) x[128 + i] = 0.5f;
    x[128 + 9] = std::numeric_limits<float>::quiet_NaN();
    for (const auto& be : iqtest::backends_under_test({1})) {
      if (be.cuda) continue;
      const auto got = run_ok(c, be.options, 0xA5);
      if (recipe == KRecipeId::kV4KFp8) {
        for (int i = 0; i < 128; ++i) ASSERT_EQ(got[std::size_t(i)], 0x00) << be.name;
        for (int i = 0; i < 128; ++i) ASSERT_EQ(got[std::size_t(128 + i)], 0x7e) << be.name;
        const std::uint8_t sc[4] = {0xad, 0xac, 0x6f, 0x34};  // 0x346facad little endian
        for (int r = 0; r < 2; ++r)
          for (int i = 0; i < 4; ++i) ASSERT_EQ(got[std::size_t(128 * 64 + 4 * r + i)], sc[i]) << be.name;
      } else {
        for (int i = 0; i < 64; ++i) ASSERT_EQ(got[std::size_t(i)], 0x00) << be.name;
        for (int i = 0; i < 64; ++i) ASSERT_EQ(got[std::size_t(64 + i)], 0x77) << be.name;
        for (int r = 0; r < 2; ++r)
          for (int i = 0; i < 4; ++i) ASSERT_EQ(got[std::size_t(64 * 64 + 4 * r + i)], 0x70) << be.name;
      }
    }
  }
}

TEST(Kside, SkippedTokensWriteNothing) {
  for (KRecipeId recipe : all_krecipes()) {
    KCall c = random_call(recipe, 40, DType::kBFloat16, DType::kInt64, 16, 7);
    for (auto& s : c.slots) s = -1;
    c.set_position(3, 1 << 30);  // a skipped token's position is not looked at
    for (const auto& be : iqtest::backends_under_test({1, 3})) {
      if (be.cuda) continue;
      const auto got = run_ok(c, be.options, 0x5A);
      EXPECT_EQ(std::count(got.begin(), got.end(), 0x5A), std::ptrdiff_t(got.size())) << be.name;
    }
  }
}

// The cache may be typed int8 (raw bytes): the same bytes.
TEST(Kside, Int8CacheSameBytes) {
  for (KRecipeId recipe : all_krecipes()) {
    const KCall c = random_call(recipe, 40, DType::kFloat16, DType::kInt32, 16, 21);
    const auto want = run_ok(c, reference_options(), 0x42);
    for (const auto& be : iqtest::backends_under_test({1, 2})) {
      if (be.cuda) continue;
      std::vector<std::uint8_t> cache(c.cache_size(), 0x42);
      KStoreArgs a = c.args(cache.data());
      a.kvcache.dtype = DType::kInt8;
      ASSERT_TRUE(run(a, be.options).ok()) << be.name;
      EXPECT_EQ(cache, want) << be.name;
    }
  }
}

TEST(Kside, ZeroTokensIsValid) {
  const KCall c = random_call(KRecipeId::kV4KFp4, 0, DType::kFloat32, DType::kInt32, 64, 3);
  std::vector<std::uint8_t> cache(c.cache_size(), 0x11);
  KStoreArgs a = c.args(cache.data());
  a.input.data = nullptr;
  EXPECT_TRUE(validate(a).ok());
  EXPECT_TRUE(run(a).ok());
  EXPECT_EQ(std::count(cache.begin(), cache.end(), 0x11), std::ptrdiff_t(cache.size()));
}

// An invalid call: error naming the argument (and the expectation), nothing written.
void expect_rejected(const KStoreArgs& a, std::vector<std::uint8_t>& cache, const std::string& arg,
                     const std::string& also = "") {
  std::fill(cache.begin(), cache.end(), std::uint8_t(0xEE));
  for (const auto& be : iqtest::backends_under_test({1, 2})) {
    if (be.cuda) continue;
    const Status s = run(a, be.options);
    ASSERT_FALSE(s.ok()) << arg << " " << be.name;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find(arg + ":"), std::string::npos) << s.message();
    if (!also.empty()) {
      EXPECT_NE(s.message().find(also), std::string::npos) << s.message();
    }
    EXPECT_EQ(std::count(cache.begin(), cache.end(), 0xEE), std::ptrdiff_t(cache.size())) << arg << " " << be.name;
  }
  EXPECT_FALSE(validate(a).ok());
}

TEST(Kside, OutOfRangeIndicesRejected) {
  for (KRecipeId recipe : all_krecipes()) {
    KCall c = random_call(recipe, 50, DType::kFloat32, DType::kInt64, 16, 11);
    std::vector<std::uint8_t> cache(c.cache_size());
    const std::int64_t cap = c.num_pages * c.page_size;
    {
      KCall d = c;
      d.slots[40] = cap;  // one past the end
      expect_rejected(d.args(cache.data()), cache, "slots", "slots[40] = " + std::to_string(cap));
    }
    {
      KCall d = c;
      d.slots[10] = 5;
      d.set_position(10, d.max_pos);
      expect_rejected(d.args(cache.data()), cache, "positions", "positions[10]");
    }
    {
      KCall d = c;
      d.slots[10] = 5;
      d.set_position(10, -1);
      expect_rejected(d.args(cache.data()), cache, "positions", "[0, max_pos)");
    }
  }
}

TEST(Kside, BadArgumentsNamed) {
  KCall c = random_call(KRecipeId::kV4KFp8, 5, DType::kFloat32, DType::kInt64, 64, 5);
  std::vector<std::uint8_t> cache(c.cache_size() + 4096);
  {
    KStoreArgs a = c.args(cache.data());
    a.page_size = 48;
    expect_rejected(a, cache, "page_size", "power of two");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.kvcache = TensorView::contiguous(cache.data(), DType::kUInt8, {1, 68 * 64});  // the FP4 page size
    expect_rejected(a, cache, "kvcache", "8448");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.kvcache = TensorView::strided(cache.data(), DType::kUInt8, {2, 132 * 64}, {132 * 64 + 16, 1});
    expect_rejected(a, cache, "kvcache", "strides");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.kvcache.dtype = DType::kFloat32;
    expect_rejected(a, cache, "kvcache", "uint8");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.input = TensorView::contiguous(c.input.data(), DType::kFloat32, {5, 64});
    expect_rejected(a, cache, "input", "(N, 128)");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.weight.dtype = DType::kBFloat16;
    expect_rejected(a, cache, "weight", "dtype of input");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.slots.dtype = DType::kInt32;
    expect_rejected(a, cache, "slots", "int64");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.positions = TensorView::contiguous(c.positions.data(), DType::kInt64, {4});
    expect_rejected(a, cache, "positions", "(5,)");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.freqs = TensorView::contiguous(c.freqs.data(), DType::kFloat32, {c.max_pos / 2, 128});
    expect_rejected(a, cache, "freqs", "(max_pos, 64)");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.recipe = KRecipeId(7);
    expect_rejected(a, cache, "recipe", "v4_k_fp8");
  }
  {
    KStoreArgs a = c.args(cache.data());
    a.input = TensorView::contiguous(cache.data(), DType::kFloat32, {5, 128});  // inside the cache
    expect_rejected(a, cache, "kvcache", "overlaps input");
  }
}

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
const char* const kArgNames[] = {"input", "weight", "freqs", "positions", "slots", "kvcache"};

// The views of a call in argument order (names: kArgNames).
std::vector<TensorView*> views_of(KStoreArgs& a) {
  return {&a.input, &a.weight, &a.freqs, &a.positions, &a.slots, &a.kvcache};
}

// A data pointer as the validators print it.
std::string hex_address(const void* p) {
  std::ostringstream os;
  os << "0x" << std::hex << reinterpret_cast<std::uintptr_t>(p);
  return os.str();
}

// Element counts that overflow int64: refused naming the argument, for N = 0 too (the views are
// never read; huge sizes get explicit strides).
TEST(Kside, ElementCountOverflowNamed) {
  for (KRecipeId recipe : all_krecipes()) {
    for (std::int64_t N : {5, 0}) {
      const KCall c = random_call(recipe, N, DType::kFloat32, DType::kInt64, 64, 5);
      std::vector<std::uint8_t> cache(c.cache_size());
      const std::int64_t pb = c.page_bytes();
      for (std::int64_t n : {kI64Max / 128 + 1, kI64Max}) {
        KStoreArgs a = c.args(cache.data());
        a.input = TensorView::strided(c.input.data(), DType::kFloat32, {n, 128}, {128, 1});
        expect_rejected(a, cache, "input", "N * 128 elements overflow int64 (shape (" + std::to_string(n) + ", 128))");
      }
      for (std::int64_t mp : {kI64Max / 64 + 1, kI64Max}) {
        KStoreArgs a = c.args(cache.data());
        a.freqs = TensorView::strided(c.freqs.data(), DType::kFloat32, {mp, 64}, {64, 1});
        expect_rejected(a, cache, "freqs",
                        "max_pos * 64 elements overflow int64 (shape (" + std::to_string(mp) + ", 64))");
      }
      for (std::int64_t np : {kI64Max / pb + 1, kI64Max}) {
        KStoreArgs a = c.args(cache.data());
        a.kvcache = TensorView::strided(cache.data(), DType::kUInt8, {np, pb}, {pb, 1});
        expect_rejected(a, cache, "kvcache", "num_pages * page_bytes overflows int64");
      }
    }
  }
}

// Views whose byte range cannot lie in the address space: refused naming the argument with its
// sizes and strides. The addresses near the top are never dereferenced.
TEST(Kside, SpanBeyondTheAddressSpaceNamed) {
  const std::string span = "span more bytes than the address space holds";
  for (KRecipeId recipe : all_krecipes()) {
    const KCall c = random_call(recipe, 5, DType::kFloat32, DType::kInt64, 64, 5);
    std::vector<std::uint8_t> cache(c.cache_size());
    // input's row stride may be anything >= 128
    for (std::int64_t st : {kI64Max, kI64Max / 2, std::int64_t(1) << 61}) {
      KStoreArgs a = c.args(cache.data());
      a.input = TensorView::strided(c.input.data(), DType::kFloat32, {5, 128}, {st, 1});
      expect_rejected(a, cache, "input", "sizes (5, 128) and strides (" + std::to_string(st) + ", 1) " + span);
    }
    // every tensor 16 bytes below the top of the address space (16-aligned)
    void* const top = reinterpret_cast<void*>(std::numeric_limits<std::uintptr_t>::max() - 15);
    for (int i = 0; i < 6; ++i) {
      KStoreArgs a = c.args(cache.data());
      views_of(a)[std::size_t(i)]->data = top;
      expect_rejected(a, cache, kArgNames[i], span);
    }
    // A negative stride on a dim of size > 1 is refused by the stride rules first; on a dim of
    // size 1 any stride is fine.
    for (int i = 0; i < 6; ++i) {
      KStoreArgs a = c.args(cache.data());
      TensorView* v = views_of(a)[std::size_t(i)];
      int d = 0;
      while (v->sizes[d] <= 1) ++d;  // (the cache has one page here: its dim 1)
      v->strides[d] = -std::max<std::int64_t>(v->strides[d], 1);
      expect_rejected(a, cache, kArgNames[i], "unsupported strides");
    }
    KCall one = random_call(recipe, 1, DType::kFloat32, DType::kInt64, 64, 6);
    std::vector<std::uint8_t> c1(one.cache_size(), 0x33), c2(one.cache_size(), 0x33);
    KStoreArgs a1 = one.args(c1.data()), a2 = one.args(c2.data());
    a2.input.strides[0] = -128;  // N = 1: dim 0 has size 1
    a2.positions.strides[0] = -1;
    a2.slots.strides[0] = -5;
    ASSERT_TRUE(run(a1, reference_options()).ok());
    const Status s2 = run(a2, reference_options());
    ASSERT_TRUE(s2.ok()) << s2.message();
    EXPECT_EQ(c1, c2);
  }
}

// ndim beyond TensorView::kMaxDims or negative, on every tensor: refused naming it.
TEST(Kside, RanksOutsideTheViewNamed) {
  const KCall c = random_call(KRecipeId::kV4KFp4, 5, DType::kBFloat16, DType::kInt32, 16, 8);
  std::vector<std::uint8_t> cache(c.cache_size());
  for (int nd : {TensorView::kMaxDims + 1, 64, INT_MAX, -1, INT_MIN}) {
    for (int i = 0; i < 6; ++i) {
      KStoreArgs a = c.args(cache.data());
      views_of(a)[std::size_t(i)]->ndim = nd;
      expect_rejected(a, cache, kArgNames[i], "expected shape");
    }
  }
}

// A non-null data pointer not aligned to its dtype's element size is refused naming the argument,
// the address, the element size and the dtype, for every tensor; nothing read or written (the
// misaligned views point into a scratch buffer and are never dereferenced). The cache has 1-byte
// elements: any address. With N = 0 no pointer is looked at.
TEST(Kside, MisalignedDataPointersNamed) {
  std::vector<std::uint64_t> scratch(80 * 1024 / 8, 0);
  std::uint8_t* const base = reinterpret_cast<std::uint8_t*>(scratch.data());
  for (KRecipeId recipe : all_krecipes()) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      SCOPED_TRACE(std::string(krecipe_name(recipe)) + " " + dtype_name(dt));
      const KCall c = random_call(recipe, 5, dt, DType::kInt64, 16, 31);
      std::vector<std::uint8_t> cache(c.cache_size());
      const std::string es = std::to_string(dtype_size(dt)) + "-byte elements of " + dtype_name(dt);
      auto expect_misaligned = [&](KStoreArgs a, int arg, std::size_t off, DType vdt, const std::string& elems) {
        TensorView* v = views_of(a)[std::size_t(arg)];
        v->data = base + off;
        v->dtype = vdt;
        expect_rejected(a, cache, kArgNames[arg],
                        "data pointer " + hex_address(base + off) + " is not aligned to the " + elems);
      };
      const KStoreArgs a = c.args(cache.data());
      expect_misaligned(a, 0, 1, dt, es);                                   // input
      if (dt == DType::kFloat32) expect_misaligned(a, 0, 2, dt, es);
      expect_misaligned(a, 1, 1, dt, es);                                   // weight
      expect_misaligned(a, 2, 2, DType::kFloat32, "4-byte elements of fp32");  // freqs
      expect_misaligned(a, 3, 4, DType::kInt64, "8-byte elements of int64");   // positions
      expect_misaligned(a, 3, 2, DType::kInt32, "4-byte elements of int32");
      expect_misaligned(a, 4, 4, DType::kInt64, "8-byte elements of int64");   // slots
      {  // the first misaligned tensor in argument order is the one named
        KStoreArgs b = a;
        b.slots.data = base + 1;
        b.freqs.data = base + 3;
        expect_rejected(b, cache, "freqs", "data pointer " + hex_address(base + 3));
      }
      // the cache at an odd address: valid, the same bytes
      const auto want = run_ok(c, reference_options(), 0x5C);
      for (const auto& be : iqtest::backends_under_test({1, 2})) {
        if (be.cuda) continue;
        std::vector<std::uint8_t> odd(c.cache_size() + 1, 0x5C);
        const Status s = run(c.args(odd.data() + 1), be.options);
        ASSERT_TRUE(s.ok()) << be.name << ": " << s.message();
        EXPECT_TRUE(std::equal(want.begin(), want.end(), odd.begin() + 1)) << be.name;
      }
    }
  }
  // N = 0: nothing read or written, pointers not looked at
  const KCall z = random_call(KRecipeId::kV4KFp8, 0, DType::kBFloat16, DType::kInt64, 64, 3);
  std::vector<std::uint8_t> cache(z.cache_size(), 0x11);
  KStoreArgs a = z.args(cache.data());
  a.input.data = base + 1;
  a.weight.data = base + 3;
  a.freqs.data = base + 2;
  a.positions.data = base + 4;
  a.slots.data = base + 4;
  EXPECT_TRUE(validate(a).ok()) << validate(a).message();
  EXPECT_TRUE(run(a).ok()) << run(a).message();
  EXPECT_EQ(std::count(cache.begin(), cache.end(), 0x11), std::ptrdiff_t(cache.size()));
  // CUDA tensors (fake addresses, never dereferenced): the same rule, before any backend sees them
  KStoreArgs g = z.args(cache.data());
  std::uintptr_t addr = 0x10000;
  for (TensorView* v : views_of(g)) {
    v->device = Device{DeviceType::kCUDA, 0};
    v->data = reinterpret_cast<void*>(addr);
    addr += 0x100000;
  }
  g.input.sizes[0] = 3;
  g.positions.sizes[0] = 3;
  g.slots.sizes[0] = 3;
  g.slots.data = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(g.slots.data) + 4);
  Options o;
  o.backend = Backend::kCuda;
  const Status sv = validate(g, o), so = run(g, o);
  EXPECT_EQ(sv.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sv.message(), so.message());
  EXPECT_NE(sv.message().find("slots: data pointer " + hex_address(g.slots.data) +
                              " is not aligned to the 8-byte elements of int64"),
            std::string::npos)
      << sv.message();
}

TEST(Kside, Names) {
  EXPECT_EQ(std::string(krecipe_name(KRecipeId::kV4KFp8)), "v4_k_fp8");
  EXPECT_EQ(std::string(krecipe_name(KRecipeId::kV4KFp4)), "v4_k_fp4");
  EXPECT_EQ(kside_token_bytes(KRecipeId::kV4KFp8), 132);
  EXPECT_EQ(kside_token_bytes(KRecipeId::kV4KFp4), 68);
  KRecipeId r;
  EXPECT_TRUE(parse_krecipe("v4_k_fp4", &r));
  EXPECT_EQ(r, KRecipeId::kV4KFp4);
  EXPECT_FALSE(parse_krecipe("v4_fp4", &r));
  EXPECT_EQ(all_krecipes().size(), 2u);
}

// SGLang's plan convention (docs/KSIDE-SPEC.md section 1).
TEST(Kside, PlanConvention) {
  std::vector<std::uint8_t> plan(16 * 4, 0);
  auto put32 = [&](int t, int off, std::uint32_t v) { std::memcpy(plan.data() + 16 * t + off, &v, 4); };
  auto put16 = [&](int t, int off, std::uint16_t v) { std::memcpy(plan.data() + 16 * t + off, &v, 2); };
  // extend: token 0 ragged 2, token 1 invalid, token 2 ragged 0 with seq_len 2 (< ratio: position -2),
  // token 3 ragged 5.
  put32(0, 0, 104); put16(0, 4, 2);
  put32(1, 0, 0xffffffffu); put16(1, 4, 1);
  put32(2, 0, 2); put16(2, 4, 0);
  put32(3, 0, 8); put16(3, 4, 5);
  const std::vector<std::int64_t> loc = {10, 11, 12, 13, 14, 15};
  std::vector<std::int64_t> pos, slots;
  std::string err;
  ASSERT_TRUE(io::kside_slots_from_plan(plan.data(), 4, loc.data(), 6, "extend", 4, &pos, &slots, &err)) << err;
  EXPECT_EQ(slots, (std::vector<std::int64_t>{12, -1, 10, 15}));
  EXPECT_EQ(pos, (std::vector<std::int64_t>{100, 0, -2, 4}));
  put16(3, 4, 6);  // ragged_id past out_loc
  EXPECT_FALSE(io::kside_slots_from_plan(plan.data(), 4, loc.data(), 6, "extend", 4, &pos, &slots, &err));
  EXPECT_NE(err.find("ragged_id"), std::string::npos);
  // decode: skipped unless seq_len % ratio == 0; slot = out_loc[t].
  put32(0, 0, 8); put32(1, 0, 9); put32(2, 0, 0); put32(3, 0, 4);
  ASSERT_TRUE(io::kside_slots_from_plan(plan.data(), 4, loc.data(), 4, "decode", 4, &pos, &slots, &err)) << err;
  EXPECT_EQ(slots, (std::vector<std::int64_t>{10, -1, 12, 13}));
  EXPECT_EQ(pos, (std::vector<std::int64_t>{4, 0, -4, 0}));
  EXPECT_FALSE(io::kside_slots_from_plan(plan.data(), 4, loc.data(), 6, "decode", 4, &pos, &slots, &err));
}

}  // namespace
