// Golden conformance, per recipe: every tests/data/golden/*.safetensors (v4_fp8),
// tests/data/golden/variants/*.safetensors (metadata "variant": v32_fp8, rope_first_fp8, v4_fp4),
// produced by the reference CUDA kernels on an H200, and tests/data/golden/vllm/*.safetensors
// (vllm_v4_fp8, vllm_v4_mxfp4: vLLM's own Triton kernels on an H200, docs/RECIPES.md; metadata
// softmax_scale and head_scale, weights_out stored (B, H)), plus the FNUZ case derived from each FN file
// (docs/RECIPES.md: same bytes except 0x80 -> 0x00, weights_out times 2), through every backend
// this build and machine can run: the reference, the CPU backend for each supported ISA with 1, 2
// and many threads, and CUDA when a device is usable. Every byte is compared: q_out codes, q_sf
// block-scale bytes (FP4) and weights_out bits (NaN == NaN), over two poison patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "io/op_case.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;
namespace fs = std::filesystem;

// Every file under golden/ and its subdirectories (one per engine form), the key side's kside/
// excepted (tests/test_kside_golden.cpp): a new folder of golden data needs no edit here.
std::vector<std::string> golden_files() {
  return io::conformance_files((fs::path(INDEXER_Q_TEST_DATA_DIR) / "golden").string(), {"kside"});
}

struct NamedCase {
  std::string name;  // file path, with " (derived <recipe>)" for derived cases
  io::ConformanceCase k;
};

// Every golden case, through the one loader (tools/io/op_case.h): each file's case, then the
// FNUZ case derived from an FN file.
std::vector<NamedCase> golden_cases() {
  std::vector<NamedCase> out;
  for (const std::string& path : golden_files()) {
    io::LoadedFile f;
    EXPECT_TRUE(io::load_op_cases_file(path, &f)) << path << ": " << f.error;
    EXPECT_EQ(int(f.op), int(io::CaseOp::kQuery)) << path << ": not a query-side file";
    if (f.op != io::CaseOp::kQuery) continue;
    for (io::OpCase& c : f.cases) out.push_back(NamedCase{c.name, std::move(c.q)});
  }
  return out;
}

// A conformance case as the harness's HostCase (same bytes).
iqtest::HostCase to_host_case(const io::ConformanceCase& k) {
  iqtest::HostCase c;
  c.recipe = k.recipe;
  c.B = k.B;
  c.H = k.H;
  c.max_pos = k.max_pos;
  c.weight_stride = k.H;
  c.dtype = k.dtype;
  c.pos_dtype = k.pos_dtype;
  c.weight_dtype = int(k.weight_dtype);  // the file's (SGLang's V3.2 files: fp32 beside a bf16 q_input)
  c.weight_scale = k.weight_scale;
  c.head_scale = k.head_scale;
  c.q_input = k.q_input;
  c.weight = k.weight;
  c.freqs.resize(k.freqs.size() / 4);  // empty for a recipe without RoPE
  if (!k.freqs.empty()) std::memcpy(c.freqs.data(), k.freqs.data(), k.freqs.size());
  c.positions = k.positions;
  return c;
}

iqtest::Outputs expected_outputs(const io::ConformanceCase& k) {
  iqtest::Outputs want;
  want.q_out = k.q_out;
  want.q_sf = k.q_sf;
  want.weights_out = k.weights_out;
  return want;
}

TEST(Golden, DirectoryHoldsCases) {
  const auto files = golden_files();
  EXPECT_FALSE(files.empty()) << "no *.safetensors in " << INDEXER_Q_TEST_DATA_DIR << "/golden";
}

using iqtest::source_only;

// Every recipe of the list has golden data: a file of its own, or (FNUZ) one derived from a file.
TEST(Golden, EveryRecipeHasCases) {
  std::set<int> seen;
  std::set<int> from_files;
  for (const NamedCase& c : golden_cases()) {
    seen.insert(int(c.k.recipe));
    if (c.name.find("(derived") == std::string::npos) from_files.insert(int(c.k.recipe));
  }
  for (RecipeId r : all_recipes()) {
    if (source_only(r)) {
      EXPECT_FALSE(seen.count(int(r))) << recipe_name(r) << " has golden data now: remove it from source_only()";
      continue;
    }
    EXPECT_TRUE(seen.count(int(r))) << "no golden case for recipe " << recipe_name(r);
    if (recipe(r).format != OutFormat::kE4M3FNUZ)
      EXPECT_TRUE(from_files.count(int(r))) << "no golden file for recipe " << recipe_name(r);
  }
}

