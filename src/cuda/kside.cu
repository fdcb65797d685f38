// The CUDA backend of the key side (docs/KSIDE-SPEC.md: RMSNorm, RoPE on dims 64..127, Hadamard,
// FP8 / FP4 quantization, store into a paged cache), both key recipes of
// include/indexer_q/kside_recipes.inc from one kernel body (kside_kernel<KR, LANES, ...>,
// KR = KRecipeT<Id> of src/common/kside_problem.h; the host picks it through with_krecipe).
//
// Design. LANES consecutive threads of a warp (4, 8, 16 or 32) store one token. The spec's 32
// sum-of-squares groups (dims 4g..4g+3) are dealt out so that lane l holds the groups
//     g = l + LANES * c,   c = 0 .. C - 1,   C = 32 / LANES,
// i.e. C chunks of 4 contiguous dims, chunk c of lane l at dims 4 (l + LANES c) .. + 3. Then
//  - loads: a chunk is one 16-byte load (fp32) or one 8-byte load (bf16 / fp16); the LANES
//    lanes of a token read chunk c as one contiguous segment; the weight the same way;
//  - step 3 (xor butterfly over g, masks 16, 8, 4, 2, 1 in that order): the masks >= LANES
//    are bits of c and come first, in registers (halving the chunk array as kside_row.h's
//    kside_butterfly_sum does); the masks < LANES are bits of l, one shuffle each. Every
//    partial sum is the one the spec's tree forms (a + b == b + a);
//  - RoPE: dims 64..127 are the groups g >= 16, whole chunks; a chunk's 2 (cos, sin) pairs are
//    one 16-byte load of the freqs row;
//  - Hadamard, strides ascending: 1, 2 inside a chunk; 4 .. 2 LANES across lanes (one shuffle
//    per value: the low lane forms own + other, the high lane other - own, both as
//    fma(own, +-1, other), which rounds exactly like the add / subtract); 4 LANES .. 64 across
//    a lane's chunks, in registers;
//  - FP8: row amax over the lane's values then shuffles; one fp32 scale (two IEEE divisions,
//    once per lane); codes by cvt.rn.satfinite.e4m3x2.f32 after fminf(., 448) (NaN -> 448;
//    src/cuda/fp8_e4m3.cuh, checked for every float32 by tests/test_cuda.cu); a chunk's 4
//    codes are one 4-byte store, the scale one 4-byte store by lane 0;
//  - FP4: a block of 32 dims is 8 consecutive groups, i.e. chunk c of 8 consecutive lanes
//    (LANES >= 8) or chunks 2b, 2b + 1 of all 4 lanes (LANES = 4): in-thread max, then
//    shuffles; UE8M0 and e2m1 codes by ue8m0_of_amax_fast / e2m1_code (src/cuda/fp4_e2m1.cuh,
//    checked for every input); a chunk's 4 codes are one 2-byte store, the 4 scale bytes one
//    4-byte store by lane 0.
// The reciprocal square root of step 5 is the hardware's (RsqHw of kside_row.h: rsqrtf, i.e.
// rsqrt.approx.f32 = MUFU.RSQ on sm_90, which the host's table model reproduces; docs/KSIDE-SPEC.md
// section 7 leaves other GPUs open: the golden tests on such a device tell).
// LANES = 32 is SGLang's lane layout (4 dims per lane); fewer lanes per token do the
// per-token work (divisions, reciprocal square root, index math) once for more values:
// kside_choose_variant holds the shape measured fastest on an H200 (bench/cuda_op_kside.cuh, `indexer_q_cuda_bench --op kside`).
//
// Bounds (docs/KSIDE-SPEC.md section 1). Positions and slots live in device memory and are not
// checked on the host. A token with a negative slot, a slot >= num_pages * page_size, or a
// position outside [0, max_pos) writes nothing; every lane of it still computes (on freqs row
// 0, always in bounds) so that the shuffles have the whole warp. Lanes past the last token
// compute on the last token's row and store nothing. Nothing outside the tensors is read or
// written.
//
// Duplicate slots (docs/KSIDE.md): the last stored token of a slot (in token order) decides its
// row, as on one host thread; the others write nothing. Slots live on the device, so the winners
// are found on it, with no scratch memory, by one of two methods (kside_dup_mode; KDup of
// kside_cuda.h; a kernel argument, `dup`):
//  - up to kKsideScanMaxTokens tokens (kside_cuda.h, where the threshold is counted out), in the
//    store kernel itself, so a call is one launch (decode sizes): each stored token compares the
//    slots of the later tokens t' > t (its lanes share them out: lane l takes t + 1 + l + LANES k,
//    kScanRound loads in flight at a time, the first round issued with the freqs loads, before any
//    arithmetic) and writes nothing if one of them is stored (its position in range: an equal
//    slot is in bounds); the token's lanes vote (one __ballot_sync). The one-thread-per-token
//    kernel compares them one after the other. At 1 token there is nothing to compare.
//  - above it, before the store kernel two small kernels (kside_claim_kernel) first set a 64-bit
//    claim word in each destination row to kClaimMark (the 8-byte-aligned word inside the row's
//    code bytes, kside_claim_word), then atomicMax it with kClaimMark | (t + 1) for every stored
//    token t. The store kernel reads the word and stores a token only when it holds the token's
//    own claim. The winner's row bytes then overwrite the word; no stored row can look like a
//    claim, because byte 7 of every claim is one no code byte takes: 0xff for e4m3fn codes (-NaN:
//    NaN inputs become +448) and 0x88 for two e2m1 codes (negative zero, which the codes never
//    hold). So a loser reads either the winner's claim or the winner's bytes and never its own
//    claim, before or after the winner's store. Each claim kernel waits for the previous grid
//    (pdl_wait) before touching memory.
// Both give the same bytes (tests/test_cuda_kside.cu forces each at every size it tests). The scan
// is compiled only into the kernels that run it (kside_kernel's SCAN), so the others keep their
// registers.
//
// Everything is enqueued on the caller's stream: no allocation, no host synchronization (CUDA
// graphs capture it). With enable_pdl on an sm_90+ device the kernels are launched with
// programmatic stream serialization: each waits (griddepcontrol.wait) before its first global
// load, the slots included, and the store kernel lets dependents launch after its input loads
// (before the scan's later rounds). Every load is a plain ld.global (no ld.global.nc: see the loads
// below); tests/check_kside_sass_order.py (CTest kside_sass_order) checks in the SASS that no
// memory instruction of any key-side kernel comes before the wait and none is a read-only load.
//
// Misaligned pointers (input rows / weight not aligned to a chunk load, freqs not 16-byte
// aligned, kvcache not 4-byte aligned) take a one-thread-per-token kernel running kside_row<KR>
// of src/common/kside_row.h: same bytes, slower.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "common/kside_problem.h"
#include "common/kside_row.h"
#include "common/row.h"
#include "cuda/fp4_e2m1.cuh"
#include "cuda/fp8_e4m3.cuh"
#include "cuda/kside_cuda.h"
#include "cuda/launch.cuh"

