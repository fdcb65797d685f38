// The one conformance loader: a conformance or golden safetensors file read into the case of the
// op it is for (the query side's ConformanceCase, the key side's KsideCase), plus the cases the
// library derives from it (the FNUZ twin of an FP8 e4m3fn query file). Used by the tests
// (tests/test_golden.cpp, tests/test_kside_golden.cpp) and by 'indexer-q verify'. Host-only.
//
// The file's metadata "variant" picks the op: a key-side recipe (kside_recipes.inc) -> the key
// side; "mufu_rsq_table" -> the key side's MUFU.RSQ table (not an op case); a query recipe
// (recipes.inc) or no variant (v4_fp8) -> the query side. A new op adds its kind here and one
// branch in load_op_cases().
#pragma once

#include <string>
#include <vector>

#include "io/kside_case.h"
#include "io/safetensors.h"

namespace indexer_q {
namespace io {

enum class CaseOp {
  kQuery,     // OpArgs (include/indexer_q/recipes.inc)
  kKey,       // KStoreArgs (include/indexer_q/kside_recipes.inc)
  kRsqTable,  // the MUFU.RSQ table of the key side's host model: data, not an op case
};

struct OpCase {
  CaseOp op = CaseOp::kQuery;
  std::string name;      // the file's path, plus " (derived <recipe>)" for a derived case
  bool derived = false;  // made from the file's case (docs/RECIPES.md), not stored in it
  ConformanceCase q;     // op == kQuery
  KsideCase k;           // op == kKey
};

// Why a file gave no case.
enum class LoadFailure {
  kNone,
  kUnreadable,      // not a safetensors file (read_safetensors's error)
  kUnknownVariant,  // metadata "variant" names no recipe of this library
  kInconsistent,    // a case of its op whose tensors or metadata do not agree
};

struct LoadedFile {
  CaseOp op = CaseOp::kQuery;  // the op the file is for (also on kInconsistent)
  std::string variant;         // its metadata "variant" ("" when it has none)
  std::vector<OpCase> cases;   // the file's case first, then the derived ones
  LoadFailure failure = LoadFailure::kNone;
  std::string error;           // the loader's one-line reason (without the path)
};

// Reads a parsed file into its cases; false (out->failure, out->error set) when it gives none.
// A kRsqTable file loads without cases.
bool load_op_cases(const StFile& file, const std::string& name, LoadedFile* out);
// The same from a path; *raw (if not null) gets the parsed file (the tests' diagnostics).
bool load_op_cases_file(const std::string& path, LoadedFile* out, StFile* raw = nullptr);

// Every *.safetensors file under dir (recursively), sorted; directories named in `skip` (by
// their name) are not entered.
std::vector<std::string> conformance_files(const std::string& dir, const std::vector<std::string>& skip = {});

}  // namespace io
}  // namespace indexer_q
