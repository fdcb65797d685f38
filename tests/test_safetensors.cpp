// The safetensors reader/writer and conformance-case loader of tools/io (indexer_q_io).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/safetensors.h"

namespace {

using indexer_q::DType;
using namespace indexer_q::io;

// Raw file bytes from a header string and a data section (no validation: hostile files too).
std::vector<std::uint8_t> raw_file(const std::string& header, const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out(8);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[std::size_t(i)] = std::uint8_t(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

bool parse(const std::vector<std::uint8_t>& bytes, StFile* f, std::string* err) {
  return parse_safetensors(bytes.data(), bytes.size(), f, err);
}

// Expects a parse failure whose message contains `what`.
void expect_error(const std::vector<std::uint8_t>& bytes, const std::string& what) {
  StFile f;
  std::string err;
  EXPECT_FALSE(parse(bytes, &f, &err));
  EXPECT_NE(err.find(what), std::string::npos) << "error was: " << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << "error is not one line: " << err;
}

StTensor tensor(const std::string& dtype, std::vector<std::int64_t> shape, std::size_t elem, std::uint8_t fill) {
  StTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  std::size_t n = elem;
  for (auto d : t.shape) n *= std::size_t(d);
  t.data.resize(n);
  for (std::size_t i = 0; i < n; ++i) t.data[i] = std::uint8_t(fill + i * 7);
  return t;
}

// A small, consistent conformance case (B=2, H=3, max_pos=4), expected outputs arbitrary.
StFile small_case() {
  StFile f;
  f.tensors["q_input"] = tensor("BF16", {2, 3, 128}, 2, 1);
  f.tensors["weight"] = tensor("BF16", {2, 3}, 2, 2);
  f.tensors["freqs"] = tensor("F32", {4, 64}, 4, 3);
  StTensor pos;
  pos.dtype = "I32";
  pos.shape = {2};
  pos.data = {3, 0, 0, 0, 1, 0, 0, 0};
  f.tensors["positions"] = pos;
  f.tensors["q_fp8"] = tensor("F8_E4M3", {2, 3, 128}, 1, 4);
  f.tensors["weights_out"] = tensor("F32", {2, 3, 1}, 4, 5);
  f.metadata["weight_scale"] = "0.011048543266952038";
  f.metadata["note"] = "quote \" backslash \\ newline \n tab \t";
  return f;
}

std::string tmp_path(const char* name) {
  return ::testing::TempDir() + "/indexer_q_st_" + name + ".safetensors";
}

std::vector<std::uint8_t> file_bytes(const StFile& f) {
  const std::string p = tmp_path("bytes");
  std::string err;
  EXPECT_TRUE(write_safetensors(p, f, &err)) << err;
  std::vector<std::uint8_t> out;
  std::FILE* fp = std::fopen(p.c_str(), "rb");
  if (!fp) return out;
  int c;
  while ((c = std::fgetc(fp)) != EOF) out.push_back(std::uint8_t(c));
  std::fclose(fp);
  std::remove(p.c_str());
  return out;
}

TEST(Safetensors, RoundTripAndCase) {
  const StFile f = small_case();
  const std::string p = tmp_path("roundtrip");
  std::string err;
  ASSERT_TRUE(write_safetensors(p, f, &err)) << err;
  StFile g;
  ASSERT_TRUE(read_safetensors(p, &g, &err)) << err;
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const auto& kv : f.tensors) {
    const StTensor& t = g.tensors.at(kv.first);
    EXPECT_EQ(t.dtype, kv.second.dtype) << kv.first;
    EXPECT_EQ(t.shape, kv.second.shape) << kv.first;
    EXPECT_EQ(t.data, kv.second.data) << kv.first;
  }
  ConformanceCase c;
  ASSERT_TRUE(load_case_file(p, &c, &err)) << err;
  EXPECT_EQ(c.B, 2);
  EXPECT_EQ(c.H, 3);
  EXPECT_EQ(c.max_pos, 4);
  EXPECT_EQ(c.dtype, DType::kBFloat16);
  EXPECT_EQ(c.pos_dtype, DType::kInt32);
  EXPECT_EQ(c.weight_scale, float(0.011048543266952038));
  EXPECT_EQ(c.q_input, f.tensors.at("q_input").data);
  EXPECT_EQ(c.recipe, indexer_q::RecipeId::kV4Fp8);  // no "variant" metadata
  EXPECT_EQ(c.q_out, f.tensors.at("q_fp8").data);
  EXPECT_TRUE(c.q_sf.empty());
  EXPECT_EQ(c.out_bytes_per_row(), 128);
  ASSERT_EQ(c.weights_out.size(), 6u);
  EXPECT_EQ(std::memcmp(c.weights_out.data(), f.tensors.at("weights_out").data.data(), 24), 0);
  const auto v = c.q_input_view();
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.sizes[0], 2);
  EXPECT_EQ(v.strides[0], 3 * 128);
  std::remove(p.c_str());
}

TEST(Safetensors, HeaderIsPaddedToEightBytes) {
  const auto bytes = file_bytes(small_case());
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[std::size_t(i)];
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(Safetensors, GoldenFilesLoad) {
  const std::string dir = std::string(INDEXER_Q_TEST_DATA_DIR) + "/golden/";
  ConformanceCase c;
  std::string err;
  ASSERT_TRUE(load_case_file(dir + "b7_h16_i32_normal.safetensors", &c, &err)) << err;
  EXPECT_EQ(c.B, 7);
  EXPECT_EQ(c.H, 16);
  EXPECT_EQ(c.pos_dtype, DType::kInt32);
  EXPECT_EQ(c.q_out.size(), 7u * 16 * 128);
}

TEST(Safetensors, Truncated) {
  const auto good = file_bytes(small_case());
  StFile f;
  std::string err;
  ASSERT_TRUE(parse(good, &f, &err)) << err;
  // Every proper prefix must be refused with a message, never crash.
  for (std::size_t n = 0; n < good.size(); n += (n < 64 ? 1 : 37)) {
    std::vector<std::uint8_t> cut(good.begin(), good.begin() + std::ptrdiff_t(n));
    StFile g;
    std::string e;
    EXPECT_FALSE(parse(cut, &g, &e)) << "prefix of " << n << " bytes accepted";
    EXPECT_FALSE(e.empty());
  }
  std::vector<std::uint8_t> cut(good.begin(), good.end() - 1);
  expect_error(cut, "truncated");
  expect_error({1, 2, 3}, "truncated");
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  std::vector<std::uint8_t> b = raw_file("{}", {});
  b[6] = 0xff;  // a huge length: must not allocate it
  expect_error(b, "header length");
}

TEST(Safetensors, BadJson) {
  const std::vector<std::uint8_t> d(4, 0);
  const std::string t = R"("t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_error(raw_file("{" + t, d), "bad JSON");                          // unterminated
  expect_error(raw_file("{" + t + ",}", d), "bad JSON");                   // trailing comma
  expect_error(raw_file("{\"t\":{\"dtype\":F32}}", d), "bad JSON");        // bare word
  expect_error(raw_file("{" + t + "} x", d), "bad JSON");                  // junk after value
  expect_error(raw_file("{\"a\":\"\x01\"}", d), "bad JSON");               // control char
  expect_error(raw_file("{\"a\":\"\xff\"}", d), "bad JSON");               // invalid UTF-8
  expect_error(raw_file("[1,2]", d), "must be an object");
  expect_error(raw_file(std::string(200, '[') + std::string(200, ']'), d), "must be an object");
  expect_error(raw_file("{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}", d), "nesting");
  expect_error(raw_file("{" + t + "," + t + "}", d), "duplicate key");
  // Trailing spaces (the writer's padding) are fine.
  StFile f;
  std::string err;
  EXPECT_TRUE(parse(raw_file("{" + t + "}    ", d), &f, &err)) << err;
}

TEST(Safetensors, JsonStrings) {
  JsonValue v;
  std::string err;
  const std::string s = R"({"k":"a\"b\\c\n\u00e9\ud83d\ude00"})";
  ASSERT_TRUE(parse_json(s.data(), s.size(), &v, &err)) << err;
  EXPECT_EQ(v.find("k")->text, "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
  const std::string lone = R"({"k":"\ud83d"})";
  EXPECT_FALSE(parse_json(lone.data(), lone.size(), &v, &err));
  std::string out;
  append_json_string("q\"\\\x01", &out);
  EXPECT_EQ(out, "\"q\\\"\\\\\\u0001\"");
}

TEST(Safetensors, BadTensorEntries) {
  const std::vector<std::uint8_t> d(8, 0);
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[2]}})", d), "data_offsets");
  expect_error(raw_file(R"({"t":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", d), "unknown dtype");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d), "non-negative");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d), "non-negative");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d), "unexpected key");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d), "begin > end");
  expect_error(raw_file(R"({"t":[1]})", d), "must be an object");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[99999999999,99999999999],"data_offsets":[0,8]}})", d),
               "size mismatch");
}