namespace indexer_q {
namespace detail {
namespace {

// kBF16 / kF16 / kF32, pdl_wait, pdl_launch_dependents: src/cuda/launch.cuh.

// ---- loads, in program order (asm volatile keeps them in the order written: the index and
// input loads are all in flight before the position-dependent freqs loads are issued) ----
// None of them is ld.global.nc: with PDL every input may be written by the previous kernel while
// this one already runs (until griddepcontrol.wait), so no input is read-only for the kernel's
// whole lifetime, and ptxas may move .nc loads above griddepcontrol.wait (seen on the query
// side, src/cuda/cuda_backend.cu). Plain loads stay behind the wait (tests/check_kside_sass_order.py
// checks the SASS). (Read-only loads placed after the wait by a data dependence were timed on the
// H200 and gained nothing: bench/HISTORY.md.)
__device__ __forceinline__ std::int64_t ld_s64(const std::int64_t* p) {
  long long v;
  asm volatile("ld.global.s64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}
template <bool POS64>
__device__ __forceinline__ std::int64_t ld_pos(const void* pos, std::uint64_t t) {
  if (POS64) return ld_s64(static_cast<const std::int64_t*>(pos) + t);
  int v;
  asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(static_cast<const int*>(pos) + t));
  return std::int64_t(v);
}
// One chunk (4 values) of a row: 4 words (fp32) or 2 words (bf16 / fp16). STREAM: read once,
// no L1 allocation (the inputs); otherwise cached (the weight, shared by every token).
template <int DT, bool STREAM>
__device__ __forceinline__ void ld_chunk(const void* p, std::uint32_t* w) {
  if (DT == kF32) {
    if (STREAM)
      asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    else
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
  } else {
    if (STREAM)
      asm volatile("ld.global.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    else
      asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
  }
}
__device__ __forceinline__ float4 ld_f4(const float* p) {
  float4 r;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
               : "l"(p));
  return r;
}
// The 4 values of a loaded chunk (exact conversions).
template <int DT>
__device__ __forceinline__ void decode_chunk(const std::uint32_t* w, float* v) {
  if (DT == kF32) {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __uint_as_float(w[k]);
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (DT == kBF16) {
        v[2 * j] = __uint_as_float(w[j] << 16);
        v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      } else {
        __half2 h;
        *reinterpret_cast<std::uint32_t*>(&h) = w[j];
        const float2 f = __half22float2(h);
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
      }
    }
  }
}

template <int DT>
struct Elem {
  static constexpr int kBytes = DT == kF32 ? 4 : 2;
};

// ---- duplicate slots (see the top of the file) ----
// How a call finds the last token of each slot: the host's choice (kside_dup_mode), a kernel
// argument. kDupScan: in the store kernel; kDupClaim: the claim words set by kside_claim_kernel.
enum : int { kDupNone = 0, kDupScan = 1, kDupClaim = 2 };
// kDupScan: later slots a lane requests at once (one round); LANES * kScanRound later tokens
// per round and token.
constexpr int kScanRound = 8;
// kDupScan: is later token u, whose slot equals that of a stored token (so is in bounds), stored
// itself? Its position decides (kside_token_stored).
template <bool POS64>
__device__ __forceinline__ bool later_token_stored(const KProblem& p, std::uint64_t u) {
  const std::int64_t q = ld_pos<POS64>(p.positions, u);
  return q >= 0 && q < p.max_pos;
}
// The claim words.
template <class KR>
__device__ __forceinline__ unsigned long long claim_mark() {
  return (KR::kFp4 ? 0x88ull : 0xffull) << 56;  // byte 7: a byte no code of the recipe takes
}
// The claim word of a slot's row: the first 8-byte-aligned word of its code bytes (64 or 128
// of them, so the word lies inside them whatever the cache's alignment).
template <class KR>
__device__ __forceinline__ unsigned long long* kside_claim_word(const KProblem& p, std::int64_t slot) {
  std::uint8_t* codes = p.cache + (slot >> p.log2_page) * p.page_bytes + KR::kCodeBytes * (slot & (p.page_size - 1));
  return reinterpret_cast<unsigned long long*>((reinterpret_cast<std::uintptr_t>(codes) + 7) & ~std::uintptr_t(7));
}
__device__ __forceinline__ unsigned long long ld_claim(const unsigned long long* w) {
  unsigned long long v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(w) : "memory");
  return v;
}
// Is token t stored (slot and position in bounds)? The store kernels' own condition.
__device__ __forceinline__ bool kside_token_stored(const KProblem& p, std::int64_t slot, std::int64_t pos) {
  return slot >= 0 && slot < p.num_pages * p.page_size && pos >= 0 && pos < p.max_pos;
}
// One thread per token: SET: write kClaimMark into the claim word of every stored token's row;
// else atomicMax it with kClaimMark | (t + 1).
template <class KR, bool SET>
__global__ void __launch_bounds__(256) kside_claim_kernel(const KProblem p) {
  const std::uint64_t t = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  pdl_wait();
  if (t < std::uint64_t(p.N)) {
    const std::int64_t slot = p.slots[t];
    const std::int64_t pos = kside_position(p.positions, p.pos_dtype, std::int64_t(t));
    if (kside_token_stored(p, slot, pos)) {
      unsigned long long* w = kside_claim_word<KR>(p, slot);
      if (SET) *w = claim_mark<KR>();
      else atomicMax(w, claim_mark<KR>() | (t + 1));
    }
  }
  pdl_launch_dependents();
}

// Does chunk c of lane l hold rotated dims (groups 16..31)? Compile-time for LANES <= 16.
template <int LANES>
__device__ __forceinline__ bool chunk_rotated(int c, int l) {
  if (LANES <= 16) return c * LANES >= 16;
  return l >= 16;
}

// One token per LANES-thread group. SCAN: the duplicate scan (`dup` is kDupScan) is compiled in;
// without it `dup` is kDupNone or kDupClaim. (The scan's code and registers only in the kernels
// that run it: at 8 lanes, fp32, 54-56 registers in the kernels without it, against 80 when every
// store kernel carried it, which cost 8.03 us against 6.97 at 16384 tokens on the H200;
// bench/HISTORY.md.)
template <class KR, int LANES, int DT, bool POS64, bool SCAN>
__global__ void __launch_bounds__(256) kside_kernel(const KProblem p, const int dup) {
  static_assert(LANES == 4 || LANES == 8 || LANES == 16 || LANES == 32, "4, 8, 16 or 32 lanes per token");
  constexpr int C = 32 / LANES;                // chunks of 4 dims per lane
  constexpr int WW = DT == kF32 ? 4 : 2;       // 32-bit words per chunk
  constexpr int CB = 4 * Elem<DT>::kBytes;     // bytes per chunk
  const std::uint64_t N = std::uint64_t(p.N);
  const std::uint64_t gt = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int l = int(threadIdx.x % LANES);
  const std::uint64_t tok = gt / LANES;
  pdl_wait();
  // The warp's first token is past the end: nothing to do.
  if ((gt & ~std::uint64_t(31)) / LANES >= N) {
    pdl_launch_dependents();
    return;
  }
  const bool in_range = tok < N;
  const std::uint64_t t = in_range ? tok : N - 1;
  const bool claim = !SCAN && dup == kDupClaim;

  // ---- loads: indices, input row, weight, then the position's freqs ----
  const std::int64_t slot = ld_s64(p.slots + t);
  const std::int64_t pos = ld_pos<POS64>(p.positions, t);
  const bool pos_ok = pos >= 0 && pos < p.max_pos;
  const char* xrow = static_cast<const char*>(p.input) + t * std::uint64_t(p.input_stride) * Elem<DT>::kBytes;
  const char* wrow = static_cast<const char*>(p.weight);
  std::uint32_t xw[C][WW], ww[C][WW];
#pragma unroll
  for (int c = 0; c < C; ++c) ld_chunk<DT, true>(xrow + (l + LANES * c) * CB, xw[c]);
#pragma unroll
  for (int c = 0; c < C; ++c) ld_chunk<DT, false>(wrow + (l + LANES * c) * CB, ww[c]);
  const float* frow = p.freqs + (pos_ok ? pos : 0) * kFreqsDim;  // row 0 always exists
  float4 f[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    if (chunk_rotated<LANES>(c, l)) f[c] = ld_f4(frow + 4 * (l + LANES * c) - kRopeDim);
  // Duplicate slots, kDupScan: this lane compares the slots of the later tokens t + 1 + l +
  // LANES k (k = 0, 1, ..); the first round of them is requested here, with the freqs
  // loads. An index past the last token reads slot N - 1 and is never compared; a k that no
  // token of the call needs (1 + LANES k >= N, the same for every thread) is not loaded.
  // 32-bit indices: kDupScan is for N < 2^31 (kside_cuda_run_variant).
  const unsigned n32 = unsigned(N), u0 = unsigned(t) + 1u + unsigned(l);
  std::int64_t later[kScanRound];
  if (SCAN) {
#pragma unroll
    for (int k = 0; k < kScanRound; ++k)
      if (1u + unsigned(LANES * k) < n32) later[k] = ld_s64(p.slots + min(u0 + unsigned(LANES * k), n32 - 1u));
  }
  const bool stored = in_range && pos_ok && slot >= 0 && slot < p.num_pages * p.page_size;
  // Duplicate slots: does a later stored token have this token's slot (then this one writes
  // nothing)? lost is this lane's share of the answer; the token's lanes vote below.
  // kDupClaim: lane 0 of a stored token reads its row's claim word (before any store of this
  // token; see the top of the file).
  bool lost = claim && stored && l == 0 &&
              ld_claim(kside_claim_word<KR>(p, slot)) != (claim_mark<KR>() | (t + 1));
  pdl_launch_dependents();  // every input of this thread has been requested (but later rounds of the scan)
  if (SCAN && stored) {
#pragma unroll
    for (int k = 0; k < kScanRound; ++k) {
      const unsigned u = u0 + unsigned(LANES * k);
      if (u < n32 && later[k] == slot && later_token_stored<POS64>(p, u)) lost = true;
    }
    // Further rounds (N > 1 + LANES * kScanRound): kScanRound loads in flight at a time.
    for (unsigned u1 = u0 + unsigned(LANES * kScanRound); u1 < n32; u1 += unsigned(LANES * kScanRound)) {
#pragma unroll
      for (int k = 0; k < kScanRound; ++k) later[k] = ld_s64(p.slots + min(u1 + unsigned(LANES * k), n32 - 1u));
#pragma unroll
      for (int k = 0; k < kScanRound; ++k) {
        const unsigned u = u1 + unsigned(LANES * k);
        if (u < n32 && later[k] == slot && later_token_stored<POS64>(p, u)) lost = true;
      }
    }
  }

  float x[C][4], w[C][4];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    decode_chunk<DT>(xw[c], x[c]);
    decode_chunk<DT>(ww[c], w[c]);
  }

  // ---- steps 2-5: sum of squares per group, the xor butterfly, t, nf ----
  float s[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    s[c] = __fmaf_rn(x[c][3], x[c][3], __fmaf_rn(x[c][2], x[c][2], __fmaf_rn(x[c][1], x[c][1], __fmul_rn(x[c][0], x[c][0]))));
#pragma unroll
  for (int m = C / 2; m >= 1; m >>= 1)  // masks 16 .. LANES: bits of c
#pragma unroll
    for (int c = 0; c < m; ++c) s[c] = __fadd_rn(s[c], s[c + m]);
  float ss = s[0];
#pragma unroll
  for (int m = LANES / 2; m >= 1; m >>= 1)  // masks LANES / 2 .. 1: bits of l
    ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, m));
  const float nf = RsqHw{}(__fmaf_rn(ss, kKsideSsScale, p.eps));

