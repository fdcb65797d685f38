// Strict recursive-descent JSON reader with a depth limit. See json.h.
#include "io/json.h"

#include <cstdio>

namespace indexer_q {
namespace io {

const JsonValue* JsonValue::find(const std::string& key) const {
  if (type != Type::kObject) return nullptr;
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

bool JsonValue::as_nonneg_int(std::int64_t* out) const {
  if (type != Type::kNumber || text.empty()) return false;
  std::int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const int d = c - '0';
    if (v > (INT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

const char* json_type_name(JsonValue::Type t) {
  switch (t) {
    case JsonValue::Type::kNull: return "null";
    case JsonValue::Type::kBool: return "a boolean";
    case JsonValue::Type::kNumber: return "a number";
    case JsonValue::Type::kString: return "a string";
    case JsonValue::Type::kArray: return "an array";
    case JsonValue::Type::kObject: return "an object";
  }
  return "?";
}

namespace {

class Parser {
 public:
  Parser(const char* s, std::size_t n, const JsonParseOptions& o) : s_(s), n_(n), opt_(o) {}

  bool parse(JsonValue* out, std::string* error) {
    skip_ws();
    if (!value(out, 0)) return fail_out(error);
    skip_ws();
    if (i_ != n_) {
      err_ = "unexpected data after the JSON value";
      return fail_out(error);
    }
    return true;
  }

 private:
  bool fail_out(std::string* error) {
    if (error) *error = "byte " + std::to_string(i_) + ": " + err_;
    return false;
  }
  bool fail(const std::string& what) {
    if (err_.empty()) err_ = what;
    return false;
  }
  static std::string show(char c) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02x", u);
    return buf;
  }
  std::string found() const { return i_ < n_ ? "found " + show(s_[i_]) : "found end of input"; }

  void skip_ws() {
    while (i_ < n_ && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  bool literal(const char* word) {
    std::size_t k = 0;
    for (; word[k]; ++k)
      if (i_ + k >= n_ || s_[i_ + k] != word[k]) return fail(std::string("invalid literal (expected '") + word + "')");
    i_ += k;
    return true;
  }

  bool value(JsonValue* v, int depth) {
    if (i_ >= n_) return fail("expected a value, found end of input");
    const char c = s_[i_];
    switch (c) {
      case '{': return object(v, depth + 1);
      case '[': return array(v, depth + 1);
      case '"':
        v->type = JsonValue::Type::kString;
        return string(&v->text);
      case 't':
        v->type = JsonValue::Type::kBool;
        v->boolean = true;
        return literal("true");
      case 'f':
        v->type = JsonValue::Type::kBool;
        v->boolean = false;
        return literal("false");
      case 'n':
        v->type = JsonValue::Type::kNull;
        return literal("null");
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number(v);
        return fail("expected a value, " + found());
    }
  }

  bool digits() {
    const std::size_t start = i_;
    while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }

  bool number(JsonValue* v) {
    const std::size_t start = i_;
    if (s_[i_] == '-') ++i_;
    if (i_ < n_ && s_[i_] == '0') {
      ++i_;
    } else if (!digits()) {
      return fail("invalid number: expected a digit, " + found());
    }
    if (i_ < n_ && s_[i_] == '.') {
      ++i_;
      if (!digits()) return fail("invalid number: expected a digit after '.', " + found());
    }
    if (i_ < n_ && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < n_ && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return fail("invalid number: expected a digit in the exponent, " + found());
    }
    v->type = JsonValue::Type::kNumber;
    v->text.assign(s_ + start, i_ - start);
    return true;
  }

  static void put_utf8(std::uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(char(cp));
    } else if (cp < 0x800) {
      out->push_back(char(0xc0 | (cp >> 6)));
      out->push_back(char(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(char(0xe0 | (cp >> 12)));
      out->push_back(char(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(char(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(char(0xf0 | (cp >> 18)));
      out->push_back(char(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(char(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(char(0x80 | (cp & 0x3f)));
    }
  }

  bool hex4(std::uint32_t* out) {
    if (i_ + 4 > n_) return fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_ + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= std::uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= std::uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= std::uint32_t(c - 'A' + 10);
      else return fail("invalid hex digit in \\u escape");
    }
    i_ += 4;
    *out = v;
    return true;
  }

  // One UTF-8 encoded character starting at s_[i_] (a lead byte >= 0x80): validated and copied.
  bool utf8_char(std::string* out) {
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    int len;
    std::uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return fail("invalid UTF-8 byte " + show(s_[i_]) + " in string");
    if (i_ + len > n_) return fail("truncated UTF-8 sequence in string");
    for (int k = 1; k < len; ++k) {
      const unsigned char t = static_cast<unsigned char>(s_[i_ + k]);
      if ((t & 0xc0) != 0x80) return fail("invalid UTF-8 continuation byte in string");
      cp = (cp << 6) | (t & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return fail("invalid UTF-8 sequence in string");
    out->append(s_ + i_, std::size_t(len));
    i_ += std::size_t(len);
    return true;
  }

  bool string(std::string* out) {
    ++i_;  // opening quote
    out->clear();
    while (true) {
      if (i_ >= n_) return fail("unterminated string");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character " + show(c) + " inside a string");
      if (static_cast<unsigned char>(c) >= 0x80) {
        if (!utf8_char(out)) return false;
        continue;
      }
      if (c != '\\') {
        out->push_back(c);
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= n_) return fail("unterminated escape in string");
      const char e = s_[i_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          std::uint32_t cp;
          if (!hex4(&cp)) return false;
          if (cp >= 0xdc00 && cp <= 0xdfff) return fail("unpaired low surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            std::uint32_t lo;
            if (i_ + 2 > n_ || s_[i_] != '\\' || s_[i_ + 1] != 'u')
              return fail("unpaired high surrogate in \\u escape");
            i_ += 2;
            if (!hex4(&lo)) return false;
            if (lo < 0xdc00 || lo > 0xdfff) return fail("invalid low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          put_utf8(cp, out);
          break;
        }
        default: return fail("invalid escape '\\" + std::string(1, e) + "' in string");
      }
    }
  }

  bool array(JsonValue* v, int depth) {
    if (depth > opt_.max_depth) return fail("nesting deeper than " + std::to_string(opt_.max_depth) + " levels");
    v->type = JsonValue::Type::kArray;
    ++i_;
    skip_ws();
    if (i_ < n_ && s_[i_] == ']') {
      ++i_;
      return true;
    }
    while (true) {
      v->items.emplace_back();
      skip_ws();
      if (!value(&v->items.back(), depth)) return false;
      skip_ws();
      if (i_ >= n_) return fail("unterminated array");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == ']') {
        ++i_;
        return true;
      }
      return fail("expected ',' or ']' in array, " + found());
    }
  }

  bool object(JsonValue* v, int depth) {
    if (depth > opt_.max_depth) return fail("nesting deeper than " + std::to_string(opt_.max_depth) + " levels");
    v->type = JsonValue::Type::kObject;
    ++i_;
    skip_ws();
    if (i_ < n_ && s_[i_] == '}') {
      ++i_;
      return true;
    }
    while (true) {
      skip_ws();
      if (i_ >= n_ || s_[i_] != '"') return fail("expected a string key in object, " + found());
      std::string key;
      const std::size_t key_at = i_;
      if (!string(&key)) return false;
      if (!opt_.allow_duplicate_keys && v->find(key)) {
        i_ = key_at;
        return fail("duplicate key \"" + key + "\"");
      }
      skip_ws();
      if (i_ >= n_ || s_[i_] != ':') return fail("expected ':' after object key, " + found());
      ++i_;
      skip_ws();
      v->members.emplace_back(std::move(key), JsonValue{});
      if (!value(&v->members.back().second, depth)) return false;
      skip_ws();
      if (i_ >= n_) return fail("unterminated object");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == '}') {
        ++i_;
        return true;
      }
      return fail("expected ',' or '}' in object, " + found());
    }
  }

  const char* s_;
  std::size_t n_;
  JsonParseOptions opt_;
  std::size_t i_ = 0;
  std::string err_;
};

}  // namespace

bool parse_json(const char* text, std::size_t size, JsonValue* out, std::string* error,
                const JsonParseOptions& options) {
  *out = JsonValue{};
  Parser p(text, size, options);
  return p.parse(out, error);
}

void append_json_string(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"') out->append("\\\"");
    else if (c == '\\') out->append("\\\\");
    else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out->append(buf);
    } else out->push_back(c);
  }
  out->push_back('"');
}

}  // namespace io
}  // namespace indexer_q
