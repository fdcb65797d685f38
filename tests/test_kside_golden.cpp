// Key side (docs/KSIDE-SPEC.md) against the golden files tests/data/golden/kside/kside_*.safetensors
// (SGLang's CUDA kernel on an H200): every host backend (reference, cpu for each supported ISA
// and 1, 2, 3 threads) reproduces each file's whole kvcache byte for byte, with the cache filled
// with the file's 0xA5 before the call, and again with another fill (then only the written rows
// may differ from the fill). The FP8 files' diagnostics pin the intermediate values of the model
// (ss, nf = rsq_sm90(t), amax, scale, y after the Hadamard). CUDA is tested in test_cuda*.cu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/kside_row.h"
#include "common/rsq_sm90.h"
#include "io/op_case.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;
namespace fs = std::filesystem;

// The key-side files of golden/kside/ (the MUFU.RSQ table there is not an op case).
std::vector<std::string> kside_files() {
  std::vector<std::string> files;
  for (const std::string& path :
       io::conformance_files((fs::path(INDEXER_Q_TEST_DATA_DIR) / "golden" / "kside").string()))
    if (fs::path(path).filename().string().rfind("kside_", 0) == 0) files.push_back(path);
  return files;
}

// Reads one file into its case through the one loader (tools/io/op_case.h), keeping the raw
// StFile for the diagnostics.
void load(const std::string& path, io::StFile* file, io::KsideCase* k) {
  io::LoadedFile f;
  ASSERT_TRUE(io::load_op_cases_file(path, &f, file)) << path << ": " << f.error;
  ASSERT_EQ(int(f.op), int(io::CaseOp::kKey)) << path << ": not a key-side file";
  ASSERT_EQ(f.cases.size(), 1u) << path;
  *k = std::move(f.cases.front().k);
}

TEST(KsideGolden, FilesPresent) {
  const auto files = kside_files();
  EXPECT_GE(files.size(), 5u);
  int fp8 = 0, fp4 = 0;
  for (const auto& f : files) {
    io::StFile file;
    io::KsideCase k;
    load(f, &file, &k);
    (k.recipe == KRecipeId::kV4KFp8 ? fp8 : fp4)++;
  }
  EXPECT_GE(fp8, 3);
  EXPECT_GE(fp4, 2);
}

