"""What the indexer is for, measured: the top-k overlap of its scores (docs/RECALL.md).

The indexer scores each query token against the key tokens of its context,
``score[t] = sum_h w[h] * relu(q[h] . k[t])``, and attention reads the top-k. Quantization may
change which tokens make the top k; :func:`topk_overlap` measures how many stay, for a query
recipe and a key recipe, both run by the library:

- the quantized scores use the outputs as they are stored: the query's codes (FP8: the code
  values, with the row scale folded into ``weights_out``; FP4: E2M1 values times the block scales
  ``2^(e - 127)``, ``weights_out`` without a row scale; a recipe without weights: the raw
  ``w * weight_scale``) and the key cache (FP8: code values times the token's fp32 scale; FP4:
  E2M1 values times the block scales);
- the reference scores are float64 of the unquantized inputs after each side's RoPE (the key after
  its RMSNorm), with the weights ``w * weight_scale`` (``* head_scale`` for the two-factor folds);
  the Hadamard transform is left out: it is an orthonormal rotation, and applied to both sides it
  does not change ``q . k``.

If only one side applies the Hadamard, the quantized scores are ``q . (H k)`` (or ``(H q) . k``)
and mean nothing: the top-k overlap collapses to about what chance gives. That is the bug engines
have shipped (one side rotated, the other not), so :func:`pair_mismatch` names what differs and
:func:`topk_overlap` warns (:class:`RecipeMismatchWarning`). RoPE on different dims or with a
different pairing is named too (the model's scores need one RoPE on both sides), though the
overlap does not show it: the reference follows each recipe's own RoPE.

:func:`overlap_vs_context` runs a synthetic DeepSeek-shaped workload over context lengths
(bench/plot_overlap.py plots it); ``indexer-q run --key-recipe`` is the CLI form.
"""

from __future__ import annotations

import math
import warnings
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch

from ._ops import _freqs_table, quant_q, recipe_info
from .kside import KSIDE_RECIPES, kside_store

# The key side's transform, the same for every key-side recipe (docs/KSIDE.md "What one token goes
# through"): RoPE on dims 64..127 with adjacent pairs (2j, 2j + 1), then the Hadamard. Named in the
# query recipes' column values (recipe_info), so the two sides compare column by column.
KSIDE_TRANSFORM = {"rope_dims": "last64", "rope_pairs": "adjacent", "hadamard": True}

# E2M1 magnitudes of the codes 0..7 (the sign is bit 3).
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


class RecipeMismatchWarning(UserWarning):
    """The query and key recipes do not transform their vectors alike."""


class Overlap(NamedTuple):
    """The result of :func:`topk_overlap`."""

    q_recipe: str
    k_recipe: str
    topk: int
    context: int          # key tokens scored
    overlap: float        # mean over the query tokens of |top-k(ours) & top-k(float64)| / k
    min_overlap: float    # the worst query token's
    per_query: torch.Tensor  # (B,) float64
    mismatch: str         # "" when the pair matches, else what differs (pair_mismatch)


def pair_mismatch(q_recipe: str, k_recipe: str) -> str:
    """"" if the query recipe transforms its vectors as the key recipe does (same Hadamard, same
    RoPE dims and pairs), else one line saying what differs. A query recipe without RoPE
    (rope_dims "none") is taken as rotated by the caller: only its Hadamard is compared."""
    info = recipe_info(q_recipe)
    if k_recipe not in KSIDE_RECIPES:
        raise ValueError(f"indexer_q: k_recipe: expected one of {', '.join(KSIDE_RECIPES)}, "
                         f"got {k_recipe!r}")
    k = KSIDE_TRANSFORM
    out = []
    if info.hadamard != k["hadamard"]:
        rotated, plain = (q_recipe, k_recipe) if info.hadamard else (k_recipe, q_recipe)
        out.append(f"{rotated} applies the Hadamard transform and {plain} does not, so the scores "
                   "are q . (H k), not q . k")
    if info.rope and info.rope_dims != k["rope_dims"]:
        out.append(f"RoPE on dims {info.rope_dims} ({q_recipe}) vs {k['rope_dims']} ({k_recipe})")
    if info.rope and info.rope_pairs != k["rope_pairs"]:
        out.append(f"RoPE pairs {info.rope_pairs} ({q_recipe}) vs {k['rope_pairs']} ({k_recipe})")
    return "; ".join(out)


