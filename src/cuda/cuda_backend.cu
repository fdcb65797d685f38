// The CUDA backend of fused_q_indexer_rope_hadamard_quant.
//
// Design (the "row-group" kernel): each row of 128 values is processed by LANES consecutive
// threads of one warp (LANES = 2, 4, 8 or 16; choose_variant picks 16 up to 1024 rows, else 4
// in blocks of 128, from H200 measurements in docs/PERFORMANCE.md). A lane holds C = 128 / (8 * LANES) chunks of 8 contiguous
// values; element i of the row lives in
//     chunk c = i / (8 * LANES),   lane l = (i / 8) % LANES,   slot k = i % 8.
// Each chunk is one 16-byte load (bf16 / fp16) or two (fp32), and one 8-byte store of codes.
// The Hadamard butterflies run in the order SPEC.md fixes (strides 1, 2, 4, ..., 64):
//   strides 1, 2, 4            (bits of k)  inside a chunk, in registers;
//   strides 8 .. 4 * LANES     (bits of l)  across lanes, one shuffle per value;
//   strides 8 * LANES .. 64    (bits of c)  across a lane's chunks, in registers.
// Every add and subtract is the spec's: across lanes the low lane computes own + partner and
// the high lane partner - own, both written as one fma with a multiplier of +1 / -1, which
// rounds exactly like the plain add / subtract (the product by +-1 is exact).
//
// FP8 encoding uses Hopper's cvt.rn.satfinite.e4m3x2.f32 (round to nearest even, saturating
// to +-448), which equals the spec's clamp-then-encode for every non-NaN product; step 8's
// fmin(., 448) (NaN -> +448) is applied only to rows that can hold a NaN product (see
// compute_row). tests/test_cuda.cu checks the conversion against the scalar encoder for every
// float32 bit pattern, and rows built to produce Inf - Inf, overflow and NaN.
//
// Out-of-range positions. Positions live in device memory and cannot be checked on the host
// without a synchronization. A row whose position p is < 0 or >= max_pos reads freqs row 0
// instead (always in bounds: max_pos >= 1), so nothing outside the tensors is read; its 128
// codes are written as 0x00 and its weights_out as a quiet NaN, so the caller can detect it
// (isnan(weights_out)). No trap, no error code.
//
// Everything is enqueued on the caller's stream: no allocation, no host synchronization, so
// the call can be captured in a CUDA graph. With enable_pdl on an sm_90+ device the kernel
// is launched with programmatic stream serialization: it waits (griddepcontrol.wait) before
// its first global load and lets dependents launch (griddepcontrol.launch_dependents) after
// its last input load.
//
// Misaligned pointers (q_input / freqs not 16-byte aligned, q_fp8 not 8-byte aligned, e.g. a
// view at an odd element offset) take a simple one-thread-per-row kernel with the scalar row
// pipeline of src/common/row.h: same bytes, slower.
//
// Also here, for benchmarks and tests (cuda_run_variant): a persistent variant (row groups
// loop over the rows and prefetch the next row) and a bulk-copy variant (tiles of rows
// streamed into shared memory by cp.async.bulk). Both measured slower on an H200; kept so the
// comparison can be repeated. Before launching, every pointer is checked to be device (or
// managed / pinned) memory of p.device.index, and the launch runs with that device current.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cuda_fp16.h>
#include <string>

#include "common/problem.h"
#include "common/row.h"
#include "cuda/cuda_backend.h"
#include "cuda/fp8_e4m3.cuh"

