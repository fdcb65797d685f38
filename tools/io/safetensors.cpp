// safetensors reading/writing and conformance cases. See safetensors.h.
//
// File layout: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON (an object; may be
// padded with trailing spaces), then the data section. Each tensor entry is
// {"dtype": str, "shape": [int...], "data_offsets": [begin, end]} with offsets relative to the
// start of the data section. Like the reference implementation we require the tensors to tile
// the data section exactly: sorted by offset they are contiguous from 0 to its end, with no
// overlap and no gap.
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "io/json.h"

namespace indexer_q {
namespace io {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;  // same limit as the reference reader

// Element size of a safetensors dtype name, 0 if unknown.
std::size_t st_dtype_size(const std::string& name) {
  static const struct {
    const char* name;
    std::size_t size;
  } table[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
               {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
               {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8}};
  for (const auto& e : table)
    if (name == e.name) return e.size;
  return 0;
}

bool set_error(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// prod(shape) * elem, false on overflow of int64.
bool checked_nbytes(const std::vector<std::int64_t>& shape, std::size_t elem, std::int64_t* out) {
  std::int64_t n = std::int64_t(elem);
  for (std::int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > INT64_MAX / d) return false;
    n *= d;
  }
  *out = n;
  return true;
}

struct Entry {
  std::string name;
  std::int64_t begin = 0, end = 0;
};

// The 8-byte length field of a file of `size` bytes: the header length, checked against the
// file size and the limit.
bool check_header_length(const std::uint8_t* field, std::uint64_t size, std::uint64_t* n_out, std::string* error) {
  if (size < 8)
    return set_error(error, "truncated: the file has " + std::to_string(size) +
                                " bytes, fewer than the 8-byte header length field");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | field[i];
  if (n > size - 8)
    return set_error(error, "truncated or not a safetensors file: header length " + std::to_string(n) +
                                " exceeds the " + std::to_string(size - 8) + " bytes after the length field");
  if (n > kMaxHeaderBytes)
    return set_error(error, "header length " + std::to_string(n) + " exceeds the limit of " +
                                std::to_string(kMaxHeaderBytes) + " bytes");
  *n_out = n;
  return true;
}

// The JSON header (n bytes) against a data section of data_size bytes: fills out's metadata and
// tensors (dtype and shape; data left empty) and *entries (their offsets, sorted), after every
// check of the layout. Reads no data.
bool parse_header(const char* header, std::uint64_t n, std::int64_t data_size, StFile* out, std::vector<Entry>* entries_out,
                  std::string* error) {
  if (n < 2 || header[0] != '{')
    return set_error(error, "bad header: the JSON header must be an object starting with '{'");

  JsonValue root;
  std::string jerr;
  if (!parse_json(header, std::size_t(n), &root, &jerr))
    return set_error(error, "bad JSON header: " + jerr);
  if (!root.is_object()) return set_error(error, "bad header: the JSON header is not an object");

  std::vector<Entry>& entries = *entries_out;

  for (const auto& m : root.members) {
    const std::string& name = m.first;
    const JsonValue& v = m.second;
    if (name == "__metadata__") {
      if (!v.is_object())
        return set_error(error, std::string("bad header: __metadata__ must be an object, got ") +
                                    json_type_name(v.type));
      for (const auto& kv : v.members) {
        if (!kv.second.is_string())
          return set_error(error, "bad header: __metadata__[\"" + kv.first + "\"] must be a string, got " +
                                      json_type_name(kv.second.type));
        out->metadata[kv.first] = kv.second.text;
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object())
      return set_error(error, "bad header: " + where + " must be an object, got " + json_type_name(v.type));
    const JsonValue* dt = v.find("dtype");
    const JsonValue* sh = v.find("shape");
    const JsonValue* off = v.find("data_offsets");
    if (!dt || !sh || !off)
      return set_error(error, "bad header: " + where + " lacks \"" +
                                  (!dt ? "dtype" : !sh ? "shape" : "data_offsets") + "\"");
    for (const auto& kv : v.members)
      if (kv.first != "dtype" && kv.first != "shape" && kv.first != "data_offsets")
        return set_error(error, "bad header: " + where + " has an unexpected key \"" + kv.first + "\"");
    if (!dt->is_string())
      return set_error(error, "bad header: " + where + " dtype must be a string");
    const std::size_t elem = st_dtype_size(dt->text);
    if (elem == 0)
      return set_error(error, "bad header: " + where + " has unknown dtype \"" + dt->text + "\"");
    if (!sh->is_array())
      return set_error(error, "bad header: " + where + " shape must be an array of non-negative integers");
    StTensor t;
    t.dtype = dt->text;
    for (const JsonValue& d : sh->items) {
      std::int64_t x;
      if (!d.as_nonneg_int(&x))
        return set_error(error, "bad header: " + where + " shape must hold non-negative integers, got " +
                                    (d.is_number() ? d.text : std::string(json_type_name(d.type))));
      t.shape.push_back(x);
    }
    Entry e;
    e.name = name;
    if (!off->is_array() || off->items.size() != 2 || !off->items[0].as_nonneg_int(&e.begin) ||
        !off->items[1].as_nonneg_int(&e.end))
      return set_error(error, "bad header: " + where + " data_offsets must be [begin, end] (non-negative integers)");
    if (e.begin > e.end)
      return set_error(error, "bad header: " + where + " data_offsets [" + std::to_string(e.begin) + ", " +
                                  std::to_string(e.end) + "] have begin > end");
    if (e.end > data_size)
      return set_error(error, "truncated or bad offsets: " + where + " data_offsets [" + std::to_string(e.begin) +
                                  ", " + std::to_string(e.end) + "] run past the " + std::to_string(data_size) +
                                  "-byte data section");
    std::int64_t nbytes;
    if (!checked_nbytes(t.shape, elem, &nbytes) || nbytes != e.end - e.begin)
      return set_error(error, "size mismatch: " + where + " is " + t.dtype + " " + shape_text(t.shape) + " = " +
                                  (checked_nbytes(t.shape, elem, &nbytes) ? std::to_string(nbytes) : "overflowing") +
                                  " bytes, but data_offsets give " + std::to_string(e.end - e.begin));
    entries.push_back(e);
    out->tensors.emplace(name, std::move(t));
  }

  // The tensors must tile the data section: no overlap, no gap, nothing left over.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::int64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < at)
      return set_error(error, "bad offsets: tensor '" + e.name + "' [" + std::to_string(e.begin) + ", " +
                                  std::to_string(e.end) + ") overlaps tensor '" + (prev ? prev->name : "") + "'");
    if (e.begin > at)
      return set_error(error, "bad offsets: a gap of " + std::to_string(e.begin - at) +
                                  " unused bytes before tensor '" + e.name + "'");
    at = e.end;
    prev = &e;
  }
  if (at != data_size)
    return set_error(error, "bad offsets: the data section has " + std::to_string(data_size - at) +
                                " bytes not covered by any tensor");
  return true;
}

// Physical memory of this machine in bytes (0 if unknown).
std::uint64_t physical_memory() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return std::uint64_t(pages) * std::uint64_t(page);
#endif
  return 0;
}

// An open file, closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly `bytes` bytes at `offset`; false (errno set) on a short read or an error.
bool read_at(int fd, void* dst, std::uint64_t bytes, std::uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const std::size_t chunk = std::size_t(std::min<std::uint64_t>(bytes, 1u << 30));
    const ssize_t got = ::pread(fd, p, chunk, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = EIO;  // the file shrank under us
      return false;
    }
    p += got;
    bytes -= std::uint64_t(got);
    offset += std::uint64_t(got);
  }
  return true;
}

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

}  // namespace

