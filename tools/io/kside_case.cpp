// Key-side golden files as host cases (see kside_case.h).
#include "io/kside_case.h"

#include <cstdlib>
#include <cstring>

namespace indexer_q {
namespace io {
namespace {

bool get_tensor(const StFile& f, const char* name, const char* dtype, std::size_t rank, const StTensor** out,
                std::string* error) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) {
    *error = std::string("tensor '") + name + "' is missing";
    return false;
  }
  if (it->second.dtype != dtype || it->second.shape.size() != rank) {
    *error = std::string("tensor '") + name + "': expected dtype " + dtype + " and rank " + std::to_string(rank);
    return false;
  }
  *out = &it->second;
  return true;
}

bool get_int(const StFile& f, const char* key, std::int64_t* out, std::string* error) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end()) {
    *error = std::string("metadata '") + key + "' is missing";
    return false;
  }
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 0);
  if (end == it->second.c_str() || *end != '\0') {
    *error = std::string("metadata '") + key + "' = '" + it->second + "' is not an integer";
    return false;
  }
  *out = v;
  return true;
}

template <class T>
T read_le(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

bool kside_slots_from_plan(const std::uint8_t* plan, std::int64_t N, const std::int64_t* out_loc, std::int64_t M,
                           const std::string& mode, std::int64_t ratio, std::vector<std::int64_t>* positions,
                           std::vector<std::int64_t>* slots, std::string* error) {
  if (ratio <= 0) {
    *error = "compress_ratio must be > 0, got " + std::to_string(ratio);
    return false;
  }
  const bool extend = mode == "extend";
  if (!extend && mode != "decode") {
    *error = "mode must be 'extend' or 'decode', got '" + mode + "'";
    return false;
  }
  if (extend ? M < N : M != N) {
    *error = "out_loc has " + std::to_string(M) + " entries; " + (extend ? "extend needs >= N = " : "decode needs N = ") +
             std::to_string(N);
    return false;
  }
  positions->assign(std::size_t(N), 0);
  slots->assign(std::size_t(N), -1);
  for (std::int64_t t = 0; t < N; ++t) {
    const std::uint8_t* row = plan + 16 * t;
    const std::uint32_t seq_len = read_le<std::uint32_t>(row);
    std::int64_t slot;
    if (extend) {
      if (seq_len == 0xffffffffu) continue;  // invalid entry: skipped
      const std::uint16_t ragged = read_le<std::uint16_t>(row + 4);
      if (ragged >= M) {
        *error = "plan[" + std::to_string(t) + "]: ragged_id " + std::to_string(ragged) + " is past out_loc (" +
                 std::to_string(M) + " entries)";
        return false;
      }
      slot = out_loc[ragged];
    } else {
      if (seq_len % std::uint64_t(ratio) != 0) continue;  // not a compression boundary: skipped
      slot = out_loc[t];
    }
    (*slots)[std::size_t(t)] = slot;
    (*positions)[std::size_t(t)] = std::int64_t(std::int32_t(seq_len - std::uint32_t(ratio)));
  }
  return true;
}

bool is_kside_file(const StFile& file) {
  auto it = file.metadata.find("variant");
  KRecipeId r;
  return it != file.metadata.end() && parse_krecipe(it->second, &r);
}

bool is_rsq_table_file(const StFile& file) {
  auto it = file.metadata.find("variant");
  return it != file.metadata.end() && it->second == "mufu_rsq_table";
}

bool load_kside_case(const StFile& f, KsideCase* out, std::string* error) {
  KsideCase k;
  auto v = f.metadata.find("variant");
  if (v == f.metadata.end() || !parse_krecipe(v->second, &k.recipe)) {
    *error = "metadata 'variant' is not a key-side recipe (v4_k_fp8, v4_k_fp4)";
    return false;
  }
  auto mode = f.metadata.find("mode");
  if (mode == f.metadata.end()) {
    *error = "metadata 'mode' is missing";
    return false;
  }
  k.mode = mode->second;
  if (!get_int(f, "compress_ratio", &k.compress_ratio, error) || !get_int(f, "page_size", &k.page_size, error))
    return false;
  std::int64_t fill = 0xA5;
  if (f.metadata.count("cache_fill") && !get_int(f, "cache_fill", &fill, error)) return false;
  k.cache_fill = std::uint8_t(fill);
  std::int64_t eps_bits = 0;
  if (f.metadata.count("eps_bits")) {
    if (!get_int(f, "eps_bits", &eps_bits, error)) return false;
    const std::uint32_t u = std::uint32_t(eps_bits);
    std::memcpy(&k.eps, &u, 4);
  } else if (f.metadata.count("eps")) {
    k.eps = float(std::strtod(f.metadata.at("eps").c_str(), nullptr));
  }

  const StTensor *input, *weight, *freqs, *plan, *out_loc, *cache;
  // input and weight: F32 in SGLang's production path and in the golden files; BF16 / F16 taken too.
  auto in = f.tensors.find("input");
  const std::string in_dt = in == f.tensors.end() ? "F32" : in->second.dtype;
  if (in_dt != "F32" && in_dt != "BF16" && in_dt != "F16") {
    *error = "tensor 'input': expected dtype F32, BF16 or F16, got " + in_dt;
    return false;
  }
  if (!get_tensor(f, "input", in_dt.c_str(), 2, &input, error) ||
      !get_tensor(f, "weight", in_dt.c_str(), 1, &weight, error) ||
      !get_tensor(f, "freqs_cis", "F32", 2, &freqs, error) || !get_tensor(f, "plan", "U8", 2, &plan, error) ||
      !get_tensor(f, "out_loc", "I64", 1, &out_loc, error) || !get_tensor(f, "kvcache", "U8", 2, &cache, error))
    return false;
  k.N = input->shape[0];
  if (input->shape[1] != 128 || weight->shape[0] != 128 || freqs->shape[1] != 64 || plan->shape[0] != k.N ||
      plan->shape[1] != 16) {
    *error = "shapes disagree: expected input (N, 128), weight (128,), freqs_cis (max_pos, 64), plan (N, 16)";
    return false;
  }
  k.max_pos = freqs->shape[0];
  k.page_bytes = kside_token_bytes(k.recipe) * k.page_size;
  if (cache->shape[1] != k.page_bytes) {
    *error = "tensor 'kvcache': expected rows of " + std::to_string(k.page_bytes) + " bytes, got " +
             std::to_string(cache->shape[1]);
    return false;
  }
  k.num_pages = cache->shape[0];
  if (!dtype_from_safetensors(in_dt, &k.dtype)) {
    *error = "tensor 'input': dtype " + in_dt + " is not one of the library's";
    return false;
  }
  k.input = input->data;
  k.weight = weight->data;
  k.freqs.resize(freqs->data.size() / 4);
  std::memcpy(k.freqs.data(), freqs->data.data(), freqs->data.size());
  k.kvcache = cache->data;
  std::vector<std::int64_t> loc(out_loc->data.size() / 8);
  std::memcpy(loc.data(), out_loc->data.data(), out_loc->data.size());
  if (!kside_slots_from_plan(plan->data.data(), k.N, loc.data(), std::int64_t(loc.size()), k.mode, k.compress_ratio,
                             &k.positions, &k.slots, error))
    return false;
  *out = std::move(k);
  return true;
}

TensorView KsideCase::input_view() const { return TensorView::contiguous(input.data(), dtype, {N, 128}); }
TensorView KsideCase::weight_view() const { return TensorView::contiguous(weight.data(), dtype, {128}); }
TensorView KsideCase::freqs_view() const { return TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64}); }
TensorView KsideCase::positions_view() const { return TensorView::contiguous(positions.data(), DType::kInt64, {N}); }
TensorView KsideCase::slots_view() const { return TensorView::contiguous(slots.data(), DType::kInt64, {N}); }
TensorView KsideCase::cache_view(std::uint8_t* cache) const {
  return TensorView::contiguous(cache, DType::kUInt8, {num_pages, page_bytes});
}
KStoreArgs KsideCase::args(std::uint8_t* cache) const {
  KStoreArgs a;
  a.recipe = recipe;
  a.input = input_view();
  a.weight = weight_view();
  a.eps = eps;
  a.freqs = freqs_view();
  a.positions = positions_view();
  a.slots = slots_view();
  a.kvcache = cache_view(cache);
  a.page_size = page_size;
  return a;
}

}  // namespace io
}  // namespace indexer_q