namespace indexer_q {
namespace detail {
namespace {

constexpr int kV4RopeOffset = RecipeT<RecipeId::kV4Fp8>::kRopeOffset;  // TEMPORARY: v4_fp8 only

struct Args {
  const void* q;
  std::uint8_t* out;
  const void* w;
  std::int64_t w_stride;
  float* w_out;
  float w_scale;
  const float* freqs;
  std::int64_t max_pos;
  const void* pos;
  std::uint64_t rows;
  std::uint32_t H;
};

enum : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- loads, in program order (asm volatile keeps them in the order written, so every q
// load is in flight before the position-dependent freqs loads are issued) ----
__device__ __forceinline__ uint4 ld_stream16(const void* p) {  // read once: skip L1
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ float4 ld_f4(const float* p) {  // freqs: shared by a token's heads
  float4 r;
  asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
               : "l"(p));
  return r;
}
template <bool POS64>
__device__ __forceinline__ std::int64_t ld_pos(const void* pos, std::uint64_t b) {
  if (POS64) {
    long long v;
    asm volatile("ld.global.nc.s64 %0, [%1];" : "=l"(v) : "l"(static_cast<const long long*>(pos) + b));
    return v;
  }
  int v;
  asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(v) : "l"(static_cast<const int*>(pos) + b));
  return std::int64_t(v);
}
// Raw weight bits (bf16 / fp16 in the low half, or fp32).
template <int DT>
__device__ __forceinline__ std::uint32_t ld_weight(const void* w, std::uint64_t idx) {
  std::uint32_t v;
  if (DT == kF32) {
    asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(static_cast<const std::uint32_t*>(w) + idx));
  } else {
    unsigned short h;
    asm volatile("ld.global.nc.b16 %0, [%1];" : "=h"(h) : "l"(static_cast<const unsigned short*>(w) + idx));
    v = h;
  }
  return v;
}
template <int DT>
__device__ __forceinline__ float decode_weight(std::uint32_t v) {
  if (DT == kBF16) return __uint_as_float(v << 16);
  if (DT == kF16) return __half2float(__ushort_as_half((unsigned short)v));  // exact
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

template <int LANES, int DT, bool POS64>
__device__ __forceinline__ void issue_loads(const Args& a, std::uint64_t row, int l, RowLoad<LANES, DT>& r) {
  constexpr int C = RowLoad<LANES, DT>::C, W = RowLoad<LANES, DT>::W;
  const std::uint64_t b = (row >> 32) ? row / a.H : std::uint64_t(std::uint32_t(row) / a.H);
  const std::uint64_t h = row - b * a.H;
  const char* qrow = static_cast<const char*>(a.q) + row * (kHeadDim * (DT == kF32 ? 4 : 2));
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int j = 0; j < W; ++j) r.q[c * W + j] = ld_stream16(qrow + ((c * LANES + l) * W + j) * 16);
  r.pos = ld_pos<POS64>(a.pos, b);
  r.w = (l == 0) ? ld_weight<DT>(a.w, b * std::uint64_t(a.w_stride) + h) : 0u;
}

// Everything after the loads: RoPE, Hadamard, scale, quantize, store. `active` is false for
// the lanes of a row past the end (they compute on a clamped row and store nothing), so that
// every shuffle has the whole warp.
template <int LANES, int DT>
__device__ __forceinline__ void compute_row(const Args& a, std::uint64_t row, int l, bool active,
                                            const RowLoad<LANES, DT>& r, bool last_loads) {
  constexpr int C = RowLoad<LANES, DT>::C, W = RowLoad<LANES, DT>::W;
  const bool valid = r.pos >= 0 && r.pos < a.max_pos;
  const float* frow = a.freqs + (valid ? r.pos : 0) * kFreqsDim;  // row 0 always exists
  // freqs for this lane's rotated chunks
  float4 fq[C][2];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i0 = (c * LANES + l) * 8;
    const bool rope = (C > 1) ? (c * 8 * LANES >= kV4RopeOffset) : (i0 >= kV4RopeOffset);
    if (rope) {
      fq[c][0] = ld_f4(frow + (i0 - kV4RopeOffset));
      fq[c][1] = ld_f4(frow + (i0 - kV4RopeOffset) + 4);
    }
  }
  if (last_loads) pdl_launch_dependents();  // every input of this thread has been requested

  float x[C][8];
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int j = 0; j < W; ++j) decode16<DT>(r.q[c * W + j], &x[c][j * 4]);

