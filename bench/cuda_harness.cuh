// The CUDA benchmark harness: one loop for every op (bench/cuda_bench.cu runs it; the query side
// is described in cuda_op_query.cuh, the key side in cuda_op_kside.cuh). An op supplies its
// inputs, its recipes, the bytes one call moves, the outputs to compare, its spec kernel and the
// cases to time; the harness does the rest, the same way for every op, in the same run:
//   - per size (heads x tokens) the op fills its inputs; per recipe the device-to-device copy of
//     half the op's bytes (so bytes read + written are equal) is timed first,
//   - the op's spec kernel (one thread per row or token: the library's fallback) runs on poisoned
//     outputs (0x5A); each case then runs on poisoned outputs and every output byte is compared
//     with the spec kernel's, so a faster wrong kernel cannot pass,
//   - each case is timed like the copy (time_median_us: 20 calls captured in one CUDA graph, the
//     graph replayed, events around each replay, median replay / 20),
//   - one csv line per case (the op's key columns, then variant, pdl, bytes, us, gbps, copy_us,
//     copy_gbps, ratio_to_copy, the ratio to the op's reference case, bytes_equal), a table of
//     the same at the end, and "all bytes equal to <spec kernel>: yes|NO" last (exit 3 on NO).
// A next op is one more CudaOp (a header like cuda_op_kside.cuh) and one line in cuda_bench.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_bench_common.cuh"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace bench {

// One timed row.
struct Case {
  std::string variant;        // the variant column (query: `shape`, key side: `impl`)
  bool pdl = false;
  std::function<void()> fn;   // enqueues one call on the harness's stream
  bool compare = true;        // false: a floor whose outputs are not the op's (bytes_equal "-")
  std::string ref_group;      // rows of one group share the reference of the ratio column
  bool is_ref = false;        // this row is its group's reference (the first one timed counts)
};

// How an op's lines look (each op keeps the format of its earlier benchmark, which scripts,
// bench/plot_bench.py and old logs use).
struct Columns {
  const char* csv_header;     // "csv,<key columns>,<variant>,pdl,bytes,...,<ratio to ref>,bytes_equal"
  const char* pdl_off;        // the pdl column's values
  const char* pdl_on;
  const char* table_pdl;      // the table's pdl field: this, then the pdl value ("pdl ", "pdl=")
  int table_pdl_width;        // padded to this width (0: none)
  int variant_width;          // the table's variant column width
  const char* ref_label;      // the table's name of the reference ("v4_fp8", "baseline")
  const char* spec_kernel;    // the last line's name of the spec kernel
};

// A device buffer to poison before and compare after each checked call.
struct Output {
  void* p;
  std::size_t bytes;
};

class CudaOp {
 public:
  virtual ~CudaOp() = default;
  virtual const char* name() const = 0;                 // the --op value
  virtual Columns columns() const = 0;
  virtual std::vector<std::int64_t> default_tokens() const = 0;
  virtual DType default_dtype() const = 0;
  virtual bool has_heads() const = 0;                   // false: --heads refused, one pass of H = 1
  // true: after the last recipe the first one runs again (order effects show there), its cases
  // those of cases(..., again = true), its name suffixed "(again)".
  virtual bool repeat_first_recipe() const { return false; }
  // --recipes LIST; false after a message on stderr.
  virtual bool parse_recipes(const char* list) = 0;
  // One of this op's own options (e.g. --shapes, --dup): 1 a flag, 2 an option and its value,
  // 0 not this op's, -1 a bad value (message on stderr). Per-op options live here and in cases().
  virtual int parse_option(const std::string& opt, const char* value) = 0;
  virtual std::string usage() const = 0;                // this op's options, for --help
  // The header line after "# device: <name>, <n> SMs; ": inputs and fixed arguments.
  virtual std::string describe(DType dt) const = 0;

  // One size: frees the previous size's inputs, allocates and fills this one's on stream s.
  virtual void setup(std::int64_t tokens, std::int64_t heads, DType dt, cudaStream_t s) = 0;
  virtual std::size_t recipe_count() const = 0;
  virtual std::string recipe_name(std::size_t r) const = 0;
  virtual std::int64_t bytes(std::size_t r) const = 0;  // moved by one call (gbps; the copy moves as many)
  virtual void prepare(std::size_t r) = 0;             // the call's arguments for recipe r at this size
  virtual std::vector<Output> outputs() const = 0;     // of the prepared call
  virtual void spec_kernel() = 0;                      // enqueues the spec kernel's call
  virtual std::vector<Case> cases(const std::vector<bool>& pdls, bool again) = 0;
  // The leading csv columns and table fields of a line (after "csv,"; no trailing separator).
  virtual std::string key_csv(std::int64_t tokens, std::int64_t heads, DType dt, const std::string& recipe) const = 0;
  virtual std::string key_table(std::int64_t tokens, std::int64_t heads, const std::string& recipe) const = 0;
};

