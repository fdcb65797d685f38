// The CUDA backend of fused_q_indexer_rope_hadamard_quant, every recipe of
// include/indexer_q/recipes.inc from one kernel body (rowgroup_kernel<R, ...>, R = RecipeT<Id>
// of src/common/recipe.h; the host picks the instantiation through with_recipe).
//
// Design (the "row-group" kernel): each row of 128 values is processed by LANES consecutive
// threads of one warp (LANES = 4, 8 or 16 as listed; the body takes 2 too), a group of lanes taking GR rows (group_rows: 1 or
// 2; every load of its rows issued before the first row's arithmetic). The shapes compiled and
// the automatic choice by grid size and recipe are one list, src/cuda/launch_shapes.inc (H200
// measurements there and in bench/HISTORY.md); INDEXER_Q_CUDA_SHAPE overrides the choice for
// tuning (cuda_run). A lane holds C = 128 / (8 * LANES) chunks of 8 contiguous values; element
// i of the row lives in
//     chunk c = i / (8 * LANES),   lane l = (i / 8) % LANES,   slot k = i % 8.
// Each chunk is one 16-byte load (bf16 / fp16) or two (fp32), and one 8-byte store of fp8
// codes (or one 4-byte store of fp4 code pairs).
//
// RoPE: the recipe's 64 rotated dims (0..63 or 64..127) are whole chunks (or, with 16 lanes,
// whole lanes), so a chunk either rotates all its 4 pairs or none; its 4 (cos, sin) pairs are
// two 16-byte loads of the freqs row in either layout (interleaved: 8 contiguous floats;
// halves: 4 cos at j0, 4 sin at 32 + j0).
//
// The Hadamard butterflies (recipes with kHadamard) run in the order SPEC.md fixes (strides
// 1, 2, 4, ..., 64):
//   strides 1, 2, 4            (bits of k)  inside a chunk, in registers;
//   strides 8 .. 4 * LANES     (bits of l)  across lanes, one shuffle per value;
//   strides 8 * LANES .. 64    (bits of c)  across a lane's chunks, in registers.
// Every add and subtract is the spec's: across lanes the low lane computes own + partner and
// the high lane partner - own, both written as one fma with a multiplier of +1 / -1, which
// rounds exactly like the plain add / subtract (the product by +-1 is exact).
//
// FP8 (e4m3fn, e4m3fnuz): Hopper's cvt.rn.satfinite.e4m3x2.f32 (round to nearest even,
// saturating to +-448) equals the spec's clamp-then-encode for every non-NaN product; step 8's
// fmin(., 448) (NaN -> +448) is applied only to rows that can hold a NaN product (row_amax:
// rows with a NaN or an infinity). FNUZ (SGLang's quantizer): the fn bytes with 0x80 -> 0x00, weights_out times 2.
// FP4 (e2m1 + UE8M0 per 32 dims): a block of 32 dims is 4 consecutive chunks, i.e. the same
// chunk c of 4 consecutive lanes (block = (c * LANES + l) / 4; with 2 lanes, chunks c, c ^ 1 of
// both lanes: block_max), so a block's amax is one in-thread max over 8 values and two shuffles. bf16 rounding points by cvt.rn.bf16x2.f32; the
// UE8M0 exponent and the e2m1 codes by bit arithmetic (src/cuda/fp4_e2m1.cuh); SGLang's
// quantizer after a bf16 point (v4_fp4) keeps the bf16 values packed in pairs and takes the block
// maxima (max.bf16x2) and the codes (e2m1_code8_bf16: bf16 fmas) from the pairs, on blocks whose
// maximum is at most 2^120 without the clamp and with the scale folded into the fmas (_small). Every device encoder is checked by
// tests/test_cuda.cu against the scalar one for all float32 (or all bf16 / fp16) inputs.
//
// The steps of the later forms, each a compile-time branch of the same body (the recipes above
// compile to the same code as before them):
//  - NeoX pairs (RopePairs::kNeox: (j, j + 32) of the rotated 64): element i pairs with i ^ 32,
//    i.e. with 4 lanes the same lane's chunk c ^ 1, with 8 or 16 lanes lane l ^ 4 (a shuffle);
//    each chunk's 8 values are 8 pairs, so their (cos, sin) are four 16-byte freqs loads.
//  - No RoPE (RopeDims::kNoRope): no position, no freqs read (both pointers null), every row
//    valid. No weights (WeightFold::kNoWeights): weight and weights_out null, never touched.
//  - vLLM's CuTe DSL and V3.2 FP8 quantizers (Quantizer::kVllmCute, kVllmV32): row.h's exponent
//    and scale functions; codes of x * inv (CuTe; NaN -> 0x7f) or of the IEEE quotient
//    x / scale (V3.2, __fdiv_rn; NaN -> 0x7e) by the satfinite conversion. CuTe's MXFP4 form
//    (kVllmCute on E2M1): vLLM's MXFP4 branch with row.h's stage1_exponent (no clamp: 255, inverse
//    -Inf, for an infinite amax) and the same mx_e2m1_code8 codes.
//  - SGLang V4.1's FP4 packer and two-stage quantizer (Quantizer::kFp4Rne, kFp4TwoStage): row.h's
//    rules by bit arithmetic (fp4_e2m1.cuh: rne_ue8m0_of_amax_fast for the division by 6,
//    rne_e2m1_code8 for 8 codes at a time, stage1_value_fast rounding onto the E2M1 grid by one
//    magic add; row.h's rne_inverse, stage1_exponent), and a second block maximum by two more
//    shuffles. The packer's inverse at e = 254 is the subnormal 2^-127: this file is compiled
//    without flush-to-zero (no --use_fast_math / -ftz=true), which tests/test_cuda.cu checks on
//    the device.
//  - SGLang's V3.2 unfused path (sgl_v32_unfused_neox_hadamard_ue8m0): RopeFma::kFmaX1C (the
//    second value of a pair fma(x1, c, x0 * s)); bf16 after the Hadamard on an FP8 recipe (the
//    pairs rounded by cvt.rn.bf16x2.f32 before the amax); Quantizer::kSglangUe8m0 in the V3.2
//    quantizer's branch (floor 1e-4, the IEEE quotient by __fdiv_rn, NaN -> 0xfe); scale_out
//    (R::kScaleOut): lane 0 also writes the row scale as an fp32 at q_sf + 4 * row (R::kSf: the
//    recipes whose q_sf holds 4 bytes a row, FP4 or scale_out, for the fallback and the host).
//  - The gfx942 forms. sglang_v4_fp8_gfx942 (Quantizer::kSglang224): SGLang's FP8 steps with 224
//    for 448 (row.h's sglang_fp8_max): scale = fmax(1e-4, amax) / 224, and every product
//    clamped to [-224, 224] before the conversion (NaN -> +224 = 0x76) on rows that are not
//    finite; on a finite row every product is below 232 in magnitude, where the satfinite
//    conversion's rounding alone gives the clamp's bytes (see compute_row).
//    vllm_v4_fp8_fnuz224 (Quantizer::kVllmFnuz224): in the CuTe / V3.2 branch, q_scale = pow2_ceil(fmax(amax, 1e-4) / 224), v = x * 2^-k (= x / q_scale
//    exactly, as vLLM's branch), the e4m3fnuz code of v as the e4m3fn code of 2v with 0x80 ->
//    0x00 and NaN -> 0x80 (quantize4_e4m3_fnuz224); weights_out by its fold, no FNUZ factor 2.
//
// Out-of-range positions. Positions live in device memory and cannot be checked on the host
// without a synchronization. A row whose position p is < 0 or >= max_pos reads freqs row 0
// instead (always in bounds: max_pos >= 1), so nothing outside the tensors is read; its codes
// (and FP4 block-scale bytes; a scale_out row scale: +0.0f) are written as 0x00 and its
// weights_out as a quiet NaN, so the caller can detect it (isnan(weights_out)). No trap, no
// error code.
//
// Everything is enqueued on the caller's stream: no allocation, no host synchronization, so
// the call can be captured in a CUDA graph. With enable_pdl (the default) on an sm_90+ device
// running code built from compute_90+ PTX (cuda/device_facts.cuh: pdl_supported) the kernel is launched with programmatic stream serialization (PDL): it may start while the
// previous kernel of the stream runs. Before griddepcontrol.wait it only computes indices and
// addresses from its launch parameters (every tensor may be the previous kernel's output);
// with Options::side_inputs_ready (the caller guarantees positions, freqs and weight are final
// before the kernel starts) it also reads the position, the freqs row and the weight before the
// wait, q_input after it (no load is ld.global.nc: ptxas moves those above the wait). It lets
// the next kernel launch (griddepcontrol.launch_dependents) at its first instruction when the
// grid is small (the list's trigger column: decode sizes, where the next launch's latency would
// otherwise follow this kernel's), after its input loads when it is larger (dependents resident
// early crowd its own blocks). Warps past the last row exit at once.
//
// Row indices are 32-bit in the row-group kernels (one multiply for row / H, 32-bit address
// offsets): launch_recipe splits a call of 2^30 rows or more into launches of whole tokens, each
// on its tokens' slice of the tensors (the fallback kernel below keeps 64-bit rows). SGLang's
// FP8 scale and its inverse come without the division sequences (fp8_e4m3.cuh:
// sglang_scale_inverse), and an out-of-range row's zero codes from a warp-uniform branch.
//
// Misaligned pointers (q_input / freqs not 16-byte aligned, q_out not 8-byte aligned (FP8) or
// 4-byte aligned (FP4), q_sf (FP4, scale_out) not 4-byte aligned) take a simple
// one-thread-per-row kernel with the scalar row pipeline of src/common/row.h (process_row<R>):
// same bytes, slower.
//
// The kernels take the validated Problem itself (src/common/problem.h): one model of the
// op's arguments. Before launching, every pointer is checked to be device (or managed /
// pinned) memory of p.device.index, and the launch runs with that device current.
//
// Measured and removed (git history, commit 9aadcab): a persistent grid whose row groups
// prefetch the next row, and a cp.async.bulk shared-memory ring; both were slower on an H200
// (bench/HISTORY.md). Issue 20: 2 lanes per row lost at every size timed (not listed).
//
// NaN handling off the fast path: row_amax takes the row's maximum with max.NaN.f32, which also
// says whether every value of the row is finite; the quantizers' NaN and clamp steps run only
// for the other rows (and only a warp holding a NaN row computes the NaN-ignoring maximum again).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cuda_fp16.h>
#include <string>

