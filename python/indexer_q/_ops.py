"""Loads the compiled operator library and defines the Python API around it."""

from __future__ import annotations

import glob
import os
from typing import Dict, Optional, Tuple

import torch

_OP = "fused_q_indexer_rope_hadamard_quant"
_QUALNAME = "indexer_q::" + _OP
_QUALNAME_COMPOSED = _QUALNAME + "_composed"


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


# ---- fake (meta) implementations: the op writes its two outputs in place and returns nothing,
# so tracing (torch.compile, FakeTensor, meta tensors) needs no shape logic.
@torch.library.register_fake(_QUALNAME)
def _fake(q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions, enable_pdl=False):
    return None


@torch.library.register_fake(_QUALNAME_COMPOSED)
def _fake_composed(
    q_input, q_fp8, weight, weights_out, weight_scale, freqs, positions, enable_pdl=False
):
    return None


def _freqs_table(freqs_cis: torch.Tensor) -> torch.Tensor:
    """The (max_pos, 64) float32 (cos, sin) table from freqs_cis or the table itself."""
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
        return torch.view_as_real(freqs_cis).view(freqs_cis.shape[0], 64)
    return freqs_cis  # the real (max_pos, 64) view; the library checks it


def _outputs(q_input: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(q_input, torch.Tensor):
        raise TypeError(f"indexer_q: q_input: expected a tensor, got {type(q_input).__name__}")
    if q_input.dim() != 3:
        raise ValueError(f"indexer_q: q_input: expected 3 dims (B, H, 128), got {q_input.dim()}")
    b, h, d = q_input.shape
    q_fp8 = torch.empty((b, h, d), dtype=torch.float8_e4m3fn, device=q_input.device)
    weights_out = torch.empty((b, h, 1), dtype=torch.float32, device=q_input.device)
    return q_fp8, weights_out


def fused_q_indexer_rope_hadamard_quant(
    q_input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    *,
    enable_pdl: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Allocates and returns ``(q_fp8, weights_out)``.

    q_input (B, H, 128) bf16/fp16/fp32; weight (B, H) same dtype (stride(1) = 1, stride(0) >= H);
    weight_scale a float; freqs_cis the complex64 (max_pos, 32) RoPE table or its float32
    (max_pos, 64) real view; positions (B,) int32/int64. Returns q_fp8 (B, H, 128)
    float8_e4m3fn and weights_out (B, H, 1) float32. ``enable_pdl`` is used by the CUDA
    kernel only (programmatic dependent launch).
    """
    q_fp8, weights_out = _outputs(q_input)
    torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant(
        q_input, q_fp8, weight, weights_out, float(weight_scale), _freqs_table(freqs_cis),
        positions, enable_pdl,
    )
    return q_fp8, weights_out


def composed_fused_q_indexer_rope_hadamard_quant(
    q_input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Same as :func:`fused_q_indexer_rope_hadamard_quant`, always through the composed ATen
    implementation (the one XPU and other devices get), on any device, CPU included."""
    q_fp8, weights_out = _outputs(q_input)
    torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant_composed(
        q_input, q_fp8, weight, weights_out, float(weight_scale), _freqs_table(freqs_cis),
        positions,
    )
    return q_fp8, weights_out


def _has_kernel(key: str) -> Optional[bool]:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(_QUALNAME, key))
    except Exception:  # private API: report "unknown" rather than guess
        return None


def available_backends() -> Dict[str, str]:
    """Which implementation each device type gets from the dispatcher in this build.

    "native": a kernel of the C++ library (CPU backend; CUDA backend when built with CUDA).
    "composed": the composed ATen implementation (the CompositeExplicitAutograd fallback).
    "other" stands for any device type not listed.
    """
    out: Dict[str, str] = {}
    for device, key in (("cpu", "CPU"), ("cuda", "CUDA")):
        has = _has_kernel(key)
        out[device] = "unknown" if has is None else ("native" if has else "composed")
    out["xpu"] = "composed"
    out["other"] = "composed"
    return out
