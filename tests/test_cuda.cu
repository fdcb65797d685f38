// Tests of the CUDA backend (skipped when no CUDA device is usable):
//  - the GPU fp8 conversion against the scalar encoder for every float32 bit pattern;
//  - every kernel variant (automatic, 4 / 8 / 16 lanes per row, the scalar fallback) and the
//    benchmark baseline against the scalar reference, byte for byte, bf16 / fp16 / fp32,
//    int32 / int64 positions, padded weight rows, B = 1 up to large B;
//  - out-of-range positions (negative, == max_pos, huge int64, INT_MIN/MAX): codes 0 and
//    weights_out NaN for those rows, the other rows exact, and no out-of-bounds read (freqs
//    is allocated to exactly max_pos rows; run this binary under compute-sanitizer);
//  - the op on a non-default stream (no host synchronization: it queues behind a busy kernel);
//  - capture in a CUDA graph (global capture mode) and replay with new inputs, PDL off and on;
//  - PDL on gives the bytes of PDL off, also when the previous kernel writes the input;
//  - misaligned pointers, pointers of the wrong kind, launch errors.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../bench/cuda_baseline.cuh"
#include "common/problem.h"
#include "common/row.h"
#include "cuda/cuda_backend.h"
#include "cuda/fp8_e4m3.cuh"
#include "iq_test_util.h"

namespace {

using namespace indexer_q;
using iqtest::HostCase;
using iqtest::Outputs;

#define CUDA_OK(expr)                                                          \
  do {                                                                         \
    const cudaError_t e_ = (expr);                                             \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);     \
  } while (0)

bool have_device() { return backend_available(Backend::kCuda); }
#define SKIP_WITHOUT_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no usable CUDA device"

struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  bool alloc(std::size_t n) { return cudaMalloc(&p, n ? n : 16) == cudaSuccess; }
};

// A case in device memory. freqs holds exactly max_pos rows (nothing after them), so an
// out-of-range read is an out-of-bounds access that compute-sanitizer reports.
struct DeviceCase {
  DevBuf q, fp8, w, wo, freqs, pos;
  std::size_t n_fp8 = 0, n_wo = 0;
  detail::Problem prob;

