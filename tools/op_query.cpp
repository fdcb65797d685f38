// The query side (fused_q_indexer_rope_hadamard_quant, every recipe of recipes.inc) as an op of
// 'run' and 'bench' (op.h): DeepSeek-V4-shaped workloads (workload.h), checked byte for byte
// against the scalar reference; run's report adds the quantization error the recipe buys (the
// recipe's own error next to the same recipe with the Hadamard toggled; for vLLM's forms, which
// have no Hadamard, next to the same transform under SGLang's quantizer).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "common/problem.h"
#include "common/row.h"
#include "kside_cli.h"
#include "op.h"
#include "workload.h"

namespace indexer_q {
namespace cli {

namespace {

std::vector<OptionSpec> run_options() {
  return {
      {"recipe", "NAME", "the form of the op (default v4_fp8; see 'recipes' below)"},
      {"backend", "B", backend_names() + " (default auto: cuda when a device is usable and\nneither --isa nor --threads is given, else cpu)"},
      {"isa", "I", "cpu backend instruction set: " + isa_names() + " (default auto: the best\n"
                   "supported one, or INDEXER_Q_CPU_ISA)"},
      {"threads", "N", "cpu backend threads, >= 1 (default: the library default, cpu_num_threads())"},
      {"tokens", "T", "tokens (B), >= 1 (default 4096)"},
      {"heads", "H", "heads per token, >= 1 (default 64)"},
      {"dtype", "D", "q_input / weight dtype: bf16|fp16|fp32 (default bf16)"},
      {"pos-dtype", "D", "positions dtype: int32|int64 (default int64)"},
      {"seed", "S", "workload seed, >= 0 (default 1)"},
      {"outliers", "N", "outlier channels in q, 0..128 (default 4)"},
      {"outlier-scale", "X", "magnitude of the outlier channels relative to the others, 1..1000000\n"
                             "(default 30)"},
      {"save", "FILE", "also write the workload and the checked outputs as a conformance file\n"
                       "(safetensors with metadata 'variant' = the recipe, readable by\n"
                       "'indexer-q verify')"},
      {"warmup", "N", "untimed calls before timing, >= 0 (default 1)"},
      {"iters", "N", "timed samples; the median is reported, >= 1 (default 5)"},
      {"key-recipe", "K", "instead: the top-k overlap of the scores of --recipe with key recipe K\n"
                          "(see 'indexer-q run --key-recipe K --help')"},
  };
}

const char* kRunDescription =
    "Builds a DeepSeek-V4-shaped workload (deterministic from --seed): q ~ N(0,1) with outlier\n"
    "channels (default 4 channels of 30x magnitude), weight ~ N(0,1), weight_scale =\n"
    "1/sqrt(H*128) (vllm_* recipes: softmax_scale = 1/sqrt(128), head_scale = 1/sqrt(H), as vLLM\n"
    "passes them), a real RoPE table (theta_j = 10000^(-2j/64), max_pos = round_up(T, 4096) +\n"
    "4096, laid out as the recipe says) and the positions of a prefill starting at a seed-chosen\n"
    "offset. Runs the recipe on the backend, checks every output byte against the scalar\n"
    "reference, and reports the time (median), the effective bandwidth (bytes read and written\n"
    "once) and the quantization error: the relative L2 error of dequant(q) against a float64\n"
    "evaluation of the recipe's RoPE (+ Hadamard / sqrt(128) when it has one), next to the error\n"
    "of the same recipe with the Hadamard toggled (same quantizer; the transform is orthonormal,\n"
    "so the two relative errors compare). vLLM's forms (quantizer vllm) have no Hadamard, and a\n"
    "Hadamard under vLLM's quantizer is not a form vLLM runs, so for them the comparison is the same\n"
    "transform (RoPE, bf16 rounding) quantized by SGLang's quantizer (exact fp8 row scale and clamp;\n"
    "fp4: floor 1e-4, / 6, ties to the smaller magnitude): what the power-of-two scales and the MX\n"
    "conventions cost or save on this data. dequant(q): fp8 e4m3fn code value x the row's scale;\n"
    "e4m3fnuz code value (half the e4m3fn one) x 2 x the row's scale; fp4: e2m1 code value x\n"
    "2^(e-127), e the block's UE8M0 byte in q_sf.\n"
    "Exit status: 0 if the output is bit-exact, 1 if not (or on an error), 2 for a bad command line.";

struct QuantError {
  double err_op = 0, norm_op = 0;    // sum of squares, the recipe as run
  double err_alt = 0, norm_alt = 0;  // the comparison: Hadamard toggled, or SGLang's quantizer
};

float load_value(const std::vector<std::uint8_t>& buf, DType dt, std::size_t i) {
  if (dt == DType::kBFloat16 || dt == DType::kFloat16) {
    std::uint16_t h;
    std::memcpy(&h, buf.data() + 2 * i, 2);
    return dt == DType::kBFloat16 ? detail::bf16_to_f32(h) : detail::f16_to_f32(h);
  }
  float f;
  std::memcpy(&f, buf.data() + 4 * i, 4);
  return f;
}

// The recipe R with the Hadamard switched on or off (everything else as R).
template <class R, bool kHad>
struct WithHadamard : R {
  static constexpr bool kHadamard = kHad;
};

// The recipe R under another quantizer (everything else as R).
template <class R, Quantizer kQ>
struct WithQuantizer : R {
  static constexpr Quantizer kQuant = kQ;
  static constexpr bool kVllm = kQ == Quantizer::kVllm;
};

// float64 model: RoPE on R's dims and pairs (freqs laid out as R says; none without RoPE), then
// Hadamard / sqrt(128) if had.
template <class R>
void exact_row(const float* x, const float* f, bool had, double* y) {
  for (int i = 0; i < detail::kHeadDim; ++i) y[i] = x[i];
  for (int j = 0; R::kRope && j < detail::kRopeDim / 2; ++j) {
    double* v0 = y + R::kRopeOffset + (R::kNeox ? j : 2 * j);
    double* v1 = y + R::kRopeOffset + (R::kNeox ? j + 32 : 2 * j + 1);
    const bool il = R::kFreqsLayout == FreqsLayout::kInterleaved;
    const double c = il ? f[2 * j] : f[j], s = il ? f[2 * j + 1] : f[32 + j];
    const double xr = *v0, xi = *v1;
    *v0 = xr * c - xi * s;
    *v1 = xr * s + xi * c;
  }
  if (!had) return;
  for (int st = 1; st < detail::kHeadDim; st <<= 1)
    for (int i = 0; i < detail::kHeadDim; ++i)
      if ((i & st) == 0) {
        const double a = y[i], b = y[i + st];
        y[i] = a + b;
        y[i + st] = a - b;
      }
  const double inv_sqrt128 = 1.0 / std::sqrt(128.0);
  for (int i = 0; i < detail::kHeadDim; ++i) y[i] *= inv_sqrt128;
}

// The values a row's outputs stand for, given the row's outputs of recipe R run with weight 1 and
// weight_scale 1 (so wo1 is the factor the codes are multiplied by: the FP8 row scale, or twice
// it for e4m3fnuz; FP4 carries its scales in sf).
template <class R>
void dequant_row(const std::uint8_t* q, const std::uint8_t* sf, float wo1, double* out) {
  using namespace detail;
  if (R::kFp4) {
    static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    for (int i = 0; i < kHeadDim; ++i) {
      const unsigned nib = (i & 1) ? (q[i / 2] >> 4) : (q[i / 2] & 0xfu);
      const double v = mag[nib & 7u] * ((nib & 8u) ? -1.0 : 1.0);
      out[i] = v * std::ldexp(1.0, int(sf[i / 32]) - 127);
    }
    return;
  }
  for (int i = 0; i < kHeadDim; ++i) {
    const double v = double(e4m3fn_decode(q[i]));
    out[i] = (R::kFnuz ? 0.5 * v : v) * double(wo1);  // e4m3fnuz codes are worth half
  }
}

// Relative L2 errors over every row: the op's own outputs (q_out, q_sf) for recipe R, and the
// comparison recipe Alt (R with the Hadamard toggled, or under another quantizer), computed here
// by the library's row pipeline; y64 has a Hadamard when Alt has one.
template <class R, class Alt>
QuantError quant_error(const io::ConformanceCase& c, const Outputs& o) {
  using namespace detail;
  QuantError e;
  const float* freqs = reinterpret_cast<const float*>(c.freqs.data());
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int64_t p;
    if (c.pos_dtype == DType::kInt32) {
      std::int32_t v;
      std::memcpy(&v, c.positions.data() + 4 * b, 4);
      p = v;
    } else {
      std::memcpy(&p, c.positions.data() + 8 * b, 8);
    }
    const float* f = freqs + p * kFreqsDim;
    for (std::int64_t h = 0; h < c.H; ++h) {
      const std::int64_t r = b * c.H + h;
      float x[kHeadDim], scratch[kHeadDim];
      for (int i = 0; i < kHeadDim; ++i) x[i] = load_value(c.q_input, c.dtype, std::size_t(r * kHeadDim + i));
      double y[kHeadDim], dq[kHeadDim];
      std::uint8_t q[kHeadDim], sf[4];
      float wo1 = 0.0f;
      // The op: its own codes (and block scales); the row factor from the pipeline at weight 1.
      std::memcpy(scratch, x, sizeof x);
      process_row<R>(scratch, f, 1.0f, 1.0f, 1.0f, q, sf, &wo1);
      const std::uint8_t* oq = o.q_out.data() + r * R::kOutBytes;
      const std::uint8_t* osf = R::kFp4 ? o.q_sf.data() + 4 * r : nullptr;
      dequant_row<R>(oq, osf, wo1, dq);
      exact_row<R>(x, f, R::kHadamard, y);
      for (int i = 0; i < kHeadDim; ++i) {
        e.err_op += (dq[i] - y[i]) * (dq[i] - y[i]);
        e.norm_op += y[i] * y[i];
      }
      // The comparison recipe.
      std::memcpy(scratch, x, sizeof x);
      process_row<Alt>(scratch, f, 1.0f, 1.0f, 1.0f, q, sf, &wo1);
      dequant_row<Alt>(q, sf, wo1, dq);
      exact_row<R>(x, f, Alt::kHadamard, y);
      for (int i = 0; i < kHeadDim; ++i) {
        e.err_alt += (dq[i] - y[i]) * (dq[i] - y[i]);
        e.norm_alt += y[i] * y[i];
      }
    }
  }
  return e;
}

// Whether recipe o is recipe id with the Hadamard toggled (had_differs) and / or under another
// quantizer (quant_differs; the fold may then differ too), every other column the same; compared
// over the library's generic column list, so a new column takes part without an edit here.
bool is_variant_of(RecipeId id, RecipeId o, bool had_differs, bool quant_differs) {
  if (o == id) return false;
  for (int i = 0; i < recipe_column_count(); ++i) {
    const std::string col = recipe_column_name(i);
    const bool same = std::strcmp(recipe_column_value(id, i), recipe_column_value(o, i)) == 0;
    if (col == "hadamard") {
      if (same == had_differs) return false;
    } else if (col == "quant") {
      if (same == quant_differs) return false;
    } else if (col == "fold" && quant_differs) {
      continue;
    } else if (!same) {
      return false;
    }
  }
  return true;
}

// The recipe that is this one with the Hadamard toggled, if the list has it ("" if not).
// (Also used for the quantizer comparison: the recipe with the other quantizer.)
std::string recipe_with(RecipeId id, bool toggle_hadamard, bool toggle_quant) {
  for (RecipeId o : all_recipes())
    if (is_variant_of(id, o, toggle_hadamard, toggle_quant)) return recipe_name(o);
  return "";
}

std::string toggled_recipe_name(RecipeId id) { return recipe_with(id, true, false); }

const char* kBenchDescription =
    "Times the op for every (recipe, heads, tokens) triple on one backend (workloads as in\n"
    "'indexer-q run'). Per case it prints:\n"
    "  us_median      median time of one call (CPU: wall clock; each sample times enough\n"
    "                 back-to-back calls to last >= 50 us and divides; CUDA: CUDA-graph replay,\n"
    "                 events)\n"
    "  gbps           effective bandwidth: bytes read + written once per call / time. Per row:\n"
    "                 128 inputs, one weight, 4 bytes weights_out, and the codes: 128 bytes for\n"
    "                 the fp8 recipes, 64 + 4 (codes + block scales) for fp4; per token one\n"
    "                 position and one 256-byte freqs row\n"
    "  copy_gbps      a plain copy on the same device in the same run (memcpy / device-to-device),\n"
    "                 of half that many bytes, so that bytes read + bytes written equal the op's;\n"
    "                 copy_gbps = (read + written) / copy time, counted exactly like gbps\n"
    "  ratio_to_copy  gbps / copy_gbps (1.0 = as fast as a copy of the same traffic)\n"
    "  exact          the first buffer set's output compared byte for byte with the reference\n"
    "                 (yes / NO; '-' with --no-check)\n"
    "CPU: small cases rotate among several buffer sets (see --rotate-mb; each set has its own\n"
    "inputs, positions and outputs, the freqs table is shared); 'sets' says how many. The copy\n"
    "rotates the same way (source/destination pairs spanning >= 16 MiB).\n"
    "pdl            cuda: on or off (Options::enable_pdl of the timed calls; with it on, each of\n"
    "                 the 20 captured calls launches while the previous one runs, as in an\n"
    "                 engine's stream); '-' on the cpu\n"
    "csv: one header line, then one row per case: backend,isa,tokens,heads,dtype,threads,pdl,\n"
    "sets,us_median,gbps,copy_us,copy_gbps,ratio_to_copy,exact,recipe (isa and threads are '-'\n"
    "on a GPU).\n"
    "A case the backend cannot run (e.g. a recipe it does not implement) is reported on stderr\n"
    "and the sweep goes on.\n"
    "Exit status: 0 if every case ran (and matched the reference), 1 otherwise, 2 for a bad\n"
    "command line.";

std::vector<OptionSpec> bench_options() {
  return {
      {"recipe", "LIST", "recipes to time: NAME[,NAME...] or all (every query-side recipe; default\n"
                         "v4_fp8; see 'recipes' below); key-side recipes (" + krecipe_names() + ")\n"
                         "are timed by their own form of bench: see 'key-side options' below"},
      {"backend", "B", backend_names() + " (default auto: cuda when a device is usable and\nneither --isa nor --threads is given, else cpu)"},
      {"isa", "I", "cpu backend instruction set: " + isa_names() + " (default auto)"},
      {"threads", "N", "cpu backend threads, >= 1 (default: the library default); the copy is\n"
                       "split over the same number of threads when it is 1 MiB or more"},
      {"tokens", "LIST", "comma-separated token counts (default 1,8,64,256,1024,4096,16384)"},
      {"heads", "LIST", "comma-separated head counts (default 64)"},
      {"dtype", "D", "q_input / weight dtype: bf16|fp16|fp32 (default bf16)"},
      {"pos-dtype", "D", "positions dtype: int32|int64 (default int64)"},
      {"warmup", "N", "untimed calls before timing, >= 0 (default 5)"},
      {"iters", "N", "timed samples per case; the median is reported, >= 1 (default 20)"},
      {"rotate-mb", "M", "cpu only: rotate among enough input/output buffer sets that together they\n"
                         "span at least M MiB (at most 1024 sets), so small cases are not timed out of\n"
                         "L1/L2 (default 16; 0 = one set)"},
      {"seed", "S", "workload seed, >= 0 (default 1)"},
      {"pdl", "LIST", "cuda backend: programmatic dependent launch of the timed calls: on, off or\n"
                      "on,off (default on,off: each case twice, PDL on then off; the library's\n"
                      "default is on for sm_90+)"},
      {"format", "F", "table|csv (default table)"},
      {"no-check", nullptr, "skip the byte comparison of each case against the scalar reference"},
  };
}

// A query-side workload on a device: set 0 owns the freqs table, the others share it (different
// data and start positions).
class QueryWork : public DeviceWork {
 public:
  QueryWork(DeviceRuntime& rt, const WorkloadSpec& spec, std::int64_t nsets, io::ConformanceCase c0)
      : c0_(std::move(c0)) {
    sets_.emplace_back(new DeviceCase(rt, c0_));
    for (std::int64_t i = 1; i < nsets; ++i) {
      WorkloadSpec si = spec;
      si.seed = spec.seed + std::uint64_t(i);
      si.make_freqs = false;
      const Workload wi = make_workload(si);
      sets_.emplace_back(new DeviceCase(rt, wi.data, sets_[0]->freqs()));
    }
  }
  std::size_t sets() const override { return sets_.size(); }
  Status run(std::size_t set, const Options& o) override { return sets_[set]->run(o); }
  void poison() override { sets_[0]->poison(0xff); }
  Check check() override {
    Check r;
    sets_[0]->download(&out_);
    if (!have_expected_) {
      r.reference = fill_expected(&c0_);
      if (!r.reference.ok()) return r;
      have_expected_ = true;
    }
    diff_ = io::compare_outputs(c0_, out_.q_out.data(), out_.q_sf.empty() ? nullptr : out_.q_sf.data(),
                                out_.weights_out.data());
    r.exact = diff_.exact();
    if (!r.exact)
      r.mismatch = fmt("output differs from the reference: %lld code bytes, %lld block-scale bytes, %lld weights",
                       (long long)diff_.q_bytes, (long long)diff_.sf_bytes, (long long)diff_.weights);
    return r;
  }
  // The host case (with the expected outputs after check()), set 0's outputs and their diff.
  const io::ConformanceCase& host() const { return c0_; }
  const Outputs& outputs() const { return out_; }
  const io::Diff& diff() const { return diff_; }

