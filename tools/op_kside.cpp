// The key side in the indexer-q commands (docs/KSIDE-SPEC.md): verify of key-side golden files and
// the key side as an op of 'run' and 'bench' (op.h), asked for by a key-side recipe. The op is called through the public API only
// (run(KStoreArgs)); buffers live in the target's runtime (host or CUDA device memory).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/kside_problem.h"
#include "io/kside_case.h"
#include "kside_cli.h"
#include "op.h"
#include "workload.h"

namespace indexer_q {
namespace cli {

bool argv_names_kside_recipe(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {  // argv: the command's arguments (after "indexer-q CMD")
    std::string v;
    const std::string s = argv[i];
    if (s == "--recipe" && i + 1 < argc) v = argv[i + 1];
    else if (s.rfind("--recipe=", 0) == 0) v = s.substr(9);
    else continue;
    for (KRecipeId r : all_krecipes())
      if (v.find(krecipe_name(r)) != std::string::npos) return true;
  }
  return false;
}

std::string krecipe_names() {
  std::string s;
  for (KRecipeId r : all_krecipes()) s += (s.empty() ? "" : "|") + std::string(krecipe_name(r));
  return s;
}

std::string kside_recipes_help() {
  return "key-side recipes (docs/KSIDE-SPEC.md; 'run' and 'bench' take them with --recipe, 'verify' reads their\n"
         "golden files): RMSNorm (MUFU.RSQ model), RoPE on dims 64..127, Hadamard, stored in a paged cache:\n"
         "  v4_k_fp8              e4m3fn codes + fp32 scale per token (132 bytes)\n"
         "  v4_k_fp4              e2m1 code pairs + 4 UE8M0 block scales per token (68 bytes)\n";
}

namespace {

// A key-side call's tensors in a runtime's memory, uploaded from a host case.
class KDeviceCase {
 public:
  KDeviceCase(DeviceRuntime& rt, const io::KsideCase& k, DType pos_dtype, const float* shared_freqs = nullptr)
      : rt_(rt), k_(k), pos_dtype_(pos_dtype) {
    input_ = up(k.input.data(), k.input.size());
    weight_ = up(k.weight.data(), k.weight.size());
    if (shared_freqs) {
      freqs_ = const_cast<float*>(shared_freqs);
    } else {
      freqs_ = static_cast<float*>(up(k.freqs.data(), k.freqs.size() * 4));
      own_freqs_ = true;
    }
    if (pos_dtype == DType::kInt32) {
      std::vector<std::int32_t> p32(k.positions.begin(), k.positions.end());
      positions_ = up(p32.data(), p32.size() * 4);
    } else {
      positions_ = up(k.positions.data(), k.positions.size() * 8);
    }
    slots_ = up(k.slots.data(), k.slots.size() * 8);
    cache_bytes_ = std::size_t(k.num_pages * k.page_bytes);
    cache_ = static_cast<std::uint8_t*>(rt.alloc(std::max<std::size_t>(cache_bytes_, 1)));
  }
  ~KDeviceCase() {
    for (void* p : {input_, weight_, positions_, slots_, static_cast<void*>(cache_)}) rt_.release(p);
    if (own_freqs_) rt_.release(freqs_);
  }
  KDeviceCase(const KDeviceCase&) = delete;
  KDeviceCase& operator=(const KDeviceCase&) = delete;

  const float* freqs() const { return freqs_; }
  void fill(std::uint8_t v) { rt_.fill(cache_, v, cache_bytes_); }
  Status run(const Options& o) {
    const Device dev = rt_.device();
    KStoreArgs a;
    a.recipe = k_.recipe;
    a.input = TensorView::contiguous(input_, k_.dtype, {k_.N, 128}, dev);
    a.weight = TensorView::contiguous(weight_, k_.dtype, {128}, dev);
    a.eps = k_.eps;
    a.freqs = TensorView::contiguous(freqs_, DType::kFloat32, {k_.max_pos, 64}, dev);
    a.positions = TensorView::contiguous(positions_, pos_dtype_, {k_.N}, dev);
    a.slots = TensorView::contiguous(slots_, DType::kInt64, {k_.N}, dev);
    a.kvcache = TensorView::contiguous(cache_, DType::kUInt8, {k_.num_pages, k_.page_bytes}, dev);
    a.page_size = k_.page_size;
    return indexer_q::run(a, o);
  }
  std::vector<std::uint8_t> download() {
    std::vector<std::uint8_t> out(cache_bytes_);
    rt_.synchronize();
    rt_.to_host(out.data(), cache_, cache_bytes_);
    return out;
  }

