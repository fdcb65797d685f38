"""Loads the compiled operator library and defines the Python API around it."""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple, Union

import torch

# The glue shared with the key side (_glue.py): the library (loaded there), the operators'
# descriptions and their fakes, the argument conversions.
from . import _glue
from ._glue import _find_library, library_path  # noqa: F401  (the package's library_path)

# torch names read on every call, bound once (a module global is one dict read; torch.float32 is
# two lookups).
_EMPTY = torch.empty
_F32 = torch.float32
_I32 = torch.int32
_FP8 = torch.float8_e4m3fn
_C64 = torch.complex64

_check_one_device = _glue.check_one_device
_Q_ABSENT = _glue.OPS[0].absent_ok
# quant_q's fake (registered by _glue for quant_q, quant_q_composed and quant_q_reference; also
# called by quant_q_check's and quant_q_triton's fakes in triton_dispatch.py)
_fake_q = _glue.FAKES["quant_q"]


@torch.library.register_fake("indexer_q::quant_q_alloc")
def _fake_quant_q_alloc(recipe, q_input, weight, weight_scale, freqs, positions, out_kind=0,
                      weights_dims=3, enable_pdl=True, head_scale=1.0, *, side_inputs_ready=False):
    # quant_q with its outputs allocated (op.cpp quant_q_alloc_kernel): the same shapes and dtypes
    _check_one_device(("q_input", "weight", "freqs", "positions"),
                      (q_input, weight, freqs, positions), _Q_ABSENT)
    f = _FACTS[_glue.recipe_at(RECIPES, recipe)]  # the recipe's index in the library's list
    if out_kind >= 0 and out_kind & 4 and q_input.dim() == 2:  # rows: (N, D) read as (N, 1, D)
        q_input = q_input.unsqueeze(1)
    if q_input.dim() != 3:
        raise RuntimeError(f"indexer_q: q_input: expected 3 dims (B, H, 128), got {q_input.dim()}")
    b, h = q_input.shape[0], q_input.shape[1]
    if out_kind not in (0, 1, 2, 4, 5, 6):
        raise RuntimeError(f"indexer_q: out_kind: expected 0 (the recipe's dtype), 1 (uint8) or "
                           f"2 (int8), plus 4 for q_out as (B * H, 128 or 64) rows and q_sf as "
                           f"(B * H,), got {out_kind}")
    dtype = {0: f.out_dtype, 1: torch.uint8, 2: torch.int8}[out_kind & 3]
    rows = bool(out_kind & 4)
    q_out = q_input.new_empty((b * h, f.out_dim) if rows else (b, h, f.out_dim), dtype=dtype)
    sf_shape = (b * h,) if rows else (b, h) if f.fp4 else (b, h, 1)
    q_sf = (q_input.new_empty(sf_shape, dtype=torch.int32 if f.fp4 else torch.float32)
            if f.fp4 or f.scale_out else None)
    if weights_dims not in (2, 3):
        raise RuntimeError(f"indexer_q: weights_dims: expected 2 ((B, H)) or 3 ((B, H, 1)), got "
                           f"{weights_dims}")
    w_out = (q_input.new_empty((b, h) if weights_dims == 2 else (b, h, 1), dtype=torch.float32)
             if f.weights else None)
    return q_out, q_sf, w_out


# ---- the recipes: the library's list (include/indexer_q/recipes.inc), read from the library ------
_BOOLS = {"true": True, "false": False}


_recipe_table = _glue.recipe_table
_TABLE = _recipe_table(0)
_KTABLE = _recipe_table(1)


def _recipe_columns() -> Tuple[Tuple[str, type], ...]:
    """The library's recipe columns (include/indexer_q/recipe_columns.inc) in its order, as
    (name, type) pairs read from the first recipe's row: bool for a flag (its value "true" /
    "false"), str for an enum column (its value's name)."""
    cols = []
    for c in _TABLE[0][1]:
        col, val = c.split("=", 1)
        cols.append((col, bool if val in _BOOLS else str))
    return tuple(cols)


# The three list operators, served from the tables (each call returns a new list; no string
# crosses the stable ABI).
_ROWS: Dict[str, Tuple[str, ...]] = dict(_TABLE)
_LIB = torch.library.Library("indexer_q", "IMPL")


def _recipes_op():
    return [name for name, _ in _TABLE]


def _recipe_info_op(recipe):
    row = _ROWS.get(recipe)
    if row is None:
        raise RuntimeError(f"indexer_q: recipe: unknown recipe '{recipe}'; expected one of "
                           f"{', '.join(n for n, _ in _TABLE)}")
    return list(row)


def _krecipes_op():
    return [name for name, _ in _KTABLE]


# No tensor arguments: the dispatcher takes the CompositeExplicitAutograd kernel.
_LIB.impl("recipes", _recipes_op, "CompositeExplicitAutograd")
_LIB.impl("recipe_info", _recipe_info_op, "CompositeExplicitAutograd")
_LIB.impl("krecipes", _krecipes_op, "CompositeExplicitAutograd")


_COLUMNS = _recipe_columns()

# The NamedTuple type of a recipe's descriptor, its fields the library's columns (so a column
# added to the library needs no edit here): name, rope_dims, rope_pairs, rope_fma, freqs_layout,
# hadamard, bf16_after_rope, bf16_after_hadamard, format, quant, fold, scale_out at the time of
# writing.
_RecipeInfoBase = NamedTuple("_RecipeInfoBase", [("name", str)] + list(_COLUMNS))


class RecipeInfo(_RecipeInfoBase):
    """The library's descriptor of one recipe (``indexer_q::Recipe``): ``name`` and one field per
    column of the library (include/indexer_q/recipe_columns.inc, in its order), read through
    ``torch.ops.indexer_q.recipe_info``; the values are the library's own names of the column
    values (``value_name`` of include/indexer_q/indexer_q.h: "last64", "neox", "halves",
    "e4m3fn", "sglang", "times_scale", ...), flags as bool. Nothing here retypes them: the fields
    are created at import from the library's column list. The columns (see docs/RECIPES.md):

    rope_dims ("last64", "first64", "none"), rope_pairs ("adjacent", "neox"), rope_fma
    ("x0_s", "x1_c": the second rotated value is fma(x0, s, x1*c) or fma(x1, c, x0*s)),
    freqs_layout ("interleaved", "halves"), hadamard, bf16_after_rope, bf16_after_hadamard
    (bools), format ("e4m3fn", "e4m3fnuz", "e2m1"), quant ("sglang", "vllm", "vllm_cute",
    "vllm_v32", "sglang_ue8m0", "sglang_224", "vllm_fnuz224", "fp4_rne", "fp4_two_stage"), fold ("times_scale", "no_scale",
    "scale_then_two_factors", "two_factors", "head_scale_first", "no_scale_bf16", "none"),
    scale_out (bool: the FP8 row scale is also written, as q_scale)."""

    __slots__ = ()

    @property
    def fp4(self) -> bool:
        """E2M1 codes (q_fp4 (B, H, 64)) with block scales (q_sf (B, H) int32)."""
        return self.format == "e2m1"

    @property
    def vllm(self) -> bool:
        """One of vLLM's forms (its quantizers: "vllm", "vllm_cute", "vllm_v32", and the ROCm
        form's "vllm_fnuz224")."""
        return self.quant.startswith("vllm")

    @property
    def rope(self) -> bool:
        """Whether the recipe reads freqs and positions (RoPE); without, pass None."""
        return self.rope_dims != "none"

    @property
    def weights(self) -> bool:
        """Whether the recipe reads weight and writes weights_out; without, pass None."""
        return self.fold != "none"

    @property
    def two_factors(self) -> bool:
        """Whether weights_out takes head_scale (the two-factor folds of vLLM's forms, and
        SGLang's V3.2 unfused head_scale_first); weight_scale is then the softmax scale."""
        return self.fold in ("scale_then_two_factors", "two_factors", "head_scale_first")

    @property
    def weights_2d(self) -> bool:
        """The engine's weights_out shape is (B, H) (every engine but SGLang's V4 forms, its
        gfx942 form and its V3.2 unfused path, which allocate (B, H, 1)): what quant_q
        allocates."""
        return self.weights and self.quant not in ("sglang", "sglang_224", "sglang_ue8m0")

    @property
    def q_scale_out(self) -> bool:
        """Whether the call writes a second output, quant_q's ``q_sf`` argument: the FP4 block
        scales ((B, H) int32) or, with scale_out, the FP8 row scale q_scale ((B, H, 1) or (B, H)
        float32). quant_q then returns ``((q, q_sf), weights_out)``."""
        return self.fp4 or self.scale_out