  bool upload(const HostCase& c) {
    n_fp8 = std::size_t(c.B * c.H * 128);
    n_wo = std::size_t(c.B * c.H) * 4;
    if (!q.alloc(c.q_input.size()) || !fp8.alloc(n_fp8) || !w.alloc(c.weight.size()) || !wo.alloc(n_wo) ||
        !freqs.alloc(c.freqs.size() * 4) || !pos.alloc(c.positions.size()))
      return false;
    if (!set_inputs(c)) return false;
    prob.B = c.B;
    prob.H = c.H;
    prob.dtype = c.dtype;
    prob.q_input = q.p;
    prob.q_fp8 = static_cast<std::uint8_t*>(fp8.p);
    prob.weight = w.p;
    prob.weight_stride_b = c.weight_stride;
    prob.weights_out = static_cast<float*>(wo.p);
    prob.weight_scale = c.weight_scale;
    prob.freqs = static_cast<const float*>(freqs.p);
    prob.max_pos = c.max_pos;
    prob.positions = pos.p;
    prob.pos_dtype = c.pos_dtype;
    prob.device = Device{DeviceType::kCUDA, 0};
    return true;
  }
  // Same shapes, new contents.
  bool set_inputs(const HostCase& c) {
    return cudaMemcpy(q.p, c.q_input.data(), c.q_input.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(w.p, c.weight.data(), c.weight.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(freqs.p, c.freqs.data(), c.freqs.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(pos.p, c.positions.data(), c.positions.size(), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  bool poison(unsigned char v) {
    return cudaMemset(fp8.p, v, n_fp8) == cudaSuccess && cudaMemset(wo.p, v, n_wo) == cudaSuccess;
  }
  bool download(Outputs* out) {
    out->q_fp8.assign(n_fp8, 0);
    out->weights_out.assign(n_wo / 4, 0.0f);
    return cudaDeviceSynchronize() == cudaSuccess &&
           cudaMemcpy(out->q_fp8.data(), fp8.p, n_fp8, cudaMemcpyDeviceToHost) == cudaSuccess &&
           cudaMemcpy(out->weights_out.data(), wo.p, n_wo, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  // Views for the public API.
  Status call(const Options& o) const {
    const Device d = prob.device;
    return fused_q_indexer_rope_hadamard_quant(
        TensorView::contiguous(prob.q_input, prob.dtype, {prob.B, prob.H, 128}, d),
        TensorView::contiguous(prob.q_fp8, DType::kFloat8E4M3, {prob.B, prob.H, 128}, d),
        TensorView::strided(prob.weight, prob.dtype, {prob.B, prob.H}, {prob.weight_stride_b, 1}, d),
        TensorView::contiguous(prob.weights_out, DType::kFloat32, {prob.B, prob.H, 1}, d), prob.weight_scale,
        TensorView::contiguous(prob.freqs, DType::kFloat32, {prob.max_pos, 64}, d),
        TensorView::contiguous(prob.positions, prob.pos_dtype, {prob.B}, d), o);
  }
};

Outputs reference_outputs(const HostCase& c) {
  iqtest::BackendUnderTest ref;
  ref.name = "reference";
  ref.options.backend = Backend::kReference;
  Outputs want;
  const Status s = iqtest::run_case(ref, c, &want, 0xA5);
  EXPECT_TRUE(s.ok()) << s.message();
  return want;
}

detail::Variant V(int lanes, int block = 0, bool persistent = false, bool tma = false) {
  detail::Variant v;
  v.lanes = lanes;
  v.block = block;
  v.persistent = persistent;
  v.tma = tma;
  return v;
}

std::string variant_name(const detail::Variant& v) {
  if (v.lanes < 0) return "auto";
  if (v.lanes == 0) return "scalar-fallback";
  return std::string(v.tma ? "tma " : "") + (v.persistent ? "persistent " : "") + "lanes=" + std::to_string(v.lanes) +
         " block=" + std::to_string(v.block);
}

// Every shape the backend can launch.
std::vector<detail::Variant> all_variants() {
  std::vector<detail::Variant> v = {V(-1), V(0)};
  for (int lanes : {4, 8, 16})
    for (int block : {256, 64})
      for (bool persistent : {false, true}) v.push_back(V(lanes, block, persistent));
  v.push_back(V(4, 256, true, true));
  v.push_back(V(8, 256, true, true));
  v.push_back(V(2, 256));
  v.push_back(V(2, 64));
  v.push_back(V(4, 128));
  v.push_back(V(16, 128));
  return v;
}

// ---------------------------------------------------------------------------------------
// fp8 conversion: every float32 bit pattern
// ---------------------------------------------------------------------------------------
__global__ void fp8_sweep_kernel(unsigned long long* mismatches, unsigned int* first_bad) {
  const std::uint64_t n = 1ull << 32;
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (std::uint64_t u = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += stride) {
    const float v = __uint_as_float(std::uint32_t(u));
    const std::uint32_t want =
        detail::e4m3fn_encode(fmaxf(fminf(v, detail::kFp8Max), -detail::kFp8Max));  // SPEC steps 8, 9
    const std::uint32_t got_lo = detail::quantize4_e4m3(v, 1.0f, -2.0f, 0.0f);
    const std::uint32_t got_hi = detail::quantize4_e4m3(0.5f, -0.0f, 3.0f, v);
    // Without the clamp: equal for every non-NaN input.
    const std::uint32_t sat = detail::quantize4_e4m3_sat(-1.0f, v, 0.25f, 7.0f);
    const bool sat_bad = !isnan(v) && ((sat >> 8) & 0xffu) != want;
    if ((got_lo & 0xffu) != want || (got_hi >> 24) != want || sat_bad) {
      ++bad;
      atomicMin(first_bad, std::uint32_t(u));
    }
  }
  if (bad) atomicAdd(mismatches, bad);
}

TEST(Cuda, Fp8ConversionMatchesScalarEncoderForEveryFloat) {
  SKIP_WITHOUT_DEVICE();
  DevBuf m, f;
  ASSERT_TRUE(m.alloc(8) && f.alloc(4));
  CUDA_OK(cudaMemset(m.p, 0, 8));
  CUDA_OK(cudaMemset(f.p, 0xff, 4));
  fp8_sweep_kernel<<<4096, 256>>>(static_cast<unsigned long long*>(m.p), static_cast<unsigned int*>(f.p));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  unsigned long long mismatches = 0;
  unsigned int first = 0;
  CUDA_OK(cudaMemcpy(&mismatches, m.p, 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&first, f.p, 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(mismatches, 0ull) << "first differing input bits 0x" << std::hex << first;
}

__global__ void fp8_order_kernel(std::uint32_t* out) {
  out[0] = detail::quantize4_e4m3(1.0f, 2.0f, -448.0f, 0.015625f);
}

TEST(Cuda, Fp8ConversionByteOrder) {
  SKIP_WITHOUT_DEVICE();
  DevBuf o;
  ASSERT_TRUE(o.alloc(4));
  fp8_order_kernel<<<1, 1>>>(static_cast<std::uint32_t*>(o.p));
  CUDA_OK(cudaGetLastError());
  std::uint32_t got = 0;
  CUDA_OK(cudaMemcpy(&got, o.p, 4, cudaMemcpyDeviceToHost));
  // 1.0 = 0x38, 2.0 = 0x40, -448 = 0xfe, 2^-6 = 0x08; byte j holds value j.
  EXPECT_EQ(got, 0x08fe4038u);
}

// ---------------------------------------------------------------------------------------
// every kernel variant against the reference
// ---------------------------------------------------------------------------------------
void check_variants(const HostCase& c, const std::vector<detail::Variant>& variants) {
  SCOPED_TRACE(c.describe());
  const Outputs want = reference_outputs(c);
  DeviceCase d;
  ASSERT_TRUE(d.upload(c));
  for (const detail::Variant& v : variants) {
    ASSERT_TRUE(d.poison(0x5A));
    const Status s = detail::cuda_run_variant(d.prob, nullptr, false, v);
    ASSERT_TRUE(s.ok()) << s.message();
    Outputs got;
    ASSERT_TRUE(d.download(&got));
    const iqtest::Comparison cmp = iqtest::compare(got, want, c.H);
    EXPECT_TRUE(cmp.exact()) << variant_name(v) << ": " << cmp.fp8_bytes << " fp8 bytes, " << cmp.weights
                             << " weights_out differ;" << cmp.first;
  }
}

TEST(Cuda, EveryVariantMatchesReference) {
  SKIP_WITHOUT_DEVICE();
  std::uint64_t seed = 1000;
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (DType pt : {DType::kInt32, DType::kInt64}) {
      for (auto bh : std::vector<std::pair<int, int>>{{1, 64}, {1, 1}, {3, 16}, {5, 8}, {33, 32}, {129, 3}, {257, 64}}) {
        const std::int64_t stride = (seed % 2) ? bh.second : bh.second + 3;
        check_variants(iqtest::random_case(bh.first, bh.second, dt, pt, stride, ++seed), all_variants());
      }
    }
  }
}

// Rows whose Hadamard meets Inf - Inf, overflows, or carries NaN: the kernels skip step 8's
// clamp on rows that cannot hold a NaN product, so these rows check that reasoning.
TEST(Cuda, NonFiniteRowsMatchReference) {
  SKIP_WITHOUT_DEVICE();
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const float big = dt == DType::kFloat16 ? 65504.0f : 3.0e38f;
    const std::vector<std::vector<std::pair<int, float>>> rows = {
        {{0, INFINITY}, {1, INFINITY}},                          // Inf - Inf at stride 1
        {{0, INFINITY}, {1, -INFINITY}},                         // Inf + -Inf
        {{3, INFINITY}, {67, -INFINITY}},                        // meet late
        {{0, INFINITY}, {1, INFINITY}, {2, -INFINITY}, {3, INFINITY}},
        {{0, big}, {1, -big}},                                   // overflow in one branch
        {{5, big}, {6, big}, {9, big}, {10, big}},               // overflow, finite elsewhere
        {{0, big}, {1, big}, {2, -big}, {3, -big}},              // overflow then Inf - Inf
        {{7, NAN}},                                              // one NaN
        {{70, NAN}},                                             // one NaN in the rotated half
        {{0, INFINITY}},                                         // one Inf
        {{100, -INFINITY}},                                      // one -Inf, rotated
        {{2, big}, {64, big}, {65, big}},                        // rotated overflow
    };
    const std::int64_t H = std::int64_t(rows.size());
    HostCase c = iqtest::random_case(3, H, dt, DType::kInt64, H, 31337);
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (const auto& e : rows[std::size_t(h)])
          iqtest::store_as(c.q_input, dt, std::size_t((b * H + h) * 128 + e.first), e.second);
    check_variants(c, all_variants());
  }
}

TEST(Cuda, LargeBatchMatchesReference) {
  SKIP_WITHOUT_DEVICE();
  check_variants(iqtest::random_case(4099, 64, DType::kBFloat16, DType::kInt64, 64, 77),
                 {V(-1), V(4, 256), V(4, 256, true), V(8, 256, true), V(4, 256, true, true), V(8, 256, true, true)});
  check_variants(iqtest::random_case(8191, 16, DType::kFloat16, DType::kInt32, 20, 78), {V(-1), V(4, 128, true), V(4, 256, true, true)});
}

TEST(Cuda, BaselineKernelMatchesReference) {
  SKIP_WITHOUT_DEVICE();
  std::uint64_t seed = 500;
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (DType pt : {DType::kInt32, DType::kInt64}) {
      const HostCase c = iqtest::random_case(37, 16, dt, pt, 19, ++seed);
      SCOPED_TRACE(c.describe());
      const Outputs want = reference_outputs(c);
      DeviceCase d;
      ASSERT_TRUE(d.upload(c));
      ASSERT_TRUE(d.poison(0x5A));
      const bench::BaselineArgs a{d.q.p, static_cast<std::uint8_t*>(d.fp8.p), d.w.p, c.weight_stride,
                                  static_cast<float*>(d.wo.p), c.weight_scale,
                                  static_cast<const float*>(d.freqs.p), c.max_pos, d.pos.p, c.B * c.H, c.H};
      const int code = dt == DType::kBFloat16 ? 0 : dt == DType::kFloat16 ? 1 : 2;
      CUDA_OK(bench::launch_baseline_warp(a, code, pt == DType::kInt64, nullptr));
      Outputs got;
      ASSERT_TRUE(d.download(&got));
      const iqtest::Comparison cmp = iqtest::compare(got, want, c.H);
      EXPECT_TRUE(cmp.exact()) << cmp.fp8_bytes << " fp8 bytes, " << cmp.weights << " weights differ;" << cmp.first;
    }
  }
}

// ---------------------------------------------------------------------------------------
// out-of-range positions
// ---------------------------------------------------------------------------------------
void check_bad_positions(DType pos_dtype, const std::vector<std::int64_t>& positions) {
  const std::int64_t B = std::int64_t(positions.size()), H = 8;
  HostCase c = iqtest::random_case(B, H, DType::kBFloat16, pos_dtype, H, 4242);
  // The reference sees in-range positions only: out-of-range ones replaced by 0.
  HostCase in_range = c;
  std::vector<bool> bad(std::size_t(B), false);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t p = positions[std::size_t(b)];
    bad[std::size_t(b)] = p < 0 || p >= c.max_pos;
    iqtest::set_position(c, b, p);
    iqtest::set_position(in_range, b, bad[std::size_t(b)] ? 0 : p);
  }
  SCOPED_TRACE(c.describe());
  const Outputs want = reference_outputs(in_range);
  DeviceCase d;
  ASSERT_TRUE(d.upload(c));
  for (const detail::Variant& lanes : all_variants()) {
    ASSERT_TRUE(d.poison(0x5A));
    const Status s = detail::cuda_run_variant(d.prob, nullptr, false, lanes);
    ASSERT_TRUE(s.ok()) << s.message();
    Outputs got;
    ASSERT_TRUE(d.download(&got));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < H; ++h) {
        const std::size_t r = std::size_t(b * H + h);
        if (bad[std::size_t(b)]) {
          for (int i = 0; i < 128; ++i)
            ASSERT_EQ(got.q_fp8[r * 128 + i], 0) << variant_name(lanes) << " b=" << b << " h=" << h << " i=" << i;
          EXPECT_TRUE(std::isnan(got.weights_out[r])) << variant_name(lanes) << " b=" << b << " h=" << h;
        } else {
          EXPECT_EQ(std::memcmp(&got.q_fp8[r * 128], &want.q_fp8[r * 128], 128), 0)
              << variant_name(lanes) << " b=" << b << " h=" << h;
          EXPECT_TRUE(iqtest::same_float(got.weights_out[r], want.weights_out[r]))
              << variant_name(lanes) << " b=" << b << " h=" << h;
        }
      }
    }
  }
}

TEST(Cuda, OutOfRangePositionsGiveZeroCodesAndNaNWeights) {
  SKIP_WITHOUT_DEVICE();
  // random_case(seed 4242) picks max_pos; out-of-range values are chosen relative to it below.
  const std::int64_t max_pos = iqtest::random_case(1, 8, DType::kBFloat16, DType::kInt64, 8, 4242).max_pos;
  check_bad_positions(DType::kInt64, {-1, max_pos, std::int64_t(1) << 62, LLONG_MIN, max_pos - 1, 0, LLONG_MAX,
                                      max_pos + 1, -max_pos});
  check_bad_positions(DType::kInt32, {0, -1, max_pos, INT_MIN, INT_MAX, max_pos - 1, -7});
}

// ---------------------------------------------------------------------------------------
// streams, graphs, PDL
// ---------------------------------------------------------------------------------------
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Waits, then copies src to dst (the "previous kernel" that produces the op's input).
__global__ void late_copy_kernel(const uint4* src, uint4* dst, std::size_t n16, long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

TEST(Cuda, RunsOnTheCallersStreamWithoutHostSync) {
  SKIP_WITHOUT_DEVICE();
  const HostCase c = iqtest::random_case(19, 64, DType::kBFloat16, DType::kInt64, 64, 31);
  const Outputs want = reference_outputs(c);
  DeviceCase d;
  ASSERT_TRUE(d.upload(c));
  ASSERT_TRUE(d.poison(0x5A));
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  spin_kernel<<<1, 1, 0, s>>>(200000000LL);  // ~0.1 s: the op must queue behind it
  CUDA_OK(cudaGetLastError());
  Options o;
  o.backend = Backend::kCuda;
  o.stream = s;
  const Status st = d.call(o);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "the call returned only after the stream drained";
  CUDA_OK(cudaStreamSynchronize(s));
  Outputs got;
  ASSERT_TRUE(d.download(&got));
  const iqtest::Comparison cmp = iqtest::compare(got, want, c.H);
  EXPECT_TRUE(cmp.exact()) << cmp.first;
  cudaStreamDestroy(s);
}

TEST(Cuda, GraphCaptureReplaysWithNewInputs) {
  SKIP_WITHOUT_DEVICE();
  const HostCase c1 = iqtest::random_case(23, 16, DType::kBFloat16, DType::kInt32, 16, 61);
  HostCase c2 = iqtest::random_case(23, 16, DType::kBFloat16, DType::kInt32, 16, 62);
  c2.max_pos = c1.max_pos;
  c2.freqs = iqtest::rope_freqs(c1.max_pos, 5000.0);
  c2.weight_scale = c1.weight_scale;  // a graph keeps its scalar arguments
  for (std::int64_t b = 0; b < c2.B; ++b) iqtest::set_position(c2, b, (b * 7919) % c1.max_pos);
  const Outputs want1 = reference_outputs(c1), want2 = reference_outputs(c2);
  for (bool pdl : {false, true}) {
    SCOPED_TRACE(pdl ? "pdl on" : "pdl off");
    DeviceCase d;
    ASSERT_TRUE(d.upload(c1));
    ASSERT_TRUE(d.poison(0x5A));
    cudaStream_t s = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Options o;
    o.backend = Backend::kCuda;
    o.stream = s;
    o.enable_pdl = pdl;
    cudaGraph_t g = nullptr;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const Status st1 = d.call(o);
    const Status st2 = d.call(o);  // two calls: with PDL the second depends programmatically
    CUDA_OK(cudaStreamEndCapture(s, &g));
    ASSERT_TRUE(st1.ok() && st2.ok()) << st1.message() << st2.message();
    cudaGraphExec_t ge = nullptr;
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    Outputs got;
    ASSERT_TRUE(d.download(&got));
    EXPECT_EQ(got.q_fp8, std::vector<std::uint8_t>(got.q_fp8.size(), 0x5A)) << "capture executed work";
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    ASSERT_TRUE(d.download(&got));
    iqtest::Comparison cmp = iqtest::compare(got, want1, c1.H);
    EXPECT_TRUE(cmp.exact()) << "first inputs:" << cmp.first;
    ASSERT_TRUE(d.set_inputs(c2));
    ASSERT_TRUE(d.poison(0x5A));
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    ASSERT_TRUE(d.download(&got));
    cmp = iqtest::compare(got, want2, c2.H);
    EXPECT_TRUE(cmp.exact()) << "new inputs:" << cmp.first;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

TEST(Cuda, PdlGivesTheSameBytesAndWaitsForThePreviousKernel) {
  SKIP_WITHOUT_DEVICE();
  std::uint64_t seed = 90;
  for (const detail::Variant& lanes : all_variants()) {
    SCOPED_TRACE(variant_name(lanes));
    const HostCase c = iqtest::random_case(300, 64, DType::kBFloat16, DType::kInt64, 64, ++seed);
    const Outputs want = reference_outputs(c);
    DeviceCase d;
    ASSERT_TRUE(d.upload(c));
    // The device input starts as garbage; a slow previous kernel writes the real input.
    DevBuf staging;
    ASSERT_TRUE(staging.alloc(c.q_input.size()));
    CUDA_OK(cudaMemcpy(staging.p, c.q_input.data(), c.q_input.size(), cudaMemcpyHostToDevice));
    cudaStream_t s = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Outputs got[2];
    for (int pdl = 0; pdl < 2; ++pdl) {
      CUDA_OK(cudaMemset(d.q.p, 0x7f, c.q_input.size()));
      ASSERT_TRUE(d.poison(0x5A));
      late_copy_kernel<<<264, 256, 0, s>>>(static_cast<const uint4*>(staging.p), static_cast<uint4*>(d.q.p),
                                           c.q_input.size() / 16, 2000000LL);
      CUDA_OK(cudaGetLastError());
      const Status st = detail::cuda_run_variant(d.prob, s, pdl == 1, lanes);
      ASSERT_TRUE(st.ok()) << st.message();
      CUDA_OK(cudaStreamSynchronize(s));
      ASSERT_TRUE(d.download(&got[pdl]));
      const iqtest::Comparison cmp = iqtest::compare(got[pdl], want, c.H);
      EXPECT_TRUE(cmp.exact()) << "pdl=" << pdl << ":" << cmp.first;
    }
    EXPECT_EQ(got[0].q_fp8, got[1].q_fp8);
    EXPECT_EQ(std::memcmp(got[0].weights_out.data(), got[1].weights_out.data(), got[0].weights_out.size() * 4), 0);
    cudaStreamDestroy(s);
  }
}

// ---------------------------------------------------------------------------------------
// alignment, argument and launch errors
// ---------------------------------------------------------------------------------------
TEST(Cuda, MisalignedPointersAreExact) {
  SKIP_WITHOUT_DEVICE();
  for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
    const HostCase c = iqtest::random_case(9, 16, dt, DType::kInt64, 16, 1234);
    const Outputs want = reference_outputs(c);
    DeviceCase d;
    ASSERT_TRUE(d.upload(c));
    // Same data one element further in a larger buffer: q_input no longer 16-byte aligned.
    DevBuf q2, fp82;
    const std::size_t es = dtype_size(dt);
    ASSERT_TRUE(q2.alloc(c.q_input.size() + es) && fp82.alloc(d.n_fp8 + 1));
    CUDA_OK(cudaMemcpy(static_cast<char*>(q2.p) + es, c.q_input.data(), c.q_input.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(fp82.p, 0x5A, d.n_fp8 + 1));
    CUDA_OK(cudaMemset(d.wo.p, 0x5A, d.n_wo));
    detail::Problem p = d.prob;
    p.q_input = static_cast<char*>(q2.p) + es;
    p.q_fp8 = static_cast<std::uint8_t*>(fp82.p) + 1;
    const Status s = detail::cuda_run(p, nullptr, false);
    ASSERT_TRUE(s.ok()) << s.message();
    CUDA_OK(cudaDeviceSynchronize());
    Outputs got;
    got.q_fp8.resize(d.n_fp8);
    got.weights_out.resize(d.n_wo / 4);
    CUDA_OK(cudaMemcpy(got.q_fp8.data(), static_cast<char*>(fp82.p) + 1, d.n_fp8, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got.weights_out.data(), d.wo.p, d.n_wo, cudaMemcpyDeviceToHost));
    const iqtest::Comparison cmp = iqtest::compare(got, want, c.H);
    EXPECT_TRUE(cmp.exact()) << dtype_name(dt) << ":" << cmp.first;
  }
}

TEST(Cuda, ErrorsAreReportedNotCrashed) {
  SKIP_WITHOUT_DEVICE();
  const HostCase c = iqtest::random_case(2, 8, DType::kBFloat16, DType::kInt64, 8, 5);
  DeviceCase d;
  ASSERT_TRUE(d.upload(c));
  // Host memory labelled as CUDA memory.
  std::vector<std::uint8_t> host_fp8(d.n_fp8);
  detail::Problem p = d.prob;
  p.q_fp8 = host_fp8.data();
  Status s = detail::cuda_run(p, nullptr, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q_fp8"), std::string::npos) << s.message();
  // A device that does not exist.
  p = d.prob;
  p.device.index = 97;
  s = detail::cuda_run(p, nullptr, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  // A launch error: a block larger than the hardware allows.
  s = detail::cuda_run_variant(d.prob, nullptr, false, V(4, 4096));
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("launch"), std::string::npos) << s.message();
  // The error was consumed: the next call works.
  s = detail::cuda_run(d.prob, nullptr, false);
  EXPECT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
