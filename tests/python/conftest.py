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
GOLDEN_VARIANTS_DIR = os.path.join(GOLDEN_DIR, "variants")
GOLDEN_VLLM_DIR = os.path.join(GOLDEN_DIR, "vllm")  # from vLLM's own kernels (docs/RECIPES.md)
# more engines' forms (docs/RECIPES.md steps 9-14): vLLM V3.2 and CuTe DSL, SGLang V4.1 FP4, SGLang's
# V3.2 unfused query path (docs/RECIPES.md 13)
GOLDEN_MORE_DIRS = ("vllm_v32", "vllm_cutedsl", "sgl_v41_fp4_rope_pack", "sgl_v41_fp4_quant",
                    "sgl_v32_unfused")

CUDA_OK = torch.cuda.is_available()
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA_OK, reason="no CUDA device")),
]

NATIVE = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant
COMPOSED = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant_composed
OPS = {"native": NATIVE, "composed": COMPOSED}

# The general operator (any recipe by name) and its composed twin.
QUANT = torch.ops.indexer_q.quant_q
QUANT_COMPOSED = torch.ops.indexer_q.quant_q_composed
QUANT_OPS = {"native": QUANT, "composed": QUANT_COMPOSED}
# the library's scalar reference (CPU tensors): what the others are compared with while a backend
# is being changed
QUANT_REFERENCE = torch.ops.indexer_q.quant_q_reference
RECIPES = indexer_q.RECIPES
# Recipes written from the engines' sources with no golden data (docs/RECIPES.md 14, the AMD gfx942
# forms; 15, vLLM's CuTe MXFP4 kernel, sm_100 only): checked against the library's scalar reference
# (the executable spec) only (the CuTe MXFP4 form also against the vllm_v4_mxfp4 files, finite
# rows). Every other recipe must have golden files (test_recipes.test_golden_cases_cover_every_recipe).
GFX942_RECIPES = ("sglang_v4_fp8_gfx942", "vllm_v4_fp8_fnuz224")
SOURCE_ONLY_RECIPES = GFX942_RECIPES + ("vllm_v4_mxfp4_cute",)

# ---- a minimal safetensors reader (8-byte little-endian header size, JSON header, raw data) ----
_ST_DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "I32": torch.int32,
    "I64": torch.int64,
    "U8": torch.uint8,
    "I8": torch.int8,
    "F8_E4M3": torch.float8_e4m3fn,
}
# (the variant files store q_fp4 as U8 and q_sf as I32)


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


def golden_variant_files():
    return sorted(f for f in os.listdir(GOLDEN_VARIANTS_DIR) if f.endswith(".safetensors"))


def golden_vllm_files():
    return sorted(f for f in os.listdir(GOLDEN_VLLM_DIR) if f.endswith(".safetensors"))


def golden_more_files():
    """Paths relative to GOLDEN_DIR of the golden files of the forms added through the recipe columns."""
    out = []
    for d in GOLDEN_MORE_DIRS:
        full = os.path.join(GOLDEN_DIR, d)
        out += [os.path.join(d, f) for f in sorted(os.listdir(full)) if f.endswith(".safetensors")]
    return out


def absent_args(recipe, weight, weights_out, freqs, positions, device="cpu"):
    """The operator's weight / weights_out / freqs / positions for `recipe`: a 0-element tensor
    (which the binding passes as the library's empty view) where the recipe takes none."""
    info = indexer_q.recipe_info(recipe)

    def empty(t):
        return torch.empty(0, device=t.device if isinstance(t, torch.Tensor) else device)

    if not info.weights:
        weight, weights_out = empty(weight), empty(weights_out)
    if not info.rope:
        freqs, positions = empty(freqs), empty(positions)
    return weight, weights_out, freqs, positions


def fnuz_twin(recipe):
    """The recipe's FNUZ twin, or None (FP4, already FNUZ, or none in the library: vllm_*)."""
    try:
        twin = indexer_q.resolve_recipe(recipe, torch.float8_e4m3fnuz)
    except ValueError:
        return None
    return twin if twin != recipe else None


def golden_recipe_cases():
    """(path relative to GOLDEN_DIR, recipe) for every golden file of every recipe: the file's own
    recipe (metadata `variant`, v4_fp8 when absent) and, for FP8 files, the recipe's FNUZ twin
    where the library has one (expected outputs derived from the FN ones, docs/RECIPES.md)."""
    cases = []
    for rel in (golden_files() + [os.path.join("variants", f) for f in golden_variant_files()]
                + [os.path.join("vllm", f) for f in golden_vllm_files()] + golden_more_files()):
        _, meta = read_safetensors_header(os.path.join(GOLDEN_DIR, rel))
        recipe = meta.get("variant", "v4_fp8")
        cases.append((rel, recipe))
        fnuz = fnuz_twin(recipe)
        if fnuz:
            cases.append((rel, fnuz))
    return cases


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header, header.get("__metadata__", {}) or {}