#include "common/problem.h"
#include "common/recipe.h"
#include "common/row.h"
#include "cuda/cuda_backend.h"
#include "cuda/fp4_e2m1.cuh"
#include "cuda/fp8_e4m3.cuh"
#include "cuda/launch.cuh"
#include "cuda/row_divisor.cuh"

namespace indexer_q {
namespace detail {
namespace {

// kBF16 / kF16 / kF32, pdl_wait, pdl_launch_dependents: src/cuda/launch.cuh.

// griddepcontrol.wait with register inputs: the values passed (indices and addresses computed
// from the launch parameters alone) are computed before the wait, so their parameter reads and
// integer math overlap the previous kernel instead of following it.
__device__ __forceinline__ void pdl_wait_after(std::uint32_t a, std::uint32_t b, const void* c, const void* d,
                                               const void* e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::"r"(a), "r"(b), "l"(c), "l"(d), "l"(e) : "memory");
#else
  asm volatile("" ::"r"(a), "r"(b), "l"(c), "l"(d), "l"(e) : "memory");
#endif
}

// ---- loads, in program order (asm volatile keeps them in the order written: the position
// first, then every q load, all in flight before the position-dependent freqs loads) ----
// None of them is ld.global.nc: a tensor may be written by the previous kernel while this one,
// launched with PDL, already runs (until griddepcontrol.wait), so no input is read-only for the
// kernel's whole lifetime, and ptxas moves .nc loads above griddepcontrol.wait (seen on the
// side_inputs_ready path: a q_input load hoisted above the wait read the producer's old bytes).
// Plain loads stay behind the wait.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {  // read once: skip L1
  uint4 r;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ float4 ld_f4(const float* p) {  // freqs: shared by a token's heads
  float4 r;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
               : "l"(p));
  return r;
}
template <bool POS64>
__device__ __forceinline__ std::int64_t ld_pos(const void* pos, std::uint64_t b) {
  if (POS64) {
    long long v;
    asm volatile("ld.global.s64 %0, [%1];" : "=l"(v) : "l"(static_cast<const long long*>(pos) + b));
    return v;
  }
  int v;
  asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(static_cast<const int*>(pos) + b));
  return std::int64_t(v);
}
// Raw weight bits (bf16 / fp16 in the low half, or fp32). The weight's dtype is independent of
// q_input's (Problem::weight_dtype); one scalar load per row, so a run-time branch.
__device__ __forceinline__ std::uint32_t ld_weight(const void* w, DType wdt, std::uint64_t idx) {
  std::uint32_t v;
  if (wdt == DType::kFloat32) {
    asm volatile("ld.global.b32 %0, [%1];" : "=r"(v) : "l"(static_cast<const std::uint32_t*>(w) + idx));
  } else {
    unsigned short h;
    asm volatile("ld.global.b16 %0, [%1];" : "=h"(h) : "l"(static_cast<const unsigned short*>(w) + idx));
    v = h;
  }
  return v;
}
__device__ __forceinline__ float decode_weight(std::uint32_t v, DType wdt) {
  if (wdt == DType::kBFloat16) return __uint_as_float(v << 16);
  if (wdt == DType::kFloat16) return __half2float(__ushort_as_half((unsigned short)v));  // exact
  return __uint_as_float(v);
}

// Decodes one 16-byte word: 8 bf16/fp16 values, or 4 fp32 values (into v[0..3]).
template <int DT>
__device__ __forceinline__ void decode16(const uint4& u, float* v) {
  const std::uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (DT == kBF16) {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    } else if (DT == kF16) {
      __half2 h;
      *reinterpret_cast<std::uint32_t*>(&h) = w[j];
      const float2 f = __half22float2(h);  // exact conversion
      v[2 * j] = f.x;
      v[2 * j + 1] = f.y;
    } else {
      v[j] = __uint_as_float(w[j]);
    }
  }
}

// What one lane loads for one row before any arithmetic.
template <int LANES, int DT>
struct RowLoad {
  static constexpr int C = kHeadDim / (8 * LANES);
  static constexpr int W = DT == kF32 ? 2 : 1;  // 16-byte words per chunk
  uint4 q[C * W];
  std::int64_t pos;
  std::uint32_t w;
};

// Row r = b * H + h; a multiply (row_divisor.cuh: hd = row_divisor(H), from the host). The
// row-group kernels index rows in 32 bits: one launch covers fewer than 2^31 rows
// (launch_recipe splits a larger call into launches of whole tokens).
__device__ __forceinline__ std::uint32_t batch_of(std::uint32_t row, RowDivisor hd) { return divide_rows(row, hd); }

// Row r = b * H + h and the address of its q_input row: from the launch parameters (and the
// divisor constants the host computed from them) alone (no tensor is read), so the kernel
// computes them before griddepcontrol.wait.
struct RowIndex {
  std::uint32_t b, h;
  const char* qrow;
};
template <int DT>
__device__ __forceinline__ RowIndex row_index(const Problem& p, RowDivisor hd, std::uint32_t row) {
  RowIndex ix;
  ix.b = batch_of(row, hd);
  ix.h = row - ix.b * std::uint32_t(p.H);
  ix.qrow = static_cast<const char*>(p.q_input) + std::uint64_t(row) * (kHeadDim * (DT == kF32 ? 4 : 2));
  return ix;
}

// A recipe without RoPE (R::kRope false) reads no position (p.positions is null; pos = 0), one
// without weights (R::kWeights false) no weight (p.weight is null; w = 0). The side inputs (the
// position, lane 0's weight) and the q words are separate steps, so that the side inputs can be
// read before griddepcontrol.wait where the caller says they are ready (side_inputs_ready).
template <class R, int LANES, int DT, bool POS64>
__device__ __forceinline__ void issue_pos_load(const Problem& p, const RowIndex& ix, RowLoad<LANES, DT>& r) {
  if (R::kRope)
    r.pos = ld_pos<POS64>(p.positions, ix.b);  // first: the freqs loads depend on it
  else
    r.pos = 0;
}
template <class R, int LANES, int DT>
__device__ __forceinline__ void issue_weight_load(const Problem& p, const RowIndex& ix, int l, RowLoad<LANES, DT>& r) {
  if (R::kWeights)
    r.w = (l == 0) ? ld_weight(p.weight, p.weight_dtype, ix.b * std::uint64_t(p.weight_stride_b) + ix.h) : 0u;
  else
    r.w = 0u;
}
template <int LANES, int DT>
__device__ __forceinline__ void issue_q_loads(const RowIndex& ix, int l, RowLoad<LANES, DT>& r) {
  constexpr int C = RowLoad<LANES, DT>::C, W = RowLoad<LANES, DT>::W;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int j = 0; j < W; ++j) r.q[c * W + j] = ld_stream16(ix.qrow + ((c * LANES + l) * W + j) * 16);
}

// Does chunk c of lane l lie in the recipe's rotated dims? Compile-time for LANES <= 8 (a
// chunk index then decides it), per lane for 16. Never without RoPE (RopeDims::kNoRope).
template <class R, int LANES>
__device__ __forceinline__ bool chunk_rotated(int c, int l) {
  if (!R::kRope) return false;
  if (8 * LANES <= kRopeDim) return c * 8 * LANES >= R::kRopeOffset && c * 8 * LANES < R::kRopeOffset + kRopeDim;
  const int i0 = (c * LANES + l) * 8;
  return i0 >= R::kRopeOffset && i0 < R::kRopeOffset + kRopeDim;
}

