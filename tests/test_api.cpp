// Small facts of the public API: dtype sizes and names, backend / ISA names and parsing,
// TensorView helpers, the ISA list, the thread-count setting, the version string.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "indexer_q/indexer_q.h"

namespace {

using namespace indexer_q;

TEST(Api, DtypeSizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kFloat8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kInt32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(static_cast<DType>(99)), 0u);
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kFloat16), "fp16");
  EXPECT_STREQ(dtype_name(DType::kFloat32), "fp32");
  EXPECT_STREQ(dtype_name(DType::kFloat8E4M3), "fp8_e4m3fn");
  EXPECT_STREQ(dtype_name(DType::kInt32), "int32");
  EXPECT_STREQ(dtype_name(DType::kInt64), "int64");
  EXPECT_STREQ(dtype_name(static_cast<DType>(99)), "unknown");
}

TEST(Api, BackendNamesRoundTrip) {
  for (Backend b : {Backend::kAuto, Backend::kReference, Backend::kCpu, Backend::kCuda}) {
    Backend parsed = Backend::kAuto;
    ASSERT_TRUE(parse_backend(backend_name(b), &parsed)) << backend_name(b);
    EXPECT_EQ(parsed, b);
  }
  EXPECT_STREQ(backend_name(Backend::kReference), "reference");
  EXPECT_STREQ(backend_name(Backend::kCuda), "cuda");
  Backend untouched = Backend::kCpu;
  for (const char* bad : {"", "CPU", "gpu", "cuda ", "refer", "unknown"}) {
    EXPECT_FALSE(parse_backend(bad, &untouched)) << bad;
    EXPECT_EQ(untouched, Backend::kCpu) << "a failed parse must leave *out alone";
  }
}

TEST(Api, CpuIsaNamesRoundTrip) {
  for (CpuIsa i : {CpuIsa::kAuto, CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    CpuIsa parsed = CpuIsa::kAuto;
    ASSERT_TRUE(parse_cpu_isa(cpu_isa_name(i), &parsed)) << cpu_isa_name(i);
    EXPECT_EQ(parsed, i);
  }
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx512), "avx512");
  CpuIsa untouched = CpuIsa::kAvx2;
  for (const char* bad : {"", "AVX2", "sse", "avx-512", "unknown"}) {
    EXPECT_FALSE(parse_cpu_isa(bad, &untouched)) << bad;
    EXPECT_EQ(untouched, CpuIsa::kAvx2);
  }
}

TEST(Api, TensorViewContiguous) {
  int dummy = 0;
  const TensorView v = TensorView::contiguous(&dummy, DType::kBFloat16, {3, 4, 128});
  EXPECT_EQ(v.data, &dummy);
  EXPECT_EQ(v.dtype, DType::kBFloat16);
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.sizes[0], 3);
  EXPECT_EQ(v.sizes[1], 4);
  EXPECT_EQ(v.sizes[2], 128);
  EXPECT_EQ(v.strides[0], 512);
  EXPECT_EQ(v.strides[1], 128);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(v.numel(), 3 * 4 * 128);
  EXPECT_EQ(v.device, Device{});
  EXPECT_EQ(v.device.type, DeviceType::kCPU);

  const TensorView e = TensorView::contiguous(nullptr, DType::kFloat32, {0, 4, 1});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.strides[0], 4);  // a zero-sized dim does not zero the strides of the others
  EXPECT_EQ(e.strides[1], 1);

  const TensorView one = TensorView::contiguous(&dummy, DType::kInt64, {5});
  EXPECT_EQ(one.ndim, 1);
  EXPECT_EQ(one.strides[0], 1);
  EXPECT_EQ(one.numel(), 5);

  const Device cuda1{DeviceType::kCUDA, 1};
  const TensorView g = TensorView::contiguous(&dummy, DType::kFloat32, {2, 64}, cuda1);
  EXPECT_EQ(g.device, cuda1);
}