bool parse_safetensors(const std::uint8_t* bytes, std::size_t size, StFile* out, std::string* error) {
  *out = StFile{};
  std::uint64_t n = 0;
  if (!check_header_length(bytes, size, &n, error)) return false;
  std::vector<Entry> entries;
  if (!parse_header(reinterpret_cast<const char*>(bytes + 8), n, std::int64_t(size - 8 - n), out, &entries, error))
    return false;
  const std::uint8_t* data = bytes + 8 + n;
  for (const Entry& e : entries) {
    StTensor& t = out->tensors[e.name];
    t.data.assign(data + e.begin, data + e.end);
  }
  return true;
}

// The length field, then the header, checked against the file's size, before any data is read
// or allocated; a data section larger than the machine's memory is refused by its size. Only a
// regular file is read: the file is opened without blocking (a FIFO would wait for a writer
// forever) and anything else is refused as what it is.
bool read_safetensors(const std::string& path, StFile* out, std::string* error) {
  *out = StFile{};
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) return set_error(error, path + ": cannot open: " + std::strerror(errno));
  struct stat sb;
  if (::fstat(f.fd, &sb) != 0) return set_error(error, path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(sb.st_mode)) return set_error(error, path + ": not a regular file (" + file_kind(sb.st_mode) + ")");
  const std::uint64_t size = std::uint64_t(sb.st_size);
  std::uint8_t field[8] = {};
  if (size >= 8 && !read_at(f.fd, field, 8, 0)) return set_error(error, path + ": cannot read: " + std::strerror(errno));
  std::uint64_t n = 0;
  std::string why;
  if (!check_header_length(field, size, &n, &why)) return set_error(error, path + ": " + why);
  std::vector<char> header(std::size_t(n) + 1, '\0');
  if (!read_at(f.fd, header.data(), n, 8)) return set_error(error, path + ": cannot read: " + std::strerror(errno));
  std::vector<Entry> entries;
  if (!parse_header(header.data(), n, std::int64_t(size - 8 - n), out, &entries, &why))
    return set_error(error, path + ": " + why);
  const std::uint64_t data_size = size - 8 - n, mem = physical_memory();
  if (mem != 0 && data_size > mem)
    return set_error(error, path + ": the data section is " + std::to_string(data_size) +
                                " bytes, more than this machine's memory (" + std::to_string(mem) + " bytes)");
  for (const Entry& e : entries) {
    StTensor& t = out->tensors[e.name];
    try {
      t.data.resize(std::size_t(e.end - e.begin));
    } catch (const std::bad_alloc&) {
      *out = StFile{};
      return set_error(error, path + ": cannot allocate " + std::to_string(e.end - e.begin) + " bytes for tensor '" +
                                  e.name + "'");
    }
    if (!read_at(f.fd, t.data.data(), std::uint64_t(e.end - e.begin), 8 + n + std::uint64_t(e.begin)))
      return set_error(error, path + ": cannot read tensor '" + e.name + "': " + std::strerror(errno));
  }
  return true;
}

