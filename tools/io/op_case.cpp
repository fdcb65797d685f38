// The one conformance loader (see op_case.h).
#include "io/op_case.h"

#include <algorithm>
#include <filesystem>
#include <utility>

namespace indexer_q {
namespace io {

bool load_op_cases(const StFile& file, const std::string& name, LoadedFile* out) {
  *out = LoadedFile{};
  const auto v = file.metadata.find("variant");
  if (v != file.metadata.end()) out->variant = v->second;
  const auto fail = [&](LoadFailure why, std::string error) {
    out->failure = why;
    out->error = std::move(error);
    out->cases.clear();
    return false;
  };
  if (is_rsq_table_file(file)) {
    out->op = CaseOp::kRsqTable;
    return true;
  }
  if (is_kside_file(file)) {
    out->op = CaseOp::kKey;
    OpCase c;
    c.op = CaseOp::kKey;
    c.name = name;
    std::string err;
    if (!load_kside_case(file, &c.k, &err)) return fail(LoadFailure::kInconsistent, err);
    out->cases.push_back(std::move(c));
    return true;
  }
  out->op = CaseOp::kQuery;
  const auto var = file.metadata.find("variant");
  RecipeId rid;
  if (var != file.metadata.end() && !parse_recipe(var->second, &rid)) {
    std::string names;
    for (RecipeId r : all_recipes()) names += (names.empty() ? "" : ", ") + std::string(recipe_name(r));
    return fail(LoadFailure::kUnknownVariant,
                "metadata \"variant\" = \"" + var->second + "\" is not a recipe of this library (" + names + ")");
  }
  OpCase c;
  c.name = name;
  std::string err;
  if (!load_case(file, &c.q, &err)) return fail(LoadFailure::kInconsistent, err);
  OpCase d;
  if (derive_fnuz_case(c.q, &d.q)) {
    d.name = name + " (derived " + recipe_name(d.q.recipe) + ")";
    d.derived = true;
  }
  out->cases.push_back(std::move(c));
  if (d.derived) out->cases.push_back(std::move(d));
  return true;
}

bool load_op_cases_file(const std::string& path, LoadedFile* out, StFile* raw) {
  StFile local;
  StFile& f = raw ? *raw : local;
  std::string err;
  if (!read_safetensors(path, &f, &err)) {
    *out = LoadedFile{};
    out->failure = LoadFailure::kUnreadable;
    out->error = err;
    return false;
  }
  return load_op_cases(f, path, out);
}

std::vector<std::string> conformance_files(const std::string& dir, const std::vector<std::string>& skip) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec)) {
      if (std::find(skip.begin(), skip.end(), it->path().filename().string()) != skip.end()) it.disable_recursion_pending();
      continue;
    }
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace io
}  // namespace indexer_q
