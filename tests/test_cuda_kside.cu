// Tests of the CUDA key-side kernel (src/cuda/kside.cu; skipped when no CUDA device is usable):
//  - the golden files of tests/data/golden/kside (SGLang's kernel on an H200): positions and slots
//    derived from each file's plan / out_loc / mode / compress_ratio as docs/KSIDE-SPEC.md section 1
//    says, the cache pre-filled with 0xA5, every byte of the cache compared, through every launch
//    shape (4 / 8 / 16 / 32 lanes per token at several block sizes, the one-thread-per-token
//    fallback) and through the public API run(KStoreArgs);
//  - random inputs (with edge rows: zeros, NaN, Inf, huge, tiny, subnormal) against the scalar
//    reference (kside_reference_run on host copies), whole cache compared: N 0, 1, 7, 333;
//    bf16 / fp16 / fp32 input; int32 / int64 positions; page sizes 1, 16, 64; strided rows;
//    both recipes; skipped tokens (slot -1) among them;
//  - out-of-range positions and slots (negative, == max_pos / capacity, huge, INT_MIN / MAX):
//    those tokens write nothing, the others are exact; freqs holds exactly max_pos rows and the
//    cache exactly its pages, so an out-of-bounds access shows under compute-sanitizer;
//  - duplicate slots: the last stored token of a slot wins (the reference's one-token-after-the-
//    other result), at 2, 7, kKsideScanMaxTokens, kKsideScanMaxTokens + 1, 333 and 4096 tokens
//    (both sides of the threshold between the scan in the store kernel and the claim kernels),
//    slot patterns with every token on one slot, out-of-range slots and positions among the
//    duplicates, random duplicates; the automatic shape, the fallback kernel and each lane count;
//    the automatic method and each one forced, repeated calls, every cache byte; the
//    misaligned-input fallback too;
//  - misaligned pointers (the fallback kernel), a non-default stream, CUDA-graph capture and
//    replay with PDL on; a PDL producer in the graph that writes slots, positions and input rows
//    after letting the key side launch (so a load before griddepcontrol.wait would show);
//  - the device's rsqrtf against the host's MUFU.RSQ model (src/common/rsq_sm90.h) for every
//    float in [1, 4) and samples of every binade, subnormals and specials: the CUDA kernel's
//    reciprocal square root IS the model the reference uses.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/kside_problem.h"
#include "common/kside_row.h"
#include "common/rsq_sm90.h"
#include "cuda/kside_cuda.h"
#include "io/safetensors.h"
#include "cuda_test_util.cuh"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;

using iqtest::DevBuf;
using iqtest::have_device;

// One key-side call as host bytes.
struct KCase {
  KRecipeId recipe = KRecipeId::kV4KFp8;
  std::int64_t N = 0, stride = 128;  // elements between input rows
  DType dtype = DType::kFloat32, pos_dtype = DType::kInt64;
  std::vector<std::uint8_t> input, weight;  // N * stride / 128 elements of dtype
  std::vector<float> freqs;                 // max_pos * 64
  std::int64_t max_pos = 0;
  std::vector<std::uint8_t> positions;      // N int32 | int64
  std::vector<std::int64_t> slots;
  float eps = 1e-6f;
  std::int64_t page_size = 64, num_pages = 1;
  std::vector<std::uint8_t> cache;          // initial contents, num_pages * page_bytes
  std::int64_t page_bytes() const { return kside_token_bytes(recipe) * page_size; }
  std::int64_t position(std::int64_t t) const {
    if (pos_dtype == DType::kInt32) {
      std::int32_t v;
      std::memcpy(&v, positions.data() + 4 * t, 4);
      return v;
    }
    std::int64_t v;
    std::memcpy(&v, positions.data() + 8 * t, 8);
    return v;
  }
  void set_position(std::int64_t t, std::int64_t p) {
    if (pos_dtype == DType::kInt32) {
      const std::int32_t v = std::int32_t(p);
      std::memcpy(positions.data() + 4 * t, &v, 4);
    } else {
      std::memcpy(positions.data() + 8 * t, &p, 8);
    }
  }
  std::string describe() const {
    return std::string(krecipe_name(recipe)) + " N=" + std::to_string(N) + " " + dtype_name(dtype) + " pos " +
           dtype_name(pos_dtype) + " page_size=" + std::to_string(page_size) + " pages=" +
           std::to_string(num_pages) + " stride=" + std::to_string(stride);
  }
};

int log2_of(std::int64_t v) {
  int l = 0;
  while ((std::int64_t(1) << l) < v) ++l;
  return l;
}

detail::KProblem problem_of(const KCase& c, const void* input, const void* weight, const float* freqs,
                            const void* positions, const std::int64_t* slots, std::uint8_t* cache, Device dev) {
  detail::KProblem p;
  p.recipe = c.recipe;
  p.N = c.N;
  p.dtype = c.dtype;
  p.input = input;
  p.input_stride = c.stride;
  p.weight = weight;
  p.eps = c.eps;
  p.freqs = freqs;
  p.max_pos = c.max_pos;
  p.positions = positions;
  p.pos_dtype = c.pos_dtype;
  p.slots = slots;
  p.cache = cache;
  p.num_pages = c.num_pages;
  p.page_size = c.page_size;
  p.log2_page = log2_of(c.page_size);
  p.page_bytes = c.page_bytes();
  p.device = dev;
  return p;
}

