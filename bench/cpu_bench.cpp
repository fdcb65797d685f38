// indexer_q_cpu_bench: times the CPU backend per ISA variant and thread count through the
// public API, beside a plain memcpy of the same traffic, and prints one line per case.
//
//   indexer_q_cpu_bench [--isa all|LIST of scalar,avx2,avx512] [--threads 1,2] [--tokens 1,64,4096]
//                       [--heads 64] [--dtype bf16|fp16|fp32] [--iters 30] [--inline-rows N]
//                       [--recipe v4_fp8|all|LIST of recipe names] [--format csv|table]
//
// --recipe all times every recipe of include/indexer_q/recipes.inc (one line per recipe, ISA
// and case, in the same run); the default is v4_fp8.
// --inline-rows N sets the row count below which a call stays on the calling thread (the
// library's default is printed); use 0 to time the pool even for tiny batches, which is how
// the default was chosen. Times are medians of wall-clock time per call; inputs rotate over
// enough buffer sets (>= 64 MiB in all) that every call reads from memory, not cache.
// 'cpu ns/row' (1 thread only, else -1): the calling thread's CPU time per row, which leaves
// out time the thread spent descheduled on a shared machine.
// The copy beside each case moves the same bytes (half read, half written) with the same number
// of threads, on a persistent team of threads (as the library's pool is), so that thread start-up
// is not timed as copy time; 'bytes' (last column) is what one call moves (bytes_moved()).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include "common/problem.h"
#include "cpu/cpu_internal.h"
#include "indexer_q/indexer_q.h"

using namespace indexer_q;

