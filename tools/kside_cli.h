// The key side (docs/KSIDE-SPEC.md) in the indexer-q commands: verify of key-side golden files, and
// 'run' / 'bench' with --recipe v4_k_fp8 | v4_k_fp4 (tools/cmd_kside.cpp).
#pragma once

#include <string>
#include <vector>

#include "cli.h"
#include "io/safetensors.h"

namespace indexer_q {
namespace cli {

// True when the command line's --recipe (NAME or NAME,NAME...) names a key-side recipe.
bool argv_names_kside_recipe(int argc, char** argv);
// "v4_k_fp8|v4_k_fp4" and a help paragraph on them.
std::string krecipe_names();
std::string kside_recipes_help();
// The key-side options of 'run' (bench false) or 'bench' as help text, for the query side's --help.
std::string kside_options_help(bool bench);

// verify: one key-side file (metadata "variant" v4_k_fp8 | v4_k_fp4) on every target; prints one
// line per target and counts the runs. Returns false (after printing why) if the file is not a
// consistent key-side case.
bool kside_verify_file(const std::string& path, const io::StFile& st, const std::vector<Target>& targets,
                       int* exact_runs, int* differ_runs, int* failed_runs);

int cmd_run_kside(int argc, char** argv);
int cmd_bench_kside(int argc, char** argv);

}  // namespace cli
}  // namespace indexer_q
