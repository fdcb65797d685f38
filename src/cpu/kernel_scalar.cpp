// Portable CPU kernel: the row pipeline of src/common/row.h for the call's recipe, one row at a time. This is the
// only variant on non-x86 processors and the fallback everywhere.
#include <cstdint>

#include "common/problem.h"
#include "common/row.h"
#include "cpu/cpu_internal.h"

namespace indexer_q {
namespace detail {
namespace cpu {
namespace {

template <class R, typename Decode>
void run_rows(const Problem& p, std::int64_t row_begin, std::int64_t row_end, Decode decode) {
  float x[kHeadDim];
  const std::int64_t H = p.H;
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::int64_t b = r / H;
    const std::int64_t h = r - b * H;
    // Without RoPE (RopeDims::kNoRope) freqs and positions are null and never read; without
    // weights (WeightFold::kNoWeights) weight and weights_out are null and never touched.
    const float* freqs_row = nullptr;
    if (R::kRope) {
      const std::int64_t pos = p.pos_dtype == DType::kInt32
                                   ? std::int64_t(static_cast<const std::int32_t*>(p.positions)[b])
                                   : static_cast<const std::int64_t*>(p.positions)[b];
      freqs_row = p.freqs + pos * kFreqsDim;
    }
    for (int i = 0; i < kHeadDim; ++i) x[i] = decode(p.q_input, r * kHeadDim + i);
    const float w = R::kWeights ? load_float(p.weight, p.weight_dtype, b * p.weight_stride_b + h) : 0.0f;
    process_row<R>(x, freqs_row, w, p.weight_scale, p.head_scale, p.q_out + r * R::kOutBytes,
                   R::kSf ? p.q_sf + 4 * r : nullptr, R::kWeights ? p.weights_out + r : nullptr);
  }
}

}  // namespace

void kernel_scalar(const Problem& p, std::int64_t row_begin, std::int64_t row_end) {
  with_recipe(p.recipe, [&](auto rec) {
    using R = decltype(rec);
    switch (p.dtype) {
      case DType::kBFloat16:
        run_rows<R>(p, row_begin, row_end, [](const void* base, std::int64_t i) {
          return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
        });
        break;
      case DType::kFloat16:
        run_rows<R>(p, row_begin, row_end, [](const void* base, std::int64_t i) {
          return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
        });
        break;
      default:
        run_rows<R>(p, row_begin, row_end,
                    [](const void* base, std::int64_t i) { return static_cast<const float*>(base)[i]; });
        break;
    }
  });
}

void quantize_scalar(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = quantize_value(y[i], inv);
}

void encode_fp4_scalar(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = e2m1_encode(y[i] * inv);
}

void quantize_vllm_scalar(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  // The kernels' x * inv form (inv = 1 / q_scale) of row.h's vllm_fp8_code(x, q_scale).
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = y[i] * inv;
    out[i] = v != v ? std::uint8_t(0x7fu) : e4m3fn_encode(v);
  }
}

void encode_mxfp4_scalar(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = mx_e2m1_encode(y[i] * inv);
}

void encode_rne_fp4_scalar(const float* y, float inv, std::uint8_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = e2m1_encode_rne(y[i] * inv);
}
void stage1_fp4_scalar(const float* x, float inv1, float sc, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = stage1_value(x[i], inv1, sc);
}
void rne_ue8m0_scalar(const float* amax, std::uint8_t* e, float* inv, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t x = rne_ue8m0_of_amax(amax[i]);
    e[i] = std::uint8_t(x);
    inv[i] = rne_inverse(x);
  }
}

#if !defined(IQ_CPU_HAVE_AVX512)
QuantizeFn fp8_fast_encoder_avx512() { return nullptr; }
#endif

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