TEST(KsideGolden, EveryHostBackendEveryByte) {
  int checked = 0;
  for (const std::string& path : kside_files()) {
    io::StFile file;
    io::KsideCase k;
    load(path, &file, &k);
    for (const auto& be : iqtest::backends_under_test({1, 2, 3})) {
      if (be.cuda) continue;
      for (std::uint8_t fill : {k.cache_fill, std::uint8_t(0x5A)}) {
        std::vector<std::uint8_t> cache(k.kvcache.size(), fill);
        const Status s = run(k.args(cache.data()), be.options);
        ASSERT_TRUE(s.ok()) << path << " " << be.name << ": " << s.message();
        // Expected: the file's cache, with its fill replaced by ours outside the written rows.
        std::vector<std::uint8_t> want = k.kvcache;
        if (fill != k.cache_fill) {
          std::vector<bool> written(want.size(), false);
          const std::int64_t cb = kside_token_bytes(k.recipe) - 4;
          for (std::int64_t s2 : k.slots) {
            if (s2 < 0) continue;
            const std::int64_t page = s2 / k.page_size, r = s2 % k.page_size;
            for (std::int64_t i = 0; i < cb; ++i) written[std::size_t(page * k.page_bytes + cb * r + i)] = true;
            for (std::int64_t i = 0; i < 4; ++i)
              written[std::size_t(page * k.page_bytes + cb * k.page_size + 4 * r + i)] = true;
          }
          for (std::size_t i = 0; i < want.size(); ++i)
            if (!written[i]) want[i] = fill;
        }
        std::int64_t diff = 0, first = -1;
        for (std::size_t i = 0; i < want.size(); ++i)
          if (cache[i] != want[i]) {
            if (first < 0) first = std::int64_t(i);
            ++diff;
          }
        EXPECT_EQ(diff, 0) << path << " " << be.name << " fill " << int(fill) << ": first differing byte " << first
                           << " (page " << first / k.page_bytes << ", byte " << first % k.page_bytes << ")";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// The edge files' token 27 has slot -1: skipped, so the guard page (SGLang's write before the
// buffer) is no concern of ours; the file's cache must still be matched (checked above) and the
// token count and skip count are what the spec says.
TEST(KsideGolden, EdgeFilesSkipNegativeSlot) {
  for (const std::string& path : kside_files()) {
    if (path.find("edge") == std::string::npos) continue;
    io::StFile file;
    io::KsideCase k;
    load(path, &file, &k);
    ASSERT_EQ(k.N, 31);
    EXPECT_EQ(k.slots[27], -1) << path;
    EXPECT_EQ(std::count(k.slots.begin(), k.slots.end(), -1), 3) << path;  // 2 plan skips + slot -1
  }
}

// FP8 files: diag_row = (ss, nf, amax, scale) and diag_prequant = y, from an instrumented copy
// of SGLang's kernel. Our steps give the same bits (NaN rows: NaN == NaN).
TEST(KsideGolden, Fp8DiagnosticsMatchTheModel) {
  using KR = detail::KRecipeT<KRecipeId::kV4KFp8>;
  int rows = 0;
  for (const std::string& path : kside_files()) {
    io::StFile file;
    io::KsideCase k;
    load(path, &file, &k);
    if (k.recipe != KRecipeId::kV4KFp8 || k.dtype != DType::kFloat32 || !file.tensors.count("diag_row")) continue;
    const auto& dr = file.tensors.at("diag_row").data;
    const auto& dp = file.tensors.at("diag_prequant").data;
    std::vector<float> diag(dr.size() / 4), pre(dp.size() / 4);
    std::memcpy(diag.data(), dr.data(), dr.size());
    std::memcpy(pre.data(), dp.data(), dp.size());
    const float* w = reinterpret_cast<const float*>(k.weight.data());
    for (std::int64_t t = 0; t < k.N; ++t) {
      if (k.slots[t] < 0) continue;
      const float* x = reinterpret_cast<const float*>(k.input.data()) + 128 * t;
      float v[32];
      for (int l = 0; l < 32; ++l) v[l] = detail::kside_group_ss(x + 4 * l);
      const float ss = detail::kside_butterfly_sum(v);
      const float nf = detail::rsq_sm90(detail::kside_rms_arg(x, k.eps));
      EXPECT_TRUE(iqtest::same_float(ss, diag[4 * t])) << path << " token " << t << " ss";
      EXPECT_TRUE(iqtest::same_float(nf, diag[4 * t + 1])) << path << " token " << t << " nf";
      float d[128];
      for (int i = 0; i < 128; ++i) d[i] = detail::kside_norm(x[i], nf, w[i]);
      detail::rope_row<KR>(d, k.freqs.data() + 64 * k.positions[t]);
      detail::hadamard_row(d);
      int bad = 0;
      float amax = 0.0f;
      for (int i = 0; i < 128; ++i) {
        d[i] = d[i] * detail::kHadamardScale;
        amax = detail::amax_step(amax, d[i]);
        bad += !iqtest::same_float(d[i], pre[128 * t + i]);
      }
      EXPECT_EQ(bad, 0) << path << " token " << t << " y";
      const float scale = std::fmax(1e-4f, amax) / 448.0f;
      if (diag[4 * t + 2] == diag[4 * t + 2]) {  // amax NaN in the diagnostics: all 128 values NaN
        EXPECT_TRUE(iqtest::same_float(amax, diag[4 * t + 2])) << path << " token " << t << " amax";
      }
      EXPECT_TRUE(iqtest::same_float(scale, diag[4 * t + 3])) << path << " token " << t << " scale";
      ++rows;
    }
  }
  EXPECT_GT(rows, 0);
}

}  // namespace