  // ---- step 6: d = (x * nf) * w; step 7: RoPE on dims 64..127 ----
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int k = 0; k < 4; ++k) x[c][k] = __fmul_rn(__fmul_rn(x[c][k], nf), w[c][k]);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (chunk_rotated<LANES>(c, l)) {
      const float cs[2] = {f[c].x, f[c].z}, sn[2] = {f[c].y, f[c].w};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float xr = x[c][2 * j], xi = x[c][2 * j + 1];
        x[c][2 * j] = __fmaf_rn(xr, cs[j], -__fmul_rn(xi, sn[j]));
        x[c][2 * j + 1] = __fmaf_rn(xr, sn[j], __fmul_rn(xi, cs[j]));
      }
    }
  }

  // ---- step 8: Hadamard, strides ascending, then * 1/sqrt(128) ----
#pragma unroll
  for (int st = 1; st < 4; st <<= 1)
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if ((k & st) == 0) {
          const float u = x[c][k], v = x[c][k + st];
          x[c][k] = __fadd_rn(u, v);
          x[c][k + st] = __fsub_rn(u, v);
        }
#pragma unroll
  for (int st = 1; st < LANES; st <<= 1) {
    const float sgn = (l & st) ? -1.0f : 1.0f;
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int k = 0; k < 4; ++k) x[c][k] = __fmaf_rn(x[c][k], sgn, __shfl_xor_sync(0xffffffffu, x[c][k], st));
  }