  // ---- RoPE on elements 64..127 (SPEC step 2) ----
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i0 = (c * LANES + l) * 8;
    const bool rope = (C > 1) ? (c * 8 * LANES >= kV4RopeOffset) : (i0 >= kV4RopeOffset);
    if (rope) {
      const float f[8] = {fq[c][0].x, fq[c][0].y, fq[c][0].z, fq[c][0].w,
                          fq[c][1].x, fq[c][1].y, fq[c][1].z, fq[c][1].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float xr = x[c][2 * j], xi = x[c][2 * j + 1];
        const float cs = f[2 * j], sn = f[2 * j + 1];
        x[c][2 * j] = __fmaf_rn(xr, cs, -__fmul_rn(xi, sn));
        x[c][2 * j + 1] = __fmaf_rn(xr, sn, __fmul_rn(xi, cs));
      }
    }
  }

  // ---- Hadamard (SPEC step 3), strides ascending ----
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

  // ---- scale, amax, row scale (steps 4..7) ----
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      x[c][k] = __fmul_rn(x[c][k], kHadamardScale);
      amax = fmaxf(amax, fabsf(x[c][k]));
    }
  }
#pragma unroll
  for (int s = 1; s < LANES; s <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, s));
  const float scale = __fdiv_rn(fmaxf(kScaleFloor, amax), kFp8Max);
  const float inv = __fdiv_rn(1.0f, scale);

  // ---- quantize (steps 8, 9) and store ----
  // Step 8's fmin(., 448) matters only for NaN products (the conversion saturates everything
  // else exactly like the clamp). A product y * inv is NaN only if some y is NaN or inv = 0
  // (amax = Inf). A NaN Hadamard input makes every y NaN (each output sums every input); a
  // NaN made inside the butterflies (Inf - Inf) always leaves an Inf beside it (a pair of
  // non-NaN values never gives two NaNs), so amax = Inf. Hence the test below, uniform across
  // the lanes of a row, finds every row that needs the clamp.
  const bool need_clamp = !(amax <= 3.40282347e38f) || !(x[0][0] == x[0][0]);
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int k = 0; k < 8; ++k) x[c][k] = __fmul_rn(x[c][k], inv);
  if (need_clamp) {
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 8; ++k) x[c][k] = fminf(x[c][k], kFp8Max);  // NaN -> +448
  }
  if (!active) return;
  std::uint8_t* orow = a.out + row * kHeadDim;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    uint2 o;
    o.x = quantize4_e4m3_sat(x[c][0], x[c][1], x[c][2], x[c][3]);
    o.y = quantize4_e4m3_sat(x[c][4], x[c][5], x[c][6], x[c][7]);
    if (!valid) o = make_uint2(0u, 0u);
    *reinterpret_cast<uint2*>(orow + (c * LANES + l) * 8) = o;
  }
  // ---- step 10 ----
  if (l == 0)
    a.w_out[row] = valid ? __fmul_rn(__fmul_rn(decode_weight<DT>(r.w), a.w_scale), scale)
                         : __uint_as_float(0x7fc00000u);
}

// One row per LANES-thread group (PERSIST = false), or a grid sized to the machine whose
// groups walk the rows with a stride and load the next row while computing the current one
// (PERSIST = true).
template <int LANES, int DT, bool POS64, bool PERSIST>
__global__ void __launch_bounds__(256) rowgroup_kernel(Args a) {
  const std::uint64_t t = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int l = int(threadIdx.x % LANES);
  // The first row of this thread's warp: the loop below is uniform per warp.
  std::uint64_t warp_row0 = (t & ~std::uint64_t(31)) / LANES;
  std::uint64_t row = t / LANES;
  pdl_wait();
  if (warp_row0 >= a.rows) {
    pdl_launch_dependents();
    return;
  }
  RowLoad<LANES, DT> cur;
  issue_loads<LANES, DT, POS64>(a, row < a.rows ? row : a.rows - 1, l, cur);
  if (!PERSIST) {
    compute_row<LANES, DT>(a, row, l, row < a.rows, cur, true);
    return;
  }
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x / LANES;
  for (;;) {
    const std::uint64_t next = row + stride;
    const bool more = warp_row0 + stride < a.rows;  // warp-uniform
    RowLoad<LANES, DT> nxt;
    if (more) issue_loads<LANES, DT, POS64>(a, next < a.rows ? next : a.rows - 1, l, nxt);
    compute_row<LANES, DT>(a, row, l, row < a.rows, cur, !more);
    if (!more) break;
    cur = nxt;
    row = next;
    warp_row0 += stride;
  }
}

