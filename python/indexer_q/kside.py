"""The indexer's key side (docs/KSIDE-SPEC.md): RMSNorm, RoPE on dims 64..127, the 128-point Hadamard
transform and FP8 / FP4 quantization of compressed key tokens, stored into a paged cache.

``torch.ops.indexer_q.kside_store(recipe, input, weight, eps, freqs, positions, slots, kvcache,
page_size, enable_pdl=True)`` is the operator (recipes ``v4_k_fp8``: 132 bytes a token,
``v4_k_fp4``: 68 bytes); a negative slot skips its token. ``compress_norm_rope_store`` takes
SGLang's plan-driven call instead, through ``torch.ops.indexer_q.kside_store_plan`` (positions and
slots derived from the plan: for CPU tensors by the binding, on another device with torch ops on
the tensors' device, without a host synchronization).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _ops  # noqa: F401  (recipes() / krecipes() are served from here)
from ._glue import check_one_device as _check_one_device
from ._glue import freqs_table as _freqs_table
from ._glue import integral as _integral
from ._glue import recipe_at as _recipe_at
from ._glue import scalar as _scalar

# The operators, looked up once (a torch.ops attribute lookup costs microseconds a call).
_OP_STORE = torch.ops.indexer_q.kside_store.default
_OP_STORE_COMPOSED = torch.ops.indexer_q.kside_store_composed.default
_OP_STORE_PLAN = torch.ops.indexer_q.kside_store_plan.default

KSIDE_RECIPES: Tuple[str, ...] = tuple(torch.ops.indexer_q.krecipes())
# kside_store_plan's recipe argument: the index in KSIDE_RECIPES (an int costs the call less than
# a str, which the binding reads and looks up)
_K_FP8 = KSIDE_RECIPES.index("v4_k_fp8")
_K_FP4 = KSIDE_RECIPES.index("v4_k_fp4")
# kv dtypes for which a norm_weight of another floating dtype is converted (SGLang's CUDA branch)
_KV_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_U32 = 0xFFFFFFFF
_F32 = torch.float32


def _err(arg: str, what: str) -> ValueError:
    return ValueError(f"indexer_q: {arg}: {what}")


def _plan_checks(plan, out_loc, is_decode, compress_ratio):
    """plan_positions_slots's argument checks (the binding's kside_store_plan makes the same ones,
    with the same messages, for CPU tensors): (out_loc as int64, ratio, N, M), or the error
    naming the argument."""
    if not isinstance(plan, torch.Tensor) or plan.dtype != torch.uint8:
        raise TypeError("indexer_q: plan: expected a uint8 tensor of shape (N, 16)")
    if plan.dim() != 2 or plan.shape[1] != 16:
        raise _err("plan", f"expected shape (N, 16), got {tuple(plan.shape)}")
    if (not isinstance(out_loc, torch.Tensor) or out_loc.dim() != 1
            or out_loc.dtype.is_floating_point or out_loc.dtype.is_complex
            or out_loc.dtype == torch.bool):
        raise TypeError("indexer_q: out_loc: expected a 1-D integer tensor (int64, int32, ...)")
    out_loc = out_loc.to(torch.int64)  # exact for every integer dtype (sgl-kernel-xpu's rule)
    if out_loc.device != plan.device:
        raise _err("out_loc", f"expected the device of plan ({plan.device}), got {out_loc.device}")
    ratio = _integral("compress_ratio", compress_ratio)  # 4.5 is refused, never truncated
    if ratio <= 0 or ratio > _U32:
        raise _err("compress_ratio", f"expected a positive 32-bit integer, got {compress_ratio}")
    n, m = plan.shape[0], out_loc.shape[0]
    if is_decode and m != n:
        raise _err("out_loc", f"expected {n} entries (one per token, decode), got {m}")
    if not is_decode and m < n:
        raise _err("out_loc", f"expected at least {n} entries (extend), got {m}")
    return out_loc, ratio, n, m


def plan_positions_slots(plan: torch.Tensor, out_loc: torch.Tensor, *, is_decode: bool,
                         compress_ratio: int = 4) -> Tuple[torch.Tensor, torch.Tensor]:
    """(positions, slots), both int64 (N,), from SGLang's plan (docs/KSIDE-SPEC.md section 1).

    plan: (N, 16) uint8, one little-endian struct per token. out_loc: (M,) of any integer dtype
    (int64 in SGLang's CUDA kernel; int32 and others converted exactly, as sgl-kernel-xpu does). Extend: {u32 seq_len, u16 ragged_id,
    ...}; seq_len 0xFFFFFFFF, or ragged_id >= len(out_loc), skips the token; slot =
    out_loc[ragged_id]. Decode: {u32 seq_len, ...}; the token is skipped unless seq_len %
    compress_ratio == 0; slot = out_loc[t]. position = int32(seq_len - compress_ratio) (32-bit
    unsigned subtraction, reinterpreted as signed). A skipped token gets slot -1 (the op writes
    nothing for it) and position 0.
    """
    out_loc, ratio, n, m = _plan_checks(plan, out_loc, is_decode, compress_ratio)
    words = plan.contiguous().view(torch.int32)  # (N, 4), little-endian
    seq_len = words[:, 0].to(torch.int64) & _U32
    if is_decode:
        take = (seq_len % ratio) == 0
        slot = out_loc[:n]
    else:
        ragged = words[:, 1].to(torch.int64) & 0xFFFF
        take = (seq_len != _U32) & (ragged < m)
        slot = out_loc[ragged.clamp(max=max(m - 1, 0))] if m > 0 else torch.zeros_like(ragged)
    slots = torch.where(take, slot, torch.full_like(slot, -1))
    p = (seq_len - ratio) & _U32
    positions = torch.where(p >= 2**31, p - 2**32, p)
    positions = torch.where(take, positions, torch.zeros_like(positions))
    return positions, slots


def kside_store(recipe: str, input: torch.Tensor, weight: torch.Tensor, eps: float,
                freqs: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                kvcache: torch.Tensor, page_size: int, *, enable_pdl: bool = True,
                composed: bool = False) -> None:
    """Stores the tokens into kvcache (in place). freqs may be the complex64 (max_pos, 32) table.
    composed=True runs the composed ATen implementation on any device."""
    # eps: checked by the library (check_scalar); page_size: an integer (4.7 is refused). The
    # conversions inline for their common argument types; enable_pdl True (the operator's
    # default) not passed: a non-tensor argument costs the call ~1.5k instructions.
    eps = eps if type(eps) is float else _scalar("eps", eps)
    if type(freqs) is not torch.Tensor or freqs.dtype is not _F32:
        freqs = _freqs_table(freqs)
    pages = page_size if type(page_size) is int else _integral("page_size", page_size)
    op = _OP_STORE_COMPOSED if composed else _OP_STORE
    if enable_pdl is True:
        op(recipe, input, weight, eps, freqs, positions, slots, kvcache, pages)
    else:
        op(recipe, input, weight, eps, freqs, positions, slots, kvcache, pages, bool(enable_pdl))


def _plan_tensor(plan, is_decode, compress_ratio):
    """SGLang passes its plan object (``CompressorDecodePlan(compress_ratio, plan_d)`` /
    ``CompressorPrefillPlan(compress_ratio, plan_c, plan_w, ...)``: ``plan[1]`` the (N, 16)
    uint8 tensor, ``plan.is_decode`` the mode); the kernels take ``plan[1]``, ``is_decode`` and
    ``compress_ratio``. Returns (tensor, is_decode, compress_ratio)."""
    if isinstance(plan, torch.Tensor):
        return (plan, False if is_decode is None else bool(is_decode),
                4 if compress_ratio is None else compress_ratio)
    try:
        tensor, obj_ratio = plan[1], plan.compress_ratio
        obj_decode = plan.is_decode if hasattr(plan, "is_decode") else len(plan) == 2
    except (AttributeError, IndexError, TypeError, KeyError):
        raise TypeError("indexer_q: plan: expected a (N, 16) uint8 tensor or SGLang's plan object "
                        f"(plan[1] the tensor, .compress_ratio), got {type(plan).__name__}"
                        ) from None
    if is_decode is not None and bool(is_decode) != bool(obj_decode):
        raise ValueError(f"indexer_q: is_decode: {is_decode} contradicts the plan object "
                         f"({type(plan).__name__}, is_decode {obj_decode})")
    if compress_ratio is not None and int(compress_ratio) != int(obj_ratio):
        raise ValueError(f"indexer_q: compress_ratio: {compress_ratio} contradicts the plan "
                         f"object's {obj_ratio}")
    return tensor, bool(obj_decode), int(obj_ratio)


def compress_norm_rope_store(kv: torch.Tensor, plan, *, norm_weight: torch.Tensor,
                             norm_eps: float, freq_cis: torch.Tensor, out_loc: torch.Tensor,
                             kvcache: torch.Tensor, page_size: int, use_fp4: bool = False,
                             is_decode: Optional[bool] = None,
                             compress_ratio: Optional[int] = None, enable_pdl: bool = True,
                             preshuffle_size: int = 0, use_bf16_store: bool = False,
                             bf16_store: bool = False) -> None:
    """SGLang's call of the key side: normalizes, rotates, transforms and quantizes the compressed
    key tokens kv (N, 128) and stores each into its row of the paged cache kvcache
    (num_pages, page_bytes) uint8: 132 bytes a token (FP8) or 68 (use_fp4). Positions and slots
    come from plan / out_loc / is_decode / compress_ratio (plan_positions_slots); freq_cis is the
    complex64 (max_pos, 32) table or its (max_pos, 64) float32 view. Tokens the plan skips, and on
    a GPU tokens whose position or slot is out of range, write nothing.

    The engines' call shapes: ``plan`` the (N, 16) uint8 tensor (then ``is_decode`` defaults to
    False and ``compress_ratio`` to 4) or SGLang's plan object (``plan[1]`` the tensor, its
    ``is_decode`` and ``compress_ratio`` used; explicit values must agree); ``out_loc`` of any
    integer dtype (converted to int64 exactly); ``norm_weight`` of another dtype than ``kv`` is
    converted to kv's dtype first (``norm_weight.to(kv.dtype)``, SGLang's CUDA branch: an fp32
    weight with bf16 kv is rounded to bf16). sgl-kernel-xpu's ``preshuffle_size`` (0: the plain
    layout) and ``use_bf16_store`` / SGLang's ``bf16_store`` (False) are accepted at those values;
    the tiled FP8 layout (preshuffle_size > 0) and the bf16 store are not forms of the library
    (ValueError naming the argument).

    One operator call (``kside_store_plan``) for the engines' call; the first error of a call is
    reported by the checked path below (``_compress_checked``, the same checks in their order
    and with their exception types), so a refused call raises what it always raised."""
    if type(preshuffle_size) is int and preshuffle_size == 0 and not (use_bf16_store or bf16_store):
        try:
            if isinstance(plan, torch.Tensor):
                tensor = plan
                dec = False if is_decode is None else bool(is_decode)
                ratio = 4 if compress_ratio is None else _integral("compress_ratio", compress_ratio)
            else:
                tensor, dec, ratio = _plan_tensor(plan, is_decode, compress_ratio)
            w = norm_weight
            wd, kd = w.dtype, kv.dtype
            if wd is not kd and wd.is_floating_point and kd in _KV_DTYPES:
                w = w.to(dtype=kd)
            # the conversions of _scalar / _integral, inline for their common argument types
            eps = norm_eps if type(norm_eps) is float else _scalar("eps", norm_eps)
            pages = page_size if type(page_size) is int else _integral("page_size", page_size)
            # freq_cis as given: the binding reads a complex64 table as its float32 view;
            # enable_pdl True is the operator's default, not passed (a non-tensor argument costs
            # the call ~1.5k instructions)
            if enable_pdl is True:
                _OP_STORE_PLAN(_K_FP4 if use_fp4 else _K_FP8, kv, w, eps, freq_cis, tensor,
                               out_loc, dec, ratio, kvcache, pages)
            else:
                _OP_STORE_PLAN(_K_FP4 if use_fp4 else _K_FP8, kv, w, eps, freq_cis, tensor,
                               out_loc, dec, ratio, kvcache, pages, bool(enable_pdl))
            return
        except Exception:  # noqa: BLE001 (the checked path below raises the call's error)
            pass
    _compress_checked(kv, plan, norm_weight, norm_eps, freq_cis, out_loc, kvcache, page_size,
                      use_fp4, is_decode, compress_ratio, enable_pdl, preshuffle_size,
                      use_bf16_store, bf16_store)


def _compress_checked(kv, plan, norm_weight, norm_eps, freq_cis, out_loc, kvcache, page_size,
                      use_fp4, is_decode, compress_ratio, enable_pdl, preshuffle_size,
                      use_bf16_store, bf16_store):
    """compress_norm_rope_store checked step by step (its first refusal raised with its exception
    type and message), positions and slots derived with torch ops (plan_positions_slots)."""
    if int(preshuffle_size) != 0:
        raise _err("preshuffle_size", f"expected 0 (the plain cache layout); the tiled layout "
                   f"({preshuffle_size}) is not a form of the library")
    if use_bf16_store or bf16_store:
        raise _err("use_bf16_store" if use_bf16_store else "bf16_store",
                   "expected False; the bf16 store is not a form of the library")
    plan, is_decode, compress_ratio = _plan_tensor(plan, is_decode, compress_ratio)
    if (isinstance(norm_weight, torch.Tensor) and isinstance(kv, torch.Tensor)
            and norm_weight.dtype != kv.dtype and norm_weight.dtype.is_floating_point
            and kv.dtype in (torch.float32, torch.bfloat16, torch.float16)):
        norm_weight = norm_weight.to(dtype=kv.dtype)
    positions, slots = plan_positions_slots(plan, out_loc, is_decode=is_decode,
                                            compress_ratio=compress_ratio)
    kside_store("v4_k_fp4" if use_fp4 else "v4_k_fp8", kv, norm_weight, norm_eps, freq_cis,
                positions, slots, kvcache, page_size, enable_pdl=enable_pdl)


# ---- kside_store_plan on devices other than the CPU (CompositeExplicitAutograd: CUDA, XPU, ...):
# positions and slots derived with torch ops on the tensors' device (plan_positions_slots), then
# kside_store; its fake (meta, FakeTensor, torch.compile) checks what the CPU binding checks.
def _krecipe_name(recipe: int) -> str:
    return _recipe_at(KSIDE_RECIPES, recipe, "key-side ")


def _store_plan_composite(recipe, input, weight, eps, freqs, plan, out_loc, is_decode,
                          compress_ratio, kvcache, page_size, enable_pdl=True):
    name = _krecipe_name(recipe)
    positions, slots = plan_positions_slots(plan, out_loc, is_decode=is_decode,
                                            compress_ratio=compress_ratio)
    _OP_STORE(name, input, weight, eps, _freqs_table(freqs), positions, slots, kvcache, page_size,
              enable_pdl)


_KLIB = torch.library.Library("indexer_q", "IMPL")
_KLIB.impl("kside_store_plan", _store_plan_composite, "CompositeExplicitAutograd")

_KP_NAMES = ("input", "weight", "freqs", "plan", "out_loc", "kvcache")


@torch.library.register_fake("indexer_q::kside_store_plan")
def _fake_store_plan(recipe, input, weight, eps, freqs, plan, out_loc, is_decode, compress_ratio,
                     kvcache, page_size, enable_pdl=True):
    _krecipe_name(recipe)
    _plan_checks(plan, out_loc, is_decode, compress_ratio)
    _freqs_table(freqs)
    _check_one_device(_KP_NAMES, (input, weight, freqs, plan, out_loc, kvcache))
    return None
