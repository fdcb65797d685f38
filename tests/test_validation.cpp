// Every error path of validate() / fused_q_indexer_rope_hadamard_quant() (src/api.cpp).
// For each case: the status code, a message naming the argument and what was expected, the
// same message from validate() and from the op, and not one byte of memory changed: all
// tensors live in one arena (inputs filled with valid data, outputs with a sentinel) that is
// compared byte for byte before and after each call.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "indexer_q/indexer_q.h"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;

constexpr std::int64_t kB = 3, kH = 4, kMaxPos = 16;

// Byte offsets of the regions of the arena (each larger than its tensor, for strided variants).
constexpr std::size_t kQ = 0;                 // q_input: bf16 3*4*128*2 = 3072 bytes; region 12288
constexpr std::size_t kF8 = kQ + 12288;       // q_fp8: 1536 bytes; region 3072
constexpr std::size_t kW = kF8 + 3072;        // weight: bf16 24 bytes; region 256
constexpr std::size_t kWO = kW + 256;         // weights_out: 48 bytes; region 256
constexpr std::size_t kFR = kWO + 256;        // freqs: 16*64*4 = 4096 bytes; region 8192
constexpr std::size_t kP = kFR + 8192;        // positions: up to 24 bytes; region 64
constexpr std::size_t kSpare = kP + 64;       // free room for overlap cases; 4096
constexpr std::size_t kArena = kSpare + 4096;
constexpr std::uint8_t kSentinel = 0xA5;

struct Args {
  TensorView q, f8, w, wo, fr, pos;
  float weight_scale = 0.5f;
  Options opt;
};

class Validation : public testing::Test {
 protected:
  void SetUp() override {
    arena_.assign(kArena / 8 + 1, 0);
    reset();
  }
  std::uint8_t* at(std::size_t off) { return reinterpret_cast<std::uint8_t*>(arena_.data()) + off; }

  // Valid inputs, sentinel outputs (and sentinel in the spare room).
  void reset() {
    std::uint8_t* base = at(0);
    std::memset(base, 0, kArena);
    for (std::int64_t i = 0; i < kB * kH * 128; ++i) {
      const std::uint16_t v = iqtest::to_bf16(float((i * 37) % 11) - 5.0f);
      std::memcpy(at(kQ) + 2 * i, &v, 2);
    }
    for (std::int64_t i = 0; i < 64; ++i) {
      const std::uint16_t v = iqtest::to_bf16(0.25f * float(i + 1));
      std::memcpy(at(kW) + 2 * i, &v, 2);
    }
    const std::vector<float> fr = iqtest::rope_freqs(kMaxPos);
    std::memcpy(at(kFR), fr.data(), fr.size() * 4);
    set_pos64({0, 7, kMaxPos - 1});
    std::memset(at(kQ + 3072), kSentinel, 12288 - 3072);  // unused tail of the q_input region
    std::memset(at(kF8), kSentinel, 3072);
    std::memset(at(kWO), kSentinel, 256);
    std::memset(at(kSpare), kSentinel, 4096);
  }
  void set_pos64(std::vector<std::int64_t> p) { std::memcpy(at(kP), p.data(), p.size() * 8); }
  void set_pos32(std::vector<std::int32_t> p) { std::memcpy(at(kP), p.data(), p.size() * 4); }

  Args valid() {
    Args a;
    a.q = TensorView::contiguous(at(kQ), DType::kBFloat16, {kB, kH, 128});
    a.f8 = TensorView::contiguous(at(kF8), DType::kFloat8E4M3, {kB, kH, 128});
    a.w = TensorView::contiguous(at(kW), DType::kBFloat16, {kB, kH});
    a.wo = TensorView::contiguous(at(kWO), DType::kFloat32, {kB, kH, 1});
    a.fr = TensorView::contiguous(at(kFR), DType::kFloat32, {kMaxPos, 64});
    a.pos = TensorView::contiguous(at(kP), DType::kInt64, {kB});
    a.opt.backend = Backend::kReference;
    return a;
  }

  static Status call_validate(const Args& a) {
    return validate(a.q, a.f8, a.w, a.wo, a.weight_scale, a.fr, a.pos, a.opt);
  }
  static Status call_op(const Args& a) {
    return fused_q_indexer_rope_hadamard_quant(a.q, a.f8, a.w, a.wo, a.weight_scale, a.fr, a.pos, a.opt);
  }

  // One error case: `mutate` edits the arguments (and may edit input memory); the call must
  // fail with `code`, its message must contain every string of `needles`, validate() must say
  // the same (when `validate_agrees`), and no byte of the arena may change.
  void expect_error(const std::string& what, const std::function<void(Args&)>& mutate, StatusCode code,
                    std::vector<std::string> needles, bool validate_agrees = true) {
    SCOPED_TRACE(what);
    reset();
    Args a = valid();
    mutate(a);
    const std::vector<std::uint64_t> before = arena_;
    const Status sv = call_validate(a);
    EXPECT_TRUE(arena_ == before) << "validate() changed memory";
    const Status so = call_op(a);
    EXPECT_TRUE(arena_ == before) << "the op changed memory although it failed";
    EXPECT_EQ(int(so.code()), int(code)) << so.message();
    EXPECT_EQ(so.message().rfind("indexer_q: ", 0), 0u) << so.message();
    for (const std::string& n : needles)
      EXPECT_NE(so.message().find(n), std::string::npos) << "message '" << so.message() << "' lacks '" << n << "'";
    if (validate_agrees) {
      EXPECT_EQ(int(sv.code()), int(so.code()));
      EXPECT_EQ(sv.message(), so.message());
    }
    ++cases_;
  }

  // A valid call: both entry points say ok and the op writes both outputs.
  void expect_ok(const std::string& what, const std::function<void(Args&)>& mutate,
                 std::size_t f8_off, std::size_t wo_off) {
    SCOPED_TRACE(what);
    reset();
    Args a = valid();
    mutate(a);
    const Status sv = call_validate(a);
    EXPECT_TRUE(sv.ok()) << sv.message();
    const Status so = call_op(a);
    ASSERT_TRUE(so.ok()) << so.message();
    int f8_written = 0, wo_written = 0;
    for (std::size_t i = 0; i < 1536; ++i) f8_written += at(f8_off)[i] != kSentinel;
    for (std::size_t i = 0; i < 48; ++i) wo_written += at(wo_off)[i] != kSentinel;
    EXPECT_GT(f8_written, 0);
    EXPECT_GT(wo_written, 0);
  }

  std::vector<std::uint64_t> arena_;
  int cases_ = 0;
};

const DType kBf16 = DType::kBFloat16, kF32 = DType::kFloat32, kFp8 = DType::kFloat8E4M3;

TEST_F(Validation, BaselineIsValidAndWrites) {
  expect_ok("baseline", [](Args&) {}, kF8, kWO);
  expect_ok("cpu backend", [](Args& a) { a.opt.backend = Backend::kCpu; }, kF8, kWO);
  expect_ok("auto backend", [](Args& a) { a.opt.backend = Backend::kAuto; }, kF8, kWO);
  expect_ok("last valid position", [&](Args&) { set_pos64({kMaxPos - 1, kMaxPos - 1, 0}); }, kF8, kWO);
  expect_ok("int32 positions", [&](Args& a) {
    set_pos32({kMaxPos - 1, 0, 3});
    a.pos = TensorView::contiguous(at(kP), DType::kInt32, {kB});
  }, kF8, kWO);
  expect_ok("weight row stride H + 5", [&](Args& a) {
    a.w = TensorView::strided(at(kW), kBf16, {kB, kH}, {kH + 5, 1});
  }, kF8, kWO);
  expect_ok("q_fp8 right after q_input (adjacent, not overlapping)", [&](Args& a) {
    a.f8 = TensorView::contiguous(at(kQ + 3072), kFp8, {kB, kH, 128});
  }, kQ + 3072, kWO);
  expect_ok("weights_out right after q_fp8", [&](Args& a) {
    a.wo = TensorView::contiguous(at(kF8 + 1536), kF32, {kB, kH, 1});
  }, kF8, kF8 + 1536);
  expect_ok("num_threads 0 (default)", [](Args& a) {
    a.opt.backend = Backend::kCpu;
    a.opt.num_threads = 0;
  }, kF8, kWO);
}