// ---- bulk-copy (TMA) variant, 2-byte inputs: a block's 256 threads handle tiles of
// 256 / LANES consecutive rows (contiguous in memory); one thread streams the tiles into a
// ring of kStages shared-memory buffers with cp.async.bulk, completing on an mbarrier, so the
// bytes in flight do not depend on registers. The grid is sized to the resident blocks and
// walks the tiles. Arithmetic: compute_row, exactly as above.
constexpr int kStages = 3;

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "IQ_WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra IQ_WAIT_%=;\n\t}" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

template <int LANES, int DT, bool POS64>
__global__ void __launch_bounds__(256) tma_kernel(Args a) {
  static_assert(DT != kF32, "2-byte inputs only");
  constexpr int ROWS = 256 / LANES;
  constexpr int C = RowLoad<LANES, DT>::C;
  constexpr unsigned kRowBytes = kHeadDim * 2;
  extern __shared__ __align__(128) unsigned char tiles_smem[];  // kStages * ROWS * 256
  __shared__ __align__(8) std::uint64_t bar[kStages];
  const int tid = int(threadIdx.x);
  const int l = tid % LANES;
  const int rt = tid / LANES;  // row within the tile
  const std::uint64_t ntiles = (a.rows + ROWS - 1) / ROWS;
  pdl_wait();
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&bar[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int stage, std::uint64_t tile) {
    const std::uint64_t first = tile * ROWS;
    const std::uint64_t n = a.rows - first < std::uint64_t(ROWS) ? a.rows - first : std::uint64_t(ROWS);
    bulk_load(tiles_smem + stage * ROWS * kRowBytes, static_cast<const char*>(a.q) + first * kRowBytes,
              unsigned(n * kRowBytes), &bar[stage]);
  };
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      const std::uint64_t tile = blockIdx.x + std::uint64_t(s) * gridDim.x;
      if (tile < ntiles) issue(s, tile);
    }
  }
  auto batch_of = [&](std::uint64_t row) {
    return (row >> 32) ? row / a.H : std::uint64_t(std::uint32_t(row) / a.H);
  };
  std::uint64_t tile = blockIdx.x;
  std::uint64_t row = tile * ROWS + rt;
  std::int64_t pos_next = ld_pos<POS64>(a.pos, batch_of(row < a.rows ? row : a.rows - 1));
  for (unsigned it = 0; tile < ntiles; ++it, tile += gridDim.x) {
    const int stage = int(it % kStages);
    const unsigned parity = (it / kStages) & 1u;
    row = tile * ROWS + rt;
    const bool active = row < a.rows;
    const std::uint64_t rowc = active ? row : a.rows - 1;
    const std::uint64_t b = batch_of(rowc);
    RowLoad<LANES, DT> r;
    r.pos = pos_next;
    r.w = (l == 0) ? ld_weight<DT>(a.w, b * std::uint64_t(a.w_stride) + (rowc - b * a.H)) : 0u;
    const std::uint64_t next_tile = tile + gridDim.x;
    if (next_tile < ntiles) {
      const std::uint64_t nrow = next_tile * ROWS + rt;
      pos_next = ld_pos<POS64>(a.pos, batch_of(nrow < a.rows ? nrow : a.rows - 1));
    }
    mbar_wait(&bar[stage], parity);
    const uint4* src = reinterpret_cast<const uint4*>(tiles_smem + stage * ROWS * kRowBytes +
                                                      (active ? rt : 0) * kRowBytes);
#pragma unroll
    for (int c = 0; c < C; ++c) r.q[c] = src[c * LANES + l];
    __syncthreads();  // every thread has read this stage: it may be refilled
    if (tid == 0 && tile + std::uint64_t(kStages) * gridDim.x < ntiles)
      issue(stage, tile + std::uint64_t(kStages) * gridDim.x);
    compute_row<LANES, DT>(a, row, l, active, r, next_tile >= ntiles);
  }
}