def load_golden(rel, recipe, device="cpu"):
    """Inputs (dict), weight_scale, head_scale, and the expected outputs of `recipe` for a golden
    file: (q bytes as uint8, q_sf or None, weights_out); q_sf is the FP4 block scales (int32) or,
    for a recipe with scale_out, the file's q_scale (float32, its shape). vLLM's files (metadata softmax_scale /
    head_scale): weight_scale = softmax_scale and head_scale as the Python floats vLLM passes
    (`*_arg`; their float32 roundings are the metadata values), weights_out (B, H)."""
    t, meta = read_safetensors(os.path.join(GOLDEN_DIR, rel))
    if "scale_arg" in meta:  # vLLM's CuTe kernel: ONE factor fl32(softmax_scale * head_scale)
        ws, hs = float(meta["scale_arg"]), 1.0
        assert torch.tensor(ws, dtype=torch.float32).item() == float(meta["scale_f32"])
    elif "softmax_scale_arg" in meta and "softmax_scale" not in meta:  # vLLM V3.2, SGLang V3.2
        ws, hs = float(meta["softmax_scale_arg"]), float(meta["head_scale_arg"])
        if "softmax_scale_f32" in meta:  # vLLM's files also name the float32 values
            assert torch.tensor(ws, dtype=torch.float32).item() == float(meta["softmax_scale_f32"])
            assert torch.tensor(hs, dtype=torch.float32).item() == float(meta["head_scale_f32"])
    elif "weight_scale_arg" in meta:  # SGLang V4.1 rope-pack
        ws, hs = float(meta["weight_scale_arg"]), 1.0
        assert torch.tensor(ws, dtype=torch.float32).item() == float(meta["weight_scale_f32"])
    elif "weight_scale" not in meta and "softmax_scale" not in meta:  # no weights
        ws, hs = 1.0, 1.0
    elif "softmax_scale" in meta:
        ws = float(meta.get("softmax_scale_arg", meta["softmax_scale"]))
        hs = float(meta.get("head_scale_arg", meta["head_scale"]))
        # the float32 values the kernels used
        assert torch.tensor(ws, dtype=torch.float32).item() == float(meta["softmax_scale"])
        assert torch.tensor(hs, dtype=torch.float32).item() == float(meta["head_scale"])
    else:
        ws, hs = float(meta["weight_scale"]), 1.0
    # the inputs a recipe does not take are None (no freqs / positions / weight in the file)
    inputs = {k: (t[k].to(device) if k in t else None)
              for k in ("q_input", "weight", "freqs", "positions")}
    info = indexer_q.recipe_info(recipe)
    b, h = t["q_input"].shape[0], t["q_input"].shape[1]
    w_want = t["weights_out"] if info.weights else None
    if info.fp4:  # SGLang V4.1 stores (B * H, 64) int8 and (B * H,): the same bytes
        return inputs, ws, hs, (t["q_fp4"].view(torch.uint8).reshape(b, h, 64),
                                t["q_sf"].reshape(b, h), w_want)
    q = t["q_fp8"].view(torch.uint8)
    w = t["weights_out"]
    if info.format == "e4m3fnuz":  # docs/RECIPES.md: same bytes except 0x80 -> 0x00, w * 2
        q = torch.where(q == 0x80, torch.zeros_like(q), q)
        w = w * 2.0
    return inputs, ws, hs, (q, t["q_scale"] if info.scale_out else None, w)