// The scalar reference on host copies. Tokens the CUDA kernel skips (out-of-range position or
// slot) are given slot -1 here (the host validator would reject them; the reference skips -1).
std::vector<std::uint8_t> reference_cache(const KCase& c0) {
  KCase c = c0;
  for (std::int64_t t = 0; t < c.N; ++t) {
    const std::int64_t p = c.position(t), s = c.slots[std::size_t(t)];
    if (p < 0 || p >= c.max_pos || s >= c.num_pages * c.page_size) c.slots[std::size_t(t)] = -1;
  }
  std::vector<std::uint8_t> cache = c.cache;
  const detail::KProblem p = problem_of(c, c.input.data(), c.weight.data(), c.freqs.data(), c.positions.data(),
                                        c.slots.data(), cache.data(), Device{DeviceType::kCPU, 0});
  const Status s = detail::kside_reference_run(p);
  EXPECT_TRUE(s.ok()) << s.message();
  return cache;
}

// A case in device memory (each tensor its own allocation of exactly its size).
struct DeviceK {
  DevBuf in, w, fr, pos, sl, cache;
  detail::KProblem prob;
  std::size_t cache_bytes = 0;
  bool upload(const KCase& c, std::size_t input_offset = 0) {
    std::vector<std::uint8_t> inb(input_offset + c.input.size());
    std::memcpy(inb.data() + input_offset, c.input.data(), c.input.size());
    if (!in.put(inb.data(), inb.size()) || !w.put(c.weight.data(), c.weight.size()) ||
        !fr.put(c.freqs.data(), c.freqs.size() * 4) || !pos.put(c.positions.data(), c.positions.size()) ||
        !sl.put(c.slots.data(), c.slots.size() * 8))
      return false;
    cache_bytes = c.cache.size();
    if (!cache.alloc(cache_bytes)) return false;
    prob = problem_of(c, static_cast<std::uint8_t*>(in.p) + input_offset, w.p, static_cast<const float*>(fr.p),
                      pos.p, static_cast<const std::int64_t*>(sl.p), static_cast<std::uint8_t*>(cache.p),
                      Device{DeviceType::kCUDA, 0});
    return reset(c);
  }
  bool reset(const KCase& c) {
    return cudaMemcpy(cache.p, c.cache.data(), cache_bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  std::vector<std::uint8_t> download() {
    std::vector<std::uint8_t> out(cache_bytes);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(out.data(), cache.p, cache_bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      out.clear();
    return out;
  }
};

std::vector<detail::KVariant> all_shapes() {
  std::vector<detail::KVariant> v;
  v.push_back(detail::KVariant{});  // automatic
  v.push_back(detail::KVariant{0, 0});
  for (int lanes : {4, 8, 16, 32})
    for (int block : {32, 128, 256}) v.push_back(detail::KVariant{lanes, block});
  return v;
}
std::string shape_name(const detail::KVariant& v) {
  if (v.lanes < 0) return "auto";
  if (v.lanes == 0) return "scalar";
  return "l" + std::to_string(v.lanes) + "-b" + std::to_string(v.block);
}

// First differing byte, described by page / row / field.
std::string first_diff(const KCase& c, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  std::int64_t n = 0, first = -1;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      if (first < 0) first = std::int64_t(i);
      ++n;
    }
  if (n == 0) return "";
  const std::int64_t pb = c.page_bytes(), cb = kside_token_bytes(c.recipe) - 4;
  const std::int64_t page = first / pb, off = first % pb;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%lld bytes differ; first at page %lld byte %lld (%s row %lld): got 0x%02x want 0x%02x",
                (long long)n, (long long)page, (long long)off, off < cb * c.page_size ? "codes" : "scale",
                (long long)(off < cb * c.page_size ? off / cb : (off - cb * c.page_size) / 4), got[std::size_t(first)],
                want[std::size_t(first)]);
  return buf;
}

void check_all_shapes(const KCase& c, const std::vector<std::uint8_t>& want, std::size_t input_offset = 0) {
  DeviceK d;
  ASSERT_TRUE(d.upload(c, input_offset));
  for (const detail::KVariant& v : all_shapes()) {
    ASSERT_TRUE(d.reset(c));
    const Status s = detail::kside_cuda_run_variant(d.prob, nullptr, false, v);
    ASSERT_TRUE(s.ok()) << shape_name(v) << ": " << s.message();
    const std::vector<std::uint8_t> got = d.download();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(first_diff(c, got, want), "") << c.describe() << " shape " << shape_name(v);
  }
}

// ---------------------------------------------------------------------------------------
// random cases
// ---------------------------------------------------------------------------------------
float edge_value(int kind, std::mt19937& g) {
  std::normal_distribution<float> nd;
  switch (kind) {
    case 0: return 0.0f;
    case 1: return std::numeric_limits<float>::quiet_NaN();
    case 2: return (g() & 1) ? INFINITY : -INFINITY;
    case 3: return 1.2e18f * nd(g);
    case 4: return 1e-30f * nd(g);
    case 5: return 3e-39f * nd(g);  // subnormal
    default: return nd(g);
  }
}

KCase random_case(KRecipeId rid, std::int64_t N, DType dt, DType pdt, std::int64_t page_size, std::uint32_t seed,
                  std::int64_t stride = 128) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(-8.0f, 8.0f);
  KCase c;
  c.recipe = rid;
  c.N = N;
  c.stride = stride;
  c.dtype = dt;
  c.pos_dtype = pdt;
  c.page_size = page_size;
  c.max_pos = 37 + std::int64_t(g() % 300);
  const std::size_t es = dt == DType::kFloat32 ? 4 : 2;
  c.input.assign(std::size_t(std::max<std::int64_t>(N, 0) * stride) * es, 0);
  for (std::int64_t t = 0; t < N; ++t) {
    const float mag = std::exp2(ud(g) * 2.0f);
    const int row_kind = int(g() % 24);  // rows 0..5: one edge value kind in some dims
    for (int i = 0; i < 128; ++i) {
      float v = nd(g) * mag;
      if (row_kind < 6 && (row_kind == 0 || g() % 16 == 0)) v = edge_value(row_kind, g);
      iqtest::store_as(c.input, dt, std::size_t(t * stride + i), v);
    }
    // quantization ties: an exact small integer row now and then
    if (row_kind == 7)
      for (int i = 0; i < 128; ++i) iqtest::store_as(c.input, dt, std::size_t(t * stride + i), float(int(g() % 9) - 4));
  }
  c.weight.assign(128 * es, 0);
  for (int i = 0; i < 128; ++i) iqtest::store_as(c.weight, dt, std::size_t(i), 1.0f + 0.25f * nd(g));
  c.freqs.resize(std::size_t(c.max_pos) * 64);
  for (std::int64_t p = 0; p < c.max_pos; ++p)
    for (int j = 0; j < 32; ++j) {
      const double a = double(p) * std::pow(10000.0, -2.0 * j / 64.0);
      c.freqs[std::size_t(p * 64 + 2 * j)] = float(std::cos(a));
      c.freqs[std::size_t(p * 64 + 2 * j + 1)] = float(std::sin(a));
    }
  c.positions.assign(std::size_t(std::max<std::int64_t>(N, 0)) * (pdt == DType::kInt32 ? 4 : 8), 0);
  for (std::int64_t t = 0; t < N; ++t) c.set_position(t, std::int64_t(g() % std::uint32_t(c.max_pos)));
  // distinct slots in a cache with room to spare; every 9th token skipped
  const std::int64_t cap_tokens = std::max<std::int64_t>(N + N / 2 + 3, page_size);
  c.num_pages = (cap_tokens + page_size - 1) / page_size;
  std::vector<std::int64_t> perm(std::size_t(c.num_pages * page_size));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int64_t(i);
  std::shuffle(perm.begin(), perm.end(), g);
  c.slots.resize(std::size_t(std::max<std::int64_t>(N, 0)));
  for (std::int64_t t = 0; t < N; ++t) c.slots[std::size_t(t)] = (t % 9 == 4) ? -1 : perm[std::size_t(t)];
  c.cache.resize(std::size_t(c.num_pages * c.page_bytes()));
  for (auto& b : c.cache) b = std::uint8_t(g());
  return c;
}

