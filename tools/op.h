// The ops of the indexer-q commands 'run' and 'bench': one command loop each (cmd_run.cpp,
// cmd_bench.cpp) over this interface, and one implementation per op (the query side in
// op_query.cpp, the key side in op_kside.cpp). A next op adds an implementation and one line in
// cli_ops() (op.cpp); no command changes. ('verify' is generic over the ops through the
// one conformance loader, tools/io/op_case.h.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"

namespace indexer_q {
namespace cli {

enum class Cmd { kRun, kBench };

// One workload of an op in a runtime's memory: `sets()` buffer sets (bench rotates among them;
// the first owns what the others share), set 0 checked against the scalar reference.
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  virtual std::size_t sets() const = 0;
  // One call on buffer set `set`, enqueued on the runtime's stream.
  virtual Status run(std::size_t set, const Options& o) = 0;
  // Fills set 0's outputs with a known pattern before the checked call.
  virtual void poison() = 0;
  // Compares set 0's outputs with the scalar reference's (computed on first use).
  struct Check {
    Status reference;      // not ok: the reference failed (nothing compared)
    bool exact = false;
    std::string mismatch;  // when not exact: one line naming what differs (bench's stderr)
  };
  virtual Check check() = 0;
};

// One case of a bench sweep.
struct BenchPoint {
  std::string recipe;        // the recipe column
  std::int64_t tokens = 0, heads = 1;
  DType dtype = DType::kFloat32;
  std::string where;         // "v4_fp8, tokens 1, heads 64": the case in stderr lines
  std::int64_t bytes = 0;    // bytes moved per call (gbps; the copy moves as many)
  std::string sizes;         // the options that set its size, for note_sizes
  double host_bytes = 0.0;   // note_sizes's estimate per (2 x sets + 2)
  std::size_t index = 0;     // the op's own index of the case
};

// A timed bench case, for the op's table row.
struct BenchRow {
  std::int64_t sets = 1;
  const char* pdl = "-";     // "on", "off", "-" (cpu)
  BenchTiming timing;
  const char* exact = "-";   // "yes", "NO", "-" (--no-check)
};

// What 'run' measured, for the op's report.
struct RunResult {
  DeviceWork::Check check;
  double us = 0.0;  // median time of one call
  int iters = 0;
};

class CliOp {
 public:
  virtual ~CliOp() = default;
  // True when the command line asks for this op (the key side: a key-side --recipe). The last
  // op of cli_ops() is the default and claims every command line.
  virtual bool claims(int argc, char** argv) const = 0;

  // --help: options, usage line, description, the op's recipes as help text, and the heading of
  // its options when another op's help lists them (the default op's help lists every other op's).
  virtual std::vector<OptionSpec> options(Cmd c) const = 0;
  virtual std::string usage(Cmd c) const = 0;
  virtual std::string description(Cmd c) const = 0;
  virtual std::string recipes_help() const = 0;
  virtual std::string options_heading(Cmd c) const = 0;

  // Reads the op's own options into the op (its workload: recipes, sizes, dtypes, seed, ...);
  // the command reads --warmup and --iters (defaults from the op), --backend, --isa, --threads,
  // and bench's --rotate-mb, --format, --no-check and --pdl (the PDL on/off sweep, only for an op
  // that lists --pdl in options(kBench); else each case runs once with the library's default).
  // UsageError for a bad value.
  virtual void parse(Cmd c, const Args& a) = 0;
  virtual int default_warmup(Cmd c) const = 0;
  virtual int default_iters(Cmd c) const = 0;

  // bench: the sweep, in order; a case's buffers; the table's header lines and rows (the csv rows
  // are the command's, from BenchPoint).
  virtual std::vector<BenchPoint> bench_points() const = 0;
  virtual std::unique_ptr<DeviceWork> bench_work(DeviceRuntime& rt, const BenchPoint& p, std::int64_t nsets) = 0;
  virtual void print_bench_header(const Target& t, int warmup, int iters) const = 0;
  virtual void print_bench_row(const Target& t, const BenchPoint& p, const BenchRow& r) const = 0;

  // run: note_sizes for the call, the call's buffers (one set; owned by the op, kept for the
  // report), the report after the checked and timed calls; returns the exit status.
  virtual void note_run_sizes() const = 0;
  virtual DeviceWork& run_work(const Target& t) = 0;
  virtual int run_report(const Args& a, const Target& t, const RunResult& r) = 0;
};

// Every op, the default (the query side) last; a fresh set per call (ops keep parsed options).
std::vector<std::unique_ptr<CliOp>> cli_ops();
std::unique_ptr<CliOp> make_query_op();
std::unique_ptr<CliOp> make_kside_op();

// The help text of command c for op `op` of `ops` (the default op's lists the others' options).
std::string op_help(Cmd c, const Args& a, const std::vector<std::unique_ptr<CliOp>>& ops, std::size_t op);
// The index in ops of the op the command line asks for.
std::size_t op_for_argv(const std::vector<std::unique_ptr<CliOp>>& ops, int argc, char** argv);

}  // namespace cli
}  // namespace indexer_q
