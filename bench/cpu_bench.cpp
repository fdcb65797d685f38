// indexer_q_cpu_bench: times the CPU backend per ISA variant and thread count through the
// public API, beside a plain memcpy of the same traffic, and prints one line per case. One harness
// (main below: sizes, buffer sets, the reference check, thread counts, ISA list, the copy, the
// timing and the columns) over one description per op (CpuOp): the query side (QueryOp, the
// default) and the key side (KsideOp, --op kside). A next op is one more CpuOp and one line in
// cpu_ops().
//
//   indexer_q_cpu_bench [--op query|kside] [--isa all|LIST of scalar,avx2,avx512] [--threads 1,2]
//                       [--tokens 1,64,4096] [--heads 64 (query)] [--dtype bf16|fp16|fp32]
//                       [--iters 30] [--inline-rows N] [--recipe DEFAULT|all|LIST of recipe names]
//                       [--format csv|table]
//
// --op query (default): OpArgs calls, tokens x heads rows; --recipe default v4_fp8, --dtype
// default bf16. --op kside: KStoreArgs calls (page size 64, int64 positions, distinct random slots
// of a paged cache, eps 1e-6), a row being one key token, heads 1; --recipe default all (v4_k_fp8,
// v4_k_fp4), --dtype default fp32 (SGLang's production dtype); --heads is refused.
// --recipe all times every recipe of the op (one line per recipe, ISA and case, in the same run).
// --inline-rows N sets the row count below which a call stays on the calling thread (the
// library's default is printed; both ops use it); use 0 to time the pool even for tiny batches,
// which is how the default was chosen. Times are medians of wall-clock time per call; inputs
// rotate over enough buffer sets (>= 64 MiB in all) that every call reads from memory, not cache.
// 'cpu ns/row' (1 thread only, else -1): the calling thread's CPU time per row, which leaves
// out time the thread spent descheduled on a shared machine.
// The copy beside each case moves the same bytes (half read, half written) with the same number
// of threads, on a persistent team of threads (as the library's pool is), so that thread start-up
// is not timed as copy time; 'bytes' (last column) is what one call moves (bytes_moved() /
// kside_bytes_moved()). 'exact': set 0's outputs, poisoned (0x5A) before the checked call, equal
// byte for byte to the scalar reference's (Backend::kReference) on the same inputs; exit 1 if not.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include "common/kside_problem.h"
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

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> v;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = s.find(',', pos);
    v.push_back(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
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

// A host buffer of set 0 that the check poisons before and compares after its call.
struct Output {
  void* p;
  std::size_t bytes;
};

// One op for the harness. Its inputs come from the harness's generator (`rng`, seeded once per
// run) and its shared RoPE table (`freqs`, max_pos rows), so a run's data does not depend on
// which other cases it times.
class CpuOp {
 public:
  virtual ~CpuOp() = default;
  virtual const char* name() const = 0;  // the --op value
  virtual const char* default_recipes() const = 0;
  virtual DType default_dtype() const = 0;
  virtual bool has_heads() const = 0;    // false: --heads refused, heads 1
  // --recipe: "all" or a list of names; false after a message on stderr.
  virtual bool parse_recipes(const std::string& list) = 0;
  virtual std::size_t recipe_count() const = 0;
  virtual const char* recipe_name(std::size_t r) const = 0;

  // One case: recipe r at tokens x heads rows of dtype dt. Then bytes() and rows() describe it.
  virtual void select(std::size_t r, std::int64_t tokens, std::int64_t heads, DType dt) = 0;
  virtual std::int64_t bytes() const = 0;  // moved by one call
  virtual std::int64_t rows() const = 0;   // the ns/row divisor
  // nsets buffer sets of the selected case filled with random inputs.
  virtual void make_sets(int nsets, std::mt19937& rng) = 0;
  // One call on buffer set `set`.
  virtual Status call(int set, const Options& o) = 0;
  virtual std::vector<Output> outputs() = 0;  // set 0's
};

// ---------------------------------------------------------------------------------------
// The query side (OpArgs): the inputs of the query side's own benchmark, unchanged.
// ---------------------------------------------------------------------------------------
class QueryOp : public CpuOp {
 public:
  QueryOp(const std::vector<float>* freqs, std::int64_t max_pos) : freqs_(freqs), max_pos_(max_pos) {}
  const char* name() const override { return "query"; }
  const char* default_recipes() const override { return "v4_fp8"; }
  DType default_dtype() const override { return DType::kBFloat16; }
  bool has_heads() const override { return true; }
  bool parse_recipes(const std::string& list) override {
    recipes_.clear();
    if (list == "all") {
      recipes_ = all_recipes();
      return true;
    }
    for (const std::string& n : split_names(list)) {
      RecipeId rid;
      if (!parse_recipe(n, &rid)) {
        std::fprintf(stderr, "bad --recipe '%s'\n", n.c_str());
        return false;
      }
      recipes_.push_back(rid);
    }
    return true;
  }
  std::size_t recipe_count() const override { return recipes_.size(); }
  const char* recipe_name(std::size_t r) const override { return indexer_q::recipe_name(recipes_[r]); }
  void select(std::size_t r, std::int64_t B, std::int64_t H, DType dt) override {
    rid_ = recipes_[r];
    B_ = B;
    H_ = H;
    dt_ = dt;
  }
  std::int64_t bytes() const override { return detail::bytes_moved(B_, H_, dt_, DType::kInt64, rid_); }
  std::int64_t rows() const override { return B_ * H_; }
  void make_sets(int nsets, std::mt19937& rng) override {
    const Recipe& rc = recipe(rid_);
    const std::int64_t od = rc.format == OutFormat::kE2M1 ? 64 : 128;
    const std::int64_t rows = B_ * H_;
    const std::size_t es = dtype_size(dt_);
    sets_.assign(std::size_t(nsets), Set{});
    for (Set& s : sets_) {
      s.q.resize(std::size_t(rows) * 128 * es);
      for (std::size_t i = 0; i + 1 < s.q.size(); i += 2) {
        // bf16/fp16 payloads of moderate magnitude; fp32 built from two such halves.
        const std::uint16_t h = std::uint16_t(0x3c00 + int(rng() % 0x800) - 0x400) ^ std::uint16_t(rng() & 0x8000);
        std::memcpy(&s.q[i], &h, 2);
      }
      if (dt_ == DType::kFloat32)
        for (std::size_t i = 0; i < s.q.size(); i += 4) {
          const float f = float(int(rng() % 20001) - 10000) * 1e-3f;
          std::memcpy(&s.q[i], &f, 4);
        }
      s.out.assign(std::size_t(rows * od), 0);
      s.sf.assign(std::size_t(rows) * 4, 0);
      s.w.assign(std::size_t(rows) * es, 0);
      s.wo.assign(std::size_t(rows), 0.0f);
      s.pos.resize(std::size_t(B_));
      for (auto& p : s.pos) p = std::int64_t(rng() % max_pos_);
    }
  }
  Status call(int set, const Options& opt) override {
    Set& s = sets_[std::size_t(set)];
    const Recipe& rc = recipe(rid_);
    const bool fp4 = rc.format == OutFormat::kE2M1;
    const std::int64_t od = fp4 ? 64 : 128;
    const DType qdt = fp4 ? DType::kUInt8 : rc.format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3;
    OpArgs a;
    a.recipe = rid_;
    a.q_input = TensorView::contiguous(s.q.data(), dt_, {B_, H_, 128});
    a.q_out = TensorView::contiguous(s.out.data(), qdt, {B_, H_, od});
    if (fp4) a.q_scale = TensorView::contiguous(s.sf.data(), DType::kInt32, {B_, H_});
    else if (rc.scale_out) a.q_scale = TensorView::contiguous(s.sf.data(), DType::kFloat32, {B_, H_});
    if (recipe_has_weights(rc)) {  // a recipe without weights / RoPE takes empty views there
      a.weight = TensorView::contiguous(s.w.data(), dt_, {B_, H_});
      a.weights_out = TensorView::contiguous(s.wo.data(), DType::kFloat32, {B_, H_, 1});
    }
    a.weight_scale = 0.5f;
    a.head_scale = 0.125f;  // vLLM's 64**-0.5 (two-factor folds; the others ignore it)
    if (recipe_has_rope(rc)) {
      a.freqs = TensorView::contiguous(freqs_->data(), DType::kFloat32, {max_pos_, 64});
      a.positions = TensorView::contiguous(s.pos.data(), DType::kInt64, {B_});
    }
    return run(a, opt);
  }
  std::vector<Output> outputs() override {
    Set& s = sets_[0];
    return {{s.out.data(), s.out.size()}, {s.sf.data(), s.sf.size()}, {s.wo.data(), s.wo.size() * 4}};
  }

 private:
  struct Set {
    std::vector<std::uint8_t> q, out, sf, w;
    std::vector<float> wo;
    std::vector<std::int64_t> pos;
  };
  const std::vector<float>* freqs_;
  std::int64_t max_pos_;
  std::vector<RecipeId> recipes_ = {RecipeId::kV4Fp8};
  RecipeId rid_ = RecipeId::kV4Fp8;
  std::int64_t B_ = 0, H_ = 0;
  DType dt_ = DType::kBFloat16;
  std::vector<Set> sets_;
};

// ---------------------------------------------------------------------------------------
// The key side (KStoreArgs): N tokens into a paged cache (page size 64) at distinct random slots.
// ---------------------------------------------------------------------------------------
class KsideOp : public CpuOp {
 public:
  KsideOp(const std::vector<float>* freqs, std::int64_t max_pos) : freqs_(freqs), max_pos_(max_pos) {}
  const char* name() const override { return "kside"; }
  const char* default_recipes() const override { return "all"; }
  DType default_dtype() const override { return DType::kFloat32; }
  bool has_heads() const override { return false; }
  bool parse_recipes(const std::string& list) override {
    recipes_.clear();
    if (list == "all") {
      recipes_ = all_krecipes();
      return true;
    }
    for (const std::string& n : split_names(list)) {
      KRecipeId rid;
      if (!parse_krecipe(n, &rid)) {
        std::fprintf(stderr, "bad --recipe '%s' (a key recipe)\n", n.c_str());
        return false;
      }
      recipes_.push_back(rid);
    }
    return true;
  }
  std::size_t recipe_count() const override { return recipes_.size(); }
  const char* recipe_name(std::size_t r) const override { return krecipe_name(recipes_[r]); }
  void select(std::size_t r, std::int64_t N, std::int64_t, DType dt) override {
    rid_ = recipes_[r];
    N_ = N;
    dt_ = dt;
    pages_ = (N + kPageSize - 1) / kPageSize;
  }
  std::int64_t bytes() const override { return detail::kside_bytes_moved(N_, dt_, DType::kInt64, rid_); }
  std::int64_t rows() const override { return N_; }
  void make_sets(int nsets, std::mt19937& rng) override {
    const std::size_t es = dtype_size(dt_);
    auto put = [&](std::vector<std::uint8_t>& buf, std::size_t i, float v) {
      if (dt_ == DType::kFloat32) {
        std::memcpy(buf.data() + 4 * i, &v, 4);
        return;
      }
      std::uint32_t u;
      std::memcpy(&u, &v, 4);
      std::uint16_t h;
      if (dt_ == DType::kBFloat16) {
        h = std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      } else {  // fp16, nearest: |v| < 2^15 here; below the normal range (2^-14) it is 0
        const float a = std::fabs(v);
        const int e = a < 0x1p-14f ? 0 : std::ilogb(a);
        const int m = a < 0x1p-14f ? 0 : int(std::nearbyint(std::ldexp(a, 10 - e))) - 1024;
        h = a < 0x1p-14f ? 0 : std::uint16_t(((e + 15) << 10) + m);  // m = 1024 carries into the exponent
        if (std::signbit(v)) h = std::uint16_t(h | 0x8000u);
      }
      std::memcpy(buf.data() + 2 * i, &h, 2);
    };
    // roughly normal (four uniforms, centred)
    auto normal = [&] {
      float s = 0.0f;
      for (int k = 0; k < 4; ++k) s += float(rng() >> 8) * (1.0f / 16777216.0f);
      return s - 2.0f;
    };
    weight_.assign(128 * es, 0);
    for (std::size_t i = 0; i < 128; ++i) put(weight_, i, 1.0f + 0.25f * normal());
    sets_.assign(std::size_t(nsets), Set{});
    for (Set& s : sets_) {
      s.in.assign(std::size_t(N_) * 128 * es, 0);
      for (std::int64_t t = 0; t < N_; ++t) {
        const float mag = std::ldexp(1.0f, int(rng() % 9) - 4);  // per-row magnitudes 2^-4 .. 2^4
        for (std::size_t i = 0; i < 128; ++i) put(s.in, std::size_t(t) * 128 + i, normal() * mag);
      }
      s.pos.resize(std::size_t(N_));
      for (auto& p : s.pos) p = std::int64_t(rng() % std::uint32_t(max_pos_));
      std::vector<std::int64_t> perm(std::size_t(pages_ * kPageSize));
      for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int64_t(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      s.slots.assign(perm.begin(), perm.begin() + N_);
      s.cache.assign(std::size_t(pages_ * kPageSize * kside_token_bytes(rid_)), 0);
    }
  }
  Status call(int set, const Options& opt) override {
    Set& s = sets_[std::size_t(set)];
    const std::int64_t tb = kside_token_bytes(rid_);
    KStoreArgs a;
    a.recipe = rid_;
    a.input = TensorView::contiguous(s.in.data(), dt_, {N_, 128});
    a.weight = TensorView::contiguous(weight_.data(), dt_, {128});
    a.eps = 1e-6f;
    a.freqs = TensorView::contiguous(freqs_->data(), DType::kFloat32, {max_pos_, 64});
    a.positions = TensorView::contiguous(s.pos.data(), DType::kInt64, {N_});
    a.slots = TensorView::contiguous(s.slots.data(), DType::kInt64, {N_});
    a.kvcache = TensorView::contiguous(s.cache.data(), DType::kUInt8, {pages_, tb * kPageSize});
    a.page_size = kPageSize;
    return run(a, opt);
  }
  std::vector<Output> outputs() override { return {{sets_[0].cache.data(), sets_[0].cache.size()}}; }

 private:
  static constexpr std::int64_t kPageSize = 64;
  struct Set {
    std::vector<std::uint8_t> in, cache;
    std::vector<std::int64_t> pos, slots;
  };
  const std::vector<float>* freqs_;
  std::int64_t max_pos_;
  std::vector<KRecipeId> recipes_ = all_krecipes();
  KRecipeId rid_ = KRecipeId::kV4KFp8;
  std::int64_t N_ = 0, pages_ = 0;
  DType dt_ = DType::kFloat32;
  std::vector<std::uint8_t> weight_;
  std::vector<Set> sets_;
};

// Every op, the default first.
std::vector<std::unique_ptr<CpuOp>> cpu_ops(const std::vector<float>* freqs, std::int64_t max_pos) {
  std::vector<std::unique_ptr<CpuOp>> v;
  v.emplace_back(new QueryOp(freqs, max_pos));
  v.emplace_back(new KsideOp(freqs, max_pos));
  return v;
}

std::vector<std::uint8_t> snapshot(const std::vector<Output>& outs) {
  std::vector<std::uint8_t> h;
  for (const Output& o : outs) {
    const std::uint8_t* b = static_cast<const std::uint8_t*>(o.p);
    h.insert(h.end(), b, b + o.bytes);
  }
  return h;
}
void poison(const std::vector<Output>& outs) {
  for (const Output& o : outs) std::memset(o.p, 0x5A, o.bytes);
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937 rng(7);
  const std::int64_t max_pos = 8192;
  std::vector<float> freqs(std::size_t(max_pos) * 64);
  for (auto& f : freqs) f = float(int(rng() % 20001) - 10000) * 1e-4f;
  const std::vector<std::unique_ptr<CpuOp>> ops = cpu_ops(&freqs, max_pos);

  std::string op_arg = ops[0]->name(), isa_arg = "all", dtype_arg, format = "table", recipe_arg;
  std::vector<long long> threads = {1}, tokens = {1, 4, 16, 64, 256, 4096}, heads;
  int iters = 30;
  long long inline_rows = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--op" && v) op_arg = argv[++i];
    else if (a == "--isa" && v) isa_arg = argv[++i];
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
  CpuOp* op = nullptr;
  for (const auto& o : ops)
    if (op_arg == o->name()) op = o.get();
  if (!op) {
    std::fprintf(stderr, "bad --op '%s' (query or kside)\n", op_arg.c_str());
    return 2;
  }
  if (heads.empty()) heads = {op->has_heads() ? 64 : 1};
  else if (!op->has_heads()) {
    std::fprintf(stderr, "--heads: the %s op has no heads\n", op->name());
    return 2;
  }
  if (format != "csv" && format != "table") { std::fprintf(stderr, "bad --format '%s' (csv or table)\n", format.c_str()); return 2; }
  DType dt = op->default_dtype();
  if (dtype_arg == "bf16") dt = DType::kBFloat16;
  else if (dtype_arg == "fp16") dt = DType::kFloat16;
  else if (dtype_arg == "fp32") dt = DType::kFloat32;
  else if (!dtype_arg.empty()) { std::fprintf(stderr, "bad --dtype\n"); return 2; }
  for (long long x : tokens)
    if (x < 1) { std::fprintf(stderr, "bad --tokens (positive integers)\n"); return 2; }
  for (long long x : heads)
    if (x < 1) { std::fprintf(stderr, "bad --heads (positive integers)\n"); return 2; }
  for (long long x : threads)
    if (x < 1) { std::fprintf(stderr, "bad --threads (positive integers)\n"); return 2; }
  std::vector<CpuIsa> isas;
  if (isa_arg == "all") {
    isas = supported_cpu_isas();
  } else {
    for (const std::string& name : split_names(isa_arg)) {
      CpuIsa isa;
      if (!parse_cpu_isa(name, &isa) || isa == CpuIsa::kAuto) { std::fprintf(stderr, "bad --isa '%s'\n", name.c_str()); return 2; }
      if (!cpu_isa_supported(isa)) { std::fprintf(stderr, "isa %s not supported here\n", name.c_str()); return 1; }
      isas.push_back(isa);
    }
  }
  if (!op->parse_recipes(recipe_arg.empty() ? op->default_recipes() : recipe_arg)) return 2;
  if (op->recipe_count() == 0 || tokens.empty() || heads.empty() || threads.empty() || isas.empty()) {
    std::fprintf(stderr, "--recipe / --tokens / --heads / --threads / --isa: expected at least one\n");
    return 2;
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
  int failures = 0;
  for (std::size_t r = 0; r < op->recipe_count(); ++r) {
    for (long long H : heads) {
      for (long long B : tokens) {
        op->select(r, B, H, dt);
        const std::int64_t rows = op->rows();
        const std::int64_t bytes = op->bytes();
        const int nsets = int(std::max<std::int64_t>(1, std::min<std::int64_t>(256, (64ll << 20) / std::max<std::int64_t>(bytes, 1))));
        op->make_sets(nsets, rng);
        // Reference output of set 0 for the byte check.
        Options ref_opt;
        ref_opt.backend = Backend::kReference;
        poison(op->outputs());
        const Status rs = op->call(0, ref_opt);
        if (!rs.ok()) {
          std::fprintf(stderr, "reference: %s\n", rs.message().c_str());
          return 1;
        }
        const std::vector<std::uint8_t> ref = snapshot(op->outputs());
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
            const double us = median_us([&](int it) { ok = op->call(it % nsets, opt).ok() && ok; }, iters);
            // With 1 thread the work runs on this thread: its CPU time excludes time spent
            // descheduled, which matters on a shared machine. Median over the same calls.
            double cpu_ns_row = -1.0;
            if (T == 1) {
              std::vector<double> ts;
              for (int it = 0; it < iters; ++it) {
                const double c0 = thread_cpu_s();
                ok = op->call(it % nsets, opt).ok() && ok;
                ts.push_back(thread_cpu_s() - c0);
              }
              std::sort(ts.begin(), ts.end());
              cpu_ns_row = ts[ts.size() / 2] * 1e9 / double(rows);
            }
            poison(op->outputs());
            ok = ok && op->call(0, opt).ok();
            const bool exact = ok && snapshot(op->outputs()) == ref;
            failures += !exact;
            const double gbps = double(bytes) / (us * 1e3);
            const double copy_gbps = double(bytes) / (copy_us * 1e3);
            std::printf(csv ? "%s,%s,%s,%lld,%lld,%lld,%lld,%.3f,%.2f,%.2f,%.3f,%.3f,%.4f,%s,%lld\n"
                            : "%-19s %-7s %-5s %6lld %5lld %3lld %7lld %10.3f %9.2f %10.2f %8.3f %9.3f %6.3f %5s %11lld\n",
                        op->recipe_name(r), cpu_isa_name(isa), dtype_name(dt), B, H, T,
                        (long long)detail::cpu::inline_row_threshold(), us, us * 1e3 / double(rows), cpu_ns_row, gbps,
                        copy_gbps, gbps / copy_gbps, exact ? "yes" : "NO", (long long)bytes);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
