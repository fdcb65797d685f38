// The key side's op (docs/KSIDE-SPEC.md), described once as a table of its arguments for the
// validator core (src/common/op_args.h, src/validate.cpp): KStoreArgs -> detail::KProblem, or a
// Status naming the offending argument. Nothing is written by a rejected call.
#include <cstdint>
#include <string>

#include "common/kside_problem.h"
#include "common/kside_validate.h"
#include "common/op_args.h"
#include "common/validate_text.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {
namespace {

// The sizes its shapes are written in. token_bytes is fixed by the recipe, page_size by the
// argument of that name; page_bytes and the slot capacity are products.
enum KSym { kN, kMaxPos, kPageSize, kTokenBytes, kPageBytes, kNumPages, kCapacity, kKSyms };
constexpr SymSpec kKeySyms[kKSyms] = {
    sym("N"),         sym("max_pos"),   sym("page_size"),
    sym("token_bytes"), derived_sym("page_bytes", kTokenBytes, kPageSize, "{token_bytes} * page_size"),
    sym("num_pages"), derived_sym("capacity", kNumPages, kPageSize)};

enum KSlot { kInput, kWeight, kFreqs, kPositions, kSlots, kKvcache };

constexpr DType kBF16 = DType::kBFloat16, kF16 = DType::kFloat16, kF32 = DType::kFloat32, kI32 = DType::kInt32,
                kI64 = DType::kInt64;

constexpr ArgSpec kKeyArgs[] = {
    tensor("input", kInput)
        .of(shape("stride(1) = 1 and stride(0) >= 128 (rows of 128 contiguous values)", S(kN), L(128)))
        .counted("N * 128 elements overflow")
        .dtype("fp32, bf16 or fp16", kF32, kBF16, kF16)
        .rows_at_least(),
    tensor("weight", kWeight).of(shape("contiguous (1,)", L(128))).dtype_as(kInput),
    tensor("freqs", kFreqs)
        .of(shape("contiguous (64, 1)", S(kMaxPos), L(64)), ShapeMsg::kWhole, " ((cos, sin) per pair, interleaved)")
        .counted("max_pos * 64 elements overflow")
        .dtype("fp32", kF32),
    tensor("positions", kPositions)
        .of(shape("contiguous (1,)", S(kN)))
        .dtype("int32 or int64", kI32, kI64)
        .indexes(kMaxPos, "max_pos", false, " (token with slot {guard})"),
    tensor("slots", kSlots)
        .of(shape("contiguous (1,)", S(kN)))
        .dtype("int64", kI64)
        .indexes(kCapacity, "num_pages * page_size", true, " (negative = skip the token)"),
    scalar(ScalarArg::kEps, 0),
    int_pow2("page_size", 0, 1, std::int64_t(1) << 32, kPageSize, "a power of two in [1, 2^32]"),
    tensor("kvcache", kKvcache).out()
        .of(shape("({page_bytes}, 1): pages of page_bytes contiguous bytes", S(kNumPages), S(kPageBytes)),
            ShapeMsg::kWhole, " for recipe {recipe} and page_size {page_size}")
        .counted("num_pages * page_bytes overflows")
        .dtype("uint8 or int8 (raw bytes)", DType::kUInt8, DType::kInt8),
};

constexpr OpSpec kKeyOp{"key", kKeySyms, kKSyms, kKeyArgs, int(sizeof kKeyArgs / sizeof kKeyArgs[0]), kN};

}  // namespace

Status validate_kstore(const KStoreArgs& args, const Options& options, KProblem* out) {
  // --- recipe ---
  const std::int64_t token_bytes = kside_token_bytes(args.recipe);
  if (token_bytes == 0) {
    std::string names;
    for (KRecipeId r : all_krecipes()) names += (names.empty() ? "" : ", ") + std::string(krecipe_name(r));
    return bad_arg("recipe", "unknown key-side recipe id " + std::to_string(int(args.recipe)) +
                                 "; expected one of " + names);
  }
  OpCall c;
  c.str("recipe", krecipe_name(args.recipe));
  c.bind(kTokenBytes, token_bytes);
  c.views[kInput] = &args.input;
  c.views[kWeight] = &args.weight;
  c.views[kFreqs] = &args.freqs;
  c.views[kPositions] = &args.positions;
  c.views[kSlots] = &args.slots;
  c.views[kKvcache] = &args.kvcache;
  c.scalars[0] = double(args.eps);
  c.ints[0] = args.page_size;

  const Status s = check_op_args(kKeyOp, options, &c);
  if (!s.ok() || out == nullptr) return s;
  KProblem& p = *out;
  p = KProblem{};
  p.recipe = args.recipe;
  if (c.no_work) return s;  // valid, nothing to read or write
  const std::int64_t N = c.sym[kN], ps = c.sym[kPageSize];
  int log2_page = 0;
  while ((std::int64_t(1) << log2_page) < ps) ++log2_page;
  p.N = N;
  p.dtype = args.input.dtype;
  p.input = args.input.data;
  p.input_stride = N > 1 ? args.input.strides[0] : 128;
  p.weight = args.weight.data;
  p.eps = args.eps;
  p.freqs = static_cast<const float*>(args.freqs.data);
  p.max_pos = c.sym[kMaxPos];
  p.positions = args.positions.data;
  p.pos_dtype = args.positions.dtype;
  p.slots = static_cast<const std::int64_t*>(args.slots.data);
  p.cache = static_cast<std::uint8_t*>(args.kvcache.data);
  p.num_pages = c.sym[kNumPages];
  p.page_size = ps;
  p.log2_page = log2_page;
  p.page_bytes = c.sym[kPageBytes];
  p.device = c.device;
  return s;
}

}  // namespace detail

Status validate(const KStoreArgs& args, const Options& options) {
  return detail::validate_kstore(args, options, nullptr);
}

}  // namespace indexer_q