TEST(Safetensors, OffsetsOutOfRangeOverlappingOrGaps) {
  const std::vector<std::uint8_t> d(8, 0);
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d), "run past");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("u":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d),
               "overlaps");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d), "gap");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d), "not covered");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,99999999999999999999]}})", d),
               "data_offsets");
}

TEST(Safetensors, SizeMismatch) {
  const std::vector<std::uint8_t> d(12, 0);
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", d), "size mismatch");
  // The writer refuses inconsistent tensors too.
  StFile f;
  f.tensors["t"] = tensor("F32", {3}, 4, 0);
  f.tensors["t"].data.pop_back();
  std::string err;
  EXPECT_FALSE(write_safetensors(tmp_path("bad_write"), f, &err));
  EXPECT_NE(err.find("holds 11 bytes"), std::string::npos) << err;
}

TEST(Safetensors, Metadata) {
  const std::vector<std::uint8_t> d(4, 0);
  const std::string t = R"("t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_error(raw_file(R"({"__metadata__":{"weight_scale":0.5},)" + t + "}", d), "must be a string");
  expect_error(raw_file(R"({"__metadata__":[1],)" + t + "}", d), "must be an object");
  StFile f;
  std::string err;
  ASSERT_TRUE(parse(raw_file(R"({"__metadata__":{"a":"b"},)" + t + "}", d), &f, &err)) << err;
  EXPECT_EQ(f.metadata.at("a"), "b");
}