#pragma unroll
  for (int st = 1; st < C; st <<= 1)
#pragma unroll
    for (int c = 0; c < C; ++c)
      if ((c & st) == 0)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float u = x[c][k], v = x[c + st][k];
          x[c][k] = __fadd_rn(u, v);
          x[c + st][k] = __fsub_rn(u, v);
        }
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int k = 0; k < 4; ++k) x[c][k] = __fmul_rn(x[c][k], kHadamardScale);

  // Stored only by the last stored token of its slot: no lane of the token found a later one
  // (kDupScan) or lost the claim (kDupClaim, lane 0). (The ballot is outside the && on purpose:
  // every lane of the warp must execute it, also those of tokens that store nothing; a lane
  // skipping a full-mask warp vote hangs the warp.)
  const unsigned lost_votes = __ballot_sync(0xffffffffu, lost);
  const unsigned token_lanes = (LANES == 32 ? 0xffffffffu : (1u << (LANES & 31)) - 1u) << (threadIdx.x % 32 - l);
  const bool valid = stored && (lost_votes & token_lanes) == 0;
  // Where the token lands (section 3); used only when valid.
  const std::int64_t sl = valid ? slot : 0;
  std::uint8_t* page = p.cache + (sl >> p.log2_page) * p.page_bytes;
  const std::int64_t r = sl & (p.page_size - 1);

  if (KR::kFp4) {
    // ---- FP4: block amax, UE8M0, e2m1 codes ----
    float amax[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      amax[c] = fabsf(x[c][0]);  // fmaxf ignores NaN: a NaN amax only if all 4 are NaN, and
#pragma unroll                   // fmaxf(1e-4, NaN) = 1e-4 as for 0 below
      for (int k = 1; k < 4; ++k) amax[c] = fmaxf(amax[c], fabsf(x[c][k]));
    }
    if (LANES == 4) {  // block b = chunks 2b, 2b + 1
#pragma unroll
      for (int c = 0; c < C; c += 2) amax[c] = amax[c + 1] = fmaxf(amax[c], amax[c + 1]);
    }
#pragma unroll
    for (int m = 1; m < (LANES < 8 ? LANES : 8); m <<= 1)
#pragma unroll
      for (int c = 0; c < C; ++c) amax[c] = fmaxf(amax[c], __shfl_xor_sync(0xffffffffu, amax[c], m));
    std::uint32_t e[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      e[c] = ue8m0_of_amax_fast(amax[c]);
      const float inv = __uint_as_float((254u - e[c]) << 23);  // 2^(127 - e); e = 255: -Inf
      std::uint32_t codes = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) codes |= e2m1_code(__fmul_rn(x[c][k], inv)) << (4 * k);
      if (valid) *reinterpret_cast<std::uint16_t*>(page + 64 * r + 2 * (l + LANES * c)) = std::uint16_t(codes);
    }
    // Block b's exponent: chunk 8b / LANES of lane 8b % LANES of the token.
    std::uint32_t sf = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int cb = (8 * b) / LANES;
      std::uint32_t eb = e[cb];
      if (LANES > 8) eb = __shfl_sync(0xffffffffu, eb, int(threadIdx.x % 32) - l + (8 * b) % LANES);
      sf |= eb << (8 * b);
    }
    if (valid && l == 0) *reinterpret_cast<std::uint32_t*>(page + 64 * p.page_size + 4 * r) = sf;
    return;
  }

  // ---- FP8: row amax, scale, codes ----
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int k = 0; k < 4; ++k) amax = fmaxf(amax, fabsf(x[c][k]));
#pragma unroll
  for (int m = LANES / 2; m >= 1; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float scale = __fdiv_rn(fmaxf(kScaleFloor, amax), kFp8Max);
  const float inv = __fdiv_rn(1.0f, scale);
  if (!valid) return;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const std::uint32_t q = quantize4_e4m3(__fmul_rn(x[c][0], inv), __fmul_rn(x[c][1], inv),
                                           __fmul_rn(x[c][2], inv), __fmul_rn(x[c][3], inv));
    *reinterpret_cast<std::uint32_t*>(page + 128 * r + 4 * (l + LANES * c)) = q;
  }
  if (l == 0) *reinterpret_cast<float*>(page + 128 * p.page_size + 4 * r) = scale;
}

