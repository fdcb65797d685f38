"""The Triton implementation: the ``indexer_q::quant_q_triton`` operator, and when it serves.

``indexer_q::quant_q_triton`` (same schema as ``indexer_q::quant_q``, defined here) runs the
Triton kernel of triton_kernel.py on any device Triton compiles for: CUDA (NVIDIA, and AMD
through ROCm's "cuda" device), XPU (Intel, with Intel's Triton), and the CPU when Triton's
interpreter is on (TRITON_INTERPRET=1 before the kernel module is imported). It checks its
arguments with the library's one validator (``indexer_q::quant_q_check``) before launching.

Which device gets which implementation is routing.py's table; for a device it routes to
"triton" the kernel registered there is :func:`auto_quant_q`, which runs Triton when

- the environment variable ``INDEXER_Q_TRITON`` is not ``0`` (``0`` forces the composed path),
- triton imports and has a backend for the device (``nvidia`` / ``amd`` for "cuda", ``intel``
  for "xpu"),
- the recipe's steps are all known to the kernel, and
- the known-answer check (triton_selfcheck.py) passed on that device: it runs once, at the
  first call per device; if any byte differs or the kernel fails to build, ONE warning names
  the device and the first differences, and that device gets the composed path from then on
  (silently);

otherwise it calls ``indexer_q::quant_q_composed``. ``path_for(device_type)`` says which of the
two a device type gets now, ``why_not(device_type)`` why not Triton.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Dict, Optional

import torch

from ._ops import _RECIPES, recipe_info, resolve_recipe

_NS = "indexer_q"
_lib = torch.library.Library(_NS, "FRAGMENT")  # kept alive: the registrations live with it


def _schema_of(op_name: str, new_name: str) -> str:
    s = str(torch.ops.indexer_q.quant_q.default._schema)
    # "indexer_q::quant_q(str recipe, ...) -> ()" -> "quant_q_triton(str recipe, ...) -> ()"
    assert s.startswith(f"{_NS}::{op_name}(")
    return new_name + s[len(f"{_NS}::{op_name}"):]


_lib.define(_schema_of("quant_q", "quant_q_triton"))
# Looked up once (a torch.ops attribute lookup costs microseconds a call).
_OP_CHECK = torch.ops.indexer_q.quant_q_check.default
_OP_COMPOSED = torch.ops.indexer_q.quant_q_composed.default

_state_lock = threading.Lock()
_device_ok: Dict[str, bool] = {}  # device string -> known-answer check passed
_device_reason: Dict[str, str] = {}


def _env_disabled() -> bool:
    return os.environ.get("INDEXER_Q_TRITON", "").strip().lower() in ("0", "off", "false", "no")


def _kernel_module():
    from . import triton_kernel  # imports triton

    return triton_kernel


_SERVES: Dict[str, Optional[str]] = {}  # device type (not "cpu") -> triton_serves' answer


def triton_serves(device_type: str) -> Optional[str]:
    """None if Triton can compile for this device type here, else why not (one line). Worked
    out once per device type (the CPU's answer, which depends on whether the kernel module was
    imported under the interpreter, each time): auto_quant_q asks at every call."""
    if device_type in _SERVES:
        return _SERVES[device_type]
    reason = _triton_serves(device_type)
    if device_type != "cpu":
        _SERVES[device_type] = reason
    return reason


def _triton_serves(device_type: str) -> Optional[str]:
    try:
        import triton  # noqa: F401
        import triton.backends as tb
    except Exception as e:  # ImportError, or a broken install
        return f"triton is not importable ({type(e).__name__}: {e})"
    if device_type == "cpu":
        if _kernel_module().interpreting():
            return None
        return "the CPU runs Triton kernels only through its interpreter (TRITON_INTERPRET=1)"
    want = {"cuda": ("amd",) if torch.version.hip else ("nvidia",), "xpu": ("intel",)}.get(
        device_type)
    if want is None:
        return f"Triton has no backend for {device_type} devices"
    have = getattr(tb, "backends", {}) or {}
    if not any(w in have for w in want):
        return f"this Triton has no {'/'.join(want)} backend (it has: {', '.join(have) or 'none'})"
    return None


def _validate(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs, positions,
              enable_pdl, head_scale):
    _OP_CHECK(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs, positions,
              enable_pdl, head_scale)


def run_triton(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs, positions,
               enable_pdl=False, head_scale=1.0, *, validate=True):
    """The Triton kernel for `recipe` on the operator's arguments (q_out written as raw codes).
    The operator's ``side_inputs_ready`` is not an argument here: the Triton kernel reads every
    input in program order, so the opt-in (a CUDA-backend one) has nothing to change."""
    if validate:
        _validate(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                  positions, enable_pdl, head_scale)
    tk = _kernel_module()
    tk.launch(recipe_info(recipe), q_input, q_out, q_sf, weight, weights_out, weight_scale,
              freqs, positions, head_scale)


def _quant_q_triton(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                    positions, enable_pdl=False, head_scale=1.0, *, side_inputs_ready=False):
    # side_inputs_ready: accepted (the schema is quant_q's) and ignored
    reason = triton_serves(q_input.device.type)
    if reason is not None:
        raise RuntimeError(f"indexer_q: q_input: the Triton path cannot run on "
                           f"{q_input.device}: {reason}")
    run_triton(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs, positions,
               enable_pdl, head_scale)


_lib.impl("quant_q_triton", _quant_q_triton, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{_NS}::quant_q_triton")
def _fake_quant_q_triton(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                         positions, enable_pdl=False, head_scale=1.0, *, side_inputs_ready=False):
    from ._ops import _fake_q  # every tensor on one device (a mixed meta call raises)

    return _fake_q(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                   positions, enable_pdl, head_scale)


@torch.library.register_fake(f"{_NS}::quant_q_check")
def _fake_quant_q_check(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                        positions, enable_pdl=False, head_scale=1.0, *, side_inputs_ready=False):
    from ._ops import _fake_q  # every tensor on one device (a mixed meta call raises)

    return _fake_q(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                   positions, enable_pdl, head_scale)


# ---- the known-answer check and the per-device choice --------------------------------------
def _self_check(device: torch.device) -> Optional[str]:
    """None if the Triton kernel reproduces the shipped golden rows on `device`, else why not."""
    from . import triton_selfcheck  # its golden rows are read at the first check only

    def runner(recipe, *args):
        run_triton(recipe, *args[:8], False, args[8], validate=False)

    try:
        problems = triton_selfcheck.run_check(device, runner, recipe_info, resolve_recipe)
    except Exception as e:  # the kernel failed to build or launch on this device
        return f"the kernel failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return "known-answer check failed: " + "; ".join(problems[:3]) + more
    return None


def _device_key(device: torch.device) -> str:
    if device.index is None and device.type in ("cuda", "xpu"):
        return f"{device.type}:{getattr(torch, device.type).current_device()}"
    return str(device)


def device_uses_triton(device: torch.device) -> bool:
    """Whether the automatic path runs Triton on `device`; runs the known-answer check at the
    first call per device (one warning if it fails, then silence)."""
    if _env_disabled():
        return False
    if triton_serves(device.type) is not None:
        return False
    key = _device_key(device)
    with _state_lock:
        if key in _device_ok:
            return _device_ok[key]
        reason = _self_check(device)
        _device_ok[key] = reason is None
        if reason is not None:
            _device_reason[key] = reason
            warnings.warn(
                f"indexer_q: the Triton kernel is not used on {key}: {reason}. That device "
                "gets the composed ATen path (same bytes, slower); set INDEXER_Q_TRITON=0 to "
                "skip the check.", RuntimeWarning, stacklevel=3)
        return _device_ok[key]


def why_not(device_type: str) -> Optional[str]:
    """None if a device of this type without a native kernel gets Triton (after its known-answer
    check passes at the first call), else why it gets the composed path (one line)."""
    if _env_disabled():
        return "INDEXER_Q_TRITON=0 turns the Triton path off"
    reason = triton_serves(device_type)
    if reason is not None:
        return reason
    failed = [k for k, ok in _device_ok.items() if k.split(":")[0] == device_type and not ok]
    if failed:
        return f"the known-answer check failed on {failed[0]}: {_device_reason.get(failed[0], '?')}"
    return None


def path_for(device_type: str) -> str:
    """"triton" or "composed": what a device of this type without a native kernel gets
    ("triton" means: after its known-answer check passes at the first call)."""
    return "composed" if why_not(device_type) is not None else "triton"


def reset_checks() -> None:
    """Forgets every device's check result (tests)."""
    with _state_lock:
        _device_ok.clear()
        _device_reason.clear()


