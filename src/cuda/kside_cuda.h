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
  kAuto = -1,  // nothing at 1 token, kScan up to kKsideScanMaxTokens tokens, kBlock up to
               // kKsideBlockScanMaxTokens, kClaim above
  kScan = 0,   // in the store kernel: each stored token compares the later tokens' slots (one launch)
  kClaim = 1,  // two claim kernels before the store kernel set a claim word in each destination row
  kBlock = 2,  // in the store kernel: the threads of a block share out the later slots of all the
               // block's tokens (one launch; the default form only; src/cuda/kside.cu kBlockFilterWords)
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
// us from 256 to 1024). KDup::kBlock (forced only) needs B / LANES times fewer rounds; the CUDA
// key-side benchmark's --dup scan,claim,block times all three.
constexpr std::int64_t kKsideScanMaxTokens = 256;
// Above kKsideScanMaxTokens and up to this many tokens the automatic method is KDup::kBlock; 0
// (until the H200 times it against the claim kernels): never. (The block's scan is built in the
// default form only: where it is automatic, another KForm needs an explicit dup.)
constexpr std::int64_t kKsideBlockScanMaxTokens = 0;

// The store kernel's form (src/cuda/kside.cu, kside_kernel's SCANM and NC), kept selectable so one
// build times them against each other (the CUDA key-side benchmark's --form):
enum class KForm : int {
  kAuto = -1,    // kKsideDefaultForm
  kLegacy = 0,   // one kernel per shape, the duplicate method a run-time argument: the scan's code
                 // and registers in every call's kernel (the form of the 2026-12-02 session-5 run;
                 // its store kernel ignores KTrigger, its claim kernels do not)
  kSplit = 1,    // the scan compiled only into the kernel that runs it (fewer registers above
                 // kKsideScanMaxTokens); every load a plain ld.global
  kSplitNc = 2,  // kSplit, with the input row, weight and freqs loads ld.global.nc at addresses
                 // computed from the position's value (a plain load after griddepcontrol.wait)
};
// The form kside_cuda_run uses, built for every shape; the other forms are built for 8 and 16 lanes
// only (the automatic shapes): another shape in another form is an invalid launch.
constexpr KForm kKsideDefaultForm = KForm::kSplit;

// Where each key-side kernel lets the next kernel of the stream launch (griddepcontrol.
// launch_dependents, with PDL): after its loads (the form of the session-5 run), or at its first
// instruction, before its griddepcontrol.wait (what the query side does for small grids: the next
// launch's latency then overlaps this kernel's whole run). Either way the next kernel's wait holds
// its memory accesses until this grid has finished.
enum class KTrigger : int {
  kAuto = -1,       // kKsideDefaultTrigger
  kAfterLoads = 0,  // after the kernel's loads
  kFirst = 1,       // at the first instruction
};
constexpr KTrigger kKsideDefaultTrigger = KTrigger::kAfterLoads;  // until the H200 times kFirst

// The launch shape of the key-side kernel: LANES consecutive threads of a warp store one token.
struct KVariant {
  int lanes = -1;  // 4 | 8 | 16 | 32 threads per token; 0 = one thread per token (scalar kside_row); -1 = automatic
  int block = 0;   // threads per block (multiple of 32, <= 256); 0 = the automatic choice's
  KDup dup = KDup::kAuto;  // tests and the bench force either method at any size (same bytes)
  KForm form = KForm::kAuto;  // tests and the bench force a form (same bytes)
  KTrigger trigger = KTrigger::kAuto;  // tests and the bench force a trigger (same bytes)
};

// The shape kside_cuda_run uses for N tokens (the same for both recipes).
KVariant kside_choose_variant(std::int64_t N);

// kside_cuda_run with a fixed shape. Misaligned pointers take the scalar kernel whatever v says.
Status kside_cuda_run_variant(const KProblem& p, void* stream, bool enable_pdl, KVariant v);

}  // namespace detail
}  // namespace indexer_q