 private:
  io::ConformanceCase c0_;
  std::vector<std::unique_ptr<DeviceCase>> sets_;
  bool have_expected_ = false;
  Outputs out_;
  io::Diff diff_;
};

class QueryOp : public CliOp {
 public:
  bool claims(int, char**) const override { return true; }  // the default op
  std::vector<OptionSpec> options(Cmd c) const override { return c == Cmd::kRun ? run_options() : bench_options(); }
  std::string usage(Cmd c) const override {
    return c == Cmd::kRun ? "indexer-q run [options]" : "indexer-q bench [options]";
  }
  std::string description(Cmd c) const override { return c == Cmd::kRun ? kRunDescription : kBenchDescription; }
  std::string recipes_help() const override { return cli::recipes_help(); }
  std::string options_heading(Cmd c) const override {  // (the default op: never another's help)
    return std::string("query-side options ('indexer-q ") + (c == Cmd::kBench ? "bench" : "run") +
           " --help' for the whole text):\n";
  }
  int default_warmup(Cmd c) const override { return c == Cmd::kRun ? 1 : 5; }
  int default_iters(Cmd c) const override { return c == Cmd::kRun ? 5 : 20; }

  void parse(Cmd c, const Args& a) override {
    if (c == Cmd::kRun) {
      spec_.recipe = parse_recipe_option(a);
      spec_.tokens = a.integer("tokens", 4096, 1, std::int64_t(1) << 22);
      spec_.heads = a.integer("heads", 64, 1, 4096);
      spec_.dtype = parse_dtype_option(a, "dtype", "bf16");
      spec_.pos_dtype = parse_pos_dtype_option(a, "pos-dtype", "int64");
      spec_.seed = std::uint64_t(a.integer("seed", 1, 0, INT64_MAX));
      spec_.outlier_channels = int(a.integer("outliers", 4, 0, 128));
      spec_.outlier_scale = double(a.integer("outlier-scale", 30, 1, 1000000));
      if (spec_.pos_dtype == DType::kInt32 && workload_max_pos(spec_.tokens) > INT32_MAX)
        throw UsageError("option --pos-dtype int32: positions up to max_pos exceed int32");
      return;
    }
    recipes_ = parse_recipe_list_option(a);
    tokens_ = a.int_list("tokens", {1, 8, 64, 256, 1024, 4096, 16384}, 1, std::int64_t(1) << 22);
    heads_ = a.int_list("heads", {64}, 1, 4096);
    spec_.dtype = parse_dtype_option(a, "dtype", "bf16");
    spec_.pos_dtype = parse_pos_dtype_option(a, "pos-dtype", "int64");
    spec_.seed = std::uint64_t(a.integer("seed", 1, 0, INT64_MAX - 2048));
  }

