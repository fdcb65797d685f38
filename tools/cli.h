// Shared pieces of the indexer-q commands: option parsing, backend selection, formatting.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "device.h"
#include "indexer_q/indexer_q.h"
#include "io/safetensors.h"

namespace indexer_q {
namespace cli {

// The exit-status table as help text (main.cpp and every command's --help).
extern const char* const kExitStatusHelp;

// Exit statuses, the same for every command (main.cpp's --help, docs/API.md "CLI"). When
// several apply, the highest wins: a runtime failure over bad input over a mismatch.
enum ExitStatus : int {
  kExitOk = 0,         // everything ran and every checked byte is exact
  kExitMismatch = 1,   // it ran, and bytes differ from the reference or from a file's expected ones
  kExitUsage = 2,      // a bad command line: unknown command or option, a malformed or out-of-range
                       // value, options that do not go together; nothing was run
  kExitBadInput = 3,   // an input file that cannot be used: missing, unreadable, not a regular file,
                       // malformed, inconsistent, of an unknown recipe (verify)
  kExitRuntime = 4,    // a runtime failure: a backend not available or failing, a library error on
                       // a call the CLI built, memory that cannot be had, a file that cannot be written
};

// A bad command line: printed on stderr, exit code kExitUsage.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Memory for sizes set on the command line. Before allocating for them a command calls
// note_sizes with `what`, the options and values that set the size (e.g. "--tokens 4194304 x
// --heads 4096"), and `bytes`, its estimate of the memory they take: it throws std::runtime_error
// naming both when that exceeds this machine's physical memory, and main() turns a later
// std::bad_alloc into the same message (out_of_memory_message), so no size that does not fit
// ends as a bare "std::bad_alloc". Both are exit status kExitRuntime.
void note_sizes(const std::string& what, double bytes);
std::string out_of_memory_message();

struct OptionSpec {
  const char* name;     // without the leading "--"
  const char* metavar;  // nullptr for a flag without a value
  std::string help;     // may contain '\n' for extra lines
};

// Parses "--name value", "--name=value", flags and positional arguments against a fixed list
// of options. Unknown options, missing values and malformed values throw UsageError naming the
// option and what was expected. "--help"/"-h" is always known.
class Args {
 public:
  Args(std::string command, std::vector<OptionSpec> specs, int argc, char** argv);

  bool help() const { return help_; }
  bool has(const std::string& name) const;
  bool flag(const std::string& name) const { return has(name); }
  std::string str(const std::string& name, const std::string& dflt) const;
  // One of `choices`, else UsageError.
  std::string choice(const std::string& name, const std::string& dflt, const std::vector<std::string>& choices) const;
  std::int64_t integer(const std::string& name, std::int64_t dflt, std::int64_t lo, std::int64_t hi) const;
  // Comma-separated integers, each in [lo, hi].
  std::vector<std::int64_t> int_list(const std::string& name, const std::vector<std::int64_t>& dflt,
                                     std::int64_t lo, std::int64_t hi) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // The option lines of help_text for `specs` (also for another command form's options).
  static std::string options_text(const std::vector<OptionSpec>& specs);
  // Help text: usage line, description, then every option with its help.
  std::string help_text(const std::string& usage, const std::string& description,
                        const std::string& epilog = "") const;