# ---- float64 reference ---------------------------------------------------------------------------
def _rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dims: str, pairs: str
            ) -> torch.Tensor:
    """RoPE in float64 on x (..., 128) with cos / sin (..., 32) broadcast over x's middle dims."""
    if dims == "none":
        return x
    y = x.clone()
    o = 64 if dims == "last64" else 0
    j = torch.arange(32, device=x.device)
    i0, i1 = (o + j, o + 32 + j) if pairs == "neox" else (o + 2 * j, o + 2 * j + 1)
    x0, x1 = x[..., i0], x[..., i1]
    y[..., i0] = x0 * cos - x1 * sin
    y[..., i1] = x0 * sin + x1 * cos
    return y


def _angles(freqs: torch.Tensor, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    rows = freqs.to(torch.float64)[positions.long()]
    return rows[:, 0::2], rows[:, 1::2]


def _layout(freqs: torch.Tensor, recipe: str) -> torch.Tensor:
    """The interleaved (max_pos, 64) table laid out as the query recipe reads it."""
    if recipe_info(recipe).freqs_layout == "halves":
        return torch.cat([freqs[:, 0::2], freqs[:, 1::2]], dim=1).contiguous()
    return freqs


# ---- dequantization ------------------------------------------------------------------------------
def _e2m1_values(codes: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    """(N, 64) packed E2M1 codes (low nibble = even dim) and (N, 4) UE8M0 bytes -> (N, 128)."""
    c = codes.view(torch.uint8).to(torch.int64)
    nib = torch.stack([c & 0xF, c >> 4], dim=-1).reshape(c.shape[0], 128)
    mag = torch.tensor(_E2M1, dtype=torch.float64, device=c.device)[nib & 7]
    v = torch.where((nib & 8) != 0, -mag, mag)
    e = scale_bytes.view(torch.uint8).to(torch.float64).reshape(-1, 4)
    return v * torch.exp2(e - 127.0).repeat_interleave(32, dim=1)


def dequantize_query(recipe: str, q_out: torch.Tensor, q_sf: Optional[torch.Tensor],
                     weights_out: Optional[torch.Tensor], weight: Optional[torch.Tensor] = None,
                     weight_scale: float = 1.0, head_scale: float = 1.0
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(q (B, H, 128), w (B, H)) in float64 with ``sum_h w[h] * relu(q[h] . k)`` the recipe's
    score: FP8 codes as values (their row scale is in weights_out), FP4 values times the block
    scales; w = weights_out, or for a recipe without weights ``w * weight_scale``."""
    info = recipe_info(recipe)
    b, h = q_out.shape[0], q_out.shape[1]
    if info.fp4:
        q = _e2m1_values(q_out.reshape(b * h, 64), q_sf.reshape(b * h).contiguous().view(
            torch.uint8)).reshape(b, h, 128)
    else:
        dt = torch.float8_e4m3fnuz if info.format == "e4m3fnuz" else torch.float8_e4m3fn
        q = q_out.view(dt).to(torch.float64)  # exact; FNUZ codes are worth half, w is doubled
        if not info.weights:
            raise ValueError(f"indexer_q: recipe {recipe}: an FP8 recipe without weights_out "
                             "has no row scale to dequantize with")
    if info.weights:
        w = weights_out.reshape(b, h).to(torch.float64)
    else:
        w = _reference_weights(recipe, weight, weight_scale, head_scale)
    return q, w


def dequantize_keys(k_recipe: str, kvcache: torch.Tensor, page_size: int, slots: torch.Tensor
                    ) -> torch.Tensor:
    """(N, 128) float64: the tokens stored at `slots` of a key-side cache (docs/KSIDE.md layout)."""
    pages = kvcache.view(torch.uint8).reshape(kvcache.shape[0], -1)
    s = slots.long()
    if k_recipe == "v4_k_fp8":
        codes = pages[:, :page_size * 128].reshape(-1, 128)[s]
        scale = pages[:, page_size * 128:].contiguous().view(torch.float32).reshape(-1)[s]
        return codes.view(torch.float8_e4m3fn).to(torch.float64) * scale.to(torch.float64)[:, None]
    if k_recipe == "v4_k_fp4":
        codes = pages[:, :page_size * 64].reshape(-1, 64)[s]
        sf = pages[:, page_size * 64:].reshape(-1, 4)[s]
        return _e2m1_values(codes, sf)
    raise ValueError(f"indexer_q: k_recipe: expected one of {', '.join(KSIDE_RECIPES)}, "
                     f"got {k_recipe!r}")


def _reference_weights(recipe, weight, weight_scale, head_scale) -> torch.Tensor:
    info = recipe_info(recipe)
    w = weight.to(torch.float64) * float(torch.tensor(weight_scale, dtype=torch.float32))
    if info.two_factors:
        w = w * float(torch.tensor(head_scale, dtype=torch.float32))
    return w


def scores(q: torch.Tensor, w: torch.Tensor, k: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """(B, T) float64 ``sum_h w[b, h] * relu(q[b, h] . k[t])`` for q (B, H, 128), w (B, H),
    k (T, 128), in chunks of key tokens."""
    q, w, k = q.to(torch.float64), w.to(torch.float64), k.to(torch.float64)
    out = torch.empty((q.shape[0], k.shape[0]), dtype=torch.float64, device=q.device)
    for t0 in range(0, k.shape[0], chunk):
        dots = torch.einsum("bhd,td->bht", q, k[t0:t0 + chunk])
        out[:, t0:t0 + chunk] = torch.einsum("bh,bht->bt", w, torch.relu(dots))
    return out


def overlap_of(got: torch.Tensor, want: torch.Tensor, topk: int) -> torch.Tensor:
    """(B,) float64: |top-k(got[b]) & top-k(want[b])| / k for each row b."""
    k = min(int(topk), got.shape[1])
    a = torch.topk(got, k, dim=1).indices
    b = torch.topk(want, k, dim=1).indices
    hit = torch.zeros_like(got, dtype=torch.bool)
    hit.scatter_(1, b, True)
    return hit.gather(1, a).sum(dim=1).to(torch.float64) / k


# ---- the measurement -----------------------------------------------------------------------------
def topk_overlap(q_recipe: str, k_recipe: str, q_input: torch.Tensor,
                 weight: Optional[torch.Tensor], weight_scale: float, positions: torch.Tensor,
                 k_input: torch.Tensor, norm_weight: torch.Tensor, k_positions: torch.Tensor,
                 freqs: torch.Tensor, *, topk: int = 64, head_scale: float = 1.0,
                 eps: float = 1e-6, page_size: int = 64, warn: bool = True) -> Overlap:
    """Runs the query recipe on q_input (B, H, 128) and the key recipe on k_input (T, 128) through
    the library, and returns the top-k overlap of the scores of their outputs against float64
    scores of the inputs (module docstring). weight (B, H) the head weights (None for a recipe
    without weights: then the reference's weights are all ``weight_scale``); positions (B,) and
    k_positions (T,) the RoPE rows; freqs the model's one RoPE table, interleaved (max_pos, 64)
    float32 (cos, sin) per pair or complex64 (max_pos, 32): each side gets it laid out as its
    recipe reads it. A query recipe without RoPE gets q_input as it is (rotated by the caller);
    its reference is q_input. norm_weight (128,) and eps: the key side's RMSNorm. warn: a
    :class:`RecipeMismatchWarning` when the pair does not match (:func:`pair_mismatch`)."""
    mismatch = pair_mismatch(q_recipe, k_recipe)
    if mismatch and warn:
        warnings.warn(f"indexer_q: query recipe {q_recipe} and key recipe {k_recipe} do not "
                      f"match: {mismatch}", RecipeMismatchWarning, stacklevel=2)
    info = recipe_info(q_recipe)
    freqs = _freqs_table(freqs).to(torch.float32)
    b, h = q_input.shape[0], q_input.shape[1]
    if weight is None:
        weight = torch.ones((b, h), dtype=torch.float32, device=q_input.device)
    # the query side
    res = quant_q(q_recipe, q_input, weight if info.weights else None, weight_scale,
                  _layout(freqs, q_recipe) if info.rope else None,
                  positions if info.rope else None, head_scale=head_scale)
    (q_out, q_sf), w_out = res if info.q_scale_out else ((res[0], None), res[1])
    qd, wd = dequantize_query(q_recipe, q_out, q_sf, w_out, weight, weight_scale, head_scale)
    # the key side: token t into slot t of a paged cache
    t = k_input.shape[0]
    nbytes = 132 if k_recipe == "v4_k_fp8" else 68
    pages = max(1, -(-t // page_size))
    kvcache = torch.zeros((pages, nbytes * page_size), dtype=torch.uint8, device=k_input.device)
    slots = torch.arange(t, dtype=torch.int64, device=k_input.device)
    kside_store(k_recipe, k_input, norm_weight, eps, freqs, k_positions, slots, kvcache, page_size)
    kd = dequantize_keys(k_recipe, kvcache, page_size, slots)
    # float64 reference
    q64 = q_input.to(torch.float64)
    if info.rope:
        c, s = _angles(freqs, positions)
        q64 = _rope64(q64, c[:, None, :], s[:, None, :], info.rope_dims, info.rope_pairs)
    w64 = _reference_weights(q_recipe, weight, weight_scale, head_scale)
    x = k_input.to(torch.float64)
    x = x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + float(eps)) * norm_weight.to(
        torch.float64)
    c, s = _angles(freqs, k_positions)
    k64 = _rope64(x, c, s, KSIDE_TRANSFORM["rope_dims"], KSIDE_TRANSFORM["rope_pairs"])
    per = overlap_of(scores(qd, wd, kd), scores(q64, w64, k64), topk)
    return Overlap(q_recipe, k_recipe, min(int(topk), t), t, float(per.mean()), float(per.min()),
                   per, mismatch)


def matching_key_recipe(q_recipe: str) -> str:
    """The key recipe of the query recipe's output format (v4_k_fp4 for FP4, else v4_k_fp8)."""
    return "v4_k_fp4" if recipe_info(q_recipe).fp4 else "v4_k_fp8"


def rope_table(max_pos: int, theta: float = 10000.0) -> torch.Tensor:
    """The interleaved (max_pos, 64) float32 table: angle p * theta^(-2j / 64) for pair j."""
    inv = theta ** (-torch.arange(32, dtype=torch.float64) * 2.0 / 64.0)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1).reshape(max_pos, 64).to(
        torch.float32)


def workload(context: int, *, queries: int = 4, heads: int = 64, seed: int = 0,
             dtype: torch.dtype = torch.bfloat16, outliers: int = 4, outlier_scale: float = 30.0):
    """A DeepSeek-shaped synthetic case (deterministic from seed): queries tokens decoding right
    after a context of `context` key tokens. q, k ~ N(0, 1) with `outliers` channels (the same in
    q and k) of `outlier_scale` times the magnitude, head weights ~ N(0, 1), weight_scale
    1 / sqrt(H * 128), RMSNorm weight 1 + N(0, 0.1^2), RoPE theta 10000. Returns the keyword
    arguments of :func:`topk_overlap` (but the recipes)."""
    g = torch.Generator().manual_seed(int(seed))
    dims = torch.randperm(128, generator=g)[:outliers]
    boost = torch.ones(128, dtype=torch.float64)
    boost[dims] = outlier_scale
    q = torch.randn((queries, heads, 128), generator=g, dtype=torch.float64) * boost
    k = torch.randn((context, 128), generator=g, dtype=torch.float64) * boost
    w = torch.randn((queries, heads), generator=g, dtype=torch.float64)
    nw = 1.0 + 0.1 * torch.randn(128, generator=g, dtype=torch.float64)
    return dict(q_input=q.to(dtype), weight=w.to(dtype), weight_scale=1.0 / math.sqrt(heads * 128),
                positions=torch.arange(context, context + queries, dtype=torch.int64),
                k_input=k.to(dtype), norm_weight=nw.to(dtype),
                k_positions=torch.arange(context, dtype=torch.int64),
                freqs=rope_table(context + queries), head_scale=1.0 / math.sqrt(heads))


def overlap_vs_context(q_recipe: str = "v4_fp8", k_recipe: Optional[str] = None,
                       contexts: Sequence[int] = (1024, 4096, 16384, 65536),
                       topks: Sequence[int] = (64, 2048), *, queries: int = 4, heads: int = 64,
                       seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> List[Overlap]:
    """:func:`topk_overlap` of the pair on :func:`workload` for each context length and k (k up
    to the context; one warning for a mismatched pair). k_recipe defaults to
    :func:`matching_key_recipe`."""
    k_recipe = k_recipe or matching_key_recipe(q_recipe)
    mismatch = pair_mismatch(q_recipe, k_recipe)
    if mismatch:
        warnings.warn(f"indexer_q: query recipe {q_recipe} and key recipe {k_recipe} do not "
                      f"match: {mismatch}", RecipeMismatchWarning, stacklevel=2)
    out = []
    for n in contexts:
        case = workload(int(n), queries=queries, heads=heads, seed=seed, dtype=dtype)
        for k in topks:
            if k <= n:
                out.append(topk_overlap(q_recipe, k_recipe, topk=k, warn=False, **case))
    return out


def format_overlaps(rows: Sequence[Overlap]) -> str:
    """A text table of overlaps (one line per context and k)."""
    lines = ["query recipe          key recipe  context    k     overlap  worst query"]
    for r in rows:
        lines.append(f"{r.q_recipe:<21} {r.k_recipe:<11} {r.context:>7} {r.topk:>5}   "
                     f"{r.overlap:7.4f}  {r.min_overlap:7.4f}"
                     + ("   MISMATCHED PAIR" if r.mismatch else ""))
    return "\n".join(lines)