TEST(CudaKside, RandomCasesMatchReferenceThroughEveryShape) {
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 1;
  int cases = 0;
  for (KRecipeId rid : all_krecipes())
    for (std::int64_t N : {0, 1, 7, 333})
      for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
        for (DType pdt : {DType::kInt32, DType::kInt64})
          for (std::int64_t ps : {1, 16, 64}) {
            if (N == 0 && (dt != DType::kFloat32 || ps != 64)) continue;
            const KCase c = random_case(rid, N, dt, pdt, ps, seed++);
            SCOPED_TRACE(c.describe());
            check_all_shapes(c, reference_cache(c));
            ++cases;
          }
  std::printf("[kside cuda] %d random cases x %zu shapes\n", cases, all_shapes().size());
}

TEST(CudaKside, StridedRowsMatchReference) {
  SKIP_WITHOUT_DEVICE();
  for (KRecipeId rid : all_krecipes())
    for (DType dt : {DType::kBFloat16, DType::kFloat32})
      for (std::int64_t stride : {256, 136}) {
        const KCase c = random_case(rid, 77, dt, DType::kInt64, 16, 900 + std::uint32_t(stride), stride);
        SCOPED_TRACE(c.describe());
        check_all_shapes(c, reference_cache(c));
      }
}

TEST(CudaKside, MisalignedPointersTakeTheFallbackExactly) {
  SKIP_WITHOUT_DEVICE();
  for (KRecipeId rid : all_krecipes()) {
    // rows of 130 bf16 (260 bytes: not a multiple of 8), and an input base 4 bytes off
    const KCase a = random_case(rid, 45, DType::kBFloat16, DType::kInt64, 16, 77, 130);
    SCOPED_TRACE(a.describe());
    check_all_shapes(a, reference_cache(a));
    const KCase b = random_case(rid, 45, DType::kFloat32, DType::kInt32, 16, 78);
    check_all_shapes(b, reference_cache(b), 4);
  }
}

// ---------------------------------------------------------------------------------------
// duplicate slots (docs/KSIDE.md): the last stored token of a slot wins, every time, every shape,
// both methods (the scan inside the store kernel up to detail::kKsideScanMaxTokens tokens, the
// claim kernels above; each also forced at every size)
// ---------------------------------------------------------------------------------------
enum class DupPattern {
  kRandom,                // a quarter of the tokens share slots at random, neighbours share one
  kOneSlot,               // every token the same slot; every fifth one with an out-of-range position
  kOneSlotLastNotStored,  // the same, and the last token's position is out of range: an earlier token wins
  kPool,                  // slots drawn from N / 8 of them, with out-of-range slots (and skipped ones,
                          // -1) repeated among them and out-of-range positions among the duplicates
};
const char* pattern_name(DupPattern d) {
  switch (d) {
    case DupPattern::kRandom: return "random";
    case DupPattern::kOneSlot: return "one-slot";
    case DupPattern::kOneSlotLastNotStored: return "one-slot-last-not-stored";
    case DupPattern::kPool: return "pool";
  }
  return "?";
}