  // bench: recipes x heads x tokens, in that order.
  std::vector<BenchPoint> bench_points() const override {
    std::vector<BenchPoint> v;
    for (RecipeId r : recipes_)
      for (std::int64_t H : heads_)
        for (std::int64_t T : tokens_) {
          BenchPoint p;
          p.recipe = recipe_name(r);
          p.tokens = T;
          p.heads = H;
          p.dtype = spec_.dtype;
          p.where = fmt("%s, tokens %lld, heads %lld", recipe_name(r), (long long)T, (long long)H);
          p.bytes = detail::bytes_moved(T, H, spec_.dtype, spec_.pos_dtype, r);
          p.sizes = fmt("--tokens %lld x --heads %lld", (long long)T, (long long)H);
          p.host_bytes = double(T) * double(H) * (128.0 * dtype_size(spec_.dtype) + 128.0 + 8.0);
          p.index = v.size();
          v.push_back(p);
        }
    return v;
  }
  std::unique_ptr<DeviceWork> bench_work(DeviceRuntime& rt, const BenchPoint& p, std::int64_t nsets) override {
    WorkloadSpec spec = spec_;
    const std::size_t nt = tokens_.size(), nh = heads_.size();
    spec.recipe = recipes_[p.index / (nt * nh)];
    spec.heads = heads_[p.index / nt % nh];
    spec.tokens = tokens_[p.index % nt];
    return std::unique_ptr<DeviceWork>(new QueryWork(rt, spec, nsets, make_workload(spec).data));
  }
  void print_bench_header(const Target& t, int warmup, int iters) const override {
    std::printf("indexer-q bench: %s on %s, %s, %s positions, warmup %d, iters %d\n", t.label.c_str(),
                t.rt->name().c_str(), dtype_name(spec_.dtype), dtype_name(spec_.pos_dtype), warmup, iters);
    std::printf("%-20s %-10s %-7s %7s %5s %7s %3s %5s %11s %9s %10s %9s %6s\n", "recipe", "backend", "isa", "tokens",
                "heads", "threads", "pdl", "sets", "us_median", "GB/s", "copy_GB/s", "vs_copy", "exact");
  }
  void print_bench_row(const Target& t, const BenchPoint& p, const BenchRow& r) const override {
    const BenchTiming& tm = r.timing;
    std::printf("%-20s %-10s %-7s %7lld %5lld %7s %3s %5lld %11.2f %9.2f %10.2f %9.3f %6s\n", p.recipe.c_str(),
                backend_name(t.backend), bench_isa_column(t).c_str(), (long long)p.tokens, (long long)p.heads,
                bench_threads_column(t).c_str(), r.pdl, (long long)r.sets, tm.us, tm.gbps, tm.copy_gbps,
                tm.gbps / tm.copy_gbps, r.exact);
  }