 private:
  void* up(const void* src, std::size_t bytes) {
    void* p = rt_.alloc(std::max<std::size_t>(bytes, 1));
    if (bytes) rt_.to_device(p, src, bytes);
    return p;
  }
  DeviceRuntime& rt_;
  const io::KsideCase& k_;
  DType pos_dtype_;
  void *input_ = nullptr, *weight_ = nullptr, *positions_ = nullptr, *slots_ = nullptr;
  float* freqs_ = nullptr;
  bool own_freqs_ = false;
  std::uint8_t* cache_ = nullptr;
  std::size_t cache_bytes_ = 0;
};

// The expected cache with fill `fill` outside the written rows, from one with fill `from`.
std::vector<std::uint8_t> refill(const io::KsideCase& k, const std::vector<std::uint8_t>& want, std::uint8_t from,
                                 std::uint8_t fill) {
  if (from == fill) return want;
  std::vector<bool> written(want.size(), false);
  const std::int64_t cb = kside_token_bytes(k.recipe) - 4;
  for (std::int64_t s : k.slots) {
    if (s < 0 || s >= k.num_pages * k.page_size) continue;
    const std::int64_t page = s / k.page_size, r = s % k.page_size;
    for (std::int64_t i = 0; i < cb; ++i) written[std::size_t(page * k.page_bytes + cb * r + i)] = true;
    for (std::int64_t i = 0; i < 4; ++i) written[std::size_t(page * k.page_bytes + cb * k.page_size + 4 * r + i)] = true;
  }
  std::vector<std::uint8_t> out = want;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!written[i]) out[i] = fill;
  return out;
}

struct CacheDiff {
  std::int64_t bytes = 0;
  std::vector<std::int64_t> first;
};
CacheDiff compare_cache(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  CacheDiff d;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (got[i] != want[i]) {
      if (d.first.size() < 5) d.first.push_back(std::int64_t(i));
      ++d.bytes;
    }
  return d;
}

std::string describe_byte(const io::KsideCase& k, std::int64_t i) {
  const std::int64_t page = i / k.page_bytes, off = i % k.page_bytes;
  const std::int64_t cb = kside_token_bytes(k.recipe) - 4;
  if (off < cb * k.page_size) return fmt("page %lld row %lld code byte %lld", (long long)page, (long long)(off / cb),
                                         (long long)(off % cb));
  const std::int64_t so = off - cb * k.page_size;
  return fmt("page %lld row %lld scale byte %lld", (long long)page, (long long)(so / 4), (long long)(so % 4));
}

}  // namespace

std::string kside_case_summary(const io::KsideCase& k) {
  const std::int64_t skipped = std::count_if(k.slots.begin(), k.slots.end(), [](std::int64_t s) { return s < 0; });
  return fmt("variant %s; N=%lld (%lld skipped), %s, page_size %lld, %lld page(s) of %lld bytes, plan %s, ratio %lld",
             krecipe_name(k.recipe), (long long)k.N, (long long)skipped, dtype_name(k.dtype), (long long)k.page_size,
             (long long)k.num_pages, (long long)k.page_bytes, k.mode.c_str(), (long long)k.compress_ratio);
}

VerifyRun kside_verify_run(const Target& t, const io::KsideCase& k) {
  VerifyRun r;
  KDeviceCase dc(*t.rt, k, DType::kInt64);
  CacheDiff worst;
  for (std::uint8_t fill : {k.cache_fill, std::uint8_t(k.cache_fill ^ 0xff)}) {
    dc.fill(fill);
    r.status = dc.run(t.options());
    if (!r.status.ok()) return r;
    const CacheDiff d = compare_cache(dc.download(), refill(k, k.kvcache, k.cache_fill, fill));
    if (d.bytes > worst.bytes || worst.first.empty()) worst = d;
  }
  r.counts = fmt("kvcache bytes differ: %lld of %lld", (long long)worst.bytes, (long long)k.kvcache.size());
  r.exact = worst.bytes == 0;
  if (!r.exact) {
    r.details = "first diffs:";
    for (std::int64_t i : worst.first) r.details += " [" + describe_byte(k, i) + "]";
  }
  return r;
}

namespace {

// A synthetic key-side call: N tokens of N(0,1) rows times a per-token power of two in [2^-4, 2^4],
// RMSNorm weight 1 + 0.25 N(0,1), eps 1e-6, a real RoPE table (interleaved, max_pos 4096), random
// positions, slots a random permutation of the cache (N rows, rounded up to whole pages).
io::KsideCase make_kside_workload(KRecipeId recipe, std::int64_t N, DType dtype, std::int64_t page_size,
                                  std::uint64_t seed, bool make_freqs = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  io::KsideCase k;
  k.recipe = recipe;
  k.mode = "synthetic";
  k.N = N;
  k.dtype = dtype;
  k.page_size = page_size;
  k.page_bytes = kside_token_bytes(recipe) * page_size;
  k.num_pages = (N + page_size - 1) / page_size;
  k.max_pos = 4096;
  const std::size_t es = dtype_size(dtype);
  auto put = [&](std::vector<std::uint8_t>& buf, std::size_t i, float v) {
    if (dtype == DType::kFloat32) std::memcpy(buf.data() + 4 * i, &v, 4);
    else {
      const std::uint16_t h = dtype == DType::kBFloat16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(buf.data() + 2 * i, &h, 2);
    }
  };
  k.input.assign(std::size_t(N) * 128 * es, 0);
  for (std::int64_t t = 0; t < N; ++t) {
    const double mag = std::ldexp(1.0, int(rng() % 9) - 4);
    for (int i = 0; i < 128; ++i) put(k.input, std::size_t(t * 128 + i), float(nd(rng) * mag));
  }
  k.weight.assign(128 * es, 0);
  for (int i = 0; i < 128; ++i) put(k.weight, std::size_t(i), float(1.0 + 0.25 * nd(rng)));
  if (make_freqs) {
    k.freqs.resize(std::size_t(k.max_pos) * 64);
    for (std::int64_t p = 0; p < k.max_pos; ++p)
      for (int j = 0; j < 32; ++j) {
        const double th = std::pow(10000.0, -2.0 * j / 64.0);
        k.freqs[std::size_t(p * 64 + 2 * j)] = float(std::cos(double(p) * th));
        k.freqs[std::size_t(p * 64 + 2 * j + 1)] = float(std::sin(double(p) * th));
      }
  }
  k.positions.resize(std::size_t(N));
  for (auto& p : k.positions) p = std::int64_t(rng() % std::uint64_t(k.max_pos));
  std::vector<std::int64_t> perm(std::size_t(k.num_pages * page_size));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  k.slots.assign(perm.begin(), perm.begin() + N);
  return k;
}

// The reference's cache for a host case (fill `fill`).
std::vector<std::uint8_t> reference_cache(const io::KsideCase& k, DType pos_dtype, std::uint8_t fill, Status* st) {
  auto rt = make_cpu_runtime();
  KDeviceCase dc(*rt, k, pos_dtype);
  dc.fill(fill);
  Options o;
  o.backend = Backend::kReference;
  *st = dc.run(o);
  return dc.download();
}

KRecipeId krecipe_or_throw(const std::string& name) {
  KRecipeId r;
  if (!parse_krecipe(name, &r))
    throw UsageError("option --recipe: unknown key-side recipe '" + name + "' (key-side recipes: " + krecipe_names() +
                     "; query-side and key-side recipes are not mixed in one call)");
  return r;
}

// Host bytes of one key-side call of N tokens (input, positions, slots, its cache pages), for
// note_sizes.
double kside_call_bytes(std::int64_t N, DType dtype, KRecipeId recipe, std::int64_t page_size) {
  const double pages = std::ceil(double(N) / double(page_size)) + 1.0;
  return double(N) * (128.0 * double(dtype_size(dtype)) + 16.0) + pages * double(page_size) * kside_token_bytes(recipe);
}

std::vector<OptionSpec> kside_common_options(bool bench) {
  std::vector<OptionSpec> v = {
      {"recipe", bench ? "LIST" : "NAME", bench ? "key-side recipes: NAME[,NAME...] (" + krecipe_names() + ")"
                                                : "the key-side recipe (" + krecipe_names() + ")"},
      {"backend", "B", backend_names() + " (default auto: cuda when a device is usable and\nneither --isa nor --threads is given, else cpu)"},
      {"isa", "I", "cpu backend instruction set: " + isa_names() + " (default auto)"},
      {"threads", "N", "cpu backend threads, >= 1 (default: the library default)"},
      {"tokens", bench ? "LIST" : "T", bench ? "comma-separated token counts (default 1,8,64,256,1024,4096,16384,65536)"
                                             : "tokens, >= 1 (default 4096)"},
      {"page-size", "P", "tokens per cache page, a power of two (default 64)"},
      {"dtype", "D", "input / weight dtype: bf16|fp16|fp32 (default fp32, as SGLang)"},
      {"pos-dtype", "D", "positions dtype: int32|int64 (default int64)"},
      {"seed", "S", "workload seed, >= 0 (default 1)"},
      {"warmup", "N", "untimed calls before timing, >= 0 (default 5)"},
      {"iters", "N", "timed samples; the median is reported, >= 1 (default 20)"},
  };
  if (!bench)
    v.push_back({"save", "FILE", "also write the call and the checked cache as a key-side file (plan convention,\n"
                                 "extend mode, ratio 4; readable by 'indexer-q verify')"});
  if (bench) {
    v.push_back({"rotate-mb", "M", "cpu only: rotate among buffer sets spanning at least M MiB (default 16; 0 = one set)"});
    v.push_back({"format", "F", "table|csv (default table)"});
    v.push_back({"no-check", nullptr, "skip the byte comparison against the scalar reference"});
  }
  return v;
}

// The options of kside_common_options that 'run' and 'bench' read alike (after --tokens, in this
// order; the commands read --warmup and --iters).
struct KsideCommon {
  std::int64_t page_size;
  DType dtype, pos_dtype;
  std::uint64_t seed;
};
KsideCommon parse_kside_common(const Args& a) {
  KsideCommon c;
  c.page_size = a.integer("page-size", 64, 1, std::int64_t(1) << 20);
  if (c.page_size & (c.page_size - 1))
    throw UsageError("option --page-size: expected a power of two, got " + std::to_string(c.page_size));
  c.dtype = parse_dtype_option(a, "dtype", "fp32");
  c.pos_dtype = parse_pos_dtype_option(a, "pos-dtype", "int64");
  c.seed = std::uint64_t(a.integer("seed", 1, 0, INT64_MAX - 2048));
  return c;
}

const char* kKsideWorkload =
    "Workload (deterministic from --seed): N tokens of 128 values ~ N(0,1) times a per-token power\n"
    "of two in [2^-4, 2^4], RMSNorm weight 1 + 0.25 N(0,1), eps 1e-6, a real RoPE table (theta_j =\n"
    "10000^(-2j/64), interleaved, max_pos 4096), random positions, and slots a random permutation of\n"
    "a cache of ceil(N / page_size) pages. Bytes moved per call: per token its input row, position,\n"
    "slot (8 bytes), freqs row (256 bytes) read and its token bytes (132 / 68) written; the weight\n"
    "once.";

// A key-side file of case k with the expected cache `cache` (fill 0xA5), in SGLang's plan
// convention (docs/KSIDE-SPEC.md section 1): extend mode, ratio 4, seq_len = position + 4, ragged_id =
// token, out_loc = the slots (a skipped token: seq_len 0xFFFFFFFF).
bool save_kside_file(const std::string& path, const io::KsideCase& k, const std::vector<std::uint8_t>& cache,
                     const std::string& producer, std::string* err) {
  io::StFile f;
  auto put = [&](const char* name, const char* dt, std::vector<std::int64_t> shape, const void* data,
                 std::size_t bytes) {
    io::StTensor t;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.data.assign(static_cast<const std::uint8_t*>(data), static_cast<const std::uint8_t*>(data) + bytes);
    f.tensors[name] = std::move(t);
  };
  const char* dt = io::dtype_to_safetensors(k.dtype);
  put("input", dt, {k.N, 128}, k.input.data(), k.input.size());
  put("weight", dt, {128}, k.weight.data(), k.weight.size());
  put("freqs_cis", "F32", {k.max_pos, 64}, k.freqs.data(), k.freqs.size() * 4);
  std::vector<std::uint8_t> plan(std::size_t(k.N) * 16, 0);
  for (std::int64_t t = 0; t < k.N; ++t) {
    const std::uint32_t seq = k.slots[std::size_t(t)] < 0 ? 0xffffffffu : std::uint32_t(k.positions[std::size_t(t)] + 4);
    const std::uint16_t ragged = std::uint16_t(t);
    std::memcpy(plan.data() + 16 * t, &seq, 4);
    std::memcpy(plan.data() + 16 * t + 4, &ragged, 2);
  }
  put("plan", "U8", {k.N, 16}, plan.data(), plan.size());
  put("out_loc", "I64", {k.N}, k.slots.data(), k.slots.size() * 8);
  put("kvcache", "U8", {k.num_pages, k.page_bytes}, cache.data(), cache.size());
  f.metadata["variant"] = krecipe_name(k.recipe);
  f.metadata["mode"] = "extend";
  f.metadata["compress_ratio"] = "4";
  f.metadata["page_size"] = std::to_string(k.page_size);
  f.metadata["page_bytes"] = std::to_string(k.page_bytes);
  f.metadata["num_tokens"] = std::to_string(k.N);
  f.metadata["input_dtype"] = dtype_name(k.dtype);
  std::uint32_t eb;
  std::memcpy(&eb, &k.eps, 4);
  f.metadata["eps_bits"] = fmt("0x%08x", eb);
  f.metadata["cache_fill"] = "0xa5";
  f.metadata["producer"] = producer;
  return io::write_safetensors(path, f, err);
}


// A key-side workload on a device: set 0 owns the freqs table, the others share it.
class KsideWork : public DeviceWork {
 public:
  KsideWork(DeviceRuntime& rt, KRecipeId recipe, std::int64_t N, const KsideCommon& c, std::int64_t nsets)
      : c_(c) {
    hosts_.reserve(std::size_t(nsets));
    hosts_.push_back(make_kside_workload(recipe, N, c.dtype, c.page_size, c.seed));
    for (std::int64_t i = 1; i < nsets; ++i) {
      hosts_.push_back(make_kside_workload(recipe, N, c.dtype, c.page_size, c.seed + std::uint64_t(i), false));
      hosts_.back().freqs.clear();
    }
    sets_.emplace_back(new KDeviceCase(rt, hosts_[0], c.pos_dtype));
    for (std::int64_t i = 1; i < nsets; ++i)
      sets_.emplace_back(new KDeviceCase(rt, hosts_[std::size_t(i)], c.pos_dtype, sets_[0]->freqs()));
  }
  std::size_t sets() const override { return sets_.size(); }
  Status run(std::size_t set, const Options& o) override { return sets_[set]->run(o); }
  void poison() override { sets_[0]->fill(0xA5); }
  Check check() override {
    Check r;
    got_ = sets_[0]->download();
    if (!have_want_) {
      want_ = reference_cache(hosts_[0], c_.pos_dtype, 0xA5, &r.reference);
      if (!r.reference.ok()) return r;
      have_want_ = true;
    }
    diff_ = compare_cache(got_, want_);
    r.exact = diff_.bytes == 0;
    if (!r.exact) r.mismatch = fmt("cache differs from the reference: %lld bytes", (long long)diff_.bytes);
    return r;
  }
  // The host case, set 0's cache, the reference's and their diff (after check()).
  const io::KsideCase& host() const { return hosts_[0]; }
  const std::vector<std::uint8_t>& got() const { return got_; }
  const std::vector<std::uint8_t>& want() const { return want_; }
  const CacheDiff& diff() const { return diff_; }

