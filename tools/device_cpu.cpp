// The CPU DeviceRuntime: host memory, memcpy, wall-clock timing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "device.h"

namespace indexer_q {
namespace cli {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        m.erase(0, m.find_first_not_of(" \t"));
        return m;
      }
    }
  }
  return "unknown processor";
}

// Test hook: INDEXER_Q_CLI_THREAD_LIMIT=K makes the (K+1)-th thread start of the copy pool
// fail as the system does when it refuses a thread (std::system_error, EAGAIN), so the CTests
// can check what follows on any machine, as root too (where RLIMIT_NPROC does not bite).
void start_thread(std::vector<std::thread>* workers, std::function<void()> fn) {
  if (const char* lim = std::getenv("INDEXER_Q_CLI_THREAD_LIMIT"))
    if (workers->size() >= std::size_t(std::strtoull(lim, nullptr, 10)))
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "thread start refused (INDEXER_Q_CLI_THREAD_LIMIT)");
  workers->emplace_back(std::move(fn));
}

// A persistent pool that splits one memcpy across threads (no thread creation per copy).
// When a thread cannot be started the pool keeps the ones it has (the copy is split over
// fewer threads) and says so on stderr once; it never fails or waits for the missing one.
class CopyPool {
 public:
  explicit CopyPool(int threads) : n_(std::max(threads, 1)) {
    const int want = n_;
    for (int i = 1; i < want; ++i) {
      try {
        start_thread(&workers_, [this, i] { loop(i); });
      } catch (const std::system_error& e) {
        std::lock_guard<std::mutex> lk(m_);
        n_ = i;  // workers 1 .. i - 1 run; no copy has been split yet
        std::fprintf(stderr, "indexer-q: note: the copy pool runs on %d of %d threads (%s)\n", n_, want, e.what());
        break;
      }
    }
  }
  ~CopyPool() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return n_; }
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (n_ == 1 || bytes < (std::size_t(1) << 20)) {
      std::memcpy(dst, src, bytes);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(m_);
      dst_ = static_cast<char*>(dst);
      src_ = static_cast<const char*>(src);
      bytes_ = bytes;
      pending_ = n_ - 1;
      ++generation_;
    }
    cv_.notify_all();
    chunk(0);
    std::unique_lock<std::mutex> lk(m_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
  }

 private:
  void chunk(int i) {
    const std::size_t per = (bytes_ / std::size_t(n_) + 63) & ~std::size_t(63);
    const std::size_t lo = std::min(bytes_, per * std::size_t(i));
    const std::size_t hi = std::min(bytes_, lo + per);
    if (hi > lo) std::memcpy(dst_ + lo, src_ + lo, hi - lo);
  }
  void loop(int i) {
    std::uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
      }
      chunk(i);
      {
        std::lock_guard<std::mutex> lk(m_);
        if (--pending_ == 0) done_cv_.notify_one();
      }
    }
  }
  int n_;
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  int pending_ = 0;
  char* dst_ = nullptr;
  const char* src_ = nullptr;
  std::size_t bytes_ = 0;
};

class CpuRuntime final : public DeviceRuntime {
 public:
  explicit CpuRuntime(int copy_threads) : pool_(copy_threads) {}
  Device device() const override { return Device{}; }
  std::string name() const override {
    return "cpu: " + cpu_model() + " (" + std::to_string(std::thread::hardware_concurrency()) +
           " hardware threads)";
  }
  void* alloc(std::size_t bytes) override {
    const std::size_t n = std::max<std::size_t>((bytes + 63) & ~std::size_t(63), 64);
    void* p = std::aligned_alloc(64, n);
    if (!p) throw std::runtime_error("cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  void to_device(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void fill(void* dst, unsigned char value, std::size_t bytes) override { std::memset(dst, value, bytes); }
  void synchronize() override {}
  void* stream() override { return nullptr; }

  // Median over `iters` samples; each sample times a batch of k back-to-back calls (k chosen
  // so a batch lasts >= ~50 us, which keeps clock overhead out of sub-microsecond calls) and
  // reports the batch time / k.
  double time_median_us(const std::function<void()>& fn, int warmup, int iters) override {
    for (int i = 0; i < warmup; ++i) fn();
    auto t0 = Clock::now();
    fn();
    const double one = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    const int k = one >= 50.0 ? 1 : int(std::min(10000.0, std::ceil(50.0 / std::max(one, 0.005))));
    std::vector<double> samples;
    for (int s = 0; s < std::max(iters, 1); ++s) {
      t0 = Clock::now();
      for (int j = 0; j < k; ++j) fn();
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / k);
    }
    return median(samples);
  }

  // memcpy of `bytes` bytes, split over the runtime's threads from 1 MiB up. Small copies rotate
  // among several source/destination pairs (together >= 16 MiB, at most 1024 pairs), like
  // `indexer-q bench` does for the op, so the figure is not an L1-resident one.
  double copy_median_us(std::size_t bytes, int warmup, int iters) override {
    const std::size_t target = std::size_t(16) << 20;
    const std::size_t pair = std::max<std::size_t>(2 * bytes, 1);
    const std::size_t sets = std::min<std::size_t>(1024, std::max<std::size_t>(1, (target + pair - 1) / pair));
    std::vector<void*> src(sets), dst(sets);
    for (std::size_t i = 0; i < sets; ++i) {
      src[i] = alloc(bytes);
      dst[i] = alloc(bytes);
      std::memset(src[i], int(i & 0xff), bytes);
      std::memset(dst[i], 0, bytes);
    }
    std::size_t k = 0;
    const double us = time_median_us(
        [&] {
          pool_.copy(dst[k], src[k], bytes);
          k = (k + 1) % sets;
        },
        warmup, iters);
    for (std::size_t i = 0; i < sets; ++i) {
      release(src[i]);
      release(dst[i]);
    }
    return us;
  }

 private:
  CopyPool pool_;
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_cpu_runtime() { return make_cpu_runtime(1); }
std::unique_ptr<DeviceRuntime> make_cpu_runtime(int copy_threads) {
  return std::unique_ptr<DeviceRuntime>(new CpuRuntime(copy_threads));
}

}  // namespace cli
}  // namespace indexer_q