KCase duplicate_case(KRecipeId rid, std::int64_t N, DupPattern pat, std::uint32_t seed) {
  KCase c = random_case(rid, N, DType::kFloat32, DType::kInt64, 16, seed);
  std::mt19937 g(seed);
  const std::int64_t cap = c.num_pages * c.page_size;
  switch (pat) {
    case DupPattern::kRandom:
      for (std::int64_t t = 0; t < N; ++t)
        if (t % 4 == 1) c.slots[std::size_t(t)] = std::int64_t(g() % 24);  // >= cap for small N: not stored
      for (std::int64_t t = 2; t + 1 < N; t += 37) c.slots[std::size_t(t + 1)] = c.slots[std::size_t(t)];
      if (N > 10) {
        c.slots[9] = c.slots[5] = 3;
        c.set_position(9, c.max_pos);  // the later token of slot 3 is out of range: token 5 (or a later one) wins
      }
      break;
    case DupPattern::kOneSlot:
    case DupPattern::kOneSlotLastNotStored: {
      const std::int64_t slot = std::int64_t(g() % std::uint32_t(cap));
      for (std::int64_t t = 0; t < N; ++t) {
        c.slots[std::size_t(t)] = slot;
        if (t % 5 == 3) c.set_position(t, (t & 8) ? c.max_pos : -1);
      }
      if (N >= 2) c.set_position(N - 1, pat == DupPattern::kOneSlot ? 0 : c.max_pos + 5);
      break;
    }
    case DupPattern::kPool: {
      std::vector<std::int64_t> pool(static_cast<std::size_t>(cap));
      for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = std::int64_t(i);
      std::shuffle(pool.begin(), pool.end(), g);
      pool.resize(std::size_t(std::max<std::int64_t>(2, N / 8)));
      const std::int64_t odd[] = {-1, cap, cap + 1, -7, LLONG_MAX, cap + 16};
      for (std::int64_t t = 0; t < N; ++t) {
        const std::uint32_t r = g() % 16;
        c.slots[std::size_t(t)] = r < 2 ? odd[g() % 6] : pool[g() % pool.size()];
        if (r == 2) c.set_position(t, (g() & 1) ? c.max_pos : -3);  // a duplicate that is not stored
      }
      if (N >= 2) {  // at least one loser, also at 2 tokens: token 0 and the last token, both stored
        c.slots[0] = c.slots[std::size_t(N - 1)] = pool[0];
        c.set_position(0, 0);
        c.set_position(N - 1, c.max_pos - 1);
      }
      break;
    }
  }
  return c;
}

// The duplicates of a case as the rule sees them: stored tokens with a later stored token of
// their slot (they write nothing), and stored tokens followed by a not-stored token of their slot.
struct DupStats {
  std::int64_t losers = 0, later_not_stored = 0;
};
DupStats dup_stats(const KCase& c) {
  const std::int64_t cap = c.num_pages * c.page_size;
  auto stored = [&](std::int64_t t) {
    const std::int64_t s = c.slots[std::size_t(t)], q = c.position(t);
    return s >= 0 && s < cap && q >= 0 && q < c.max_pos;
  };
  DupStats st;
  for (std::int64_t t = 0; t < c.N; ++t) {
    if (!stored(t)) continue;
    bool lost = false, skipped = false;
    for (std::int64_t u = t + 1; u < c.N && !lost; ++u)
      if (c.slots[std::size_t(u)] == c.slots[std::size_t(t)]) (stored(u) ? lost : skipped) = true;
    st.losers += lost;
    st.later_not_stored += skipped;
  }
  return st;
}

const char* dup_name(detail::KDup d) {
  return d == detail::KDup::kAuto ? "auto" : d == detail::KDup::kScan ? "scan" : "claim";
}

// The shapes of the duplicate tests: the automatic one, the one-thread-per-token kernel and each
// lane count (the scan shares the later slots out over a token's lanes), the block sizes rotated,
// and the automatic shapes of both size ranges (8 and 16 lanes).
std::vector<detail::KVariant> duplicate_shapes() {
  return {detail::KVariant{},       detail::KVariant{0, 0},    detail::KVariant{4, 32}, detail::KVariant{8, 128},
          detail::KVariant{16, 256}, detail::KVariant{32, 128}, detail::KVariant{8, 64}, detail::KVariant{16, 128}};
}

// Every duplicate method, each forced at every shape (also at the automatic one: lanes = -1 keeps
// the forced method).
constexpr detail::KDup kDupMethods[] = {detail::KDup::kAuto, detail::KDup::kScan, detail::KDup::kClaim};

// The cache starts as random bytes, then all 0xff (a fill that looks like FP8 claim bytes). Every
// shape, every method (automatic: `auto_reps` calls; the claim kernels forced: 2 calls, as their
// atomics may run in any order; the scan forced: 1 call, it has no atomics): every call must give
// the reference's cache (one token after the other: the last stored token of a slot wins), every
// byte of it.
void check_duplicates(KRecipeId rid, std::int64_t N, DupPattern pat, std::size_t input_offset, std::uint32_t seed,
                      int auto_reps, const std::vector<detail::KVariant>& shapes = duplicate_shapes()) {
  KCase c = duplicate_case(rid, N, pat, seed);
  const DupStats st = dup_stats(c);
  // (a check of the test itself: the pattern has what it is meant to have)
  if (N >= (pat == DupPattern::kOneSlotLastNotStored ? 3 : 2) && pat != DupPattern::kRandom)
    EXPECT_GT(st.losers, 0) << "test setup: no stored token loses its slot";
  if (N >= 2 && pat == DupPattern::kOneSlotLastNotStored) EXPECT_GT(st.later_not_stored, 0) << "test setup";
  for (int fill = 0; fill < 2; ++fill) {
    if (fill == 1) std::fill(c.cache.begin(), c.cache.end(), std::uint8_t(0xff));
    SCOPED_TRACE(c.describe() + " " + pattern_name(pat) + " losers=" + std::to_string(st.losers) +
                 (fill ? " cache 0xff" : " cache random"));
    const std::vector<std::uint8_t> want = reference_cache(c);
    DeviceK d;
    ASSERT_TRUE(d.upload(c, input_offset));
    for (detail::KVariant v : shapes)
      for (detail::KDup dup : kDupMethods) {
        v.dup = dup;
        const int reps = dup == detail::KDup::kAuto ? auto_reps : dup == detail::KDup::kClaim ? 2 : 1;
        int wrong = 0;
        std::string first;
        for (int rep = 0; rep < reps; ++rep) {
          ASSERT_TRUE(d.reset(c));
          const Status s = detail::kside_cuda_run_variant(d.prob, nullptr, false, v);
          ASSERT_TRUE(s.ok()) << shape_name(v) << ": " << s.message();
          const std::string diff = first_diff(c, d.download(), want);
          if (!diff.empty()) {
            ++wrong;
            if (first.empty()) first = diff;
          }
        }
        EXPECT_EQ(wrong, 0) << "shape " << shape_name(v) << " " << dup_name(dup) << ": calls of " << reps
                            << " not the reference's cache; " << first;
      }
  }
}