// The loaded cases are what their recipe says: output sizes, and for the variants the metadata.
TEST(Golden, CasesAreConsistent) {
  for (const NamedCase& c : golden_cases()) {
    SCOPED_TRACE(c.name);
    const io::ConformanceCase& k = c.k;
    ASSERT_GT(k.B * k.H, 0);
    const bool fp4 = recipe(k.recipe).format == OutFormat::kE2M1;
    EXPECT_EQ(k.out_bytes_per_row(), fp4 ? 64 : 128);
    EXPECT_EQ(k.q_out.size(), std::size_t(k.B * k.H * k.out_bytes_per_row()));
    EXPECT_EQ(k.q_sf.size(), recipe_writes_q_scale(recipe(k.recipe)) ? std::size_t(k.B * k.H * 4) : 0u);
    EXPECT_EQ(k.weights_out.size(), recipe_has_weights(recipe(k.recipe)) ? std::size_t(k.B * k.H) : 0u);
    if (c.name.find("/variants/") != std::string::npos && c.name.find("(derived") == std::string::npos)
      EXPECT_NE(k.recipe, RecipeId::kV4Fp8) << "a variants file without \"variant\" metadata";
    if (c.name.find("/vllm/") != std::string::npos) {
      // vLLM's files: a vLLM recipe, and the factors the files were made with (128^-0.5 and
      // H^-0.5 as float32), read from softmax_scale / head_scale (not weight_scale, which is
      // informational there and differs from their product's rounding on purpose).
      EXPECT_EQ(recipe(k.recipe).quant, Quantizer::kVllm) << "a vllm file of recipe " << recipe_name(k.recipe);
      EXPECT_EQ(k.weight_scale, float(1.0 / std::sqrt(128.0)));
      EXPECT_EQ(k.head_scale, float(1.0 / std::sqrt(double(k.H))));
    } else if (c.name.find("/vllm_v32/") != std::string::npos) {
      // vLLM's V3.2 kernel: the same two factors, as float32 arguments of the kernel
      EXPECT_EQ(recipe(k.recipe).quant, Quantizer::kVllmV32) << recipe_name(k.recipe);
      EXPECT_EQ(k.weight_scale, float(1.0 / std::sqrt(128.0)));
      EXPECT_EQ(k.head_scale, float(1.0 / std::sqrt(double(k.H))));
    } else if (c.name.find("/vllm_cutedsl/") != std::string::npos) {
      // vLLM's CuTe kernel takes one factor: fl32(softmax_scale * head_scale), the product in double
      EXPECT_EQ(recipe(k.recipe).quant, Quantizer::kVllmCute) << recipe_name(k.recipe);
      EXPECT_EQ(k.weight_scale, float((1.0 / std::sqrt(128.0)) * (1.0 / std::sqrt(double(k.H)))));
    } else if (c.name.find("/sgl_v32_unfused/") != std::string::npos) {
      // SGLang's V3.2 epilogue: softmax_scale 128^-0.5 and head_scale H^-0.5 (Python doubles, to fp32)
      EXPECT_EQ(recipe(k.recipe).quant, Quantizer::kSglangUe8m0) << recipe_name(k.recipe);
      EXPECT_EQ(k.weight_scale, float(1.0 / std::sqrt(128.0)));
      EXPECT_EQ(k.head_scale, float(1.0 / std::sqrt(double(k.H))));
    } else if (c.name.find("/sgl_v41_") != std::string::npos) {
      EXPECT_TRUE(recipe(k.recipe).quant == Quantizer::kFp4TwoStage || recipe(k.recipe).quant == Quantizer::kFp4Rne)
          << recipe_name(k.recipe);
      if (recipe_has_weights(recipe(k.recipe))) {  // SGLang V4.1: softmax_scale * H^-0.5 in double, once to fp32
        EXPECT_EQ(k.weight_scale, float((1.0 / std::sqrt(128.0)) * (1.0 / std::sqrt(double(k.H)))));
      }
    } else {
      EXPECT_EQ(recipe(k.recipe).quant, Quantizer::kSglang) << "an SGLang-form file of a vLLM recipe";
      EXPECT_EQ(k.head_scale, 1.0f);
    }
    if (recipe(k.recipe).format == OutFormat::kE4M3FNUZ)
      for (std::uint8_t q : k.q_out) ASSERT_NE(q, 0x80) << "0x80 is NaN in e4m3fnuz";
  }
}