// Steps 8, 9 for one chunk of FP8 products (already y * inv, clamped where the row needs it):
// 8 codes, FNUZ re-encoded.
template <class R>
__device__ __forceinline__ uint2 quantize_fp8(const float* v) {
  uint2 o;
  o.x = quantize4_e4m3_sat(v[0], v[1], v[2], v[3]);
  o.y = quantize4_e4m3_sat(v[4], v[5], v[6], v[7]);
  if (R::kFnuz) {
    o.x = fnuz_from_fn4(o.x);
    o.y = fnuz_from_fn4(o.y);
  }
  return o;
}

// The (cos, sin) pairs of a lane's rotated chunks: pairs j0 .. j0 + 3 (adjacent pairs); NeoX:
// the 8 values of a chunk are 8 pairs j0 .. j0 + 7 (j0 = the chunk's first rotated dim mod 32).
// (Arrays a recipe does not use are never touched: the compiler drops them.)
template <int LANES>
struct FreqLoad {
  static constexpr int C = kHeadDim / (8 * LANES);
  float cs[C][4], sn[C][4];
  float ncs[C][8], nsn[C][8];  // NeoX only
};

// Is the row's position in range? Without RoPE every row is valid (no position, no freqs).
template <class R>
__device__ __forceinline__ bool position_valid(const Problem& p, std::int64_t pos) {
  return !R::kRope || (pos >= 0 && pos < p.max_pos);
}

// The freqs loads of one row (after its position load): two 16-byte loads per rotated chunk
// (four with NeoX pairs). An out-of-range position reads freqs row 0 (always in bounds).
template <class R, int LANES>
__device__ __forceinline__ void issue_freq_loads(const Problem& p, std::int64_t pos, int l, FreqLoad<LANES>& f) {
  constexpr int C = FreqLoad<LANES>::C;
  if (!R::kRope) return;
  const float* frow = p.freqs + (position_valid<R>(p, pos) ? pos : 0) * kFreqsDim;  // row 0 always exists
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (chunk_rotated<R, LANES>(c, l) && R::kNeox) {
      const int j0 = ((c * LANES + l) * 8 - R::kRopeOffset) & 31;
      if (R::kFreqsLayout == FreqsLayout::kInterleaved) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 a = ld_f4(frow + 2 * j0 + 4 * q);
          f.ncs[c][2 * q] = a.x; f.nsn[c][2 * q] = a.y; f.ncs[c][2 * q + 1] = a.z; f.nsn[c][2 * q + 1] = a.w;
        }
      } else {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const float4 a = ld_f4(frow + j0 + 4 * q);
          const float4 b = ld_f4(frow + 32 + j0 + 4 * q);
          f.ncs[c][4 * q] = a.x; f.ncs[c][4 * q + 1] = a.y; f.ncs[c][4 * q + 2] = a.z; f.ncs[c][4 * q + 3] = a.w;
          f.nsn[c][4 * q] = b.x; f.nsn[c][4 * q + 1] = b.y; f.nsn[c][4 * q + 2] = b.z; f.nsn[c][4 * q + 3] = b.w;
        }
      }
    } else if (chunk_rotated<R, LANES>(c, l)) {
      const int j0 = ((c * LANES + l) * 8 - R::kRopeOffset) / 2;
      float4 a, b;
      if (R::kFreqsLayout == FreqsLayout::kInterleaved) {
        a = ld_f4(frow + 2 * j0);
        b = ld_f4(frow + 2 * j0 + 4);
        f.cs[c][0] = a.x; f.sn[c][0] = a.y; f.cs[c][1] = a.z; f.sn[c][1] = a.w;
        f.cs[c][2] = b.x; f.sn[c][2] = b.y; f.cs[c][3] = b.z; f.sn[c][3] = b.w;
      } else {
        a = ld_f4(frow + j0);
        b = ld_f4(frow + 32 + j0);
        f.cs[c][0] = a.x; f.cs[c][1] = a.y; f.cs[c][2] = a.z; f.cs[c][3] = a.w;
        f.sn[c][0] = b.x; f.sn[c][1] = b.y; f.sn[c][2] = b.z; f.sn[c][3] = b.w;
      }
    }
  }
}

// max.NaN.f32: the maximum, NaN if either input is NaN (equal to fmaxf where neither is).
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// The maximum over an FP4 block of 32 dims, for each chunk c of the thread: the block's KB
// chunks of this thread (chunks c with the same c / KB), then its LB lanes (xor shuffles).
// kNaN: NaN-propagating (max.NaN), else NaN-ignoring (fmaxf).
template <int C, int KB, int LB, bool kNaN = false>
__device__ __forceinline__ void block_max(float (&m)[C]) {
#pragma unroll
  for (int s = 1; s < KB; s <<= 1) {
    float t[C];
#pragma unroll
    for (int c = 0; c < C; ++c) t[c] = kNaN ? fmax_nan(m[c], m[c ^ s]) : fmaxf(m[c], m[c ^ s]);
#pragma unroll
    for (int c = 0; c < C; ++c) m[c] = t[c];
  }
#pragma unroll
  for (int s = 1; s < LB; s <<= 1)
#pragma unroll
    for (int c = 0; c < C; c += KB) {
      const float o = __shfl_xor_sync(0xffffffffu, m[c], s);
      m[c] = kNaN ? fmax_nan(m[c], o) : fmaxf(m[c], o);
    }
#pragma unroll
  for (int c = 0; c < C; ++c) m[c] = m[c - c % KB];  // the block's other chunks
}

// The row's maximum magnitude with NaN ignored (row.h's amax_step from 0), across the row's
// LANES lanes, and whether every value of the row is finite (no NaN, no infinity). One pass with
// the NaN-propagating maximum, which equals the NaN-ignoring one on a row without a NaN; only a
// warp holding a NaN row computes its rows' maxima again ignoring NaN (the branch is
// warp-uniform: every shuffle has the whole warp). A finite row's products by its finite
// inverse scale are never NaN, so the quantizers skip their NaN handling on it.
template <int C, int LANES>
__device__ __forceinline__ float row_amax(const float (&x)[C][8], bool& finite) {
  float m = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int k = 0; k < 8; ++k) m = fmax_nan(m, fabsf(x[c][k]));
#pragma unroll
  for (int s = 1; s < LANES; s <<= 1) m = fmax_nan(m, __shfl_xor_sync(0xffffffffu, m, s));
  finite = m <= 3.40282347e38f;
  if (__any_sync(0xffffffffu, m != m)) {
    m = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(x[c][k]));  // NaN ignored, as amax_step
#pragma unroll
    for (int s = 1; s < LANES; s <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, s));
  }
  return m;
}

