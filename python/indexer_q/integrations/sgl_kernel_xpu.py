"""sgl-kernel-xpu's Python entry points of the family, with its signatures, served by indexer_q
(for code and tests that call sgl-kernel-xpu directly rather than through SGLang):

- ``fused_q_indexer_rope_hadamard_quant(q_input, q_fp8, weight, weights_out, weight_scale,
  freqs_real, positions)``: in place, recipe ``v4_fp8`` (the CUDA kernel's bytes);
- ``compress_norm_rope_store(input, plan, norm_weight, norm_eps, freq_cis, out_loc, kvcache,
  is_decode, compress_ratio, page_size, use_fp4, preshuffle_size=0, use_bf16_store=False)``
  (positional or by keyword): recipes ``v4_k_fp8`` / ``v4_k_fp4``; ``out_loc`` of any integer
  dtype; ``preshuffle_size > 0``, ``use_bf16_store=True`` and kv rows of another width than 128
  (the FlashMLA store) are not forms of the library (ValueError naming the argument).

``install()`` makes code written for sgl-kernel-xpu (``from sgl_kernel import ...``) find these two
functions: where no module ``sgl_kernel`` can be imported, this module is registered under that
name; where one can (sgl-kernel-xpu itself, or sgl-kernel for CUDA), nothing is registered and
its two functions, where it has them, are routed here (as the engines' functions are), a call
that is not a form of the library being handed back to it.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Dict, Optional

import torch

from .. import _ops
from .. import kside as _kside
from ._route import route, routed_bindings, unroute


def fused_q_indexer_rope_hadamard_quant(q_input: torch.Tensor, q_fp8: torch.Tensor,
                                        weight: torch.Tensor, weights_out: torch.Tensor,
                                        weight_scale: float, freqs_real: torch.Tensor,
                                        positions: torch.Tensor) -> None:
    _ops.dsv4_fused_q_indexer_rope_hadamard_quant(q_input, q_fp8, weight, weights_out,
                                                  weight_scale, freqs_real, positions)


def compress_norm_rope_store(input: torch.Tensor, plan: torch.Tensor, norm_weight: torch.Tensor,
                             norm_eps: float, freq_cis: torch.Tensor, out_loc: torch.Tensor,
                             kvcache: torch.Tensor, is_decode: bool, compress_ratio: int,
                             page_size: int, use_fp4: bool, preshuffle_size: int = 0,
                             use_bf16_store: bool = False) -> None:
    if isinstance(input, torch.Tensor) and input.dim() == 2 and input.shape[-1] != 128:
        raise ValueError(f"indexer_q: input: expected (N, 128) indexer keys, got "
                         f"{tuple(input.shape)} (the FlashMLA store is not a form of the "
                         "library)")
    _kside.compress_norm_rope_store(
        input, plan, norm_weight=norm_weight, norm_eps=norm_eps, freq_cis=freq_cis,
        out_loc=out_loc, kvcache=kvcache, page_size=page_size, use_fp4=use_fp4,
        is_decode=is_decode, compress_ratio=compress_ratio, preshuffle_size=preshuffle_size,
        use_bf16_store=use_bf16_store)


_NAME = "sgl_kernel"
_FUNCTIONS = ("fused_q_indexer_rope_hadamard_quant", "compress_norm_rope_store")


def _adapter(name):
    def adapter(module, **arguments):
        return globals()[name](**arguments)
    return adapter


def install() -> Dict[str, Optional[str]]:
    """Where no module ``sgl_kernel`` can be imported, registers this module as ``sgl_kernel``
    and returns ``{"sgl_kernel": None}``; otherwise routes the installed sgl_kernel's functions of
    the family and returns ``{"sgl_kernel.function": None if routed, else why not}``.
    Idempotent."""
    if sys.modules.get(_NAME) is sys.modules[__name__]:
        return {_NAME: None}
    try:
        found = _NAME in sys.modules or importlib.util.find_spec(_NAME) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        sys.modules[_NAME] = sys.modules[__name__]
        return {_NAME: None}
    return {f"{_NAME}.{f}": route((_NAME,), _NAME, f, _adapter(f)) for f in _FUNCTIONS}


def uninstall() -> int:
    """Undoes install(): removes the registration as ``sgl_kernel``, or restores the installed
    sgl_kernel's own functions; returns how many bindings were undone."""
    if sys.modules.get(_NAME) is sys.modules[__name__]:
        del sys.modules[_NAME]
        return 1
    return unroute((_NAME,))


def routed() -> Dict[str, str]:
    """The installed sgl_kernel's bindings now routed here (empty when registered as
    sgl_kernel)."""
    return routed_bindings((_NAME,))