// Fallback for misaligned pointers: one thread per row, the scalar pipeline of row.h.
template <int DT, bool POS64>
__global__ void __launch_bounds__(128) scalar_kernel(Args a) {
  const std::uint64_t row = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  pdl_wait();
  if (row >= a.rows) {
    pdl_launch_dependents();
    return;
  }
  const std::uint64_t b = row / a.H, h = row - b * a.H;
  const std::int64_t p = ld_pos<POS64>(a.pos, b);
  const bool valid = p >= 0 && p < a.max_pos;
  float x[kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) {
    if (DT == kBF16) x[i] = bf16_to_f32(static_cast<const std::uint16_t*>(a.q)[row * kHeadDim + i]);
    else if (DT == kF16) x[i] = f16_to_f32(static_cast<const std::uint16_t*>(a.q)[row * kHeadDim + i]);
    else x[i] = static_cast<const float*>(a.q)[row * kHeadDim + i];
  }
  float w;
  const std::uint64_t widx = b * std::uint64_t(a.w_stride) + h;
  if (DT == kBF16) w = bf16_to_f32(static_cast<const std::uint16_t*>(a.w)[widx]);
  else if (DT == kF16) w = f16_to_f32(static_cast<const std::uint16_t*>(a.w)[widx]);
  else w = static_cast<const float*>(a.w)[widx];
  float f[kFreqsDim];
  const float* frow = a.freqs + (valid ? p : 0) * kFreqsDim;
  for (int i = 0; i < kFreqsDim; ++i) f[i] = frow[i];
  pdl_launch_dependents();
  std::uint8_t* o = a.out + row * kHeadDim;
  if (!valid) {
    for (int i = 0; i < kHeadDim; ++i) o[i] = 0;
    a.w_out[row] = __uint_as_float(0x7fc00000u);
    return;
  }
  process_row<RecipeT<RecipeId::kV4Fp8>>(x, f, w, a.w_scale, o, nullptr, a.w_out + row);
}

// ---- per-device facts, read once per device (relaxed atomics: every writer stores the same values) ----
struct DeviceInfo {
  int cc_major = 0;
  int sms = 0;
};
constexpr int kMaxDevices = 64;
std::atomic<int> g_cc_major[kMaxDevices];
std::atomic<int> g_sms[kMaxDevices];

DeviceInfo device_info(int dev) {
  DeviceInfo d;
  d.sms = g_sms[dev].load(std::memory_order_relaxed);
  d.cc_major = g_cc_major[dev].load(std::memory_order_relaxed);
  if (d.sms <= 0) {
    int major = 0, sms = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      major = 0;
      sms = 1;
    } else {
      g_cc_major[dev].store(major, std::memory_order_relaxed);
      g_sms[dev].store(sms, std::memory_order_relaxed);
    }
    d.cc_major = major;
    d.sms = sms;
  }
  return d;
}

std::string cuda_err(const char* what, cudaError_t e) {
  return std::string("indexer_q: cuda backend: ") + what + ": " + cudaGetErrorName(e) + " (" +
         cudaGetErrorString(e) + ")";
}

// Pointer check: device memory of another device, or plain host memory, is refused.
Status check_ptr(const char* name, const void* ptr, int dev) {
  cudaPointerAttributes at{};
  const cudaError_t e = cudaPointerGetAttributes(&at, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    return Status::InvalidArgument(std::string("indexer_q: ") + name +
                                   ": not a pointer the CUDA runtime knows (" + cudaGetErrorString(e) + ")");
  }
  if (at.type == cudaMemoryTypeUnregistered)
    return Status::InvalidArgument(std::string("indexer_q: ") + name +
                                   ": is pageable host memory, expected memory of cuda:" + std::to_string(dev));
  if (at.type == cudaMemoryTypeDevice && at.device != dev)
    return Status::InvalidArgument(std::string("indexer_q: ") + name + ": lives on cuda:" +
                                   std::to_string(at.device) + ", expected cuda:" + std::to_string(dev) +
                                   " (the device of the tensors)");
  return Status::Ok();
}

template <typename K>
cudaError_t launch(K kernel, unsigned grid, unsigned block, cudaStream_t s, bool pdl, const Args& a,
                   std::size_t smem = 0) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, a);
}