TEST_F(Validation, RanksAndSizes) {
  const auto IA = StatusCode::kInvalidArgument;
  expect_error("q_input rank 2", [&](Args& a) { a.q = TensorView::contiguous(at(kQ), kBf16, {kB, kH * 128}); },
               IA, {"q_input", "3 dims", "(B, H, 128)"});
  expect_error("q_input rank 4", [&](Args& a) { a.q = TensorView::contiguous(at(kQ), kBf16, {kB, kH, 128, 1}); },
               IA, {"q_input", "3 dims"});
  expect_error("q_input strides count", [&](Args& a) {
    a.q = TensorView::strided(at(kQ), kBf16, {kB, kH, 128}, {kH * 128, 128});
  }, IA, {"q_input", "3 dims"});
  expect_error("head dim 64", [&](Args& a) { a.q = TensorView::contiguous(at(kQ), kBf16, {kB, kH, 64}); },
               IA, {"q_input", "head dim must be 128", "64"});
  expect_error("head dim 256", [&](Args& a) { a.q = TensorView::contiguous(at(kQ), kBf16, {kB, kH / 2, 256}); },
               IA, {"q_input", "head dim must be 128", "256"});
  expect_error("negative B", [&](Args& a) { a.q = TensorView::contiguous(at(kQ), kBf16, {-1, kH, 128}); },
               IA, {"q_input", "B must be >= 0"});
  expect_error("H = 0", [&](Args& a) {
    a.q = TensorView::contiguous(at(kQ), kBf16, {kB, 0, 128});
    a.f8 = TensorView::contiguous(at(kF8), kFp8, {kB, 0, 128});
    a.w = TensorView::contiguous(at(kW), kBf16, {kB, 0});
    a.wo = TensorView::contiguous(at(kWO), kF32, {kB, 0, 1});
  }, IA, {"q_input", "H must be >= 1", "got 0"});
  expect_error("H = 0, B = 0", [&](Args& a) {
    a.q = TensorView::contiguous(nullptr, kBf16, {0, 0, 128});
  }, IA, {"q_input", "H must be >= 1"});

  for (auto sizes : {std::vector<std::int64_t>{kB, kH, 64}, {kB - 1, kH, 128}, {kB, kH + 1, 128}}) {
    expect_error("q_fp8 shape", [&](Args& a) {
      a.f8 = TensorView::contiguous(at(kF8), kFp8, {sizes[0], sizes[1], sizes[2]});
    }, IA, {"q_fp8", "expected shape (3, 4, 128)"});
  }
  expect_error("q_fp8 rank 2", [&](Args& a) { a.f8 = TensorView::contiguous(at(kF8), kFp8, {kB * kH, 128}); },
               IA, {"q_fp8", "expected shape (3, 4, 128)", "got (12, 128)"});
  expect_error("q_fp8 strides count", [&](Args& a) {
    a.f8 = TensorView::strided(at(kF8), kFp8, {kB, kH, 128}, {kH * 128, 128});
  }, IA, {"q_fp8", "different lengths"});

  for (auto sizes : {std::vector<std::int64_t>{kB, kH + 1}, {kB + 1, kH}, {kB, kH - 1}}) {
    expect_error("weight shape", [&](Args& a) {
      a.w = TensorView::contiguous(at(kW), kBf16, {sizes[0], sizes[1]});
    }, IA, {"weight", "expected shape (3, 4)"});
  }
  expect_error("weight rank 3", [&](Args& a) { a.w = TensorView::contiguous(at(kW), kBf16, {kB, kH, 1}); },
               IA, {"weight", "expected shape (3, 4)"});
  expect_error("weight strides count", [&](Args& a) {
    a.w = TensorView::strided(at(kW), kBf16, {kB, kH}, {kH});
  }, IA, {"weight", "different lengths"});

  // (B, H) is vLLM's shape: accepted for every recipe (RecipeValidation.WeightsOutShapes)
  expect_ok("weights_out (B, H)", [&](Args& a) { a.wo = TensorView::contiguous(at(kWO), kF32, {kB, kH}); }, kF8,
            kWO);
  expect_error("weights_out (H, B)", [&](Args& a) { a.wo = TensorView::contiguous(at(kWO), kF32, {kH, kB}); },
               IA, {"weights_out", "expected shape (3, 4, 1) = (B, H, 1) or (3, 4) = (B, H)", "got (4, 3)"});
  expect_error("weights_out last dim 2", [&](Args& a) {
    a.wo = TensorView::contiguous(at(kWO), kF32, {kB, kH / 2, 2});
  }, IA, {"weights_out", "expected shape (3, 4, 1)"});
  expect_error("weights_out H mismatch", [&](Args& a) {
    a.wo = TensorView::contiguous(at(kWO), kF32, {kB, kH + 1, 1});
  }, IA, {"weights_out", "expected shape (3, 4, 1)"});

  expect_error("freqs last dim 32", [&](Args& a) { a.fr = TensorView::contiguous(at(kFR), kF32, {kMaxPos, 32}); },
               IA, {"freqs", "expected shape (max_pos, 64)", "got (16, 32)"});
  expect_error("freqs last dim 128", [&](Args& a) {
    a.fr = TensorView::contiguous(at(kFR), kF32, {kMaxPos / 2, 128});
  }, IA, {"freqs", "(max_pos, 64)"});
  expect_error("freqs rank 1", [&](Args& a) { a.fr = TensorView::contiguous(at(kFR), kF32, {kMaxPos * 64}); },
               IA, {"freqs", "(max_pos, 64)"});
  expect_error("freqs rank 3", [&](Args& a) { a.fr = TensorView::contiguous(at(kFR), kF32, {kMaxPos, 64, 1}); },
               IA, {"freqs", "(max_pos, 64)"});
  expect_error("freqs negative rows", [&](Args& a) { a.fr = TensorView::contiguous(at(kFR), kF32, {-2, 64}); },
               IA, {"freqs", "(max_pos, 64)"});
  expect_error("max_pos = 0", [&](Args& a) { a.fr = TensorView::contiguous(at(kFR), kF32, {0, 64}); },
               IA, {"freqs", "max_pos = 0"});
  expect_error("max_pos = 0, null data", [&](Args& a) { a.fr = TensorView::contiguous(nullptr, kF32, {0, 64}); },
               IA, {"freqs", "max_pos = 0"});

  for (std::int64_t n : {kB - 1, kB + 1, std::int64_t(0)}) {
    expect_error("positions length " + std::to_string(n), [&](Args& a) {
      a.pos = TensorView::contiguous(at(kP), DType::kInt64, {n});
    }, IA, {"positions", "expected shape (3,) = (B,)"});
  }
  expect_error("positions rank 2", [&](Args& a) { a.pos = TensorView::contiguous(at(kP), DType::kInt64, {kB, 1}); },
               IA, {"positions", "(B,)"});
}

TEST_F(Validation, Dtypes) {
  const auto IA = StatusCode::kInvalidArgument;
  for (DType dt : {DType::kInt32, DType::kInt64, DType::kFloat8E4M3}) {
    expect_error(std::string("q_input ") + dtype_name(dt), [&](Args& a) {
      a.q.dtype = dt;
      a.w.dtype = dt;  // so that only q_input's own check can fire
    }, IA, {"q_input", "expected dtype bf16, fp16 or fp32", dtype_name(dt)});
  }
  for (DType dt : {DType::kBFloat16, DType::kFloat32, DType::kInt32}) {
    expect_error(std::string("q_fp8 ") + dtype_name(dt), [&](Args& a) { a.f8.dtype = dt; }, IA,
                 {"q_fp8", "expected dtype fp8_e4m3fn", dtype_name(dt)});
  }
  // weight: any float dtype whatever q_input's; the rest is refused.
  for (DType dt : {DType::kInt64, DType::kInt32, DType::kFloat8E4M3, DType::kUInt8}) {
    expect_error(std::string("weight ") + dtype_name(dt), [&](Args& a) { a.w.dtype = dt; }, IA,
                 {"weight", "expected dtype bf16, fp16 or fp32", dtype_name(dt)});
  }
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kInt32}) {
    expect_error(std::string("weights_out ") + dtype_name(dt), [&](Args& a) { a.wo.dtype = dt; }, IA,
                 {"weights_out", "expected dtype fp32", dtype_name(dt)});
  }
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kInt32}) {
    expect_error(std::string("freqs ") + dtype_name(dt), [&](Args& a) { a.fr.dtype = dt; }, IA,
                 {"freqs", "expected dtype fp32", dtype_name(dt)});
  }
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat8E4M3}) {
    expect_error(std::string("positions ") + dtype_name(dt), [&](Args& a) { a.pos.dtype = dt; }, IA,
                 {"positions", "expected dtype int32 or int64", dtype_name(dt)});
  }
}

TEST_F(Validation, Strides) {
  const auto IA = StatusCode::kInvalidArgument;
  const std::vector<std::vector<std::int64_t>> bad_row_strides = {
      {kH * 128, 128, 2}, {kH * 256, 256, 1}, {kH * 128 + 128, 128, 1}, {128, kB * 128, 1}, {kH * 128, 1, kH}};
  for (const auto& st : bad_row_strides) {
    expect_error("q_input strides", [&](Args& a) {
      a.q = TensorView::strided(at(kQ), kBf16, {kB, kH, 128}, {st[0], st[1], st[2]});
    }, IA, {"q_input", "unsupported strides", "(H*128, 128, 1)"});
    expect_error("q_fp8 strides", [&](Args& a) {
      a.f8 = TensorView::strided(at(kF8), kFp8, {kB, kH, 128}, {st[0], st[1], st[2]});
    }, IA, {"q_fp8", "unsupported strides"});
  }
  expect_error("weight stride(1) = 2", [&](Args& a) {
    a.w = TensorView::strided(at(kW), kBf16, {kB, kH}, {2 * kH, 2});
  }, IA, {"weight", "unsupported strides (8, 2)", "stride(1) = 1 and stride(0) >= H"});
  expect_error("weight stride(0) < H", [&](Args& a) {
    a.w = TensorView::strided(at(kW), kBf16, {kB, kH}, {kH - 1, 1});
  }, IA, {"weight", "stride(0) >= H"});
  expect_error("weight stride(0) = 0", [&](Args& a) {
    a.w = TensorView::strided(at(kW), kBf16, {kB, kH}, {0, 1});
  }, IA, {"weight", "stride(0) >= H"});
  expect_error("weight stride(0) negative", [&](Args& a) {
    a.w = TensorView::strided(at(kW), kBf16, {kB, kH}, {-kH, 1});
  }, IA, {"weight", "stride(0) >= H"});
  expect_error("weights_out stride(0) = H + 1", [&](Args& a) {
    a.wo = TensorView::strided(at(kWO), kF32, {kB, kH, 1}, {kH + 1, 1, 1});
  }, IA, {"weights_out", "unsupported strides", "(H, 1, 1)"});
  expect_error("weights_out stride(1) = 2", [&](Args& a) {
    a.wo = TensorView::strided(at(kWO), kF32, {kB, kH, 1}, {2 * kH, 2, 1});
  }, IA, {"weights_out", "unsupported strides"});
  expect_error("freqs stride(0) = 128", [&](Args& a) {
    a.fr = TensorView::strided(at(kFR), kF32, {kMaxPos / 2, 64}, {128, 1});
  }, IA, {"freqs", "unsupported strides", "(64, 1)"});
  expect_error("freqs stride(1) = 2", [&](Args& a) {
    a.fr = TensorView::strided(at(kFR), kF32, {kMaxPos / 2, 64}, {128, 2});
  }, IA, {"freqs", "unsupported strides"});
  expect_error("positions stride 2", [&](Args& a) {
    a.pos = TensorView::strided(at(kP), DType::kInt32, {kB}, {2});
  }, IA, {"positions", "unsupported strides (2,)", "(1,)"});
}

TEST_F(Validation, Devices) {
  const auto IA = StatusCode::kInvalidArgument;
  const Device cuda0{DeviceType::kCUDA, 0}, cuda1{DeviceType::kCUDA, 1};
  const char* names[] = {"q_fp8", "weight", "weights_out", "freqs", "positions"};
  for (int t = 0; t < 5; ++t) {
    expect_error(std::string(names[t]) + " on cuda", [&](Args& a) {
      TensorView* v[] = {&a.f8, &a.w, &a.wo, &a.fr, &a.pos};
      v[t]->device = cuda0;
    }, IA, {names[t], "expected the device of q_input (cpu), got cuda:0"});
  }
  expect_error("q_input on cuda, others on cpu", [&](Args& a) { a.q.device = cuda0; }, IA,
               {"q_fp8", "expected the device of q_input (cuda:0), got cpu"});
  expect_error("two CUDA ordinals", [&](Args& a) {
    for (TensorView* v : {&a.q, &a.f8, &a.w, &a.wo, &a.fr, &a.pos}) v->device = cuda0;
    a.wo.device = cuda1;
    a.opt.backend = Backend::kCuda;
  }, IA, {"weights_out", "(cuda:0), got cuda:1"});

  // Backend / device mismatch. The CUDA views point at addresses that must never be touched:
  // validation has to fail before any access.
  auto bogus_cuda = [&](Args& a) {
    std::uintptr_t addr = 0x1000;
    for (TensorView* v : {&a.q, &a.f8, &a.w, &a.wo, &a.fr, &a.pos}) {
      v->device = cuda0;
      v->data = reinterpret_cast<void*>(addr);
      addr += 0x100000;
    }
  };
  expect_error("reference backend with cuda tensors", [&](Args& a) {
    bogus_cuda(a);
    a.opt.backend = Backend::kReference;
  }, IA, {"options.backend", "backend 'reference' needs cpu tensors, got cuda tensors"});
  expect_error("cpu backend with cuda tensors", [&](Args& a) {
    bogus_cuda(a);
    a.opt.backend = Backend::kCpu;
  }, IA, {"options.backend", "backend 'cpu' needs cpu tensors"});
  expect_error("cuda backend with cpu tensors", [&](Args& a) { a.opt.backend = Backend::kCuda; }, IA,
               {"options.backend", "backend 'cuda' needs cuda tensors, got cpu tensors"});
  if (!backend_available(Backend::kCuda)) {
    // Valid arguments, but no CUDA here: kUnavailable from the op, nothing read or written.
    for (Backend b : {Backend::kCuda, Backend::kAuto}) {
      expect_error(std::string("cuda tensors, backend ") + backend_name(b) + ", no CUDA", [&](Args& a) {
        bogus_cuda(a);
        a.opt.backend = b;
      }, StatusCode::kUnavailable, {"options.backend", "cuda"}, /*validate_agrees=*/false);
    }
  }
}

