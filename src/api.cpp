// The public API, part 3: dispatch of a validated call to a backend.
#include <string>

#include "common/kside_problem.h"
#include "common/kside_validate.h"
#include "common/problem.h"
#include "common/validate.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {

namespace {

// The backends of each kind of call, by the validated problem's type: the query side's Problem
// and the key side's KProblem (SPEC-kside.md).
Status run_reference(const detail::Problem& p) { return detail::reference_run(p); }
Status run_reference(const detail::KProblem& p) { return detail::kside_reference_run(p); }
Status run_cpu(const detail::Problem& p, CpuIsa isa, int threads) {
  return detail::cpu_run(p, isa, threads);
}
Status run_cpu(const detail::KProblem& p, CpuIsa isa, int threads) {
  return detail::kside_cpu_run(p, isa, threads);
}
#if defined(INDEXER_Q_WITH_CUDA)
Status run_cuda(const detail::Problem& p, const Options& o) {
  return detail::cuda_run(p, o.stream, o.enable_pdl);
}
Status run_cuda(const detail::KProblem& p, const Options& o) {
  return detail::kside_cuda_run(p, o.stream, o.enable_pdl);
}
#endif

// Runs a validated, non-empty problem on the backend options.backend names (kAuto: the CPU
// backend for host memory, else CUDA).
template <class P>
Status dispatch(const P& p, const Options& options) {
  Backend backend = options.backend;
  if (backend == Backend::kAuto)
    backend = p.device.type == DeviceType::kCPU ? Backend::kCpu : Backend::kCuda;
  switch (backend) {
    case Backend::kReference: return run_reference(p);
    case Backend::kCpu: {
      CpuIsa isa = options.cpu_isa;
      if (isa == CpuIsa::kAuto) {
        const Status s = active_cpu_isa(&isa);
        if (!s.ok()) return s;
      } else if (!cpu_isa_supported(isa)) {
        return Status::Unavailable(std::string("indexer_q: options.cpu_isa: '") + cpu_isa_name(isa) +
                                   "' is not supported by this build or processor");
      }
      const int threads = options.num_threads > 0 ? options.num_threads : cpu_num_threads();
      return run_cpu(p, isa, threads);
    }
    case Backend::kCuda:
#if defined(INDEXER_Q_WITH_CUDA)
      if (!detail::cuda_available())
        return Status::Unavailable("indexer_q: options.backend: 'cuda' is compiled in but no CUDA device is usable");
      return run_cuda(p, options);
#else
      return Status::Unavailable("indexer_q: options.backend: 'cuda' is not compiled into this build (INDEXER_Q_CUDA=OFF)");
#endif
    case Backend::kAuto: break;
  }
  return Status::Internal("indexer_q: unreachable backend");
}

}  // namespace

Status run(const OpArgs& args, const Options& options) {
  detail::Problem p;
  Status s = detail::validate_op(args, options, &p);
  if (!s.ok()) return s;
  if (p.B == 0) return Status::Ok();
  return dispatch(p, options);
}

// The key side: the same dispatch for a validated KStoreArgs (SPEC-kside.md).
Status run(const KStoreArgs& args, const Options& options) {
  detail::KProblem p;
  Status s = detail::validate_kstore(args, options, &p);
  if (!s.ok()) return s;
  if (p.N == 0) return Status::Ok();
  return dispatch(p, options);
}

Status fused_q_indexer_rope_hadamard_quant(const TensorView& q_input, const TensorView& q_fp8,
                                           const TensorView& weight,
                                           const TensorView& weights_out, float weight_scale,
                                           const TensorView& freqs, const TensorView& positions,
                                           const Options& options) {
  return run(detail::v4_fp8_args(q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions),
             options);
}

}  // namespace indexer_q