TEST(Api, TensorViewStrided) {
  int dummy = 0;
  const TensorView w = TensorView::strided(&dummy, DType::kFloat16, {7, 16}, {21, 1});
  EXPECT_EQ(w.ndim, 2);
  EXPECT_EQ(w.strides[0], 21);
  EXPECT_EQ(w.strides[1], 1);
  EXPECT_EQ(w.numel(), 7 * 16);
  // sizes and strides of different lengths give an invalid view that validate() rejects
  const TensorView bad = TensorView::strided(&dummy, DType::kFloat16, {7, 16}, {16});
  EXPECT_LT(bad.ndim, 0);
  EXPECT_EQ(bad.numel(), 0);
}

TEST(Api, DeviceEquality) {
  EXPECT_EQ((Device{DeviceType::kCPU, 0}), (Device{DeviceType::kCPU, 3}));  // the CPU index is ignored
  EXPECT_NE((Device{DeviceType::kCUDA, 0}), (Device{DeviceType::kCUDA, 1}));
  EXPECT_NE((Device{DeviceType::kCPU, 0}), (Device{DeviceType::kCUDA, 0}));
  EXPECT_EQ((Device{DeviceType::kCUDA, 2}), (Device{DeviceType::kCUDA, 2}));
}

TEST(Api, StatusBasics) {
  EXPECT_TRUE(Status().ok());
  EXPECT_TRUE(Status::Ok().ok());
  const Status s = Status::InvalidArgument("x: bad");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "x: bad");
  EXPECT_EQ(Status::Unavailable("u").code(), StatusCode::kUnavailable);
  EXPECT_EQ(Status::Internal("i").code(), StatusCode::kInternal);
}

TEST(Api, SupportedIsasIncludeScalarAndActiveOne) {
  const std::vector<CpuIsa> isas = supported_cpu_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), CpuIsa::kScalar) << "best last, so the portable one first";
  EXPECT_NE(std::find(isas.begin(), isas.end(), CpuIsa::kScalar), isas.end());
  EXPECT_EQ(std::find(isas.begin(), isas.end(), CpuIsa::kAuto), isas.end());
  for (CpuIsa i : isas) EXPECT_TRUE(cpu_isa_supported(i)) << cpu_isa_name(i);
  for (std::size_t k = 1; k < isas.size(); ++k) EXPECT_LT(int(isas[k - 1]), int(isas[k])) << "ordered, no repeats";
  for (CpuIsa i : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512})
    EXPECT_EQ(cpu_isa_supported(i), std::find(isas.begin(), isas.end(), i) != isas.end()) << cpu_isa_name(i);

  CpuIsa active = CpuIsa::kAuto;
  const Status s = active_cpu_isa(&active);
  const char* env = std::getenv("INDEXER_Q_CPU_ISA");
  if (s.ok()) {
    EXPECT_NE(active, CpuIsa::kAuto);
    EXPECT_TRUE(cpu_isa_supported(active)) << cpu_isa_name(active);
    if (env == nullptr || *env == '\0' || std::string(env) == "auto")
      EXPECT_EQ(active, isas.back()) << "the best supported ISA by default";
    else EXPECT_STREQ(cpu_isa_name(active), env);
  } else {
    // only an unknown / unsupported INDEXER_Q_CPU_ISA may make it fail, and *out stays untouched
    EXPECT_NE(env, nullptr) << s.message();
    EXPECT_EQ(active, CpuIsa::kAuto);
    EXPECT_NE(s.message().find("INDEXER_Q_CPU_ISA"), std::string::npos) << s.message();
  }
}

