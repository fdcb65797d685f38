"""indexer_q: DeepSeek-V4 indexer query preparation as PyTorch operators.

``import indexer_q`` loads the compiled extension, which registers
``torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant`` (RoPE on the last 64 of 128
dims, a 128-point Hadamard transform, FP8 E4M3 quantization with the per-row scale folded
into the head weight). The dispatcher routes every op by device as the table of routing.py says
(``indexer_q.routing_table()``): native kernels on CPU (and CUDA when built with it), the Triton
kernel on other GPUs where it serves them, a composed ATen implementation everywhere else. All
give the same bytes. ``indexer_q.topk_overlap`` measures what the indexer is for: the top-k
overlap of the scores of a query / key recipe pair against float64 (docs/RECALL.md).

Every form of the op (a recipe of the library, listed in ``indexer_q.RECIPES``) is
``torch.ops.indexer_q.quant_q(recipe, ...)``; the Python functions ``quant_q``,
``fused_q_indexer_rope_first_quant`` (v32_fp8) and ``fused_q_indexer_rope_hadamard_fp4_quant``
(v4_fp4) allocate the outputs. FNUZ output: ``out_dtype=torch.float8_e4m3fnuz``. vLLM's call
``fused_indexer_q_rope_quant(positions, index_q, cos_sin_cache, index_weights, softmax_scale,
head_scale, use_fp4=False)`` runs the recipes ``vllm_v4_fp8`` / ``vllm_v4_mxfp4``
(``fused_indexer_q_rope_quant_cutedsl``: the numerics of vLLM's CuTe DSL kernel,
``vllm_v4_fp8_cutedsl``); vLLM's V3.2 call ``fused_indexer_q_rope_quant_v32(positions, q,
cos_sin_cache, weights, softmax_scale, head_scale, is_neox)`` the recipes
``vllm_v32_fp8_neox`` / ``vllm_v32_fp8_gptj``. SGLang's V4.1 calls
``index_q_rope_pack_weights(input, freqs_cis, positions, head_weights, weight_scale)``
(``sgl_v41_fp4_rope_pack``) and ``quantize_fp4_indexer_tensor(x, rne=True)``
(``sgl_v41_fp4_quant_rne``). SGLang's V3.2 unfused query path (RoPE, Hadamard, act_quant and the
head-gate weights) is ``dsa_indexer_q_unfused(q, positions, cos_sin_cache, weights,
softmax_scale, head_scale)`` (``sgl_v32_unfused_neox_hadamard_ue8m0``). The AMD gfx942 forms
(source only, no golden data): sgl-kernel's in-place HIP call
``dsv4_fused_q_indexer_rope_hadamard_quant(q_input, q_fp8, weight, weights_out, weight_scale,
freqs_real, positions, gfx942=True)`` (``sglang_v4_fp8_gfx942``) and vLLM's ROCm call
``fused_indexer_q_rope_quant(..., out_dtype=torch.float8_e4m3fnuz)`` (``vllm_v4_fp8_fnuz224``).
"""

# The package version; CMakeLists.txt's project(VERSION) is the same number (checked by
# tests/python/test_docs_examples.py), and pyproject.toml reads it from here.
__version__ = "0.1.0"

from ._ops import (
    RECIPES,
    RecipeInfo,
    composed_fused_q_indexer_rope_hadamard_quant,
    composed_quant_q,
    dsa_indexer_q_unfused,
    dsv4_fused_q_indexer_rope_hadamard_quant,
    fused_indexer_q_rope_quant,
    fused_indexer_q_rope_quant_cutedsl,
    fused_indexer_q_rope_quant_v32,
    fused_q_indexer_rope_first_quant,
    fused_q_indexer_rope_hadamard_fp4_quant,
    fused_q_indexer_rope_hadamard_quant,
    index_q_rope_pack_weights,
    library_path,
    quant_q,
    quantize_fp4_indexer_tensor,
    recipe_info,
    recipes,
    resolve_recipe,
)
from .kside import (
    KSIDE_RECIPES,
    compress_norm_rope_store,
    kside_store,
    plan_positions_slots,
)
from .recall import RecipeMismatchWarning, overlap_vs_context, pair_mismatch, topk_overlap
from .routing import available_backends, route
from .routing import table as routing_table

__all__ = [
    "__version__",
    "RECIPES",
    "RecipeInfo",
    "available_backends",
    "composed_fused_q_indexer_rope_hadamard_quant",
    "composed_quant_q",
    "dsa_indexer_q_unfused",
    "dsv4_fused_q_indexer_rope_hadamard_quant",
    "fused_indexer_q_rope_quant",
    "fused_indexer_q_rope_quant_cutedsl",
    "fused_indexer_q_rope_quant_v32",
    "fused_q_indexer_rope_first_quant",
    "fused_q_indexer_rope_hadamard_fp4_quant",
    "fused_q_indexer_rope_hadamard_quant",
    "index_q_rope_pack_weights",
    "library_path",
    "quant_q",
    "quantize_fp4_indexer_tensor",
    "recipe_info",
    "recipes",
    "resolve_recipe",
    "KSIDE_RECIPES",
    "compress_norm_rope_store",
    "kside_store",
    "plan_positions_slots",
    "route",
    "routing_table",
    "RecipeMismatchWarning",
    "overlap_vs_context",
    "pair_mismatch",
    "topk_overlap",
]


def _cuda_backend_warning(torch_cuda, cuda_takes_python_path):
    """The warning for a build without the CUDA backend under a torch with CUDA, else None."""
    if not torch_cuda or not cuda_takes_python_path:
        return None
    return (
        f"indexer_q {__version__} was built without its CUDA backend (no nvcc, or against a "
        f"CPU-only torch), but this torch has CUDA {torch_cuda}: CUDA tensors take the Triton "
        "kernel (or the composed ATen path), not the native CUDA kernel. For the native kernel, "
        "rebuild against this torch where nvcc is installed: "
        "`pip install --no-build-isolation --no-deps --force-reinstall .` "
        "(set INDEXER_Q_NO_CUDA_OK=1 to silence this warning)"
    )


def _warn_cuda_backend():
    import os
    import warnings

    import torch

    from . import routing

    if os.environ.get("INDEXER_Q_NO_CUDA_OK"):
        return
    msg = _cuda_backend_warning(torch.version.cuda, "cuda" not in routing.native_devices())
    if msg:
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


_warn_cuda_backend()


def _integrate_from_environment():
    """INDEXER_Q_INTEGRATE=sglang,vllm (or all): routes those engines' call sites of the family
    (indexer_q.integrations; docs/INTEGRATIONS.md). Unset: nothing is imported or routed."""
    import os

    if os.environ.get("INDEXER_Q_INTEGRATE", "").strip():
        from .integrations import _env

        _env.install_from_environment()


_integrate_from_environment()