// Fallback for misaligned pointers: one thread per token, kside_row<KR> of kside_row.h.
template <class KR>
__global__ void __launch_bounds__(128) kside_scalar_kernel(const KProblem p, const int dup) {
  const std::uint64_t t = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  pdl_wait();
  if (t >= std::uint64_t(p.N)) {
    pdl_launch_dependents();
    return;
  }
  const std::int64_t slot = p.slots[t];
  const std::int64_t pos = kside_position(p.positions, p.pos_dtype, std::int64_t(t));
  // Stored, and the last stored token of its slot (see the top of the file).
  bool valid = kside_token_stored(p, slot, pos);
  if (valid && dup == kDupClaim) valid = ld_claim(kside_claim_word<KR>(p, slot)) == (claim_mark<KR>() | (t + 1));
  if (valid && dup == kDupScan)
    for (std::int64_t u = std::int64_t(t) + 1; u < p.N; ++u)
      if (p.slots[u] == slot) {
        const std::int64_t q = kside_position(p.positions, p.pos_dtype, u);
        if (q >= 0 && q < p.max_pos) {
          valid = false;
          break;
        }
      }
  if (!valid) {
    pdl_launch_dependents();
    return;
  }
  float x[kHeadDim], w[kHeadDim], f[kFreqsDim];
  for (int i = 0; i < kHeadDim; ++i) {
    x[i] = kside_load(p.input, p.dtype, std::int64_t(t) * p.input_stride + i);
    w[i] = kside_load(p.weight, p.dtype, i);
  }
  for (int i = 0; i < kFreqsDim; ++i) f[i] = p.freqs[pos * kFreqsDim + i];
  pdl_launch_dependents();
  std::uint8_t codes[KR::kCodeBytes], sb[4];
  kside_row<KR>(x, w, p.eps, f, codes, sb, RsqHw{});
  std::uint8_t *oc, *os;
  kside_token_ptrs<KR>(p.cache, p.page_bytes, p.page_size, p.log2_page, slot, &oc, &os);
  for (int i = 0; i < KR::kCodeBytes; ++i) oc[i] = codes[i];
  for (int i = 0; i < 4; ++i) os[i] = sb[i];
}

