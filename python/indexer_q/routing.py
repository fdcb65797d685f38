"""The routing table: for each operator and device type, which implementation runs, and why.

One table serves the registration (this module registers the Python kernels it calls for) and
:func:`available_backends`. The operators:

- the query side: ``quant_q`` (every recipe) and ``fused_q_indexer_rope_hadamard_quant`` (v4_fp8);
- the key side: ``kside_store``.

The implementations:

- ``native``: a kernel of the C++ library, registered by the compiled extension for the device
  types it was built with (``torch.ops.indexer_q.native_devices()``, a bit set: 1 "cpu", 2 "cuda" in a build
  with the CUDA backend);
- ``triton``: the Triton kernel (triton_kernel.py, for the query side's ops only), on a device
  type without a native kernel where Triton can run (CUDA: NVIDIA, or AMD through ROCm; XPU);
  the kernel registered for it (triton_dispatch.auto_quant_q) runs Triton once the device's
  known-answer check passed, the composed path otherwise (triton_dispatch.py says when);
- ``composed``: the composed ATen implementation, which runs on any device (the extension's
  CompositeExplicitAutograd kernels, the fallback of every device type the table does not name).

The table has a static part (what the build and the op have: :data:`ROUTES`) and a live part
(:func:`route`: a "triton" entry becomes "composed" where Triton is not importable, has no backend
for the device, is switched off by ``INDEXER_Q_TRITON=0`` or failed its check on that device).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple

import torch

from . import _glue
from . import _ops  # noqa: F401  (loads the extension: the ops below exist from here on)
from . import triton_dispatch

#: The operators the table routes (names in the ``indexer_q`` namespace): the glue's
#: descriptions (_glue.OPS), so a new op is routed by its OpSpec alone.
OPS: Tuple[str, ...] = tuple(s.name for s in _glue.OPS)
#: The device types named in the table; "other" stands for every other one (MPS, HPU, ...).
DEVICES: Tuple[str, ...] = ("cpu", "cuda", "xpu", "other")
#: The implementations, best first.
IMPLEMENTATIONS: Tuple[str, ...] = ("native", "triton", "composed")

# The dispatch key of each named device type.
_KEYS: Dict[str, str] = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU"}
# The ops with a Triton kernel (triton_kernel.py: the query side), and the device types Triton
# compiles for outside its CPU interpreter (which serves tests, through backend="triton" only).
_TRITON_OPS: FrozenSet[str] = frozenset(s.name for s in _glue.OPS if s.triton)
_TRITON_DEVICES: FrozenSet[str] = frozenset({"cuda", "xpu"})


class Route(NamedTuple):
    """One entry of the table: ``op`` on devices of type ``device`` runs ``impl`` ("native",
    "triton" or "composed") because ``why``."""

    op: str
    device: str
    impl: str
    why: str


def native_devices() -> FrozenSet[str]:
    """The device types the compiled extension registers native kernels for (its own report)."""
    return _NATIVE


def _load_native() -> FrozenSet[str]:
    try:
        op = torch.ops.indexer_q.native_devices
    except (AttributeError, RuntimeError) as e:
        raise ImportError(
            f"indexer_q: the compiled extension {_ops.library_path} has no native_devices op "
            "(it is older than this package): rebuild it with the package") from e
    bits = int(op())
    return frozenset(name for bit, name in ((1, "cpu"), (2, "cuda")) if bits & bit)


_NATIVE: FrozenSet[str] = _load_native()


def _static(op: str, device: str) -> Route:
    if device in _NATIVE:
        return Route(op, device, "native", f"the extension was built with the {device} backend")
    built = "this build has no native kernel for it" if device in _KEYS else (
        "no native kernel for other device types")
    if op in _TRITON_OPS and device in _TRITON_DEVICES:
        return Route(op, device, "triton",
                     f"{built}: Triton, once its known-answer check passed on the device (else "
                     "composed)")
    if op in _TRITON_OPS:
        return Route(op, device, "composed", f"{built}, nor a Triton backend")
    side = next(s.side for s in _glue.OPS if s.name == op)
    return Route(op, device, "composed", f"{built}, and the {side} side has no Triton kernel")


#: The static table: (op, device type) -> Route, from what the build and each op have.
ROUTES: Dict[Tuple[str, str], Route] = {(o, d): _static(o, d) for o in OPS for d in DEVICES}


def _check_op(op: str) -> str:
    if op not in OPS:
        raise ValueError(f"indexer_q: op: expected one of {', '.join(OPS)}, got {op!r}")
    return op


def route(op: str, device_type: str) -> Route:
    """What ``torch.ops.indexer_q.<op>`` runs on a device of this type now: the static entry,
    with a "triton" entry resolved to "composed" (and why) where Triton cannot serve the device
    type here. Device types outside :data:`DEVICES` are "other"."""
    _check_op(op)
    device = device_type if device_type in _KEYS else "other"
    r = ROUTES[(op, device)]
    if r.impl == "triton":
        why = triton_dispatch.why_not(device)
        if why is not None:
            return r._replace(impl="composed",
                              why=r.why.split(":")[0] + f", and Triton does not serve it: {why}")
    return r


def table() -> List[Route]:
    """Every entry (op x device type), resolved as :func:`route` does."""
    return [route(o, d) for o in OPS for d in DEVICES]


def available_backends(op: Optional[str] = None) -> Dict[str, str]:
    """Which implementation each device type gets from the dispatcher in this build, for ``op``
    (default: the query side's ops, which route alike; ``"kside_store"`` for the key side).

    "native": a kernel of the C++ library (CPU backend; CUDA backend when built with CUDA).
    "triton": the Triton kernel (python/indexer_q/triton_kernel.py), for a device type without
    a native kernel where Triton has a backend; its known-answer check runs at the first call
    per device and a failure turns that device to "composed" (with one warning).
    "composed": the composed ATen implementation (the CompositeExplicitAutograd fallback).
    "other" stands for any device type not listed. :func:`table` gives the reasons."""
    op = _check_op(op or "quant_q")
    return {d: route(op, d).impl for d in DEVICES}


def format_table() -> str:
    """The table as text, one line per entry."""
    rows = table()
    w_op = max(len(r.op) for r in rows)
    return "\n".join(f"{r.op:<{w_op}}  {r.device:<5}  {r.impl:<8}  {r.why}" for r in rows)


# ---- the registration: the Python kernel of every entry routed to Triton ----------------------
# "native" entries are the extension's own registrations, "composed" ones its
# CompositeExplicitAutograd fallback: only the "triton" entries need a kernel from here.
for (_op, _dev), _r in ROUTES.items():
    if _r.impl == "triton":
        triton_dispatch.register(_op, _KEYS[_dev])