std::vector<std::int64_t> duplicate_sizes() {
  const std::int64_t m = detail::kKsideScanMaxTokens;
  return {2, 7, m, m + 1, 333, 4096};
}

// Under compute-sanitizer (scripts/device/gpu_sanitize.sh sets INDEXER_Q_SANITIZER_SUBSET) each
// (recipe, size) runs two of the four patterns, alternating, so every pattern still meets every
// size (with one recipe) and every recipe every pattern, in half the launches.
TEST(CudaKside, DuplicateSlotsLastTokenWinsEveryTime) {
  SKIP_WITHOUT_DEVICE();
  const bool subset = std::getenv("INDEXER_Q_SANITIZER_SUBSET") != nullptr;
  std::uint32_t seed = 31;
  const std::vector<std::int64_t> sizes = duplicate_sizes();
  for (KRecipeId rid : all_krecipes())
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::int64_t N = sizes[i];
      for (DupPattern pat :
           {DupPattern::kRandom, DupPattern::kOneSlot, DupPattern::kOneSlotLastNotStored, DupPattern::kPool}) {
        if (N == 2 && pat == DupPattern::kRandom) continue;  // too few tokens for it
        if (subset && (int(pat) + int(rid) + int(i)) % 2 != 0) continue;
        check_duplicates(rid, N, pat, 0, seed++, N <= 333 ? 3 : 2);
      }
    }
}

TEST(CudaKside, DuplicateSlotsMisalignedInputTakeTheFallbackExactly) {
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 700;
  for (KRecipeId rid : all_krecipes())
    for (std::int64_t N : {std::int64_t(7), detail::kKsideScanMaxTokens, std::int64_t(333)})
      for (DupPattern pat : {DupPattern::kRandom, DupPattern::kOneSlotLastNotStored, DupPattern::kPool})
        check_duplicates(rid, N, pat, 4, seed++, 3, {detail::KVariant{}});  // the one-thread-per-token kernel
}

// ---------------------------------------------------------------------------------------
// out-of-range positions and slots: skipped, nothing written, nothing read out of bounds
// ---------------------------------------------------------------------------------------
void check_out_of_range(KRecipeId rid, DType pdt) {
  KCase c = random_case(rid, 24, DType::kFloat32, pdt, 16, 4242);
  const std::int64_t cap = c.num_pages * c.page_size, mp = c.max_pos;
  const std::vector<std::int64_t> bad_pos =
      pdt == DType::kInt32 ? std::vector<std::int64_t>{-1, mp, INT_MIN, INT_MAX, -mp, mp + 1}
                           : std::vector<std::int64_t>{-1, mp, LLONG_MIN, LLONG_MAX, std::int64_t(1) << 40, -mp};
  const std::vector<std::int64_t> bad_slot = {cap, cap + 1, LLONG_MAX, std::int64_t(1) << 40, -2, LLONG_MIN};
  for (std::size_t i = 0; i < bad_pos.size(); ++i) c.set_position(std::int64_t(2 * i), bad_pos[i]);
  for (std::size_t i = 0; i < bad_slot.size(); ++i) c.slots[2 * i + 13] = bad_slot[i];
  c.set_position(12, mp - 1);  // the last row of the table: valid
  SCOPED_TRACE(c.describe());
  const std::vector<std::uint8_t> want = reference_cache(c);
  int valid = 0;  // a check of the test itself: some tokens valid, some not
  for (std::int64_t t = 0; t < c.N; ++t) {
    const std::int64_t p = c.position(t), s = c.slots[std::size_t(t)];
    valid += p >= 0 && p < mp && s >= 0 && s < cap;
  }
  EXPECT_GE(valid, 8) << "test setup";
  EXPECT_LE(valid, 12) << "test setup";
  check_all_shapes(c, want);
}

TEST(CudaKside, OutOfRangePositionsAndSlotsWriteNothing) {
  SKIP_WITHOUT_DEVICE();
  for (KRecipeId rid : all_krecipes()) {
    check_out_of_range(rid, DType::kInt64);
    check_out_of_range(rid, DType::kInt32);
  }
}

// ---------------------------------------------------------------------------------------
// golden files (SGLang's kernel on an H200)
// ---------------------------------------------------------------------------------------
std::vector<std::string> kside_golden_paths() {
  std::vector<std::string> v;
  const std::filesystem::path dir = std::filesystem::path(INDEXER_Q_TEST_DATA_DIR) / "golden" / "kside";
  if (!std::filesystem::exists(dir)) return v;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("kside_", 0) == 0 && e.path().extension() == ".safetensors") v.push_back(e.path().string());
  }
  std::sort(v.begin(), v.end());
  return v;
}