def new_recipe_outputs(recipe, q_input, raw=False, w2d=None, poison=True, sf2d=False):
    """Preallocated outputs of `recipe` filled with a sentinel (0x5a bytes / 0x5a5a5a5a / -7.25):
    (q_out, q_sf or None, weights_out); q_sf is (B, H) int32 for FP4, the float32 row scale
    q_scale (B, H, 1) (sf2d=True: (B, H)) for a recipe with scale_out. raw=True: FP8 codes into a
    uint8 tensor. weights_out is
    (B, H) for vLLM's recipes and (B, H, 1) for SGLang's, as quant_q allocates it; w2d=True /
    False forces (B, H) / (B, H, 1). poison=False leaves them uninitialized (inside a compiled
    graph: Inductor lowers the byte fill of an fp8 tensor to a Triton kernel with an fp8
    pointer, which the Triton of torch 2.11 + cu130 on the H200 fails to compile)."""
    info = indexer_q.recipe_info(recipe)
    b, h = q_input.shape[0], q_input.shape[1]
    dev = q_input.device
    q_sf = None
    if info.fp4:
        q_out = torch.empty((b, h, 64), dtype=torch.uint8, device=dev)
        q_sf = torch.full((b, h), 0x5A5A5A5A, dtype=torch.int32, device=dev)
    else:
        dt = torch.float8_e4m3fnuz if info.format == "e4m3fnuz" else torch.float8_e4m3fn
        q_out = torch.empty((b, h, 128), dtype=torch.uint8 if raw else dt, device=dev)
        if info.scale_out:
            q_sf = torch.full((b, h) if sf2d else (b, h, 1), -7.25, dtype=torch.float32,
                              device=dev)
    if not info.weights:  # the recipe writes no weights_out: a 0-element tensor (empty view)
        if not poison:
            return q_out, q_sf, torch.empty(0, device=dev)
        q_out.view(torch.uint8).fill_(0x5A)
        return q_out, q_sf, torch.empty(0, device=dev)
    two_d = info.weights_2d if w2d is None else w2d
    w_shape = (b, h) if two_d else (b, h, 1)
    if not poison:
        return q_out, q_sf, torch.empty(w_shape, dtype=torch.float32, device=dev)
    q_out.view(torch.uint8).fill_(0x5A)
    w_out = torch.full(w_shape, -7.25, dtype=torch.float32, device=dev)
    return q_out, q_sf, w_out


def assert_same_outputs(got, want, what=""):
    """got/want: (q_out, q_sf or None, weights_out); q compared as bytes, q_sf as int32 (FP4
    block scales) or as float32 bits (scale_out's q_scale, (B, H, 1) and (B, H) alike)."""
    assert_same_fp8(got[0], want[0], f"{what} q")
    if want[1] is not None or got[1] is not None:
        x, y = got[1].detach().cpu(), want[1].detach().cpu()
        assert x.dtype == y.dtype and x.dtype in (torch.int32, torch.float32), (x.dtype, y.dtype)
        if x.dtype == torch.float32:  # q_scale: its bits, whatever its (B, H, 1) / (B, H) shape
            x, y = x.reshape(-1).view(torch.int32), y.reshape(-1).view(torch.int32)
        assert x.shape == y.shape
        diff = int((x != y).sum())
        assert diff == 0, f"{what} q_sf: {diff} of {x.numel()} values differ"
    if want[2] is None or (got[2] is not None and got[2].numel() == 0 and want[2].numel() == 0):
        return  # a recipe without weights
    assert_same_f32(got[2], want[2], f"{what} weights_out")


def halves_table(interleaved):
    """An interleaved (cos, sin)-per-pair (max_pos, 64) table rearranged as [cos x32 | sin x32]."""
    return torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1).contiguous()


# ---- byte comparison ----------------------------------------------------------------------------
def fp8_bytes(t):
    return t.detach().cpu().contiguous().view(torch.uint8)


def assert_same_fp8(a, b, what=""):
    x, y = fp8_bytes(a), fp8_bytes(b)
    assert x.shape == y.shape
    diff = int((x != y).sum())
    assert diff == 0, f"{what}: {diff} of {x.numel()} fp8 bytes differ"


def assert_same_f32(a, b, what=""):
    """Bit-identical float32, NaN bits included (one NaN encoding per output: docs/RECIPES.md)."""
    x = a.detach().cpu().contiguous()
    y = b.detach().cpu().contiguous()
    assert x.shape == y.shape
    same_bits = x.view(torch.int32) == y.view(torch.int32)
    diff = int((~same_bits).sum())
    assert diff == 0, f"{what}: {diff} of {x.numel()} float32 values differ"


def nan_weight_bits(recipe):
    """The one NaN of weights_out (docs/RECIPES.md "NaN"), as an int32: 0x7fff0000 for the
    bf16-rounded fold, 0x7fffffff for every other recipe."""
    return 0x7FFF0000 if indexer_q.recipe_info(recipe).fold == "no_scale_bf16" else 0x7FFFFFFF


def new_outputs(q_input, fill=True):
    """Preallocated outputs filled with a sentinel (0x5a bytes / -7.25) to detect writes."""
    b, h = q_input.shape[0], q_input.shape[1]
    q_fp8 = torch.empty((b, h, 128), dtype=torch.float8_e4m3fn, device=q_input.device)
    w_out = torch.empty((b, h, 1), dtype=torch.float32, device=q_input.device)
    if fill:
        q_fp8.view(torch.uint8).fill_(0x5A)
        w_out.fill_(-7.25)
    return q_fp8, w_out