void expect_case_error(const StFile& f, const std::string& what) {
  ConformanceCase c;
  std::string err;
  EXPECT_FALSE(load_case(f, &c, &err));
  EXPECT_NE(err.find(what), std::string::npos) << "error was: " << err;
}

TEST(Safetensors, MissingTensor) {
  for (const char* name : {"q_input", "weight", "freqs", "positions", "q_fp8", "weights_out"}) {
    StFile f = small_case();
    f.tensors.erase(name);
    expect_case_error(f, std::string("missing tensor '") + name + "'");
  }
}

TEST(Safetensors, InconsistentShapesAndDtypes) {
  // small_case() with one tensor replaced, and the error that names it.
  const struct {
    const char* name;
    StTensor replacement;
    const char* error;
  } bad[] = {
      {"weight", tensor("BF16", {2, 4}, 2, 0), "inconsistent shapes: tensor 'weight'"},
      {"q_fp8", tensor("F8_E4M3", {3, 3, 128}, 1, 0), "inconsistent shapes: tensor 'q_fp8'"},
      {"weights_out", tensor("F32", {2, 3, 2}, 4, 0), "inconsistent shapes: tensor 'weights_out'"},
      {"q_input", tensor("BF16", {2, 3, 64}, 2, 0), "tensor 'q_input' has shape"},
      {"freqs", tensor("F32", {4, 32}, 4, 0), "tensor 'freqs' has shape"},
      {"weight", tensor("I32", {2, 3}, 4, 0), "tensor 'weight' has dtype I32"},
      {"q_fp8", tensor("BF16", {2, 3, 128}, 2, 0), "tensor 'q_fp8' has dtype BF16"},
  };
  for (const auto& b : bad) {
    StFile f = small_case();
    f.tensors[b.name] = b.replacement;
    expect_case_error(f, b.error);
  }
  StFile f = small_case();
  f.tensors["q_fp8"] = tensor("U8", {2, 3, 128}, 1, 0);  // raw codes: accepted
  {
    ConformanceCase ok;
    std::string err;
    EXPECT_TRUE(load_case(f, &ok, &err)) << err;
  }
  f = small_case();
  f.tensors["positions"].data = {9, 0, 0, 0, 0, 0, 0, 0};  // 9 >= max_pos = 4
  expect_case_error(f, "positions[0] = 9");
}