// Everything after the loads: RoPE, Hadamard, scale, quantize, store. `active` is false for
// the lanes of a row past the end (they compute on a clamped row and store nothing), so that
// every shuffle has the whole warp.
template <class R, int LANES, int DT>
__device__ __forceinline__ void compute_row(const Problem& p, std::uint32_t row, int l, bool active,
                                            const RowLoad<LANES, DT>& r, const FreqLoad<LANES>& fq) {
  constexpr int C = RowLoad<LANES, DT>::C, W = RowLoad<LANES, DT>::W;
  const bool valid = position_valid<R>(p, r.pos);
  const auto& cs = fq.cs;
  const auto& sn = fq.sn;
  const auto& ncs = fq.ncs;
  const auto& nsn = fq.nsn;

  float x[C][8];
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int j = 0; j < W; ++j) decode16<DT>(r.q[c * W + j], &x[c][j * 4]);

  // ---- RoPE (step 2), then the recipe's bf16 rounding of the rotated dims ----
  if (R::kNeox) {
    // NeoX pairs (j, j + 32) of the rotated 64: element i pairs with i ^ 32, i.e. word
    // w = c * LANES + l with w ^ 4, same slot k: with 4 (2) lanes the same lane's chunk c ^ 1
    // (c ^ 2), with 8 or 16 lanes lane l ^ 4's chunk c (a shuffle; the whole warp takes part). The partners
    // are taken before any value changes. Low half (x0 = own, x1 = partner):
    // fma(x0, c, -(x1 * s)); high half (x1 = own, x0 = partner): fma(x0, s, x1 * c), or
    // fma(x1, c, x0 * s) (RopeFma::kFmaX1C).
    float part[C][8];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (8 * LANES > kRopeDim || chunk_rotated<R, LANES>(c, 0)) {
#pragma unroll
        for (int k = 0; k < 8; ++k)
          part[c][k] = LANES <= 4 ? x[(c ^ (4 / LANES)) % C][k] : __shfl_xor_sync(0xffffffffu, x[c][k], 4);
      }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (chunk_rotated<R, LANES>(c, l)) {
        const bool high = (((c * LANES + l) * 8 - R::kRopeOffset) & 32) != 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float own = x[c][k], oth = part[c][k];
          if (R::kRopeFma == RopeFma::kFmaX1C)
            x[c][k] = high ? __fmaf_rn(own, ncs[c][k], __fmul_rn(oth, nsn[c][k]))
                           : __fmaf_rn(own, ncs[c][k], -__fmul_rn(oth, nsn[c][k]));
          else
            x[c][k] = high ? __fmaf_rn(oth, nsn[c][k], __fmul_rn(own, ncs[c][k]))
                           : __fmaf_rn(own, ncs[c][k], -__fmul_rn(oth, nsn[c][k]));
        }
        if (R::kBf16AfterRope)
#pragma unroll
          for (int k = 0; k < 8; k += 2) round_bf16_pair(x[c][k], x[c][k + 1]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (chunk_rotated<R, LANES>(c, l) && !R::kNeox) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float xr = x[c][2 * j], xi = x[c][2 * j + 1];
        x[c][2 * j] = __fmaf_rn(xr, cs[c][j], -__fmul_rn(xi, sn[c][j]));
        if (R::kRopeFma == RopeFma::kFmaX1C)
          x[c][2 * j + 1] = __fmaf_rn(xi, cs[c][j], __fmul_rn(xr, sn[c][j]));
        else
          x[c][2 * j + 1] = __fmaf_rn(xr, sn[c][j], __fmul_rn(xi, cs[c][j]));
        if (R::kBf16AfterRope) round_bf16_pair(x[c][2 * j], x[c][2 * j + 1]);
      }
    }
  }

  // ---- Hadamard (step 3), strides ascending ----
  if (R::kHadamard) {
#pragma unroll
    for (int s = 1; s < 8; s <<= 1) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          if ((k & s) == 0) {
            const float u = x[c][k], v = x[c][k + s];
            x[c][k] = __fadd_rn(u, v);
            x[c][k + s] = __fsub_rn(u, v);
          }
        }
      }
    }
#pragma unroll
    for (int s = 1; s < LANES; s <<= 1) {
      const float sgn = (l & s) ? -1.0f : 1.0f;
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float other = __shfl_xor_sync(0xffffffffu, x[c][k], s);
          x[c][k] = __fmaf_rn(x[c][k], sgn, other);
        }
      }
    }
#pragma unroll
    for (int s = 1; s < C; s <<= 1) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        if ((c & s) == 0) {
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const float u = x[c][k], v = x[c + s][k];
            x[c][k] = __fadd_rn(u, v);
            x[c + s][k] = __fsub_rn(u, v);
          }
        }
      }
    }
  }

  const float w = decode_weight(r.w, p.weight_dtype);  // lane 0's is the real one
  if (R::kFp4) {
    // ---- FP4: step 4, bf16 rounding, UE8M0 per block of 32 dims, e2m1 codes ----
    // A block of 32 dims is chunk c of 4 consecutive lanes (LANES >= 4), or chunks
    // c, c ^ 1 of both lanes (LANES = 2): KB chunks of a thread, LB lanes.
    constexpr int KB = LANES >= 4 ? 1 : 4 / LANES, LB = LANES >= 4 ? 4 : LANES;
    constexpr bool kTwoStage = R::kQuant == Quantizer::kFp4TwoStage;
    float amax[C];
    // SGLang's quantizer with bf16 after the Hadamard (v4_fp4): the bf16 values stay packed in
    // pairs, (0, 4), (2, 6), (1, 5), (3, 7) of each chunk (e2m1_code8_bf16's order); the block
    // maximum and the codes are taken from the pairs.
    constexpr bool kPackedBf16 = R::kBf16AfterHadamard && R::kQuant == Quantizer::kSglang && !R::kVllm;
    std::uint32_t pk[C][4], apk[C][4];  // (apk: |pk|, for the block maximum and the fast codes)
    // Blocks of one chunk a thread, two chunks: their two bf16 maxima packed in one word for the
    // shuffles (max.NaN.bf16x2 gives the NaN-propagating maximum of each half, bit-equal to the
    // float maximum of the same bf16 values), half the shuffles and maxima.
    constexpr bool kPackedMax = kPackedBf16 && KB == 1 && C % 2 == 0;
    std::uint32_t pmax[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (R::kHadamard) x[c][k] = __fmul_rn(x[c][k], kHadamardScale);
      if (kPackedBf16) {
        pk[c][0] = bf16x2_rn(x[c][0], x[c][4]);
        pk[c][1] = bf16x2_rn(x[c][2], x[c][6]);
        pk[c][2] = bf16x2_rn(x[c][1], x[c][5]);
        pk[c][3] = bf16x2_rn(x[c][3], x[c][7]);
        // NaN-propagating first (see below)
#pragma unroll
        for (int j = 0; j < 4; ++j) apk[c][j] = bf16x2_abs(pk[c][j]);
        const std::uint32_t m =
            bf16x2_max_nan(bf16x2_max_nan(apk[c][0], apk[c][1]), bf16x2_max_nan(apk[c][2], apk[c][3]));
        if (kPackedMax)
          pmax[c] = m;
        else
          amax[c] = fmax_nan(__uint_as_float(m << 16), __uint_as_float(m & 0xffff0000u));
        continue;
      }
      if (R::kBf16AfterHadamard)
#pragma unroll
        for (int k = 0; k < 8; k += 2) round_bf16_pair(x[c][k], x[c][k + 1]);
      // (a NaN amax - every value NaN - gives the same exponent as 0: fmax(1e-4, NaN) = 1e-4)
      // The two-stage quantizer takes the NaN-propagating maximum first (below).
      amax[c] = fabsf(x[c][0]);
#pragma unroll
      for (int k = 1; k < 8; ++k)
        amax[c] = kTwoStage ? fmax_nan(amax[c], fabsf(x[c][k])) : fmaxf(amax[c], fabsf(x[c][k]));
    }
    if (kPackedMax) {
#pragma unroll
      for (int c = 0; c < C; c += 2) {
        // chunk c's maximum in the low half, chunk c + 1's in the high half
        std::uint32_t r = bf16x2_max_nan(prmt(pmax[c], pmax[c + 1], 0x5410u), prmt(pmax[c], pmax[c + 1], 0x7632u));
#pragma unroll
        for (int s = 1; s < LB; s <<= 1) r = bf16x2_max_nan(r, __shfl_xor_sync(0xffffffffu, r, s));
        amax[c] = __uint_as_float(r << 16);
        amax[c + 1] = __uint_as_float(r & 0xffff0000u);
      }
    } else {
      block_max<C, KB, LB, kTwoStage || kPackedBf16>(amax);
    }
    // The two-stage quantizer and the packed bf16 path: the maxima with NaN propagated say whether
    // every value of this thread's blocks is finite (stage 1 then skips its clamp:
    // stage1_value_fast<false>; the packed codes theirs: e2m1_code8_bf16_small); a warp holding a
    // NaN takes the NaN-ignoring maxima again (warp-uniform: every shuffle has the whole warp).
    // (the packed path's fast form wants every block maximum at most 2^120: e2m1_code8_bf16_small)
    bool finite = false;
    if (kTwoStage || kPackedBf16) {
      bool nan = false;
      finite = true;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        finite = finite && amax[c] <= (kPackedBf16 ? 0x1p120f : 3.40282347e38f);
        nan = nan || amax[c] != amax[c];
      }
      if (__any_sync(0xffffffffu, nan)) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          if (kPackedBf16) {
            const std::uint32_t m =
                bf16x2_max_abs(bf16x2_max_abs(pk[c][0], pk[c][1]), bf16x2_max_abs(pk[c][2], pk[c][3]));
            amax[c] = fmaxf(__uint_as_float(m << 16), __uint_as_float(m & 0xffff0000u));  // (NaN as fmaxf)
          } else {
            amax[c] = fabsf(x[c][0]);
#pragma unroll
            for (int k = 1; k < 8; ++k) amax[c] = fmaxf(amax[c], fabsf(x[c][k]));
          }
        }
        block_max<C, KB, LB>(amax);
      }
    }
    std::uint32_t e[C];
    std::uint32_t pcodes[C];  // the packed bf16 path's codes (a branch around all chunks)
    if (kPackedBf16) {
      if (finite) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          e[c] = ue8m0_of_amax_small(amax[c]);
          pcodes[c] = e2m1_code8_bf16_small(pk[c], apk[c], e[c]);
        }
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          e[c] = ue8m0_of_amax_fast(amax[c]);
          pcodes[c] = e2m1_code8_bf16(pk[c], e2m1_scale2_bf16x2(e[c]));
        }
      }
    }
    float q2[C][8];  // the two-stage quantizer's stage-1 values
    if (kTwoStage) {
      // Stage 1 (fake quantization of the block: row.h's stage1_exponent / stage1_value), then
      // the block maximum of its values (the same lanes and chunks as the first one).
      float amax2[C];
      if (finite) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const std::uint32_t e1 = stage1_exponent(amax[c]);
          const float sc = __uint_as_float(e1 << 23), inv1 = cute_inverse(e1);
          amax2[c] = 0.0f;
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            q2[c][k] = stage1_value_fast<false>(x[c][k], inv1, sc);
            amax2[c] = fmaxf(amax2[c], fabsf(q2[c][k]));
          }
        }
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const std::uint32_t e1 = stage1_exponent(amax[c]);
          const float sc = __uint_as_float(e1 << 23), inv1 = cute_inverse(e1);
          amax2[c] = 0.0f;
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            q2[c][k] = stage1_value_fast(x[c][k], inv1, sc);  // (+0 for stage1_value's -0: same codes)
            amax2[c] = fmaxf(amax2[c], fabsf(q2[c][k]));  // NaN ignored, as amax_step
          }
        }
      }
      block_max<C, KB, LB>(amax2);