TEST(Api, ThreadCountSetting) {
  const int before = cpu_num_threads();
  EXPECT_GE(before, 1);
  EXPECT_TRUE(set_cpu_num_threads(3).ok());
  EXPECT_EQ(cpu_num_threads(), 3);
  for (int bad : {0, -1}) {
    const Status s = set_cpu_num_threads(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(cpu_num_threads(), 3) << "a rejected count changes nothing";
  }
  EXPECT_TRUE(set_cpu_num_threads(before).ok());
  EXPECT_EQ(cpu_num_threads(), before);
}

TEST(Api, BackendAvailability) {
  EXPECT_TRUE(backend_available(Backend::kReference));
  EXPECT_TRUE(backend_available(Backend::kCpu));
  EXPECT_TRUE(backend_available(Backend::kAuto));
#if !defined(INDEXER_Q_WITH_CUDA)
  EXPECT_FALSE(backend_available(Backend::kCuda));
#endif
}

TEST(Api, VersionIsMajorMinorPatch) {
  const std::string v = version();
  int dots = 0;
  bool ok = !v.empty() && std::isdigit(static_cast<unsigned char>(v.front())) &&
            std::isdigit(static_cast<unsigned char>(v.back()));
  for (char ch : v) {
    if (ch == '.') ++dots;
    else ok = ok && std::isdigit(static_cast<unsigned char>(ch));
  }
  EXPECT_TRUE(ok && dots == 2) << v;
}

}  // namespace

namespace {

using namespace indexer_q;

TEST(Api, NewDtypesSizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kFloat8E4M3FNUZ), 1u);
  EXPECT_EQ(dtype_size(DType::kUInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kInt8), 1u);
  EXPECT_STREQ(dtype_name(DType::kFloat8E4M3FNUZ), "fp8_e4m3fnuz");
  EXPECT_STREQ(dtype_name(DType::kUInt8), "uint8");
  EXPECT_STREQ(dtype_name(DType::kInt8), "int8");
  EXPECT_STREQ(dtype_name(static_cast<DType>(9)), "unknown");
  EXPECT_EQ(dtype_size(static_cast<DType>(9)), 0u);
}

// The list, counted from recipes.inc itself (no retyped list here).
constexpr int kRecipesInList = 0
#define IQ_RECIPE(...) +1
#include "indexer_q/recipes.inc"
#undef IQ_RECIPE
    ;

TEST(Api, AllRecipesIsTheList) {
  const std::vector<RecipeId> all = all_recipes();
  ASSERT_EQ(int(all.size()), kRecipesInList);
  EXPECT_GE(all.size(), 7u);
  EXPECT_EQ(all.front(), RecipeId::kV4Fp8);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(int(all[i]), int(i)) << "list order";
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(all[i], all[j]);
  }
  // the names the spec and the golden files use are all there
  for (const char* n : {"v4_fp8", "v32_fp8", "rope_first_fp8", "v4_fp4", "v4_fp8_fnuz", "v32_fp8_fnuz",
                        "rope_first_fp8_fnuz", "vllm_v4_fp8", "vllm_v4_mxfp4"}) {
    RecipeId id;
    EXPECT_TRUE(parse_recipe(n, &id)) << n;
  }
}

TEST(Api, RecipeNamesRoundTrip) {
  std::vector<std::string> names;
  for (RecipeId r : all_recipes()) {
    const Recipe& d = recipe(r);
    EXPECT_EQ(d.id, r);
    EXPECT_STREQ(d.name, recipe_name(r));
    RecipeId parsed = RecipeId::kV4Fp8;
    ASSERT_TRUE(parse_recipe(recipe_name(r), &parsed)) << recipe_name(r);
    EXPECT_EQ(parsed, r);
    const std::string n = recipe_name(r);
    EXPECT_FALSE(n.empty());
    for (char c : n) EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) || std::isdigit(c) || c == '_') << n;
    EXPECT_EQ(std::count(names.begin(), names.end(), n), 0) << "duplicate name " << n;
    names.push_back(n);
  }
  for (const char* bad : {"", "V4_FP8", "v4", "v4_fp8 ", " v4_fp8", "v4_fp6", "fnuz", "v4_fp4_fnuz", "unknown"}) {
    RecipeId out = RecipeId::kV32Fp8;
    EXPECT_FALSE(parse_recipe(bad, &out)) << "'" << bad << "'";
  }
}