TEST_F(Validation, NullData) {
  const auto IA = StatusCode::kInvalidArgument;
  const char* names[] = {"q_input", "q_fp8", "weight", "weights_out", "freqs", "positions"};
  for (int t = 0; t < 6; ++t) {
    expect_error(std::string(names[t]) + " null", [&](Args& a) {
      TensorView* v[] = {&a.q, &a.f8, &a.w, &a.wo, &a.fr, &a.pos};
      v[t]->data = nullptr;
    }, IA, {names[t], "data pointer is null"});
  }
}

TEST_F(Validation, Overlaps) {
  const auto IA = StatusCode::kInvalidArgument;
  expect_error("q_fp8 over q_input", [&](Args& a) {
    a.f8 = TensorView::contiguous(at(kQ), kFp8, {kB, kH, 128});
  }, IA, {"q_fp8", "overlaps q_input"});
  expect_error("q_fp8 partially over the end of q_input", [&](Args& a) {
    a.f8 = TensorView::contiguous(at(kQ + 3072 - 1), kFp8, {kB, kH, 128});
  }, IA, {"q_fp8", "overlaps q_input"});
  expect_error("q_fp8 partially over the start of q_input", [&](Args& a) {
    a.q = TensorView::contiguous(at(kSpare + 1000), kBf16, {kB, kH, 128});  // q_input in [1000, 4072)
    a.f8 = TensorView::contiguous(at(kSpare), kFp8, {kB, kH, 128});          // q_fp8 in [0, 1536)
  }, IA, {"q_fp8", "overlaps q_input"});
  expect_error("weights_out over weight", [&](Args& a) {
    a.wo = TensorView::contiguous(at(kW), kF32, {kB, kH, 1});
  }, IA, {"weights_out", "overlaps weight"});
  expect_error("q_fp8 over weights_out", [&](Args& a) {
    a.f8 = TensorView::contiguous(at(kSpare), kFp8, {kB, kH, 128});
    a.wo = TensorView::contiguous(at(kSpare + 1000), kF32, {kB, kH, 1});
  }, IA, {"q_fp8", "overlaps weights_out"});
  // (q_fp8 one byte in, so that weights_out, 4-byte aligned, starts at its last byte)
  expect_error("weights_out over the last byte of q_fp8", [&](Args& a) {
    a.f8 = TensorView::contiguous(at(kSpare + 1), kFp8, {kB, kH, 128});
    a.wo = TensorView::contiguous(at(kSpare + 1536), kF32, {kB, kH, 1});
  }, IA, {"q_fp8", "overlaps weights_out"});
  // the same bytes with weights_out itself at the odd address: its alignment is checked first
  expect_error("weights_out at an odd address over the last byte of q_fp8", [&](Args& a) {
    a.f8 = TensorView::contiguous(at(kSpare), kFp8, {kB, kH, 128});
    a.wo = TensorView::contiguous(at(kSpare + 1535), kF32, {kB, kH, 1});
  }, IA, {"weights_out", "is not aligned to the 4-byte elements of fp32"});
  expect_error("q_fp8 over freqs", [&](Args& a) {
    a.f8 = TensorView::contiguous(at(kFR + 4000), kFp8, {kB, kH, 128});
  }, IA, {"q_fp8", "overlaps freqs"});
  expect_error("weights_out over positions", [&](Args& a) {
    a.wo = TensorView::contiguous(at(kP + 8), kF32, {kB, kH, 1});
  }, IA, {"weights_out", "overlaps positions"});
  expect_error("q_fp8 aliasing weights_out exactly", [&](Args& a) {
    a.wo = TensorView::contiguous(at(kF8), kF32, {kB, kH, 1});
  }, IA, {"overlaps"});
}

TEST_F(Validation, PositionsOutOfRange) {
  const auto IA = StatusCode::kInvalidArgument;
  expect_error("int64 negative", [&](Args&) { set_pos64({0, -1, 2}); }, IA,
               {"positions", "positions[1] = -1", "outside [0, max_pos) = [0, 16)"});
  expect_error("int64 == max_pos", [&](Args&) { set_pos64({0, 1, kMaxPos}); }, IA,
               {"positions", "positions[2] = 16", "[0, 16)"});
  expect_error("int64 beyond int32", [&](Args&) { set_pos64({std::int64_t(1) << 40, 0, 0}); }, IA,
               {"positions", "positions[0] = 1099511627776"});
  expect_error("int64 most negative", [&](Args&) { set_pos64({0, INT64_MIN, 0}); }, IA,
               {"positions", "positions[1] = -9223372036854775808"});
  expect_error("int32 negative", [&](Args& a) {
    set_pos32({-5, 0, 0});
    a.pos = TensorView::contiguous(at(kP), DType::kInt32, {kB});
  }, IA, {"positions", "positions[0] = -5", "[0, 16)"});
  expect_error("int32 == max_pos", [&](Args& a) {
    set_pos32({0, 0, kMaxPos});
    a.pos = TensorView::contiguous(at(kP), DType::kInt32, {kB});
  }, IA, {"positions", "positions[2] = 16"});
  expect_error("int32 most negative", [&](Args& a) {
    set_pos32({0, INT32_MIN, 0});
    a.pos = TensorView::contiguous(at(kP), DType::kInt32, {kB});
  }, IA, {"positions", "positions[1] = -2147483648"});
}

TEST_F(Validation, Options) {
  expect_error("num_threads -1", [](Args& a) {
    a.opt.backend = Backend::kCpu;
    a.opt.num_threads = -1;
  }, StatusCode::kInvalidArgument, {"options.num_threads", ">= 0", "-1"});
  expect_error("num_threads -1 with the reference", [](Args& a) { a.opt.num_threads = -1; },
               StatusCode::kInvalidArgument, {"options.num_threads"});
  // Unsupported ISAs: an availability question, answered by the op with kUnavailable
  // (validate() checks arguments only).
  int unsupported = 0;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) continue;
    ++unsupported;
    expect_error(std::string("unsupported isa ") + cpu_isa_name(isa), [&](Args& a) {
      a.opt.backend = Backend::kCpu;
      a.opt.cpu_isa = isa;
    }, StatusCode::kUnavailable, {"options.cpu_isa", cpu_isa_name(isa), "not supported"}, false);
  }
  if (unsupported == 0) std::printf("note: this machine supports every CPU ISA; no unsupported-ISA case here\n");
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::kScalar));
}

// Out-of-range enum values (e.g. an int cast by a binding) are argument errors, not internal ones.
TEST_F(Validation, UnknownEnumValues) {
  expect_error("backend 9", [](Args& a) { a.opt.backend = static_cast<Backend>(9); },
               StatusCode::kInvalidArgument, {"options.backend"});
  expect_error("cpu_isa 7", [](Args& a) {
    a.opt.backend = Backend::kCpu;
    a.opt.cpu_isa = static_cast<CpuIsa>(7);
  }, StatusCode::kInvalidArgument, {"options.cpu_isa"});
}