def _load_recipes() -> Dict[str, RecipeInfo]:
    out: Dict[str, RecipeInfo] = {}
    fields = tuple(c for c, _ in _COLUMNS)
    for name, row in _TABLE:
        pairs = [c.split("=", 1) for c in row]
        if tuple(c for c, _ in pairs) != fields:
            raise ImportError(
                f"indexer_q: recipe_info({name!r}) has the columns {[c for c, _ in pairs]}, the "
                f"first recipe {list(fields)}: the library's column list is inconsistent")
        vals = [_BOOLS[v] if t is bool else v for (_, v), (_, t) in zip(pairs, _COLUMNS)]
        out[name] = RecipeInfo(name, *vals)
    return out


_RECIPES: Dict[str, RecipeInfo] = _load_recipes()
#: Every recipe name of the library, in its list order (v4_fp8 first).
RECIPES: Tuple[str, ...] = tuple(_RECIPES)


def _fnuz_twin(info: RecipeInfo) -> Optional[str]:
    """The recipe computing the same form with e4m3fnuz output, if the library has one. Only
    SGLang's quantizer has such twins (the FN result with -0 written as +0, weights_out doubled);
    an e4m3fnuz recipe of another quantizer (vLLM's ROCm form, ``vllm_v4_fp8_fnuz224``) is a form
    of its own, never the twin of an FN recipe."""
    if info.quant != "sglang":
        return None
    for other in _RECIPES.values():
        if (other.format == "e4m3fnuz" and other.quant == "sglang"
                and other._replace(name="", format="") == info._replace(name="", format="")):
            return other.name
    return None


_FNUZ_OF: Dict[str, str] = {
    n: t for n, i in _RECIPES.items() if i.format == "e4m3fn" for t in [_fnuz_twin(i)] if t
}


def recipes() -> Tuple[str, ...]:
    """Every recipe name the library runs (its list include/indexer_q/recipes.inc)."""
    return RECIPES


def recipe_info(recipe: str) -> RecipeInfo:
    """The library's descriptor of a recipe."""
    return _RECIPES[_check_recipe(recipe)]


def _check_recipe(recipe) -> str:
    if not isinstance(recipe, str):
        raise TypeError(f"indexer_q: recipe: expected a str, got {type(recipe).__name__}")
    if recipe not in _RECIPES:
        raise ValueError(
            f"indexer_q: recipe: unknown recipe {recipe!r}; expected one of {', '.join(RECIPES)}")
    return recipe


def resolve_recipe(recipe: str, out_dtype: Optional[torch.dtype] = None) -> str:
    """The recipe that writes ``out_dtype``: an e4m3fn FP8 recipe with
    ``out_dtype=torch.float8_e4m3fnuz`` becomes its ``<recipe>_fnuz`` twin (ValueError naming
    out_dtype when the library has none, as for the ``vllm_*`` recipes and
    ``sglang_v4_fp8_gfx942``); otherwise the recipe itself (uint8 / int8 outputs take the
    recipe's raw codes). Twins exist for SGLang's quantizer only: vLLM's ROCm form
    ``vllm_v4_fp8_fnuz224`` (different arithmetic, not a re-encoding of ``vllm_v4_fp8``) is
    selected by its name, or by ``fused_indexer_q_rope_quant(..., out_dtype=float8_e4m3fnuz)``."""
    recipe = _check_recipe(recipe)
    if out_dtype == torch.float8_e4m3fnuz and _RECIPES[recipe].format == "e4m3fn":
        if recipe not in _FNUZ_OF:  # e.g. vLLM's forms: the library has no FNUZ twin of them
            others = sorted(n for n, i in _RECIPES.items()
                            if i.format == "e4m3fnuz" and n not in _FNUZ_OF.values())
            hint = (f"; its other e4m3fnuz recipes ({', '.join(others)}) are forms of their own, "
                    "selected by name") if others else ""
            raise ValueError(
                f"indexer_q: out_dtype: recipe {recipe} has no float8_e4m3fnuz form in the "
                f"library (its FNUZ recipes: {', '.join(sorted(_FNUZ_OF.values())) or 'none'})"
                + hint)
        return _FNUZ_OF[recipe]
    return recipe


_freqs_table = _glue.freqs_table
_flag = _glue.flag