 private:
  KsideCommon c_;
  std::vector<io::KsideCase> hosts_;  // reserved up front: the device cases keep references
  std::vector<std::unique_ptr<KDeviceCase>> sets_;
  bool have_want_ = false;
  std::vector<std::uint8_t> got_, want_;
  CacheDiff diff_;
};

class KsideOp : public CliOp {
 public:
  bool claims(int argc, char** argv) const override { return argv_names_kside_recipe(argc, argv); }
  std::vector<OptionSpec> options(Cmd c) const override { return kside_common_options(c == Cmd::kBench); }
  std::string usage(Cmd c) const override {
    return c == Cmd::kRun ? "indexer-q run --recipe v4_k_fp8|v4_k_fp4 [options]"
                          : "indexer-q bench --recipe v4_k_fp8[,v4_k_fp4] [options]";
  }
  std::string description(Cmd c) const override {
    if (c == Cmd::kRun)
      return std::string("Stores one synthetic key-side call into a paged cache on the backend, checks every\n"
                         "byte of the cache against the scalar reference and reports the time.\n") +
             kKsideWorkload + "\nExit status: 0 if the cache is bit-exact, 1 if not, 4 on an error, 2 for a bad command line.";
    return std::string("Times key-side stores for every (recipe, tokens) pair on one backend, beside a plain\n"
                       "copy of the same traffic on the same device (as the query side's bench; heads = 1).\n") +
           kKsideWorkload + "\ncsv: " + kBenchCsvHeader + "(and ns_token in the table).";
  }
  std::string recipes_help() const override { return kside_recipes_help(); }
  std::string options_heading(Cmd c) const override {
    return std::string("key-side options (with --recipe ") + krecipe_names() + "; 'indexer-q " +
           (c == Cmd::kBench ? "bench" : "run") + " --recipe v4_k_fp8 --help'\nfor the whole text):\n";
  }
  int default_warmup(Cmd) const override { return 5; }
  int default_iters(Cmd) const override { return 20; }

