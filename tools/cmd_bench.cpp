// indexer-q bench: an op's sweep (recipes x sizes) on one backend, beside a plain copy of the same
// number of bytes on the same device, in the same run; one loop for every op (op.h: the op
// supplies its options, cases, buffers, reference check and table rows). The ops are called
// through the public API only; comparisons with other kernel designs live in bench/.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "op.h"

namespace indexer_q {
namespace cli {

const char* const kBenchCsvHeader =
    "backend,isa,tokens,heads,dtype,threads,pdl,sets,us_median,gbps,copy_us,copy_gbps,ratio_to_copy,exact,recipe\n";

std::string bench_isa_column(const Target& t) {
  const bool gpu = t.backend == Backend::kCuda;
  return t.backend == Backend::kCpu ? cpu_isa_name(t.isa) : gpu ? "-" : cpu_isa_name(CpuIsa::kScalar);
}

std::string bench_threads_column(const Target& t) {
  return t.backend == Backend::kCuda ? "-" : std::to_string(t.threads);
}

std::int64_t bench_buffer_sets(const Target& t, std::int64_t rotate_mb, std::int64_t bytes_per_call) {
  std::int64_t nsets = 1;
  if (t.backend != Backend::kCuda && rotate_mb > 0) {
    const std::int64_t target = rotate_mb << 20;
    nsets = std::min<std::int64_t>(1024, std::max<std::int64_t>(1, (target + bytes_per_call - 1) / bytes_per_call));
  }
  return nsets;
}

BenchTiming bench_time_case(DeviceRuntime& rt, std::size_t nsets, const std::function<Status(std::size_t)>& run_set,
                            std::int64_t bytes, int warmup, int iters) {
  BenchTiming r;
  std::size_t k = 0;
  r.us = rt.time_median_us(
      [&] {
        const Status st = run_set(k);
        if (!st.ok()) r.failed = st;
        k = (k + 1) % nsets;
      },
      warmup, iters);
  rt.synchronize();
  if (!r.failed.ok()) return r;
  const std::size_t copy_bytes = std::size_t(bytes / 2);
  r.copy_us = rt.copy_median_us(copy_bytes, warmup, iters);
  r.gbps = double(bytes) / (r.us * 1e3);
  r.copy_gbps = 2.0 * double(copy_bytes) / (r.copy_us * 1e3);
  return r;
}

int cmd_bench(int argc, char** argv) {
  Runtimes rts;  // before the ops: their buffers live in its runtimes' memory
  const std::vector<std::unique_ptr<CliOp>> ops = cli_ops();
  const std::size_t which = op_for_argv(ops, argc, argv);
  CliOp& op = *ops[which];
  const std::vector<OptionSpec> specs = op.options(Cmd::kBench);
  Args a("bench", specs, argc, argv);
  if (a.help()) {
    std::fputs(op_help(Cmd::kBench, a, ops, which).c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument '" + a.positional()[0] + "'");
  op.parse(Cmd::kBench, a);
  const int warmup = int(a.integer("warmup", op.default_warmup(Cmd::kBench), 0, 1000000));
  const int iters = int(a.integer("iters", op.default_iters(Cmd::kBench), 1, 1000000));
  const std::int64_t rotate_mb = a.integer("rotate-mb", 16, 0, 65536);
  const bool csv = a.choice("format", "table", {"table", "csv"}) == "csv";
  const bool check = !a.flag("no-check");
  std::vector<int> pdl_modes = {-2};  // 1 on, 0 off, -1 not applicable (cpu), -2 the library's default
  if (std::any_of(specs.begin(), specs.end(), [](const OptionSpec& o) { return std::string(o.name) == "pdl"; })) {
    const std::string v = a.str("pdl", "on,off");
    if (v == "on") pdl_modes = {1};
    else if (v == "off") pdl_modes = {0};
    else if (v == "on,off") pdl_modes = {1, 0};
    else if (v == "off,on") pdl_modes = {0, 1};
    else throw UsageError("--pdl: expected on, off or on,off, got '" + v + "'");
  }
  const Target t = select_target(a, &rts);
  DeviceRuntime& rt = *t.rt;
  const bool gpu = t.backend == Backend::kCuda;
  const std::string isa_col = bench_isa_column(t);
  const std::string threads_col = bench_threads_column(t);
  const Options opts0 = t.options();
  if (!gpu) pdl_modes = {-1};

  if (csv) std::fputs(kBenchCsvHeader, stdout);
  else op.print_bench_header(t, warmup, iters);
  std::fflush(stdout);
  int status = kExitOk;
  for (const BenchPoint& p : op.bench_points()) {
    auto fail = [&](const std::string& why, int code) {
      std::fprintf(stderr, "indexer-q bench: %s: %s\n", p.where.c_str(), why.c_str());
      status = std::max(status, code);
    };
    const std::int64_t nsets = bench_buffer_sets(t, rotate_mb, p.bytes);
    note_sizes(p.sizes + fmt(" (%lld buffer sets)", (long long)nsets), p.host_bytes * (2.0 * double(nsets) + 2.0));
    const std::unique_ptr<DeviceWork> w = op.bench_work(rt, p, nsets);
    for (const int pdl : pdl_modes) {
      Options opts = opts0;
      if (pdl >= 0) opts.enable_pdl = pdl == 1;
      BenchRow row;
      row.sets = nsets;
      row.pdl = pdl == -1 ? "-" : pdl == 1 ? "on" : pdl == 0 ? "off" : opts.enable_pdl ? "on" : "off";
      w->poison();
      const Status s = w->run(0, opts);
      if (!s.ok()) {
        fail(s.message(), kExitRuntime);
        continue;
      }
      if (check) {
        const DeviceWork::Check c = w->check();
        row.exact = c.reference.ok() && c.exact ? "yes" : "NO";
        if (!c.reference.ok()) fail("reference: " + c.reference.message(), kExitRuntime);
        else if (!c.exact) fail(c.mismatch, kExitMismatch);
      }
      row.timing = bench_time_case(
          rt, w->sets(), [&](std::size_t k) { return w->run(k, opts); }, p.bytes, warmup, iters);
      if (!row.timing.failed.ok()) {
        fail(row.timing.failed.message(), kExitRuntime);
        continue;
      }
      const BenchTiming& tm = row.timing;
      if (csv)
        std::printf("%s,%s,%lld,%lld,%s,%s,%s,%lld,%.3f,%.3f,%.3f,%.3f,%.4f,%s,%s\n", backend_name(t.backend),
                    isa_col.c_str(), (long long)p.tokens, (long long)p.heads, dtype_name(p.dtype), threads_col.c_str(),
                    row.pdl, (long long)nsets, tm.us, tm.gbps, tm.copy_us, tm.copy_gbps, tm.gbps / tm.copy_gbps, row.exact,
                    p.recipe.c_str());
      else
        op.print_bench_row(t, p, row);
      std::fflush(stdout);
    }
  }
  return status;
}

}  // namespace cli
}  // namespace indexer_q