std::uint32_t u32_at(const std::uint8_t* p) {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}

// A golden file as a KCase (positions / slots from the plan, docs/KSIDE-SPEC.md section 1) and the
// expected cache. False + *err if the file is not a key-side case.
bool golden_case(const std::string& path, KCase* c, std::vector<std::uint8_t>* want, std::string* err) {
  io::StFile f;
  if (!io::read_safetensors(path, &f, err)) return false;
  auto& T = f.tensors;
  auto& M = f.metadata;
  for (const char* k : {"input", "weight", "freqs_cis", "plan", "out_loc", "kvcache"})
    if (!T.count(k)) return *err = std::string("no tensor ") + k, false;
  for (const char* k : {"variant", "mode", "compress_ratio", "page_size", "eps_bits", "cache_fill"})
    if (!M.count(k)) return *err = std::string("no metadata ") + k, false;
  if (!parse_krecipe(M["variant"], &c->recipe)) return *err = "variant " + M["variant"], false;
  if (T["input"].dtype != "F32" || T["weight"].dtype != "F32") return *err = "input dtype", false;
  c->dtype = DType::kFloat32;
  c->N = T["input"].shape[0];
  c->stride = 128;
  c->input = T["input"].data;
  c->weight = T["weight"].data;
  c->max_pos = T["freqs_cis"].shape[0];
  c->freqs.resize(T["freqs_cis"].data.size() / 4);
  std::memcpy(c->freqs.data(), T["freqs_cis"].data.data(), T["freqs_cis"].data.size());
  const std::uint32_t eb = std::uint32_t(std::stoul(M["eps_bits"], nullptr, 16));
  std::memcpy(&c->eps, &eb, 4);
  c->page_size = std::stoll(M["page_size"]);
  c->num_pages = T["kvcache"].shape[0];
  const std::uint32_t ratio = std::uint32_t(std::stoul(M["compress_ratio"]));
  const bool decode = M["mode"] == "decode";
  const std::vector<std::uint8_t>& plan = T["plan"].data;
  const std::int64_t Mloc = T["out_loc"].shape[0];
  std::vector<std::int64_t> out_loc(static_cast<std::size_t>(Mloc), 0);
  std::memcpy(out_loc.data(), T["out_loc"].data.data(), std::size_t(Mloc) * 8);
  c->pos_dtype = DType::kInt32;
  c->positions.assign(std::size_t(c->N) * 4, 0);
  c->slots.assign(std::size_t(c->N), -1);
  for (std::int64_t t = 0; t < c->N; ++t) {
    const std::uint8_t* e = plan.data() + 16 * t;
    const std::uint32_t seq_len = u32_at(e);
    std::int64_t slot = -1;
    if (decode) {
      if (seq_len % ratio == 0) slot = out_loc[std::size_t(t)];
    } else if (seq_len != 0xffffffffu) {
      const std::uint32_t ragged = std::uint32_t(e[4]) | std::uint32_t(e[5]) << 8;
      if (std::int64_t(ragged) < Mloc) slot = out_loc[ragged];
    }
    if (slot < 0) continue;  // skipped: position not looked at
    c->slots[std::size_t(t)] = slot;
    c->set_position(t, std::int64_t(std::int32_t(seq_len - ratio)));
  }
  const std::uint8_t fill = std::uint8_t(std::stoul(M["cache_fill"], nullptr, 16));
  c->cache.assign(T["kvcache"].data.size(), fill);
  *want = T["kvcache"].data;
  return true;
}

TEST(CudaKside, GoldenFilesEveryByteThroughEveryShape) {
  SKIP_WITHOUT_DEVICE();
  const std::vector<std::string> files = kside_golden_paths();
  ASSERT_GE(files.size(), 5u);
  int per_recipe[2] = {0, 0};
  for (const std::string& path : files) {
    KCase c;
    std::vector<std::uint8_t> want;
    std::string err;
    ASSERT_TRUE(golden_case(path, &c, &want, &err)) << path << ": " << err;
    SCOPED_TRACE(path + " " + c.describe());
    check_all_shapes(c, want);
    // int64 positions give the same bytes
    KCase c64 = c;
    c64.pos_dtype = DType::kInt64;
    c64.positions.assign(std::size_t(c.N) * 8, 0);
    for (std::int64_t t = 0; t < c.N; ++t) c64.set_position(t, c.position(t));
    check_all_shapes(c64, want);
    // the reference agrees with the file too (the model of the GPU's rsqrtf)
    EXPECT_EQ(first_diff(c, reference_cache(c), want), "") << "reference";
    // and the public API, Backend::kCuda
    DeviceK d;
    ASSERT_TRUE(d.upload(c));
    KStoreArgs a;
    a.recipe = c.recipe;
    const Device dev{DeviceType::kCUDA, 0};
    a.input = TensorView::contiguous(d.in.p, c.dtype, {c.N, 128}, dev);
    a.weight = TensorView::contiguous(d.w.p, c.dtype, {128}, dev);
    a.eps = c.eps;
    a.freqs = TensorView::contiguous(d.fr.p, DType::kFloat32, {c.max_pos, 64}, dev);
    a.positions = TensorView::contiguous(d.pos.p, c.pos_dtype, {c.N}, dev);
    a.slots = TensorView::contiguous(d.sl.p, DType::kInt64, {c.N}, dev);
    a.kvcache = TensorView::contiguous(d.cache.p, DType::kUInt8, {c.num_pages, c.page_bytes()}, dev);
    a.page_size = c.page_size;
    Options o;
    o.backend = Backend::kCuda;
    const Status s = run(a, o);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(first_diff(c, d.download(), want), "") << "public API";
    ++per_recipe[int(c.recipe)];
  }
  EXPECT_GT(per_recipe[0], 0);
  EXPECT_GT(per_recipe[1], 0);
  std::printf("[kside cuda golden] v4_k_fp8 %d files, v4_k_fp4 %d files, %zu shapes each, every cache byte\n",
              per_recipe[0], per_recipe[1], all_shapes().size());
}

