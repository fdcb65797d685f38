"""The torch/Python glue every operator of the extension shares (the query side's _ops.py, the key
side's kside.py, and the next op): loading the compiled library, the operators' descriptions
(:data:`OPS`: which the routing table routes, their fake implementations), the recipe lists read
from the library, and the argument conversions of the Python entry points (scalars, integers,
flags, the RoPE table), each with the messages the wrappers have always raised.

A next op brings its C++ kernel (bindings/torch: its arguments, one kernel template), one
:class:`OpSpec` in :data:`OPS` and its Python entry point; the fakes and the routing table
(routing.py) come from the spec.
"""

from __future__ import annotations

import glob
import operator
import os
from typing import Callable, FrozenSet, NamedTuple, Optional, Tuple

import torch


def _find_library() -> str:
    # INDEXER_Q_TORCH_LIBRARY: an explicit path (a CMake build tree during development).
    explicit = os.environ.get("INDEXER_Q_TORCH_LIBRARY")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "_indexer_q_ops*.so")))
    found += sorted(glob.glob(os.path.join(here, "_indexer_q_ops*.dylib")))
    found += sorted(glob.glob(os.path.join(here, "_indexer_q_ops*.dll")))
    if not found:
        raise ImportError(
            "indexer_q: the compiled operator library (_indexer_q_ops.so) is missing from "
            f"{here}; install the package with `pip install --no-build-isolation .` or set "
            "INDEXER_Q_TORCH_LIBRARY to a built _indexer_q_ops.so"
        )
    return found[0]


library_path: str = _find_library()
torch.ops.load_library(library_path)


# ---- the operators' descriptions ----------------------------------------------------------------
class OpSpec(NamedTuple):
    """One operator of the extension as the glue sees it.

    ``name``: the operator (``torch.ops.indexer_q.<name>``), routed by :mod:`indexer_q.routing`;
    ``args``: its schema's leading arguments in order, as its messages name them (every tensor
    among them); ``absent_ok``: arguments a recipe may not take, passed as 0-element tensors on
    any device; ``twins``: operators with the same schema (composed, reference, ...), which get
    the same fake; ``side``: "query" or "key"; ``triton``: whether the Triton kernel serves it
    (routing.py registers it for the devices Triton compiles for)."""

    name: str
    args: Tuple[str, ...]
    absent_ok: FrozenSet[str]
    twins: Tuple[str, ...]
    side: str
    triton: bool


_Q_ARGS = ("recipe", "q_input", "q_out", "q_sf", "weight", "weights_out", "weight_scale", "freqs",
           "positions")
#: Every operator routed by the table, in its order.
OPS: Tuple[OpSpec, ...] = (
    OpSpec("quant_q", _Q_ARGS, frozenset({"weight", "weights_out", "freqs", "positions"}),
           ("quant_q_composed", "quant_q_reference"), "query", True),
    OpSpec("fused_q_indexer_rope_hadamard_quant",
           ("q_input", "q_fp8", "weight", "weights_out", "weight_scale", "freqs", "positions"),
           frozenset(), ("fused_q_indexer_rope_hadamard_quant_composed",), "query", True),
    OpSpec("kside_store",
           ("recipe", "input", "weight", "eps", "freqs", "positions", "slots", "kvcache"),
           frozenset(), ("kside_store_composed",), "key", False),
)


# ---- fake (meta) implementations: the ops write their outputs in place and return nothing, so
# tracing (torch.compile, FakeTensor, meta tensors) needs no shape logic. The dispatcher sends a
# call here as soon as ONE tensor is on `meta`, whatever the others' devices: a fake that accepted
# it would be a silent no-op (nothing written). So each fake checks that every tensor is on the
# first one's device (under FakeTensorMode the fake tensors report the device they stand for) and
# raises naming the first that is not. Arguments a recipe does not take may be 0-element tensors on
# any device (the C++ binding skips them too).
def check_one_device(names, tensors, absent_ok=()):
    first = None
    for name, t in zip(names, tensors):
        if t is None or not isinstance(t, torch.Tensor):
            continue
        if name in absent_ok and t.numel() == 0:
            continue
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise RuntimeError(f"indexer_q: {name}: expected the device of {first[0]} "
                               f"({first[1]}), got {t.device}")


def fake_of(spec: OpSpec) -> Callable:
    """The fake of an in-place operator: every tensor of the call on one device, nothing made."""
    names, absent = spec.args, spec.absent_ok

    def fake(*args, **kwargs):
        check_one_device(names, args, absent)
        return None

    fake.__name__ = f"_fake_{spec.name}"
    return fake


#: name -> the fake registered for it (and for its twins)
FAKES = {}
for _spec in OPS:
    FAKES[_spec.name] = _fake = fake_of(_spec)
    for _n in (_spec.name,) + _spec.twins:
        torch.library.register_fake(f"indexer_q::{_n}")(_fake)