#pragma unroll
      for (int c = 0; c < C; ++c) amax[c] = amax2[c];
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      std::uint32_t codes;
      if (R::kQuant == Quantizer::kFp4Rne) {
        // SGLang V4.1's packer (row.h): e = exponent of fmax(amax / 6, 1e-4) rounded up, clamped
        // to [1, 254]; inv = 2^(127 - e) (e = 254: the subnormal 2^-127; the kernels are built
        // without flush-to-zero); codes with ties to even, sign on nonzero codes. A NaN amax
        // (every value of the block NaN) gives the exponent of 0, as amax_step's 0 does.
        e[c] = rne_ue8m0_of_amax_fast(amax[c]);
        // (bf16 / fp16 inputs: every product has at most 11 significant bits, the half2 form)
        codes = DT == kF32 ? rne_e2m1_code8(x[c], rne_inverse(e[c])) : rne_e2m1_code8_h2(x[c], rne_inverse(e[c]));
      } else if (R::kQuant == Quantizer::kFp4TwoStage) {
        // the packer on the stage-1 values with inv2 = bits((254 - e2) << 23) (0 at e2 = 254,
        // as the engine's packer).
        e[c] = rne_ue8m0_of_amax_fast(amax[c]);
        codes = rne_e2m1_code8_h2(q2[c], __uint_as_float((254u - e[c]) << 23));  // q2: E2M1 values x 2^k
      } else {
        // vLLM: floor 6 * 2^-126, times fl(1/6), e = 254 for an infinite amax (inverse 0);
        // vLLM's CuTe MXFP4 (kVllmCute): the same without the clamp, e = 255 (inverse -Inf);
        // SGLang: floor 1e-4, / 6, e = 255 for an infinite amax (inverse -Inf).
        constexpr bool kCute = R::kQuant == Quantizer::kVllmCute;
        if (!kPackedBf16)
          e[c] = kCute     ? stage1_exponent(amax[c])
                 : R::kVllm ? std::uint32_t(mx_ue8m0_of_amax(amax[c]))
                            : ue8m0_of_amax_fast(amax[c]);
        if (R::kVllm || kCute) {
          codes = mx_e2m1_code8(x[c], __uint_as_float((254u - e[c]) << 23));  // ue8m0_inverse
        } else if (R::kBf16AfterHadamard) {
          codes = pcodes[c];  // (kPackedBf16: e[c] and the codes above)
        } else {
          const float inv = __uint_as_float((254u - e[c]) << 23);
          codes = 0;
#pragma unroll
          for (int k = 0; k < 8; ++k) codes |= e2m1_code(__fmul_rn(x[c][k], inv)) << (4 * k);
        }
      }
      if (!valid) codes = 0u;
      if (active)
        *reinterpret_cast<std::uint32_t*>(p.q_out + std::uint64_t(row) * 64 + (c * LANES + l) * 4) = codes;
    }
    if (!active) return;
    if (LANES <= 4) {  // lane 0 holds the row's 4 block exponents (block b = chunk b * KB)
      if (l == 0) {
        std::uint32_t sf = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) sf |= e[b * KB] << (8 * b);
        *reinterpret_cast<std::uint32_t*>(p.q_sf + std::uint64_t(row) * 4) = valid ? sf : 0u;
      }
    } else if ((l & 3) == 0) {
#pragma unroll
      for (int c = 0; c < C; ++c) p.q_sf[std::uint64_t(row) * 4 + (c * LANES + l) / 4] = valid ? std::uint8_t(e[c]) : 0;
    }
    if (R::kWeights && l == 0)
      p.weights_out[row] = valid ? weights_out_of<R>(w, p.weight_scale, p.head_scale, 0.0f) : __uint_as_float(nan_weight_bits<R>());
    return;
  }

  if (R::kQuant == Quantizer::kVllmCute || R::kQuant == Quantizer::kVllmV32 ||
      R::kQuant == Quantizer::kSglangUe8m0 || R::kQuant == Quantizer::kVllmFnuz224) {
    // ---- FP8, vLLM's CuTe DSL, V3.2 and ROCm (e4m3fnuz) quantizers, SGLang's V3.2 act_quant
    // (row.h, process_row) ----
#pragma unroll
    for (int c = 0; c < C; ++c) {
      // the Hadamard multiply, then (kBf16AfterHadamard) every value rounded to bf16 (a NaN
      // stays a NaN: its payload reaches no output, the amax ignores it and its code is the
      // quantizer's)
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (R::kHadamard) x[c][k] = __fmul_rn(x[c][k], kHadamardScale);
      if (R::kBf16AfterHadamard)
#pragma unroll
        for (int k = 0; k < 8; k += 2) round_bf16_pair(x[c][k], x[c][k + 1]);
    }
    bool finite;
    const float amax = row_amax<C, LANES>(x, finite);
    float q_scale;
    if (R::kQuant == Quantizer::kVllmCute) {
      // e in 1..255 (255: an infinite amax, scale +Inf, inv -Inf); codes of x * inv, NaN -> 0x7f.
      const std::uint32_t e = cute_exponent(amax);
      const float inv = cute_inverse(e);
      q_scale = __uint_as_float(e << 23);
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int k = 0; k < 8; ++k) x[c][k] = __fmul_rn(x[c][k], inv);
    } else if (R::kQuant == Quantizer::kVllmFnuz224) {
      // vLLM's ROCm quantizer: q_scale = pow2_ceil(fmax(amax, 1e-4) / 224) (IEEE quotient), 2^k
      // with k in [-21, 121] for a finite amax, +Inf for an infinite one; v = x * 2^-k, which is
      // x / q_scale exactly (pow2_scale_inverse; 0 for +Inf: x * 0 is x / Inf). The codes
      // (quantize4_e4m3_fnuz224) are those of 2v.
      q_scale = pow2_ceil(__fdiv_rn(fmaxf(amax, kScaleFloor), 224.0f));
      const float inv = pow2_scale_inverse(q_scale);
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int k = 0; k < 8; ++k) x[c][k] = __fmul_rn(x[c][k], inv);
    } else {
      // scale = 2^ceil(log2(fmax(amax, floor) * fl(1/448))) (+Inf for an infinite amax), floor
      // 1e-10 (V3.2) or 1e-4 (act_quant); codes of the IEEE quotient x / scale (+-0 for a finite
      // x and an infinite scale, NaN for Inf / Inf), NaN -> 0x7e (V3.2) or 0xfe (act_quant).
      // The quotient by the power of two q_scale (<= 2^120) is the product by its inverse
      // (pow2_scale_inverse: exact, 0 for +Inf), one rounding of the same real number.
      q_scale = pow2_ceil(
          __fmul_rn(fmaxf(amax, R::kQuant == Quantizer::kSglangUe8m0 ? kScaleFloor : kV32Floor), kInv448));
      const float inv = pow2_scale_inverse(q_scale);
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int k = 0; k < 8; ++k) x[c][k] = __fmul_rn(x[c][k], inv);
    }
    if (!active) return;
    std::uint8_t* orow = p.q_out + std::uint64_t(row) * kHeadDim;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      uint2 o;
      if (finite) {  // no NaN product (row_amax): the satfinite conversion alone
        if (R::kQuant == Quantizer::kVllmFnuz224) {
          o.x = quantize4_e4m3_fnuz224_finite(x[c][0], x[c][1], x[c][2], x[c][3]);
          o.y = quantize4_e4m3_fnuz224_finite(x[c][4], x[c][5], x[c][6], x[c][7]);
        } else {
          o.x = quantize4_e4m3_sat(x[c][0], x[c][1], x[c][2], x[c][3]);
          o.y = quantize4_e4m3_sat(x[c][4], x[c][5], x[c][6], x[c][7]);
        }
      } else if (R::kQuant == Quantizer::kVllmCute) {
        o.x = quantize4_e4m3_vllm(x[c][0], x[c][1], x[c][2], x[c][3]);
        o.y = quantize4_e4m3_vllm(x[c][4], x[c][5], x[c][6], x[c][7]);
      } else if (R::kQuant == Quantizer::kSglangUe8m0) {
        o.x = quantize4_e4m3_ue8m0(x[c][0], x[c][1], x[c][2], x[c][3]);
        o.y = quantize4_e4m3_ue8m0(x[c][4], x[c][5], x[c][6], x[c][7]);
      } else if (R::kQuant == Quantizer::kVllmFnuz224) {
        o.x = quantize4_e4m3_fnuz224(x[c][0], x[c][1], x[c][2], x[c][3]);
        o.y = quantize4_e4m3_fnuz224(x[c][4], x[c][5], x[c][6], x[c][7]);
      } else {
        o.x = quantize4_e4m3_v32(x[c][0], x[c][1], x[c][2], x[c][3]);
        o.y = quantize4_e4m3_v32(x[c][4], x[c][5], x[c][6], x[c][7]);
      }
      if (!valid) o = make_uint2(0u, 0u);
      *reinterpret_cast<uint2*>(orow + (c * LANES + l) * 8) = o;
    }
    if (R::kWeights && l == 0)
      p.weights_out[row] =
          valid ? weights_out_of<R>(w, p.weight_scale, p.head_scale, q_scale) : __uint_as_float(nan_weight_bits<R>());
    // scale_out: the row scale as an fp32 at q_sf + 4 * row (0 for an out-of-range position).
    if (R::kScaleOut && l == 0) *reinterpret_cast<float*>(p.q_sf + std::uint64_t(row) * 4) = valid ? q_scale : 0.0f;
    return;
  }

  if (R::kVllm) {
    // ---- FP8, vLLM's quantizer (docs/RECIPES.md step 6; no Hadamard) ----
    bool finite;
    const float amax = row_amax<C, LANES>(x, finite);
    // q_scale = 2^k with k in [-22, 120] (amax finite), or +Inf (amax infinite). x / 2^k equals
    // x * 2^-k exactly (both are the one rounding of the same real number, subnormal results
    // included); x / Inf equals x * 0 (+-0 for finite x, NaN for +-Inf and NaN).
    const float q_scale = pow2_ceil(__fdiv_rn(fmaxf(amax, kScaleFloor), kFp8Max));
    const std::uint32_t qe = __float_as_uint(q_scale) >> 23;
    const float inv = qe >= 255u ? 0.0f : __uint_as_float((254u - qe) << 23);
    // A product is NaN only if x is NaN or (x infinite and inv = 0): never on a finite row
    // (row_amax). On the others, every non-NaN product has |v| <= 448 * (1 + 2^-23), so the
    // sum of a lane's products is NaN exactly when one of them is: lanes without a NaN product
    // take the plain satfinite conversion.
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 8; ++k) x[c][k] = __fmul_rn(x[c][k], inv);
    if (__any_sync(0xffffffffu, !valid)) {  // an out-of-range row: +0 products, 0x00 codes
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int k = 0; k < 8; ++k) x[c][k] = valid ? x[c][k] : 0.0f;
    }
    bool has_nan = false;
    if (!finite) {
      float probe_all = 0.0f;
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int k = 0; k < 8; ++k) probe_all = __fadd_rn(probe_all, x[c][k]);
      has_nan = probe_all != probe_all;
    }
    if (!active) return;
    std::uint8_t* orow = p.q_out + std::uint64_t(row) * kHeadDim;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      uint2 o;
      if (has_nan) {
        o.x = quantize4_e4m3_vllm(x[c][0], x[c][1], x[c][2], x[c][3]);
        o.y = quantize4_e4m3_vllm(x[c][4], x[c][5], x[c][6], x[c][7]);
      } else {
        o.x = quantize4_e4m3_sat(x[c][0], x[c][1], x[c][2], x[c][3]);
        o.y = quantize4_e4m3_sat(x[c][4], x[c][5], x[c][6], x[c][7]);
      }
      *reinterpret_cast<uint2*>(orow + (c * LANES + l) * 8) = o;
    }
    if (R::kWeights && l == 0)
      p.weights_out[row] =
          valid ? weights_out_of<R>(w, p.weight_scale, p.head_scale, q_scale) : __uint_as_float(nan_weight_bits<R>());
    return;
  }

  // ---- FP8: steps 4..7 (SGLang's quantizer, 448 or gfx942's 224) ----
  if (R::kHadamard) {
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 8; ++k) x[c][k] = __fmul_rn(x[c][k], kHadamardScale);
  }
  bool finite;
  const float amax = row_amax<C, LANES>(x, finite);
  // (448, or 224 for the gfx942 form: row.h's sglang_fp8_max) scale = fmax(1e-4, amax) / 448,
  // inv = 1 / scale, each IEEE-rounded, without the division sequences (fp8_e4m3.cuh)
  float scale, inv;
  sglang_scale_inverse<R::kQuant == Quantizer::kSglang224 ? 224 : 448>(amax, scale, inv);

  // ---- quantize (steps 8, 9) and store ----
  // Step 8's fmin(., 448) matters only for NaN products (the conversion saturates everything
  // else exactly like the clamp). A product y * inv is NaN only if some y is NaN or inv = 0
  // (amax = Inf): never on a row whose values are all finite (row_amax's `finite`, uniform
  // across the lanes of a row), so only the other rows take the clamp.
  // The gfx942 form (Quantizer::kSglang224) clamps to [-224, 224] (quantize4_e4m3_224's clamp,
  // NaN -> +224), also only on rows that are not finite: on a finite row |y * inv| <=
  // RN(amax * inv) < 232 (at most 224 (1 + 3 2^-24) from the three roundings of scale, inv and
  // the product, below 224 under the 1e-4 floor; the largest over every finite amax is
  // 224.000015, bench/HISTORY.md "Issue 20, fewer instructions a row"), and every value of
  // (224, 232) rounds to 224 in e4m3 (the next value is 240): the conversion alone gives the
  // clamp's bytes.
  // A row whose position is out of range (!valid) gets +0 products, whose code is 0x00 in every
  // format, in a branch that only a warp holding such a row takes (no select per code word on
  // the other rows; as an if-converted select per value it would cost 32 a thread).
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int k = 0; k < 8; ++k) x[c][k] = __fmul_rn(x[c][k], inv);
  if (!finite) {
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 8; ++k)
        x[c][k] = R::kQuant == Quantizer::kSglang224 ? fmaxf(fminf(x[c][k], 224.0f), -224.0f)  // NaN -> +224
                                                     : fminf(x[c][k], kFp8Max);                 // NaN -> +448
  }
  if (__any_sync(0xffffffffu, !valid)) {  // warp-uniform: a real branch
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 8; ++k) x[c][k] = valid ? x[c][k] : 0.0f;
  }
  if (!active) return;
  std::uint8_t* orow = p.q_out + std::uint64_t(row) * kHeadDim;
