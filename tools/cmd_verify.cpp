// indexer-q verify: conformance files through every available backend, byte for byte.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "io/safetensors.h"
#include "workload.h"

namespace indexer_q {
namespace cli {

std::string diff_details(const io::Diff& d, const std::uint8_t* got8, const std::uint8_t* want8,
                         const float* gotw, const float* wantw) {
  std::string s;
  if (!d.first_fp8.empty()) {
    s += "first fp8 diffs:";
    for (std::int64_t i : d.first_fp8)
      s += fmt(" [row %lld, dim %lld] got 0x%02x want 0x%02x;", (long long)(i / 128), (long long)(i % 128),
               got8[i], want8[i]);
  }
  if (!d.first_weights.empty()) {
    if (!s.empty()) s += " ";
    s += "first weights_out diffs:";
    for (std::int64_t r : d.first_weights) {
      std::uint32_t g, w;
      std::memcpy(&g, gotw + r, 4);
      std::memcpy(&w, wantw + r, 4);
      s += fmt(" [row %lld] got %.9g (0x%08x) want %.9g (0x%08x);", (long long)r, double(gotw[r]), g,
               double(wantw[r]), w);
    }
  }
  return s;
}

namespace {

const std::vector<OptionSpec> kVerifyOptions = {
    {"backend", "B", "all|reference|cpu|cuda (default all: reference, cpu once per supported ISA,\n"
                     "cuda when a device is usable)"},
    {"isa", "I", "with --backend cpu (or all): only this ISA: scalar|avx2|avx512 (default: every\n"
                 "supported ISA)"},
    {"threads", "N", "cpu backend threads, >= 1 (default: the library default)"},
};

const char* kVerifyDescription =
    "Runs conformance files (safetensors with tensors q_input, weight, freqs, positions, q_fp8,\n"
    "weights_out and the metadata string weight_scale) on each selected backend and compares\n"
    "every output byte with the expected q_fp8 and weights_out (bit comparison; NaN equals NaN).\n"
    "Outputs are poisoned before each run (once with 0xff, once with 0x00), so a byte the backend\n"
    "does not write is always caught. A malformed, truncated or inconsistent file is reported as\n"
    "such and the other files still run. Per file and backend it prints the number of differing\n"
    "fp8 bytes and weights_out values and, if any, the first few differing indices; then a\n"
    "summary line. A directory stands for the *.safetensors files in it; other files not named\n"
    "*.safetensors are skipped with a note (so a shell glob may match a README).\n"
    "Exit status: 0 if every file was read and every run is exact, 1 otherwise, 2 for a bad\n"
    "command line.";

}  // namespace

int cmd_verify(int argc, char** argv) {
  Args a("verify", kVerifyOptions, argc, argv);
  if (a.help()) {
    std::fputs(a.help_text("indexer-q verify [options] FILE.safetensors|DIR...", kVerifyDescription).c_str(), stdout);
    return 0;
  }
  if (a.positional().empty()) throw UsageError("no conformance file given (usage: indexer-q verify FILE...)");
  const std::string which = a.choice("backend", "all", {"all", "reference", "cpu", "cuda"});
  const CpuIsa isa = parse_isa_option(a);
  const int threads = int(a.integer("threads", 0, 1, 4096));
  if ((which == "reference" || which == "cuda") && (a.has("isa") || a.has("threads")))
    throw UsageError(std::string("option --") + (a.has("isa") ? "isa" : "threads") +
                     " applies to the cpu backend only");

  Runtimes rts;
  std::vector<Target> targets;
  std::string notes;
  if (which == "all" || which == "reference") {
    Target t;
    t.backend = Backend::kReference;
    t.label = "reference";
    t.rt = rts.get_cpu(1);
    targets.push_back(t);
  }
  if (which == "all" || which == "cpu") {
    std::vector<CpuIsa> isas;
    if (isa != CpuIsa::kAuto) isas.push_back(isa);
    else isas = supported_cpu_isas();
    for (CpuIsa i : isas) {
      Target t;
      t.backend = Backend::kCpu;
      t.isa = i;
      t.threads = threads > 0 ? threads : cpu_num_threads();
      t.label = std::string("cpu/") + cpu_isa_name(i);
      t.rt = rts.get_cpu(1);
      targets.push_back(t);
    }
  }
  if (which == "all" || which == "cuda") {
    DeviceRuntime* rt = rts.get_cuda();
    if (rt) {
      Target t;
      t.backend = Backend::kCuda;
      t.label = "cuda";
      t.rt = rt;
      targets.push_back(t);
    } else if (which == "cuda") {
      std::fprintf(stderr, "indexer-q verify: --backend cuda: not available: %s\n", rts.cuda_why.c_str());
      return 1;
    } else {
      notes = "cuda skipped: " + rts.cuda_why;
    }
  }

  // Directories expand to their *.safetensors files (sorted); other files not named
  // *.safetensors (e.g. a README matched by a shell glob) are skipped with a note.
  std::vector<std::string> files, skipped;
  for (const std::string& arg : a.positional()) {
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::string> found;
      for (const auto& e : std::filesystem::directory_iterator(arg, ec))
        if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      if (found.empty()) skipped.push_back(arg + " (a directory without *.safetensors files)");
      files.insert(files.end(), found.begin(), found.end());
    } else if (arg.size() < 12 || arg.compare(arg.size() - 12, 12, ".safetensors") != 0) {
      if (std::filesystem::exists(arg, ec)) skipped.push_back(arg);
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

  int exact_runs = 0, differ_runs = 0, failed_runs = 0, bad_files = 0;
  for (const std::string& path : files) {
    io::ConformanceCase c;
    std::string err;
    if (!io::load_case_file(path, &c, &err)) {
      std::printf("%s\n  UNREADABLE: %s\n", path.c_str(), err.c_str());
      ++bad_files;
      continue;
    }
    const std::int64_t rows = c.B * c.H;
    std::printf("%s  (B=%lld, H=%lld, %s, %s positions, max_pos %lld, weight_scale %.9g)\n", path.c_str(),
                (long long)c.B, (long long)c.H, dtype_name(c.dtype), dtype_name(c.pos_dtype),
                (long long)c.max_pos, double(c.weight_scale));
    for (const Target& t : targets) {
      std::string line = fmt("  %-14s", t.label.c_str());
      try {
        DeviceCase dc(*t.rt, c);
        io::Diff worst;
        std::vector<std::uint8_t> out8, worst8;
        std::vector<float> outw, worstw;
        Status s;
        for (unsigned char poison : {0xff, 0x00}) {
          dc.poison(poison);
          s = dc.run(t.options());
          if (!s.ok()) break;
          dc.download(&out8, &outw);
          io::Diff d = io::compare_outputs(out8.data(), outw.data(), c.q_fp8.data(), c.weights_out.data(), rows);
          if (d.fp8_bytes + d.weights > worst.fp8_bytes + worst.weights || worst8.empty()) {
            worst = d;
            worst8 = out8;
            worstw = outw;
          }
        }
        if (!s.ok()) {
          std::printf("%sFAILED: %s\n", line.c_str(), s.message().c_str());
          ++failed_runs;
          continue;
        }
        std::printf("%sfp8 bytes differ: %lld of %lld   weights_out differ: %lld of %lld   %s\n", line.c_str(),
                    (long long)worst.fp8_bytes, (long long)(rows * 128), (long long)worst.weights, (long long)rows,
                    worst.exact() ? "exact" : "DIFFER");
        if (!worst.exact()) {
          std::printf("    %s\n", diff_details(worst, worst8.data(), c.q_fp8.data(), worstw.data(),
                                                 c.weights_out.data()).c_str());
          ++differ_runs;
        } else {
          ++exact_runs;
        }
      } catch (const std::exception& e) {
        std::printf("%sFAILED: %s\n", line.c_str(), e.what());
        ++failed_runs;
      }
    }
  }
  const bool ok = !files.empty() && bad_files == 0 && differ_runs == 0 && failed_runs == 0;
  std::printf("summary: %zu file(s), %d unreadable; %d run(s): %d exact, %d differ, %d failed -> %s\n",
              files.size(), bad_files, exact_runs + differ_runs + failed_runs, exact_runs, differ_runs,
              failed_runs, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace cli
}  // namespace indexer_q