// ---------------------------------------------------------------------------------------
// stream, graph, PDL
// ---------------------------------------------------------------------------------------
TEST(CudaKside, GraphCaptureWithPdlReplaysExactly) {
  SKIP_WITHOUT_DEVICE();
  for (KRecipeId rid : all_krecipes()) {
    const KCase c = random_case(rid, 333, DType::kBFloat16, DType::kInt64, 64, 31337);
    const std::vector<std::uint8_t> want = reference_cache(c);
    DeviceK d;
    ASSERT_TRUE(d.upload(c));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CUDA_OK(cudaMemcpyAsync(d.cache.p, c.cache.data(), d.cache_bytes, cudaMemcpyHostToDevice, s));
    const Status st = detail::kside_cuda_run(d.prob, s, true);
    CUDA_OK(cudaStreamEndCapture(s, &g));
    ASSERT_TRUE(st.ok()) << st.message();
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 3; ++rep) {
      CUDA_OK(cudaMemsetAsync(d.cache.p, 0, d.cache_bytes, s));  // on s: a non-blocking stream
      CUDA_OK(cudaGraphLaunch(ge, s));                            // does not wait for the legacy one
      CUDA_OK(cudaStreamSynchronize(s));
      EXPECT_EQ(first_diff(c, d.download(), want), "") << "replay " << rep;
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

// PDL behind a producer: a kernel of the engine's stream writes the call's slots, positions and
// input rows and, as PDL producers may, runs griddepcontrol.launch_dependents first, then spins
// (~1 ms) before writing. The key side's first kernel (the store kernel, or the first claim kernel)
// is then resident while the producer spins, and only its griddepcontrol.wait keeps it from
// reading the old bytes (that the overlap happens on the device: Cuda.PdlProducerThatTriggers-
// EarlyIsOverlappedOnThisDevice of tests/test_cuda.cu). Captured in a graph with the key side's
// launches (PDL on); the old bytes are another call (slots reversed, positions shifted, other
// input rows), so a load of any of them placed before the wait shows in the cache.
// (The producer: iqtest::early_trigger_producer of tests/cuda_test_util.cuh.)
TEST(CudaKside, PdlProducerWritesSlotsPositionsAndInputExactly) {
  SKIP_WITHOUT_DEVICE();
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 9) GTEST_SKIP() << "PDL needs sm_90+";
  std::uint32_t seed = 5100;
  const std::int64_t m = detail::kKsideScanMaxTokens;
  for (KRecipeId rid : all_krecipes())
    for (std::int64_t N : {std::int64_t(1), std::int64_t(7), m, m + 1, std::int64_t(333)}) {
      KCase c = duplicate_case(rid, N, DupPattern::kPool, seed++);
      if (N == 1) {  // stored (the pattern may skip it)
        c.slots[0] = 0;
        c.set_position(0, 0);
      }
      KCase old = c;  // what the arrays hold before the producer writes
      for (std::int64_t t = 0; t < N; ++t) {
        old.slots[std::size_t(t)] = c.slots[std::size_t(N - 1 - t)];
        old.set_position(t, (c.position(t) + 1) % c.max_pos);
      }
      for (std::size_t i = 0; i < old.input.size(); ++i) old.input[i] = c.input[old.input.size() - 1 - i];
      const std::vector<std::uint8_t> want = reference_cache(c);
      ASSERT_NE(first_diff(c, reference_cache(old), want), "") << "test setup: the old call looks the same";
      DeviceK d;
      ASSERT_TRUE(d.upload(old));
      DevBuf s_in, s_pos, s_sl;  // the producer's sources
      ASSERT_TRUE(s_in.put(c.input.data(), c.input.size()) && s_pos.put(c.positions.data(), c.positions.size()) &&
                  s_sl.put(c.slots.data(), c.slots.size() * 8));
      iqtest::ByteCopies cp{};
      cp.src[0] = static_cast<const unsigned char*>(s_in.p);
      cp.src[1] = static_cast<const unsigned char*>(s_pos.p);
      cp.src[2] = static_cast<const unsigned char*>(s_sl.p);
      cp.dst[0] = static_cast<unsigned char*>(d.in.p);
      cp.dst[1] = static_cast<unsigned char*>(d.pos.p);
      cp.dst[2] = static_cast<unsigned char*>(d.sl.p);
      cp.n[0] = c.input.size();
      cp.n[1] = c.positions.size();
      cp.n[2] = c.slots.size() * 8;
      cudaStream_t s = nullptr;
      CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      for (detail::KVariant v : {detail::KVariant{}, detail::KVariant{0, 0}})
        for (detail::KDup dup : kDupMethods) {
          v.dup = dup;
          SCOPED_TRACE(c.describe() + " shape " + shape_name(v) + " " + dup_name(dup));
          cudaGraph_t g = nullptr;
          cudaGraphExec_t ge = nullptr;
          CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          iqtest::early_trigger_producer<<<132, 256, 0, s>>>(cp, 2000000);
          const Status st = detail::kside_cuda_run_variant(d.prob, s, true, v);
          CUDA_OK(cudaStreamEndCapture(s, &g));
          ASSERT_TRUE(st.ok()) << st.message();
          CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
          for (int rep = 0; rep < 2; ++rep) {
            // the old call's arrays and the initial cache, then the graph
            CUDA_OK(cudaMemcpy(d.in.p, old.input.data(), old.input.size(), cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(d.pos.p, old.positions.data(), old.positions.size(), cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(d.sl.p, old.slots.data(), old.slots.size() * 8, cudaMemcpyHostToDevice));
            ASSERT_TRUE(d.reset(c));
            CUDA_OK(cudaDeviceSynchronize());  // the copies (legacy stream) end before s runs
            CUDA_OK(cudaGraphLaunch(ge, s));
            CUDA_OK(cudaStreamSynchronize(s));
            EXPECT_EQ(first_diff(c, d.download(), want), "") << "replay " << rep;
          }
          cudaGraphExecDestroy(ge);
          cudaGraphDestroy(g);
        }
      cudaStreamDestroy(s);
    }
}

// A method forced at the automatic shape (lanes = -1) is the one that runs: the claim kernels are
// two more launches, so a captured call has 3 kernel nodes with them and 1 without, on both sides
// of kKsideScanMaxTokens (the byte tests cannot tell: every method gives the same bytes).
TEST(CudaKside, ForcedMethodAtTheAutomaticShapeIsTheOneLaunched) {
  SKIP_WITHOUT_DEVICE();
  const std::int64_t m = detail::kKsideScanMaxTokens;
  for (std::int64_t N : {std::int64_t(7), m + 1}) {
    KCase c = duplicate_case(KRecipeId::kV4KFp8, N, DupPattern::kPool, 6100);
    DeviceK d;
    ASSERT_TRUE(d.upload(c));
    cudaStream_t s = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (detail::KDup dup : kDupMethods) {
      cudaGraph_t g = nullptr;
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      const Status st = detail::kside_cuda_run_variant(d.prob, s, false, detail::KVariant{-1, 0, dup});
      CUDA_OK(cudaStreamEndCapture(s, &g));
      ASSERT_TRUE(st.ok()) << st.message();
      std::size_t nodes = 0;
      CUDA_OK(cudaGraphGetNodes(g, nullptr, &nodes));
      cudaGraphDestroy(g);
      const bool claim = dup == detail::KDup::kClaim || (dup == detail::KDup::kAuto && N > m);
      EXPECT_EQ(nodes, claim ? 3u : 1u) << N << " tokens, " << dup_name(dup);
    }
    cudaStreamDestroy(s);
  }
}

TEST(CudaKside, HostMemoryIsRefusedNamingTheArgument) {
  SKIP_WITHOUT_DEVICE();
  KCase c = random_case(KRecipeId::kV4KFp8, 5, DType::kFloat32, DType::kInt64, 16, 5);
  DeviceK d;
  ASSERT_TRUE(d.upload(c));
  detail::KProblem p = d.prob;
  p.slots = c.slots.data();  // pageable host memory
  const Status s = detail::kside_cuda_run(p, nullptr, false);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("slots"), std::string::npos) << s.message();
  EXPECT_EQ(first_diff(c, d.download(), c.cache), "") << "nothing written";
}

// ---------------------------------------------------------------------------------------
// the device's rsqrtf is the host's MUFU.RSQ model
// ---------------------------------------------------------------------------------------
__global__ void rsqrt_kernel(const std::uint32_t* in, std::uint32_t* out, std::size_t n) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float_as_uint(detail::RsqHw{}(__uint_as_float(in[i])));
}

TEST(CudaKside, DeviceRsqrtfIsTheHostModel) {
  SKIP_WITHOUT_DEVICE();
  std::vector<std::uint32_t> in;
  in.reserve((std::size_t(1) << 24) + 400000);
  for (std::uint32_t i = 0; i < (1u << 24); ++i) in.push_back((127u + (i >> 23)) << 23 | (i & 0x7fffffu));
  std::mt19937 g(7);
  for (std::uint32_t e = 0; e < 256; ++e)
    for (int k = 0; k < 1024; ++k) in.push_back(e << 23 | (g() & 0x7fffffu));  // every binade, subnormals
  for (std::uint32_t b : {0u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 1u,
                          0x007fffffu, 0xbf800000u, 0x358637bdu, 0x7f7fffffu})
    in.push_back(b);
  const std::size_t n = in.size();
  DevBuf din, dout;
  ASSERT_TRUE(din.put(in.data(), n * 4));
  ASSERT_TRUE(dout.alloc(n * 4));
  rsqrt_kernel<<<unsigned((n + 255) / 256), 256>>>(static_cast<const std::uint32_t*>(din.p),
                                                   static_cast<std::uint32_t*>(dout.p), n);
  CUDA_OK(cudaGetLastError());
  std::vector<std::uint32_t> out(n);
  CUDA_OK(cudaMemcpy(out.data(), dout.p, n * 4, cudaMemcpyDeviceToHost));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, &in[i], 4);
    const std::uint32_t want = iqtest::bits_of(detail::rsq_sm90(x));
    const bool both_nan = (want & 0x7fffffffu) > 0x7f800000u && (out[i] & 0x7fffffffu) > 0x7f800000u;
    if (out[i] != want && !both_nan) {
      if (bad < 5) ADD_FAILURE() << "x bits 0x" << std::hex << in[i] << ": device 0x" << out[i] << " model 0x" << want;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << n;
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  std::printf("[kside cuda rsqrtf] sm_%d%d: %zu inputs, %zu differ from the MUFU.RSQ model\n", major, minor, n, bad);
}

}  // namespace