template <int LANES, int DT, bool POS64, bool PERSIST>
cudaError_t launch_rowgroup(const Args& a, unsigned block, cudaStream_t s, bool pdl, int sms) {
  auto kernel = rowgroup_kernel<LANES, DT, POS64, PERSIST>;
  const std::uint64_t threads = a.rows * LANES;
  std::uint64_t grid = (threads + block - 1) / block;
  if (PERSIST) {
    // Resident blocks per SM for this kernel and block size (asked once per block size).
    static std::atomic<int> per_sm[3];  // block 64, 128, 256; other sizes are asked each time
    const int slot = block == 64 ? 0 : block == 128 ? 1 : block == 256 ? 2 : -1;
    int n = slot >= 0 ? per_sm[slot].load(std::memory_order_relaxed) : 0;
    if (n <= 0) {
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, int(block), 0) != cudaSuccess || n <= 0) {
        cudaGetLastError();
        n = 1;
      }
      if (slot >= 0) per_sm[slot].store(n, std::memory_order_relaxed);
    }
    const std::uint64_t full = std::uint64_t(n) * std::uint64_t(sms);
    if (grid > full) grid = full;
  }
  return launch(kernel, unsigned(grid), block, s, pdl, a);
}

template <int LANES, int DT, bool POS64>
cudaError_t launch_tma(const Args& a, cudaStream_t s, bool pdl, int sms) {
  auto kernel = tma_kernel<LANES, DT, POS64>;
  constexpr int kRows = 256 / LANES;
  const std::size_t smem = std::size_t(kStages) * kRows * kHeadDim * 2;
  static std::atomic<int> per_sm{0};  // resident blocks per SM, asked once
  int n = per_sm.load(std::memory_order_relaxed);
  if (n <= 0) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 256, smem);
    if (e != cudaSuccess) return e;
    if (n <= 0) n = 1;
    per_sm.store(n, std::memory_order_relaxed);
  }
  const std::uint64_t tiles = (a.rows + kRows - 1) / kRows;
  const std::uint64_t full = std::uint64_t(n) * std::uint64_t(sms);
  return launch(kernel, unsigned(tiles < full ? tiles : full), 256, s, pdl, a, smem);
}

template <int DT, bool POS64>
cudaError_t launch_pos(const Args& a, const Variant& v, cudaStream_t s, bool pdl, int sms) {
  if (v.tma && DT != kF32) {
    if (v.lanes == 8) return launch_tma<8, (DT == kF32 ? kBF16 : DT), POS64>(a, s, pdl, sms);
    return launch_tma<4, (DT == kF32 ? kBF16 : DT), POS64>(a, s, pdl, sms);
  }
  if (v.lanes == 0) {
    const std::uint64_t grid = (a.rows + 127) / 128;
    return launch(scalar_kernel<DT, POS64>, unsigned(grid), 128, s, pdl, a);
  }
  const unsigned block = unsigned(v.block);
  if (v.persistent) {
    if (v.lanes == 16) return launch_rowgroup<16, DT, POS64, true>(a, block, s, pdl, sms);
    if (v.lanes == 8) return launch_rowgroup<8, DT, POS64, true>(a, block, s, pdl, sms);
    return launch_rowgroup<4, DT, POS64, true>(a, block, s, pdl, sms);
  }
  if (v.lanes == 16) return launch_rowgroup<16, DT, POS64, false>(a, block, s, pdl, sms);
  if (v.lanes == 8) return launch_rowgroup<8, DT, POS64, false>(a, block, s, pdl, sms);
  if (v.lanes == 2) return launch_rowgroup<2, DT, POS64, false>(a, block, s, pdl, sms);
  return launch_rowgroup<4, DT, POS64, false>(a, block, s, pdl, sms);
}

template <int DT>
cudaError_t launch_dt(const Args& a, bool pos64, const Variant& v, cudaStream_t s, bool pdl, int sms) {
  return pos64 ? launch_pos<DT, true>(a, v, s, pdl, sms) : launch_pos<DT, false>(a, v, s, pdl, sms);
}