TEST(Api, RecipeDescriptors) {
  // The form of each recipe (SPEC.md / docs/RECIPES.md); the reference model test checks every
  // column against its own table too.
  const Recipe& v4 = recipe(RecipeId::kV4Fp8);
  EXPECT_EQ(v4.rope_dims, RopeDims::kLast64);
  EXPECT_EQ(v4.freqs_layout, FreqsLayout::kInterleaved);
  EXPECT_TRUE(v4.hadamard);
  EXPECT_FALSE(v4.bf16_after_rope);
  EXPECT_FALSE(v4.bf16_after_hadamard);
  EXPECT_EQ(v4.format, OutFormat::kE4M3FN);
  EXPECT_EQ(v4.fold, WeightFold::kTimesScale);
  const Recipe& v32 = recipe(RecipeId::kV32Fp8);
  EXPECT_EQ(v32.rope_dims, RopeDims::kFirst64);
  EXPECT_EQ(v32.freqs_layout, FreqsLayout::kHalves);
  EXPECT_FALSE(v32.hadamard);
  const Recipe& fp4 = recipe(RecipeId::kV4Fp4);
  EXPECT_EQ(fp4.format, OutFormat::kE2M1);
  EXPECT_EQ(fp4.fold, WeightFold::kNoScale);
  EXPECT_TRUE(fp4.bf16_after_rope);
  EXPECT_TRUE(fp4.bf16_after_hadamard);
  // Each FNUZ recipe of SGLang's quantizer is its FN recipe with the format changed, nothing else
  // (vLLM's ROCm form, quantizer vllm_fnuz224, writes its own e4m3fnuz codes).
  for (RecipeId r : all_recipes()) {
    const Recipe& d = recipe(r);
    if (d.format != OutFormat::kE4M3FNUZ || d.quant != Quantizer::kSglang) continue;
    std::string n = d.name;
    ASSERT_GT(n.size(), 5u);
    ASSERT_EQ(n.substr(n.size() - 5), "_fnuz") << n;
    RecipeId fn_id;
    ASSERT_TRUE(parse_recipe(n.substr(0, n.size() - 5), &fn_id)) << n;
    const Recipe& fn = recipe(fn_id);
    EXPECT_EQ(fn.format, OutFormat::kE4M3FN);
    EXPECT_EQ(fn.rope_dims, d.rope_dims);
    EXPECT_EQ(fn.freqs_layout, d.freqs_layout);
    EXPECT_EQ(fn.hadamard, d.hadamard);
    EXPECT_EQ(fn.bf16_after_rope, d.bf16_after_rope);
    EXPECT_EQ(fn.bf16_after_hadamard, d.bf16_after_hadamard);
    EXPECT_EQ(fn.fold, d.fold);
    EXPECT_EQ(fn.quant, d.quant);
  }
  // An unknown id gives the v4_fp8 descriptor, with id kV4Fp8 (documented).
  for (int bad : {-1, 99, kRecipesInList}) {
    const Recipe& d = recipe(static_cast<RecipeId>(bad));
    EXPECT_EQ(d.id, RecipeId::kV4Fp8) << bad;
    EXPECT_STREQ(d.name, "v4_fp8") << bad;
    EXPECT_NE(recipe_name(static_cast<RecipeId>(bad)), nullptr);
  }
}