TEST_F(Validation, EmptyBatchIsValidAndWritesNothing) {
  // B = 0 with real pointers: ok, and not a byte changes.
  reset();
  Args a = valid();
  a.q = TensorView::contiguous(at(kQ), kBf16, {0, kH, 128});
  a.f8 = TensorView::contiguous(at(kF8), kFp8, {0, kH, 128});
  a.w = TensorView::contiguous(at(kW), kBf16, {0, kH});
  a.wo = TensorView::contiguous(at(kWO), kF32, {0, kH, 1});
  a.pos = TensorView::contiguous(at(kP), DType::kInt64, {0});
  const std::vector<std::uint64_t> before = arena_;
  for (Backend b : {Backend::kReference, Backend::kCpu, Backend::kAuto}) {
    a.opt.backend = b;
    EXPECT_TRUE(call_validate(a).ok()) << call_validate(a).message();
    EXPECT_TRUE(call_op(a).ok()) << call_op(a).message();
    EXPECT_TRUE(arena_ == before);
  }
  // B = 0 with null pointers everywhere and even an empty freqs table: still ok.
  Args n = a;
  for (TensorView* v : {&n.q, &n.f8, &n.w, &n.wo, &n.fr, &n.pos}) v->data = nullptr;
  n.fr = TensorView::contiguous(nullptr, kF32, {0, 64});
  EXPECT_TRUE(call_validate(n).ok()) << call_validate(n).message();
  EXPECT_TRUE(call_op(n).ok()) << call_op(n).message();
  // ... but B = 0 does not excuse a wrong shape.
  Args bad = a;
  bad.wo = TensorView::contiguous(at(kWO), kF32, {0, kH, 2});
  EXPECT_EQ(call_op(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(arena_ == before);
}


// ---------------------------------------------------------------------------------------
// Every recipe through OpArgs: validate(OpArgs) / run(OpArgs). The output tensors are the
// recipe's: q_fp8 (B, H, 128) fp8_e4m3fn | fp8_e4m3fnuz | uint8 | int8 and an empty q_scale for
// FP8 recipes; q_fp4 (B, H, 64) uint8 | int8 and q_sf (B, H) int32 contiguous for FP4. Same rules
// as above: the code, a message naming the argument, validate() agreeing with run(), and not one
// byte of the arena changed on an error.
// ---------------------------------------------------------------------------------------
namespace rv {

constexpr std::size_t kQ = 0;              // q_input: 3072 bytes; region 4096
constexpr std::size_t kO = kQ + 4096;      // q_out: up to 1536 bytes; region 3072
constexpr std::size_t kS = kO + 3072;      // q_sf: 48 bytes; region 256
constexpr std::size_t kW = kS + 256;       // weight: 24 bytes; region 256
constexpr std::size_t kWO = kW + 256;      // weights_out: 48 bytes; region 256
constexpr std::size_t kFR = kWO + 256;     // freqs: 4096 bytes; region 4096
constexpr std::size_t kP = kFR + 4096;     // positions: region 64
constexpr std::size_t kSpare = kP + 64;    // 4096
constexpr std::size_t kArena = kSpare + 4096;

struct RArgs {
  OpArgs a;
  Options opt;
};

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

// A data pointer as the validators print it: "0x" and lowercase hex digits.
std::string hex_address(const void* p) {
  std::ostringstream os;
  os << "0x" << std::hex << reinterpret_cast<std::uintptr_t>(p);
  return os.str();
}

class RecipeValidation : public testing::TestWithParam<RecipeId> {
 protected:
  void SetUp() override {
    arena_.assign(kArena / 8 + 1, 0);
    reset();
  }
  std::uint8_t* at(std::size_t off) { return reinterpret_cast<std::uint8_t*>(arena_.data()) + off; }
  RecipeId rid() const { return GetParam(); }
  const Recipe& rec() const { return recipe(rid()); }
  bool fp4() const { return rec().format == OutFormat::kE2M1; }
  bool fnuz() const { return rec().format == OutFormat::kE4M3FNUZ; }
  bool has_rope() const { return recipe_has_rope(rec()); }        // else freqs, positions: empty views
  bool has_weights() const { return recipe_has_weights(rec()); }  // else weight, weights_out: empty views
  // Whether the recipe takes the tensor of that name at all (checks on an absent one do not apply).
  bool takes(const std::string& name) const {
    if (name == "weight" || name == "weights_out") return has_weights();
    if (name == "freqs" || name == "positions") return has_rope();
    return true;
  }
  std::int64_t od() const { return fp4() ? 64 : 128; }
  std::string out_name() const { return fp4() ? "q_fp4" : "q_fp8"; }
  DType own_dtype() const {
    return fp4() ? DType::kUInt8 : fnuz() ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3;
  }

  // The tensors of the call in argument order, named as the validator names them.
  std::vector<std::pair<std::string, TensorView*>> named_views(RArgs& r) const {
    std::vector<std::pair<std::string, TensorView*>> v = {{"q_input", &r.a.q_input}, {out_name(), &r.a.q_out}};
    if (fp4()) v.emplace_back("q_sf", &r.a.q_scale);
    if (rec().scale_out) v.emplace_back("q_scale", &r.a.q_scale);
    if (has_weights()) {
      v.emplace_back("weight", &r.a.weight);
      v.emplace_back("weights_out", &r.a.weights_out);
    }
    if (has_rope()) {
      v.emplace_back("freqs", &r.a.freqs);
      v.emplace_back("positions", &r.a.positions);
    }
    return v;
  }

  void reset() {
    std::memset(at(0), 0, kArena);
    for (std::int64_t i = 0; i < kB * kH * 128; ++i) {
      const std::uint16_t v = iqtest::to_bf16(float((i * 37) % 11) - 5.0f);
      std::memcpy(at(kQ) + 2 * i, &v, 2);
    }
    for (std::int64_t i = 0; i < 64; ++i) {
      const std::uint16_t v = iqtest::to_bf16(0.25f * float(i + 1));
      std::memcpy(at(kW) + 2 * i, &v, 2);
    }
    const std::vector<float> fr = iqtest::rope_freqs(kMaxPos, 10000.0, rec().freqs_layout);
    std::memcpy(at(kFR), fr.data(), fr.size() * 4);
    const std::int64_t p[3] = {0, 7, kMaxPos - 1};
    std::memcpy(at(kP), p, sizeof p);
    std::memset(at(kQ + 3072), kSentinel, 4096 - 3072);
    std::memset(at(kO), kSentinel, 3072);
    std::memset(at(kS), kSentinel, 256);
    std::memset(at(kWO), kSentinel, 256);
    std::memset(at(kSpare), kSentinel, 4096);
  }

  // A valid call of B tokens (default kB; B = 0: an empty batch).
  RArgs valid(std::int64_t B = kB) {
    RArgs r;
    OpArgs& a = r.a;
    a.recipe = rid();
    a.q_input = TensorView::contiguous(at(kQ), DType::kBFloat16, {B, kH, 128});
    a.q_out = TensorView::contiguous(at(kO), own_dtype(), {B, kH, od()});
    if (fp4()) a.q_scale = TensorView::contiguous(at(kS), DType::kInt32, {B, kH});
    if (rec().scale_out) a.q_scale = TensorView::contiguous(at(kS), DType::kFloat32, {B, kH, 1});
    if (has_weights()) {
      a.weight = TensorView::contiguous(at(kW), DType::kBFloat16, {B, kH});
      a.weights_out = TensorView::contiguous(at(kWO), DType::kFloat32, {B, kH, 1});
    }
    a.weight_scale = 0.5f;
    a.head_scale = 0.625f;  // used by the vllm_* recipes' two-factor folds
    if (has_rope()) {
      a.freqs = TensorView::contiguous(at(kFR), DType::kFloat32, {kMaxPos, 64});
      a.positions = TensorView::contiguous(at(kP), DType::kInt64, {B});
    }
    r.opt.backend = Backend::kReference;
    return r;
  }

  void expect_error(const std::string& what, const std::function<void(RArgs&)>& mutate,
                    std::vector<std::string> needles, StatusCode code = StatusCode::kInvalidArgument) {
    SCOPED_TRACE(std::string(rec().name) + ": " + what);
    reset();
    RArgs r = valid();
    mutate(r);
    const std::vector<std::uint64_t> before = arena_;
    const Status sv = validate(r.a, r.opt);
    EXPECT_TRUE(arena_ == before) << "validate() changed memory";
    for (Backend b : {Backend::kReference, Backend::kCpu}) {
      r.opt.backend = b;
      const Status so = run(r.a, r.opt);
      EXPECT_TRUE(arena_ == before) << "run() changed memory although it failed (" << backend_name(b) << ")";
      EXPECT_EQ(int(so.code()), int(code)) << so.message();
      EXPECT_EQ(so.message().rfind("indexer_q: ", 0), 0u) << so.message();
      for (const std::string& n : needles)
        EXPECT_NE(so.message().find(n), std::string::npos) << "message '" << so.message() << "' lacks '" << n << "'";
      EXPECT_EQ(int(sv.code()), int(so.code()));
      EXPECT_EQ(sv.message(), so.message());
    }
  }

  // A valid call: validate() and run() say ok; run() writes q_out, q_sf (FP4) and weights_out.
  // Returns the bytes written to q_out, q_sf and weights_out.
  std::vector<std::uint8_t> expect_ok(const std::string& what, const std::function<void(RArgs&)>& mutate,
                                      Backend backend = Backend::kReference) {
    SCOPED_TRACE(std::string(rec().name) + ": " + what);
    reset();
    RArgs r = valid();
    r.opt.backend = backend;
    mutate(r);
    const Status sv = validate(r.a, r.opt);
    EXPECT_TRUE(sv.ok()) << sv.message();
    const Status so = run(r.a, r.opt);
    EXPECT_TRUE(so.ok()) << so.message();
    std::vector<std::uint8_t> out;
    auto grab = [&](const TensorView& t, std::size_t n) {
      const std::uint8_t* p = static_cast<const std::uint8_t*>(t.data);
      int written = 0;
      for (std::size_t i = 0; i < n; ++i) written += p[i] != kSentinel;
      EXPECT_GT(written, 0) << "output not written";
      out.insert(out.end(), p, p + n);
    };
    grab(r.a.q_out, std::size_t(kB * kH * od()));
    if (fp4() || rec().scale_out) grab(r.a.q_scale, std::size_t(kB * kH * 4));
    if (has_weights()) grab(r.a.weights_out, std::size_t(kB * kH * 4));
    else for (std::size_t i = 0; i < 256; ++i) EXPECT_EQ(at(kWO)[i], kSentinel) << i;
    // nothing beyond the outputs: the rest of the output regions keeps the sentinel
    for (std::size_t i = std::size_t(kB * kH * od()); i < 3072; ++i)
      if (static_cast<std::uint8_t*>(r.a.q_out.data) == at(kO)) {
        EXPECT_EQ(at(kO)[i], kSentinel) << i;
      }
    for (std::size_t i = 48; i < 256; ++i) EXPECT_EQ(at(kS)[i], kSentinel) << i;
    return out;
  }

  std::vector<std::uint64_t> arena_;
};

TEST_P(RecipeValidation, ValidCallsAndRawCodeDtypes) {
  const std::vector<std::uint8_t> ref = expect_ok("baseline", [](RArgs&) {});
  EXPECT_EQ(expect_ok("cpu backend", [](RArgs&) {}, Backend::kCpu), ref);
  if (has_rope()) {
    EXPECT_EQ(expect_ok("int32 positions", [&](RArgs& r) {
      const std::int32_t p[3] = {0, 7, kMaxPos - 1};
      std::memcpy(at(kP), p, sizeof p);
      r.a.positions = TensorView::contiguous(at(kP), DType::kInt32, {kB});
    }), ref);
  }
  // uint8 / int8 raw codes: accepted, and the same bytes as the recipe's own dtype
  for (DType dt : {DType::kUInt8, DType::kInt8}) {
    EXPECT_EQ(expect_ok(std::string("q_out ") + dtype_name(dt), [&](RArgs& r) { r.a.q_out.dtype = dt; }), ref);
    EXPECT_EQ(expect_ok(std::string("q_out ") + dtype_name(dt) + " cpu", [&](RArgs& r) { r.a.q_out.dtype = dt; },
                        Backend::kCpu),
              ref);
  }
  if (!fp4() && !rec().scale_out) {
    // an FP8 recipe with q_sf explicitly empty (default-constructed) is what valid() builds
    reset();
    RArgs r = valid();
    EXPECT_EQ(r.a.q_scale.ndim, 0);
    EXPECT_EQ(r.a.q_scale.data, nullptr);
  }
  if (has_weights()) {
    EXPECT_EQ(expect_ok("weight row stride H + 5", [&](RArgs& r) {
      r.a.weight = TensorView::strided(at(kW), DType::kBFloat16, {kB, kH}, {kH + 5, 1});
    }).size(), ref.size());
  }
}

// The FP8 row scale of a recipe with scale_out: q_scale (B, H, 1) or (B, H) fp32, the same bytes;
// another dtype, shape or stride is refused naming q_scale, and so is an empty view.
TEST_P(RecipeValidation, ScaleOutShapes) {
  if (!rec().scale_out) GTEST_SKIP() << rec().name << " writes no FP8 row scale";
  const std::vector<std::uint8_t> ref = expect_ok("q_scale (B, H, 1)", [](RArgs&) {});
  for (Backend b : {Backend::kReference, Backend::kCpu})
    EXPECT_EQ(expect_ok(std::string("q_scale (B, H) ") + backend_name(b), [&](RArgs& r) {
      r.a.q_scale = TensorView::contiguous(at(kS), DType::kFloat32, {kB, kH});
    }, b), ref);
  expect_error("q_scale int32", [&](RArgs& r) { r.a.q_scale.dtype = DType::kInt32; }, {"q_scale", "fp32"});
  expect_error("q_scale (B, H, 2)", [&](RArgs& r) {
    r.a.q_scale = TensorView::contiguous(at(kS), DType::kFloat32, {kB, kH, 2});
  }, {"q_scale", "(B, H, 1) or"});
  expect_error("q_scale absent", [&](RArgs& r) { r.a.q_scale = TensorView{}; }, {"q_scale", "expected shape"});
  expect_error("q_scale strided", [&](RArgs& r) {
    r.a.q_scale = TensorView::strided(at(kS), DType::kFloat32, {kB, kH}, {2 * kH, 2});
  }, {"q_scale", "unsupported strides"});
}

// A recipe without RoPE takes no freqs and no positions, one without weights no weight and no
// weights_out: each must be an empty view; a real tensor there is refused naming it (a caller
// passing one has the wrong recipe in mind), and nothing is written.
TEST_P(RecipeValidation, AbsentTensorsMustBeEmptyViews) {
  if (has_rope() && has_weights()) GTEST_SKIP() << rec().name << " reads every tensor";
  if (!has_rope()) {
    expect_error("freqs given", [&](RArgs& r) {
      r.a.freqs = TensorView::contiguous(at(kFR), DType::kFloat32, {kMaxPos, 64});
    }, {"freqs", "has no RoPE", "empty view", rec().name});
    expect_error("positions given", [&](RArgs& r) {
      r.a.positions = TensorView::contiguous(at(kP), DType::kInt64, {kB});
    }, {"positions", "has no RoPE", "empty view"});
    expect_error("positions with null data but a shape", [&](RArgs& r) {
      r.a.positions = TensorView::contiguous(nullptr, DType::kInt64, {kB});
    }, {"positions", "has no RoPE"});
  }
  if (!has_weights()) {
    expect_error("weight given", [&](RArgs& r) {
      r.a.weight = TensorView::contiguous(at(kW), DType::kBFloat16, {kB, kH});
    }, {"weight", "has no weights", "empty view", rec().name});
    expect_error("weights_out given", [&](RArgs& r) {
      r.a.weights_out = TensorView::contiguous(at(kWO), DType::kFloat32, {kB, kH, 1});
    }, {"weights_out", "has no weights", "empty view"});
  }
}

// weights_out: (B, H, 1) as SGLang allocates it or (B, H) as vLLM does, for every recipe, with
// the same bytes; any other shape or a non-contiguous (B, H) is refused naming weights_out, and
// nothing is written.
TEST_P(RecipeValidation, WeightsOutShapes) {
  if (!has_weights()) GTEST_SKIP() << rec().name << " has no weights_out (AbsentTensorsMustBeEmptyViews)";
  const std::vector<std::uint8_t> ref = expect_ok("weights_out (B, H, 1)", [](RArgs&) {});
  for (Backend b : {Backend::kReference, Backend::kCpu}) {
    EXPECT_EQ(expect_ok(std::string("weights_out (B, H) ") + backend_name(b), [&](RArgs& r) {
      r.a.weights_out = TensorView::contiguous(at(kWO), DType::kFloat32, {kB, kH});
    }, b), ref);
    // explicit strides equal to the contiguous ones
    EXPECT_EQ(expect_ok("weights_out (B, H) strided (H, 1)", [&](RArgs& r) {
      r.a.weights_out = TensorView::strided(at(kWO), DType::kFloat32, {kB, kH}, {kH, 1});
    }, b), ref);
  }
  const std::string want = "expected shape (3, 4, 1) = (B, H, 1) or (3, 4) = (B, H)";
  const std::vector<std::pair<const char*, std::vector<std::int64_t>>> bad = {
      {"(B, H, 2)", {kB, kH, 2}}, {"(H, B)", {kH, kB}},        {"(H, B, 1)", {kH, kB, 1}},
      {"(B*H,)", {kB * kH}},      {"(B, H, 1, 1)", {kB, kH, 1, 1}}, {"(1, B, H)", {1, kB, kH}},
      {"(B, H + 1)", {kB, kH + 1}}, {"(B - 1, H)", {kB - 1, kH}}};
  for (const auto& [name, sizes] : bad) {
    expect_error(std::string("weights_out ") + name, [&](RArgs& r) {
      TensorView& v = r.a.weights_out;
      v = TensorView::contiguous(at(kWO), DType::kFloat32, {1});
      v.ndim = int(sizes.size());
      std::int64_t st = 1;
      for (int d = v.ndim - 1; d >= 0; --d) {
        v.sizes[d] = sizes[std::size_t(d)];
        v.strides[d] = st;
        st *= sizes[std::size_t(d)];
      }
    }, {"weights_out", want});
  }
  expect_error("weights_out (B, H) stride(0) = H + 1", [&](RArgs& r) {
    r.a.weights_out = TensorView::strided(at(kWO), DType::kFloat32, {kB, kH}, {kH + 1, 1});
  }, {"weights_out", "unsupported strides", "contiguous (H, 1)"});
  expect_error("weights_out (B, H) stride(1) = 2", [&](RArgs& r) {
    r.a.weights_out = TensorView::strided(at(kWO), DType::kFloat32, {kB, kH}, {2 * kH, 2});
  }, {"weights_out", "unsupported strides"});
  expect_error("weights_out (B, H) bf16", [&](RArgs& r) {
    r.a.weights_out = TensorView::contiguous(at(kWO), DType::kBFloat16, {kB, kH});
  }, {"weights_out", "expected dtype fp32"});
}

TEST_P(RecipeValidation, OutputDtypes) {
  std::vector<DType> bad = {DType::kBFloat16, DType::kFloat32, DType::kInt32, DType::kInt64};
  if (fp4()) {
    bad.push_back(DType::kFloat8E4M3);
    bad.push_back(DType::kFloat8E4M3FNUZ);
  } else {
    bad.push_back(fnuz() ? DType::kFloat8E4M3 : DType::kFloat8E4M3FNUZ);  // fn / fnuz mismatch
  }
  for (DType dt : bad) {
    std::vector<std::string> needles = {out_name(), std::string("got ") + dtype_name(dt)};
    if (fp4()) {
      needles.push_back("uint8 or int8");
    } else {
      needles.push_back(std::string("expected dtype ") + (fnuz() ? "fp8_e4m3fnuz" : "fp8_e4m3fn "));
      needles.push_back(rec().name);
    }
    expect_error(std::string("q_out ") + dtype_name(dt), [&](RArgs& r) { r.a.q_out.dtype = dt; }, needles);
  }
}

TEST_P(RecipeValidation, OutputShapesAndStrides) {
  const std::string want = fp4() ? "(3, 4, 64)" : "(3, 4, 128)";
  const std::int64_t other = fp4() ? 128 : 64;
  for (auto sizes : {std::vector<std::int64_t>{kB, kH, other}, {kB, kH, 32}, {kB - 1, kH, od()}, {kB, kH + 1, od()}}) {
    expect_error("q_out shape", [&](RArgs& r) {
      r.a.q_out = TensorView::contiguous(at(kO), own_dtype(), {sizes[0], sizes[1], sizes[2]});
    }, {out_name(), "expected shape " + want});
  }
  expect_error("q_out rank 2", [&](RArgs& r) {
    r.a.q_out = TensorView::contiguous(at(kO), own_dtype(), {kB * kH, od()});
  }, {out_name(), "expected shape " + want});
  for (auto st : {std::vector<std::int64_t>{kH * od(), od(), 2}, {kH * 2 * od(), 2 * od(), 1},
                  {kH * od() + od(), od(), 1}}) {
    expect_error("q_out strides", [&](RArgs& r) {
      r.a.q_out = TensorView::strided(at(kO), own_dtype(), {kB, kH, od()}, {st[0], st[1], st[2]});
    }, {out_name(), "unsupported strides"});
  }
  expect_error("q_out null", [&](RArgs& r) { r.a.q_out.data = nullptr; }, {out_name(), "null"});
  expect_error("q_out on cuda", [&](RArgs& r) { r.a.q_out.device = Device{DeviceType::kCUDA, 0}; },
               {out_name(), "expected the device of q_input"});
  expect_error("q_out over q_input", [&](RArgs& r) { r.a.q_out.data = at(kQ + 100); },
               {out_name(), "overlaps q_input"});
  if (has_weights())
    expect_error("q_out over weights_out", [&](RArgs& r) { r.a.q_out.data = at(kWO - 10); },
                 {out_name(), "overlaps weights_out"});
}

TEST_P(RecipeValidation, BlockScales) {
  const Device cuda0{DeviceType::kCUDA, 0};
  if (rec().scale_out) GTEST_SKIP() << rec().name << " writes its row scale there (ScaleOutShapes)";
  if (!fp4()) {
    // FP8 recipes have no q_sf: anything but an empty view is refused, naming q_sf
    expect_error("q_sf given", [&](RArgs& r) {
      r.a.q_scale = TensorView::contiguous(at(kS), DType::kInt32, {kB, kH});
    }, {"q_sf", rec().name, "empty view"});
    expect_error("q_sf data without dims", [&](RArgs& r) { r.a.q_scale.data = at(kS); }, {"q_sf", "empty"});
    expect_error("q_sf dims without data", [&](RArgs& r) {
      r.a.q_scale = TensorView::contiguous(nullptr, DType::kInt32, {kB, kH});
    }, {"q_sf", "empty"});
    return;
  }
  expect_error("q_sf missing", [&](RArgs& r) { r.a.q_scale = TensorView{}; }, {"q_sf", "(3, 4)"});
  for (DType dt : {DType::kUInt8, DType::kInt8, DType::kInt64, DType::kFloat32, DType::kFloat8E4M3}) {
    expect_error(std::string("q_sf ") + dtype_name(dt), [&](RArgs& r) { r.a.q_scale.dtype = dt; },
                 {"q_sf", "expected dtype int32", std::string("got ") + dtype_name(dt)});
  }
  for (auto sizes : {std::vector<std::int64_t>{kB, kH, 4}, {kB, kH + 1}, {kB + 1, kH}, {kB * kH}, {kB, 1}}) {
    expect_error("q_sf shape", [&](RArgs& r) {
      TensorView& t = r.a.q_scale;
      t = sizes.size() == 3 ? TensorView::contiguous(at(kS), DType::kInt32, {sizes[0], sizes[1], sizes[2]})
          : sizes.size() == 2 ? TensorView::contiguous(at(kS), DType::kInt32, {sizes[0], sizes[1]})
                              : TensorView::contiguous(at(kS), DType::kInt32, {sizes[0]});
    }, {"q_sf", "expected shape (3, 4)"});
  }
  for (auto st : {std::vector<std::int64_t>{kH + 1, 1}, {2 * kH, 2}, {1, kB}}) {
    expect_error("q_sf strides", [&](RArgs& r) {
      r.a.q_scale = TensorView::strided(at(kS), DType::kInt32, {kB, kH}, {st[0], st[1]});
    }, {"q_sf", "unsupported strides"});
  }
  expect_error("q_sf null", [&](RArgs& r) { r.a.q_scale.data = nullptr; }, {"q_sf", "null"});
  expect_error("q_sf on cuda", [&](RArgs& r) { r.a.q_scale.device = cuda0; },
               {"q_sf", "expected the device of q_input (cpu), got cuda:0"});
  expect_error("q_sf over q_fp4", [&](RArgs& r) { r.a.q_scale.data = at(kO + 16); }, {"overlaps", "q_sf"});
  expect_error("q_sf over q_input", [&](RArgs& r) { r.a.q_scale.data = at(kQ + 8); }, {"q_sf", "overlaps q_input"});
  if (has_weights())
    expect_error("q_sf over weights_out", [&](RArgs& r) { r.a.q_scale.data = at(kWO + 4); },
                 {"q_sf", "overlaps weights_out"});
  if (has_rope()) {
    expect_error("q_sf over positions", [&](RArgs& r) { r.a.q_scale.data = at(kP); }, {"q_sf", "overlaps positions"});
    expect_error("q_sf over freqs", [&](RArgs& r) { r.a.q_scale.data = at(kFR + 64); }, {"q_sf", "overlaps freqs"});
  }
}

// The shared checks still name their arguments under every recipe.
TEST_P(RecipeValidation, SharedChecks) {
  if (has_rope()) {
    expect_error("position out of range", [&](RArgs&) {
      const std::int64_t p[3] = {0, kMaxPos, 1};
      std::memcpy(at(kP), p, sizeof p);
    }, {"positions", "positions[1] = 16"});
    expect_error("freqs shape", [&](RArgs& r) {
      r.a.freqs = TensorView::contiguous(at(kFR), DType::kFloat32, {kMaxPos, 32});
    }, {"freqs", "(max_pos, 64)", rec().name});
  }
  if (has_weights()) {
    expect_error("weight dtype", [&](RArgs& r) { r.a.weight.dtype = DType::kInt32; }, {"weight", "bf16, fp16 or fp32"});
    expect_error("weights_out dtype", [&](RArgs& r) { r.a.weights_out.dtype = DType::kBFloat16; },
                 {"weights_out", "fp32"});
  }
  expect_error("q_input head dim", [&](RArgs& r) {
    r.a.q_input = TensorView::contiguous(at(kQ), DType::kBFloat16, {kB, kH, 64});
  }, {"q_input", "head dim must be 128"});
  expect_error("num_threads -1", [&](RArgs& r) { r.opt.num_threads = -1; }, {"options.num_threads"});
}

// Sizes whose element counts overflow int64 are refused naming the argument, before any product
// is formed (and for B = 0 too). The views are never read, so they may describe more than the
// arena holds; huge sizes get explicit strides (TensorView::contiguous would multiply them).
TEST_P(RecipeValidation, ElementCountOverflowNamed) {
  const std::string bh128 = "B * H * 128 elements overflow int64";
  expect_error("B * H * 128 > INT64_MAX", [&](RArgs& r) {
    r.a.q_input = TensorView::strided(at(kQ), DType::kBFloat16, {kI64Max / 128 / kH + 1, kH, 128}, {kH * 128, 128, 1});
  }, {"q_input", bh128, "(18014398509481984, 4, 128)"});
  expect_error("B = INT64_MAX", [&](RArgs& r) {
    r.a.q_input = TensorView::strided(at(kQ), DType::kBFloat16, {kI64Max, 1, 128}, {128, 128, 1});
  }, {"q_input", bh128});
  expect_error("H * 128 > INT64_MAX with B = 0", [&](RArgs& r) {
    r.a.q_input = TensorView::strided(at(kQ), DType::kBFloat16, {0, kI64Max / 128 + 1, 128}, {128, 128, 1});
  }, {"q_input", bh128, "(0, 72057594037927936, 128)"});
  const std::string mp64 = "max_pos * 64 elements overflow int64";
  if (!has_rope()) return;
  for (std::int64_t mp : {kI64Max / 64 + 1, kI64Max}) {
    expect_error("max_pos = " + std::to_string(mp), [&](RArgs& r) {
      r.a.freqs = TensorView::strided(at(kFR), DType::kFloat32, {mp, 64}, {64, 1});
    }, {"freqs", mp64, "(" + std::to_string(mp) + ", 64)"});
  }
  expect_error("max_pos * 64 > INT64_MAX with B = 0", [&](RArgs& r) {
    r.a = valid(0).a;
    r.a.freqs = TensorView::strided(at(kFR), DType::kFloat32, {kI64Max / 64 + 1, 64}, {64, 1});
  }, {"freqs", mp64});
}

// Views whose byte range cannot lie in the address space: refused naming the argument with its
// sizes and strides, before anything is read. The addresses near the top are never dereferenced.
TEST_P(RecipeValidation, SpanBeyondTheAddressSpaceNamed) {
  const std::string span = "span more bytes than the address space holds";
  // weight's row stride may be anything >= H: (B - 1) * stride overflows int64, or its bytes do
  if (has_weights()) {
  expect_error("weight stride(0) = INT64_MAX", [&](RArgs& r) {
    r.a.weight = TensorView::strided(at(kW), DType::kBFloat16, {kB, kH}, {kI64Max, 1});
  }, {"weight: sizes (3, 4) and strides (9223372036854775807, 1) " + span});
  expect_error("weight stride(0) = INT64_MAX / 2", [&](RArgs& r) {
    r.a.weight = TensorView::strided(at(kW), DType::kBFloat16, {kB, kH}, {kI64Max / 2, 1});
  }, {"weight: sizes", span});
  expect_error("fp32 weight stride(0) = 2^61", [&](RArgs& r) {  // 2 * 2^61 + 3 elements of 4 bytes
    r.a.weight = TensorView::strided(at(kW), DType::kFloat32, {kB, kH}, {std::int64_t(1) << 61, 1});
  }, {"weight: sizes", span});
  }
  // every tensor of the call starting 16 bytes below the top of the address space (16-aligned)
  void* const top = reinterpret_cast<void*>(std::numeric_limits<std::uintptr_t>::max() - 15);
  RArgs probe = valid();
  const std::size_t n = named_views(probe).size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string name = named_views(probe)[i].first;
    expect_error(name + " 16 bytes below the top of the address space",
                 [&](RArgs& r) { named_views(r)[i].second->data = top; }, {name + ": sizes", span});
  }
  // A negative stride on a dim of size > 1 is refused by the stride rules first (every such stride
  // is fixed and positive, weight's stride(0) >= H); on a dim of size 1 any stride is fine.
  const std::vector<std::pair<std::string, std::function<void(RArgs&)>>> negative = {
      {"q_input", [&](RArgs& r) { r.a.q_input.strides[0] = -kH * 128; }},
      {out_name(), [&](RArgs& r) { r.a.q_out.strides[1] = -od(); }},
      {"weight", [&](RArgs& r) { r.a.weight.strides[0] = -kH; }},
      {"weights_out", [&](RArgs& r) { r.a.weights_out.strides[0] = -kH; }},
      {"freqs", [&](RArgs& r) { r.a.freqs.strides[0] = -64; }},
      {"positions", [&](RArgs& r) { r.a.positions.strides[0] = -1; }},
  };
  for (const auto& [name, set] : negative)
    if (takes(name)) expect_error(name + " with a negative stride", set, {name + ": unsupported strides"});
  if (fp4())
    expect_error("q_sf with a negative stride", [&](RArgs& r) { r.a.q_scale.strides[1] = -1; },
                 {"q_sf: unsupported strides"});
  const std::vector<std::uint8_t> ref = expect_ok("baseline", [](RArgs&) {});
  if (has_weights()) {
    EXPECT_EQ(expect_ok("weights_out (B, H, 1) with stride(2) = -7", [&](RArgs& r) {
      r.a.weights_out.strides[2] = -7;
    }), ref);
  }
}

// ndim beyond TensorView::kMaxDims or negative, on every tensor: refused naming it, without
// reading sizes[] or strides[] past the view's four entries.
TEST_P(RecipeValidation, RanksOutsideTheViewNamed) {
  RArgs probe = valid();
  const std::size_t n = named_views(probe).size();
  for (int nd : {TensorView::kMaxDims + 1, 64, INT_MAX, -1, INT_MIN}) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::string name = named_views(probe)[i].first;
      std::string want;
      if (name == "q_input") {
        want = "expected 3 dims (B, H, 128), got " + std::to_string(nd);
      } else if (name == "freqs") {
        want = "expected shape (max_pos, 64)";
      } else if (nd < 0) {
        want = "sizes and strides have different lengths";
      } else {
        want = "ndim " + std::to_string(nd) + " exceeds TensorView::kMaxDims = 4";
      }
      expect_error(name + " ndim " + std::to_string(nd), [&](RArgs& r) { named_views(r)[i].second->ndim = nd; },
                   {name + ": " + want});
    }
    if (!fp4() && !rec().scale_out)  // FP8 recipes: q_sf must be the empty view (scale_out: q_scale, above)
      expect_error("q_sf ndim " + std::to_string(nd), [&](RArgs& r) { r.a.q_scale.ndim = nd; },
                   {"q_sf: recipe", "empty view"});
  }
}