  void parse(Cmd cmd, const Args& a) override {
    if (cmd == Cmd::kRun) {
      recipes_ = {krecipe_or_throw(a.str("recipe", "v4_k_fp8"))};
      tokens_ = {a.integer("tokens", 4096, 1, std::int64_t(1) << 24)};
      c_ = parse_kside_common(a);
      if (a.has("save") && tokens_[0] > 65535)
        throw UsageError("option --save: at most 65535 tokens (the plan's ragged_id is 16 bits), got --tokens " +
                         std::to_string(tokens_[0]));
      return;
    }
    recipes_.clear();
    const std::string s = a.str("recipe", "v4_k_fp8");
    std::size_t at = 0;
    while (at <= s.size()) {
      const std::size_t e = std::min(s.find(',', at), s.size());
      recipes_.push_back(krecipe_or_throw(s.substr(at, e - at)));
      at = e + 1;
    }
    tokens_ = a.int_list("tokens", {1, 8, 64, 256, 1024, 4096, 16384, 65536}, 1, std::int64_t(1) << 24);
    c_ = parse_kside_common(a);
  }

  // bench: recipes x tokens, in that order (heads = 1).
  std::vector<BenchPoint> bench_points() const override {
    std::vector<BenchPoint> v;
    for (KRecipeId r : recipes_)
      for (std::int64_t N : tokens_) {
        BenchPoint p;
        p.recipe = krecipe_name(r);
        p.tokens = N;
        p.heads = 1;
        p.dtype = c_.dtype;
        p.where = fmt("%s, tokens %lld", krecipe_name(r), (long long)N);
        p.bytes = detail::kside_bytes_moved(N, c_.dtype, c_.pos_dtype, r);
        p.sizes = fmt("--tokens %lld", (long long)N);
        p.host_bytes = kside_call_bytes(N, c_.dtype, r, c_.page_size);
        p.index = v.size();
        v.push_back(p);
      }
    return v;
  }
  std::unique_ptr<DeviceWork> bench_work(DeviceRuntime& rt, const BenchPoint& p, std::int64_t nsets) override {
    return std::unique_ptr<DeviceWork>(
        new KsideWork(rt, recipes_[p.index / tokens_.size()], tokens_[p.index % tokens_.size()], c_, nsets));
  }
  void print_bench_header(const Target& t, int warmup, int iters) const override {
    std::printf("indexer-q bench: %s on %s, %s, %s positions, page_size %lld, warmup %d, iters %d\n", t.label.c_str(),
                t.rt->name().c_str(), dtype_name(c_.dtype), dtype_name(c_.pos_dtype), (long long)c_.page_size, warmup,
                iters);
    std::printf("%-10s %-10s %-7s %8s %7s %5s %11s %9s %9s %10s %9s %6s\n", "recipe", "backend", "isa", "tokens",
                "threads", "sets", "us_median", "ns/token", "GB/s", "copy_GB/s", "vs_copy", "exact");
  }
  void print_bench_row(const Target& t, const BenchPoint& p, const BenchRow& r) const override {
    const BenchTiming& tm = r.timing;
    std::printf("%-10s %-10s %-7s %8lld %7s %5lld %11.2f %9.2f %9.2f %10.2f %9.3f %6s\n", p.recipe.c_str(),
                backend_name(t.backend), bench_isa_column(t).c_str(), (long long)p.tokens,
                bench_threads_column(t).c_str(), (long long)r.sets, tm.us, 1e3 * tm.us / double(p.tokens), tm.gbps,
                tm.copy_gbps, tm.gbps / tm.copy_gbps, r.exact);
  }

