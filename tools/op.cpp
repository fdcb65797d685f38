// The ops of 'run' and 'bench' (op.h): the list, which one a command line asks for, the help.
#include "op.h"

namespace indexer_q {
namespace cli {

std::vector<std::unique_ptr<CliOp>> cli_ops() {
  std::vector<std::unique_ptr<CliOp>> v;
  v.push_back(make_kside_op());
  v.push_back(make_query_op());  // the default: last
  return v;
}

std::size_t op_for_argv(const std::vector<std::unique_ptr<CliOp>>& ops, int argc, char** argv) {
  for (std::size_t i = 0; i + 1 < ops.size(); ++i)
    if (ops[i]->claims(argc, argv)) return i;
  return ops.size() - 1;
}

std::string op_help(Cmd c, const Args& a, const std::vector<std::unique_ptr<CliOp>>& ops, std::size_t op) {
  const CliOp& o = *ops[op];
  std::string epilog = o.recipes_help();
  if (op + 1 == ops.size())  // the default op: every other op's recipes and options too
    for (std::size_t i = 0; i + 1 < ops.size(); ++i)
      epilog += ops[i]->recipes_help() + "\n" + ops[i]->options_heading(c) + Args::options_text(ops[i]->options(c));
  return a.help_text(o.usage(c), o.description(c), epilog);
}

}  // namespace cli
}  // namespace indexer_q