bool write_safetensors(const std::string& path, const StFile& file, std::string* error) {
  std::string header = "{";
  bool first = true;
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool f2 = true;
    for (const auto& kv : file.metadata) {
      if (!f2) header += ",";
      f2 = false;
      append_json_string(kv.first, &header);
      header += ":";
      append_json_string(kv.second, &header);
    }
    header += "}";
    first = false;
  }
  std::int64_t at = 0;
  for (const auto& kv : file.tensors) {  // std::map: name order
    const StTensor& t = kv.second;
    if (kv.first == "__metadata__")
      return set_error(error, path + ": a tensor cannot be named __metadata__");
    const std::size_t elem = st_dtype_size(t.dtype);
    if (elem == 0) return set_error(error, path + ": tensor '" + kv.first + "' has unknown dtype \"" + t.dtype + "\"");
    std::int64_t nbytes;
    if (!checked_nbytes(t.shape, elem, &nbytes) || nbytes != std::int64_t(t.data.size()))
      return set_error(error, path + ": tensor '" + kv.first + "' holds " + std::to_string(t.data.size()) +
                                  " bytes, not " + t.dtype + " " + shape_text(t.shape));
    if (!first) header += ",";
    first = false;
    append_json_string(kv.first, &header);
    header += ":{\"dtype\":";
    append_json_string(t.dtype, &header);
    header += ",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + nbytes) + "]}";
    at += nbytes;
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return set_error(error, path + ": cannot create: " + std::strerror(errno));
  std::uint8_t len[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = std::uint8_t(n >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const auto& kv : file.tensors) {
    const auto& d = kv.second.data;
    if (ok && !d.empty()) ok = std::fwrite(d.data(), 1, d.size(), f) == d.size();
  }
  const int saved = errno;
  if (std::fclose(f) != 0) ok = false;
  if (!ok) return set_error(error, path + ": write failed: " + std::strerror(saved));
  return true;
}

