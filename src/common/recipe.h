// Compile-time recipes: kRecipeTable holds the rows of include/indexer_q/recipes.inc (columns as
// include/indexer_q/recipe_columns.inc declares them); RecipeT<Id> carries a row's columns as
// static constexpr members, usable in host and device code (R::rope_dims, R::quant, ... one per
// column, generated, plus the short traits below), and with_recipe() turns a runtime RecipeId
// into a call of a generic lambda with the matching RecipeT. Backends instantiate their one
// kernel body per recipe through this (no kernel is written per form).
#pragma once

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

// The column values as unqualified names (every enumerator name is unique across the columns),
// so that a recipes.inc row reads as a Recipe initializer.
namespace recipe_values {
#define IQ_VALUE(Type, Value, name, doc) constexpr Type Value = Type::Value;
#include "indexer_q/recipe_columns.inc"

inline constexpr Recipe kRecipeTable[] = {
#define IQ_RECIPE(Id, Name, ...) Recipe{RecipeId::Id, Name, __VA_ARGS__},
#include "indexer_q/recipes.inc"
#undef IQ_RECIPE
};
}  // namespace recipe_values
using recipe_values::kRecipeTable;
constexpr int kNumRecipes = int(sizeof kRecipeTable / sizeof kRecipeTable[0]);

template <RecipeId kIdArg>
struct RecipeT {
  static_assert(int(kIdArg) >= 0 && int(kIdArg) < kNumRecipes, "a recipe of the list");
  static_assert(int(kRecipeTable[int(kIdArg)].id) == int(kIdArg), "the table is in RecipeId order");
  static constexpr RecipeId kId = kIdArg;
  // One member per column, named as the column (R::rope_dims, R::hadamard, ...).
#define IQ_COLUMN(Type, member, doc) static constexpr Type member = kRecipeTable[int(kIdArg)].member;
#define IQ_FLAG(member, doc) static constexpr bool member = kRecipeTable[int(kIdArg)].member;
#include "indexer_q/recipe_columns.inc"
  // The traits the kernel bodies test.
  static constexpr RopeDims kRopeDims = rope_dims;
  static constexpr RopePairs kRopePairs = rope_pairs;
  static constexpr FreqsLayout kFreqsLayout = freqs_layout;
  static constexpr bool kHadamard = hadamard;
  static constexpr bool kBf16AfterRope = bf16_after_rope;
  static constexpr bool kBf16AfterHadamard = bf16_after_hadamard;
  static constexpr OutFormat kFormat = format;
  static constexpr Quantizer kQuant = quant;
  static constexpr bool kVllm = quant == Quantizer::kVllm;
  static constexpr WeightFold kFold = fold;
  static constexpr bool kFp4 = format == OutFormat::kE2M1;
  static constexpr bool kFnuz = format == OutFormat::kE4M3FNUZ;
  static constexpr bool kRope = rope_dims != RopeDims::kNoRope;
  static constexpr bool kNeox = rope_pairs == RopePairs::kNeox;
  static constexpr bool kWeights = fold != WeightFold::kNoWeights;
  static constexpr RopeFma kRopeFma = rope_fma;
  static constexpr bool kScaleOut = scale_out;                   // FP8 row scale written to q_sf (fp32)
  static constexpr bool kSf = format == OutFormat::kE2M1 || scale_out;  // 4 bytes per row in q_sf
  static constexpr int kRopeOffset = rope_dims == RopeDims::kLast64 ? 64 : 0;
  static constexpr int kOutBytes = kFp4 ? 64 : 128;  // per row
};

// Calls f(RecipeT<id>{}) and returns its result. f is a generic lambda (auto parameter).
template <class F>
decltype(auto) with_recipe(RecipeId id, F&& f) {
  switch (id) {
#define IQ_RECIPE(Id, ...) \
  case RecipeId::Id: return f(RecipeT<RecipeId::Id>{});
#include "indexer_q/recipes.inc"
#undef IQ_RECIPE
  }
  return f(RecipeT<RecipeId::kV4Fp8>{});  // unreachable for a validated id
}

}  // namespace detail
}  // namespace indexer_q