// ---- per-device facts and the pointer check: src/cuda/device_facts.cuh (kMaxDevices, pdl_supported, check_ptr);
// launch (with the PDL attribute), check_device, run_on_device (device guard), cuda_err, aligned: src/cuda/launch.cuh ----

constexpr char kBackendName[] = "cuda backend (key side)";  // in error messages

// The store kernel of one shape for `dup`: the one with the scan compiled in for kDupScan, the one
// without it otherwise.
template <class KR, int LANES, int DT, bool POS64>
cudaError_t launch_lanes(const KProblem& p, int dup, unsigned block, cudaStream_t s, bool pdl) {
  const std::uint64_t grid = (std::uint64_t(p.N) * LANES + block - 1) / block;
  return dup == kDupScan ? launch(kside_kernel<KR, LANES, DT, POS64, true>, grid, block, s, pdl, p, dup)
                         : launch(kside_kernel<KR, LANES, DT, POS64, false>, grid, block, s, pdl, p, dup);
}

template <class KR, int DT, bool POS64>
cudaError_t launch_shape(const KProblem& p, KVariant v, int dup, cudaStream_t s, bool pdl) {
  const std::uint64_t n = std::uint64_t(p.N);
  const unsigned block = unsigned(v.block);
  switch (v.lanes) {
    case 0: return launch(kside_scalar_kernel<KR>, (n + 127) / 128, 128, s, pdl, p, dup);
    case 4: return launch_lanes<KR, 4, DT, POS64>(p, dup, block, s, pdl);
    case 8: return launch_lanes<KR, 8, DT, POS64>(p, dup, block, s, pdl);
    case 16: return launch_lanes<KR, 16, DT, POS64>(p, dup, block, s, pdl);
    case 32: return launch_lanes<KR, 32, DT, POS64>(p, dup, block, s, pdl);
    default: return cudaErrorInvalidValue;
  }
}