bool dtype_from_safetensors(const std::string& name, DType* out) {
  static const struct {
    const char* name;
    DType dt;
  } table[] = {{"BF16", DType::kBFloat16}, {"F16", DType::kFloat16}, {"F32", DType::kFloat32},
               {"F8_E4M3", DType::kFloat8E4M3}, {"I32", DType::kInt32}, {"I64", DType::kInt64},
               {"U8", DType::kUInt8}, {"I8", DType::kInt8}};
  for (const auto& e : table) {
    if (name == e.name) {
      *out = e.dt;
      return true;
    }
  }
  return false;
}

const char* dtype_to_safetensors(DType dt) {
  switch (dt) {
    case DType::kBFloat16: return "BF16";
    case DType::kFloat16: return "F16";
    case DType::kFloat32: return "F32";
    case DType::kFloat8E4M3: return "F8_E4M3";
    case DType::kUInt8: return "U8";
    case DType::kInt8: return "I8";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
    case DType::kFloat8E4M3FNUZ: return "?";  // no safetensors name: such codes are stored as U8
  }
  return "?";
}

// ---------------------------------------------------------------------------------------
// conformance cases
// ---------------------------------------------------------------------------------------
TensorView ConformanceCase::q_input_view() const {
  return TensorView::contiguous(q_input.data(), dtype, {B, H, 128});
}
// A recipe without weights (or without RoPE) takes empty views for them.
TensorView ConformanceCase::weight_view() const {
  if (!recipe_has_weights(indexer_q::recipe(recipe))) return TensorView{};
  return TensorView::contiguous(weight.data(), weight_dtype, {B, H});
}
TensorView ConformanceCase::freqs_view() const {
  if (!recipe_has_rope(indexer_q::recipe(recipe))) return TensorView{};
  return TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64});
}
TensorView ConformanceCase::positions_view() const {
  if (!recipe_has_rope(indexer_q::recipe(recipe))) return TensorView{};
  return TensorView::contiguous(positions.data(), pos_dtype, {B});
}

namespace {

bool get_tensor(const StFile& file, const char* name, const StTensor** out, std::string* error) {
  auto it = file.tensors.find(name);
  if (it == file.tensors.end()) return set_error(error, std::string("missing tensor '") + name + "'");
  const StTensor& t = it->second;
  std::int64_t nbytes;
  const std::size_t elem = st_dtype_size(t.dtype);
  if (elem == 0 || !checked_nbytes(t.shape, elem, &nbytes) || nbytes != std::int64_t(t.data.size()))
    return set_error(error, std::string("size mismatch: tensor '") + name + "' holds " +
                                std::to_string(t.data.size()) + " bytes, not " + t.dtype + " " + shape_text(t.shape));
  *out = &t;
  return true;
}

bool expect_shape(const char* name, const StTensor& t, const std::vector<std::int64_t>& want,
                  const char* want_text, std::string* error) {
  if (t.shape != want)
    return set_error(error, std::string("inconsistent shapes: tensor '") + name + "' has shape " +
                                shape_text(t.shape) + ", expected " + want_text + " = " + shape_text(want));
  return true;
}

bool expect_dtype(const char* name, const StTensor& t, std::initializer_list<const char*> allowed,
                  std::string* error) {
  std::string list;
  for (const char* a : allowed) {
    if (t.dtype == a) return true;
    list += (list.empty() ? "" : " or ") + std::string(a);
  }
  return set_error(error, std::string("tensor '") + name + "' has dtype " + t.dtype + ", expected " + list);
}

}  // namespace