// Thread counts 1, 2 and "many" (more threads than rows of small cases, more than cores here).
std::vector<iqtest::BackendUnderTest> golden_backends(bool cuda_only) {
  std::vector<iqtest::BackendUnderTest> backends;
  for (auto& be : iqtest::backends_under_test({1, 2, 13}))
    if (be.cuda == cuda_only) backends.push_back(be);
  return backends;
}

void check_all_golden(bool cuda_only) {
  const auto cases = golden_cases();
  ASSERT_FALSE(cases.empty()) << "no *.safetensors in " << INDEXER_Q_TEST_DATA_DIR << "/golden";
  const std::vector<iqtest::BackendUnderTest> backends = golden_backends(cuda_only);
  ASSERT_FALSE(backends.empty());
  int runs = 0;
  for (const NamedCase& nc : cases) {
    SCOPED_TRACE(nc.name);
    const io::ConformanceCase& k = nc.k;
    ASSERT_GT(k.B * k.H, 0);
    iqtest::HostCase c = to_host_case(k);
    const iqtest::Outputs want = expected_outputs(k);
    // FP8 recipes also write raw codes into uint8 / int8 tensors; FP4 into int8.
    std::vector<int> out_dtypes = {-1};
    if (recipe(k.recipe).format == OutFormat::kE2M1) out_dtypes.push_back(int(DType::kInt8));
    else out_dtypes.insert(out_dtypes.end(), {int(DType::kUInt8), int(DType::kInt8)});
    for (const auto& be : backends) {
      for (int od : out_dtypes) {
        c.q_out_dtype = od;
        // the raw-code dtypes once (poison 0xA5); the recipe's own dtype under two poisons
        for (std::uint8_t poison : {std::uint8_t(0xA5), std::uint8_t(0x7f)}) {
          if (od >= 0 && poison != 0xA5) continue;
          // weights_out as (B, H) (vLLM's shape) in the second poison run, (B, H, 1) otherwise
          c.weights_out_2d = poison == 0x7f;
          iqtest::Outputs got;
          const Status s = iqtest::run_case(be, c, &got, poison);
          ASSERT_TRUE(s.ok()) << be.name << " " << c.describe() << ": " << s.message();
          ++runs;
          const iqtest::Comparison cmp = iqtest::compare(got, want, k.H);
          EXPECT_TRUE(cmp.exact()) << be.name << " " << c.describe() << " (poison 0x" << std::hex << int(poison)
                                   << std::dec << "): " << cmp.summary();
          // The io library's own comparison agrees with ours.
          const io::Diff d = io::compare_outputs(k, got.q_out.data(), got.q_sf.empty() ? nullptr : got.q_sf.data(),
                                                 got.weights_out.data());
          EXPECT_EQ(d.q_bytes, cmp.q_bytes) << be.name;
          EXPECT_EQ(d.sf_bytes, cmp.sf_bytes) << be.name;
          EXPECT_EQ(d.weights, cmp.weights) << be.name;
        }
      }
    }
  }
  EXPECT_GT(runs, 0);
}

TEST(Golden, HostBackendsReproduceEveryFile) { check_all_golden(false); }

TEST(Golden, CudaReproducesEveryFile) {
#if defined(INDEXER_Q_WITH_CUDA)
  if (!backend_available(Backend::kCuda)) GTEST_SKIP() << "no usable CUDA device";
  check_all_golden(true);
#else
  GTEST_SKIP() << "CUDA backend not built (INDEXER_Q_CUDA=OFF)";
#endif
}