  // run: the host case, the backend's copy and the reference's (input, indices, cache each).
  void note_run_sizes() const override {
    note_sizes(fmt("--tokens %lld", (long long)tokens_[0]),
               kside_call_bytes(tokens_[0], c_.dtype, recipes_[0], c_.page_size) * 3.0);
  }
  DeviceWork& run_work(const Target& t) override {
    run_.reset(new KsideWork(*t.rt, recipes_[0], tokens_[0], c_, 1));
    return *run_;
  }
  int run_report(const Args& a, const Target& t, const RunResult& r) override {
    const io::KsideCase& k = run_->host();
    const CacheDiff& d = run_->diff();
    const std::int64_t N = k.N;
    const std::int64_t bytes = detail::kside_bytes_moved(N, c_.dtype, c_.pos_dtype, k.recipe);
    std::printf("indexer-q run: %s on %s (%s)\n", krecipe_name(k.recipe), t.label.c_str(), t.rt->name().c_str());
    std::printf("  tokens %lld, %s input, %s positions, page_size %lld, %lld page(s) of %lld bytes\n", (long long)N,
                dtype_name(c_.dtype), dtype_name(c_.pos_dtype), (long long)c_.page_size, (long long)k.num_pages,
                (long long)k.page_bytes);
    std::printf("  time %.2f us (median of %d), %.1f ns/token, %.2f GB/s (%s moved)\n", r.us, r.iters,
                1e3 * r.us / double(N), double(bytes) / (r.us * 1e3), human_bytes(double(bytes)).c_str());
    std::printf("  cache vs reference: %lld of %lld bytes differ -> %s\n", (long long)d.bytes,
                (long long)run_->got().size(), d.bytes == 0 ? "exact" : "DIFFER");
    if (d.bytes) {
      std::string s2 = "    first diffs:";
      for (std::int64_t i : d.first) s2 += " [" + describe_byte(k, i) + "]";
      std::printf("%s\n", s2.c_str());
    }
    if (a.has("save")) {
      std::string err;
      const std::string path = a.str("save", "");
      const std::string producer = std::string("indexer-q run, reference, seed ") + std::to_string(c_.seed);
      if (!save_kside_file(path, k, run_->want(), producer, &err)) {
        std::fprintf(stderr, "indexer-q run: --save: %s\n", err.c_str());
        return kExitRuntime;
      }
      std::printf("  saved: %s (the call in the plan convention and the reference's cache)\n", path.c_str());
    }
    return d.bytes == 0 ? kExitOk : kExitMismatch;
  }

 private:
  std::vector<KRecipeId> recipes_;      // run: one
  std::vector<std::int64_t> tokens_;    // run: one
  KsideCommon c_{};
  std::unique_ptr<KsideWork> run_;
};

}  // namespace

std::unique_ptr<CliOp> make_kside_op() { return std::unique_ptr<CliOp>(new KsideOp); }

}  // namespace cli
}  // namespace indexer_q