#pragma unroll
  for (int c = 0; c < C; ++c) *reinterpret_cast<uint2*>(orow + (c * LANES + l) * 8) = quantize_fp8<R>(x[c]);
  // ---- step 10 ----
  if (R::kWeights && l == 0) {
    const float wo = weights_out_of<R>(w, p.weight_scale, p.head_scale, scale);
    p.weights_out[row] = valid ? (R::kFnuz ? __fmul_rn(wo, 2.0f) : wo) : __uint_as_float(nan_weight_bits<R>());
  }
}

// The kernel's int argument: the trigger (kTrigger*) in the low bits, kSideInputsReady above.
constexpr int kTriggerMask = 3;
constexpr int kSideInputsReady = 4;

// SGLang's FP4 quantizer after a bf16 point (v4_fp4: the packed bf16 path of compute_row) and
// SGLang V4.1's two-stage FP4 quantizer (sgl_v41_fp4_rope_pack) are held to 5 blocks of 256
// threads an SM (48 registers, no spill): left alone, ptxas gives them 63-64 registers (4
// blocks). 0: no minimum (every other recipe, as before).
template <class R>
constexpr int rowgroup_min_blocks() {
  return (R::kFp4 && R::kBf16AfterHadamard && R::kQuant == Quantizer::kSglang && !R::kVllm) ||
                 R::kQuant == Quantizer::kFp4TwoStage
             ? 5
             : 0;
}