// vLLM's CuTe MXFP4 form (source only, docs/RECIPES.md step 15) equals its Triton MXFP4 form
// (step 8) for every block with a finite amax: the vllm_v4_mxfp4 files' codes and q_sf bytes, byte
// for byte, through every backend; weights_out = w * fl32(softmax_scale * head_scale) (the product
// of the Python floats 128^-0.5 and H^-0.5 in double, the files' factors), one float32 multiply.
void check_cute_mxfp4_on_mxfp4_files(bool cuda_only) {
  const std::vector<iqtest::BackendUnderTest> backends = golden_backends(cuda_only);
  ASSERT_FALSE(backends.empty());
  int files = 0;
  for (const NamedCase& nc : golden_cases()) {
    const io::ConformanceCase& k = nc.k;
    if (k.recipe != RecipeId::kVllmV4Mxfp4) continue;
    SCOPED_TRACE(nc.name);
    ++files;
    // every row finite: no block of step 8 at 254 (its byte for an infinite amax only)
    for (std::uint8_t e : k.q_sf) ASSERT_NE(e, 254) << "a row with an infinite amax";
    iqtest::HostCase c = to_host_case(k);
    c.recipe = RecipeId::kVllmV4Mxfp4Cute;
    c.weight_scale = float((1.0 / std::sqrt(128.0)) * (1.0 / std::sqrt(double(k.H))));
    c.head_scale = 0.375f;  // not read by the form: any value
    iqtest::Outputs want = expected_outputs(k);
    ASSERT_EQ(int(k.weight_dtype), int(DType::kBFloat16));
    int differ = 0;  // weights where the one factor and the two differ (the form's change)
    for (std::int64_t i = 0; i < k.B * k.H; ++i) {
      std::uint16_t h;
      std::memcpy(&h, k.weight.data() + 2 * i, 2);
      const float w = iqtest::float_of(std::uint32_t(h) << 16);
      want.weights_out[std::size_t(i)] = w * c.weight_scale;
      differ += iqtest::bits_of(want.weights_out[std::size_t(i)]) != iqtest::bits_of(k.weights_out[std::size_t(i)]);
    }
    if (k.H == 8) EXPECT_GT(differ, 0) << "H = 8: H^-0.5 is not a power of two, the folds differ";
    for (const auto& be : backends) {
      for (std::uint8_t poison : {std::uint8_t(0xA5), std::uint8_t(0x7f)}) {
        c.weights_out_2d = poison == 0x7f;
        iqtest::Outputs got;
        const Status s = iqtest::run_case(be, c, &got, poison);
        ASSERT_TRUE(s.ok()) << be.name << ": " << s.message();
        const iqtest::Comparison cmp = iqtest::compare(got, want, k.H);
        EXPECT_TRUE(cmp.exact()) << be.name << " " << c.describe() << ": " << cmp.summary();
      }
    }
  }
  EXPECT_GE(files, 2) << "the vllm_v4_mxfp4 golden files";
}

TEST(Golden, VllmMxfp4CuteEqualsTheMxfp4FilesOnFiniteRows) { check_cute_mxfp4_on_mxfp4_files(false); }

TEST(Golden, CudaVllmMxfp4CuteEqualsTheMxfp4FilesOnFiniteRows) {
#if defined(INDEXER_Q_WITH_CUDA)
  if (!backend_available(Backend::kCuda)) GTEST_SKIP() << "no usable CUDA device";
  check_cute_mxfp4_on_mxfp4_files(true);
#else
  GTEST_SKIP() << "CUDA backend not built (INDEXER_Q_CUDA=OFF)";
#endif
}

// The golden comparison can fail: one flipped byte in the expected codes, one in the expected
// block scales (FP4) and one flipped weight sign are each seen.
TEST(Golden, ComparisonSeesACorruptedExpectation) {
  bool saw_fp4 = false;
  for (const NamedCase& nc : golden_cases()) {
    const io::ConformanceCase& k = nc.k;
    const bool fp4 = recipe(k.recipe).format == OutFormat::kE2M1;
    if (!recipe_has_weights(recipe(k.recipe))) continue;  // a weights_out byte is flipped below
    if (nc.name != golden_cases().front().name && !(fp4 && !saw_fp4)) continue;
    saw_fp4 = saw_fp4 || fp4;
    SCOPED_TRACE(nc.name);
    iqtest::Outputs got;
    iqtest::BackendUnderTest ref = iqtest::backends_under_test({1}).front();
    ASSERT_TRUE(iqtest::run_case(ref, to_host_case(k), &got, 0).ok());
    iqtest::Outputs want = expected_outputs(k);
    ASSERT_TRUE(iqtest::compare(got, want, k.H).exact());
    want.q_out[want.q_out.size() / 2] ^= 0x01;
    if (fp4) want.q_sf[want.q_sf.size() - 1] ^= 0x01;
    float& w = want.weights_out.back();
    w = std::isnan(w) ? 1.0f : iqtest::float_of(iqtest::bits_of(w) ^ 0x80000000u);  // sign flip
    const iqtest::Comparison cmp = iqtest::compare(got, want, k.H);
    EXPECT_EQ(cmp.q_bytes, 1);
    EXPECT_EQ(cmp.sf_bytes, fp4 ? 1 : 0);
    EXPECT_EQ(cmp.weights, 1);
  }
  EXPECT_TRUE(saw_fp4) << "no FP4 golden case";
}

}  // namespace
