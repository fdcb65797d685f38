// Key-side golden files (docs/KSIDE-SPEC.md section 5) as host cases: the inputs, the positions and
// slots derived from SGLang's plan / out_loc / mode / compress_ratio (section 1), and the
// expected cache. Used by the indexer-q CLI and by the tests. Host-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "indexer_q/indexer_q.h"
#include "io/safetensors.h"

namespace indexer_q {
namespace io {

struct KsideCase {
  KRecipeId recipe = KRecipeId::kV4KFp8;  // metadata "variant"
  std::string mode;                       // "extend" | "decode"
  std::int64_t N = 0, max_pos = 0, page_size = 64, num_pages = 0, page_bytes = 0;
  std::int64_t compress_ratio = 4;
  DType dtype = DType::kFloat32;  // of input and weight
  float eps = 1e-6f;              // metadata eps_bits (else eps)
  std::uint8_t cache_fill = 0xA5;
  std::vector<std::uint8_t> input, weight;  // raw bytes, (N, 128) and (128,)
  std::vector<float> freqs;                 // (max_pos, 64)
  std::vector<std::int64_t> positions;      // (N,): derived, 0 for skipped tokens
  std::vector<std::int64_t> slots;          // (N,): derived, -1 = skipped
  std::vector<std::uint8_t> kvcache;        // expected (num_pages, page_bytes)

  TensorView input_view() const;
  TensorView weight_view() const;
  TensorView freqs_view() const;
  TensorView positions_view() const;
  TensorView slots_view() const;
  // A view of a caller's cache buffer of this case's shape (num_pages * page_bytes bytes).
  TensorView cache_view(std::uint8_t* cache) const;
  KStoreArgs args(std::uint8_t* cache) const;
};

// True if the file's metadata "variant" names a key-side recipe (v4_k_fp8, v4_k_fp4).
bool is_kside_file(const StFile& file);
// True for the MUFU.RSQ table file (metadata "variant" = "mufu_rsq_table", docs/KSIDE-SPEC.md section 5).
bool is_rsq_table_file(const StFile& file);
// Parses a key-side golden file; false + *error (naming the tensor or metadata key) when it is
// not one or is inconsistent (a plan row whose ragged_id is past out_loc included).
bool load_kside_case(const StFile& file, KsideCase* out, std::string* error);

// Positions and slots of N tokens from SGLang's plan convention (docs/KSIDE-SPEC.md section 1):
// plan (N, 16) bytes, out_loc (M,), mode "extend" | "decode", ratio > 0. Skipped tokens get slot
// -1 and position 0. False + *error for a ragged_id >= M (extend) or M != N (decode).
bool kside_slots_from_plan(const std::uint8_t* plan, std::int64_t N, const std::int64_t* out_loc, std::int64_t M,
                           const std::string& mode, std::int64_t ratio, std::vector<std::int64_t>* positions,
                           std::vector<std::int64_t>* slots, std::string* error);

}  // namespace io
}  // namespace indexer_q
