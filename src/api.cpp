// The public API, part 3: dispatch of a validated call to a backend.
#include <string>

#include "common/kside_problem.h"
#include "common/kside_validate.h"
#include "common/problem.h"
#include "common/validate.h"
#include "common/validate_text.h"
#include "indexer_q/indexer_q.h"

namespace indexer_q {

namespace {

// Each backend's entry points, one per kind of call (the validated problem's type: the query
// side's Problem, the key side's KProblem), named run_<Enumerator of backends.inc>. The dispatch
// below is generated from that list.
Status run_kReference(const detail::Problem& p, const Options&) { return detail::reference_run(p); }
Status run_kReference(const detail::KProblem& p, const Options&) { return detail::kside_reference_run(p); }

// The CPU backend's ISA (options.cpu_isa, or the active one) and thread count.
Status cpu_setup(const Options& options, CpuIsa* isa, int* threads) {
  *isa = options.cpu_isa;
  if (*isa == CpuIsa::kAuto) {
    const Status s = active_cpu_isa(isa);
    if (!s.ok()) return s;
  } else if (!cpu_isa_supported(*isa)) {
    return Status::Unavailable(std::string("indexer_q: options.cpu_isa: '") + cpu_isa_name(*isa) +
                               "' is not supported by this build or processor");
  }
  *threads = options.num_threads > 0 ? options.num_threads : cpu_num_threads();
  return Status::Ok();
}
template <class P, class F>
Status run_on_cpu(const P& p, const Options& options, F f) {
  CpuIsa isa = CpuIsa::kScalar;
  int threads = 1;
  const Status s = cpu_setup(options, &isa, &threads);
  return s.ok() ? f(p, isa, threads) : s;
}
Status run_kCpu(const detail::Problem& p, const Options& o) { return run_on_cpu(p, o, detail::cpu_run); }
Status run_kCpu(const detail::KProblem& p, const Options& o) { return run_on_cpu(p, o, detail::kside_cpu_run); }

#if defined(INDEXER_Q_WITH_CUDA)
Status cuda_unusable() {
  return detail::cuda_available()
             ? Status::Ok()
             : Status::Unavailable("indexer_q: options.backend: 'cuda' is compiled in but no CUDA device is usable");
}
Status run_kCuda(const detail::Problem& p, const Options& o) {
  const Status s = cuda_unusable();
  return s.ok() ? detail::cuda_run(p, o.stream, o.enable_pdl, o.side_inputs_ready) : s;
}
Status run_kCuda(const detail::KProblem& p, const Options& o) {
  const Status s = cuda_unusable();
  return s.ok() ? detail::kside_cuda_run(p, o.stream, o.enable_pdl) : s;
}
#else
template <class P>
Status run_kCuda(const P&, const Options&) {
  return Status::Unavailable("indexer_q: options.backend: 'cuda' is not compiled into this build (INDEXER_Q_CUDA=OFF)");
}
#endif

// Runs a validated, non-empty problem on the backend options.backend names (kAuto: the default
// backend of the tensors' device, backends.inc).
template <class P>
Status dispatch(const P& p, const Options& options) {
  const Backend backend =
      options.backend == Backend::kAuto ? detail::default_backend(p.device.type) : options.backend;
  switch (backend) {
#define IQ_BACKEND(Enumerator, name, device, doc) \
  case Backend::Enumerator: return run_##Enumerator(p, options);
#include "indexer_q/backends.inc"
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

// The key side: the same dispatch for a validated KStoreArgs (docs/KSIDE-SPEC.md).
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
