// indexer-q bench: a sweep of tokens x heads on one backend, beside a plain copy of the same
// number of bytes on the same device, and the device's baselines, all in the same run.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "common/problem.h"
#include "workload.h"

namespace indexer_q {
namespace cli {

namespace {

const std::vector<OptionSpec> kBenchOptions = {
    {"backend", "B", "auto|reference|cpu|cuda (default auto: cuda when a device is usable, else cpu)"},
    {"isa", "I", "cpu backend instruction set: auto|scalar|avx2|avx512 (default auto)"},
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
    {"format", "F", "table|csv (default table)"},
    {"no-check", nullptr, "skip the byte comparison of each case against the scalar reference"},
};

const char* kBenchDescription =
    "Times the op for every (tokens, heads) pair on one backend (workloads as in 'indexer-q run').\n"
    "Per case it prints:\n"
    "  us_median      median time of one call (CPU: wall clock; each sample times enough\n"
    "                 back-to-back calls to last >= 50 us and divides; CUDA: CUDA-graph replay,\n"
    "                 events)\n"
    "  gbps           effective bandwidth: bytes read + written once per call (q rows, weights,\n"
    "                 fp8 out, weights_out, one position and one freqs row per token) / time\n"
    "  copy_gbps      a plain copy on the same device in the same run (memcpy / device-to-device),\n"
    "                 of half that many bytes, so that bytes read + bytes written equal the op's;\n"
    "                 copy_gbps = (read + written) / copy time, counted exactly like gbps\n"
    "  ratio_to_copy  gbps / copy_gbps (1.0 = as fast as a copy of the same traffic)\n"
    "  baselines      for CUDA: the one-warp-per-row baseline kernel on the same buffers, its time\n"
    "                 and the speedup (baseline time / op time)\n"
    "  exact          the first buffer set's output compared byte for byte with the reference\n"
    "CPU: small cases rotate among several buffer sets (see --rotate-mb; each set has its own\n"
    "inputs, positions and outputs, the freqs table is shared); 'sets' says how many. The copy\n"
    "rotates the same way (source/destination pairs spanning >= 16 MiB).\n"
    "csv: one header line, then one row per case: backend,isa,tokens,heads,dtype,threads,sets,\n"
    "us_median,gbps,copy_us,copy_gbps,ratio_to_copy,exact[,<baseline>_us,<baseline>_speedup...]\n"
    "(isa and threads are '-' on a GPU).\n"
    "Exit status: 0 if every case ran (and matched the reference), 1 otherwise, 2 for a bad\n"
    "command line.";

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args a("bench", kBenchOptions, argc, argv);
  if (a.help()) {
    std::fputs(a.help_text("indexer-q bench [options]", kBenchDescription).c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument '" + a.positional()[0] + "'");
  const std::vector<std::int64_t> tokens =
      a.int_list("tokens", {1, 8, 64, 256, 1024, 4096, 16384}, 1, std::int64_t(1) << 22);
  const std::vector<std::int64_t> heads = a.int_list("heads", {64}, 1, 4096);
  const DType dtype = parse_dtype_option(a, "dtype", "bf16");
  const DType pos_dtype = parse_pos_dtype_option(a, "pos-dtype", "int64");
  const int warmup = int(a.integer("warmup", 5, 0, 1000000));
  const int iters = int(a.integer("iters", 20, 1, 1000000));
  const std::int64_t rotate_mb = a.integer("rotate-mb", 16, 0, 65536);
  const std::uint64_t seed = std::uint64_t(a.integer("seed", 1, 0, INT64_MAX - 2048));
  const bool csv = a.choice("format", "table", {"table", "csv"}) == "csv";
  const bool check = !a.flag("no-check");
  Runtimes rts;
  const Target t = select_target(a, &rts);
  DeviceRuntime& rt = *t.rt;
  const bool gpu = t.backend == Backend::kCuda;
  const std::string isa_col = t.backend == Backend::kCpu ? cpu_isa_name(t.isa) : gpu ? "-" : "scalar";
  const std::string threads_col = gpu ? "-" : std::to_string(t.threads);
  const Options opts = t.options();

  if (!csv) {
    std::printf("indexer-q bench: %s on %s, %s, %s positions, warmup %d, iters %d\n", t.label.c_str(),
                rt.name().c_str(), dtype_name(dtype), dtype_name(pos_dtype), warmup, iters);
  }
  bool header_done = false, all_ok = true;
  std::vector<std::string> baseline_names;
  for (std::int64_t H : heads) {
    for (std::int64_t T : tokens) {
      WorkloadSpec spec;
      spec.tokens = T;
      spec.heads = H;
      spec.dtype = dtype;
      spec.pos_dtype = pos_dtype;
      spec.seed = seed;
      const std::int64_t ws = detail::bytes_moved(T, H, dtype, pos_dtype);
      std::int64_t nsets = 1;
      if (!gpu && rotate_mb > 0) {
        const std::int64_t target = rotate_mb << 20;
        nsets = std::min<std::int64_t>(1024, std::max<std::int64_t>(1, (target + ws - 1) / ws));
      }
      // Set 0 owns the freqs table; the others share it (different data and start positions).
      const Workload w0 = make_workload(spec);
      std::vector<std::unique_ptr<DeviceCase>> sets;
      sets.emplace_back(new DeviceCase(rt, w0.data));
      for (std::int64_t i = 1; i < nsets; ++i) {
        WorkloadSpec si = spec;
        si.seed = seed + std::uint64_t(i);
        si.make_freqs = false;
        const Workload wi = make_workload(si);
        sets.emplace_back(new DeviceCase(rt, wi.data, sets[0]->freqs()));
      }

      std::string exact = "-";
      sets[0]->poison(0xff);
      Status s = sets[0]->run(opts);
      if (!s.ok()) {
        std::fprintf(stderr, "indexer-q bench: tokens %lld heads %lld: %s\n", (long long)T, (long long)H,
                     s.message().c_str());
        return 1;
      }
      if (check) {
        std::vector<std::uint8_t> out8, ref8;
        std::vector<float> outw, refw;
        sets[0]->download(&out8, &outw);
        s = reference_outputs(w0.data, &ref8, &refw);
        if (!s.ok()) throw std::runtime_error(s.message());
        const io::Diff d = io::compare_outputs(out8.data(), outw.data(), ref8.data(), refw.data(), T * H);
        exact = d.exact() ? "yes" : "NO";
        if (!d.exact()) {
          all_ok = false;
          std::fprintf(stderr, "indexer-q bench: tokens %lld heads %lld: output differs from the reference: %lld fp8 "
                       "bytes, %lld weights\n", (long long)T, (long long)H, (long long)d.fp8_bytes,
                       (long long)d.weights);
        }
      }

      std::size_t k = 0;
      Status timed;
      const double us = rt.time_median_us(
          [&] {
            const Status st = sets[k]->run(opts);
            if (!st.ok()) timed = st;
            k = (k + 1) % sets.size();
          },
          warmup, iters);
      rt.synchronize();
      if (!timed.ok()) {
        std::fprintf(stderr, "indexer-q bench: %s\n", timed.message().c_str());
        return 1;
      }
      const std::size_t copy_bytes = std::size_t(ws / 2);
      const double copy_us = rt.copy_median_us(copy_bytes, warmup, iters);
      const double gbps = double(ws) / (us * 1e3);
      const double copy_gbps = 2.0 * double(copy_bytes) / (copy_us * 1e3);

      struct BaseResult {
        std::string name;
        double us;
      };
      std::vector<BaseResult> base;
      for (const BaselineRun& b : baselines_for(t.backend, sets[0]->buffers(), rt)) {
        base.push_back({b.name, rt.time_median_us(b.run, warmup, iters)});
        rt.synchronize();
      }

      if (!header_done) {
        for (const auto& b : base) baseline_names.push_back(b.name);
        if (csv) {
          std::printf("backend,isa,tokens,heads,dtype,threads,sets,us_median,gbps,copy_us,copy_gbps,ratio_to_copy,exact");
          for (const auto& n : baseline_names) std::printf(",%s_us,%s_speedup", n.c_str(), n.c_str());
          std::printf("\n");
        } else {
          std::printf("%-10s %-7s %7s %5s %7s %5s %11s %9s %10s %9s %6s", "backend", "isa", "tokens", "heads",
                      "threads", "sets", "us_median", "GB/s", "copy_GB/s", "vs_copy", "exact");
          for (const auto& n : baseline_names) std::printf("  %16s %8s", (n + "_us").c_str(), "speedup");
          std::printf("\n");
        }
        header_done = true;
      }
      if (csv) {
        std::printf("%s,%s,%lld,%lld,%s,%s,%lld,%.3f,%.3f,%.3f,%.3f,%.4f,%s", backend_name(t.backend),
                    isa_col.c_str(), (long long)T, (long long)H, dtype_name(dtype), threads_col.c_str(),
                    (long long)nsets, us, gbps, copy_us, copy_gbps, gbps / copy_gbps, exact.c_str());
        for (const auto& n : baseline_names) {
          auto it = std::find_if(base.begin(), base.end(), [&](const BaseResult& b) { return b.name == n; });
          if (it == base.end()) std::printf(",,");
          else std::printf(",%.3f,%.3f", it->us, it->us / us);
        }
        std::printf("\n");
      } else {
        std::printf("%-10s %-7s %7lld %5lld %7s %5lld %11.2f %9.2f %10.2f %9.3f %6s", backend_name(t.backend),
                    isa_col.c_str(), (long long)T, (long long)H, threads_col.c_str(), (long long)nsets, us, gbps,
                    copy_gbps, gbps / copy_gbps, exact.c_str());
        for (const auto& n : baseline_names) {
          auto it = std::find_if(base.begin(), base.end(), [&](const BaseResult& b) { return b.name == n; });
          if (it == base.end()) std::printf("  %16s %8s", "-", "-");
          else std::printf("  %16.2f %7.2fx", it->us, it->us / us);
        }
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace cli
}  // namespace indexer_q
