"""vLLM 0.33.0: ``install()`` routes vLLM's own functions of the indexer family to indexer_q.

Routed (every device branch of each function):

| vLLM function | indexer_q |
| --- | --- |
| ``models.deepseek_v4.common.ops.fused_indexer_q.fused_indexer_q_rope_quant`` (V4, V4.1) | ``vllm_v4_fp8`` / ``vllm_v4_mxfp4``; with the CuTe DSL importable ``vllm_v4_fp8_cutedsl`` / ``vllm_v4_mxfp4_cute`` (source only); ROCm e4m3fnuz ``vllm_v4_fp8_fnuz224`` |
| ``models.deepseek_v4.cpu.cpu_sparse._fused_indexer_q_rope_quant_cpu`` | ``vllm_v4_fp8`` |
| ``model_executor.layers.sparse_attn_indexer.fused_indexer_q_rope_quant`` (V3.2) | ``vllm_v32_fp8_neox`` / ``vllm_v32_fp8_gptj`` |

Handed back to vLLM (one warning per reason): bf16 weights on the paths where vLLM asserts
float32, V3.2 on e4m3fnuz platforms, and any call indexer_q's validator
refuses. vLLM's key side (its compressor's Triton / CuTe stores) is not a form of the library
and stays vLLM's.
"""

from __future__ import annotations


import torch

from .. import _ops
from ._route import Unsupported, engine_entry_points, module_attr

ENGINE = ("vllm",)
VERSION = "0.33.0"


def _platform(module):
    return module_attr(module, "current_platform")


def _fp8_dtype(module):
    p = _platform(module)
    return p.fp8_dtype() if p is not None else torch.float8_e4m3fn


def _is(module, what: str) -> bool:
    p = _platform(module)
    f = getattr(p, what, None) if p is not None else None
    return bool(f()) if callable(f) else False


def _v4(module, positions, index_q, index_q_cos_sin_cache, index_weights,
        index_weights_softmax_scale, index_weights_head_scale, use_fp4=False,
        weights_out_dtype=torch.float32):
    args = (positions, index_q, index_q_cos_sin_cache, index_weights,
            index_weights_softmax_scale, index_weights_head_scale)
    has_cutedsl = module_attr(module, "has_cutedsl")
    cute = bool(has_cutedsl()) if callable(has_cutedsl) else False
    if use_fp4:
        if cute:  # vllm_v4_mxfp4_cute (source only: no golden data)
            return _ops.fused_indexer_q_rope_quant_cutedsl(*args, use_fp4=True,
                                                           weights_out_dtype=weights_out_dtype)
        if _is(module, "is_xpu") and weights_out_dtype != torch.float32:
            raise Unsupported("XPU MXFP4 with non-float32 weights (vLLM asserts float32)")
        return _ops.fused_indexer_q_rope_quant(*args, use_fp4=True,
                                               weights_out_dtype=weights_out_dtype)
    if weights_out_dtype != torch.float32:
        raise Unsupported("FP8 with non-float32 weights (vLLM asserts float32)")
    # the platform read once (_fp8_dtype and _is, inline: fewer Python calls), its methods called
    # as they would call them, in the same order
    p = module_attr(module, "current_platform")
    fp8 = p.fp8_dtype() if p is not None else torch.float8_e4m3fn
    if cute:
        if fp8 != torch.float8_e4m3fn:
            raise Unsupported(f"the CuTe DSL FP8 kernel with {fp8}")
        return _ops.fused_indexer_q_rope_quant_cutedsl(*args)
    if p is None:
        xpu_or_cpu = False
    else:
        f = getattr(p, "is_xpu", None)
        xpu_or_cpu = bool(f()) if callable(f) else False
        if not xpu_or_cpu:
            f = getattr(p, "is_cpu", None)
            xpu_or_cpu = bool(f()) if callable(f) else False
    if xpu_or_cpu:
        if fp8 != torch.float8_e4m3fn:
            raise Unsupported(f"the XPU / CPU kernel with {fp8}")
        return _ops.fused_indexer_q_rope_quant(*args)
    # the Triton kernel (CUDA without the CuTe DSL, ROCm): e4m3fn, or e4m3fnuz with max 224
    if fp8 not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        raise Unsupported(f"fp8 dtype {fp8}")
    if fp8 is torch.float8_e4m3fn:  # the recipe's own dtype: the same call without out_dtype
        return _ops.fused_indexer_q_rope_quant(*args)
    return _ops.fused_indexer_q_rope_quant(*args, out_dtype=fp8)


def _v4_cpu(module, positions, index_q, index_q_cos_sin_cache, index_weights,
            index_weights_softmax_scale, index_weights_head_scale):
    if _fp8_dtype(module) != torch.float8_e4m3fn:
        raise Unsupported(f"the CPU kernel with {_fp8_dtype(module)}")
    return _ops.fused_indexer_q_rope_quant(positions, index_q, index_q_cos_sin_cache,
                                           index_weights, index_weights_softmax_scale,
                                           index_weights_head_scale)


def _v32(module, positions, q, cos_sin_cache, weights, softmax_scale, head_scale, is_neox):
    if _fp8_dtype(module) != torch.float8_e4m3fn:
        raise Unsupported(f"V3.2 with {_fp8_dtype(module)}: no recipe of the library")
    if not isinstance(q, torch.Tensor) or q.dtype != torch.bfloat16:
        raise Unsupported("q is not bf16 (vLLM asserts bf16)")
    return _ops.fused_indexer_q_rope_quant_v32(positions, q, _ops._vllm_table(cos_sin_cache),
                                               weights, softmax_scale, head_scale,
                                               is_neox=bool(is_neox))


#: (module, function, adapter) of every routed vLLM function
TARGETS = (
    ("vllm.models.deepseek_v4.common.ops.fused_indexer_q", "fused_indexer_q_rope_quant", _v4),
    ("vllm.models.deepseek_v4.cpu.cpu_sparse", "_fused_indexer_q_rope_quant_cpu", _v4_cpu),
    ("vllm.model_executor.layers.sparse_attn_indexer", "fused_indexer_q_rope_quant", _v32),
)


install, install_on_import, uninstall, routed = engine_entry_points(ENGINE, TARGETS, "vLLM")
