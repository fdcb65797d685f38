// indexer-q run --key-recipe K: what the indexer is for, measured (docs/RECALL.md). The top-k
// overlap of the scores sum_h w[h] * relu(q[h] . k[t]) computed from the library's quantized query
// and key outputs against float64 scores of the unquantized inputs, over context lengths, with a
// warning when the query and key recipes do not transform alike (one side rotated by the Hadamard
// and the other not). Uses the library's public API only (tools/overlap.cpp).
#pragma once

namespace indexer_q {
namespace cli {

// True when the command line of 'run' asks for the overlap (it has --key-recipe).
bool argv_asks_overlap(int argc, char** argv);
// 'run' with --key-recipe: the overlap table. Exit status 0, 1 on a library error, 2 for a bad
// command line (a mismatched pair is a warning, not an error).
int cmd_run_overlap(int argc, char** argv);

}  // namespace cli
}  // namespace indexer_q
