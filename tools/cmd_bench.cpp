// indexer-q bench: a sweep of recipes x tokens x heads on one backend, beside a plain copy of the
// same number of bytes on the same device, in the same run. The op is called through the public
// API only (run()); comparisons with other kernel designs live in bench/.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "common/problem.h"
#include "kside_cli.h"
#include "workload.h"

namespace indexer_q {
namespace cli {

namespace {

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

}  // namespace

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
  if (argv_names_kside_recipe(argc, argv)) return cmd_bench_kside(argc, argv);  // the key side
  Args a("bench", bench_options(), argc, argv);
  if (a.help()) {
    std::fputs(a.help_text("indexer-q bench [options]", kBenchDescription, recipes_help() + kside_recipes_help() + "\n" + kside_options_help(true)).c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument '" + a.positional()[0] + "'");
  const std::vector<RecipeId> recipes = parse_recipe_list_option(a);
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
  std::vector<int> pdl_modes;  // 1 on, 0 off, -1 not applicable (cpu)
  {
    const std::string v = a.str("pdl", "on,off");
    if (v == "on") pdl_modes = {1};
    else if (v == "off") pdl_modes = {0};
    else if (v == "on,off") pdl_modes = {1, 0};
    else if (v == "off,on") pdl_modes = {0, 1};
    else throw UsageError("--pdl: expected on, off or on,off, got '" + v + "'");
  }
  Runtimes rts;
  const Target t = select_target(a, &rts);
  DeviceRuntime& rt = *t.rt;
  const bool gpu = t.backend == Backend::kCuda;
  const std::string isa_col = bench_isa_column(t);
  const std::string threads_col = bench_threads_column(t);
  const Options opts0 = t.options();
  if (!gpu) pdl_modes = {-1};

  if (csv) {
    std::fputs(kBenchCsvHeader, stdout);
  } else {
    std::printf("indexer-q bench: %s on %s, %s, %s positions, warmup %d, iters %d\n", t.label.c_str(),
                rt.name().c_str(), dtype_name(dtype), dtype_name(pos_dtype), warmup, iters);
    std::printf("%-20s %-10s %-7s %7s %5s %7s %3s %5s %11s %9s %10s %9s %6s\n", "recipe", "backend", "isa", "tokens",
                "heads", "threads", "pdl", "sets", "us_median", "GB/s", "copy_GB/s", "vs_copy", "exact");
  }
  std::fflush(stdout);
  int status = kExitOk;
  for (RecipeId recipe_id : recipes) {
    for (std::int64_t H : heads) {
      for (std::int64_t T : tokens) {
        const char* rname = recipe_name(recipe_id);
        auto fail = [&](const std::string& why, int code) {
          std::fprintf(stderr, "indexer-q bench: %s, tokens %lld, heads %lld: %s\n", rname, (long long)T,
                       (long long)H, why.c_str());
          status = std::max(status, code);
        };
        WorkloadSpec spec;
        spec.recipe = recipe_id;
        spec.tokens = T;
        spec.heads = H;
        spec.dtype = dtype;
        spec.pos_dtype = pos_dtype;
        spec.seed = seed;
        const std::int64_t ws = detail::bytes_moved(T, H, dtype, pos_dtype, recipe_id);
        const std::int64_t nsets = bench_buffer_sets(t, rotate_mb, ws);
        note_sizes(fmt("--tokens %lld x --heads %lld (%lld buffer sets)", (long long)T, (long long)H, (long long)nsets),
                   double(T) * double(H) * (128.0 * dtype_size(dtype) + 128.0 + 8.0) * (2.0 * double(nsets) + 2.0));
        // Set 0 owns the freqs table; the others share it (different data and start positions).
        Workload w0 = make_workload(spec);
        std::vector<std::unique_ptr<DeviceCase>> sets;
        sets.emplace_back(new DeviceCase(rt, w0.data));
        for (std::int64_t i = 1; i < nsets; ++i) {
          WorkloadSpec si = spec;
          si.seed = seed + std::uint64_t(i);
          si.make_freqs = false;
          const Workload wi = make_workload(si);
          sets.emplace_back(new DeviceCase(rt, wi.data, sets[0]->freqs()));
        }

        bool have_expected = false;
        for (const int pdl : pdl_modes) {
          Options opts = opts0;
          if (pdl >= 0) opts.enable_pdl = pdl == 1;
          const char* pdl_col = pdl < 0 ? "-" : pdl ? "on" : "off";
          std::string exact = "-";
          sets[0]->poison(0xff);
          Status s = sets[0]->run(opts);
          if (!s.ok()) {
            fail(s.message(), kExitRuntime);
            continue;
          }
          if (check) {
            Outputs out;
            sets[0]->download(&out);
            if (!have_expected) {
              s = fill_expected(&w0.data);
              if (!s.ok()) throw std::runtime_error(s.message());
              have_expected = true;
            }
            const io::Diff d = io::compare_outputs(w0.data, out.q_out.data(),
                                                   out.q_sf.empty() ? nullptr : out.q_sf.data(), out.weights_out.data());
            exact = d.exact() ? "yes" : "NO";
            if (!d.exact())
              fail(fmt("output differs from the reference: %lld code bytes, %lld block-scale bytes, %lld weights",
                       (long long)d.q_bytes, (long long)d.sf_bytes, (long long)d.weights),
                   kExitMismatch);
          }

          const BenchTiming tm = bench_time_case(
              rt, sets.size(), [&](std::size_t k) { return sets[k]->run(opts); }, ws, warmup, iters);
          if (!tm.failed.ok()) {
            fail(tm.failed.message(), kExitRuntime);
            continue;
          }
          const double us = tm.us, copy_us = tm.copy_us, gbps = tm.gbps, copy_gbps = tm.copy_gbps;

          if (csv) {
            std::printf("%s,%s,%lld,%lld,%s,%s,%s,%lld,%.3f,%.3f,%.3f,%.3f,%.4f,%s,%s\n", backend_name(t.backend),
                        isa_col.c_str(), (long long)T, (long long)H, dtype_name(dtype), threads_col.c_str(), pdl_col,
                        (long long)nsets, us, gbps, copy_us, copy_gbps, gbps / copy_gbps, exact.c_str(), rname);
          } else {
            std::printf("%-20s %-10s %-7s %7lld %5lld %7s %3s %5lld %11.2f %9.2f %10.2f %9.3f %6s\n", rname,
                        backend_name(t.backend), isa_col.c_str(), (long long)T, (long long)H, threads_col.c_str(),
                        pdl_col, (long long)nsets, us, gbps, copy_gbps, gbps / copy_gbps, exact.c_str());
          }
          std::fflush(stdout);
        }
        std::fflush(stdout);
      }
    }
  }
  return status;
}

}  // namespace cli
}  // namespace indexer_q