// The descriptor's enumerator names: fixed strings (tools and bindings print them), distinct
// per enum, lowercase identifiers; an out-of-range value gives "unknown".
TEST(Api, DescriptorEnumNames) {
  EXPECT_STREQ(rope_dims_name(RopeDims::kLast64), "last64");
  EXPECT_STREQ(rope_dims_name(RopeDims::kFirst64), "first64");
  EXPECT_STREQ(freqs_layout_name(FreqsLayout::kInterleaved), "interleaved");
  EXPECT_STREQ(freqs_layout_name(FreqsLayout::kHalves), "halves");
  EXPECT_STREQ(out_format_name(OutFormat::kE4M3FN), "e4m3fn");
  EXPECT_STREQ(out_format_name(OutFormat::kE4M3FNUZ), "e4m3fnuz");
  EXPECT_STREQ(out_format_name(OutFormat::kE2M1), "e2m1");
  EXPECT_STREQ(quantizer_name(Quantizer::kSglang), "sglang");
  EXPECT_STREQ(quantizer_name(Quantizer::kVllm), "vllm");
  EXPECT_STREQ(weight_fold_name(WeightFold::kTimesScale), "times_scale");
  EXPECT_STREQ(weight_fold_name(WeightFold::kNoScale), "no_scale");
  EXPECT_STREQ(weight_fold_name(WeightFold::kScaleThenTwoFactors), "scale_then_two_factors");
  EXPECT_STREQ(weight_fold_name(WeightFold::kTwoFactors), "two_factors");
  EXPECT_STREQ(rope_pairs_name(RopePairs::kNeox), "neox");
  EXPECT_STREQ(rope_pairs_name(RopePairs::kAdjacent), "adjacent");
  EXPECT_STREQ(rope_dims_name(RopeDims::kNoRope), "none");
  EXPECT_STREQ(quantizer_name(Quantizer::kVllmCute), "vllm_cute");
  EXPECT_STREQ(quantizer_name(Quantizer::kVllmV32), "vllm_v32");
  EXPECT_STREQ(quantizer_name(Quantizer::kFp4Rne), "fp4_rne");
  EXPECT_STREQ(quantizer_name(Quantizer::kFp4TwoStage), "fp4_two_stage");
  EXPECT_STREQ(weight_fold_name(WeightFold::kNoScaleBf16), "no_scale_bf16");
  EXPECT_STREQ(weight_fold_name(WeightFold::kNoWeights), "none");
  for (int bad : {-1, 99, 1000}) {
    EXPECT_STREQ(rope_pairs_name(static_cast<RopePairs>(bad)), "unknown") << bad;
    EXPECT_STREQ(rope_dims_name(static_cast<RopeDims>(bad)), "unknown") << bad;
    EXPECT_STREQ(freqs_layout_name(static_cast<FreqsLayout>(bad)), "unknown") << bad;
    EXPECT_STREQ(out_format_name(static_cast<OutFormat>(bad)), "unknown") << bad;
    EXPECT_STREQ(quantizer_name(static_cast<Quantizer>(bad)), "unknown") << bad;
    EXPECT_STREQ(weight_fold_name(static_cast<WeightFold>(bad)), "unknown") << bad;
  }
  // every recipe's columns have a name (no "unknown" in the table)
  for (RecipeId r : all_recipes()) {
    const Recipe& d = recipe(r);
    for (const char* n : {rope_dims_name(d.rope_dims), freqs_layout_name(d.freqs_layout), out_format_name(d.format),
                          quantizer_name(d.quant), weight_fold_name(d.fold)}) {
      ASSERT_NE(n, nullptr);
      EXPECT_STRNE(n, "unknown") << d.name;
      for (const char* c = n; *c; ++c)
        EXPECT_TRUE(std::islower(static_cast<unsigned char>(*c)) || std::isdigit(static_cast<unsigned char>(*c)) || *c == '_') << n;
    }
  }
}