// GR rows per LANES-thread group: a warp takes 32 / LANES * GR consecutive rows, the group of
// lanes g its rows g, g + 32 / LANES, ... (each pass of the warp over its rows reads whole
// consecutive rows). Every load of the group's rows is issued before the first row's arithmetic.
// flags & kTriggerMask places griddepcontrol.launch_dependents.
// Without kSideInputsReady, only index math precedes griddepcontrol.wait: every tensor
// (q_input, weight, positions, freqs) may have been written by the previous kernel. With it
// (Options::side_inputs_ready: the caller guarantees that positions, freqs and weight are ready
// before this kernel starts), the position, lane 0's weight and the freqs row are read before
// the wait, q_input after it. Warps past the last row read and write nothing: they exit without
// waiting (an exit counts as the trigger).
template <class R, int LANES, int GR, int DT, bool POS64>
__global__ void __launch_bounds__(256, rowgroup_min_blocks<R>()) rowgroup_kernel(const Problem p, int flags, const RowDivisor hd) {
  constexpr int G = 32 / LANES;  // groups of lanes per warp
  const int trigger = flags & kTriggerMask;
  const std::uint32_t rows = std::uint32_t(p.B) * std::uint32_t(p.H);  // < 2^31 (launch_recipe)
  const std::uint32_t warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int l = int(threadIdx.x % LANES);
  const int g = int(threadIdx.x % 32) / LANES;
  const std::uint32_t warp_row0 = warp * (G * GR);  // first row of this warp
  if (trigger == kTriggerAtStart) pdl_launch_dependents();
  if (warp_row0 >= rows) return;
  std::uint32_t row[GR];
  RowIndex ix[GR];
#pragma unroll
  for (int j = 0; j < GR; ++j) {
    row[j] = warp_row0 + std::uint32_t(j * G + g);
    ix[j] = row_index<DT>(p, hd, row[j] < rows ? row[j] : rows - 1);
  }
  RowLoad<LANES, DT> cur[GR];
  FreqLoad<LANES> fq[GR];
  if (flags & kSideInputsReady) {
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_pos_load<R, LANES, DT, POS64>(p, ix[j], cur[j]);
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_weight_load<R, LANES, DT>(p, ix[j], l, cur[j]);
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_freq_loads<R, LANES>(p, cur[j].pos, l, fq[j]);
    pdl_wait_after(ix[0].b, ix[GR - 1].h, ix[0].qrow, ix[GR - 1].qrow, p.q_input);
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_q_loads<LANES, DT>(ix[j], l, cur[j]);
  } else {
    pdl_wait_after(ix[0].b, ix[GR - 1].h, ix[0].qrow, p.positions, p.freqs);
    // the positions first (the freqs loads depend on them), then every q word (in the same
    // basic block as the positions: the weight's load is under a branch), then the weights
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_pos_load<R, LANES, DT, POS64>(p, ix[j], cur[j]);
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_q_loads<LANES, DT>(ix[j], l, cur[j]);
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_weight_load<R, LANES, DT>(p, ix[j], l, cur[j]);
#pragma unroll
    for (int j = 0; j < GR; ++j) issue_freq_loads<R, LANES>(p, cur[j].pos, l, fq[j]);
  }
  if (trigger == kTriggerAfterLoads) pdl_launch_dependents();  // every input of this thread requested
#pragma unroll
  for (int j = 0; j < GR; ++j) compute_row<R, LANES, DT>(p, row[j], l, row[j] < rows, cur[j], fq[j]);
}

// Fallback for misaligned pointers: one thread per row, the scalar pipeline of row.h.
template <class R, int DT, bool POS64>
__global__ void __launch_bounds__(128) scalar_kernel(const Problem p, int trigger) {
  const std::uint64_t rows = std::uint64_t(p.B) * std::uint64_t(p.H);
  const std::uint64_t row = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (trigger == kTriggerAtStart) pdl_launch_dependents();
  if (row >= rows) return;
  pdl_wait();
  const std::uint64_t b = row / std::uint64_t(p.H), h = row - b * std::uint64_t(p.H);
  // Without RoPE no position nor freqs row is read (every row valid); without weights no
  // weight is read and no weights_out written.
  std::int64_t pos = 0;
  if (R::kRope) pos = ld_pos<POS64>(p.positions, b);
  const bool valid = !R::kRope || (pos >= 0 && pos < p.max_pos);
  float x[kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) {
    if (DT == kBF16) x[i] = bf16_to_f32(static_cast<const std::uint16_t*>(p.q_input)[row * kHeadDim + i]);
    else if (DT == kF16) x[i] = f16_to_f32(static_cast<const std::uint16_t*>(p.q_input)[row * kHeadDim + i]);
    else x[i] = static_cast<const float*>(p.q_input)[row * kHeadDim + i];
  }
  const float w = R::kWeights ? load_float(p.weight, p.weight_dtype, b * std::uint64_t(p.weight_stride_b) + h) : 0.0f;
  float f[kFreqsDim];
  if (R::kRope) {
    const float* frow = p.freqs + (valid ? pos : 0) * kFreqsDim;
    for (int i = 0; i < kFreqsDim; ++i) f[i] = frow[i];
  }
  if (trigger == kTriggerAfterLoads) pdl_launch_dependents();
  std::uint8_t* o = p.q_out + row * R::kOutBytes;
  // q_sf: FP4 block-scale bytes, or the FP8 row scale of a recipe with scale_out (R::kSf).
  std::uint8_t* sf = R::kSf ? p.q_sf + row * 4 : nullptr;
  if (!valid) {
    for (int i = 0; i < R::kOutBytes; ++i) o[i] = 0;
    if (R::kSf)
      for (int i = 0; i < 4; ++i) sf[i] = 0;
    if (R::kWeights) p.weights_out[row] = __uint_as_float(nan_weight_bits<R>());
    return;
  }
  process_row<R>(x, f, w, p.weight_scale, p.head_scale, o, sf, R::kWeights ? p.weights_out + row : nullptr);
}

// ---- per-device facts and the pointer check: src/cuda/device_facts.cuh (kMaxDevices, pdl_supported, check_ptr);
// launch (with the PDL attribute), check_device, run_on_device (device guard), cuda_err, aligned: src/cuda/launch.cuh ----

#if !defined(INDEXER_Q_CUDA_KERNELS_ONLY)  // (defined by a SASS-inspection TU: the kernels alone)
constexpr char kBackendName[] = "cuda backend";  // in error messages

struct Launch {
  Variant v;  // lanes 0 (fallback) or a (lanes, group_rows) of the list; block > 0; trigger >= 0
  cudaStream_t stream;
  bool pdl;
  bool side_inputs_ready;
};

// The launch switch: one kernel instantiation per entry of src/cuda/launch_shapes.inc (entries
// with the same (lanes, group_rows) share it). Returns cudaErrorInvalidValue for a pair the list
// lacks (cuda_run_variant checks it first).
// The row-group kernels index rows in 32 bits (fewer index instructions a row): a call of 2^30
// rows or more is launched as consecutive launches of whole tokens, each below 2^31 rows (one
// token at a time where H alone is 2^30 or more; H < 2^31: cuda_run_variant), each on a
// Problem whose tensors start at its first token. launch_rows_limit() is that bound, lowered by
// tests/test_cuda.cu (set_launch_rows_limit_for_testing) to check the split on small calls.
std::atomic<std::int64_t> g_launch_rows_limit{std::int64_t(1) << 30};
std::int64_t launch_rows_limit() { return g_launch_rows_limit.load(std::memory_order_relaxed); }

// The tokens [b0, b0 + n) of p as a Problem of their own.
template <class R, int DT, bool POS64>
Problem token_slice(const Problem& p, std::int64_t b0, std::int64_t n) {
  Problem q = p;
  const std::int64_t r0 = b0 * p.H;
  q.B = n;
  q.q_input = static_cast<const char*>(p.q_input) + r0 * kHeadDim * (DT == kF32 ? 4 : 2);
  q.q_out = p.q_out + r0 * R::kOutBytes;
  if (R::kSf) q.q_sf = p.q_sf + r0 * 4;
  if (R::kWeights) {
    const int wbytes = p.weight_dtype == DType::kFloat32 ? 4 : 2;
    q.weight = static_cast<const char*>(p.weight) + b0 * p.weight_stride_b * wbytes;
    q.weights_out = p.weights_out + r0;
  }
  if (R::kRope) q.positions = static_cast<const char*>(p.positions) + b0 * (POS64 ? 8 : 4);
  return q;
}