TEST(Safetensors, WeightScale) {
  StFile f = small_case();
  f.metadata.erase("weight_scale");
  expect_case_error(f, "weight_scale");
  for (const char* bad : {"", "abc", "0.5x", " 0.5", "1e999"}) {
    f.metadata["weight_scale"] = bad;
    expect_case_error(f, "weight_scale");
  }
  f.metadata["weight_scale"] = "0.1";
  ConformanceCase c;
  std::string err;
  ASSERT_TRUE(load_case(f, &c, &err)) << err;
  EXPECT_EQ(c.weight_scale, float(0.1));  // strtod -> double -> float
}

// An expected case of B = 1, H = 2 for compare_outputs (only recipe, B, H, q_out, q_sf, weights_out read).
ConformanceCase expected_case(indexer_q::RecipeId r, std::vector<std::uint8_t> q, std::vector<std::uint8_t> sf,
                              std::vector<float> w) {
  ConformanceCase c;
  c.recipe = r;
  c.B = 1;
  c.H = std::int64_t(w.size());
  c.q_out = std::move(q);
  c.q_sf = std::move(sf);
  c.weights_out = std::move(w);
  return c;
}

TEST(Safetensors, CompareOutputs) {
  std::vector<std::uint8_t> a(2 * 128, 1), b(2 * 128, 1);
  const std::uint32_t canon = 0x7fffffffu, other = 0x7fc00000u;
  float nan_a, nan_b, nan_c;
  std::memcpy(&nan_a, &canon, 4);
  std::memcpy(&nan_b, &canon, 4);
  std::memcpy(&nan_c, &other, 4);
  std::vector<float> wa = {1.0f, nan_a}, wb = {1.0f, nan_b};
  Diff d = compare_outputs(expected_case(indexer_q::RecipeId::kV4Fp8, b, {}, wb), a.data(), nullptr, wa.data());
  EXPECT_TRUE(d.exact());  // the same NaN bits
  wb[1] = nan_c;
  d = compare_outputs(expected_case(indexer_q::RecipeId::kV4Fp8, b, {}, wb), a.data(), nullptr, wa.data());
  EXPECT_EQ(d.weights, 1);  // a NaN of other bits differs
  wb[1] = nan_b;
  b[130] = 2;
  wb[0] = -1.0f;
  d = compare_outputs(expected_case(indexer_q::RecipeId::kV4Fp8, b, {}, wb), a.data(), nullptr, wa.data());
  EXPECT_EQ(d.q_bytes, 1);
  EXPECT_EQ(d.sf_bytes, 0);
  EXPECT_EQ(d.weights, 1);
  ASSERT_EQ(d.first_q.size(), 1u);
  EXPECT_EQ(d.first_q[0], 130);
  ASSERT_EQ(d.first_weights.size(), 1u);
  EXPECT_EQ(d.first_weights[0], 0);
  float z = 0.0f, nz = -0.0f;  // bit comparison: +0 and -0 differ
  ConformanceCase one = expected_case(indexer_q::RecipeId::kV4Fp8, std::vector<std::uint8_t>(128, 1), {}, {nz});
  d = compare_outputs(one, a.data(), nullptr, &z);
  EXPECT_EQ(d.weights, 1);
  // Only the first B*H*128 bytes are compared.
  d = compare_outputs(one, a.data(), nullptr, &nz);
  EXPECT_TRUE(d.exact());
}

