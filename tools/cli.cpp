// Option parsing and small shared helpers of the indexer-q commands.
#include "cli.h"
#include "kside_cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <unistd.h>

namespace indexer_q {
namespace cli {

Args::Args(std::string command, std::vector<OptionSpec> specs, int argc, char** argv)
    : command_(std::move(command)), specs_(std::move(specs)) {
  bool only_positional = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (only_positional || a.size() < 2 || a[0] != '-') {
      positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.compare(0, 2, "--") != 0)
      throw UsageError("unknown option '" + a + "' (options are spelled --name; see --help)");
    std::string name = a.substr(2), value;
    bool has_value = false;
    const std::size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const OptionSpec* spec = find(name);
    if (!spec) throw UsageError("unknown option '--" + name + "' (see 'indexer-q " + command_ + " --help')");
    if (spec->metavar) {
      if (!has_value) {
        if (i + 1 >= argc) throw UsageError("option --" + name + " expects a value (" + spec->metavar + ")");
        value = argv[++i];
      }
    } else if (has_value) {
      throw UsageError("option --" + name + " is a flag and takes no value");
    }
    values_.emplace_back(name, value);
  }
}

const OptionSpec* Args::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (name == s.name) return &s;
  return nullptr;
}

bool Args::has(const std::string& name) const {
  for (const auto& kv : values_)
    if (kv.first == name) return true;
  return false;
}

std::string Args::str(const std::string& name, const std::string& dflt) const {
  std::string v = dflt;
  for (const auto& kv : values_)
    if (kv.first == name) v = kv.second;
  return v;
}

std::string Args::choice(const std::string& name, const std::string& dflt,
                         const std::vector<std::string>& choices) const {
  const std::string v = str(name, dflt);
  std::string list;
  for (const auto& c : choices) {
    if (v == c) return v;
    list += (list.empty() ? "" : "|") + c;
  }
  throw UsageError("option --" + name + ": expected one of " + list + ", got '" + v + "'");
}

namespace {
bool parse_int(const std::string& s, std::int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || s[0] == ' ') return false;
  *out = v;
  return true;
}
std::string range_text(std::int64_t lo, std::int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}
}  // namespace

std::int64_t Args::integer(const std::string& name, std::int64_t dflt, std::int64_t lo, std::int64_t hi) const {
  if (!has(name)) return dflt;
  const std::string s = str(name, "");
  std::int64_t v;
  if (!parse_int(s, &v) || v < lo || v > hi)
    throw UsageError("option --" + name + ": expected an integer in " + range_text(lo, hi) + ", got '" + s + "'");
  return v;
}

std::vector<std::int64_t> Args::int_list(const std::string& name, const std::vector<std::int64_t>& dflt,
                                         std::int64_t lo, std::int64_t hi) const {
  if (!has(name)) return dflt;
  const std::string s = str(name, "");
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = s.find(',', at);
    const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    std::int64_t v;
    if (!parse_int(item, &v) || v < lo || v > hi)
      throw UsageError("option --" + name + ": expected a comma-separated list of integers in " +
                       range_text(lo, hi) + ", got '" + s + "'");
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

std::string Args::help_text(const std::string& usage, const std::string& description,
                            const std::string& epilog) const {
  std::string out = "usage: " + usage + "\n\n" + description + "\n\noptions:\n" + options_text(specs_);
  out += "  -h, --help            this text\n";
  if (!epilog.empty()) out += "\n" + epilog + "\n";
  if (out.compare(out.size() - 2, 2, "\n\n") != 0) out += "\n";
  out += kExitStatusHelp;
  return out;
}

std::string Args::options_text(const std::vector<OptionSpec>& specs) {
  std::string out;
  for (const auto& s : specs) {
    std::string left = std::string("  --") + s.name + (s.metavar ? std::string(" ") + s.metavar : "");
    if (left.size() < 24) left.append(24 - left.size(), ' ');
    else left += "\n" + std::string(24, ' ');
    std::string help = s.help, indented;
    for (char c : help) {
      indented.push_back(c);
      if (c == '\n') indented.append(24, ' ');
    }
    out += left + indented + "\n";
  }
  return out;
}

const char* const kExitStatusHelp =
    "Exit status (every command): 0 success; 1 a mismatch (bytes differ from the reference or from a\n"
    "file's expected ones); 2 a bad command line (nothing run); 3 bad input (a file missing, unreadable,\n"
    "not a regular file, malformed, inconsistent or of an unknown recipe); 4 a runtime failure (a\n"
    "backend unavailable or failing, a library error, memory that cannot be had, a file that cannot be\n"
    "written). When several apply: 4 over 3 over 1.\n";

DType parse_dtype_option(const Args& a, const char* name, const char* dflt) {
  const std::string v = a.choice(name, dflt, {"bf16", "fp16", "fp32"});
  return v == "bf16" ? DType::kBFloat16 : v == "fp16" ? DType::kFloat16 : DType::kFloat32;
}

DType parse_pos_dtype_option(const Args& a, const char* name, const char* dflt) {
  const std::string v = a.choice(name, dflt, {"int32", "int64"});
  return v == "int32" ? DType::kInt32 : DType::kInt64;
}

namespace {
std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}
}  // namespace