template <class R, int DT, bool POS64>
cudaError_t launch_recipe(const Problem& p, const Launch& L) {
  const std::uint64_t rows = std::uint64_t(p.rows());
  const unsigned block = unsigned(L.v.block);
  const int tr = L.v.trigger;
  if (L.v.lanes == 0) return launch(scalar_kernel<R, DT, POS64>, (rows + 127) / 128, 128, L.stream, L.pdl, p, tr);
  const int flags = tr | (L.side_inputs_ready ? kSideInputsReady : 0);
  const RowDivisor hd = row_divisor(std::uint32_t(p.H));  // (p.H <= 2^31 - 1: cuda_run_variant)
  const std::int64_t limit = launch_rows_limit();
  const std::int64_t per = p.rows() < limit ? p.B : std::max<std::int64_t>(1, limit / p.H);  // tokens a launch
  for (std::int64_t b0 = 0; b0 < p.B || b0 == 0; b0 += per) {
    const Problem q = per >= p.B ? p : token_slice<R, DT, POS64>(p, b0, std::min(per, p.B - b0));
    const std::uint64_t qrows = std::uint64_t(q.rows());
    bool matched = false;  // (entries with the same (lanes, group_rows) share one instantiation)
    cudaError_t e = cudaErrorInvalidValue;
#define IQ_CUDA_SHAPE(LANES, GR, BLOCK, UP_TO, TRIGGER, RECIPES)                                         \
    if (!matched && L.v.lanes == LANES && L.v.group_rows == GR) {                                        \
      matched = true;                                                                                  \
      const std::uint64_t warps = (qrows + (32 / LANES) * GR - 1) / ((32 / LANES) * GR);                 \
      e = launch(rowgroup_kernel<R, LANES, GR, DT, POS64>, (warps * 32 + block - 1) / block, block, \
                 L.stream, L.pdl, q, flags, hd);                                                       \
    }
#include "cuda/launch_shapes.inc"
#undef IQ_CUDA_SHAPE
    if (e != cudaSuccess) return e;
    if (per >= p.B) break;
  }
  return cudaSuccess;
}

template <class R>
cudaError_t launch_dtypes(const Problem& p, const Launch& L) {
  const bool pos64 = p.pos_dtype == DType::kInt64;
  switch (p.dtype) {
    case DType::kBFloat16:
      return pos64 ? launch_recipe<R, kBF16, true>(p, L) : launch_recipe<R, kBF16, false>(p, L);
    case DType::kFloat16:
      return pos64 ? launch_recipe<R, kF16, true>(p, L) : launch_recipe<R, kF16, false>(p, L);
    case DType::kFloat32:
      return pos64 ? launch_recipe<R, kF32, true>(p, L) : launch_recipe<R, kF32, false>(p, L);
    default: return cudaErrorInvalidValue;
  }
}

bool listed(int lanes, int group_rows) {
  for (const LaunchShape& s : kLaunchShapes)
    if (s.lanes == lanes && s.group_rows == group_rows) return true;
  return false;
}

// INDEXER_Q_CUDA_SHAPE=lanes:group_rows[:block[:trigger]] (e.g. 4:2:256:1) replaces the list's
// automatic choice for every call of the process (read once); unset or empty: the list's. A value
// that is not a listed (lanes, group_rows) with a block of 32..256 in steps of 32 and a trigger
// 0 or 1 makes every call fail with InvalidArgument naming the variable.
struct ShapeOverride {
  bool set = false, bad = false;
  Variant v;
  std::string text;
};
ShapeOverride read_shape_override() {
  ShapeOverride o;
  const char* e = std::getenv("INDEXER_Q_CUDA_SHAPE");
  if (e == nullptr || *e == '\0') return o;
  o.set = true;
  o.text = e;
  int f[4] = {-1, -1, 128, kTriggerAfterLoads};
  int n = 0;
  const char* c = e;
  while (n < 4) {
    char* end = nullptr;
    const long x = std::strtol(c, &end, 10);
    if (end == c || x < 0 || x > 4096) break;
    f[n++] = int(x);
    if (*end == '\0') {
      c = end;
      break;
    }
    if (*end != ':') {
      n = -1;
      break;
    }
    c = end + 1;
  }
  o.bad = n < 2 || *c != '\0' || !listed(f[0], f[1]) || f[2] < 32 || f[2] > 256 || f[2] % 32 != 0 ||
          (f[3] != kTriggerAtStart && f[3] != kTriggerAfterLoads);
  o.v.lanes = f[0];
  o.v.group_rows = f[1];
  o.v.block = f[2];
  o.v.trigger = f[3];
  return o;
}
const ShapeOverride& shape_override() {
  static const ShapeOverride o = read_shape_override();
  return o;
}

}  // namespace

void set_launch_rows_limit_for_testing(std::int64_t rows) {
  g_launch_rows_limit.store(rows > 0 ? rows : std::int64_t(1) << 30, std::memory_order_relaxed);
}

bool cuda_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

bool shape_covers(int c, RecipeId r) {
  const Recipe& rec = recipe(r);
  if (c == kAnyRecipe) return true;
  if (rec.hadamard) return false;
  if (rec.format == OutFormat::kE2M1) return c == kVllmFp4 && rec.quant == Quantizer::kVllm;
  return c == kPlainFp8;
}

Variant choose_variant(std::int64_t rows, RecipeId r) {
  // The first automatic entry of src/cuda/launch_shapes.inc that covers `rows` rows of recipe r
  // (the measurements behind the list: there and in bench/HISTORY.md).
  Variant v;
  for (const LaunchShape& s : kLaunchShapes) {
    if (s.up_to_rows < 0 || (s.up_to_rows > 0 && rows > s.up_to_rows) || !shape_covers(s.recipes, r)) continue;
    v.lanes = s.lanes;
    v.group_rows = s.group_rows;
    v.block = s.block;
    v.trigger = s.trigger;
    return v;
  }
  return v;  // not reached: the list ends with an entry for any size
}

Status cuda_run_variant(const Problem& p, void* stream, bool enable_pdl, Variant v, bool side_inputs_ready) {
  const int dev = p.device.index;
  const Recipe& rec = recipe(p.recipe);
  const bool fp4 = rec.format == OutFormat::kE2M1;
  // q_sf: FP4 block scales, or the FP8 row scale (fp32) of a recipe with scale_out.
  const bool sf = recipe_writes_q_scale(rec);
  // Tensors a recipe does not have (q_sf of FP8 without scale_out, weight / weights_out without
  // weights, freqs / positions without RoPE: null) are not checked: q_input stands in for them.
  const bool rope = recipe_has_rope(rec), weights = recipe_has_weights(rec);
  const NamedPtr ptrs[] = {{"q_input", p.q_input},
                           {"q_out", p.q_out},
                           {"weight", weights ? p.weight : p.q_input},
                           {"weights_out", weights ? static_cast<const void*>(p.weights_out) : p.q_input},
                           {"freqs", rope ? static_cast<const void*>(p.freqs) : p.q_input},
                           {"positions", rope ? p.positions : p.q_input},
                           {"q_sf", sf ? p.q_sf : p.q_input}};
  Status s = check_device(kBackendName, dev, ptrs);
  if (!s.ok()) return s;
  if (p.rows() > (std::int64_t(1) << 40) || p.H > 0x7fffffff)
    return Status::InvalidArgument("indexer_q: q_input: too many rows for the CUDA backend");
  if (v.lanes > 0 && !listed(v.lanes, v.group_rows))
    return Status::InvalidArgument("indexer_q: cuda backend: launch shape lanes=" + std::to_string(v.lanes) +
                                   " group_rows=" + std::to_string(v.group_rows) +
                                   " is not in src/cuda/launch_shapes.inc");

  // Launch on the tensors' device (pdl_supported reads the current device's facts).
  return run_on_device(kBackendName, dev, [&] {
    const bool fast_ok = aligned(p.q_input, 16) && aligned(p.freqs, 16) &&
                         (fp4 ? aligned(p.q_out, 4) : aligned(p.q_out, 8)) && (!sf || aligned(p.q_sf, 4));
    const Variant chosen = choose_variant(p.rows(), p.recipe);
    if (v.lanes < 0) {
      v.lanes = chosen.lanes;
      v.group_rows = chosen.group_rows;
      v.block = chosen.block;
    }
    if (v.trigger < 0 || v.trigger > kTriggerAfterLoads) v.trigger = chosen.trigger;
    if (!fast_ok) v.lanes = 0;
    if (v.block <= 0) v.block = 256;
    const Launch L{v, static_cast<cudaStream_t>(stream), enable_pdl && pdl_supported(dev), side_inputs_ready};
    return with_recipe(p.recipe, [&](auto r) { return launch_dtypes<decltype(r)>(p, L); });
  });
}

Status cuda_run(const Problem& p, void* stream, bool enable_pdl, bool side_inputs_ready) {
  const ShapeOverride& o = shape_override();
  if (o.set && o.bad)
    return Status::InvalidArgument("indexer_q: INDEXER_Q_CUDA_SHAPE: '" + o.text +
                                   "' is not lanes:group_rows[:block[:trigger]] of a shape listed in "
                                   "src/cuda/launch_shapes.inc (block 32..256 in steps of 32, trigger 0 or 1)");
  return cuda_run_variant(p, stream, enable_pdl, o.set ? o.v : Variant{}, side_inputs_ready);
}

}  // namespace detail
}  // namespace indexer_q
#else
}  // namespace
}  // namespace detail
}  // namespace indexer_q
#endif
