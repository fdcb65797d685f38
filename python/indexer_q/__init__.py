"""indexer_q: DeepSeek-V4 indexer query preparation as PyTorch operators.

``import indexer_q`` loads the compiled extension, which registers
``torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant`` (RoPE on the last 64 of 128
dims, a 128-point Hadamard transform, FP8 E4M3 quantization with the per-row scale folded
into the head weight). The dispatcher routes it by device: native kernels on CPU (and CUDA
when built with it), a composed ATen implementation everywhere else. All give the same bytes.

Every form of the op (a recipe of the library, listed in ``indexer_q.RECIPES``) is
``torch.ops.indexer_q.quant_q(recipe, ...)``; the Python functions ``quant_q``,
``fused_q_indexer_rope_first_quant`` (v32_fp8) and ``fused_q_indexer_rope_hadamard_fp4_quant``
(v4_fp4) allocate the outputs. FNUZ output: ``out_dtype=torch.float8_e4m3fnuz``. vLLM's call
``fused_indexer_q_rope_quant(positions, index_q, cos_sin_cache, index_weights, softmax_scale,
head_scale, use_fp4=False)`` runs the recipes ``vllm_v4_fp8`` / ``vllm_v4_mxfp4``.
"""

from ._ops import (
    RECIPES,
    RecipeInfo,
    available_backends,
    composed_fused_q_indexer_rope_hadamard_quant,
    composed_quant_q,
    fused_indexer_q_rope_quant,
    fused_q_indexer_rope_first_quant,
    fused_q_indexer_rope_hadamard_fp4_quant,
    fused_q_indexer_rope_hadamard_quant,
    library_path,
    quant_q,
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

__all__ = [
    "RECIPES",
    "RecipeInfo",
    "available_backends",
    "composed_fused_q_indexer_rope_hadamard_quant",
    "composed_quant_q",
    "fused_indexer_q_rope_quant",
    "fused_q_indexer_rope_first_quant",
    "fused_q_indexer_rope_hadamard_fp4_quant",
    "fused_q_indexer_rope_hadamard_quant",
    "library_path",
    "quant_q",
    "recipe_info",
    "recipes",
    "resolve_recipe",
    "KSIDE_RECIPES",
    "compress_norm_rope_store",
    "kside_store",
    "plan_positions_slots",
]
