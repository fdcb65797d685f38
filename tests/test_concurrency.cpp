// Many callers at once: the CPU backend (one process-wide worker pool) under concurrent use.
//
// 8 caller threads run a mix of jobs at the same time (every recipe, bf16 / fp16 / fp32 inputs,
// int32 / int64 positions, padded weight rows, every supported ISA and auto, 1..5 threads, small
// and large batches). Every output is compared byte for byte with the same call made alone
// before the threads start (memcmp: races show up as any changed byte) and with the reference
// (compare(): NaN payloads aside, exact). Each job counts its completed calls: no lost work.
// The whole test is bounded by a watchdog: a deadlock aborts with a message instead of hanging.
//
// The pool's contract (src/cpu/thread_pool.h): one caller at a time gets the workers, the
// others (and calls made from inside a worker) run inline. It must survive callers that end
// abnormally between calls: a thread that throws (the exception unwinds out of its function),
// a thread cancelled with pthread_cancel while it sleeps between calls, and callers exiting while
// others are inside a call.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__unix__)
#include <pthread.h>
#include <unistd.h>
#endif

#include "cpu/cpu_internal.h"
#include "cpu/thread_pool.h"
#include "iq_test_util.h"

namespace {

using namespace iqtest;

struct RowThresholdGuard {  // lets small batches use the pool, so every job can contend for it
  std::int64_t saved = detail::cpu::inline_row_threshold();
  explicit RowThresholdGuard(std::int64_t rows) { detail::cpu::set_inline_row_threshold(rows); }
  ~RowThresholdGuard() { detail::cpu::set_inline_row_threshold(saved); }
};

// Ends the process if `done` is not set within `seconds`: a deadlocked test cannot hang CI.
class Watchdog {
 public:
  Watchdog(const char* what, int seconds) : what_(what) {
    th_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "test_concurrency: %s did not finish within %d s (deadlock or lost work)\n",
                     what_, seconds);
        std::fflush(stderr);
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    th_.join();
  }

 private:
  const char* what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread th_;
};

struct Job {
  HostCase c;
  BackendUnderTest be;
  Outputs alone;  // the same call made with no other caller
  std::atomic<int> completed{0};
  std::atomic<int> failures{0};
  std::string first_failure;  // written once, under fail_mu
};

bool same_bytes(const Outputs& a, const Outputs& b) {
  return a.q_out == b.q_out && a.q_sf == b.q_sf && a.weights_out.size() == b.weights_out.size() &&
         (a.weights_out.empty() ||
          std::memcmp(a.weights_out.data(), b.weights_out.data(), a.weights_out.size() * 4) == 0);
}