 private:
  const OptionSpec* find(const std::string& name) const;
  std::string command_;
  std::vector<OptionSpec> specs_;
  std::vector<std::pair<std::string, std::string>> values_;  // last one wins
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Common option values.
DType parse_dtype_option(const Args& a, const char* name, const char* dflt);      // bf16|fp16|fp32
DType parse_pos_dtype_option(const Args& a, const char* name, const char* dflt);  // int32|int64
// --isa: one of the library's ISA names (isa_names()), and it must be supported here (else
// UsageError).
CpuIsa parse_isa_option(const Args& a);

// Names from the library's own lists (never retyped in tools/), joined with '|'.
std::string backend_names();  // "auto|reference|cpu|cuda"
std::string isa_names();      // "auto|scalar|avx2|avx512"
std::string recipe_names();   // all_recipes(), in list order (the query side's)
// "query-side recipes: a|b|...; key-side recipes: v4_k_fp8|v4_k_fp4" (every recipe of the library).
std::string all_recipe_names();
// The names as a list (for Args::choice).
std::vector<std::string> backend_name_list();

// --recipe NAME (default v4_fp8); UsageError naming the recipes for an unknown one.
RecipeId parse_recipe_option(const Args& a);
// --recipe NAME[,NAME...] | all (default v4_fp8).
std::vector<RecipeId> parse_recipe_list_option(const Args& a);
// One line describing a recipe from the library's column list ("column value; ..."; set flags by
// name, unset ones left out), with each value's meaning when with_meanings.
std::string recipe_summary(RecipeId id, bool with_meanings = false);
// Help text listing every recipe with its summary.
std::string recipes_help();
// True for the recipes whose weights_out has two factors (softmax_scale, head_scale: vLLM's forms).
bool two_factor_fold(RecipeId id);
// The weights_out factors of a case as text: "weight_scale X" or "softmax_scale X, head_scale Y".
std::string weight_factors_text(const io::ConformanceCase& c);

// A backend to run on, with the runtime that owns its memory.
struct Target {
  Backend backend = Backend::kCpu;
  CpuIsa isa = CpuIsa::kAuto;  // resolved (never kAuto) for kCpu
  int threads = 1;             // resolved thread count for kCpu / kReference; 0 for GPUs
  std::string label;           // "reference", "cpu/avx2", "cuda"
  DeviceRuntime* rt = nullptr;
  Options options() const;
};

// The runtimes a command uses, created on first use.
struct Runtimes {
  std::unique_ptr<DeviceRuntime> cpu, cuda;
  std::string cuda_why;  // why make_cuda_runtime returned nullptr
  bool cuda_tried = false;
  DeviceRuntime* get_cpu(int copy_threads);
  DeviceRuntime* get_cuda();  // nullptr if unavailable (see cuda_why)
};

// --backend auto|reference|cpu|cuda (auto: cuda when usable, else cpu), --isa, --threads.
// Throws UsageError for bad values and std::runtime_error when the backend is unavailable.
Target select_target(const Args& a, Runtimes* rts);

// Resolves the ISA the CPU backend will use for `requested` (kAuto -> active_cpu_isa).
// Throws std::runtime_error with the library's message if that fails.
CpuIsa resolve_isa(CpuIsa requested);

// Formatting helpers.
std::string fmt(const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
std::string human_bytes(double bytes);  // "69.3 MB" (decimal units)
// verify, every op: one case of a conformance file run on one target (the query side in
// cmd_verify.cpp, the key side in op_kside.cpp), outputs poisoned twice, the worse kept.
struct VerifyRun {
  Status status;        // not ok: the run failed (nothing compared)
  std::string counts;   // "codes differ: 0 of 73728   weights_out differ: 0 of 576"
  bool exact = false;
  std::string details;  // when not exact: the first differing bytes
};

// "first code diffs: [row r, byte i] got 0x.. want 0x..; ..." for the indices listed in d
// (codes, FP4 block scales, weights_out), against the expected outputs of `want`.
std::string diff_details(const io::Diff& d, const io::ConformanceCase& want, const std::uint8_t* got_q,
                         const std::uint8_t* got_sf, const float* got_w);

// 'bench', every op (op.h), defined in cmd_bench.cpp.
// The csv header line (with its '\n').
extern const char* const kBenchCsvHeader;
// The isa and threads columns of a case on target t ('-' on a GPU).
std::string bench_isa_column(const Target& t);
std::string bench_threads_column(const Target& t);
// How many buffer sets a case rotates among: on the CPU with rotate_mb > 0, enough sets of
// `bytes_per_call` bytes to span rotate_mb MiB (1 to 1024); else 1.
std::int64_t bench_buffer_sets(const Target& t, std::int64_t rotate_mb, std::int64_t bytes_per_call);
// A case's timing beside a plain copy of the same traffic (half of `bytes` copied, so bytes read
// + written are equal) on the same runtime.
struct BenchTiming {
  Status failed;                    // the last error of a timed call; then the copy is not timed
  double us = 0.0, copy_us = 0.0;   // median per call
  double gbps = 0.0, copy_gbps = 0.0;
};
// Times run_set(k) (one call on buffer set k), rotating k over nsets sets, then the copy.
BenchTiming bench_time_case(DeviceRuntime& rt, std::size_t nsets, const std::function<Status(std::size_t)>& run_set,
                            std::int64_t bytes, int warmup, int iters);

// Commands. Each returns the process exit code.
int cmd_run(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_bench(int argc, char** argv);

}  // namespace cli
}  // namespace indexer_q