// The generated column API (include/indexer_q/recipe_columns.inc): every column of every recipe
// has a named value, the names agree with value_name(), and the forms are what their contracts say.
TEST(Api, RecipeColumnsAreNamedAndGenerated) {
  const int n = recipe_column_count();
  ASSERT_GE(n, 9);
  EXPECT_EQ(recipe_column_name(n), nullptr);
  EXPECT_EQ(recipe_column_name(-1), nullptr);
  EXPECT_STREQ(recipe_column_name(0), "rope_dims");
  for (RecipeId id : all_recipes()) {
    const Recipe& d = recipe(id);
    for (int i = 0; i < n; ++i) {
      ASSERT_NE(recipe_column_value(id, i), nullptr);
      EXPECT_STRNE(recipe_column_value(id, i), "unknown") << d.name << " column " << recipe_column_name(i);
      EXPECT_NE(recipe_column_doc(i), nullptr);
    }
    std::map<std::string, std::string> cols;
    for (int i = 0; i < n; ++i) cols[recipe_column_name(i)] = recipe_column_value(id, i);
    EXPECT_EQ(cols["rope_dims"], value_name(d.rope_dims)) << d.name;
    EXPECT_EQ(cols["rope_pairs"], value_name(d.rope_pairs)) << d.name;
    EXPECT_EQ(cols["freqs_layout"], value_name(d.freqs_layout)) << d.name;
    EXPECT_EQ(cols["format"], value_name(d.format)) << d.name;
    EXPECT_EQ(cols["quant"], value_name(d.quant)) << d.name;
    EXPECT_EQ(cols["fold"], value_name(d.fold)) << d.name;
    EXPECT_EQ(cols["hadamard"], d.hadamard ? "true" : "false") << d.name;
    EXPECT_EQ(cols["bf16_after_rope"], d.bf16_after_rope ? "true" : "false") << d.name;
    EXPECT_EQ(cols["bf16_after_hadamard"], d.bf16_after_hadamard ? "true" : "false") << d.name;
  }
  EXPECT_STREQ(value_name(static_cast<Quantizer>(99)), "unknown");

  // The forms as their contracts describe them (docs/RECIPES.md).
  const Recipe& f8 = recipe(RecipeId::kVllmV4Fp8);
  EXPECT_STREQ(f8.name, "vllm_v4_fp8");
  EXPECT_EQ(f8.quant, Quantizer::kVllm);
  EXPECT_EQ(f8.fold, WeightFold::kScaleThenTwoFactors);
  const Recipe& f4 = recipe(RecipeId::kVllmV4Mxfp4);
  EXPECT_EQ(f4.format, OutFormat::kE2M1);
  EXPECT_EQ(f4.fold, WeightFold::kTwoFactors);
  const Recipe& neox = recipe(RecipeId::kVllmV32Fp8Neox);
  EXPECT_STREQ(neox.name, "vllm_v32_fp8_neox");
  EXPECT_EQ(neox.rope_dims, RopeDims::kFirst64);
  EXPECT_EQ(neox.rope_pairs, RopePairs::kNeox);
  EXPECT_EQ(neox.quant, Quantizer::kVllmV32);
  EXPECT_EQ(recipe(RecipeId::kVllmV32Fp8Gptj).rope_pairs, RopePairs::kAdjacent);
  const Recipe& cute = recipe(RecipeId::kVllmV4Fp8Cutedsl);
  EXPECT_EQ(cute.quant, Quantizer::kVllmCute);
  EXPECT_EQ(cute.fold, WeightFold::kTimesScale);
  const Recipe& pack = recipe(RecipeId::kSglV41Fp4RopePack);
  EXPECT_EQ(pack.quant, Quantizer::kFp4TwoStage);
  EXPECT_EQ(pack.fold, WeightFold::kNoScaleBf16);
  EXPECT_FALSE(pack.hadamard);
  const Recipe& rne = recipe(RecipeId::kSglV41Fp4QuantRne);
  EXPECT_FALSE(recipe_has_rope(rne));
  EXPECT_FALSE(recipe_has_weights(rne));
  EXPECT_TRUE(recipe_has_block_scales(rne));
  for (RecipeId id : all_recipes()) {
    const Recipe& d = recipe(id);
    const bool is_vllm = std::string(d.name).rfind("vllm_", 0) == 0;
    if (is_vllm) {
      EXPECT_FALSE(d.hadamard) << d.name << ": vLLM's forms have no Hadamard";
      EXPECT_TRUE(d.bf16_after_rope) << d.name;
    }
  }
}

}  // namespace