def _outputs(q_input: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(q_input, torch.Tensor):
        raise TypeError(f"indexer_q: q_input: expected a tensor, got {type(q_input).__name__}")
    if q_input.dim() != 3:
        raise ValueError(f"indexer_q: q_input: expected 3 dims (B, H, 128), got {q_input.dim()}")
    b, h, d = q_input.shape
    dev = q_input.device
    # sizes as separate ints, not a tuple: torch.empty parses them faster (about 0.4 us a call)
    return (_EMPTY(b, h, d, dtype=_FP8, device=dev), _EMPTY(b, h, 1, dtype=_F32, device=dev))


def fused_q_indexer_rope_hadamard_quant(
    q_input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    *,
    out_dtype: Optional[torch.dtype] = None,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Allocates and returns ``(q_fp8, weights_out)``.

    q_input (B, H, 128) bf16/fp16/fp32; weight (B, H) bf16/fp16/fp32, any of them whatever q_input's
    dtype (stride(1) = 1, stride(0) >= H);
    weight_scale a float; freqs_cis the complex64 (max_pos, 32) RoPE table or its float32
    (max_pos, 64) real view; positions (B,) int32/int64. Returns q_fp8 (B, H, 128)
    float8_e4m3fn and weights_out (B, H, 1) float32. ``enable_pdl`` is used by the CUDA
    kernel only (programmatic dependent launch on sm_90+; on by default, False turns it off).
    ``side_inputs_ready`` (default False): the CUDA kernel's opt-in to read positions, freqs and
    weight before the previous kernel has finished (docs/TORCH.md states when that is safe);
    accepted and ignored on every other path. ``out_dtype=torch.float8_e4m3fnuz`` gives the
    FNUZ result (recipe ``v4_fp8_fnuz``: q_fp8 float8_e4m3fnuz, weights_out doubled).
    """
    if out_dtype is not None:
        return quant_q("v4_fp8", q_input, weight, weight_scale, freqs_cis, positions,
                       out_dtype=out_dtype, enable_pdl=enable_pdl,
                       side_inputs_ready=side_inputs_ready)
    if type(weight_scale) is not float:
        weight_scale = _scalar("weight_scale", weight_scale)
    cis = None
    if type(freqs_cis) is not torch.Tensor or freqs_cis.dtype is not _F32:
        if (type(freqs_cis) is torch.Tensor and freqs_cis.dtype is _C64
                and side_inputs_ready is False):
            cis = freqs_cis  # SGLang's complex table: quant_q_alloc reads it (no view op)
        else:
            freqs_cis = _freqs_table(freqs_cis)
    if isinstance(q_input, torch.Tensor) and (q_input.is_cpu or (_ALLOC_CUDA and q_input.is_cuda)):
        # a device with a native kernel: the binding allocates the outputs (quant_q_alloc)
        if q_input.dim() != 3:
            raise ValueError(
                f"indexer_q: q_input: expected 3 dims (B, H, 128), got {q_input.dim()}")
        if side_inputs_ready is False:
            try:
                # out_kind 0, weights_dims 3 and enable_pdl True are the operator's defaults: not
                # passed (each non-tensor argument costs the call ~1.5k instructions)
                if enable_pdl is True:
                    q_fp8, _, weights_out = _OP_QUANT_Q_ALLOC(_V4_INDEX, q_input, weight,
                                                            weight_scale, freqs_cis, positions)
                else:
                    q_fp8, _, weights_out = _OP_QUANT_Q_ALLOC(_V4_INDEX, q_input, weight,
                                                            weight_scale, freqs_cis, positions,
                                                            0, 3, enable_pdl)
            except RuntimeError:
                if cis is None:
                    raise
                # the call with the table's float32 view: freqs_cis's own error (TypeError /
                # ValueError), or the same call as always
                return fused_q_indexer_rope_hadamard_quant(
                    q_input, weight, weight_scale, _freqs_table(cis), positions,
                    enable_pdl=enable_pdl)
        else:
            q_fp8, _, weights_out = _OP_QUANT_Q_ALLOC(
                _V4_INDEX, q_input, weight, weight_scale, freqs_cis, positions, 0, 3, enable_pdl,
                side_inputs_ready=_flag("side_inputs_ready", side_inputs_ready))
        return q_fp8, weights_out
    if cis is not None:
        freqs_cis = _freqs_table(cis)
    q_fp8, weights_out = _outputs(q_input)
    if side_inputs_ready is False:
        _OP_V4(q_input, q_fp8, weight, weights_out, weight_scale, freqs_cis, positions, enable_pdl)
    else:
        _OP_V4(q_input, q_fp8, weight, weights_out, weight_scale, freqs_cis, positions, enable_pdl,
               side_inputs_ready=_flag("side_inputs_ready", side_inputs_ready))
    return q_fp8, weights_out


def composed_fused_q_indexer_rope_hadamard_quant(
    q_input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    *,
    side_inputs_ready: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Same as :func:`fused_q_indexer_rope_hadamard_quant`, always through the composed ATen
    implementation (the one XPU and other devices get), on any device, CPU included.
    ``side_inputs_ready`` is accepted (a bool) and ignored: the composed path reads every input
    in stream order."""
    q_fp8, weights_out = _outputs(q_input)
    _OP_V4_COMPOSED(q_input, q_fp8, weight, weights_out, _scalar("weight_scale", weight_scale),
                    _freqs_table(freqs_cis), positions, True,
                    side_inputs_ready=_flag("side_inputs_ready", side_inputs_ready))
    return q_fp8, weights_out


def dsv4_fused_q_indexer_rope_hadamard_quant(
    q_input: torch.Tensor,
    q_fp8: torch.Tensor,
    weight: torch.Tensor,
    weights_out: torch.Tensor,
    weight_scale: float,
    freqs_real: torch.Tensor,
    positions: torch.Tensor,
    *,
    gfx942: bool = False,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
) -> None:
    """sgl-kernel's ahead-of-time op ``torch.ops.sgl_kernel.dsv4_fused_q_indexer_rope_hadamard_quant
    (q_input, q_fp8, weight, weights_out, weight_scale, freqs_real, positions)``, same arguments,
    in place (returns None): q_fp8 (B, H, 128) and weights_out (B, H, 1) (or (B, H)) are written.

    ``gfx942=False``: the CUDA build's numerics (recipe ``v4_fp8``; a float8_e4m3fnuz q_fp8
    selects ``v4_fp8_fnuz``). ``gfx942=True``: the HIP build for AMD gfx942 (MI300), recipe
    ``sglang_v4_fp8_gfx942`` (**source only: no golden data**): 224 in place of 448, scale =
    fmax(1e-4, amax) / 224, codes e4m3fn of clamp(y * (1 / scale), -224, 224) (NaN -> 224, code
    0x76), weights_out = (w * weight_scale) * scale; q_fp8 is float8_e4m3fn (or uint8 / int8 raw
    codes), as the engine allocates it. freqs_real: the interleaved (max_pos, 64) float32 table
    (the complex64 (max_pos, 32) freqs_cis is accepted too)."""
    if not isinstance(q_fp8, torch.Tensor):
        raise TypeError(f"indexer_q: q_fp8: expected a tensor, got {type(q_fp8).__name__}")
    recipe = "v4_fp8"
    if gfx942:
        if q_fp8.dtype == torch.float8_e4m3fnuz:
            raise ValueError(
                "indexer_q: q_fp8: the gfx942 form (recipe sglang_v4_fp8_gfx942) writes "
                "float8_e4m3fn codes (or uint8 / int8 raw codes), got torch.float8_e4m3fnuz")
        recipe = "sglang_v4_fp8_gfx942"
    _quant_q(_OP_QUANT_Q, recipe, q_input, weight, weight_scale, freqs_real, positions, None,
             q_fp8, None, weights_out, enable_pdl, 1.0, side_inputs_ready)
    return None


QOut = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


class _Facts:
    """What the wrappers need of a recipe, worked out once at import (a call reads attributes
    of this object instead of RecipeInfo's properties)."""

    __slots__ = ("name", "index", "weights", "rope", "halves", "fp4", "scale_out", "q_scale_out",
                 "out_dim", "out_dtype", "w_shape_2d", "fn")

    def __init__(self, info: RecipeInfo):
        self.name = info.name
        self.index = RECIPES.index(info.name)  # quant_q_alloc's recipe argument
        self.weights = info.weights
        self.rope = info.rope
        self.halves = info.freqs_layout == "halves"
        self.fp4 = info.fp4
        self.scale_out = info.scale_out
        self.q_scale_out = info.q_scale_out
        self.out_dim = 64 if info.fp4 else 128
        self.out_dtype = (torch.uint8 if info.fp4 else torch.float8_e4m3fnuz
                          if info.format == "e4m3fnuz" else torch.float8_e4m3fn)
        self.w_shape_2d = info.weights_2d
        self.fn = info.format == "e4m3fn"  # an out_dtype of float8_e4m3fnuz resolves a twin


_FACTS: Dict[str, _Facts] = {n: _Facts(i) for n, i in _RECIPES.items()}

# The operators, looked up once (torch.ops attribute lookups cost a few microseconds a call);
# .default skips the overload resolution of the packet.
_OP_QUANT_Q = torch.ops.indexer_q.quant_q.default
_OP_QUANT_Q_COMPOSED = torch.ops.indexer_q.quant_q_composed.default
_OP_V4 = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant.default
_OP_V4_COMPOSED = torch.ops.indexer_q.fused_q_indexer_rope_hadamard_quant_composed.default
# quant_q with its outputs allocated by the binding (one call instead of one torch.empty per
# output): what the allocating wrappers call for tensors on a device with a native kernel
_OP_QUANT_Q_ALLOC = torch.ops.indexer_q.quant_q_alloc.default
# CUDA tensors take quant_q_alloc too: its CUDA kernel passed tests/python/test_api.py,
# test_cuda.py and test_kside.py on an H200 (2026-12-02, 266 passed; docs/TORCH.md)
_ALLOC_CUDA = True
_RAW_KINDS = {torch.uint8: 1, torch.int8: 2}  # quant_q_alloc's out_kind of a raw-code q_out
_V4_INDEX = _FACTS["v4_fp8"].index
_RNE_INDEX = _FACTS["sgl_v41_fp4_quant_rne"].index
_VLLM_V4_INDEX = _FACTS["vllm_v4_fp8"].index
_V32_NEOX_INDEX = _FACTS["vllm_v32_fp8_neox"].index
_V32_GPTJ_INDEX = _FACTS["vllm_v32_fp8_gptj"].index
_CUTE_INDEX = _FACTS["vllm_v4_fp8_cutedsl"].index
_V4_FP4_INDEX = _FACTS["v4_fp4"].index
_PACK_INDEX = _FACTS["sgl_v41_fp4_rope_pack"].index
_UNFUSED_INDEX = _FACTS["sgl_v32_unfused_neox_hadamard_ue8m0"].index
_QUANT_Q_BACKENDS: Dict[Optional[str], object] = {}


def _backend_op(backend):
    """The operator of quant_q's ``backend`` argument (None, "triton", "composed", "reference")."""
    op = _QUANT_Q_BACKENDS.get(backend)
    if op is None:
        if not _QUANT_Q_BACKENDS:  # quant_q_triton is defined by triton_dispatch (end of module)
            _QUANT_Q_BACKENDS.update({
                None: _OP_QUANT_Q, "triton": torch.ops.indexer_q.quant_q_triton.default,
                "composed": _OP_QUANT_Q_COMPOSED,
                "reference": torch.ops.indexer_q.quant_q_reference.default})
        op = _QUANT_Q_BACKENDS.get(backend) if isinstance(backend, (str, type(None))) else None
        if op is None:
            raise ValueError(f"indexer_q: backend: expected None, 'triton', 'composed' or "
                             f"'reference', got {backend!r}")
    return op


_scalar = _glue.scalar
_integral = _glue.integral


# 0-element placeholders for the arguments a recipe does not take, one pair per device, made once
# (an input one for weight / freqs / positions, and a separate one for weights_out, which the
# schema marks as written). Only plain eager tensors use them: under torch.compile, or with a
# tensor subclass (FakeTensor, ...), each call makes its own.
_ABSENT: Dict[torch.device, Tuple[torch.Tensor, torch.Tensor]] = {}


def _absent_pair(q_input: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    dev = q_input.device
    if type(q_input) is torch.Tensor and not torch.compiler.is_compiling():
        pair = _ABSENT.get(dev)
        if pair is None:
            with torch.inference_mode(False):  # usable in and outside inference mode
                pair = _ABSENT[dev] = (torch.empty(0, dtype=torch.float32, device=dev),
                                       torch.empty(0, dtype=torch.float32, device=dev))
        return pair
    return (torch.empty(0, dtype=torch.float32, device=dev),
            torch.empty(0, dtype=torch.float32, device=dev))


def _quant_q(op, recipe, q_input, weight, weight_scale, freqs, positions, out_dtype, q_out, q_sf,
             weights_out, enable_pdl, head_scale=1.0, side_inputs_ready=False, rows=False):
    # rows=True (SGLang V4.1's shapes; outputs allocated here): q_out returned as (B * H, D) and
    # q_sf as (B * H,)
    # (One frame, attribute reads of the recipe's _Facts, module-level names: this is the call
    # path of every allocating entry point; bench/python_overhead.py times it.)
    f = _FACTS.get(recipe) if type(recipe) is str else None
    if f is None:
        f = _FACTS[_check_recipe(recipe)]
    allocate_all = q_out is None and q_sf is None and weights_out is None
    recipe0, weight0, out_dtype0 = recipe, weight, out_dtype  # for the call's retry, below
    if q_out is not None:
        if not isinstance(q_out, torch.Tensor):
            raise TypeError(f"indexer_q: q_out: expected a tensor, got {type(q_out).__name__}")
        if out_dtype is not None and out_dtype != q_out.dtype:
            raise ValueError(f"indexer_q: out_dtype: {out_dtype} contradicts q_out's dtype "
                             f"{q_out.dtype}")
        out_dtype = q_out.dtype
    if out_dtype is not None and f.fn and out_dtype is not f.out_dtype:
        # float8_e4m3fnuz: the recipe's FNUZ twin, if any (its own dtype: the recipe itself)
        f = _FACTS[resolve_recipe(f.name, out_dtype)]
    recipe = f.name
    if not isinstance(q_input, torch.Tensor):
        raise TypeError(f"indexer_q: q_input: expected a tensor, got {type(q_input).__name__}")
    if type(weight_scale) is not float:
        weight_scale = _scalar("weight_scale", weight_scale)
    if type(head_scale) is not float:
        head_scale = _scalar("head_scale", head_scale)
    if side_inputs_ready is not False:
        side_inputs_ready = _flag("side_inputs_ready", side_inputs_ready)
    cis = None
    if f.weights:
        if weight is None:
            raise TypeError(f"indexer_q: weight: recipe {recipe} reads it: expected a tensor, "
                            "got None")
    if f.rope:
        if freqs is None or positions is None:
            arg = "freqs" if freqs is None else "positions"
            raise TypeError(f"indexer_q: {arg}: recipe {recipe} reads it: expected a tensor, "
                            "got None")
        if type(freqs) is not torch.Tensor or freqs.dtype is not _F32:
            if f.halves and isinstance(freqs, torch.Tensor) and freqs.is_complex():
                raise TypeError(
                    f"indexer_q: freqs: recipe {recipe} reads a real (max_pos, 64) float32 table "
                    "[cos x32 | sin x32] (cos_sin_cache), not a complex one")
            if type(freqs) is torch.Tensor and freqs.dtype is _C64:
                cis = freqs  # SGLang's complex table: quant_q_alloc reads it (no view op)
            else:
                freqs = _freqs_table(freqs)
    if (allocate_all and op is _OP_QUANT_Q and (q_input.is_cpu or (_ALLOC_CUDA and q_input.is_cuda))
            and (f.weights or weight is None) and (f.rope or (freqs is None and positions is None))):
        # every output allocated, on a device with a native kernel: the binding allocates them
        # (quant_q_alloc), the same checks and bytes as quant_q on outputs allocated here
        kind = 0 if out_dtype is None or out_dtype == f.out_dtype else _RAW_KINDS.get(out_dtype)
        if kind is not None:
            if rows:
                kind += 4  # quant_q_alloc's rows flag
            if q_input.dim() != 3:
                raise ValueError(
                    f"indexer_q: q_input: expected 3 dims (B, H, 128), got {q_input.dim()}")
            if not f.rope or not f.weights:
                absent_in = _absent_pair(q_input)[0]
                if not f.rope:
                    freqs = positions = absent_in
                if not f.weights:
                    weight = absent_in
            try:
                if side_inputs_ready:
                    q_out, q_sf, weights_out = _OP_QUANT_Q_ALLOC(
                        f.index, q_input, weight, weight_scale, freqs, positions, kind,
                        2 if f.w_shape_2d else 3, enable_pdl, head_scale, side_inputs_ready=True)
                elif enable_pdl is True and head_scale == 1.0:
                    # the operator's defaults (out_kind 0, weights_dims 3, enable_pdl True,
                    # head_scale 1.0) not passed: each non-tensor argument costs the call ~1.5k
                    # instructions (torch's __torch_function__ check, the argument parsing)
                    if f.w_shape_2d:
                        q_out, q_sf, weights_out = _OP_QUANT_Q_ALLOC(
                            f.index, q_input, weight, weight_scale, freqs, positions, kind, 2)
                    elif kind == 0:
                        q_out, q_sf, weights_out = _OP_QUANT_Q_ALLOC(
                            f.index, q_input, weight, weight_scale, freqs, positions)
                    else:
                        q_out, q_sf, weights_out = _OP_QUANT_Q_ALLOC(
                            f.index, q_input, weight, weight_scale, freqs, positions, kind)
                else:
                    q_out, q_sf, weights_out = _OP_QUANT_Q_ALLOC(
                        f.index, q_input, weight, weight_scale, freqs, positions, kind,
                        2 if f.w_shape_2d else 3, enable_pdl, head_scale)
            except RuntimeError:
                if cis is None:
                    raise
                # the call with the table's float32 view: freqs_cis's own error (TypeError /
                # ValueError), or the same call as always
                return _quant_q(op, recipe0, q_input, weight0, weight_scale, _freqs_table(cis),
                                positions, out_dtype0, None, None, None, enable_pdl, head_scale,
                                side_inputs_ready, rows)
            if f.q_scale_out:
                return (q_out, q_sf), weights_out
            return q_out, weights_out
    if cis is not None:
        freqs = _freqs_table(cis)
    if not f.rope or not f.weights:
        absent_in, absent_out = _absent_pair(q_input)
        if not f.rope:
            freqs = absent_in if freqs is None else freqs
            positions = absent_in if positions is None else positions
        if not f.weights:
            weight = absent_in if weight is None else weight
            weights_out = absent_out if weights_out is None else weights_out
    if q_out is None or weights_out is None or (f.q_scale_out and q_sf is None):
        if q_input.dim() != 3:
            raise ValueError(
                f"indexer_q: q_input: expected 3 dims (B, H, 128), got {q_input.dim()}")
        b, h, _ = q_input.shape
        dev = q_input.device
        # sizes as separate ints, not a tuple: torch.empty parses them faster (~0.4 us a call)
        if q_out is None:
            q_out = _EMPTY(b, h, f.out_dim, dtype=out_dtype or f.out_dtype, device=dev)
        if q_sf is None:
            if f.fp4:
                q_sf = _EMPTY(b, h, dtype=_I32, device=dev)
            elif f.scale_out:  # the row scale, (B, H, 1) as SGLang's act_quant
                q_sf = _EMPTY(b, h, 1, dtype=_F32, device=dev)
        if weights_out is None:  # SGLang's V4 forms: (B, H, 1); the other engines': (B, H)
            weights_out = (_EMPTY(b, h, dtype=_F32, device=dev) if f.w_shape_2d
                           else _EMPTY(b, h, 1, dtype=_F32, device=dev))
    # weight_scale / head_scale: Python floats (doubles); the library checks each and rounds it
    # to float32 once. side_inputs_ready is passed only when set (a keyword costs the parser time).
    if side_inputs_ready:
        op(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs, positions,
           enable_pdl, head_scale, side_inputs_ready=True)
    else:
        op(recipe, q_input, q_out, q_sf, weight, weights_out, weight_scale, freqs, positions,
           enable_pdl, head_scale)
    w_ret = weights_out if f.weights else None
    if rows:
        b, h = q_input.shape[0], q_input.shape[1]
        q_out = q_out.view(b * h, f.out_dim)
        q_sf = q_sf.view(b * h) if q_sf is not None else None
    if f.q_scale_out:
        return (q_out, q_sf), w_ret
    return q_out, w_ret


def quant_q(
    recipe: str,
    q_input: torch.Tensor,
    weight: Optional[torch.Tensor],
    weight_scale: float,
    freqs: Optional[torch.Tensor],
    positions: Optional[torch.Tensor],
    *,
    out_dtype: Optional[torch.dtype] = None,
    q_out: Optional[torch.Tensor] = None,
    q_sf: Optional[torch.Tensor] = None,
    weights_out: Optional[torch.Tensor] = None,
    enable_pdl: bool = True,
    head_scale: float = 1.0,
    backend: Optional[str] = None,
    side_inputs_ready: bool = False,
) -> Tuple[QOut, torch.Tensor]:
    """Any recipe of the library by name (see :data:`RECIPES`); returns what the engine's entry
    point of that form returns (SGLang's, or vLLM's for the ``vllm_*`` recipes).

    FP8 recipes: ``(q_fp8, weights_out)``, q_fp8 (B, H, 128) float8_e4m3fn (``*_fnuz`` recipes:
    float8_e4m3fnuz). ``out_dtype=torch.float8_e4m3fnuz`` (or a passed-in ``q_out`` of that
    dtype) selects the recipe's ``_fnuz`` twin; ``torch.uint8`` / ``torch.int8`` take raw codes.
    FP4 recipes: ``((q_fp4, q_sf), weights_out)``, q_fp4 (B, H, 64) uint8 (two e2m1 codes per
    byte, low nibble = even dim), q_sf (B, H) int32 (four UE8M0 exponent bytes, little-endian).
    Recipes with ``scale_out`` (``sgl_v32_unfused_neox_hadamard_ue8m0``): ``((q_fp8, q_scale),
    weights_out)``, q_scale the FP8 row scale (B, H, 1) float32 (passed in as ``q_sf``, (B, H, 1)
    or (B, H)).
    weights_out (B, H, 1) float32; for the ``vllm_*`` recipes (B, H), as vLLM returns it (a
    passed-in weights_out may have either shape for every recipe). The ``vllm_*`` recipes form
    weights_out with two factors: ``weight_scale`` (vLLM's softmax_scale) and ``head_scale``,
    two float32 multiplies in that order (SGLang's V3.2 unfused form: ``((w * head_scale) *
    q_scale) * weight_scale``); the other recipes ignore ``head_scale``. Outputs passed
    in (``q_out``, ``q_sf``, ``weights_out``) are written in place; the others are allocated on
    q_input's device. ``freqs`` is the recipe's
    (max_pos, 64) float32 table (interleaved recipes also take the complex64 (max_pos, 32)
    freqs_cis). A recipe without RoPE (``recipe_info(r).rope`` False: rope_dims "none") takes
    ``freqs=None, positions=None``; one without weights (fold "none") takes ``weight=None`` and
    returns None for weights_out (the operator itself takes 0-element tensors there). weights_out
    is allocated (B, H) for every engine's form but SGLang's V4 and V3.2 unfused ones
    (``recipe_info(r).weights_2d``).
    ``enable_pdl`` (default True: programmatic dependent launch on sm_90+) is used by the CUDA
    kernel only. ``side_inputs_ready`` (default False, a bool: anything else raises TypeError) is
    the CUDA kernel's opt-in to read positions, freqs and weight before ``griddepcontrol.wait``;
    the caller promises that no kernel that may still run when this one starts writes them
    (docs/TORCH.md, "side_inputs_ready"). The CPU, composed, reference and Triton paths accept it
    and ignore it (same bytes either way).
    ``backend``: None (the dispatcher's choice, see :func:`available_backends`), ``"triton"``
    (operator ``indexer_q::quant_q_triton``: the Triton kernel on any device Triton serves) or
    ``"composed"`` (``indexer_q::quant_q_composed``) or ``"reference"``
    (``indexer_q::quant_q_reference``: the library's scalar reference, the executable spec; CPU
    tensors only).
    """
    return _quant_q(_OP_QUANT_Q if backend is None else _backend_op(backend), recipe, q_input,
                    weight, weight_scale, freqs, positions, out_dtype, q_out, q_sf, weights_out,
                    enable_pdl, head_scale, side_inputs_ready)


def composed_quant_q(
    recipe: str,
    q_input: torch.Tensor,
    weight: Optional[torch.Tensor],
    weight_scale: float,
    freqs: Optional[torch.Tensor],
    positions: Optional[torch.Tensor],
    *,
    out_dtype: Optional[torch.dtype] = None,
    q_out: Optional[torch.Tensor] = None,
    q_sf: Optional[torch.Tensor] = None,
    weights_out: Optional[torch.Tensor] = None,
    head_scale: float = 1.0,
    side_inputs_ready: bool = False,
) -> Tuple[QOut, torch.Tensor]:
    """Same as :func:`quant_q`, always through the composed ATen implementation (operator
    ``indexer_q::quant_q_composed``), on any device, CPU included (``side_inputs_ready``
    accepted and ignored)."""
    return _quant_q(_OP_QUANT_Q_COMPOSED, recipe, q_input, weight, weight_scale,
                    freqs, positions, out_dtype, q_out, q_sf, weights_out, False, head_scale,
                    side_inputs_ready)


def fused_q_indexer_rope_first_quant(
    q_input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    *,
    out_dtype: Optional[torch.dtype] = None,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The DeepSeek-V3.2 form (recipe ``v32_fp8``): RoPE on dims 0..63 with the (max_pos, 64)
    float32 ``cos_sin_cache`` in halves [cos x32 | sin x32], no Hadamard, FP8 with the per-row
    scale folded into the head weight. Returns ``(q_fp8, weights_out)``;
    ``out_dtype=torch.float8_e4m3fnuz`` gives the FNUZ result (recipe ``v32_fp8_fnuz``)."""
    return _quant_q(_OP_QUANT_Q, "v32_fp8", q_input, weight, weight_scale, cos_sin_cache,
                    positions, out_dtype, None, None, None, enable_pdl, 1.0, side_inputs_ready)


def fused_q_indexer_rope_hadamard_fp4_quant(
    q_input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    *,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
) -> Tuple[Tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """SGLang's FP4 call (``kernels/ops/attention/dsv4/norm_rope.py``
    ``fused_q_indexer_rope_hadamard_fp4_quant``), recipe ``v4_fp4``: RoPE on dims 64..127,
    Hadamard, E2M1 codes with one UE8M0 scale per 32 values. Returns ``((q_fp4, q_sf),
    weights_out)`` as SGLang allocates them: q_fp4 (B, H, 64) **int8** (two e2m1 codes per byte,
    low nibble = even dim; ``quant_q("v4_fp4", ...)`` gives the same bytes as uint8), q_sf (B, H)
    int32, weights_out (B, H, 1) float32 = weight * weight_scale."""
    if not isinstance(q_input, torch.Tensor) or q_input.dim() != 3:
        raise ValueError("indexer_q: q_input: expected a (B, H, 128) tensor")
    if (type(q_input) is torch.Tensor and type(weight_scale) is float and enable_pdl is True
            and side_inputs_ready is False and weight is not None and positions is not None
            and type(freqs_cis) is torch.Tensor
            and (freqs_cis.dtype is _F32 or freqs_cis.dtype is _C64)
            and (q_input.is_cpu or (_ALLOC_CUDA and q_input.is_cuda))):
        # SGLang's call as SGLang makes it: what _quant_q does for it, one operator call
        # (out_kind 2: int8 codes); a complex table it refuses takes the path below (the call
        # again with the float32 view, for freqs_cis's own error)
        try:
            q, sf, w = _OP_QUANT_Q_ALLOC(_V4_FP4_INDEX, q_input, weight, weight_scale, freqs_cis,
                                         positions, 2)
            return (q, sf), w
        except RuntimeError:
            if freqs_cis.dtype is _F32:
                raise
    # q_fp4 as int8 raw codes, as SGLang allocates it
    return _quant_q(_OP_QUANT_Q, "v4_fp4", q_input, weight, weight_scale, freqs_cis, positions,
                    torch.int8, None, None, None, enable_pdl, 1.0, side_inputs_ready)


_VLLM_V4_ALIASES = {"cos_sin_cache": "index_q_cos_sin_cache",
                    "softmax_scale": "index_weights_softmax_scale",
                    "head_scale": "index_weights_head_scale"}


def _vllm_table(cos_sin_cache: torch.Tensor) -> torch.Tensor:
    """vLLM's kernels load the (max_pos, 64) [cos x32 | sin x32] table in any float dtype and
    widen each value to float32 (``.to(tl.float32)``): a bf16 / fp16 table is converted here,
    exactly (the widening is exact), so the library gets float32."""
    if (isinstance(cos_sin_cache, torch.Tensor)
            and cos_sin_cache.dtype in (torch.bfloat16, torch.float16)):
        return cos_sin_cache.to(torch.float32)
    return cos_sin_cache


def _vllm_weights_out(weights_out: torch.Tensor, weights_out_dtype) -> torch.Tensor:
    """``weights_out_dtype=torch.bfloat16``: vLLM's MXFP4 kernels store the float32 weight
    product into a bf16 tensor (Triton's float32 -> bf16 store, round to nearest even): the
    library's float32 result rounded the same way."""
    if weights_out_dtype in (None, torch.float32):
        return weights_out
    return weights_out.to(weights_out_dtype)


def _vllm_v4_args(fn, table, weights, softmax_scale, head_scale, aliases):
    """vLLM's V4 arguments by its keyword names or the short ones (``cos_sin_cache``,
    ``softmax_scale``, ``head_scale``); the table widened to float32 (:func:`_vllm_table`)."""
    if not aliases and table is not None and weights is not None and softmax_scale is not None \
            and head_scale is not None:  # every argument given by vLLM's names: nothing to merge
        return _vllm_table(table), weights, softmax_scale, head_scale
    given = {"index_q_cos_sin_cache": table, "index_weights_softmax_scale": softmax_scale,
             "index_weights_head_scale": head_scale}
    for short, val in aliases.items():
        if short not in _VLLM_V4_ALIASES:
            raise TypeError(f"indexer_q: {fn}() got an unexpected keyword argument {short!r}")
        long = _VLLM_V4_ALIASES[short]
        if given[long] is not None:
            raise TypeError(f"indexer_q: {short}: given twice (also as {long})")
        given[long] = val
    for name, what in (("index_q_cos_sin_cache", "a (max_pos, 64) tensor"),
                       ("index_weights_softmax_scale", "a float"),
                       ("index_weights_head_scale", "a float")):
        if given[name] is None:
            raise TypeError(f"indexer_q: {name}: missing (expected {what})")
    if weights is None:
        raise TypeError("indexer_q: index_weights: missing (expected a (T, H) tensor)")
    return (_vllm_table(given["index_q_cos_sin_cache"]), weights,
            given["index_weights_softmax_scale"], given["index_weights_head_scale"])


def fused_indexer_q_rope_quant(
    positions: torch.Tensor,
    index_q: torch.Tensor,
    index_q_cos_sin_cache: Optional[torch.Tensor] = None,
    index_weights: Optional[torch.Tensor] = None,
    index_weights_softmax_scale: Optional[float] = None,
    index_weights_head_scale: Optional[float] = None,
    use_fp4: bool = False,
    weights_out_dtype: torch.dtype = torch.float32,
    *,
    out_dtype: Optional[torch.dtype] = None,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
    **aliases,
) -> Tuple[QOut, torch.Tensor]:
    """vLLM's call (``vllm/models/deepseek_v4/common/ops/fused_indexer_q.py``), same arguments
    (positional, or by vLLM's keyword names ``index_q_cos_sin_cache``, ``index_weights``,
    ``index_weights_softmax_scale``, ``index_weights_head_scale``, ``use_fp4``,
    ``weights_out_dtype``; the short names ``cos_sin_cache``, ``softmax_scale``, ``head_scale``
    are accepted too), same results, same bytes (docs/RECIPES.md): recipe ``vllm_v4_fp8``, or
    ``vllm_v4_mxfp4`` with ``use_fp4=True``.

    ``out_dtype=torch.float8_e4m3fnuz``: vLLM's ROCm path on gfx942 (the same call, whose q_fp8
    is the platform's e4m3fnuz): recipe ``vllm_v4_fp8_fnuz224`` (**source only: no golden
    data**), a form of its own, not ``vllm_v4_fp8`` re-encoded: RoPE second value
    ``fma(x1, c, x0 * s)``, q_scale = pow2ceil(fmax(amax, 1e-4) / 224), e4m3fnuz codes of
    x / q_scale (-0 -> 0x00, NaN -> 0x80), weights_out (T, H) = ((w * q_scale) * softmax_scale)
    * head_scale (no factor 2). FP8 only (with ``use_fp4=True``: ValueError). Other out_dtypes
    (float8_e4m3fn, uint8 / int8 raw codes) go to ``vllm_v4_fp8``.

    positions (T,) int64 / int32; index_q (T, H, 128) bf16 (fp16 / fp32 work too), RoPE on dims
    64..127 (interleaved pairs); index_q_cos_sin_cache (max_pos, 64) in halves
    [cos x32 | sin x32], float32, or bf16 / fp16 (widened to float32 exactly, as vLLM's kernels
    load it); index_weights (T, H), index_q's dtype; the two scales Python floats, each rounded
    to float32 once and applied as two separate multiplies (``fl(softmax_scale * head_scale)``
    would be a different number). ``weights_out_dtype``: float32 (default), or with
    ``use_fp4=True`` torch.bfloat16 (V4.1's decode path: the float32 weights rounded to
    nearest even bf16, as vLLM's kernel stores them); vLLM's FP8 path allows float32 only
    (ValueError otherwise).

    Returns ``(q_fp8, weights_out)``: q_fp8 (T, H, 128) float8_e4m3fn, weights_out (T, H)
    float32 = ``((w * q_scale) * softmax_scale) * head_scale``; with ``use_fp4=True``
    ``((q_fp4, q_sf), weights_out)``: q_fp4 (T, H, 64) uint8 (two e2m1 codes per byte, low
    nibble = even dim), q_sf (T, H) int32 (four UE8M0 bytes, little-endian), weights_out (T, H)
    ``weights_out_dtype`` = ``(w * softmax_scale) * head_scale``. For CUDA graphs /
    torch.compile with preallocated buffers call ``torch.ops.indexer_q.quant_q`` directly
    (docs/TORCH.md).
    """
    if (type(index_q) is torch.Tensor and weights_out_dtype is _F32 and use_fp4 is False
            and out_dtype is None and enable_pdl is True and side_inputs_ready is False
            and not aliases and type(index_q_cos_sin_cache) is torch.Tensor
            and index_q_cos_sin_cache.dtype is _F32 and index_weights is not None
            and positions is not None and type(index_weights_softmax_scale) is float
            and type(index_weights_head_scale) is float and index_q.dim() == 3
            and (index_q.is_cpu or (_ALLOC_CUDA and index_q.is_cuda))):
        # vLLM's FP8 call as vLLM makes it (every argument given, float32 table, Python floats):
        # what _quant_q does for it, one operator call (outputs allocated by the binding)
        q, _, w = _OP_QUANT_Q_ALLOC(_VLLM_V4_INDEX, index_q, index_weights,
                                    index_weights_softmax_scale, index_q_cos_sin_cache, positions,
                                    0, 2, True, index_weights_head_scale)
        return q, w
    cos_sin_cache, index_weights, softmax_scale, head_scale = _vllm_v4_args(
        "fused_indexer_q_rope_quant", index_q_cos_sin_cache, index_weights,
        index_weights_softmax_scale, index_weights_head_scale, aliases)
    if weights_out_dtype not in (None, torch.float32):
        if weights_out_dtype != torch.bfloat16:
            raise ValueError(f"indexer_q: weights_out_dtype: expected torch.float32 or "
                             f"torch.bfloat16, got {weights_out_dtype}")
        if not use_fp4:
            raise ValueError("indexer_q: weights_out_dtype: vLLM's FP8 path writes float32 "
                             "weights only; torch.bfloat16 needs use_fp4=True")
    if out_dtype == torch.float8_e4m3fnuz:  # the ROCm form, chosen here by name (no FNUZ twin)
        if use_fp4:
            raise ValueError("indexer_q: out_dtype: float8_e4m3fnuz is an FP8 output; vLLM's "
                             "MXFP4 form (use_fp4=True) has no ROCm FNUZ recipe")
        return quant_q("vllm_v4_fp8_fnuz224", index_q, index_weights, softmax_scale,
                       cos_sin_cache, positions, head_scale=head_scale, enable_pdl=enable_pdl,
                       side_inputs_ready=side_inputs_ready)
    q, w = _quant_q(_OP_QUANT_Q, "vllm_v4_mxfp4" if use_fp4 else "vllm_v4_fp8", index_q,
                    index_weights, softmax_scale, cos_sin_cache, positions, out_dtype, None, None,
                    None, enable_pdl, head_scale, side_inputs_ready)
    if weights_out_dtype is None or weights_out_dtype is torch.float32:
        return q, w
    return q, _vllm_weights_out(w, weights_out_dtype)


def fused_indexer_q_rope_quant_v32(
    positions: torch.Tensor,
    q: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    weights: torch.Tensor,
    softmax_scale: float,
    head_scale: float,
    is_neox: bool = True,
    *,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM's DeepSeek-V3.2 call (``vllm/model_executor/layers/sparse_attn_indexer.py``
    ``fused_indexer_q_rope_quant(positions, q, cos_sin_cache, weights, softmax_scale, head_scale,
    is_neox)``), same arguments, same results, same bytes (docs/RECIPES.md step 9): recipe
    ``vllm_v32_fp8_neox`` (``is_neox=True``, pairs (j, j + 32)) or ``vllm_v32_fp8_gptj`` (pairs
    (2j, 2j + 1)); RoPE on dims 0..63 with the (max_pos, 64) float32 cos_sin_cache in halves, bf16
    after RoPE, q_scale = pow2ceil(fmax(amax, 1e-10) * fl(1/448)).

    Returns ``(q_fp8, weights_out)``: q_fp8 (T, H, 128) float8_e4m3fn, weights_out (T, H)
    float32 = ``((w * q_scale) * softmax_scale) * head_scale`` (each factor a Python float
    rounded to float32 once, three multiplies)."""
    if (type(q) is torch.Tensor and type(cos_sin_cache) is torch.Tensor
            and cos_sin_cache.dtype is _F32 and weights is not None and positions is not None
            and type(softmax_scale) is float and type(head_scale) is float
            and enable_pdl is True and side_inputs_ready is False and q.dim() == 3
            and (q.is_cpu or (_ALLOC_CUDA and q.is_cuda))):
        # vLLM's call as vLLM makes it: what _quant_q does for it, one operator call
        q_fp8, _, w = _OP_QUANT_Q_ALLOC(_V32_NEOX_INDEX if is_neox else _V32_GPTJ_INDEX, q,
                                        weights, softmax_scale, cos_sin_cache, positions, 0, 2,
                                        True, head_scale)
        return q_fp8, w
    recipe = "vllm_v32_fp8_neox" if is_neox else "vllm_v32_fp8_gptj"
    return _quant_q(_OP_QUANT_Q, recipe, q, weights, softmax_scale, cos_sin_cache, positions,
                    None, None, None, None, enable_pdl, head_scale, side_inputs_ready)


def fused_indexer_q_rope_quant_cutedsl(
    positions: torch.Tensor,
    index_q: torch.Tensor,
    index_q_cos_sin_cache: Optional[torch.Tensor] = None,
    index_weights: Optional[torch.Tensor] = None,
    index_weights_softmax_scale: Optional[float] = None,
    index_weights_head_scale: Optional[float] = None,
    use_fp4: bool = False,
    weights_out_dtype: torch.dtype = torch.float32,
    *,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
    **aliases,
) -> Tuple[QOut, torch.Tensor]:
    """vLLM's V4 call :func:`fused_indexer_q_rope_quant` with the numerics of its CuTe DSL kernels
    (``IndexerQFp8Kernel`` / ``IndexerQMxFp4Kernel``, vLLM's default CUDA path when the CuTe DSL
    is importable): recipe ``vllm_v4_fp8_cutedsl`` (docs/RECIPES.md step 10), or with
    ``use_fp4=True`` ``vllm_v4_mxfp4_cute`` (step 15, **source only: no golden data**). Same
    arguments (vLLM's keyword names or the short ones, a bf16 / fp16 table widened to float32)
    and result shapes; the kernel gets ONE factor ``S = float32(softmax_scale * head_scale)``, the
    product formed in double (Python) and rounded once. FP8: weights_out (T, H) float32 =
    ``(w * S) * q_scale`` (another ``weights_out_dtype``: ValueError). MXFP4:
    ``((q_fp4, q_sf), weights_out)`` as :func:`fused_indexer_q_rope_quant`'s, weights_out =
    ``w * S`` in ``weights_out_dtype`` (float32, or bf16 rounded to nearest even)."""
    if (type(index_q) is torch.Tensor and weights_out_dtype is _F32 and use_fp4 is False
            and enable_pdl is True and side_inputs_ready is False and not aliases
            and type(index_q_cos_sin_cache) is torch.Tensor
            and index_q_cos_sin_cache.dtype is _F32 and index_weights is not None
            and positions is not None and type(index_weights_softmax_scale) is float
            and type(index_weights_head_scale) is float and index_q.dim() == 3
            and (index_q.is_cpu or (_ALLOC_CUDA and index_q.is_cuda))):
        # vLLM's FP8 call as vLLM makes it: what the code below does for it, one operator call
        q, _, w = _OP_QUANT_Q_ALLOC(_CUTE_INDEX, index_q, index_weights,
                                    index_weights_softmax_scale * index_weights_head_scale,
                                    index_q_cos_sin_cache, positions, 0, 2, True,
                                    index_weights_head_scale)
        return q, w
    cos_sin_cache, index_weights, softmax_scale, head_scale = _vllm_v4_args(
        "fused_indexer_q_rope_quant_cutedsl", index_q_cos_sin_cache, index_weights,
        index_weights_softmax_scale, index_weights_head_scale, aliases)
    if weights_out_dtype not in (None, torch.float32) and (
            not use_fp4 or weights_out_dtype != torch.bfloat16):
        raise ValueError(f"indexer_q: weights_out_dtype: expected torch.float32"
                         f"{' or torch.bfloat16' if use_fp4 else ' (vLLM FP8 path)'}, got "
                         f"{weights_out_dtype}")
    softmax_scale = _scalar("weight_scale", softmax_scale)
    head_scale = _scalar("head_scale", head_scale)
    scale = softmax_scale * head_scale  # in double, as vLLM's host code
    # head_scale is passed too (the recipe does not read it): the library checks it on its own,
    # so that two negative factors, whose product is > 0, are refused as well
    q, w = _quant_q(_OP_QUANT_Q, "vllm_v4_mxfp4_cute" if use_fp4 else "vllm_v4_fp8_cutedsl",
                    index_q, index_weights, scale, cos_sin_cache, positions, None, None, None,
                    None, enable_pdl, head_scale, side_inputs_ready)
    return q, _vllm_weights_out(w, weights_out_dtype)


def index_q_rope_pack_weights(
    input: torch.Tensor,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    head_weights: torch.Tensor,
    weight_scale: float,
    *,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SGLang's DeepSeek-V4.1 call (``kernels/ops/attention/dsv4/fp4_indexer_rope.py``
    ``index_q_rope_pack_weights(input, freqs_cis, positions, head_weights, weight_scale)``),
    same arguments, same results, same bytes (docs/RECIPES.md step 12): recipe
    ``sgl_v41_fp4_rope_pack``. input (T, H, 128) bf16 (fp16 / fp32 work too); freqs_cis the
    interleaved (max_pos, 64) float32 table (or the complex64 (max_pos, 32) one); positions (T,)
    int32 / int64; head_weights (T, H); weight_scale a Python float (rounded to float32 once).

    Returns ``(payload, scale, weights)``: payload (T * H, 64) int8 (two e2m1 codes per byte, low
    nibble = even dim), scale (T * H,) int32 (four UE8M0 bytes, block 0 lowest), weights (T, H)
    float32 = ``float(bf16(w * weight_scale))``."""
    if not isinstance(input, torch.Tensor) or input.dim() != 3:
        raise ValueError("indexer_q: q_input: expected a (T, H, 128) tensor")
    if (type(input) is torch.Tensor and type(weight_scale) is float and enable_pdl is True
            and side_inputs_ready is False and head_weights is not None
            and positions is not None and type(freqs_cis) is torch.Tensor
            and (freqs_cis.dtype is _F32 or freqs_cis.dtype is _C64)
            and (input.is_cpu or (_ALLOC_CUDA and input.is_cuda))):
        # SGLang's call as SGLang makes it: what _quant_q does for it, one operator call
        # (out_kind 6: int8 codes as rows, weights (T, H)); a complex table it refuses takes the
        # path below (the call again with the float32 view, for freqs_cis's own error)
        try:
            return _OP_QUANT_Q_ALLOC(_PACK_INDEX, input, head_weights, weight_scale, freqs_cis,
                                     positions, 6, 2)
        except RuntimeError:
            if freqs_cis.dtype is _F32:
                raise
    # the payload as int8 raw codes, (T * H, 64), and the scales (T * H,): rows=True
    (q, sf), w = _quant_q(_OP_QUANT_Q, "sgl_v41_fp4_rope_pack", input, head_weights,
                          weight_scale, freqs_cis, positions, torch.int8, None, None, None,
                          enable_pdl, 1.0, side_inputs_ready, True)
    return q, sf, w


def quantize_fp4_indexer_tensor(
    x: torch.Tensor, rne: bool = True, *, enable_pdl: bool = True, side_inputs_ready: bool = False
) -> Tuple[torch.Tensor, torch.Tensor]:
    """SGLang's DeepSeek-V4.1 FP4 packer (``kernels/ops/quantization/fp4_indexer_quant.py``
    ``quantize_fp4_indexer_tensor(x, rne=True)``), same results, same bytes
    (docs/RECIPES.md step 11): recipe ``sgl_v41_fp4_quant_rne`` (no RoPE, no Hadamard, no
    weights). x (N, 128) (or any (..., 128), flattened to rows as SGLang does) bf16 / fp16 / fp32,
    already rotated. Returns ``(q_fp4, q_sf)``: (N, 64)
    int8 (two e2m1 codes per byte, low nibble = even dim) and (N,) int32 (four UE8M0 bytes,
    block 0 lowest). ``rne=False`` (not captured from the engine) raises ValueError."""
    if not rne:
        raise ValueError("indexer_q: rne: only rne=True (recipe sgl_v41_fp4_quant_rne) is a "
                         "recipe of the library")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"indexer_q: q_input: expected a tensor, got {type(x).__name__}")
    if x.dim() < 1 or x.shape[-1] != 128:
        raise ValueError(f"indexer_q: q_input: expected (..., 128), got {tuple(x.shape)}")
    if (type(x) is torch.Tensor and x.dim() == 2 and side_inputs_ready is False
            and (x.is_cpu or (_ALLOC_CUDA and x.is_cuda))):
        # (N, 128): quant_q_alloc reads its rows as (N, 1, 128) itself (out_kind 6: int8 codes,
        # returned as rows), the view reshape below makes, without that view op (~8k
        # instructions a call)
        absent = _absent_pair(x)[0]
        if enable_pdl is True:
            q, sf, _ = _OP_QUANT_Q_ALLOC(_RNE_INDEX, x, absent, 1.0, absent, absent, 6)
        else:
            q, sf, _ = _OP_QUANT_Q_ALLOC(_RNE_INDEX, x, absent, 1.0, absent, absent, 6, 3,
                                         enable_pdl)
        return q, sf
    x = x.reshape(-1, 1, 128)  # the rows, as SGLang flattens the leading dims; H = 1
    (q, sf), _ = _quant_q(_OP_QUANT_Q, "sgl_v41_fp4_quant_rne", x, None, 1.0, None, None,
                          torch.int8, None, None, None, enable_pdl, 1.0, side_inputs_ready, True)
    return q, sf  # (N, 64) and (N,): rows=True


def dsa_indexer_q_unfused(
    q: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    weights: torch.Tensor,
    softmax_scale: float,
    head_scale: float,
    *,
    enable_pdl: bool = True,
    side_inputs_ready: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SGLang's DeepSeek-V3.2 indexer query path (``srt/layers/attention/dsa/dsa_indexer.py``,
    the unfused sequence ``dsa_indexer_q_unfused`` of the golden files), as one call with the
    engine's shapes, same bytes (recipe ``sgl_v32_unfused_neox_hadamard_ue8m0``, docs/RECIPES.md
    13). It replaces four engine steps:

    1. ``rotary_emb`` on ``q[..., :64]`` in place (NeoX pairs (j, j + 32), the halves
       ``cos_sin_cache``, second value ``fma(x1, c, x0 * s)``), bf16 out;
    2. ``rotate_activation``: ``hadamard_transform(q, scale=128 ** -0.5)``, bf16 out;
    3. ``act_quant(q, 128, "ue8m0")``: q_scale = fmax(amax, 1e-4) * fl(1/448) rounded up to a
       power of two, codes of clamp(q / q_scale, -448, 448) (NaN -> 0xfe);
    4. ``_get_logits_head_gate``'s weights: ``((weights * head_scale) * q_scale) *
       softmax_scale``.

    q (T, H, 128) bf16 (fp16 / fp32 work too); positions (T,) int64 / int32; cos_sin_cache
    (max_pos, 64) float32 [cos x32 | sin x32]; weights (T, H) float32 (the engine's
    ``weights_proj`` output; bf16 / fp16 accepted); softmax_scale and head_scale Python floats
    (the engine passes ``128 ** -0.5`` and ``H ** -0.5``), each rounded to float32 once.

    Returns ``(q_fp8, q_scale, weights_out)``: q_fp8 (T, H, 128) float8_e4m3fn, q_scale (T, H, 1)
    float32 (a power of two), weights_out (T, H, 1) float32. For CUDA graphs / torch.compile with
    preallocated buffers call ``torch.ops.indexer_q.quant_q`` directly, q_scale as its ``q_sf``
    (docs/TORCH.md)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError("indexer_q: q_input: expected a (T, H, 128) tensor")
    if (type(q) is torch.Tensor and type(softmax_scale) is float and type(head_scale) is float
            and enable_pdl is True and side_inputs_ready is False and weights is not None
            and positions is not None and type(cos_sin_cache) is torch.Tensor
            and cos_sin_cache.dtype is _F32 and (q.is_cpu or (_ALLOC_CUDA and q.is_cuda))):
        # SGLang's call as SGLang makes it: what quant_q does for it, one operator call, whose
        # (q_fp8, q_scale, weights_out) is this function's result
        return _OP_QUANT_Q_ALLOC(_UNFUSED_INDEX, q, weights, softmax_scale, cos_sin_cache,
                                 positions, 0, 3, True, head_scale)
    (q_fp8, q_scale), weights_out = quant_q(
        "sgl_v32_unfused_neox_hadamard_ue8m0", q, weights, softmax_scale, cos_sin_cache,
        positions, head_scale=head_scale, enable_pdl=enable_pdl,
        side_inputs_ready=side_inputs_ready)
    return q_fp8, q_scale, weights_out