namespace {

std::vector<long long> parse_list(const char* s) {
  std::vector<long long> v;
  std::string str(s);
  std::size_t pos = 0;
  while (pos <= str.size()) {
    const std::size_t comma = str.find(',', pos);
    const std::string item = str.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) v.push_back(std::atoll(item.c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_s() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

template <typename F>
double median_us(F&& fn, int iters) {
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) fn(i);
  for (int i = 0; i < iters; ++i) {
    const double t0 = now_s();
    fn(i);
    t.push_back((now_s() - t0) * 1e6);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Persistent copy threads: part 0 runs on the caller, parts 1..n-1 on workers that spin on a
// generation counter (a benchmark: burning the cores between calls is fine).
class CopyTeam {
 public:
  explicit CopyTeam(int n) : n_(n < 1 ? 1 : n) {
    for (int t = 1; t < n_; ++t) ts_.emplace_back([this, t] { work(t); });
  }
  ~CopyTeam() {
    stop_.store(true);
    gen_.fetch_add(1);
    for (auto& t : ts_) t.join();
  }
  void copy(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) {
    dst_ = dst;
    src_ = src;
    bytes_ = n;
    left_.store(n_ - 1);
    gen_.fetch_add(1, std::memory_order_release);
    part(0);
    while (left_.load(std::memory_order_acquire) != 0) {
    }
  }

 private:
  void part(int t) {
    const std::size_t b = bytes_ * std::size_t(t) / std::size_t(n_), e = bytes_ * std::size_t(t + 1) / std::size_t(n_);
    std::memcpy(dst_ + b, src_ + b, e - b);
  }
  void work(int t) {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t g;
      while ((g = gen_.load(std::memory_order_acquire)) == seen) {
      }
      seen = g;
      if (stop_.load()) return;
      part(t);
      left_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  int n_;
  std::vector<std::thread> ts_;
  std::atomic<std::uint64_t> gen_{0};
  std::atomic<int> left_{0};
  std::atomic<bool> stop_{false};
  std::uint8_t* dst_ = nullptr;
  const std::uint8_t* src_ = nullptr;
  std::size_t bytes_ = 0;
};

struct Set {
  std::vector<std::uint8_t> q, out, sf, w;
  std::vector<float> wo;
  std::vector<std::int64_t> pos;
};

}  // namespace

int main(int argc, char** argv) {
  std::string isa_arg = "all", dtype_arg = "bf16", format = "table", recipe_arg = "v4_fp8";
  std::vector<long long> threads = {1}, tokens = {1, 4, 16, 64, 256, 4096}, heads = {64};
  int iters = 30;
  long long inline_rows = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--isa" && v) isa_arg = argv[++i];
    else if (a == "--threads" && v) threads = parse_list(argv[++i]);
    else if (a == "--tokens" && v) tokens = parse_list(argv[++i]);
    else if (a == "--heads" && v) heads = parse_list(argv[++i]);
    else if (a == "--dtype" && v) dtype_arg = argv[++i];
    else if (a == "--iters" && v) iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--inline-rows" && v) inline_rows = std::atoll(argv[++i]);
    else if (a == "--format" && v) format = argv[++i];
    else if (a == "--recipe" && v) recipe_arg = argv[++i];
    else {
      std::fprintf(stderr, "unknown or incomplete argument '%s' (see the comment at the top of bench/cpu_bench.cpp)\n", a.c_str());
      return 2;
    }
  }
  DType dt = DType::kBFloat16;
  if (dtype_arg == "fp16") dt = DType::kFloat16;
  else if (dtype_arg == "fp32") dt = DType::kFloat32;
  else if (dtype_arg != "bf16") { std::fprintf(stderr, "bad --dtype\n"); return 2; }
  std::vector<CpuIsa> isas;
  if (isa_arg == "all") {
    isas = supported_cpu_isas();
  } else {
    std::size_t pos = 0;
    while (pos <= isa_arg.size()) {
      const std::size_t comma = isa_arg.find(',', pos);
      const std::string name = isa_arg.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      CpuIsa isa;
      if (!parse_cpu_isa(name, &isa) || isa == CpuIsa::kAuto) { std::fprintf(stderr, "bad --isa '%s'\n", name.c_str()); return 2; }
      if (!cpu_isa_supported(isa)) { std::fprintf(stderr, "isa %s not supported here\n", name.c_str()); return 1; }
      isas.push_back(isa);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  std::vector<RecipeId> recipes;
  if (recipe_arg == "all") {
    recipes = all_recipes();
  } else {
    std::size_t pos = 0;
    while (pos <= recipe_arg.size()) {
      const std::size_t comma = recipe_arg.find(',', pos);
      const std::string name = recipe_arg.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      RecipeId rid;
      if (!parse_recipe(name, &rid)) { std::fprintf(stderr, "bad --recipe '%s'\n", name.c_str()); return 2; }
      recipes.push_back(rid);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  const long long default_inline = detail::cpu::inline_row_threshold();
  if (inline_rows >= 0) detail::cpu::set_inline_row_threshold(inline_rows);

  const bool csv = format == "csv";
  std::printf("# indexer_q_cpu_bench: inline-rows default %lld, used %lld\n", default_inline,
              (long long)detail::cpu::inline_row_threshold());
  if (csv)
    std::printf("recipe,isa,dtype,tokens,heads,threads,inline_rows,us_median,ns_per_row,cpu_ns_per_row,gbps,copy_gbps,ratio_to_copy,exact,bytes\n");
  else
    std::printf("%-19s %-7s %-5s %6s %5s %3s %7s %10s %9s %10s %8s %9s %6s %5s %11s\n", "recipe", "isa", "dtype", "tokens",
                "heads", "thr", "inline", "us", "ns/row", "cpu ns/row", "GB/s", "copy GB/s", "ratio", "exact", "bytes");
  std::mt19937 rng(7);
  const std::int64_t max_pos = 8192;
  std::vector<float> freqs(std::size_t(max_pos) * 64);
  for (auto& f : freqs) f = float(int(rng() % 20001) - 10000) * 1e-4f;
  int failures = 0;
  for (RecipeId rid : recipes) {
  const Recipe& rc = recipe(rid);
  const bool fp4 = rc.format == OutFormat::kE2M1;
  const std::int64_t od = fp4 ? 64 : 128;
  const DType qdt = fp4 ? DType::kUInt8 : rc.format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3;
  for (long long H : heads) {
    for (long long B : tokens) {
      const std::int64_t rows = B * H;
      const std::size_t es = dtype_size(dt);
      const std::int64_t bytes = detail::bytes_moved(B, H, dt, DType::kInt64, rid);
      const int nsets = int(std::max<std::int64_t>(1, std::min<std::int64_t>(256, (64ll << 20) / std::max<std::int64_t>(bytes, 1))));
      std::vector<Set> sets(nsets);
      for (Set& s : sets) {
        s.q.resize(std::size_t(rows) * 128 * es);
        for (std::size_t i = 0; i + 1 < s.q.size(); i += 2) {
          // bf16/fp16 payloads of moderate magnitude; fp32 built from two such halves.
          const std::uint16_t h = std::uint16_t(0x3c00 + int(rng() % 0x800) - 0x400) ^ std::uint16_t(rng() & 0x8000);
          std::memcpy(&s.q[i], &h, 2);
        }
        if (dt == DType::kFloat32)
          for (std::size_t i = 0; i < s.q.size(); i += 4) {
            const float f = float(int(rng() % 20001) - 10000) * 1e-3f;
            std::memcpy(&s.q[i], &f, 4);
          }
        s.out.assign(std::size_t(rows * od), 0);
        s.sf.assign(std::size_t(rows) * 4, 0);
        s.w.assign(std::size_t(rows) * es, 0);
        s.wo.assign(std::size_t(rows), 0.0f);
        s.pos.resize(std::size_t(B));
        for (auto& p : s.pos) p = std::int64_t(rng() % max_pos);
      }
      auto call = [&](Set& s, const Options& opt) {
        OpArgs a;
        a.recipe = rid;
        a.q_input = TensorView::contiguous(s.q.data(), dt, {B, H, 128});
        a.q_out = TensorView::contiguous(s.out.data(), qdt, {B, H, od});
        if (fp4) a.q_scale = TensorView::contiguous(s.sf.data(), DType::kInt32, {B, H});
        else if (recipe(rid).scale_out) a.q_scale = TensorView::contiguous(s.sf.data(), DType::kFloat32, {B, H});
        const Recipe& rc = recipe(rid);  // a recipe without weights / RoPE takes empty views there
        if (recipe_has_weights(rc)) {
          a.weight = TensorView::contiguous(s.w.data(), dt, {B, H});
          a.weights_out = TensorView::contiguous(s.wo.data(), DType::kFloat32, {B, H, 1});
        }
        a.weight_scale = 0.5f;
        a.head_scale = 0.125f;  // vLLM's 64**-0.5 (two-factor folds; the others ignore it)
        if (recipe_has_rope(rc)) {
          a.freqs = TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64});
          a.positions = TensorView::contiguous(s.pos.data(), DType::kInt64, {B});
        }
        return run(a, opt);
      };
      // Reference output of set 0 for the byte check.
      Options ref_opt;
      ref_opt.backend = Backend::kReference;
      if (!call(sets[0], ref_opt).ok()) return 1;
      const std::vector<std::uint8_t> ref_q = sets[0].out;
      const std::vector<std::uint8_t> ref_sf = sets[0].sf;
      const std::vector<float> ref_w = sets[0].wo;
      for (long long T : threads) {
        // memcpy of the same traffic (half read, half written), same thread count.
        std::vector<std::uint8_t> src(std::size_t(bytes / 2) * nsets + 64, 1), dst(src.size(), 0);
        double copy_us;
        {
          // Small copies stay on one thread, as the library keeps small calls inline.
          const std::size_t n = std::size_t(bytes / 2);
          CopyTeam team(T <= 1 || n < (std::size_t(1) << 20) ? 1 : int(T));
          copy_us = median_us([&](int it) {
            const std::size_t off = std::size_t(it % nsets) * n;
            team.copy(dst.data() + off, src.data() + off, n);
          }, iters);
        }
        for (CpuIsa isa : isas) {
          Options opt;
          opt.backend = Backend::kCpu;
          opt.cpu_isa = isa;
          opt.num_threads = int(T);
          bool ok = true;
          const double us = median_us([&](int it) { ok = call(sets[std::size_t(it % nsets)], opt).ok() && ok; }, iters);
          // With 1 thread the work runs on this thread: its CPU time excludes time spent
          // descheduled, which matters on a shared machine. Median over the same calls.
          double cpu_ns_row = -1.0;
          if (T == 1) {
            std::vector<double> ts;
            for (int it = 0; it < iters; ++it) {
              const double c0 = thread_cpu_s();
              ok = call(sets[std::size_t(it % nsets)], opt).ok() && ok;
              ts.push_back(thread_cpu_s() - c0);
            }
            std::sort(ts.begin(), ts.end());
            cpu_ns_row = ts[ts.size() / 2] * 1e9 / double(rows);
          }
          ok = ok && call(sets[0], opt).ok();
          bool exact = ok && sets[0].out == ref_q && sets[0].sf == ref_sf;
          for (std::size_t i = 0; exact && i < ref_w.size(); ++i)
            exact = std::memcmp(&sets[0].wo[i], &ref_w[i], 4) == 0;
          failures += !exact;
          const double gbps = double(bytes) / (us * 1e3);
          const double copy_gbps = double(bytes) / (copy_us * 1e3);
          std::printf(csv ? "%s,%s,%s,%lld,%lld,%lld,%lld,%.3f,%.2f,%.2f,%.3f,%.3f,%.4f,%s,%lld\n"
                          : "%-19s %-7s %-5s %6lld %5lld %3lld %7lld %10.3f %9.2f %10.2f %8.3f %9.3f %6.3f %5s %11lld\n",
                      recipe_name(rid), cpu_isa_name(isa), dtype_name(dt), B, H, T,
                      (long long)detail::cpu::inline_row_threshold(), us, us * 1e3 / double(rows), cpu_ns_row, gbps,
                      copy_gbps, gbps / copy_gbps, exact ? "yes" : "NO", (long long)bytes);
          std::fflush(stdout);
        }
      }
    }
  }
  }  // recipes
  return failures == 0 ? 0 : 1;
}