bool aligned(const void* p, std::uintptr_t n) { return (reinterpret_cast<std::uintptr_t>(p) % n) == 0; }

}  // namespace

bool cuda_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

Status cuda_run_variant(const Problem& p, void* stream, bool enable_pdl, Variant v) {
  const int dev = p.device.index;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) return Status::Unavailable(cuda_err("cudaGetDeviceCount", e));
  if (dev < 0 || dev >= ndev || dev >= kMaxDevices)
    return Status::InvalidArgument("indexer_q: q_input: device cuda:" + std::to_string(dev) +
                                   " does not exist (" + std::to_string(ndev) + " devices)");
  const struct {
    const char* name;
    const void* ptr;
  } ptrs[] = {{"q_input", p.q_input}, {"q_fp8", p.q_out},     {"weight", p.weight},
              {"weights_out", p.weights_out}, {"freqs", p.freqs}, {"positions", p.positions}};
  for (const auto& x : ptrs) {
    Status s = check_ptr(x.name, x.ptr, dev);
    if (!s.ok()) return s;
  }
  if (p.rows() > (std::int64_t(1) << 40) || p.H > 0x7fffffff)
    return Status::InvalidArgument("indexer_q: q_input: too many rows for the CUDA backend");

  // Device guard: launch on the tensors' device, restore the caller's current device.
  int prev = 0;
  e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return Status::Internal(cuda_err("cudaGetDevice", e));
  if (prev != dev) {
    e = cudaSetDevice(dev);
    if (e != cudaSuccess) return Status::Internal(cuda_err("cudaSetDevice", e));
  }
  const DeviceInfo info = device_info(dev);

  Args a{p.q_input, p.q_out, p.weight, p.weight_stride_b, p.weights_out, p.weight_scale,
         p.freqs, p.max_pos, p.positions, std::uint64_t(p.rows()), std::uint32_t(p.H)};
  const bool fast_ok = aligned(p.q_input, 16) && aligned(p.freqs, 16) && aligned(p.q_out, 8);
  if (v.lanes < 0) v = choose_variant(p.rows(), info.sms);
  if (!fast_ok) v.lanes = 0;
  if (v.block <= 0) v.block = 256;
  const bool pdl = enable_pdl && info.cc_major >= 9;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool pos64 = p.pos_dtype == DType::kInt64;
  switch (p.dtype) {
    case DType::kBFloat16: e = launch_dt<kBF16>(a, pos64, v, s, pdl, info.sms); break;
    case DType::kFloat16: e = launch_dt<kF16>(a, pos64, v, s, pdl, info.sms); break;
    case DType::kFloat32: e = launch_dt<kF32>(a, pos64, v, s, pdl, info.sms); break;
    default: e = cudaErrorInvalidValue; break;
  }
  const cudaError_t last = cudaGetLastError();
  if (e == cudaSuccess) e = last;
  if (prev != dev) cudaSetDevice(prev);
  if (e != cudaSuccess) return Status::Internal(cuda_err("kernel launch failed", e));
  return Status::Ok();
}

Variant choose_variant(std::int64_t rows, int sms) {
  // Measured on an H200 (docs/PERFORMANCE.md): up to 1024 rows the call is latency-bound and
  // 16 threads per row (short per-thread chains) is fastest; above that 4 threads per row in
  // blocks of 128 was fastest at every size measured (persistent, bulk-copy, 2- and 8-lane
  // shapes were slower).
  Variant v;
  if (rows <= 1024) {
    v.lanes = 16;
    v.block = 256;
  } else {
    v.lanes = 4;
    v.block = 128;
  }
  v.persistent = false;
  v.tma = false;
  (void)sms;
  return v;
}

Status cuda_run(const Problem& p, void* stream, bool enable_pdl) {
  // TEMPORARY (recipe work in progress): only v4_fp8 has a CUDA kernel so far.
  if (p.recipe != RecipeId::kV4Fp8)
    return Status::Unavailable(std::string("indexer_q: cuda backend: recipe ") + recipe_name(p.recipe) +
                               " is not implemented yet");
  return cuda_run_variant(p, stream, enable_pdl, Variant{});
}

}  // namespace detail
}  // namespace indexer_q
