// The CPU backend's one worker pool for the process.
#pragma once

namespace indexer_q {
namespace detail {
namespace cpu {

// Runs fn(ctx, part) for every part in [0, nparts): part 0 on the calling thread, the others on
// persistent workers (created lazily, once, and reused; the pool grows when a call asks for
// more parts than it has workers). Returns false without running anything when the pool cannot
// be used right now: another thread is using it, or the caller is itself one of its workers.
// The caller then runs the work inline; this keeps concurrent and nested calls deadlock-free.
bool pool_try_run(int nparts, void (*fn)(void* ctx, int part), void* ctx);

// Number of worker threads created so far (for tests: it must not grow per call).
int pool_worker_count();

}  // namespace cpu
}  // namespace detail
}  // namespace indexer_q
