// A small, strict JSON reader (RFC 8259) for safetensors headers, plus string escaping
// for the writer. No third-party dependency. Hostile input gives an error, never a crash:
// nesting depth is limited, every read is bounds-checked, duplicate object keys are refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace indexer_q {
namespace io {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // kString: the decoded UTF-8 string; kNumber: the number exactly as written
  std::vector<JsonValue> items;                              // kArray
  std::vector<std::pair<std::string, JsonValue>> members;    // kObject, in file order

  bool is_object() const { return type == Type::kObject; }
  bool is_array() const { return type == Type::kArray; }
  bool is_string() const { return type == Type::kString; }
  bool is_number() const { return type == Type::kNumber; }
  // The member named `key` of an object, or nullptr.
  const JsonValue* find(const std::string& key) const;
  // A number written as a plain non-negative integer (digits only, no sign, fraction or
  // exponent) that fits in int64. False otherwise.
  bool as_nonneg_int(std::int64_t* out) const;
};

const char* json_type_name(JsonValue::Type t);

struct JsonParseOptions {
  int max_depth = 64;                 // arrays/objects nested deeper are refused
  bool allow_duplicate_keys = false;  // safetensors: a duplicate key is an error
};

// Parses exactly one JSON value from text[0, size), allowing surrounding whitespace only.
// On failure returns false and sets *error to "byte N: what was expected".
bool parse_json(const char* text, std::size_t size, JsonValue* out, std::string* error,
                const JsonParseOptions& options = JsonParseOptions{});

// Appends s to *out as a quoted JSON string (escapes quotes, backslashes and control bytes).
void append_json_string(const std::string& s, std::string* out);

}  // namespace io
}  // namespace indexer_q