bool load_case(const StFile& file, ConformanceCase* out, std::string* error) {
  *out = ConformanceCase{};
  // The form: metadata "variant" (absent = the main op, v4_fp8).
  RecipeId recipe_id = RecipeId::kV4Fp8;
  const auto var = file.metadata.find("variant");
  if (var != file.metadata.end() && !parse_recipe(var->second, &recipe_id)) {
    std::string names;
    for (RecipeId r : all_recipes()) names += (names.empty() ? "" : ", ") + std::string(recipe_name(r));
    return set_error(error, "metadata \"variant\" = \"" + var->second + "\" is not a recipe of this library (" +
                                names + ")");
  }
  const Recipe& rec = recipe(recipe_id);
  const bool fp4 = rec.format == OutFormat::kE2M1;
  const bool has_rope = recipe_has_rope(rec), has_weights = recipe_has_weights(rec);
  const char* out_name = fp4 ? "q_fp4" : "q_fp8";
  const StTensor *q, *w = nullptr, *fr = nullptr, *pos = nullptr, *q8, *wo = nullptr, *sf = nullptr;
  if (!get_tensor(file, "q_input", &q, error) || (has_weights && !get_tensor(file, "weight", &w, error)) ||
      (has_rope && !get_tensor(file, "freqs", &fr, error)) ||
      (has_rope && !get_tensor(file, "positions", &pos, error)) || !get_tensor(file, out_name, &q8, error) ||
      (has_weights && !get_tensor(file, "weights_out", &wo, error)) ||
      (fp4 && !get_tensor(file, "q_sf", &sf, error)) || (rec.scale_out && !get_tensor(file, "q_scale", &sf, error)))
    return false;

  if (!expect_dtype("q_input", *q, {"BF16", "F16", "F32"}, error)) return false;
  if (q->shape.size() != 3 || q->shape[2] != 128 || q->shape[1] < 1)
    return set_error(error, "tensor 'q_input' has shape " + shape_text(q->shape) + ", expected [B, H, 128] with H >= 1");
  const std::int64_t B = q->shape[0], H = q->shape[1];
  ConformanceCase c;
  c.recipe = recipe_id;
  c.B = B;
  c.H = H;
  dtype_from_safetensors(q->dtype, &c.dtype);

  if (has_weights) {
    if (!expect_dtype("weight", *w, {"BF16", "F16", "F32"}, error)) return false;
    dtype_from_safetensors(w->dtype, &c.weight_dtype);
    if (!expect_shape("weight", *w, {B, H}, "[B, H]", error)) return false;
  }

  if (has_rope) {
    if (!expect_dtype("freqs", *fr, {"F32"}, error)) return false;
    if (fr->shape.size() != 2 || fr->shape[1] != 64)
      return set_error(error, "tensor 'freqs' has shape " + shape_text(fr->shape) + ", expected [max_pos, 64]");
    c.max_pos = fr->shape[0];

    if (!expect_dtype("positions", *pos, {"I32", "I64"}, error)) return false;
    if (!expect_shape("positions", *pos, {B}, "[B]", error)) return false;
    dtype_from_safetensors(pos->dtype, &c.pos_dtype);
  }

  // The codes may be stored per (token, head), or with the rows flattened as engines allocate
  // them ((B*H, 64) codes and (B*H,) scales for SGLang's FP4 forms): the same bytes.
  if (fp4) {
    if (!expect_dtype(out_name, *q8, {"U8", "I8"}, error)) return false;
    if (q8->shape != std::vector<std::int64_t>{B * H, 64} &&
        !expect_shape(out_name, *q8, {B, H, 64}, "[B, H, 64] or [B*H, 64]", error))
      return false;
    if (!expect_dtype("q_sf", *sf, {"I32"}, error)) return false;
    if (sf->shape != std::vector<std::int64_t>{B * H} && !expect_shape("q_sf", *sf, {B, H}, "[B, H] or [B*H]", error))
      return false;
  } else {
    // FNUZ recipes have no files of their own (derived from the FN files); a raw-code file may
    // store the codes as U8.
    if (!expect_dtype(out_name, *q8, {"F8_E4M3", "U8"}, error)) return false;
    if (!expect_shape(out_name, *q8, {B, H, 128}, "[B, H, 128]", error)) return false;
  }
  if (rec.scale_out) {  // the FP8 row scales, as floats (compared as their bytes)
    if (!expect_dtype("q_scale", *sf, {"F32"}, error)) return false;
    if (sf->shape.size() == 2 ? !expect_shape("q_scale", *sf, {B, H}, "[B, H, 1] or [B, H]", error)
                              : !expect_shape("q_scale", *sf, {B, H, 1}, "[B, H, 1] or [B, H]", error))
      return false;
  }
  if (has_weights) {
    if (!expect_dtype("weights_out", *wo, {"F32"}, error)) return false;
    if (wo->shape.size() == 2 ? !expect_shape("weights_out", *wo, {B, H}, "[B, H, 1] or [B, H]", error)
                              : !expect_shape("weights_out", *wo, {B, H, 1}, "[B, H, 1] or [B, H]", error))
      return false;
  }

  // Positions in range (the op would refuse them; here it is the file that is wrong).
  for (std::int64_t b = 0; has_rope && b < B; ++b) {
    std::int64_t p;
    if (c.pos_dtype == DType::kInt32) {
      std::int32_t v;
      std::memcpy(&v, pos->data.data() + 4 * b, 4);
      p = v;
    } else {
      std::memcpy(&p, pos->data.data() + 8 * b, 8);
    }
    if (p < 0 || p >= c.max_pos)
      return set_error(error, "positions[" + std::to_string(b) + "] = " + std::to_string(p) +
                                  " is outside [0, max_pos) = [0, " + std::to_string(c.max_pos) + ")");
  }

  // The weights_out factors, from the first of the metadata keys that the file has: weight_scale
  // (SGLang's forms; vLLM's CuTe form: its one combined factor scale_f32); for the two-factor
  // folds (vLLM's Triton forms) softmax_scale and head_scale, weight_scale being informational
  // there. The *_f32 keys are the float32 values the engine's kernel received. Each value is
  // checked as the double it is by the library's one scalar check (check_scalar: finite, > 0,
  // and so in float32), whose message is given as it is: "metadata "softmax_scale" = "0":
  // indexer_q: weight_scale: expected a finite number > 0, got 0".
  auto metadata_float = [&](std::initializer_list<const char*> keys, ScalarArg arg, float* v) -> bool {
    auto it = file.metadata.end();
    const char* key = *keys.begin();
    for (const char* k : keys) {
      it = file.metadata.find(k);
      key = k;
      if (it != file.metadata.end()) break;
    }
    if (it == file.metadata.end()) return set_error(error, std::string("metadata lacks \"") + *keys.begin() + "\"");
    const std::string& ws = it->second;
    errno = 0;
    char* end = nullptr;
    const double d = std::strtod(ws.c_str(), &end);
    if (ws.empty() || end == ws.c_str() || *end != '\0' || std::isspace(static_cast<unsigned char>(ws[0])))
      return set_error(error, std::string("metadata \"") + key + "\" = \"" + ws + "\" is not a number");
    if (errno == ERANGE && std::fabs(d) > 1.0)
      return set_error(error, std::string("metadata \"") + key + "\" = \"" + ws + "\" is out of range");
    const Status sc = check_scalar(arg, d, v);
    if (!sc.ok()) return set_error(error, std::string("metadata \"") + key + "\" = \"" + ws + "\": " + sc.message());
    return true;
  };
  if (recipe_uses_head_scale(rec)) {
    if (!metadata_float({"softmax_scale", "softmax_scale_f32", "softmax_scale_arg"}, ScalarArg::kWeightScale,
                        &c.weight_scale) ||
        !metadata_float({"head_scale", "head_scale_f32", "head_scale_arg"}, ScalarArg::kHeadScale, &c.head_scale))
      return false;
  } else if (has_weights && !metadata_float({"weight_scale", "weight_scale_f32", "scale_f32"}, ScalarArg::kWeightScale,
                                            &c.weight_scale)) {
    return false;
  }

  c.q_input = q->data;
  if (has_weights) c.weight = w->data;
  if (has_rope) c.freqs = fr->data;
  if (has_rope) c.positions = pos->data;
  c.q_out = q8->data;
  if (fp4 || rec.scale_out) c.q_sf = sf->data;
  if (has_weights) {
    c.weights_out.resize(std::size_t(B * H));
    if (!wo->data.empty()) std::memcpy(c.weights_out.data(), wo->data.data(), wo->data.size());
  }
  *out = std::move(c);
  return true;
}

