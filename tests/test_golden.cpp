// Golden conformance: every tests/data/golden/*.safetensors (produced by the reference CUDA
// kernel on an H200) through every backend this build and machine can run: the reference,
// the CPU backend for each supported ISA with 1, 2 and 3 threads, and CUDA when a device is
// usable. 0 differing fp8 bytes and 0 differing weights_out (bit comparison, NaN == NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;
namespace fs = std::filesystem;

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  const fs::path dir = fs::path(INDEXER_Q_TEST_DATA_DIR) / "golden";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// A conformance case as the harness's HostCase (same bytes).
iqtest::HostCase to_host_case(const io::ConformanceCase& k) {
  iqtest::HostCase c;
  c.B = k.B;
  c.H = k.H;
  c.max_pos = k.max_pos;
  c.weight_stride = k.H;
  c.dtype = k.dtype;
  c.pos_dtype = k.pos_dtype;
  c.weight_scale = k.weight_scale;
  c.q_input = k.q_input;
  c.weight = k.weight;
  c.freqs.resize(k.freqs.size() / 4);
  std::memcpy(c.freqs.data(), k.freqs.data(), k.freqs.size());
  c.positions = k.positions;
  return c;
}

TEST(Golden, DirectoryHoldsCases) {
  const auto files = golden_files();
  EXPECT_FALSE(files.empty()) << "no *.safetensors in " << INDEXER_Q_TEST_DATA_DIR << "/golden";
}

void check_all_golden(bool cuda_only) {
  const auto files = golden_files();
  ASSERT_FALSE(files.empty()) << "no *.safetensors in " << INDEXER_Q_TEST_DATA_DIR << "/golden";
  std::vector<iqtest::BackendUnderTest> backends;
  for (auto& be : iqtest::backends_under_test({1, 2, 3}))
    if (be.cuda == cuda_only) backends.push_back(be);
  ASSERT_FALSE(backends.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    io::ConformanceCase k;
    std::string err;
    ASSERT_TRUE(io::load_case_file(path, &k, &err)) << err;
    ASSERT_GT(k.B * k.H, 0);
    ASSERT_EQ(k.q_fp8.size(), std::size_t(k.B * k.H * 128));
    ASSERT_EQ(k.weights_out.size(), std::size_t(k.B * k.H));
    const iqtest::HostCase c = to_host_case(k);
    iqtest::Outputs want;
    want.q_fp8 = k.q_fp8;
    want.weights_out = k.weights_out;
    for (const auto& be : backends) {
      for (std::uint8_t poison : {std::uint8_t(0xA5), std::uint8_t(0x7f)}) {
        iqtest::Outputs got;
        const Status s = iqtest::run_case(be, c, &got, poison);
        ASSERT_TRUE(s.ok()) << be.name << ": " << s.message();
        const iqtest::Comparison cmp = iqtest::compare(got, want, k.H);
        EXPECT_TRUE(cmp.exact()) << be.name << " (poison 0x" << std::hex << int(poison) << std::dec
                                 << "): " << cmp.fp8_bytes << " fp8 bytes and " << cmp.weights
                                 << " weights_out differ from " << path << ";" << cmp.first;
        // The io library's own comparison agrees with ours.
        const io::Diff d = io::compare_outputs(got.q_fp8.data(), got.weights_out.data(), k.q_fp8.data(),
                                               k.weights_out.data(), k.B * k.H);
        EXPECT_EQ(d.fp8_bytes, cmp.fp8_bytes) << be.name;
        EXPECT_EQ(d.weights, cmp.weights) << be.name;
      }
    }
  }
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

// The golden comparison can fail: one flipped byte in the expected data is seen.
TEST(Golden, ComparisonSeesACorruptedExpectation) {
  const auto files = golden_files();
  ASSERT_FALSE(files.empty());
  io::ConformanceCase k;
  std::string err;
  ASSERT_TRUE(io::load_case_file(files.front(), &k, &err)) << err;
  iqtest::Outputs got, want;
  iqtest::BackendUnderTest ref = iqtest::backends_under_test({1}).front();
  ASSERT_TRUE(iqtest::run_case(ref, to_host_case(k), &got, 0).ok());
  want.q_fp8 = k.q_fp8;
  want.weights_out = k.weights_out;
  ASSERT_TRUE(iqtest::compare(got, want, k.H).exact());
  want.q_fp8[k.q_fp8.size() / 2] ^= 0x01;
  float& w = want.weights_out.back();
  w = std::isnan(w) ? 1.0f : iqtest::float_of(iqtest::bits_of(w) ^ 0x80000000u);  // sign flip
  const iqtest::Comparison cmp = iqtest::compare(got, want, k.H);
  EXPECT_EQ(cmp.fp8_bytes, 1);
  EXPECT_EQ(cmp.weights, 1);
}

}  // namespace