// Duplicate slots: kDupNone at 1 token (no duplicate possible), kDupScan up to
// kKsideScanMaxTokens tokens, kDupClaim above; or what the variant forces. -1: not a KDup.
int kside_dup_mode(std::int64_t N, KDup d) {
  switch (d) {
    case KDup::kAuto: return N <= 1 ? kDupNone : N <= kKsideScanMaxTokens ? kDupScan : kDupClaim;
    case KDup::kScan: return kDupScan;
    case KDup::kClaim: return kDupClaim;
  }
  return -1;
}

template <class KR>
cudaError_t launch_dtypes(const KProblem& p, KVariant v, int dup, cudaStream_t s, bool pdl) {
  const bool pos64 = p.pos_dtype == DType::kInt64;
  switch (p.dtype) {
    case DType::kBFloat16:
      return pos64 ? launch_shape<KR, kBF16, true>(p, v, dup, s, pdl)
                   : launch_shape<KR, kBF16, false>(p, v, dup, s, pdl);
    case DType::kFloat16:
      return pos64 ? launch_shape<KR, kF16, true>(p, v, dup, s, pdl)
                   : launch_shape<KR, kF16, false>(p, v, dup, s, pdl);
    case DType::kFloat32:
      return pos64 ? launch_shape<KR, kF32, true>(p, v, dup, s, pdl)
                   : launch_shape<KR, kF32, false>(p, v, dup, s, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

KVariant kside_choose_variant(std::int64_t N) {
  // Measured on an H200 (`indexer_q_cuda_bench --op kside --shapes`, fp32 input, PDL off and on; logs in
  // bench/cuda_results/2026-11-30-h200-kside): up to ~1024 tokens the call is latency-bound and 16
  // lanes per token was fastest or within noise of it (1024 tokens, v4_k_fp4: 2.00-2.04 us vs 2.22
  // for 8 lanes); from 4096 tokens 8 lanes in blocks of 64 was fastest or within 1% (65536 tokens:
  // 12.7 us v4_k_fp8, 16.1 us v4_k_fp4; 4 and 32 lanes slower).
  KVariant v;
  v.lanes = N <= 2048 ? 16 : 8;
  v.block = N <= 2048 ? 128 : 64;
  return v;
}

Status kside_cuda_run_variant(const KProblem& p, void* stream, bool enable_pdl, KVariant v) {
  if (p.N <= 0) return Status::Ok();
  const int dev = p.device.index;
  const NamedPtr ptrs[] = {{"input", p.input},         {"weight", p.weight}, {"freqs", p.freqs},
                           {"positions", p.positions}, {"slots", p.slots},   {"kvcache", p.cache}};
  Status st = check_device(kBackendName, dev, ptrs);
  if (!st.ok()) return st;
  if (p.N > (std::int64_t(1) << 36))
    return Status::InvalidArgument("indexer_q: input: too many tokens for the CUDA backend");

  // Launch on the tensors' device (pdl_supported reads the current device's facts).
  return run_on_device(kBackendName, dev, [&] {
    const std::uintptr_t chunk = p.dtype == DType::kFloat32 ? 16 : 8;  // bytes of one 4-value load
    const std::int64_t es = p.dtype == DType::kFloat32 ? 4 : 2;
    const bool fast_ok = aligned(p.input, chunk) && (p.input_stride * es) % std::int64_t(chunk) == 0 &&
                         aligned(p.weight, chunk) && aligned(p.freqs, 16) && aligned(p.cache, 4);
    if (v.lanes < 0) {  // the automatic shape; the duplicate method stays as asked
      const KVariant a = kside_choose_variant(p.N);
      v.lanes = a.lanes;
      v.block = a.block;
    }
    if (!fast_ok) v.lanes = 0;
    if (v.block <= 0) v.block = 128;
    const bool pdl = enable_pdl && pdl_supported(dev);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int dup = kside_dup_mode(p.N, v.dup);
    if (dup < 0 || (dup == kDupScan && p.N >= (std::int64_t(1) << 31))) return cudaErrorInvalidValue;
    return with_krecipe(p.recipe, [&](auto kr) {
      using KR = decltype(kr);
      cudaError_t e = cudaSuccess;
      if (dup == kDupClaim) {  // the claim words first (see the top of the file)
        const std::uint64_t grid = (std::uint64_t(p.N) + 255) / 256;
        e = launch(kside_claim_kernel<KR, true>, grid, 256, s, pdl, p);
        if (e == cudaSuccess) e = launch(kside_claim_kernel<KR, false>, grid, 256, s, pdl, p);
      }
      return e == cudaSuccess ? launch_dtypes<KR>(p, v, dup, s, pdl) : e;
    });
  });
}

Status kside_cuda_run(const KProblem& p, void* stream, bool enable_pdl) {
  return kside_cuda_run_variant(p, stream, enable_pdl, KVariant{});
}

}  // namespace detail
}  // namespace indexer_q