bool load_case_file(const std::string& path, ConformanceCase* out, std::string* error) {
  StFile f;
  if (!read_safetensors(path, &f, error)) return false;
  std::string why;
  if (!load_case(f, out, &why)) return set_error(error, path + ": inconsistent conformance case: " + why);
  return true;
}

std::int64_t ConformanceCase::out_bytes_per_row() const {
  return indexer_q::recipe(recipe).format == OutFormat::kE2M1 ? 64 : 128;
}

bool derive_fnuz_case(const ConformanceCase& fn, ConformanceCase* out) {
  if (recipe(fn.recipe).format != OutFormat::kE4M3FN) return false;
  RecipeId fnuz;
  if (!parse_recipe(std::string(recipe_name(fn.recipe)) + "_fnuz", &fnuz)) return false;
  *out = fn;
  out->recipe = fnuz;
  for (std::uint8_t& c : out->q_out)
    if (c == 0x80u) c = 0x00u;
  for (float& w : out->weights_out) w = w * 2.0f;
  return true;
}

Diff compare_outputs(const ConformanceCase& expected, const std::uint8_t* q_out, const std::uint8_t* q_sf,
                     const float* weights_out) {
  Diff d;
  const std::int64_t rows = expected.B * expected.H;
  const std::int64_t nq = rows * expected.out_bytes_per_row();
  for (std::int64_t i = 0; i < nq; ++i) {
    if (q_out[i] != expected.q_out[std::size_t(i)]) {
      if (d.q_bytes < Diff::kListed) d.first_q.push_back(i);
      ++d.q_bytes;
    }
  }
  const std::int64_t nsf = std::int64_t(expected.q_sf.size());
  for (std::int64_t i = 0; i < nsf; ++i) {
    if (q_sf == nullptr || q_sf[i] != expected.q_sf[std::size_t(i)]) {
      if (d.sf_bytes < Diff::kListed) d.first_sf.push_back(i);
      ++d.sf_bytes;
    }
  }
  const std::int64_t nw = std::int64_t(expected.weights_out.size());  // rows, or 0 without weights
  for (std::int64_t r = 0; r < nw; ++r) {
    std::uint32_t a, b;
    std::memcpy(&a, weights_out + r, 4);
    std::memcpy(&b, expected.weights_out.data() + r, 4);
    if (a != b) {  // NaN too: one NaN encoding per output (docs/RECIPES.md "NaN")
      if (d.weights < Diff::kListed) d.first_weights.push_back(r);
      ++d.weights;
    }
  }
  return d;
}

}  // namespace io
}  // namespace indexer_q