// The job mix: every recipe, the three input dtypes, both position dtypes, every ISA + auto,
// thread counts 1..5, batches from one row to a few hundred.
std::vector<std::unique_ptr<Job>> make_jobs() {
  std::vector<std::unique_ptr<Job>> jobs;
  const std::vector<RecipeId> recipes = all_recipes();
  std::vector<CpuIsa> isas = supported_cpu_isas();
  isas.push_back(CpuIsa::kAuto);
  const DType dtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
  const std::int64_t shapes[][2] = {{1, 1}, {3, 8}, {17, 16}, {64, 8}, {40, 32}, {5, 64}};
  int k = 0;
  for (RecipeId r : recipes) {
    for (int j = 0; j < 2; ++j, ++k) {
      auto job = std::make_unique<Job>();
      const auto& s = shapes[(k + k / 6) % 6];
      const DType pos = (k % 2) ? DType::kInt32 : DType::kInt64;
      job->c = random_case(s[0], s[1], dtypes[k % 3], pos, s[1] + (k % 3), 1000 + k, r);
      job->c.weights_out_2d = (k % 4) == 1;
      if (indexer_q::recipe(r).quant == Quantizer::kVllm) job->c.head_scale = 0.125f;
      const CpuIsa isa = isas[std::size_t(k / 3) % isas.size()];
      job->be.name = std::string("cpu/") + cpu_isa_name(isa) + "/threads=" + std::to_string(1 + k % 5);
      job->be.options.backend = Backend::kCpu;
      job->be.options.cpu_isa = isa;
      job->be.options.num_threads = 1 + k % 5;
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

TEST(Concurrency, ManyCallersEveryRecipeIsaAndThreadCountByteExact) {
  RowThresholdGuard guard(0);
  std::vector<std::unique_ptr<Job>> jobs = make_jobs();
  BackendUnderTest ref;
  ref.options.backend = Backend::kReference;
  for (auto& j : jobs) {
    ASSERT_TRUE(run_case(j->be, j->c, &j->alone, 0xA5).ok()) << j->c.describe();
    Outputs want;
    ASSERT_TRUE(run_case(ref, j->c, &want, 0x5A).ok()) << j->c.describe();
    const Comparison cmp = compare(j->alone, want, j->c.H);
    ASSERT_TRUE(cmp.exact()) << j->be.name << " " << j->c.describe() << ": " << cmp.summary();
  }

  constexpr int kCallers = 8, kRounds = 6;
  std::mutex fail_mu;
  std::atomic<int> started{0};
  {
    Watchdog dog("8 callers x every job", 240);
    std::vector<std::thread> callers;
    for (int t = 0; t < kCallers; ++t) {
      callers.emplace_back([&, t] {
        started.fetch_add(1);
        while (started.load() < kCallers) std::this_thread::yield();  // all start together
        for (int round = 0; round < kRounds; ++round) {
          for (std::size_t i = 0; i < jobs.size(); ++i) {
            Job& j = *jobs[(i + std::size_t(t) * 3) % jobs.size()];  // each caller its own order
            Outputs o;
            const Status s = run_case(j.be, j.c, &o, std::uint8_t(0x11 * (t + 1)));
            if (!s.ok() || !same_bytes(o, j.alone)) {
              if (j.failures.fetch_add(1) == 0) {
                std::lock_guard<std::mutex> lk(fail_mu);
                j.first_failure = "caller " + std::to_string(t) + ": " +
                                  (s.ok() ? compare(o, j.alone, j.c.H).summary() : s.message());
              }
            }
            j.completed.fetch_add(1);
          }
        }
      });
    }
    for (auto& th : callers) th.join();
  }
  int total = 0;
  for (auto& j : jobs) {
    EXPECT_EQ(j->failures.load(), 0) << j->be.name << " " << j->c.describe() << ": " << j->first_failure;
    EXPECT_EQ(j->completed.load(), kCallers * kRounds) << j->be.name << " " << j->c.describe();
    total += j->completed.load();
  }
  EXPECT_EQ(total, int(jobs.size()) * kCallers * kRounds);
  std::printf("[ concurrency ] %d calls by %d threads over %zu jobs, all byte-identical to the call alone\n",
              total, kCallers, jobs.size());
}

// The pool after callers that ended abnormally: it still serves a fresh thread (the workers run
// its parts: pool_try_run returns true and every part runs exactly once), its worker count has
// not grown, and results stay exact.
struct Parts {
  std::atomic<int> hits[8];
  Parts() {
    for (auto& h : hits) h.store(0);
  }
};

bool pool_serves_all_parts() {
  Parts parts;
  bool ran = false;
  // Another test's thread may still hold the pool for a moment: retry a little.
  for (int attempt = 0; attempt < 200 && !ran; ++attempt) {
    ran = detail::cpu::pool_try_run(
        4, [](void* ctx, int part) { static_cast<Parts*>(ctx)->hits[part].fetch_add(1); }, &parts);
    if (!ran) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!ran) return false;
  for (int p = 0; p < 4; ++p)
    if (parts.hits[p].load() != 1) return false;
  for (int p = 4; p < 8; ++p)
    if (parts.hits[p].load() != 0) return false;
  return true;
}

// A call made from inside a pool worker (a part of another call) runs inline: no deadlock, exact
// bytes, while other callers contend for the pool.
TEST(Concurrency, CallsFromInsideAPoolWorkerRunInline) {
  RowThresholdGuard guard(0);
  struct Nested {
    HostCase c;
    BackendUnderTest be;
    Outputs alone;
    std::atomic<int> bad{0}, calls{0};
  } n;
  n.c = random_case(40, 8, DType::kFloat16, DType::kInt32, 9, 5, RecipeId::kV4Fp4);
  n.be.options.backend = Backend::kCpu;
  n.be.options.num_threads = 3;
  ASSERT_TRUE(run_case(n.be, n.c, &n.alone, 0xA5).ok());
  Watchdog dog("nested calls", 120);
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop.load()) {
      Outputs o;
      if (!run_case(n.be, n.c, &o, 0x21).ok() || !same_bytes(o, n.alone)) ++n.bad;
    }
  });
  int ran = 0;
  for (int i = 0; i < 20; ++i) {
    ran += detail::cpu::pool_try_run(
        3,
        [](void* ctx, int) {
          auto* x = static_cast<Nested*>(ctx);
          Outputs o;
          if (!run_case(x->be, x->c, &o, 0x7e).ok() || !same_bytes(o, x->alone)) ++x->bad;
          x->calls.fetch_add(1);
        },
        &n);
  }
  stop.store(true);
  other.join();
  EXPECT_EQ(n.bad.load(), 0);
  EXPECT_EQ(n.calls.load(), 3 * ran);  // every part of every pool run made its call
}