// The enumerators of Backend and CpuIsa are consecutive; the library names each and answers
// "unknown" past the last one.
std::vector<std::string> backend_name_list() {
  std::vector<std::string> v;
  for (int i = 0;; ++i) {
    const std::string n = backend_name(Backend(i));
    if (n == "unknown") break;
    v.push_back(n);
  }
  return v;
}
std::string backend_names() { return join(backend_name_list(), "|"); }

std::string isa_names() {
  std::vector<std::string> v;
  for (int i = int(CpuIsa::kAuto);; ++i) {
    const std::string n = cpu_isa_name(CpuIsa(i));
    if (n == "unknown") break;
    v.push_back(n);
  }
  return join(v, "|");
}

std::string recipe_names() {
  std::vector<std::string> v;
  for (RecipeId r : all_recipes()) v.push_back(recipe_name(r));
  return join(v, "|");
}

std::string all_recipe_names() {
  return "query-side recipes: " + recipe_names() + "; key-side recipes: " + krecipe_names();
}

namespace {
RecipeId recipe_or_throw(const std::string& name) {
  RecipeId r;
  if (!parse_recipe(name, &r))
    throw UsageError("option --recipe: unknown recipe '" + name + "' (" + all_recipe_names() +
                     "; the two sides are not mixed in one command)");
  return r;
}
}  // namespace

RecipeId parse_recipe_option(const Args& a) {
  return recipe_or_throw(a.str("recipe", recipe_name(RecipeId::kV4Fp8)));
}

