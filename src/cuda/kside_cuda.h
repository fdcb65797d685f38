// Internal entry of the CUDA key-side kernel (src/cuda/kside.cu) with the launch shape exposed,
// for tests/test_cuda_kside.cu (every shape against the reference) and bench/cuda_op_kside.cuh.
// Not public API.
#pragma once

#include <cstdint>

#include "common/kside_problem.h"

namespace indexer_q {
namespace detail {

// Duplicate slots (docs/KSIDE.md): how a call finds the last stored token of each slot.
enum class KDup : int {
  kAuto = -1,  // nothing at 1 token, kScan up to kKsideScanMaxTokens tokens, kClaim above
  kScan = 0,   // in the store kernel: each stored token compares the later tokens' slots (one launch)
  kClaim = 1,  // two claim kernels before the store kernel set a claim word in each destination row
};

// The most tokens for which a call finds the last token of each slot inside the store kernel
// (KDup::kScan); above it the call launches the two claim kernels first. Counted: token t compares
// the N - 1 - t later slots, N (N - 1) / 2 = 32,640 8-byte reads at 256 tokens, all from L1 / L2
// (the slots, 2 KiB); at the automatic 16 lanes per token a lane reads at most 16 of them, in two
// rounds of 8 independent loads, the first issued with the token's freqs loads, so the scan adds
// at most one more round trip to L2. The claim kernels instead add two launches to every call
// (with PDL on an H200: 2.86 us a call at 1 token against 1.65 us for one launch). Measured
// (bench/cuda_results/2026-12-02-h200-session5/kside_dup.txt, PDL on): each round past the first
// adds about 1.2 us (3.17 us at 256 tokens, 5.60 at 512, 10.5 at 1024; the claim kernels 4.2-4.6
// us from 256 to 1024); the CUDA key-side benchmark's --dup scan,claim times both.
constexpr std::int64_t kKsideScanMaxTokens = 256;

// The launch shape of the key-side kernel: LANES consecutive threads of a warp store one token.
struct KVariant {
  int lanes = -1;  // 4 | 8 | 16 | 32 threads per token; 0 = one thread per token (scalar kside_row); -1 = automatic
  int block = 0;   // threads per block (multiple of 32, <= 256); 0 = the automatic choice's
  KDup dup = KDup::kAuto;  // tests and the bench force either method at any size (same bytes)
};

// The shape kside_cuda_run uses for N tokens (the same for both recipes).
KVariant kside_choose_variant(std::int64_t N);

// kside_cuda_run with a fixed shape (lanes = -1: the automatic lanes and block, with v.dup as
// given). Misaligned pointers take the scalar kernel whatever v says.
Status kside_cuda_run_variant(const KProblem& p, void* stream, bool enable_pdl, KVariant v);

}  // namespace detail
}  // namespace indexer_q