// A non-null data pointer not aligned to its dtype's element size is refused naming the argument,
// the address, the element size and the dtype, for every tensor of the call; nothing is read or
// written (the misaligned views are never dereferenced). 1-byte outputs are aligned anywhere.
// With B = 0 nothing is read, and no pointer is looked at.
TEST_P(RecipeValidation, MisalignedDataPointersNamed) {
  auto misaligned = [&](const std::string& what, const std::string& name, const void* p, const std::string& elems,
                        const std::function<void(RArgs&)>& set) {
    if (!takes(name)) return;
    expect_error(what, set, {name + ": data pointer " + hex_address(p) + " is not aligned to the " + elems});
  };
  misaligned("q_input bf16 at +1", "q_input", at(kQ + 1), "2-byte elements of bf16", [&](RArgs& r) {
    r.a.q_input = TensorView::contiguous(at(kQ + 1), DType::kBFloat16, {kB, kH, 128});
  });
  misaligned("q_input fp16 at +3", "q_input", at(kQ + 3), "2-byte elements of fp16", [&](RArgs& r) {
    r.a.q_input = TensorView::contiguous(at(kQ + 3), DType::kFloat16, {kB, kH, 128});
  });
  misaligned("weight bf16 at +1", "weight", at(kW + 1), "2-byte elements of bf16", [&](RArgs& r) {
    r.a.weight = TensorView::contiguous(at(kW + 1), DType::kBFloat16, {kB, kH});
  });
  misaligned("weight fp32 at +2", "weight", at(kW + 2), "4-byte elements of fp32", [&](RArgs& r) {
    r.a.weight = TensorView::contiguous(at(kW + 2), DType::kFloat32, {kB, kH});
  });
  misaligned("weights_out at +2", "weights_out", at(kWO + 2), "4-byte elements of fp32", [&](RArgs& r) {
    r.a.weights_out = TensorView::contiguous(at(kWO + 2), DType::kFloat32, {kB, kH, 1});
  });
  misaligned("weights_out (B, H) at +1", "weights_out", at(kWO + 1), "4-byte elements of fp32", [&](RArgs& r) {
    r.a.weights_out = TensorView::contiguous(at(kWO + 1), DType::kFloat32, {kB, kH});
  });
  misaligned("freqs at +1", "freqs", at(kFR + 1), "4-byte elements of fp32", [&](RArgs& r) {
    r.a.freqs = TensorView::contiguous(at(kFR + 1), DType::kFloat32, {kMaxPos, 64});
  });
  misaligned("positions int64 at +4", "positions", at(kP + 4), "8-byte elements of int64", [&](RArgs& r) {
    r.a.positions = TensorView::contiguous(at(kP + 4), DType::kInt64, {kB});
  });
  misaligned("positions int32 at +2", "positions", at(kP + 2), "4-byte elements of int32", [&](RArgs& r) {
    r.a.positions = TensorView::contiguous(at(kP + 2), DType::kInt32, {kB});
  });
  if (fp4()) {
    for (std::size_t off : {std::size_t(1), std::size_t(2), std::size_t(3)})
      misaligned("q_sf at +" + std::to_string(off), "q_sf", at(kS + off), "4-byte elements of int32",
                 [&](RArgs& r) { r.a.q_scale = TensorView::contiguous(at(kS + off), DType::kInt32, {kB, kH}); });
  }
  // the first misaligned tensor in argument order is the one named
  misaligned("weight and freqs misaligned", "weight", at(kW + 1), "2-byte elements of bf16", [&](RArgs& r) {
    if (has_rope()) r.a.freqs.data = at(kFR + 2);
    r.a.weight.data = at(kW + 1);
  });

  // 1-byte elements: q_fp8 / q_fp4 at an odd address is valid and gives the same bytes
  const std::vector<std::uint8_t> ref = expect_ok("baseline", [](RArgs&) {});
  for (Backend b : {Backend::kReference, Backend::kCpu}) {
    EXPECT_EQ(expect_ok(std::string("q_out at an odd address, ") + backend_name(b), [&](RArgs& r) {
      r.a.q_out = TensorView::contiguous(at(kO + 1), own_dtype(), {kB, kH, od()});
    }, b), ref);
  }

  // B = 0: nothing is read or written, so the pointers are not looked at
  reset();
  RArgs z = valid(0);
  z.a.q_input.data = at(kQ + 1);
  if (fp4()) z.a.q_scale.data = at(kS + 2);
  if (has_weights()) {
    z.a.weight.data = at(kW + 1);
    z.a.weights_out.data = at(kWO + 2);
  }
  if (has_rope()) {
    z.a.freqs.data = at(kFR + 1);
    z.a.positions.data = at(kP + 4);
  }
  const std::vector<std::uint64_t> before = arena_;
  for (Backend b : {Backend::kReference, Backend::kCpu}) {
    z.opt.backend = b;
    EXPECT_TRUE(validate(z.a, z.opt).ok()) << validate(z.a, z.opt).message();
    EXPECT_TRUE(run(z.a, z.opt).ok()) << run(z.a, z.opt).message();
  }
  EXPECT_TRUE(arena_ == before);

  // CUDA tensors (fake addresses, never dereferenced): the same rule, before any backend sees them
  RArgs c = valid();
  std::uintptr_t addr = 0x10000;
  for (auto& nv : named_views(c)) {
    nv.second->device = Device{DeviceType::kCUDA, 0};
    nv.second->data = reinterpret_cast<void*>(addr);
    addr += 0x100000;
  }
  // (a recipe without weights: the codes' q_sf at +2 instead)
  TensorView& bad = has_weights() ? c.a.weights_out : c.a.q_scale;
  const std::string bad_name = has_weights() ? "weights_out" : (fp4() ? "q_sf" : "q_scale");
  const std::string bad_elems = has_weights() || !fp4() ? "4-byte elements of fp32" : "4-byte elements of int32";
  bad.data = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(bad.data) + 2);
  c.opt.backend = Backend::kCuda;
  const Status sv = validate(c.a, c.opt), so = run(c.a, c.opt);
  EXPECT_EQ(sv.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(so.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sv.message(), so.message());
  EXPECT_NE(sv.message().find(bad_name + ": data pointer " + hex_address(bad.data) + " is not aligned to the " +
                              bad_elems),
            std::string::npos)
      << sv.message();
}