def auto_quant_q(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                 positions, enable_pdl=False, head_scale=1.0, *, side_inputs_ready=False):
    """The kernel of ``indexer_q::quant_q`` on a device the routing table sends to Triton:
    Triton where it serves the device and the recipe, else the composed path.
    ``side_inputs_ready`` (the CUDA backend's opt-in) is accepted and ignored: neither path reads
    an input before the previous kernel has finished."""
    info = _RECIPES.get(recipe)  # an unknown name: the composed path reports it
    if info is not None and device_uses_triton(q_input.device):
        try:
            _kernel_module().recipe_constants(info)
        except KeyError:  # a recipe whose steps the kernel does not have: composed
            pass
        else:
            return run_triton(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale,
                              freqs, positions, enable_pdl, head_scale)
    _OP_COMPOSED(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs,
                 positions, enable_pdl, head_scale)


def auto_v4(q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions,
            enable_pdl=False, *, side_inputs_ready=False):
    """The same for ``indexer_q::fused_q_indexer_rope_hadamard_quant`` (recipe v4_fp8)."""
    auto_quant_q("v4_fp8", q_input, q_fp8, None, weight, weights_out, weight_scale, freqs,
                 positions, enable_pdl, 1.0)


_registered = set()


def register(op: str, dispatch_key: str) -> None:
    """Registers the Triton-or-composed kernel of `op` ("quant_q" or
    "fused_q_indexer_rope_hadamard_quant") for a dispatch key (routing.py calls it; once per
    pair, however often it is called)."""
    if (op, dispatch_key) in _registered:
        return
    _lib.impl(op, {"quant_q": auto_quant_q,
                   "fused_q_indexer_rope_hadamard_quant": auto_v4}[op], dispatch_key)
    _registered.add((op, dispatch_key))
