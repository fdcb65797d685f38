"""indexer_q: DeepSeek-V4 indexer query preparation as one PyTorch operator.

``import indexer_q`` loads the compiled extension, which registers
``torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant`` (RoPE on the last 64 of 128
dims, a 128-point Hadamard transform, FP8 E4M3 quantization with the per-row scale folded
into the head weight). The dispatcher routes it by device: native kernels on CPU (and CUDA
when built with it), a composed ATen implementation everywhere else. All give the same bytes.
"""

from ._ops import (
    available_backends,
    composed_fused_q_indexer_rope_hadamard_quant,
    fused_q_indexer_rope_hadamard_quant,
    library_path,
)

__all__ = [
    "available_backends",
    "composed_fused_q_indexer_rope_hadamard_quant",
    "fused_q_indexer_rope_hadamard_quant",
    "library_path",
]
