// Host code only: the floating-point environment SPEC.md's arithmetic assumes.
//
// The op is defined in IEEE float32 with round-to-nearest-even, gradual underflow and no traps.
// A caller may have changed its thread's SSE control register (MXCSR), e.g. with
// torch.set_flush_denormal(True) (flush-to-zero + denormals-are-zero), which would change bytes
// (fp8 subnormal codes, denormal inputs). IeeeFloatScope puts the IEEE defaults in place for one
// scope and gives the caller its own setting back afterwards; when the caller already runs with
// the defaults (the usual case) it costs one register read.
#pragma once

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <xmmintrin.h>

namespace indexer_q {
namespace detail {

class IeeeFloatScope {
 public:
  // MXCSR: bit 15 flush-to-zero, bits 13-14 rounding control, bits 7-12 exception masks,
  // bit 6 denormals-are-zero. The defaults: all exceptions masked, the rest zero.
  static constexpr unsigned kControlBits = 0xffc0u;
  static constexpr unsigned kDefaults = 0x1f80u;

  IeeeFloatScope() : saved_(_mm_getcsr()) {
    changed_ = (saved_ & kControlBits) != kDefaults;
    if (changed_) _mm_setcsr((saved_ & ~kControlBits) | kDefaults);
  }
  ~IeeeFloatScope() {
    if (changed_) _mm_setcsr((_mm_getcsr() & ~kControlBits) | (saved_ & kControlBits));
  }
  IeeeFloatScope(const IeeeFloatScope&) = delete;
  IeeeFloatScope& operator=(const IeeeFloatScope&) = delete;

 private:
  unsigned saved_;
  bool changed_ = false;
};

}  // namespace detail
}  // namespace indexer_q

#else

namespace indexer_q {
namespace detail {
// Other architectures: nothing to do here yet (their default environment is IEEE; a caller that
// enabled flush-to-zero on Arm would still change bytes, see docs/API.md).
class IeeeFloatScope {
 public:
  IeeeFloatScope() = default;
};
}  // namespace detail
}  // namespace indexer_q

#endif