  // run: the host workload, the expected outputs and the backend's copies (the CPU runtime's own).
  void note_run_sizes() const override {
    note_sizes(fmt("--tokens %lld x --heads %lld", (long long)spec_.tokens, (long long)spec_.heads),
               double(spec_.tokens) * double(spec_.heads) * (3.0 * 128 * dtype_size(spec_.dtype) + 4.0 * 128 + 24.0));
  }
  DeviceWork& run_work(const Target& t) override {
    w_ = make_workload(spec_);
    run_.reset(new QueryWork(*t.rt, spec_, 1, w_.data));
    return *run_;
  }
  int run_report(const Args& a, const Target& t, const RunResult& res) override;

 private:
  WorkloadSpec spec_;                                   // run; bench: dtype, pos_dtype, seed
  std::vector<RecipeId> recipes_;                       // bench
  std::vector<std::int64_t> tokens_, heads_;            // bench
  Workload w_;                                          // run: the workload (its inputs)
  std::unique_ptr<QueryWork> run_;                      // run: its buffers, outputs and diff
};

}  // namespace

int QueryOp::run_report(const Args& a, const Target& t, const RunResult& res) {
  const WorkloadSpec& spec = spec_;
  const Workload& w = w_;
  const io::ConformanceCase& c = run_->host();
  const Outputs& out = run_->outputs();
  const io::Diff& d = run_->diff();
  const double us = res.us;
  const int iters = res.iters;
  const std::int64_t rows = c.B * c.H;
  const Recipe& rc = recipe(c.recipe);
  const bool fp4 = rc.format == OutFormat::kE2M1;
  const double bytes = double(detail::bytes_moved(c.B, c.H, c.dtype, c.pos_dtype, c.recipe));
  const QuantError qe = detail::with_recipe(c.recipe, [&](auto r) {
    using R = decltype(r);
    if constexpr (R::kVllm)
      return quant_error<R, WithQuantizer<R, Quantizer::kSglang>>(c, out);
    else
      return quant_error<R, WithHadamard<R, !R::kHadamard>>(c, out);
  });
  const double e_op = std::sqrt(qe.err_op / qe.norm_op);
  const double e_tog = std::sqrt(qe.err_alt / qe.norm_alt);

  std::string outl;
  for (int dim : w.outlier_dims) outl += (outl.empty() ? "" : ",") + std::to_string(dim);
  std::printf("indexer-q run: fused_q_indexer_rope_hadamard_quant (indexer_q %s)\n", version());
  std::printf("  recipe       %s: %s\n", recipe_name(c.recipe), recipe_summary(c.recipe).c_str());
  std::printf("  weights_out  %s\n", weight_factors_text(c).c_str());
  std::printf("  workload     %lld tokens x %lld heads, %s, %s positions %lld..%lld (max_pos %lld), seed %llu,\n"
              "               outlier channels %s (%gx)\n",
              (long long)c.B, (long long)c.H, dtype_name(c.dtype), dtype_name(c.pos_dtype),
              (long long)w.start_pos, (long long)(w.start_pos + c.B - 1), (long long)c.max_pos,
              (unsigned long long)spec.seed, outl.empty() ? "none" : outl.c_str(), spec.outlier_scale);
  if (t.backend == Backend::kCuda)
    std::printf("  backend      cuda (%s)\n", t.rt->name().c_str());
  else if (t.backend == Backend::kCpu)
    std::printf("  backend      cpu, isa %s, %d thread%s (%s)\n", cpu_isa_name(t.isa), t.threads,
                t.threads == 1 ? "" : "s", t.rt->name().c_str());
  else
    std::printf("  backend      reference (scalar, 1 thread; %s)\n", t.rt->name().c_str());
  std::printf("  rows         %lld\n", (long long)rows);
  std::printf("  bytes moved  %s per call (read + written once)\n", human_bytes(bytes).c_str());
  std::printf("  time         %.2f us (median of %d)\n", us, iters);
  std::printf("  bandwidth    %.2f GB/s\n", bytes / (us * 1e3));
  const char* codes = fp4 ? "fp4 code" : rc.format == OutFormat::kE4M3FNUZ ? "fp8 e4m3fnuz" : "fp8";
  std::printf("  bit-exact vs reference: %s (%lld of %lld %s bytes", d.exact() ? "yes" : "NO", (long long)d.q_bytes,
              (long long)(rows * c.out_bytes_per_row()), codes);
  if (fp4) std::printf(", %lld of %lld block-scale bytes", (long long)d.sf_bytes, (long long)(rows * 4));
  if (rc.scale_out) std::printf(", %lld of %lld q_scale bytes", (long long)d.sf_bytes, (long long)(rows * 4));
  std::printf(" and %lld of %lld weights differ)\n", (long long)d.weights, (long long)rows);

  // --save (when asked) and the exit status.
  auto finish = [&]() -> int {
    if (a.has("save")) {
      if (!d.exact()) {
        std::fprintf(stderr, "indexer-q run: --save: not written, the output is not bit-exact\n");
        return kExitMismatch;
      }
      io::StFile f;
      auto put = [&f](const char* name, const char* st_dtype, std::vector<std::int64_t> shape, const std::uint8_t* p,
                      std::size_t n) {
        io::StTensor t;
        t.dtype = st_dtype;
        t.shape = std::move(shape);
        t.data.assign(p, p + n);
        f.tensors[name] = std::move(t);
      };
      // Only the tensors the recipe reads (no freqs / positions without RoPE, no weights without them).
      const bool has_weights = recipe_has_weights(rc), has_rope = recipe_has_rope(rc);
      put("q_input", io::dtype_to_safetensors(c.dtype), {c.B, c.H, 128}, c.q_input.data(), c.q_input.size());
      if (has_weights)
        put("weight", io::dtype_to_safetensors(c.weight_dtype), {c.B, c.H}, c.weight.data(), c.weight.size());
      if (has_rope) {
        put("freqs", "F32", {c.max_pos, 64}, c.freqs.data(), c.freqs.size());
        put("positions", io::dtype_to_safetensors(c.pos_dtype), {c.B}, c.positions.data(), c.positions.size());
      }
      if (fp4) {
        put("q_fp4", "U8", {c.B, c.H, 64}, out.q_out.data(), out.q_out.size());
        put("q_sf", "I32", {c.B, c.H}, out.q_sf.data(), out.q_sf.size());
      } else {
        // safetensors has no e4m3fnuz dtype: those codes are stored as U8 (the reader accepts both).
        put("q_fp8", rc.format == OutFormat::kE4M3FN ? "F8_E4M3" : "U8", {c.B, c.H, 128}, out.q_out.data(),
            out.q_out.size());
        if (rc.scale_out) put("q_scale", "F32", {c.B, c.H, 1}, out.q_sf.data(), out.q_sf.size());
      }
      // weights_out as the engine allocates it: (B, H) for vLLM's forms, (B, H, 1) for SGLang's
      const std::vector<std::int64_t> wo_shape =
          two_factor_fold(c.recipe) ? std::vector<std::int64_t>{c.B, c.H} : std::vector<std::int64_t>{c.B, c.H, 1};
      if (has_weights)
        put("weights_out", "F32", wo_shape, reinterpret_cast<const std::uint8_t*>(out.weights_out.data()),
            out.weights_out.size() * 4);
      if (!has_weights) {
        // no factors
      } else if (two_factor_fold(c.recipe)) {  // vLLM's factors (weight_scale there: informational only)
        f.metadata["softmax_scale"] = fmt("%.17g", double(c.weight_scale));
        f.metadata["head_scale"] = fmt("%.17g", double(c.head_scale));
        f.metadata["weight_scale"] = fmt("%.17g", double(c.weight_scale * c.head_scale));
      } else {
        f.metadata["weight_scale"] = fmt("%.17g", double(c.weight_scale));
      }
      f.metadata["variant"] = recipe_name(c.recipe);
      f.metadata["op"] = "fused_q_indexer_rope_hadamard_quant";
      f.metadata["producer"] = std::string("indexer-q run, backend ") + t.label + ", seed " + std::to_string(spec.seed);
      std::string err;
      if (!io::write_safetensors(a.str("save", ""), f, &err)) {
        std::fprintf(stderr, "indexer-q run: --save: %s\n", err.c_str());
        return kExitRuntime;
      }
      std::printf("  saved        %s\n", a.str("save", "").c_str());
    }
    return d.exact() ? kExitOk : kExitMismatch;
  };
  auto line = [](std::string label, double v, const std::string& note) {
    if (label.size() < 26) label.append(26 - label.size(), ' ');
    else label += " ";
    std::printf("    %s%.4e%s\n", label.c_str(), v, note.c_str());
  };
  double e_with, e_without;
  if (rc.quant == Quantizer::kVllm) {
    // No Hadamard toggle here: vLLM's forms have none, and vLLM's quantizer after a Hadamard is
    // not a form of the op (an open vLLM change would add one, with its own butterfly order).
    // The meaningful comparison is the quantizer: the same transform under SGLang's.
    const std::string other = recipe_with(c.recipe, false, true);
    std::printf("  quantization error, relative L2 vs float64 (||dequant(q) - y64|| / ||y64||, y64 = RoPE in\n"
                "  float64; the bf16 rounding after RoPE counts as error):\n");
    line("vLLM's quantizer (this op)", e_op, "");
    line("SGLang's quantizer", e_tog,
         std::string("  (same transform; ") +
             (fp4 ? "floor 1e-4, / 6, ties to the smaller magnitude" : "exact row scale, clamp") +
             (other.empty() ? "" : "; = recipe " + other) + ")");
    const double ratio = e_op / e_tog;
    std::printf("    ratio vllm / sglang quantizer %.2fx (%s)\n", ratio,
                ratio > 1.005   ? "vLLM's quantizer loses accuracy on this data"
                : ratio < 0.995 ? "vLLM's quantizer gains accuracy on this data"
                                : "about the same");
    std::printf("    (no Hadamard comparison: vLLM's forms have no Hadamard, and a Hadamard under vLLM's\n"
                "    quantizer is not a form vLLM runs)\n");
    return finish();
  }
  const std::string tog = toggled_recipe_name(c.recipe);
  const std::string tog_note = tog.empty() ? "" : "  (= recipe " + tog + ")";
  std::printf("  quantization error, relative L2 vs float64 (||dequant(q) - y64|| / ||y64||, y64 = RoPE [+ Hadamard]):\n");
  if (rc.hadamard) {
    e_with = e_op;
    e_without = e_tog;
    line("with Hadamard (this op)", e_op, "");
    line("without Hadamard", e_tog, tog_note);
  } else {
    e_with = e_tog;
    e_without = e_op;
    line("without Hadamard (this op)", e_op, "");
    line("with Hadamard", e_tog, tog_note);
  }
  const double ratio = e_without / e_with;
  std::printf("    ratio without / with      %.2fx (%s)\n", ratio,
              ratio > 1.005   ? "the Hadamard lowers the error on this data"
              : ratio < 0.995 ? "the Hadamard raises the error on this data"
                              : "about the same");
  return finish();
}

std::unique_ptr<CliOp> make_query_op() { return std::unique_ptr<CliOp>(new QueryOp); }

}  // namespace cli
}  // namespace indexer_q
