// indexer-q verify: conformance files through every available backend, byte for byte, for the
// recipe each file names (metadata "variant") and, for an FP8 e4m3fn file, the derived e4m3fnuz
// recipe too.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "cli.h"
#include "io/op_case.h"
#include "kside_cli.h"
#include "workload.h"

namespace indexer_q {
namespace cli {

std::string diff_details(const io::Diff& d, const io::ConformanceCase& want, const std::uint8_t* got_q,
                         const std::uint8_t* got_sf, const float* got_w) {
  std::string s;
  const std::int64_t per_row = want.out_bytes_per_row();
  if (!d.first_q.empty()) {
    s += "first code diffs:";
    for (std::int64_t i : d.first_q)
      s += fmt(" [row %lld, byte %lld] got 0x%02x want 0x%02x;", (long long)(i / per_row), (long long)(i % per_row),
               got_q[i], want.q_out[std::size_t(i)]);
  }
  if (!d.first_sf.empty()) {
    if (!s.empty()) s += " ";
    s += "first block-scale diffs:";
    for (std::int64_t i : d.first_sf)
      s += fmt(" [row %lld, block %lld] got 0x%02x want 0x%02x;", (long long)(i / 4), (long long)(i % 4),
               got_sf ? got_sf[i] : 0u, want.q_sf[std::size_t(i)]);
  }
  if (!d.first_weights.empty()) {
    if (!s.empty()) s += " ";
    s += "first weights_out diffs:";
    for (std::int64_t r : d.first_weights) {
      std::uint32_t g, w;
      std::memcpy(&g, got_w + r, 4);
      std::memcpy(&w, want.weights_out.data() + r, 4);
      s += fmt(" [row %lld] got %.9g (0x%08x) want %.9g (0x%08x);", (long long)r, double(got_w[r]), g,
               double(want.weights_out[std::size_t(r)]), w);
    }
  }
  return s;
}

namespace {

std::vector<OptionSpec> verify_options() {
  return {
      {"backend", "B", "all|" + backend_names() + " (default all: reference, cpu once per\n"
                       "supported ISA, cuda when a device is usable; auto = cpu, or cuda when usable)"},
      {"isa", "I", "with --backend cpu (or all): only this ISA: " + isa_names() + "\n"
                   "(default: every supported ISA)"},
      {"threads", "N", "cpu backend threads, >= 1 (default: the library default)"},
  };
}

const char* kVerifyDescription =
    "Runs conformance files (safetensors with tensors q_input, weight, freqs, positions, the\n"
    "expected outputs and the metadata string weight_scale, or for the vllm_* recipes softmax_scale\n"
    "and head_scale) on each selected backend and compares every output byte with the expected\n"
    "ones (bit comparison, NaN bits included). The metadata string 'variant' names the file's recipe\n"
    "(absent: v4_fp8); its expected outputs are q_fp8 (B,H,128) and weights_out for FP8 recipes,\n"
    "q_fp4 (B,H,64), q_sf (B,H) and weights_out for FP4 recipes (v4_fp4, vllm_v4_mxfp4);\n"
    "weights_out may be stored (B,H,1) or (B,H). Every FP8 e4m3fn file of a recipe with an\n"
    "e4m3fnuz twin is also checked as that recipe (<variant>_fnuz), with the expected outputs\n"
    "derived as docs/RECIPES.md says (code 0x80 -> 0x00, weights_out x 2); vllm_v4_fp8 has none.\n"
    "Outputs are poisoned before each run (once with 0xff, once with 0x00), so a byte the backend\n"
    "does not write is always caught. A malformed, truncated or inconsistent file, or one whose\n"
    "variant is not a recipe of this library, is reported as such and the other files still run.\n"
    "Per file, recipe and backend it prints the number of differing code bytes, block-scale bytes\n"
    "(FP4) and weights_out values and, if any, the first few differing indices; then a summary\n"
    "line. A directory stands for the *.safetensors files under it (recursively); other files not\n"
    "named *.safetensors are skipped with a note (so a shell glob may match a README).\n"
    "Key-side files (variant v4_k_fp8 | v4_k_fp4, docs/KSIDE-SPEC.md, docs/KSIDE.md): positions and slots\n"
    "come from the file's plan, out_loc, mode and compress_ratio; the cache is filled with the file's\n"
    "cache_fill (then its complement) before each run and every byte of it is compared.\n"
    "Only regular files are read (a FIFO, socket or device is skipped with a note); a file's header\n"
    "is checked against its size before any data is read, and an error of one file (one larger\n"
    "than memory included) is reported with its name while the other files still run.\n"
    "Exit status: 0 if every file was read and every run is exact; 1 if a run differs; 3 if a file\n"
    "cannot be used; 4 if a backend cannot run a file (or is not available); 2 for a bad command line.";

// verify, the query side: case c on target t twice (outputs poisoned with 0xff, then 0x00),
// the worse diff kept.
VerifyRun query_verify_run(const Target& t, const io::ConformanceCase& c) {
  VerifyRun res;
  DeviceCase dc(*t.rt, c);
  io::Diff diff;
  Outputs out;
  bool have = false;
  for (unsigned char poison : {0xff, 0x00}) {
    dc.poison(poison);
    res.status = dc.run(t.options());
    if (!res.status.ok()) return res;
    Outputs o;
    dc.download(&o);
    io::Diff d = io::compare_outputs(c, o.q_out.data(), o.q_sf.empty() ? nullptr : o.q_sf.data(),
                                     o.weights_out.data());
    const std::int64_t bad = d.q_bytes + d.sf_bytes + d.weights;
    if (!have || bad > diff.q_bytes + diff.sf_bytes + diff.weights) {
      diff = d;
      out = std::move(o);
      have = true;
    }
  }
  const std::int64_t rows = c.B * c.H;
  res.counts = fmt("codes differ: %lld of %lld", (long long)diff.q_bytes, (long long)(rows * c.out_bytes_per_row()));
  if (!c.q_sf.empty()) res.counts += fmt("   scales differ: %lld of %lld", (long long)diff.sf_bytes, (long long)c.q_sf.size());
  if (!c.weights_out.empty())
    res.counts += fmt("   weights_out differ: %lld of %lld", (long long)diff.weights, (long long)rows);
  res.exact = diff.exact();
  if (!res.exact)
    res.details = diff_details(diff, c, out.q_out.data(), out.q_sf.empty() ? nullptr : out.q_sf.data(),
                               out.weights_out.data());
  return res;
}

std::string query_case_summary(const io::ConformanceCase& c, bool default_variant) {
  const std::string rope_text = recipe_has_rope(recipe(c.recipe))
                                    ? fmt("%s positions, max_pos %lld", dtype_name(c.pos_dtype), (long long)c.max_pos)
                                    : std::string("no RoPE");
  return fmt("variant %s%s; B=%lld, H=%lld, %s, %s, weights_out %s", recipe_name(c.recipe),
             default_variant ? " (no metadata: the default)" : "", (long long)c.B, (long long)c.H, dtype_name(c.dtype),
             rope_text.c_str(), weight_factors_text(c).c_str());
}

// Every op's cases through the same lines: the file's summary, then per case and target the
// counts of differing output bytes.
std::string case_summary(const io::LoadedFile& lf) {
  const io::OpCase& c = lf.cases.front();
  return c.op == io::CaseOp::kKey ? kside_case_summary(c.k) : query_case_summary(c.q, lf.variant.empty());
}
const char* case_recipe_name(const io::OpCase& c) {
  return c.op == io::CaseOp::kKey ? krecipe_name(c.k.recipe) : recipe_name(c.q.recipe);
}
VerifyRun verify_run(const Target& t, const io::OpCase& c) {
  return c.op == io::CaseOp::kKey ? kside_verify_run(t, c.k) : query_verify_run(t, c.q);
}

// One file through every target; adds to the counts (defined after cmd_verify).
void verify_one_file(const std::string& path, const std::vector<Target>& targets, int* exact_runs, int* differ_runs,
                     int* failed_runs, int* bad_files, int* unknown_variant);

}  // namespace

int cmd_verify(int argc, char** argv) {
  Args a("verify", verify_options(), argc, argv);
  if (a.help()) {
    std::fputs(a.help_text("indexer-q verify [options] FILE.safetensors|DIR...", kVerifyDescription,
                           recipes_help() + kside_recipes_help()).c_str(),
               stdout);
    return 0;
  }
  if (a.positional().empty()) throw UsageError("no conformance file given (usage: indexer-q verify FILE...)");
  std::vector<std::string> backend_choices = backend_name_list();
  backend_choices.insert(backend_choices.begin(), "all");
  std::string which = a.choice("backend", "all", backend_choices);
  const CpuIsa isa = parse_isa_option(a);
  const int threads = int(a.integer("threads", 0, 1, 4096));
  const std::string ref = backend_name(Backend::kReference), cpu = backend_name(Backend::kCpu),
                    cuda = backend_name(Backend::kCuda);
  Runtimes rts;
  if (which == backend_name(Backend::kAuto)) which = rts.get_cuda() ? cuda : cpu;
  if ((which == ref || which == cuda) && (a.has("isa") || a.has("threads")))
    throw UsageError(std::string("option --") + (a.has("isa") ? "isa" : "threads") +
                     " applies to the cpu backend only");

  std::vector<Target> targets;
  std::string notes;
  if (which == "all" || which == ref) {
    Target t;
    t.backend = Backend::kReference;
    t.label = ref;
    t.rt = rts.get_cpu(1);
    targets.push_back(t);
  }
  if (which == "all" || which == cpu) {
    std::vector<CpuIsa> isas;
    if (isa != CpuIsa::kAuto) isas.push_back(isa);
    else isas = supported_cpu_isas();
    for (CpuIsa i : isas) {
      Target t;
      t.backend = Backend::kCpu;
      t.isa = i;
      t.threads = threads > 0 ? threads : cpu_num_threads();
      t.label = cpu + "/" + cpu_isa_name(i);
      t.rt = rts.get_cpu(1);
      targets.push_back(t);
    }
  }
  if (which == "all" || which == cuda) {
    DeviceRuntime* rt = rts.get_cuda();
    if (rt) {
      Target t;
      t.backend = Backend::kCuda;
      t.label = cuda;
      t.rt = rt;
      targets.push_back(t);
    } else if (which == cuda) {
      std::fprintf(stderr, "indexer-q verify: --backend cuda: not available: %s\n", rts.cuda_why.c_str());
      return kExitRuntime;
    } else {
      notes = "cuda skipped: " + rts.cuda_why;
    }
  }

  // Directories expand to the *.safetensors files under them (sorted); other files not named
  // *.safetensors (e.g. a README matched by a shell glob) are skipped with a note, and so is
  // anything that is not a regular file (a FIFO would block a reader forever, a device has no
  // end): only regular files are read.
  std::vector<std::string> files, skipped, not_regular;
  auto kind_of = [](const std::filesystem::file_status& st) -> const char* {
    switch (st.type()) {
      case std::filesystem::file_type::fifo: return "a FIFO";
      case std::filesystem::file_type::socket: return "a socket";
      case std::filesystem::file_type::character: return "a character device";
      case std::filesystem::file_type::block: return "a block device";
      default: return "not a regular file";
    }
  };
  for (const std::string& arg : a.positional()) {
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(arg, ec);
    if (std::filesystem::is_directory(st)) {
      std::vector<std::string> found;
      for (const auto& e : std::filesystem::recursive_directory_iterator(arg, ec)) {
        if (e.path().extension() != ".safetensors" || e.is_directory(ec)) continue;
        const std::filesystem::file_status est = e.status(ec);
        if (std::filesystem::is_regular_file(est)) found.push_back(e.path().string());
        else if (std::filesystem::exists(est)) not_regular.push_back(e.path().string() + " (" + kind_of(est) + ")");
      }
      std::sort(found.begin(), found.end());
      if (found.empty()) skipped.push_back(arg + " (a directory without *.safetensors files)");
      files.insert(files.end(), found.begin(), found.end());
    } else if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
      not_regular.push_back(arg + " (" + kind_of(st) + ")");
    } else if (arg.size() < 12 || arg.compare(arg.size() - 12, 12, ".safetensors") != 0) {
      if (std::filesystem::exists(st)) skipped.push_back(arg);
      else files.push_back(arg);  // reported as unreadable below
    } else {
      files.push_back(arg);
    }
  }

