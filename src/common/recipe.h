// Compile-time recipes: RecipeT<Id> carries the columns of include/indexer_q/recipes.inc as
// static constexpr members, usable in host and device code, and with_recipe() turns a runtime
// RecipeId into a call of a generic lambda with the matching RecipeT. Backends instantiate their
// one kernel body per recipe through this (no kernel is written per form).
#pragma once

#include "indexer_q/indexer_q.h"

namespace indexer_q {
namespace detail {

template <RecipeId kId>
struct RecipeT;

#define IQ_RECIPE(Id, Name, Rope, Freqs, Had, Bf16Rope, Bf16Had, Fmt, Quant, Fold) \
  template <>                                                                   \
  struct RecipeT<RecipeId::Id> {                                                \
    static constexpr RecipeId kId = RecipeId::Id;                               \
    static constexpr RopeDims kRopeDims = RopeDims::Rope;                       \
    static constexpr FreqsLayout kFreqsLayout = FreqsLayout::Freqs;             \
    static constexpr bool kHadamard = Had;                                      \
    static constexpr bool kBf16AfterRope = Bf16Rope;                            \
    static constexpr bool kBf16AfterHadamard = Bf16Had;                         \
    static constexpr OutFormat kFormat = OutFormat::Fmt;                        \
    static constexpr Quantizer kQuant = Quantizer::Quant;                       \
    static constexpr bool kVllm = Quantizer::Quant == Quantizer::kVllm;         \
    static constexpr WeightFold kFold = WeightFold::Fold;                       \
    static constexpr bool kFp4 = OutFormat::Fmt == OutFormat::kE2M1;            \
    static constexpr bool kFnuz = OutFormat::Fmt == OutFormat::kE4M3FNUZ;       \
    static constexpr int kRopeOffset = RopeDims::Rope == RopeDims::kLast64 ? 64 : 0; \
    static constexpr int kOutBytes = kFp4 ? 64 : 128; /* per row */             \
  };
#include "indexer_q/recipes.inc"
#undef IQ_RECIPE

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
