"""Shared helpers for the indexer_q PyTorch tests.

Run from the repository root after `pip install --no-build-isolation .`:
    python -m pytest tests/python -q
(During development, INDEXER_Q_TORCH_LIBRARY=<build>/bindings/torch/_indexer_q_ops.so with
PYTHONPATH=python runs them against a CMake build tree.)
"""

import json
import os
import struct

import pytest
import torch

import indexer_q  # noqa: F401  (loads the operator library)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN_DIR = os.path.join(ROOT, "tests", "data", "golden")

CUDA_OK = torch.cuda.is_available()
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")),
]

NATIVE = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant
COMPOSED = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant_composed
OPS = {"native": NATIVE, "composed": COMPOSED}

# ---- a minimal safetensors reader (8-byte little-endian header size, JSON header, raw data) ----
_ST_DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "I32": torch.int32,
    "I64": torch.int64,
    "U8": torch.uint8,
    "F8_E4M3": torch.float8_e4m3fn,
}


def read_safetensors(path):
    """Returns ({name: tensor}, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        dtype = _ST_DTYPES[info["dtype"]]
        raw = bytearray(blob[base + lo : base + hi])
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        tensors[name] = t.view(dtype).reshape(info["shape"]).clone()
    return tensors, meta


def golden_files():
    return sorted(f for f in os.listdir(GOLDEN_DIR) if f.endswith(".safetensors"))


# ---- byte comparison ----------------------------------------------------------------------------
def fp8_bytes(t):
    return t.detach().cpu().contiguous().view(torch.uint8)


def assert_same_fp8(a, b, what=""):
    x, y = fp8_bytes(a), fp8_bytes(b)
    assert x.shape == y.shape
    diff = int((x != y).sum())
    assert diff == 0, f"{what}: {diff} of {x.numel()} fp8 bytes differ"


def assert_same_f32(a, b, what=""):
    """Bit-identical float32, except that any NaN equals any NaN."""
    x = a.detach().cpu().contiguous()
    y = b.detach().cpu().contiguous()
    assert x.shape == y.shape
    both_nan = torch.isnan(x) & torch.isnan(y)
    same_bits = x.view(torch.int32) == y.view(torch.int32)
    diff = int((~(same_bits | both_nan)).sum())
    assert diff == 0, f"{what}: {diff} of {x.numel()} float32 values differ"


def new_outputs(q_input, fill=True):
    """Preallocated outputs filled with a sentinel (0x5a bytes / -7.25) to detect writes."""
    b, h = q_input.shape[0], q_input.shape[1]
    q_fp8 = torch.empty((b, h, 128), dtype=torch.float8_e4m3fn, device=q_input.device)
    w_out = torch.empty((b, h, 1), dtype=torch.float32, device=q_input.device)
    if fill:
        q_fp8.view(torch.uint8).fill_(0x5A)
        w_out.fill_(-7.25)
    return q_fp8, w_out
