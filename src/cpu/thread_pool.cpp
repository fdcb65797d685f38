// The CPU backend's worker pool: persistent threads woken per job by a generation counter.
// Workers spin briefly (a small batch arriving right after the previous one is picked up
// without a sleep/wake round trip) and then sleep on a condition variable.
#include "cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#define IQ_CPU_RELAX() _mm_pause()
#else
#define IQ_CPU_RELAX() std::this_thread::yield()
#endif

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define IQ_HAVE_ATFORK 1
#endif

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

constexpr int kSpinIterations = 2000;  // pause instructions (~10-100 us, by CPU) before sleeping
constexpr int kMaxWorkers = 1023;

thread_local bool t_is_pool_worker = false;

class Pool {
 public:
  // Exclusive use of the pool by one caller at a time.
  std::mutex use_mu;

  bool run(int nparts, void (*fn)(void*, int), void* ctx) {
    if (t_is_pool_worker) return false;
    std::unique_lock<std::mutex> use(use_mu, std::try_to_lock);
    if (!use.owns_lock()) return false;
    int helpers = nparts - 1;
    if (helpers > kMaxWorkers) return false;
    helpers = grow(helpers);
    if (helpers == 0) return false;  // no worker could be started: run inline
    // Fewer workers than asked (thread creation failed): parts beyond them run here too.
    const int parts_here_from = helpers + 1;
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = fn;
      ctx_ = ctx;
      helpers_ = helpers;
      remaining_.store(helpers, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_cv_.notify_all();
    fn(ctx, 0);
    for (int part = parts_here_from; part < nparts; ++part) fn(ctx, part);
    // Wait for the helpers: spin, then sleep.
    for (int i = 0; i < kSpinIterations; ++i) {
      if (remaining_.load(std::memory_order_acquire) == 0) return true;
      IQ_CPU_RELAX();
    }
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
    return true;
  }

  int workers() {
    std::lock_guard<std::mutex> lk(mu_);
    return nworkers_;
  }

 private:
  // Starts workers until there are `want`; returns how many there are, at most `want` (fewer
  // only if the system refuses to start a thread: the library never throws).
  int grow(int want) {
    std::lock_guard<std::mutex> lk(mu_);
    while (nworkers_ < want) {
      const int index = nworkers_;
      const std::uint64_t gen = generation_.load(std::memory_order_relaxed);
      try {
        std::thread([this, index, gen] { worker(index, gen); }).detach();
      } catch (...) {
        break;
      }
      ++nworkers_;
    }
    return nworkers_ < want ? nworkers_ : want;
  }

  void worker(int index, std::uint64_t seen) {
    t_is_pool_worker = true;
    for (;;) {
      // Wait for a new generation.
      std::uint64_t gen = generation_.load(std::memory_order_acquire);
      for (int i = 0; i < kSpinIterations && gen == seen; ++i) {
        IQ_CPU_RELAX();
        gen = generation_.load(std::memory_order_acquire);
      }
      void (*fn)(void*, int) = nullptr;
      void* ctx = nullptr;
      int helpers = 0;
      {
        std::unique_lock<std::mutex> lk(mu_);
        wake_cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_acquire);
        fn = fn_;
        ctx = ctx_;
        helpers = helpers_;
      }
      if (index < helpers) {
        fn(ctx, index + 1);
        if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          std::lock_guard<std::mutex> lk(mu_);
          done_cv_.notify_one();
        }
      }
    }
  }

  std::mutex mu_;
  std::condition_variable wake_cv_, done_cv_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  void (*fn_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  int helpers_ = 0;
  int nworkers_ = 0;
};

// Leaked on purpose: workers live until the process exits (no static destruction order
// problems), and a forked child, which has none of the parent's threads, gets a fresh pool.
std::atomic<Pool*> g_pool{nullptr};
std::once_flag g_pool_once;

#if defined(IQ_HAVE_ATFORK)
void after_fork_in_child() { g_pool.store(new Pool, std::memory_order_release); }
#endif

Pool& pool() {
  std::call_once(g_pool_once, [] {
    g_pool.store(new Pool, std::memory_order_release);
#if defined(IQ_HAVE_ATFORK)
    pthread_atfork(nullptr, nullptr, after_fork_in_child);
#endif
  });
  return *g_pool.load(std::memory_order_acquire);
}

}  // namespace

bool pool_try_run(int nparts, void (*fn)(void* ctx, int part), void* ctx) {
  if (nparts <= 1) return false;
  return pool().run(nparts, fn, ctx);
}

int pool_worker_count() { return pool().workers(); }

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
