// No heap allocation in the hot path: a CPU call of the op, after the first, allocates nothing.
//
// This file is its own test binary (indexer_q_alloc_tests, tests/CMakeLists.txt): it replaces the
// global operator new / delete (every form) with counting versions, which would otherwise apply
// to the whole suite. The count covers every thread (the pool's workers included) while a call
// runs. The library is C++ and calls no malloc directly (src/ holds no malloc / calloc / realloc
// outside the CUDA backend's device buffers), so operator new is where any allocation of it
// would show.
//
// For every recipe, every supported ISA (and auto), threads 1 and N, bf16 / fp32 inputs: the
// first call may allocate (the pool starts its workers, the ISA choice is cached); the next calls
// must not. The same for the key side (validate(KStoreArgs), run(KStoreArgs) on the CPU).
// Rejected calls may allocate (an error message is a std::string): only accepted calls are the
// hot path.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cpu/cpu_internal.h"
#include "iq_test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else {
    const std::size_t rounded = (n + align - 1) / align * align;
    p = std::aligned_alloc(align, rounded);
  }
  return p;
}
}  // namespace

void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = counted_alloc(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = counted_alloc(n, std::size_t(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = counted_alloc(n, std::size_t(a))) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, std::size_t(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, std::size_t(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using namespace iqtest;

// Allocations made (by any thread) while fn runs.
template <class F>
long allocations_during(F&& fn) {
  g_allocs.store(0);
  g_counting.store(true);
  fn();
  g_counting.store(false);
  return g_allocs.load();
}

TEST(AllocFree, CountingHooksSeeAllocations) {
  // The hooks are live: explicit operator new calls (which the compiler may not elide, unlike
  // a new-expression whose result is unused) are counted, else the zero below would prove nothing.
  const long n = allocations_during([] {
    void* volatile a = ::operator new(1000);
    void* volatile b = ::operator new[](100, std::nothrow);
    ::operator delete(a);
    ::operator delete[](b);
  });
  EXPECT_EQ(n, 2);
  // ... also on another thread (the pool's workers run parts of a call).
  const long m = allocations_during([] {
    std::thread t([] { std::vector<int> v(10, 0); EXPECT_EQ(v.size(), 10u); });
    t.join();
  });
  EXPECT_GE(m, 2);  // the thread's state and the vector
}

// For every supported ISA and auto, 1 and N threads: after a first call of run(a) (which may start
// the pool's workers), three more calls allocate nothing. `what` names the case in a failure;
// *checked counts the combinations.
template <class Args>
void expect_repeat_calls_allocate_nothing(const Args& a, const std::string& what, int* checked) {
  const int hw = std::max(2u, std::thread::hardware_concurrency());
  std::vector<CpuIsa> isas = supported_cpu_isas();
  isas.push_back(CpuIsa::kAuto);
  for (CpuIsa isa : isas) {
    for (int threads : {1, hw}) {
      Options o;
      o.backend = Backend::kCpu;
      o.cpu_isa = isa;
      o.num_threads = threads;
      ASSERT_TRUE(run(a, o).ok());
      Status s;
      const long n = allocations_during([&] {
        for (int i = 0; i < 3; ++i) s = run(a, o);
      });
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(n, 0) << what << " " << cpu_isa_name(isa) << " threads " << threads << ": " << n
                      << " allocation(s) in 3 calls";
      ++*checked;
    }
  }
}

TEST(AllocFree, CpuCallAfterTheFirstAllocatesNothing) {
  int checked = 0;
  for (RecipeId r : all_recipes()) {
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      // 96 x 8 rows: above the inline threshold, so threads > 1 really use the pool.
      HostCase c = random_case(96, 8, dt, DType::kInt64, 9, 4242 + int(r), r);
      c.weights_out_2d = dt == DType::kFloat32;
      const std::int64_t rows = c.B * c.H;
      std::vector<std::uint8_t> q_out(std::size_t(rows * c.out_bytes_per_row()));
      std::vector<std::uint8_t> q_sf(c.sf() ? std::size_t(rows * 4) : 0);
      std::vector<float> wo(static_cast<std::size_t>(rows));
      const OpArgs a = op_args(c, c.q_input.data(), q_out.data(), c.sf() ? q_sf.data() : nullptr,
                               c.weight.data(), wo.data(), c.freqs.data(), c.positions.data());
      ASSERT_NO_FATAL_FAILURE(expect_repeat_calls_allocate_nothing(
          a, std::string(recipe_name(r)) + " " + dtype_name(dt), &checked));
    }
  }
  std::printf("[ alloc ] %d (recipe, dtype, isa, threads) combinations: 3 calls each, allocations counted\n",
              checked);
}

// validate() of an accepted call is part of every run(): it must not allocate either.
TEST(AllocFree, ValidateOfAnAcceptedCallAllocatesNothing) {
  for (RecipeId r : all_recipes()) {
    HostCase c = random_case(4, 8, DType::kFloat16, DType::kInt32, 8, 99, r);
    const std::int64_t rows = c.B * c.H;
    std::vector<std::uint8_t> q_out(std::size_t(rows * c.out_bytes_per_row()));
    std::vector<std::uint8_t> q_sf(c.sf() ? std::size_t(rows * 4) : 0);
    std::vector<float> wo(static_cast<std::size_t>(rows));
    const OpArgs a = op_args(c, c.q_input.data(), q_out.data(), c.sf() ? q_sf.data() : nullptr,
                             c.weight.data(), wo.data(), c.freqs.data(), c.positions.data());
    Status s;
    const long n = allocations_during([&] { s = validate(a); });
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(n, 0) << recipe_name(r);
  }
}

// The key side (docs/KSIDE-SPEC.md): a store of N tokens into a paged cache, every buffer owned here.
struct KsideCall {
  std::vector<std::uint8_t> input, weight, cache;
  std::vector<float> freqs;
  std::vector<std::int64_t> positions, slots;
  KRecipeId recipe = KRecipeId::kV4KFp8;
  DType dtype = DType::kFloat32;
  std::int64_t N = 0, max_pos = 64, page_size = 16, num_pages = 0;

  KsideCall(KRecipeId r, std::int64_t n, DType dt) : recipe(r), dtype(dt), N(n) {
    const std::size_t es = dtype_size(dt);
    input.assign(std::size_t(N * 128) * es, 0);
    for (std::size_t i = 0; i < std::size_t(N * 128); ++i) store_as(input, dt, i, 0.125f * float(int(i % 23) - 11));
    weight.assign(128 * es, 0);
    for (std::size_t i = 0; i < 128; ++i) store_as(weight, dt, i, 1.0f + 0.01f * float(i));
    freqs = rope_freqs(max_pos);
    num_pages = (N + 3 + page_size - 1) / page_size;
    cache.assign(std::size_t(num_pages * kside_token_bytes(r) * page_size), 0);
    for (std::int64_t t = 0; t < N; ++t) {
      positions.push_back((5 * t) % max_pos);
      slots.push_back(t % 7 == 3 ? -1 : t + 2);  // distinct slots, some tokens skipped
    }
  }
  KStoreArgs args() {
    KStoreArgs a;
    a.recipe = recipe;
    a.input = TensorView::contiguous(input.data(), dtype, {N, 128});
    a.weight = TensorView::contiguous(weight.data(), dtype, {128});
    a.freqs = TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64});
    a.positions = TensorView::contiguous(positions.data(), DType::kInt64, {N});
    a.slots = TensorView::contiguous(slots.data(), DType::kInt64, {N});
    a.kvcache = TensorView::contiguous(cache.data(), DType::kUInt8, {num_pages, kside_token_bytes(recipe) * page_size});
    a.page_size = page_size;
    return a;
  }
};

// validate(KStoreArgs) of an accepted call is part of every key-side run(): no allocation.
TEST(AllocFree, KsideValidateOfAnAcceptedCallAllocatesNothing) {
  for (KRecipeId r : all_krecipes()) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      KsideCall k(r, 40, dt);
      const KStoreArgs a = k.args();
      Status s;
      const long n = allocations_during([&] { s = validate(a); });
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(n, 0) << krecipe_name(r) << " " << dtype_name(dt);
    }
  }
}

// A key-side CPU call after the first allocates nothing (every recipe, supported ISA and auto,
// threads 1 and N; 300 tokens: above the inline threshold, so threads > 1 use the pool).
TEST(AllocFree, KsideCpuCallAfterTheFirstAllocatesNothing) {
  int checked = 0;
  for (KRecipeId r : all_krecipes()) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      KsideCall k(r, 300, dt);
      const KStoreArgs a = k.args();
      ASSERT_NO_FATAL_FAILURE(expect_repeat_calls_allocate_nothing(
          a, std::string(krecipe_name(r)) + " " + dtype_name(dt), &checked));
    }
  }
  std::printf("[ alloc ] key side: %d (recipe, dtype, isa, threads) combinations: 3 calls each, allocations counted\n",
              checked);
}

}  // namespace
