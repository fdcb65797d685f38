// The key side (docs/KSIDE-SPEC.md) in the indexer-q commands: verify of key-side golden files, and
// the key side's op of 'run' / 'bench' (--recipe v4_k_fp8 | v4_k_fp4; make_kside_op in op.h);
// tools/op_kside.cpp.
#pragma once

#include <string>
#include <vector>

#include "cli.h"
#include "io/kside_case.h"

namespace indexer_q {
namespace cli {

// True when the command line's --recipe (NAME or NAME,NAME...) names a key-side recipe.
bool argv_names_kside_recipe(int argc, char** argv);
// "v4_k_fp8|v4_k_fp4" and a help paragraph on them.
std::string krecipe_names();
std::string kside_recipes_help();

// verify, the key side (cmd_verify.cpp runs every op's cases): the summary of a case for its file
// line, and one run on a target (the cache filled with the file's cache_fill, then its
// complement; every byte compared).
std::string kside_case_summary(const io::KsideCase& k);
VerifyRun kside_verify_run(const Target& t, const io::KsideCase& k);

}  // namespace cli
}  // namespace indexer_q