TEST_P(RecipeValidation, EmptyBatchIsValidAndWritesNothing) {
  reset();
  RArgs r = valid(0);
  const std::vector<std::uint64_t> before = arena_;
  for (Backend b : {Backend::kReference, Backend::kCpu, Backend::kAuto}) {
    r.opt.backend = b;
    EXPECT_TRUE(validate(r.a, r.opt).ok()) << validate(r.a, r.opt).message();
    EXPECT_TRUE(run(r.a, r.opt).ok()) << run(r.a, r.opt).message();
    EXPECT_TRUE(arena_ == before);
  }
  RArgs n = r;  // null pointers everywhere
  for (TensorView* v : {&n.a.q_input, &n.a.q_out, &n.a.weight, &n.a.weights_out, &n.a.freqs, &n.a.positions})
    v->data = nullptr;
  if (fp4()) n.a.q_scale.data = nullptr;
  EXPECT_TRUE(run(n.a, n.opt).ok()) << run(n.a, n.opt).message();
  // ... but B = 0 does not excuse a wrong q_sf
  if (fp4()) {
    RArgs bad = r;
    bad.a.q_scale = TensorView::contiguous(at(kS), DType::kInt32, {0, kH + 1});
    EXPECT_EQ(run(bad.a, bad.opt).code(), StatusCode::kInvalidArgument);
    bad.a.q_scale = TensorView{};
    EXPECT_EQ(run(bad.a, bad.opt).code(), StatusCode::kInvalidArgument);
  } else {
    RArgs bad = r;
    bad.a.q_scale = TensorView::contiguous(at(kS), DType::kInt32, {0, kH});
    EXPECT_EQ(run(bad.a, bad.opt).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(arena_ == before);
}

// The scalars (issue 22): weight_scale and head_scale are checked for every recipe (whether it
// reads them or not), against their spec: finite and > 0 (0, -0 and negative factors refused).
// Nothing written; validate() and run() say the same; the message names the argument and gives
// the value.
TEST_P(RecipeValidation, Scalars) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  const float fmax = std::numeric_limits<float>::max();
  struct Bad {
    float v;
    const char* text;
  };
  const Bad bad[] = {{nan, "got nan"},   {-nan, "got -nan"},      {inf, "got inf"},
                     {-inf, "got -inf"}, {0.0f, "got 0"},         {-0.0f, "got -0"},
                     {-0.5f, "got -0.5"}, {-denorm, "got -1.40129846e-45"}, {-fmax, "got -3.40282347e+38"}};
  for (const Bad& b : bad) {
    expect_error(std::string("weight_scale ") + b.text, [&](RArgs& r) { r.a.weight_scale = b.v; },
                 {"indexer_q: weight_scale: expected a finite number > 0, ", b.text});
    expect_error(std::string("head_scale ") + b.text, [&](RArgs& r) { r.a.head_scale = b.v; },
                 {"indexer_q: head_scale: expected a finite number > 0, ", b.text});
  }
  // every positive finite float32 is a valid factor, the extremes included
  expect_ok("weight_scale denorm_min", [&](RArgs& r) { r.a.weight_scale = denorm; });
  expect_ok("weight_scale max", [&](RArgs& r) { r.a.weight_scale = fmax; });
  expect_ok("head_scale denorm_min", [&](RArgs& r) { r.a.head_scale = denorm; });
  expect_ok("head_scale 0.5", [&](RArgs& r) { r.a.head_scale = 0.5f; });
}

INSTANTIATE_TEST_SUITE_P(Recipes, RecipeValidation, testing::ValuesIn(all_recipes()),
                         [](const testing::TestParamInfo<RecipeId>& i) { return std::string(recipe_name(i.param)); });

// Unknown recipe ids (an int cast by a binding): an argument error naming "recipe" that lists the
// known names; nothing written, whatever the other arguments say.
TEST(RecipeValidationIds, UnknownRecipeId) {
  std::vector<int> ids = {-1, 99, 1 << 20};
  ids.push_back(int(all_recipes().size()));  // one past the list
  for (int id : ids) {
    SCOPED_TRACE(id);
    std::vector<std::uint8_t> q(kB * kH * 128 * 2, 0), out(kB * kH * 128, kSentinel), w(kB * kH * 2, 0),
        wo(kB * kH * 4, kSentinel);
    const std::vector<float> fr = iqtest::rope_freqs(kMaxPos);
    const std::int64_t pos[3] = {0, 1, 2};
    OpArgs a;
    a.recipe = static_cast<RecipeId>(id);
    a.q_input = TensorView::contiguous(q.data(), DType::kBFloat16, {kB, kH, 128});
    a.q_out = TensorView::contiguous(out.data(), DType::kFloat8E4M3, {kB, kH, 128});
    a.weight = TensorView::contiguous(w.data(), DType::kBFloat16, {kB, kH});
    a.weights_out = TensorView::contiguous(wo.data(), DType::kFloat32, {kB, kH, 1});
    a.freqs = TensorView::contiguous(fr.data(), DType::kFloat32, {kMaxPos, 64});
    a.positions = TensorView::contiguous(pos, DType::kInt64, {kB});
    const Status sv = validate(a);
    const Status so = run(a);
    EXPECT_EQ(so.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(sv.message(), so.message());
    EXPECT_NE(so.message().find("recipe"), std::string::npos) << so.message();
    EXPECT_NE(so.message().find("unknown recipe id " + std::to_string(id)), std::string::npos) << so.message();
    for (RecipeId r : all_recipes())
      EXPECT_NE(so.message().find(recipe_name(r)), std::string::npos) << so.message();
    EXPECT_EQ(out, std::vector<std::uint8_t>(out.size(), kSentinel));
    EXPECT_EQ(wo, std::vector<std::uint8_t>(wo.size(), kSentinel));
  }
}

// The historical signature is the v4_fp8 recipe: same verdicts and messages as OpArgs.
TEST(RecipeValidationIds, LegacySignatureIsV4Fp8) {
  std::vector<std::uint8_t> q(kB * kH * 128 * 2, 0), out(kB * kH * 128, kSentinel), w(kB * kH * 2, 0),
      wo(kB * kH * 4, kSentinel);
  const std::vector<float> fr = iqtest::rope_freqs(kMaxPos);
  std::int64_t pos[3] = {0, 1, 2};
  OpArgs a;
  a.q_input = TensorView::contiguous(q.data(), DType::kBFloat16, {kB, kH, 128});
  a.q_out = TensorView::contiguous(out.data(), DType::kFloat8E4M3, {kB, kH, 128});
  a.weight = TensorView::contiguous(w.data(), DType::kBFloat16, {kB, kH});
  a.weights_out = TensorView::contiguous(wo.data(), DType::kFloat32, {kB, kH, 1});
  a.weight_scale = 0.25f;
  a.freqs = TensorView::contiguous(fr.data(), DType::kFloat32, {kMaxPos, 64});
  a.positions = TensorView::contiguous(pos, DType::kInt64, {kB});
  EXPECT_EQ(a.recipe, RecipeId::kV4Fp8);
  auto legacy = [&](const OpArgs& x) {
    return validate(x.q_input, x.q_out, x.weight, x.weights_out, x.weight_scale, x.freqs, x.positions);
  };
  EXPECT_TRUE(legacy(a).ok());
  EXPECT_TRUE(validate(a).ok());
  OpArgs b = a;
  b.q_out.dtype = DType::kFloat8E4M3FNUZ;
  EXPECT_FALSE(legacy(b).ok());
  EXPECT_EQ(legacy(b).message(), validate(b).message());
  EXPECT_NE(legacy(b).message().find("q_fp8"), std::string::npos);
  b = a;
  pos[2] = kMaxPos;
  EXPECT_EQ(legacy(b).message(), validate(b).message());
  EXPECT_NE(legacy(b).message().find("positions[2]"), std::string::npos);
  pos[2] = 2;
  // raw codes through the legacy signature too
  b.q_out.dtype = DType::kUInt8;
  EXPECT_TRUE(legacy(b).ok()) << legacy(b).message();
  EXPECT_TRUE(fused_q_indexer_rope_hadamard_quant(b.q_input, b.q_out, b.weight, b.weights_out, b.weight_scale,
                                                  b.freqs, b.positions).ok());
  EXPECT_NE(out, std::vector<std::uint8_t>(out.size(), kSentinel));
}

// check_scalar: the one check of the scalars, on the double a binding or the CLI receives (before
// it is rounded to float32) and, through validate(), on the float32 field: the same verdict and
// message for a value both can hold, and the float32 rounding named when it is inf or 0.
TEST(ScalarSpecs, CheckScalarOnDoubles) {
  struct Case {
    ScalarArg arg;
    double v;
    bool ok;
    const char* needle;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      {ScalarArg::kWeightScale, 0.5, true, ""},
      {ScalarArg::kWeightScale, 1e-40, true, ""},  // a float32 subnormal: still > 0
      {ScalarArg::kWeightScale, 3.4028234663852886e38, true, ""},  // FLT_MAX
      {ScalarArg::kHeadScale, 0.125, true, ""},
      {ScalarArg::kHeadScale, 1e-45, true, ""},  // rounds to denorm_min, not 0
      // > 0: 0, -0, negative and tiny-positive-that-rounds-to-0 values refused, for both factors
      {ScalarArg::kWeightScale, 0.0, false, "weight_scale: expected a finite number > 0, got 0"},
      {ScalarArg::kWeightScale, -0.0, false, "weight_scale: expected a finite number > 0, got -0"},
      {ScalarArg::kWeightScale, -0.5, false, "weight_scale: expected a finite number > 0, got -0.5"},
      {ScalarArg::kWeightScale, -1e-40, false, "weight_scale: expected a finite number > 0, got -1e-40"},
      {ScalarArg::kWeightScale, 1e-50, false, "weight_scale: expected a finite number > 0, got 1e-50, which rounds to 0 in float32"},
      {ScalarArg::kWeightScale, 7e-46, false, "weight_scale: expected a finite number > 0, got 7e-46, which rounds to 0 in float32"},
      {ScalarArg::kHeadScale, 0.0, false, "head_scale: expected a finite number > 0, got 0"},
      {ScalarArg::kHeadScale, -0.0, false, "head_scale: expected a finite number > 0, got -0"},
      {ScalarArg::kHeadScale, -2.0, false, "head_scale: expected a finite number > 0, got -2"},
      {ScalarArg::kHeadScale, 1e-50, false, "head_scale: expected a finite number > 0, got 1e-50, which rounds to 0 in float32"},
      {ScalarArg::kHeadScale, -1e-46, false, "head_scale: expected a finite number > 0, got -1e-46"},
      // finite, and finite in float32
      {ScalarArg::kWeightScale, 1e300, false, "weight_scale: expected a finite number > 0, got 1e+300, which is inf in float32"},
      {ScalarArg::kWeightScale, -1e300, false, "weight_scale: expected a finite number > 0, got -1e+300"},
      {ScalarArg::kWeightScale, 3.5e38, false, "got 3.5e+38, which is inf in float32"},
      {ScalarArg::kHeadScale, 3.5e38, false, "head_scale: expected a finite number > 0, got 3.5e+38, which is inf in float32"},
      {ScalarArg::kHeadScale, std::nan(""), false, "head_scale: expected a finite number > 0, got nan"},
      {ScalarArg::kHeadScale, -inf, false, "head_scale: expected a finite number > 0, got -inf"},
      {ScalarArg::kWeightScale, inf, false, "weight_scale: expected a finite number > 0, got inf"},
      {ScalarArg::kEps, 0.0, true, ""},  // eps >= 0: 0 is the plain RMS norm
      {ScalarArg::kEps, 1e-6, true, ""},
      {ScalarArg::kEps, -1e-6, false, "eps: expected a finite number >= 0, got -1e-06"},
      {ScalarArg::kEps, -0.0, false, "eps: expected a finite number >= 0, got -0"},
      {ScalarArg::kEps, 1e-60, false, "eps: expected a finite number >= 0, got 1e-60, which rounds to 0 in float32"},
      {ScalarArg::kEps, 1e39, false, "eps: expected a finite number >= 0, got 1e+39, which is inf in float32"},
      {ScalarArg::kEps, inf, false, "eps: expected a finite number >= 0, got inf"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(scalar_arg_name(c.arg)) + " " + std::to_string(c.v));
    float f = -7.0f;
    const Status s = check_scalar(c.arg, c.v, &f);
    EXPECT_EQ(s.ok(), c.ok) << s.message();
    if (c.ok) {
      EXPECT_EQ(f, static_cast<float>(c.v));
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(f, -7.0f) << "*out written on error";
      EXPECT_EQ(s.message().rfind("indexer_q: ", 0), 0u) << s.message();
      EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
    }
  }
  EXPECT_EQ(check_scalar(ScalarArg::kWeightScale, std::nan("")).message(),
            "indexer_q: weight_scale: expected a finite number > 0, got nan");
  EXPECT_EQ(check_scalar(ScalarArg::kHeadScale, 0.0).message(), "indexer_q: head_scale: expected a finite number > 0, got 0");
}

// validate() on the float32 field gives exactly check_scalar's message for the same value.
TEST(ScalarSpecs, ValidateAgreesWithCheckScalar) {
  std::vector<std::uint8_t> q(kB * kH * 128 * 2, 0), out(kB * kH * 128, kSentinel), w(kB * kH * 2, 0),
      wo(kB * kH * 4, kSentinel);
  const std::vector<float> fr = iqtest::rope_freqs(kMaxPos);
  const std::int64_t pos[3] = {0, 1, 2};
  OpArgs a;
  a.q_input = TensorView::contiguous(q.data(), DType::kBFloat16, {kB, kH, 128});
  a.q_out = TensorView::contiguous(out.data(), DType::kFloat8E4M3, {kB, kH, 128});
  a.weight = TensorView::contiguous(w.data(), DType::kBFloat16, {kB, kH});
  a.weights_out = TensorView::contiguous(wo.data(), DType::kFloat32, {kB, kH, 1});
  a.freqs = TensorView::contiguous(fr.data(), DType::kFloat32, {kMaxPos, 64});
  a.positions = TensorView::contiguous(pos, DType::kInt64, {kB});
  for (float v : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::infinity(), 0.0f, -0.0f, -0.5f,
                  -std::numeric_limits<float>::denorm_min()}) {
    OpArgs b = a;
    b.weight_scale = v;
    EXPECT_EQ(validate(b).message(), check_scalar(ScalarArg::kWeightScale, double(v)).message());
    EXPECT_EQ(run(b).message(), check_scalar(ScalarArg::kWeightScale, double(v)).message());
    b = a;
    b.head_scale = v;
    EXPECT_EQ(validate(b).message(), check_scalar(ScalarArg::kHeadScale, double(v)).message());
    // the legacy signature too
    EXPECT_EQ(validate(a.q_input, a.q_out, a.weight, a.weights_out, v, a.freqs, a.positions).message(),
              check_scalar(ScalarArg::kWeightScale, double(v)).message());
  }
  EXPECT_EQ(out, std::vector<std::uint8_t>(out.size(), kSentinel));
  EXPECT_EQ(wo, std::vector<std::uint8_t>(wo.size(), kSentinel));
}

// The key side's eps: the same check (finite, >= 0), by validate() and run(); nothing written.
TEST(ScalarSpecs, KsideEps) {
  constexpr std::int64_t N = 2, kTok = 132;
  std::vector<float> x(N * 128, 0.5f), wt(128, 1.0f);
  const std::vector<float> fr = iqtest::rope_freqs(kMaxPos);
  const std::int64_t pos[N] = {0, 3}, slots[N] = {0, 1};
  std::vector<std::uint8_t> cache(N * kTok, kSentinel);
  KStoreArgs k;
  k.recipe = KRecipeId::kV4KFp8;
  k.input = TensorView::contiguous(x.data(), DType::kFloat32, {N, 128});
  k.weight = TensorView::contiguous(wt.data(), DType::kFloat32, {128});
  k.freqs = TensorView::contiguous(fr.data(), DType::kFloat32, {kMaxPos, 64});
  k.positions = TensorView::contiguous(pos, DType::kInt64, {N});
  k.slots = TensorView::contiguous(slots, DType::kInt64, {N});
  k.kvcache = TensorView::contiguous(cache.data(), DType::kUInt8, {N, kTok});
  k.page_size = 1;
  Options o;
  o.backend = Backend::kReference;
  ASSERT_TRUE(validate(k, o).ok()) << validate(k, o).message();
  for (float v : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e-6f, -0.0f}) {
    KStoreArgs b = k;
    b.eps = v;
    const Status sv = validate(b, o), sr = run(b, o);
    EXPECT_EQ(sv.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(sv.message(), sr.message());
    EXPECT_EQ(sv.message(), check_scalar(ScalarArg::kEps, double(v)).message());
    EXPECT_EQ(sv.message().rfind("indexer_q: eps: expected a finite number >= 0, got ", 0), 0u) << sv.message();
    EXPECT_EQ(cache, std::vector<std::uint8_t>(cache.size(), kSentinel));
  }
  KStoreArgs z = k;
  z.eps = 0.0f;
  EXPECT_TRUE(run(z, o).ok()) << run(z, o).message();
  EXPECT_NE(cache, std::vector<std::uint8_t>(cache.size(), kSentinel));
}

}  // namespace rv

}  // namespace
