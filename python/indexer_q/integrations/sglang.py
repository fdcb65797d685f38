"""SGLang 0.5.23: ``install()`` routes SGLang's own functions of the indexer family to indexer_q.

Routed (every device branch of each function: CUDA, HIP, XPU and the CPU):

| SGLang function | indexer_q |
| --- | --- |
| ``kernels.ops.attention.dsv4.norm_rope.fused_q_indexer_rope_hadamard_quant`` | ``v4_fp8`` (HIP on gfx942: ``sglang_v4_fp8_gfx942``) |
| ``kernels.ops.attention.dsv4.norm_rope.fused_q_indexer_rope_hadamard_fp4_quant`` | ``v4_fp4`` |
| ``kernels.ops.attention.dsv4.compress.compress_norm_rope_store`` (indexer cache) | ``v4_k_fp8`` / ``v4_k_fp4`` |
| ``kernels.ops.attention.dsv4.fp4_indexer_rope.index_q_rope_pack_weights`` | ``sgl_v41_fp4_rope_pack`` |
| ``kernels.ops.quantization.fp4_indexer_quant.quantize_fp4_indexer_tensor`` (rne=True) | ``sgl_v41_fp4_quant_rne`` |

Handed back to SGLang (one warning per reason): the calls listed in docs/INTEGRATIONS.md (HIP on
another architecture than gfx942, HIP FP4 paths, the main-KV layouts, the bf16 / two-pool /
pre-shuffled stores, ``rne=False``) and any call indexer_q's validator refuses.
"""

from __future__ import annotations


import torch

from .. import _ops
from .. import kside as _kside
from ._route import Unsupported, engine_entry_points, module_attr

ENGINE = ("sglang", "sgl_kernel")
VERSION = "0.5.23"
_DSV4 = "sglang.kernels.ops.attention.dsv4"


def _flag(module, name: str) -> bool:
    return bool(module_attr(module, name, False))


def _hip_arch(t: torch.Tensor) -> str:
    try:
        return str(torch.cuda.get_device_properties(t.device).gcnArchName)
    except Exception:
        return ""


def _q_fp8(module, q_input, weight, weight_scale, freqs_cis, positions):
    if not isinstance(q_input, torch.Tensor) or q_input.dim() != 3:
        raise Unsupported("q_input is not a (B, H, 128) tensor")
    if module_attr(module, "_is_hip", False):  # _flag, inline (one Python call less)
        # sgl-kernel's AOT HIP op; its gfx942 numerics are the library's sglang_v4_fp8_gfx942
        if not _hip_arch(q_input).startswith("gfx942"):
            raise Unsupported(f"HIP on {_hip_arch(q_input) or 'an unknown architecture'}: only "
                              "the gfx942 form is a recipe of the library")
        q = torch.empty(q_input.shape, dtype=torch.float8_e4m3fn, device=q_input.device)
        w = torch.empty((*q_input.shape[:-1], 1), dtype=torch.float32, device=q_input.device)
        _ops.dsv4_fused_q_indexer_rope_hadamard_quant(q_input, q, weight, w, float(weight_scale),
                                                      freqs_cis, positions, gfx942=True)
        return q, w
    # CUDA (the JIT kernel), XPU (sgl-kernel-xpu) and the CPU: the CUDA kernel's bytes
    return _ops.fused_q_indexer_rope_hadamard_quant(q_input, weight, weight_scale, freqs_cis,
                                                    positions)


def _q_fp4(module, q_input, weight, weight_scale, freqs_cis, positions):
    if _flag(module, "_is_hip"):
        raise Unsupported("HIP: SGLang has no FP4 query path there (it raises)")
    if not isinstance(q_input, torch.Tensor) or q_input.dim() != 3:
        raise Unsupported("q_input is not a (B, H, 128) tensor")
    return _ops.fused_q_indexer_rope_hadamard_fp4_quant(q_input, weight, weight_scale, freqs_cis,
                                                        positions)


def _kstore(module, kv, plan, norm_weight, norm_eps, freq_cis, out_loc, kvcache, page_size,
            use_fp4=False, bf16_store=False, kvcache_scale=None, rope_cache=None,
            fp4_k_write_metadata=None, layout=None, fp8_2buff=False, kvcache_rope=None):
    kvl = module_attr(module, "KVLayout")
    if kvl is not None and kvl.parse(layout) is not kvl.V4:
        raise Unsupported(f"layout {layout}: the V4.1 main-KV layouts are not the indexer cache")
    if not isinstance(kv, torch.Tensor) or kv.dim() != 2 or kv.shape[-1] != 128:
        raise Unsupported("kv is not (N, 128): the main-KV store is not a form of the library")
    if bf16_store:
        raise Unsupported("bf16_store=True is not a form of the library")
    if fp8_2buff:
        raise Unsupported("fp8_2buff=True (the two-pool latent store) is not a form of the library")
    is_hip = module_attr(module, "is_hip")
    if callable(is_hip) and is_hip():
        if use_fp4:
            raise Unsupported("HIP FP4: AITER's split-scale cache is not a form of the library")
        can = module_attr(module, "aiter_can_use_preshuffle_paged_mqa")
        if callable(can) and can():
            raise Unsupported("HIP with AITER's pre-shuffled (tiled) FP8 cache layout")
    # CUDA casts norm_weight to kv's dtype; XPU passes plan[1], is_decode and compress_ratio:
    # the wrapper takes the plan object and does the same conversions.
    _kside.compress_norm_rope_store(
        kv, plan, norm_weight=norm_weight, norm_eps=norm_eps, freq_cis=freq_cis,
        out_loc=out_loc, kvcache=kvcache, page_size=page_size, use_fp4=use_fp4)
    return None


def _rope_pack(module, input, freqs_cis, positions, head_weights, weight_scale):
    return _ops.index_q_rope_pack_weights(input, freqs_cis, positions, head_weights, weight_scale)


def _fp4_quant(module, x, rne=False):
    if not rne:
        raise Unsupported("rne=False (threshold rounding, ties to the smaller magnitude) is not "
                          "a recipe of the library; rne=True is")
    return _ops.quantize_fp4_indexer_tensor(x, rne=True)


#: (module, function, adapter) of every routed SGLang function
TARGETS = (
    (f"{_DSV4}.norm_rope", "fused_q_indexer_rope_hadamard_quant", _q_fp8),
    (f"{_DSV4}.norm_rope", "fused_q_indexer_rope_hadamard_fp4_quant", _q_fp4),
    (f"{_DSV4}.compress", "compress_norm_rope_store", _kstore),
    (f"{_DSV4}.fp4_indexer_rope", "index_q_rope_pack_weights", _rope_pack),
    ("sglang.kernels.ops.quantization.fp4_indexer_quant", "quantize_fp4_indexer_tensor",
     _fp4_quant),
)


install, install_on_import, uninstall, routed = engine_entry_points(ENGINE, TARGETS, "SGLang")