# ---- the recipe lists, read from the library --------------------------------------------------
def recipe_table(side: int) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    """The library's recipe list as (name, ("column=value", ...)) per recipe, read once through
    ``torch.ops.indexer_q.recipe_table`` (side 0: the query side, every column of the descriptor;
    side 1: the key side, names only). The operators ``recipes()``, ``recipe_info(name)`` and
    ``krecipes()`` are served from it (_ops.py): a str[] made by the C++ binding would go through
    the stable ABI's string conversion, which leaks every string (torch 2.10 to 2.13)."""
    op = torch.ops.indexer_q.recipe_table.default
    n = op(side, torch.empty(0, dtype=torch.uint8))
    buf = torch.zeros(n, dtype=torch.uint8)
    if op(side, buf) != n:
        raise ImportError("indexer_q: recipe_table: the library's recipe list changed size")
    rows = []
    for line in bytes(buf.tolist()).decode("ascii").splitlines():
        name, *cols = line.split("\t")
        rows.append((name, tuple(cols)))
    return tuple(rows)


def recipe_at(names: Tuple[str, ...], index, side: str = "") -> str:
    """The recipe at ``index`` of a side's list (an operator's int recipe argument), or the
    binding's error: side "" for the query side, "key-side " for the other."""
    if not 0 <= index < len(names):
        raise RuntimeError(f"indexer_q: recipe: expected the index of a {side}recipe in the "
                           f"library's list (0 to {len(names) - 1}), got {index}")
    return names[index]


# ---- the entry points' argument conversions ---------------------------------------------------
def scalar(arg: str, value) -> float:
    """A scalar argument as the Python float the operator takes, or TypeError naming it. Its value
    is the library's to check (finite, in range, its float32 rounding: check_scalar of
    include/indexer_q/indexer_q.h), with the same message as from C++ and the CLI."""
    if type(value) is float:
        return value
    if not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise TypeError(f"indexer_q: {arg}: expected a float, got {type(value).__name__} {value!r}")


def integral(arg: str, value) -> int:
    """An integer argument (page_size, compress_ratio) as a Python int: ints (and integral
    floats) pass, anything else raises naming it (4.7 is refused, never truncated)."""
    if type(value) is int:
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
    elif not isinstance(value, (str, bytes, bool)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"indexer_q: {arg}: expected an integer, got {type(value).__name__} "
                    f"{value!r}")


def flag(arg: str, value) -> bool:
    """A bool argument (side_inputs_ready), or TypeError naming it: only True and False pass (an
    int, a tensor or a string is refused, never read as truthy)."""
    if value is True or value is False:
        return value
    raise TypeError(f"indexer_q: {arg}: expected a bool (True or False), got "
                    f"{type(value).__name__} {value!r}")


_C64 = torch.complex64
_F32 = torch.float32


def freqs_table(freqs_cis: torch.Tensor) -> torch.Tensor:
    """The (max_pos, 64) float32 (cos, sin) table from freqs_cis or the table itself."""
    if type(freqs_cis) is torch.Tensor:
        dt = freqs_cis.dtype
        if dt is _F32:
            return freqs_cis  # the real table (the common case: no further look)
        if dt is _C64 and freqs_cis.dim() == 2 and freqs_cis.shape[1] == 32 \
                and freqs_cis.is_contiguous():
            return freqs_cis.view(_F32)  # SGLang's freqs_cis (the checks below, passed)
    if not isinstance(freqs_cis, torch.Tensor):
        raise TypeError(f"indexer_q: freqs_cis: expected a tensor, got {type(freqs_cis).__name__}")
    if freqs_cis.is_complex():
        if freqs_cis.dtype != torch.complex64:
            raise TypeError(
                "indexer_q: freqs_cis: expected complex64 (max_pos, 32) or float32 (max_pos, 64), "
                f"got {freqs_cis.dtype}"
            )
        if freqs_cis.dim() != 2 or freqs_cis.shape[1] != 32:
            raise ValueError(
                "indexer_q: freqs_cis: expected shape (max_pos, 32) for a complex64 table, got "
                f"{tuple(freqs_cis.shape)}"
            )
        if not freqs_cis.is_contiguous():
            raise ValueError("indexer_q: freqs_cis: expected a contiguous table")
        # the same (max_pos, 64) float32 view of the same bytes as view_as_real(...).view(...),
        # in one view op instead of two (about 3 us less a call on the CPU)
        return freqs_cis.view(torch.float32)
    return freqs_cis  # the real (max_pos, 64) view; the library checks it


def op(name: str):
    """``torch.ops.indexer_q.<name>.default``, looked up once by the caller (a torch.ops attribute
    lookup costs microseconds a call; .default skips the overload resolution of the packet)."""
    return getattr(torch.ops.indexer_q, name).default
