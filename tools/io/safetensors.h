// Reading (and writing) safetensors files and turning them into conformance cases.
// Used by the indexer-q CLI and by the tests. Host-only, no third-party dependency.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace io {

struct StTensor {
  std::string dtype;                 // safetensors name: "BF16", "F16", "F32", "F8_E4M3", "I32", "I64", ...
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;    // little-endian bytes, exactly prod(shape) * element size
};

struct StFile {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__" (string values only)
};

// Parses a whole safetensors file. Returns false and sets *error (a one-line reason naming
// what is wrong: truncated header, bad JSON, offsets out of range or overlapping, size not
// matching dtype x shape, ...) on any malformed input; never crashes on hostile bytes.
bool read_safetensors(const std::string& path, StFile* out, std::string* error);
bool parse_safetensors(const std::uint8_t* bytes, std::size_t size, StFile* out, std::string* error);

// Writes a safetensors file (tensors in name order, 8-byte aligned header). False + *error on I/O failure.
bool write_safetensors(const std::string& path, const StFile& file, std::string* error);

// Maps safetensors dtype names to the library's dtypes; false if not one of ours.
bool dtype_from_safetensors(const std::string& name, DType* out);
const char* dtype_to_safetensors(DType dt);

// One conformance case: the op's inputs and the expected outputs, checked for consistency
// (names present, dtypes allowed, shapes agreeing with each other, weight_scale / softmax_scale /
// head_scale numbers that pass the library's check_scalar: finite and > 0, and so in float32).
struct ConformanceCase {
  RecipeId recipe = RecipeId::kV4Fp8;  // metadata "variant" (absent: v4_fp8)
  std::int64_t B = 0, H = 0, max_pos = 0;
  DType dtype = DType::kBFloat16;     // q_input
  DType weight_dtype = DType::kBFloat16;  // weight (any float dtype, independent of q_input)
  DType pos_dtype = DType::kInt64;
  float weight_scale = 1.0f;          // metadata string -> double (strtod) -> float32 (vllm_*:
                                      // metadata "softmax_scale")
  float head_scale = 1.0f;            // vllm_* recipes: metadata "head_scale"
  std::vector<std::uint8_t> q_input, weight, freqs, positions;  // raw bytes, contiguous
  std::vector<std::uint8_t> q_out;   // expected codes: B*H*128 (q_fp8) or B*H*64 (q_fp4) bytes
  std::vector<std::uint8_t> q_sf;    // expected FP4 block scales: B*H*4 bytes (q_sf int32, LE); else empty
  std::vector<float> weights_out;    // expected, B*H floats

  std::int64_t out_bytes_per_row() const;  // 128 or 64

  // Host views of the inputs (valid while *this lives).
  TensorView q_input_view() const;
  TensorView weight_view() const;
  TensorView freqs_view() const;
  TensorView positions_view() const;
};

bool load_case(const StFile& file, ConformanceCase* out, std::string* error);
bool load_case_file(const std::string& path, ConformanceCase* out, std::string* error);

// The FNUZ case of an FN case (docs/RECIPES.md: same bytes except 0x80 -> 0x00, weights_out
// times 2; recipe <name> -> <name>_fnuz). False if the case's recipe has no FNUZ form.
bool derive_fnuz_case(const ConformanceCase& fn, ConformanceCase* out);

// Byte comparison of actual outputs against a case: counts differing code bytes, block-scale
// bytes (FP4) and weights_out floats (bit comparison, NaN bits included: docs/RECIPES.md "NaN").
struct Diff {
  std::int64_t q_bytes = 0;
  std::int64_t sf_bytes = 0;
  std::int64_t weights = 0;
  // The first few differing indices (up to kListed each): byte index into q_out (row = index /
  // out_bytes_per_row), byte index into q_sf (row = index / 4), row index into weights_out.
  static constexpr int kListed = 5;
  std::vector<std::int64_t> first_q, first_sf, first_weights;
  bool exact() const { return q_bytes == 0 && sf_bytes == 0 && weights == 0; }
};
// q_sf may be null for FP8 cases.
Diff compare_outputs(const ConformanceCase& expected, const std::uint8_t* q_out, const std::uint8_t* q_sf,
                     const float* weights_out);

}  // namespace io
}  // namespace indexer_q
