// indexer-q run: one call of an op on the best backend, checked byte for byte against the scalar
// reference, timed, and reported by the op (op.h; the query side's report adds the quantization
// error its recipe buys, the key side's the cache layout). One loop for every op; --key-recipe
// asks instead for the top-k overlap of a query recipe with a key recipe (overlap.cpp).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "op.h"
#include "overlap.h"

namespace indexer_q {
namespace cli {

int cmd_run(int argc, char** argv) {
  if (argv_asks_overlap(argc, argv)) return cmd_run_overlap(argc, argv);  // top-k overlap (overlap.cpp)
  Runtimes rts;  // before the ops: the op's run buffers live in its runtime's memory
  const std::vector<std::unique_ptr<CliOp>> ops = cli_ops();
  const std::size_t which = op_for_argv(ops, argc, argv);
  CliOp& op = *ops[which];
  Args a("run", op.options(Cmd::kRun), argc, argv);
  if (a.help()) {
    std::fputs(op_help(Cmd::kRun, a, ops, which).c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument '" + a.positional()[0] + "'");
  op.parse(Cmd::kRun, a);
  const int warmup = int(a.integer("warmup", op.default_warmup(Cmd::kRun), 0, 1000000));
  const int iters = int(a.integer("iters", op.default_iters(Cmd::kRun), 1, 1000000));
  const Target t = select_target(a, &rts);

  op.note_run_sizes();
  DeviceWork& w = op.run_work(t);
  const Options opts = t.options();
  w.poison();
  Status s = w.run(0, opts);
  if (!s.ok()) {
    std::fprintf(stderr, "indexer-q run: %s\n", s.message().c_str());
    return kExitRuntime;
  }
  RunResult r;
  r.check = w.check();
  if (!r.check.reference.ok()) {
    std::fprintf(stderr, "indexer-q run: reference: %s\n", r.check.reference.message().c_str());
    return kExitRuntime;
  }
  Status timed_status;
  r.iters = iters;
  r.us = t.rt->time_median_us(
      [&] {
        const Status st = w.run(0, opts);
        if (!st.ok()) timed_status = st;
      },
      warmup, iters);
  t.rt->synchronize();
  if (!timed_status.ok()) {
    std::fprintf(stderr, "indexer-q run: %s\n", timed_status.message().c_str());
    return kExitRuntime;
  }
  return op.run_report(a, t, r);
}

}  // namespace cli
}  // namespace indexer_q