  std::printf("indexer-q verify: %zu file(s) x %zu backend(s):", files.size(), targets.size());
  for (const Target& t : targets) std::printf(" %s", t.label.c_str());
  std::printf("\n");
  if (!notes.empty()) std::printf("  (%s)\n", notes.c_str());
  for (const std::string& f : skipped) std::printf("  (skipped, not a *.safetensors file: %s)\n", f.c_str());
  for (const std::string& f : not_regular) std::printf("  (skipped, not a regular file: %s)\n", f.c_str());

  int exact_runs = 0, differ_runs = 0, failed_runs = 0, bad_files = 0, unknown_variant = 0;
  for (const std::string& path : files) {
    // Any error of one file (a size that does not fit in memory included) is that file's: it is
    // reported with its name and the other files still run.
    try {
      verify_one_file(path, targets, &exact_runs, &differ_runs, &failed_runs, &bad_files, &unknown_variant);
    } catch (const std::bad_alloc&) {
      std::printf("%s\n  UNREADABLE: %s: out of memory while reading or running it\n", path.c_str(), path.c_str());
      ++bad_files;
    } catch (const std::exception& e) {
      std::printf("%s\n  FAILED: %s: %s\n", path.c_str(), path.c_str(), e.what());
      ++bad_files;
    }
  }
  const bool ok = !files.empty() && bad_files == 0 && differ_runs == 0 && failed_runs == 0;
  std::printf("summary: %zu file(s), %d unreadable", files.size(), bad_files);
  if (unknown_variant) std::printf(" (%d of an unknown variant)", unknown_variant);
  std::printf("; %d run(s): %d exact, %d differ, %d failed -> %s\n", exact_runs + differ_runs + failed_runs,
              exact_runs, differ_runs, failed_runs, ok ? "PASS" : "FAIL");
  if (ok) return kExitOk;
  return failed_runs ? kExitRuntime : bad_files || files.empty() ? kExitBadInput : kExitMismatch;
}

namespace {

void verify_one_file(const std::string& path, const std::vector<Target>& targets, int* exact_runs_, int* differ_runs_,
                     int* failed_runs_, int* bad_files_, int* unknown_variant_) {
  int& exact_runs = *exact_runs_;
  int& differ_runs = *differ_runs_;
  int& failed_runs = *failed_runs_;
  int& bad_files = *bad_files_;
  int& unknown_variant = *unknown_variant_;
  {
    // The one loader (tools/io/op_case.h): the file's op, its case and the derived ones.
    io::LoadedFile lf;
    if (!io::load_op_cases_file(path, &lf)) {
      if (lf.failure == io::LoadFailure::kUnknownVariant) {
        std::printf("%s\n  UNKNOWN VARIANT: metadata \"variant\" = \"%s\" is not a recipe of this library "
                    "(%s); not checked\n",
                    path.c_str(), lf.variant.c_str(), all_recipe_names().c_str());
        ++unknown_variant;
      } else if (lf.failure == io::LoadFailure::kUnreadable) {
        std::printf("%s\n  UNREADABLE: %s\n", path.c_str(), lf.error.c_str());
      } else if (lf.op == io::CaseOp::kKey) {
        std::printf("%s\n  UNREADABLE: inconsistent key-side case: %s\n", path.c_str(), lf.error.c_str());
      } else {
        std::printf("%s\n  UNREADABLE: %s: inconsistent conformance case: %s\n", path.c_str(), path.c_str(),
                    lf.error.c_str());
      }
      ++bad_files;
      return;
    }
    if (lf.op == io::CaseOp::kRsqTable) {  // the MUFU.RSQ table the key side's host model is built from
      std::printf("%s\n  (the MUFU.RSQ table of the key side's host model: not an op case; every entry is checked\n"
                  "   by the tests, KsideRsq.EveryTableEntryMatchesTheGoldenTable)\n", path.c_str());
      return;
    }
    std::printf("%s  (%s)\n", path.c_str(), case_summary(lf).c_str());
    for (const io::OpCase& oc : lf.cases) {
      if (oc.derived)
        std::printf("  %s (derived from the file: code 0x80 -> 0x00, weights_out x 2)\n", case_recipe_name(oc));
      for (const Target& t : targets) {
        const std::string line = fmt("  %-20s %-12s", case_recipe_name(oc), t.label.c_str());
        try {
          const VerifyRun r = verify_run(t, oc);
          if (!r.status.ok()) {
            std::printf("%s%s: %s\n", line.c_str(),
                        r.status.code() == StatusCode::kUnavailable ? "UNAVAILABLE" : "FAILED",
                        r.status.message().c_str());
            ++failed_runs;
            continue;
          }
          std::printf("%s%s   %s\n", line.c_str(), r.counts.c_str(), r.exact ? "exact" : "DIFFER");
          if (!r.exact) {
            std::printf("    %s\n", r.details.c_str());
            ++differ_runs;
          } else {
            ++exact_runs;
          }
        } catch (const std::bad_alloc&) {
          std::printf("%sFAILED: out of memory\n", line.c_str());
          ++failed_runs;
        } catch (const std::exception& e) {
          std::printf("%sFAILED: %s\n", line.c_str(), e.what());
          ++failed_runs;
        }
      }
    }
  }
}

}  // namespace

}  // namespace cli
}  // namespace indexer_q