TEST(Safetensors, CompareOutputsFp4) {
  // FP4: 64 code bytes and 4 scale bytes a row.
  std::vector<std::uint8_t> q(2 * 64, 0x21), sf(2 * 4, 0x7f);
  std::vector<float> w = {0.5f, -2.0f};
  const ConformanceCase k = expected_case(indexer_q::RecipeId::kV4Fp4, q, sf, w);
  EXPECT_EQ(k.out_bytes_per_row(), 64);
  Diff d = compare_outputs(k, q.data(), sf.data(), w.data());
  EXPECT_TRUE(d.exact());
  std::vector<std::uint8_t> q2 = q, sf2 = sf;
  q2[127] ^= 0x80;
  sf2[5] = 0x80;
  sf2[7] = 0x00;
  d = compare_outputs(k, q2.data(), sf2.data(), w.data());
  EXPECT_EQ(d.q_bytes, 1);
  EXPECT_EQ(d.sf_bytes, 2);
  EXPECT_EQ(d.weights, 0);
  ASSERT_EQ(d.first_q.size(), 1u);
  EXPECT_EQ(d.first_q[0], 127);
  ASSERT_EQ(d.first_sf.size(), 2u);
  EXPECT_EQ(d.first_sf[0], 5);
  EXPECT_EQ(d.first_sf[1], 7);
  EXPECT_FALSE(d.exact());
  // A missing q_sf (null) is a difference in every scale byte.
  d = compare_outputs(k, q.data(), nullptr, w.data());
  EXPECT_EQ(d.sf_bytes, 8);
}

TEST(Safetensors, VariantMetadataSelectsTheRecipe) {
  StFile f = small_case();
  f.metadata["variant"] = "v32_fp8";
  ConformanceCase c;
  std::string err;
  ASSERT_TRUE(load_case(f, &c, &err)) << err;
  EXPECT_EQ(c.recipe, indexer_q::RecipeId::kV32Fp8);
  f.metadata["variant"] = "v5_fp2";
  expect_case_error(f, "variant");
  // FP4: q_fp4 (B, H, 64) uint8 and q_sf (B, H) int32 are required.
  f = small_case();
  f.metadata["variant"] = "v4_fp4";
  f.tensors.erase("q_fp8");
  f.tensors["q_fp4"] = tensor("U8", {2, 3, 64}, 1, 9);
  expect_case_error(f, "q_sf");
  f.tensors["q_sf"] = tensor("I32", {2, 3}, 4, 11);
  ASSERT_TRUE(load_case(f, &c, &err)) << err;
  EXPECT_EQ(c.recipe, indexer_q::RecipeId::kV4Fp4);
  EXPECT_EQ(c.out_bytes_per_row(), 64);
  EXPECT_EQ(c.q_out, f.tensors.at("q_fp4").data);
  EXPECT_EQ(c.q_sf, f.tensors.at("q_sf").data);
  f.tensors["q_fp4"] = tensor("U8", {2, 3, 128}, 1, 9);
  expect_case_error(f, "q_fp4");
}

TEST(Safetensors, DeriveFnuzCase) {
  StFile f = small_case();
  ConformanceCase fn, fnuz;
  std::string err;
  ASSERT_TRUE(load_case(f, &fn, &err)) << err;
  fn.q_out[0] = 0x80;
  fn.q_out[1] = 0x00;
  fn.q_out[2] = 0xfe;
  fn.q_out[3] = 0x81;
  fn.weights_out[0] = 1.5f;
  fn.weights_out[1] = -0.0f;
  ASSERT_TRUE(derive_fnuz_case(fn, &fnuz));
  EXPECT_EQ(fnuz.recipe, indexer_q::RecipeId::kV4Fp8Fnuz);
  EXPECT_EQ(fnuz.q_out[0], 0x00);
  EXPECT_EQ(fnuz.q_out[1], 0x00);
  EXPECT_EQ(fnuz.q_out[2], 0xfe);
  EXPECT_EQ(fnuz.q_out[3], 0x81);
  for (std::size_t i = 0; i < fn.q_out.size(); ++i)
    EXPECT_EQ(fnuz.q_out[i], fn.q_out[i] == 0x80 ? 0x00 : fn.q_out[i]) << i;
  EXPECT_EQ(fnuz.weights_out[0], 3.0f);
  EXPECT_TRUE(std::signbit(fnuz.weights_out[1]));
  EXPECT_EQ(fnuz.q_input, fn.q_input);
  // FP4 and FNUZ cases have no FNUZ form.
  ConformanceCase again;
  EXPECT_FALSE(derive_fnuz_case(fnuz, &again));
  fn.recipe = indexer_q::RecipeId::kV4Fp4;
  EXPECT_FALSE(derive_fnuz_case(fn, &again));
}

TEST(Safetensors, ReadMissingFile) {
  StFile f;
  std::string err;
  EXPECT_FALSE(read_safetensors(tmp_path("does_not_exist"), &f, &err));
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
}

}  // namespace