#if defined(__unix__)
struct CancelCtx {
  const HostCase* c;
  const BackendUnderTest* be;
  const Outputs* alone;
  std::atomic<int>* bad;
  std::atomic<int> calls{0};
};

// A caller that loops forever, cancellable only between calls (deferred cancellation, disabled
// during a call; usleep is the cancellation point). Not instrumented by ASan: a cancelled
// thread's frame is unwound without ASan un-poisoning its ended scopes, which ASan's own thread
// teardown then trips over (a false report about the test thread, not about the library).
__attribute__((no_sanitize_address)) void* cancellable_caller(void* p) {
  auto* x = static_cast<CancelCtx*>(p);
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, nullptr);
  for (;;) {
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    {
      Outputs o;
      if (!run_case(*x->be, *x->c, &o, 0x55).ok() || !same_bytes(o, *x->alone)) ++*x->bad;
    }
    x->calls.fetch_add(1);
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    usleep(200);
  }
  return nullptr;
}
#endif

TEST(Concurrency, PoolSurvivesThrowingAndCancelledCallers) {
  RowThresholdGuard guard(0);
  HostCase c = random_case(48, 16, DType::kBFloat16, DType::kInt64, 16, 77, RecipeId::kV4Fp8);
  BackendUnderTest be;
  be.options.backend = Backend::kCpu;
  be.options.num_threads = 4;
  Outputs alone;
  ASSERT_TRUE(run_case(be, c, &alone, 0xA5).ok());
  ASSERT_TRUE(pool_serves_all_parts());
  const int workers = detail::cpu::pool_worker_count();

  Watchdog dog("abnormal callers", 120);
  std::atomic<int> bad{0};
  // 1. Callers that throw between calls: the exception unwinds out of the thread's function
  //    (caught at its top), the thread ends; others keep calling meanwhile.
  {
    std::vector<std::thread> ts;
    for (int t = 0; t < 6; ++t) {
      ts.emplace_back([&, t] {
        try {
          for (int i = 0; i < 10; ++i) {
            Outputs o;
            if (!run_case(be, c, &o, 0x33).ok() || !same_bytes(o, alone)) ++bad;
            if (t % 2 == 0 && i == 3 + t) throw std::runtime_error("caller gives up between calls");
          }
        } catch (const std::runtime_error&) {
        }
      });
    }
    for (auto& th : ts) th.join();
  }
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(pool_serves_all_parts());

#if defined(__unix__)
  // 2. Callers cancelled (pthread_cancel) while they sleep between calls, as another thread
  //    uses the pool: no lock of the pool is held between calls, so nothing is left locked.
  {
    std::atomic<bool> stop{false};
    std::thread busy([&] {  // another caller all along
      while (!stop.load()) {
        Outputs o;
        if (!run_case(be, c, &o, 0x44).ok() || !same_bytes(o, alone)) ++bad;
      }
    });
    std::vector<pthread_t> victims(4);
    std::vector<std::unique_ptr<CancelCtx>> ctxs;
    for (auto& v : victims) {
      ctxs.push_back(std::make_unique<CancelCtx>());
      CancelCtx* x = ctxs.back().get();
      x->c = &c;
      x->be = &be;
      x->alone = &alone;
      x->bad = &bad;
      ASSERT_EQ(pthread_create(&v, nullptr, cancellable_caller, x), 0);
    }
    for (auto& x : ctxs)
      while (x->calls.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (auto& v : victims) {
      ASSERT_EQ(pthread_cancel(v), 0);
      void* ret = nullptr;
      ASSERT_EQ(pthread_join(v, &ret), 0);
      EXPECT_EQ(ret, PTHREAD_CANCELED);
    }
    stop.store(true);
    busy.join();
  }
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(pool_serves_all_parts());
#endif

  // 3. After all that: a fresh caller gets the workers and exact bytes, and no worker was added
  //    (the pool is reused, never grown per call or per caller).
  Outputs o;
  ASSERT_TRUE(run_case(be, c, &o, 0x66).ok());
  EXPECT_TRUE(same_bytes(o, alone));
  EXPECT_EQ(detail::cpu::pool_worker_count(), workers);
}

// Key side, duplicate slots (docs/KSIDE.md): several tokens of one call naming the same slot give
// the one-thread result (the last token of the slot in token order decides its row, no row mixes
// two tokens) on every thread count, every supported ISA, every time: 12 repeated calls per
// (ISA, threads) for threads 1, 2, 3, 4, 8, each compared with the reference byte for byte, and
// the number of distinct caches counted. The slots: (0) a quarter of the tokens share them at
// random, and around every part boundary of 2..8 threads the token before the boundary and the one
// after it share a slot (the later token, which must win, is the first one its part stores);
// (1) growing slots, three tokens each (the slot ranges of neighbouring parts touch or not).
TEST(Concurrency, KsideDuplicateSlotsGiveTheOneThreadResult) {
  const RowThresholdGuard small_batches_use_the_pool(0);
  const Watchdog wd("KsideDuplicateSlotsGiveTheOneThreadResult", 300);
  for (KRecipeId recipe : all_krecipes())
  for (int pattern = 0; pattern < 2; ++pattern) {
    const std::int64_t N = 960, page_size = 16, num_pages = 66, max_pos = 64;  // rows 0 .. 1055
    std::mt19937 rng(7 + int(recipe));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> input(static_cast<std::size_t>(N * 128)), weight(128), freqs = rope_freqs(max_pos);
    for (float& v : input) v = nd(rng);
    for (float& v : weight) v = 1.0f + 0.25f * nd(rng);
    std::vector<std::int64_t> positions(static_cast<std::size_t>(N)), slots(static_cast<std::size_t>(N));
    for (std::int64_t t = 0; t < N; ++t) {
      positions[std::size_t(t)] = std::int64_t(rng() % std::uint32_t(max_pos));
      if (pattern == 0) slots[std::size_t(t)] = (t % 4 == 0) ? std::int64_t(rng() % 64) : 64 + t;  // rows 64.. unique
      else slots[std::size_t(t)] = t / 3;  // growing slots, three tokens each (slot ranges of parts touch)
    }
    if (pattern == 0)
      for (int parts = 2; parts <= 8; ++parts)
        for (int k = 1; k < parts; ++k) {
          const std::int64_t b = N * k / parts;  // first token of part k (kside_backend.cpp's split)
          slots[std::size_t(b)] = slots[std::size_t(b - 1)];
        }
    const std::int64_t page_bytes = kside_token_bytes(recipe) * page_size;
    auto call = [&](const Options& o) {
      std::vector<std::uint8_t> cache(std::size_t(num_pages * page_bytes), 0xA5);
      KStoreArgs a;
      a.recipe = recipe;
      a.input = TensorView::contiguous(input.data(), DType::kFloat32, {N, 128});
      a.weight = TensorView::contiguous(weight.data(), DType::kFloat32, {128});
      a.eps = 1e-6f;
      a.freqs = TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64});
      a.positions = TensorView::contiguous(positions.data(), DType::kInt64, {N});
      a.slots = TensorView::contiguous(slots.data(), DType::kInt64, {N});
      a.kvcache = TensorView::contiguous(cache.data(), DType::kUInt8, {num_pages, page_bytes});
      a.page_size = page_size;
      const Status s = run(a, o);
      EXPECT_TRUE(s.ok()) << s.message();
      return cache;
    };
    Options ro;
    ro.backend = Backend::kReference;
    const std::vector<std::uint8_t> want = call(ro);
    // The reference is one token after the other: check that its answer is indeed "the last token
    // wins" (a call of only the winners gives the same cache).
    {
      std::vector<std::int64_t> saved = slots;
      std::set<std::int64_t> seen;
      for (std::int64_t t = N - 1; t >= 0; --t)
        if (!seen.insert(slots[std::size_t(t)]).second) slots[std::size_t(t)] = -1;
      EXPECT_TRUE(call(ro) == want) << krecipe_name(recipe) << ": the reference is not 'last token wins'";
      slots = saved;
    }
    for (CpuIsa isa : supported_cpu_isas())
      for (int threads : {1, 2, 3, 4, 8}) {
        Options o;
        o.backend = Backend::kCpu;
        o.cpu_isa = isa;
        o.num_threads = threads;
        std::set<std::vector<std::uint8_t>> distinct;
        int wrong = 0;
        for (int rep = 0; rep < 12; ++rep) {
          std::vector<std::uint8_t> got = call(o);
          wrong += got != want;
          distinct.insert(std::move(got));
        }
        EXPECT_EQ(distinct.size(), 1u) << krecipe_name(recipe) << " pattern " << pattern << " cpu/" << cpu_isa_name(isa) << " threads "
                                       << threads << ": distinct caches over 12 calls";
        EXPECT_EQ(wrong, 0) << krecipe_name(recipe) << " pattern " << pattern << " cpu/" << cpu_isa_name(isa) << " threads " << threads
                            << ": calls whose cache is not the reference's (last token of a slot wins)";
      }
  }
}

}  // namespace