// dtype -> the fill kernels' code (0 bf16, 1 fp16, 2 fp32).
inline int dtype_code(DType dt) { return dt == DType::kFloat32 ? 2 : dt == DType::kFloat16 ? 1 : 0; }

inline std::string strprintf(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string strprintf(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

inline void print_usage(const std::vector<std::unique_ptr<CudaOp>>& ops) {
  std::printf(
      "indexer_q_cuda_bench [--op NAME] [--tokens LIST] [--heads LIST] [--dtype bf16|fp16|fp32] [--recipes LIST]\n"
      "                     [--iters N] [--pdl off,on|off|on] [op options]\n"
      "  --op        which op (default %s):", ops[0]->name());
  for (const auto& o : ops) std::printf(" %s", o->name());
  std::printf(
      "\n  --pdl       the PDL modes timed, a list of off / on (also 0, 1, both); default off,on\n"
      "  --iters     replays of the 20-call graph (median taken; default 100)\n");
  for (const auto& o : ops) std::printf("%s options:\n%s", o->name(), o->usage().c_str());
}

// The benchmark: parses argv (--op picks the op, ops[0] by default), runs the sweep, returns the
// exit status (0 all bytes equal, 2 bad usage, 3 some case's bytes differ; 1 via ck on a CUDA error).
inline int run_cuda_bench(int argc, char** argv, const std::vector<std::unique_ptr<CudaOp>>& ops) {
  prog_name = "cuda_bench";
  CudaOp* op = ops[0].get();
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) != "--op") continue;
    op = nullptr;
    for (const auto& o : ops)
      if (o->name() == std::string(argv[i + 1])) op = o.get();
    if (!op) {
      std::fprintf(stderr, "--op: expected one of");
      for (const auto& o : ops) std::fprintf(stderr, " %s", o->name());
      std::fprintf(stderr, ", got %s\n", argv[i + 1]);
      return 2;
    }
  }
  std::vector<std::int64_t> tokens = op->default_tokens(), heads = {op->has_heads() ? 64 : 1};
  std::vector<bool> pdls = {false, true};
  DType dt = op->default_dtype();
  int iters = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_val = i + 1 < argc;
    const char* val = has_val ? argv[i + 1] : "";
    if (a == "--help" || a == "-h") {
      print_usage(ops);
      std::exit(0);
    }
    const int took = op->parse_option(a, has_val ? val : nullptr);
    if (took < 0) return 2;
    if (took > 0) {
      i += took - 1;
      continue;
    }
    if (!has_val) {
      std::fprintf(stderr, "unknown or incomplete option %s (--help lists them)\n", a.c_str());
      return 2;
    }
    if (a == "--op") {
      // read above
    } else if (a == "--tokens" || a == "--heads") {
      if (a == "--heads" && !op->has_heads()) {
        std::fprintf(stderr, "--heads: the %s op has no heads\n", op->name());
        return 2;
      }
      std::vector<std::int64_t>& v = a == "--tokens" ? tokens : heads;
      v.clear();
      for (const std::string& x : split(val)) {
        const long long n = std::atoll(x.c_str());
        if (n < 1) {
          std::fprintf(stderr, "%s: expected a list of positive integers, got %s\n", a.c_str(), x.c_str());
          return 2;
        }
        v.push_back(n);
      }
    } else if (a == "--pdl") {
      // off / on lists; 0, 1 and both as the key-side benchmark's earlier spelling
      const std::string s = val;
      pdls.clear();
      if (s == "0" || s == "1") {
        pdls.push_back(s == "1");
      } else if (s == "both") {
        pdls = {false, true};
      } else {
        for (const std::string& x : split(val)) {
          if (x != "on" && x != "off") {
            std::fprintf(stderr, "--pdl: expected a list of on|off (or 0, 1, both), got %s\n", x.c_str());
            return 2;
          }
          pdls.push_back(x == "on");
        }
      }
      if (pdls.empty()) {
        std::fprintf(stderr, "--pdl: expected a list of on|off\n");
        return 2;
      }
    } else if (a == "--dtype") {
      const std::string s = val;
      if (s == "bf16") dt = DType::kBFloat16;
      else if (s == "fp16") dt = DType::kFloat16;
      else if (s == "fp32") dt = DType::kFloat32;
      else {
        std::fprintf(stderr, "--dtype: expected bf16, fp16 or fp32, got %s\n", val);
        return 2;
      }
    } else if (a == "--iters") {
      iters = std::atoi(val);
      if (iters < 1) {
        std::fprintf(stderr, "--iters: expected a positive integer, got %s\n", val);
        return 2;
      }
    } else if (a == "--recipes") {
      if (!op->parse_recipes(val)) return 2;
    } else {
      std::fprintf(stderr, "unknown option %s (--help lists them)\n", a.c_str());
      return 2;
    }
    ++i;
  }

  if (op->recipe_count() == 0 || tokens.empty() || heads.empty()) {
    std::fprintf(stderr, "--recipes / --tokens / --heads: expected at least one\n");
    return 2;
  }
  const Columns col = op->columns();
  const cudaDeviceProp prop = first_device_or_exit();
  std::printf("# device: %s, %d SMs; %s; median of %d replays of %d calls\n", prop.name, prop.multiProcessorCount,
              op->describe(dt).c_str(), iters, kPerGraph);
  std::printf("%s\n", col.csv_header);
  std::string table;
  cudaStream_t s = nullptr;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  bool all_equal = true;
  std::unique_ptr<Dev> c0, c1;  // the copy's buffers, grown on demand
  std::size_t copy_cap = 0;
  for (const std::int64_t H : heads) {
    for (const std::int64_t T : tokens) {
      op->setup(T, H, dt, s);
      std::map<std::string, double> ref_gbps;  // per reference group, this size
      const std::size_t n = op->recipe_count();
      for (std::size_t ri = 0; ri < n + (op->repeat_first_recipe() ? 1 : 0); ++ri) {
        const bool again = ri == n;
        const std::size_t r = again ? 0 : ri;
        const std::int64_t bytes = op->bytes(r);
        const std::size_t half = std::size_t(bytes / 2);
        if (half + 16 > copy_cap) {
          c0.reset();
          c1.reset();
          copy_cap = half + 16;
          c0.reset(new Dev(copy_cap));
          c1.reset(new Dev(copy_cap));
        }
        const double copy_us = copy_median_us(s, c1->p, c0->p, half, 10, iters);
        const double copy_gbps = to_gbps(bytes, copy_us);
        op->prepare(r);
        const std::vector<Output> outs = op->outputs();
        auto collect = [&](const std::function<void()>& fn) {
          for (const Output& o : outs) ck(cudaMemsetAsync(o.p, 0x5A, o.bytes, s), "poison");
          fn();
          ck(cudaStreamSynchronize(s), "sync");
          std::vector<std::uint8_t> h;
          for (const Output& o : outs) {
            const std::size_t at = h.size();
            h.resize(at + o.bytes);
            ck(cudaMemcpy(h.data() + at, o.p, o.bytes, cudaMemcpyDeviceToHost), "to host");
          }
          return h;
        };
        const std::vector<std::uint8_t> want = collect([&] { op->spec_kernel(); });
        const std::string name = op->recipe_name(r) + (again ? "(again)" : "");
        const std::string kc = op->key_csv(T, H, dt, name), kt = op->key_table(T, H, name);
        for (const Case& e : op->cases(pdls, again)) {
          const bool equal = e.compare ? collect(e.fn) == want : true;
          all_equal = all_equal && equal;
          const double us = time_median_us(s, e.fn, 10, iters);
          const double gbps = to_gbps(bytes, us);
          if (e.is_ref && !ref_gbps.count(e.ref_group)) ref_gbps[e.ref_group] = gbps;
          const auto rg = ref_gbps.find(e.ref_group);
          const double vs_ref = rg != ref_gbps.end() && rg->second > 0 ? gbps / rg->second : 0.0;
          const char* pdl = e.pdl ? col.pdl_on : col.pdl_off;
          std::printf("csv,%s,%s,%s,%lld,%.3f,%.1f,%.3f,%.1f,%.3f,%.3f,%s\n", kc.c_str(), e.variant.c_str(), pdl,
                      (long long)bytes, us, gbps, copy_us, copy_gbps, copy_us / us, vs_ref,
                      !e.compare ? "-" : equal ? "yes" : "NO");
          std::fflush(stdout);
          table += kt + " " + strprintf("%-*s", col.variant_width, e.variant.c_str()) + " " +
                   strprintf("%s%-*s", col.table_pdl, col.table_pdl_width, pdl) +
                   strprintf(" %10lld B %9.3f us %7.1f GB/s  copy %7.1f GB/s  x%.3f copy  x%.3f %s %s\n",
                             (long long)bytes, us, gbps, copy_gbps, copy_us / us, vs_ref, col.ref_label,
                             equal ? "" : "BYTES DIFFER");
        }
      }
    }
  }
  std::printf("\n%s", table.c_str());
  std::printf("all bytes equal to %s: %s\n", col.spec_kernel, all_equal ? "yes" : "NO");
  cudaStreamDestroy(s);
  return all_equal ? 0 : 3;
}

}  // namespace bench
}  // namespace indexer_q