std::vector<RecipeId> parse_recipe_list_option(const Args& a) {
  const std::string s = a.str("recipe", recipe_name(RecipeId::kV4Fp8));
  if (s == "all") return all_recipes();
  std::vector<RecipeId> out;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = s.find(',', at);
    const RecipeId r = recipe_or_throw(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// One line per recipe from the library's column list: "column value" pairs, each value with
// its meaning for the columns that are not plain flags (recipe_columns.inc), so a new column or
// value shows here without an edit.
std::string recipe_summary(RecipeId id, bool with_meanings) {
  std::string s;
  for (int i = 0; i < recipe_column_count(); ++i) {
    const std::string v = recipe_column_value(id, i);
    const char* doc = recipe_column_value_doc(id, i);
    if (v == "false") continue;  // an unset flag says nothing
    if (!s.empty()) s += "; ";
    s += std::string(recipe_column_name(i));
    if (v != "true") s += " " + v + (with_meanings && doc && *doc ? std::string(" (") + doc + ")" : std::string());
  }
  return s;
}

bool two_factor_fold(RecipeId id) { return recipe_uses_head_scale(recipe(id)); }

std::string weight_factors_text(const io::ConformanceCase& c) {
  if (!recipe_has_weights(recipe(c.recipe))) return "none (the recipe has no weights)";
  if (two_factor_fold(c.recipe))
    return fmt("softmax_scale %.9g, head_scale %.9g", double(c.weight_scale), double(c.head_scale));
  return fmt("weight_scale %.9g", double(c.weight_scale));
}

namespace {
// text wrapped at ~100 columns, continuation lines indented by `indent`
std::string wrap(const std::string& text, std::size_t first, std::size_t indent) {
  std::string out, cur;
  std::size_t at = 0, col = first;
  while (at < text.size()) {
    std::size_t next = text.find(' ', at);
    if (next == std::string::npos) next = text.size();
    const std::string word = text.substr(at, next - at);
    if (!cur.empty() && col + cur.size() + 1 + word.size() > 100) {
      out += cur + "\n" + std::string(indent, ' ');
      cur.clear();
      col = indent;
    }
    cur += (cur.empty() ? "" : " ") + word;
    at = next + 1;
  }
  return out + cur;
}
}  // namespace

std::string recipes_help() {
  std::string out = "recipes (the forms of the op; contracts: docs/SPEC.md, docs/RECIPES.md):\n";
  for (RecipeId id : all_recipes()) {
    std::string name = recipe_name(id);
    if (id == RecipeId::kV4Fp8) name += " (default)";
    std::string line = "  " + name;
    if (line.size() < 24) line.append(24 - line.size(), ' ');
    else line += "\n" + std::string(24, ' ');
    out += line + wrap(recipe_summary(id), 24, 24) + "\n";
  }
  // What each column value the recipes use means (recipe_columns.inc), once.
  out += "column values:\n";
  for (int i = 0; i < recipe_column_count(); ++i) {
    std::vector<std::string> seen;
    for (RecipeId id : all_recipes()) {
      const std::string v = recipe_column_value(id, i), doc = recipe_column_value_doc(id, i);
      if (v == "false" || doc.empty() || std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
      seen.push_back(v);
      std::string head = "  " + std::string(recipe_column_name(i)) + (v == "true" ? "" : " " + v);
      if (head.size() < 24) head.append(24 - head.size(), ' ');
      else head += "\n" + std::string(24, ' ');
      out += head + wrap(doc, 24, 24) + "\n";
    }
  }
  return out;
}

CpuIsa parse_isa_option(const Args& a) {
  const std::string v = a.str("isa", cpu_isa_name(CpuIsa::kAuto));
  CpuIsa isa;
  if (!parse_cpu_isa(v, &isa)) throw UsageError("option --isa: expected " + isa_names() + ", got '" + v + "'");
  if (isa != CpuIsa::kAuto && !cpu_isa_supported(isa)) {
    std::string list;
    for (CpuIsa s : supported_cpu_isas()) list += (list.empty() ? "" : ", ") + std::string(cpu_isa_name(s));
    throw UsageError("option --isa: '" + v + "' is not supported by this build or processor (supported: " + list + ")");
  }
  return isa;
}

CpuIsa resolve_isa(CpuIsa requested) {
  if (requested != CpuIsa::kAuto) return requested;
  CpuIsa isa = CpuIsa::kScalar;
  const Status s = active_cpu_isa(&isa);
  if (!s.ok()) throw std::runtime_error(s.message());
  return isa;
}

DeviceRuntime* Runtimes::get_cpu(int copy_threads) {
  if (!cpu) cpu = make_cpu_runtime(copy_threads);
  return cpu.get();
}

DeviceRuntime* Runtimes::get_cuda() {
  if (!cuda_tried) {
    cuda_tried = true;
    if (backend_available(Backend::kCuda)) {
      cuda = make_cuda_runtime(&cuda_why);
    } else {
      std::string why;
      cuda = nullptr;
      make_cuda_runtime(&why);  // a build without CUDA explains itself
      cuda_why = why.empty() ? "no usable CUDA device (backend_available(cuda) is false)" : why;
    }
  }
  return cuda.get();
}

Target select_target(const Args& a, Runtimes* rts) {
  Backend b = Backend::kAuto;
  parse_backend(a.choice("backend", backend_name(Backend::kAuto), backend_name_list()), &b);
  const bool explicit_isa = a.has("isa"), explicit_threads = a.has("threads");
  const CpuIsa isa = parse_isa_option(a);
  const int threads = int(a.integer("threads", 0, 1, 4096));
  // auto: cuda when a device is usable, unless --isa / --threads ask for the cpu backend.
  if (b == Backend::kAuto) b = (!explicit_isa && !explicit_threads && rts->get_cuda()) ? Backend::kCuda : Backend::kCpu;
  Target t;
  t.backend = b;
  switch (b) {
    case Backend::kCuda: {
      if (explicit_isa || explicit_threads)
        throw UsageError(std::string("option --") + (explicit_isa ? "isa" : "threads") +
                         " applies to the cpu backend only, not to --backend " + backend_name(b));
      DeviceRuntime* rt = rts->get_cuda();
      if (!rt) throw std::runtime_error(std::string("--backend ") + backend_name(b) + ": not available: " + rts->cuda_why);
      t.threads = 0;
      t.label = backend_name(b);
      t.rt = rt;
      return t;
    }
    case Backend::kReference:
      if (explicit_isa || explicit_threads)
        throw UsageError(std::string("option --") + (explicit_isa ? "isa" : "threads") +
                         " applies to the cpu backend only; the reference is scalar and single-threaded");
      t.threads = 1;
      t.label = backend_name(b);
      t.rt = rts->get_cpu(1);
      return t;
    default:
      t.backend = Backend::kCpu;
      t.isa = resolve_isa(isa);
      t.threads = threads > 0 ? threads : cpu_num_threads();
      t.label = std::string(backend_name(Backend::kCpu)) + "/" + cpu_isa_name(t.isa);
      t.rt = rts->get_cpu(t.threads);
      return t;
  }
}

Options Target::options() const {
  Options o;
  o.backend = backend;
  if (backend == Backend::kCpu) {
    o.cpu_isa = isa;
    o.num_threads = threads;
  }
  if (rt) o.stream = rt->stream();
  return o;
}

std::string fmt(const char* format, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, format);
  const int n = std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  if (n < 0) return "";
  if (std::size_t(n) < sizeof buf) return std::string(buf, std::size_t(n));
  std::string s(std::size_t(n) + 1, '\0');
  va_start(ap, format);
  std::vsnprintf(&s[0], s.size(), format, ap);
  va_end(ap);
  s.resize(std::size_t(n));
  return s;
}

std::string human_bytes(double b) {
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.2f MB", b / 1e6);
  if (b >= 1e3) return fmt("%.1f kB", b / 1e3);
  return fmt("%.0f B", b);
}

namespace {
double physical_memory_bytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return double(pages) * double(page);
#endif
  return 0.0;
}
}  // namespace

namespace {
std::string g_size_what;  // the last note_sizes call (the commands are single-threaded)
double g_size_bytes = 0.0;

std::string size_message(const std::string& what, double bytes) {
  const double mem = physical_memory_bytes();
  return what + ": needs about " + human_bytes(bytes) + " (" + fmt("%.0f", bytes) +
         " bytes) of memory, which cannot be allocated" +
         (mem > 0 ? " (this machine has " + human_bytes(mem) + ")" : std::string()) + "; use smaller values";
}
}  // namespace

void note_sizes(const std::string& what, double bytes) {
  g_size_what = what;
  g_size_bytes = bytes;
  const double mem = physical_memory_bytes();
  if (mem > 0 && bytes > mem) throw std::runtime_error(size_message(what, bytes));
}

std::string out_of_memory_message() {
  return g_size_what.empty() ? std::string("out of memory") : size_message(g_size_what, g_size_bytes);
}

}  // namespace cli
}  // namespace indexer_q
