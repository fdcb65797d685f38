"""The op as one Triton kernel, bit-exact by construction for every recipe of the library.

This module imports triton; the rest of the package never needs it (python/indexer_q/
triton_dispatch.py imports this module lazily). The kernel reproduces ``process_row<R>`` of
src/common/row.h step by step, the recipe's columns arriving as compile-time constants taken
from the library's descriptor (``indexer_q.recipe_info``), so a new recipe row that recombines
existing steps needs no new code here.

How it stays exact on every Triton target (NVIDIA, AMD, Intel, the CPU interpreter):

- float32 only, no float64 anywhere;
- every fused multiply-add is an explicit ``tl.fma`` and the compiler may not form others: each
  launch passes ``enable_fp_fusion=False`` (Triton's option that otherwise lets LLVM contract a
  product feeding an add);
- every division is ``tl.math.div_rn`` (IEEE, round to nearest even); Triton's ``/`` on float32
  is an approximate division on NVIDIA;
- negation flips the sign bit (Triton's unary minus is ``0 - x``, which turns -0 into +0);
- fmax / fmin / fabs follow the NaN rules of row.h: comparisons and bit masks where an input's
  NaN (possibly signaling) can arrive; Triton's minimum / maximum (minnum / maxnum: a quiet NaN
  operand ignored) only on values that are float results (quiet NaNs) or whose NaN the caller
  replaces, and only where the sign of a zero cannot change the result (|x| operands, a
  maximum of non-negative values, a clamp to a positive bound);
- inputs are decoded from their bits (bf16: << 16; fp16: the exact decode of row.h, subnormals
  through an integer-to-float conversion and an exact power-of-two product); float constants
  that are not exact binary fractions (1e-4, 1/sqrt(128), 1/6, 6 * 2^-126) are built from their
  bits;
- bf16 rounding points, the e4m3fn encoder, the UE8M0 exponent and its inverse, and the e2m1
  codes are integer / bit operations (row.h's), not device conversion instructions;
- subnormals: no instruction here is flushed on purpose. On NVIDIA Triton emits no ``.ftz``
  for plain float32 arithmetic (its ``enable_reflect_ftz`` option only selects libdevice
  variants, and no libdevice function is called); tests/python/test_triton.py checks the PTX
  of every recipe's kernel for ``.ftz``, ``div.full`` / ``div.approx`` and ``fma`` counts. Other
  targets are covered by the known-answer check of triton_dispatch.py (edge rows with
  subnormal values) before the kernel is used on them.

Layout: one program handles BLOCK_R rows; 2^LANES_LOG2 adjacent lanes share a row, each
holding every 2^LANES_LOG2-th 16-byte piece of it (see _tile_offsets), so a warp's accesses are
whole sectors and each lane keeps its values from load to store. RoPE views a row as (half,
pair, even/odd) and works on the recipe's half; the Hadamard stage at stride s views it as
(128 / 2s, 2, s) and pairs the middle axis, so every add and subtract is the spec's, in the
spec's stage order: inside a thread a split / join (register renaming), across two lanes one
shuffle (_butterfly).
"""

from __future__ import annotations

import os
import struct
from typing import Optional

import torch
import triton
import triton.language as tl

# ---- recipe descriptor -> compile-time constants --------------------------------------------
_FMT = {"e4m3fn": 0, "e4m3fnuz": 1, "e2m1": 2}
_FOLD = {"times_scale": 0, "no_scale": 1, "scale_then_two_factors": 2, "two_factors": 3,
         "no_scale_bf16": 4, "none": 5, "head_scale_first": 6}
_ROPE_OFF = {"last64": 64, "first64": 0, "none": 0}
_NEOX = {"adjacent": False, "neox": True}
_ROPE_FMA_X1C = {"x0_s": False, "x1_c": True}
_FREQS = {"interleaved": 1, "halves": 0}
# the quantizers; which format each serves (row.h's static_asserts)
_QUANT = {"sglang": 0, "vllm": 1, "vllm_cute": 2, "vllm_v32": 3, "fp4_rne": 4, "fp4_two_stage": 5,
          "sglang_ue8m0": 6, "sglang_224": 7, "vllm_fnuz224": 8}
_QUANT_FORMATS = {0: (0, 1, 2), 1: (0, 2), 2: (0, 2), 3: (0,), 4: (2,), 5: (2,), 6: (0,), 7: (0,), 8: (1,)}
_IN_KIND = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}


def recipe_constants(info) -> dict:
    """The kernel's constexpr arguments for a RecipeInfo (KeyError: a step this kernel lacks)."""
    fmt = _FMT[info.format]
    quant = _QUANT[info.quant]
    if fmt not in _QUANT_FORMATS[quant]:
        raise KeyError(f"quantizer {info.quant} has no {info.format} form")  # row.h's static_asserts
    fold = _FOLD[info.fold]
    if fmt == 2 and fold in (0, 2, 6):
        raise KeyError("FP4 has one scale per 32 values: it cannot be folded into weights_out")
    scale_out = bool(info.scale_out)
    if scale_out and (fmt == 2 or quant in (0, 7)):  # row.h's static_asserts
        raise KeyError("scale_out is the row scale of a power-of-two FP8 quantizer")
    if fmt != 2 and quant in (0, 7) and info.bf16_after_hadamard:
        raise KeyError("SGLang's FP8 quantizer has no bf16 point after the Hadamard")
    return dict(
        ROPE=info.rope_dims != "none",
        ROPE_OFF=_ROPE_OFF[info.rope_dims],
        NEOX=_NEOX[info.rope_pairs],
        ROPE_FMA_X1C=_ROPE_FMA_X1C[info.rope_fma],
        FREQS_INTERLEAVED=_FREQS[info.freqs_layout],
        HADAMARD=bool(info.hadamard),
        BF16_ROPE=bool(info.bf16_after_rope),
        BF16_HAD=bool(info.bf16_after_hadamard),
        FMT=fmt,
        QUANT=quant,
        FOLD=fold,
        SCALE_OUT=scale_out,
    )


# ---- scalar steps (row.h), elementwise on tensors --------------------------------------------
@triton.jit
def _bits(x):
    return x.to(tl.uint32, bitcast=True)


@triton.jit
def _f32(u):
    return u.to(tl.float32, bitcast=True)


@triton.jit
def _const(bits: tl.constexpr):
    # a float32 constant from its bits (no decimal -> double -> float double rounding)
    return tl.full([], bits, tl.uint32).to(tl.float32, bitcast=True)


@triton.jit
def _neg(x):
    return _f32(_bits(x) ^ 0x80000000)


@triton.jit
def _abs(x):
    return _f32(_bits(x) & 0x7FFFFFFF)


@triton.jit
def _decode(v, KIND: tl.constexpr):
    # bf16 / fp16 / fp32 element -> float32, exact (row.h bf16_to_f32 / f16_to_f32)
    if KIND == 0:
        return _f32(v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16)
    elif KIND == 1:
        h = v.to(tl.uint16, bitcast=True).to(tl.uint32)
        sign = (h & 0x8000) << 16
        e = (h >> 10) & 0x1F
        m = h & 0x3FF
        sub = _f32(_bits(m.to(tl.float32) * _const(0x33800000)) | sign)  # m * 2^-24, exact
        special = _f32(sign | 0x7F800000 | (m << 13))
        normal = _f32(sign | ((e + 112) << 23) | (m << 13))
        return tl.where(e == 0, sub, tl.where(e == 31, special, normal))
    else:
        return v


@triton.jit
def _round_bf16(x):
    # nearest bf16, ties to even, and back; NaN stays NaN (quieted)
    u = _bits(x)
    nan = x != x
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return _f32(tl.where(nan, u | 0x00400000, r))


@triton.jit
def _e4m3fn(f, IN_RANGE: tl.constexpr, k120, sm):
    # float32 -> e4m3fn code, returned in bits 24..31 of a uint32 (the rest zero): nearest even,
    # saturating (a NaN f is the caller's to replace); the codes of row.h e4m3fn_encode, computed as follows.
    # With E = max(exponent(|f|), -6), e4m3's step at |f| is 2^(E - 3); adding and removing
    # 2^(E + 20) rounds |f| to that step (float32 addition, nearest even; the subtraction is
    # exact): r. Every such r is m * 2^-9 (m < 8) or a normal e4m3 value, so r * 2^-120 is exact
    # (a float32 subnormal m * 2^-129, or a normal number with exponent E - 120), and its
    # bits >> 20 are the magnitude code (subnormals kept: no flush to zero); << 4 puts it under
    # the sign bit of f (the code's top byte: byte extraction at the store is free).
    # k120: 2^-120, or per row 0 to encode the row as zeros (with sm = 0); sm: the sign bit
    # mask (0x80000000, or 0 with k120 = 0). IN_RANGE: the caller guarantees |f| <= 448 and no
    # NaN (SGLang's clamp; 448 itself gives 0x7e): the saturation / NaN selects are skipped.
    u = _bits(f)
    if IN_RANGE:
        a = tl.abs(f)  # the sign bit cleared (an operand modifier of the add below)
        eb = u & 0x7F800000
    else:  # saturate: min(|f|, 448) rounds as |f| does below 464 (NaN, which every such
        # caller replaces and passes quiet, comes out as 448 too)
        a = tl.minimum(tl.abs(f), 448.0)
        eb = _bits(a) & 0x7F800000
    eb = tl.where(eb > 0x3C800000, eb, 0x3C800000)
    magic = _f32(eb + (20 << 23))
    r = (a + magic) - magic
    mag = _bits(r * k120) << 4
    return mag | (u & sm)


@triton.jit
def _max_ignoring_nan(amax, y):
    # row.h amax_step: max(amax, |y|), a NaN y ignored (amax starts at +0, never NaN)
    a = _abs(y)
    return tl.where(a > amax, a, amax)


# The combine function of the row maxima: Triton's own elementwise max (what tl.max reduces
# with), named so that Triton's CPU interpreter takes its numpy fast path (any other combine
# function runs there element by element in Python). tl.max itself is not called: it is a jit
# function of Triton's standard library, which the interpreter cannot run if triton was
# imported before TRITON_INTERPRET was set.
@triton.jit
def _row_code(valid, code: tl.constexpr):
    # per row: `code` (a code in the top byte) where valid, else 0; shape (BLOCK_R, 1)
    return tl.where(valid, code, 0).to(tl.uint32)[:, None]


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


_MAX_COMBINE = getattr(tl.standard, "_elementwise_max", _max_combine)  # (Triton 3.6 and 3.9 have it)


@triton.jit
def _row_amax(y, axis: tl.constexpr, QUIET: tl.constexpr):
    # max over `axis` of |y| with NaN ignored, +0 for a row of NaNs (row.h amax_step from +0).
    # The reduction is Triton's maximum (maxnum: a quiet NaN operand is ignored, and any order
    # of non-negative values gives the same value). QUIET: y is the result of float arithmetic
    # or of _round_bf16, so its NaNs are quiet, and the reduction itself ignores them (then
    # maxnum with +0 for the all-NaN row); otherwise y may hold an input's signaling NaN (whose
    # maxnum varies by target): NaNs become +0 first.
    a = tl.abs(y)
    if QUIET:
        return tl.maximum(tl.reduce(a, axis, _MAX_COMBINE), 0.0)
    else:
        a = tl.where(a > 0.0, a, 0.0)
        return tl.reduce(a, axis, _MAX_COMBINE)


@triton.jit
def _fmax_floor(a, floor):
    # fmaxf(floor, a) for a non-NaN a
    return tl.where(a > floor, a, floor)


# E2M1 codes. row.h counts the thresholds {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} below
# a = min(|v|, 6) (NaN -> 6). Here, as in _e4m3fn: with E = max(exponent(a), 0), e2m1's step
# at a is 2^(E - 1); adding and removing 2^(E + 22) rounds a to that step (float32 addition,
# nearest even; the subtraction is exact): r, one of 0, 0.5, 1, 1.5, 2, 3, 4, 6 (a <= 6). Then
# r * 2^-126 is exact (2^-127 for 0.5: a float32 subnormal, kept) and its bits >> 22 are the
# magnitude code 0..7. Nearest-even in float32 is nearest-even in the code (the code's last bit
# is r's last mantissa bit). Every caller's v is a product (quiet NaN), so min(|v|, 6) is 6 for
# a NaN on every target (maxnum / minnum ignore a quiet NaN).
@triton.jit
def _e2m1_round(v):
    # (r, a, eb): a = min(|v|, 6), r = a rounded to nearest even on e2m1's grid, eb = the
    # exponent bits of 2^max(exponent(a), 0)
    a = tl.minimum(tl.abs(v), 6.0)
    eb = tl.maximum(_bits(a) & 0x7F800000, 0x3F800000)
    magic = _f32(eb + (22 << 23))
    r = (a + magic) - magic
    return r, a, eb


@triton.jit
def _e2m1_mag_even(v):
    # the E2M1 magnitude (0..7) of min(|v|, 6), nearest with ties to even, NaN -> 7 (row.h
    # e2m1_magnitude_rne)
    r, a, eb = _e2m1_round(v)
    return _bits(r * _const(0x00800000)) >> 22  # * 2^-126


@triton.jit
def _e2m1_sglang(v):
    # ties to the smaller magnitude (row.h e2m1_encode: the count of thresholds strictly below
    # a): the nearest-even code, less one where a was a tie rounded up (r - a, exact, is then
    # half the step, 2^(E - 2)); sign bit only on a nonzero code of a negative v
    r, a, eb = _e2m1_round(v)
    m = _bits(r * _const(0x00800000)) >> 22
    m = m - ((r - a) == _f32(eb - (2 << 23))).to(tl.uint32)
    return m | tl.where(v < -0.25, 8, 0).to(tl.uint32)  # m != 0 exactly where |v| > 0.25


@triton.jit
def _e2m1_vllm(v):
    # nearest, ties to even, saturating at 6, sign bit of v on every code; NaN -> 0x7
    code = _e2m1_mag_even(v) | ((_bits(v) >> 28) & 8)
    return tl.where(v != v, 7, code)


@triton.jit
def _e2m1_rne(v):
    # SGLang V4.1's packer (row.h e2m1_encode_rne): ties to even, NaN -> 7, the sign bit only on a
    # nonzero magnitude of a negative v
    m = _e2m1_mag_even(v)
    return m | tl.where(v < -0.25, 8, 0).to(tl.uint32)  # m != 0 exactly where |v| > 0.25


@triton.jit
def _exp_up(x):
    # the exponent byte of a positive float32 rounded up to a power of two: exponent bits +
    # (mantissa bits != 0) (uint32; +Inf gives 255)
    b = _bits(x)
    return ((b >> 23) & 0xFF) + ((b & 0x7FFFFF) != 0).to(tl.uint32)


@triton.jit
def _rne_exponent(amax):
    # row.h rne_ue8m0_of_amax: the exponent of fmax(amax / 6, 1e-4) rounded up, in [1, 254]
    e = _exp_up(_fmax_floor(tl.math.div_rn(amax, 6.0), _const(0x38D1B717)))
    return tl.where(e < 1, 1, tl.where(e > 254, 254, e)).to(tl.uint32)


_SUM_COMBINE = getattr(tl.standard, "_sum_combine", None)


@triton.jit
def _add_combine(a, b):
    return a + b


if _SUM_COMBINE is None:  # (Triton 3.6 and 3.9 have it: the interpreter's numpy fast path)
    _SUM_COMBINE = _add_combine


# ---- the row tiles: which thread holds which values -----------------------------------------
# A row's NB-bit column index is split into: VB vector bits (one 16-byte access), IB - VB more
# bits held by the same thread, LB lane bits (2^LB lanes share the row, their accesses
# adjacent in memory), and the rest, again held by the thread. The tile is loaded through a
# pointer tensor (HI, MID, R, LANE, V): Triton's coalescing gives the contiguous V axis to one
# thread (a 16-byte access) and hands out lanes in the order LANE, R, MID, HI (ties in
# contiguity go to the last axes first), so with R >= 32 / 2^LB rows per warp the LANE and R
# axes are exactly the lanes and HI, MID stay in registers. Then the tile is viewed as
# (R, 2^NB) in column order (free: the permute and reshape only rename registers). Every
# tile of the kernel (q rows, freqs rows, codes) is cut with the same lane bits, so the values
# a thread computes with are the ones it loaded and stores (no shuffles, no shared memory
# outside the Hadamard's cross-lane stages and the row maxima).
@triton.jit
def _tile_offsets(rowbase, NB: tl.constexpr, VB: tl.constexpr, IB: tl.constexpr,
                  LB: tl.constexpr):
    HI: tl.constexpr = 1 << (NB - IB - LB)
    MID: tl.constexpr = 1 << (IB - VB)
    LN: tl.constexpr = 1 << LB
    V: tl.constexpr = 1 << VB
    hi = tl.arange(0, HI) * (1 << (IB + LB))
    mid = tl.arange(0, MID) * V
    ln = tl.arange(0, LN) * (1 << IB)
    v = tl.arange(0, V)
    return (hi[:, None, None, None, None] + mid[None, :, None, None, None]
            + rowbase[None, None, :, None, None] + ln[None, None, None, :, None]
            + v[None, None, None, None, :])


@triton.jit
def _load_tile(ptr, rowbase, rmask, BLOCK_R: tl.constexpr, NB: tl.constexpr, VB: tl.constexpr,
               IB: tl.constexpr, LB: tl.constexpr):
    # (BLOCK_R, 2^NB): the 2^NB values from ptr + rowbase[r] of each row r
    t = tl.load(ptr + _tile_offsets(rowbase, NB, VB, IB, LB),
                mask=rmask[None, None, :, None, None], other=0)
    return tl.reshape(tl.permute(t, (2, 0, 3, 1, 4)), (BLOCK_R, 1 << NB))


@triton.jit
def _store_tile(ptr, rowbase, rmask, v, BLOCK_R: tl.constexpr, NB: tl.constexpr,
                VB: tl.constexpr, IB: tl.constexpr, LB: tl.constexpr):
    t = tl.reshape(v, (BLOCK_R, 1 << (NB - IB - LB), 1 << LB, 1 << (IB - VB), 1 << VB))
    tl.store(ptr + _tile_offsets(rowbase, NB, VB, IB, LB), tl.permute(t, (1, 3, 0, 2, 4)),
             mask=rmask[None, None, :, None, None])


@triton.jit
def _butterfly(x, BLOCK_R: tl.constexpr, S: tl.constexpr, LB: tl.constexpr):
    # one Hadamard stage at stride S on (BLOCK_R, 128): (x[i], x[i + S]) -> (a + b, a - b) for
    # every i whose bit S is clear; the row viewed as (128 / 2S, 2, S). Strides 1, 2, 4 and
    # those above the lane bits are inside a thread (split / join: register renaming). A stride
    # on a lane bit pairs two lanes: each lane gets its partner's value as the pair's integer
    # sum minus its own (one shuffle; exact modulo 2^32) and computes fma(own, +-1, partner),
    # i.e. b + a in the lower lane and a - b in the upper one (the product is exact, so the fma
    # rounds once, as a + b and a - b do).
    t = tl.reshape(x, (BLOCK_R, 64 // S, 2, S))
    if S >= 8 and S < (8 << LB):
        u = _bits(t)
        pu = tl.reduce(u, 2, _SUM_COMBINE, keep_dims=True) - u
        sg = tl.where(tl.arange(0, 2) == 1, -1.0, 1.0)
        sg = tl.broadcast_to(tl.reshape(sg, (1, 1, 2, 1)), (BLOCK_R, 64 // S, 2, S))
        t = tl.fma(t, sg, _f32(pu))
    else:
        t = tl.permute(t, (0, 1, 3, 2))
        a, b = tl.split(t)
        t = tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2))
    return tl.reshape(t, (BLOCK_R, 128))


# The sizes are not specialized (Triton would compile a variant per "== 1" / "divisible by 16"
# combination of them, for index arithmetic done once per row).
@triton.jit(do_not_specialize=["n_rows", "H", "w_stride_b", "max_pos"])
def quant_q_kernel(
    q_ptr, w_ptr, freqs_ptr, pos_ptr, out_ptr, sf_ptr, wout_ptr,
    n_rows, H, w_stride_b, max_pos, weight_scale, head_scale,
    IN_KIND: tl.constexpr, W_KIND: tl.constexpr, ROPE: tl.constexpr,
    ROPE_OFF: tl.constexpr, NEOX: tl.constexpr, ROPE_FMA_X1C: tl.constexpr,
    FREQS_INTERLEAVED: tl.constexpr, HADAMARD: tl.constexpr, BF16_ROPE: tl.constexpr,
    BF16_HAD: tl.constexpr, FMT: tl.constexpr, QUANT: tl.constexpr, FOLD: tl.constexpr,
    SCALE_OUT: tl.constexpr, BLOCK_R: tl.constexpr, LANES_LOG2: tl.constexpr,
):
    LB: tl.constexpr = LANES_LOG2  # 2^LB lanes share a row (0, 1 or 2)
    # (b, h) of each row from one division per program: the program's rows are row0 + r, and
    # h0 + r wraps past H at most once where H >= BLOCK_R (otherwise a division per row)
    pid = tl.program_id(0)
    row0 = pid.to(tl.int64) * BLOCK_R
    b0 = row0 // H
    r = tl.arange(0, BLOCK_R)
    t = (row0 - b0 * H) + r
    if H >= BLOCK_R:
        wrap = t >= H
        b = b0 + wrap.to(tl.int64)
        h = tl.where(wrap, t - H, t)
    else:
        qt = t // H
        b = b0 + qt
        h = t - qt * H
    rows = row0 + r
    rmask = rows < n_rows

    # ---- loads: the row, the weight
    VB: tl.constexpr = 2 if IN_KIND == 2 else 3  # 16-byte accesses
    x = _decode(_load_tile(q_ptr, rows * 128, rmask, BLOCK_R, 7, VB, 3, LB), IN_KIND)
    if FOLD != 5:  # the recipe has weights
        w = _decode(tl.load(w_ptr + b * w_stride_b + h, mask=rmask, other=0), W_KIND)
    else:
        w = tl.zeros([BLOCK_R], tl.float32)
    if ROPE:
        pos = tl.load(pos_ptr + b, mask=rmask, other=0).to(tl.int64)
        valid = (pos >= 0) & (pos < max_pos)
        prow = tl.where(valid, pos, 0)  # an out-of-range row reads row 0 and writes the NaN marker
        fbase = prow * 64
        # the recipe's half of the row, as 32 pairs (x0, x1): adjacent dims (2j, 2j+1), or
        # NeoX pairs (j, j + 32); and the (cos, sin) of pair j, cut with the same lane bits
        # (adjacent pairs: j's bits are the row's bits 1..5; NeoX pairs: bits 0..4)
        lo, hi = tl.split(tl.permute(tl.reshape(x, (BLOCK_R, 2, 64)), (0, 2, 1)))
        if ROPE_OFF == 64:
            xh = hi
        else:
            xh = lo
        if NEOX:
            xr, xi = tl.split(tl.permute(tl.reshape(xh, (BLOCK_R, 2, 32)), (0, 2, 1)))
        else:
            xr, xi = tl.split(tl.reshape(xh, (BLOCK_R, 32, 2)))
        if FREQS_INTERLEAVED:  # (cos, sin) per pair: freqs index bits = the pair's row bits
            f = _load_tile(freqs_ptr, fbase, rmask, BLOCK_R, 6, 2, 3, LB)
            c, s = tl.split(tl.reshape(f, (BLOCK_R, 32, 2)))
        else:  # [cos x32 | sin x32]
            if NEOX:
                c = _load_tile(freqs_ptr, fbase, rmask, BLOCK_R, 5, 2, 3, LB)
                s = _load_tile(freqs_ptr + 32, fbase, rmask, BLOCK_R, 5, 2, 3, LB)
            else:
                c = _load_tile(freqs_ptr, fbase, rmask, BLOCK_R, 5, 2, 2, LB)
                s = _load_tile(freqs_ptr + 32, fbase, rmask, BLOCK_R, 5, 2, 2, LB)

        # ---- RoPE (row.h rope_row) on the recipe's 32 pairs, then their bf16 point
        nr = tl.fma(xr, c, _neg(xi * s))
        if ROPE_FMA_X1C:  # x1' = fma(x1, c, x0 * s)
            ni = tl.fma(xi, c, xr * s)
        else:  # x1' = fma(x0, s, x1 * c)
            ni = tl.fma(xr, s, xi * c)
        if BF16_ROPE:
            nr = _round_bf16(nr)
            ni = _round_bf16(ni)
        if NEOX:
            xh = tl.reshape(tl.permute(tl.join(nr, ni), (0, 2, 1)), (BLOCK_R, 64))
        else:
            xh = tl.reshape(tl.join(nr, ni), (BLOCK_R, 64))
        if ROPE_OFF == 64:
            x = tl.reshape(tl.permute(tl.join(lo, xh), (0, 2, 1)), (BLOCK_R, 128))
        else:
            x = tl.reshape(tl.permute(tl.join(xh, hi), (0, 2, 1)), (BLOCK_R, 128))
    else:  # no RoPE: no freqs, no positions, every row valid
        valid = rows >= 0

    # ---- Hadamard: strides 1, 2, 4, ..., 64, in that order, then 1/sqrt(128)
    y = x
    if HADAMARD:
        y = _butterfly(y, BLOCK_R, 1, LB)
        y = _butterfly(y, BLOCK_R, 2, LB)
        y = _butterfly(y, BLOCK_R, 4, LB)
        y = _butterfly(y, BLOCK_R, 8, LB)
        y = _butterfly(y, BLOCK_R, 16, LB)
        y = _butterfly(y, BLOCK_R, 32, LB)
        y = _butterfly(y, BLOCK_R, 64, LB)
        y = y * _const(0x3DB504F3)  # 0x1.6a09e6p-4f

    ws = weight_scale
    hs = head_scale
    # the one NaN of weights_out (row.h nan_weight_bits, docs/RECIPES.md "NaN"): 0x7fff0000 for the
    # bf16-rounded fold, 0x7fffffff otherwise; also the out-of-range rows' value
    if FOLD == 4:
        nan_w = _const(0x7FFF0000)
    else:
        nan_w = _const(0x7FFFFFFF)
    if FMT == 2:
        # ---- FP4: four blocks of 32 dims, UE8M0 exponent per block, e2m1 code pairs
        if BF16_HAD:
            y = _round_bf16(y)
        yb = tl.reshape(y, (BLOCK_R, 4, 32))
        amax = _row_amax(yb, 2, HADAMARD or BF16_HAD)
        if QUANT == 1:  # vLLM's MXFP4
            ratio = _fmax_floor(amax, _const(0x01C00000)) * _const(0x3E2AAAAB)
            rb = _bits(ratio)
            ex = tl.where((rb & 0x7F800000) == 0x7F800000, 254, ((rb + 0x7FFFFF) >> 23) & 0xFF)
            ex = ex.to(tl.uint32)
            inv = _f32((254 - ex) << 23)
        elif QUANT == 2:  # vLLM's CuTe MXFP4: the same exponent unclamped (Inf: 255)
            ex = _exp_up(_fmax_floor(amax, _const(0x01C00000)) * _const(0x3E2AAAAB))
            inv = _f32((254 - ex) << 23)  # 32-bit unsigned: ex = 255 gives -Inf
        elif QUANT == 4:  # SGLang V4.1's packer (fp4_rne)
            ex = _rne_exponent(amax)
            inv = tl.where(ex == 254, _const(0x00400000), _f32((254 - ex) << 23))  # 2^-127 exact
        elif QUANT == 5:  # fp4_two_stage: a fake quantization, then the packer on its values
            e1 = _exp_up(_fmax_floor(amax, _const(0x01C00000)) * _const(0x3E2AAAAB))  # Inf: 255
            sc1 = _f32(e1 << 23)
            inv1 = _f32((254 - e1) << 23)  # 32-bit unsigned: e1 = 255 gives -Inf
            u = yb * inv1[:, :, None]  # fma(x, inv, +0) but for the sign of a zero (unseen)
            g, _a, _eb = _e2m1_round(u)  # the e2m1 value of u's magnitude code (NaN: 6)
            yb = tl.where(u < 0.0, _neg(g), g) * sc1[:, :, None]
            ex = _rne_exponent(_row_amax(yb, 2, True))  # products
            inv = _f32((254 - ex) << 23)  # ex = 254: +0, as the engine's packer
        else:  # SGLang's V4
            sc = tl.math.div_rn(_fmax_floor(amax, _const(0x38D1B717)), 6.0)
            ex = _exp_up(sc)
            inv = _f32((254 - ex) << 23)
        v = tl.reshape(yb * inv[:, :, None], (BLOCK_R, 64, 2))
        v0, v1 = tl.split(v)
        if QUANT == 1 or QUANT == 2:
            code = _e2m1_vllm(v0) | (_e2m1_vllm(v1) << 4)
        elif QUANT >= 4:
            code = _e2m1_rne(v0) | (_e2m1_rne(v1) << 4)
        else:
            code = _e2m1_sglang(v0) | (_e2m1_sglang(v1) << 4)
        code = tl.where(valid[:, None], code, 0)
        # q_sf: the four exponent bytes, block k in byte k (little-endian)
        e02, e13 = tl.split(tl.reshape(ex, (BLOCK_R, 2, 2)))  # (e0, e2), (e1, e3)
        e0, e2 = tl.split(e02)
        e1, e3 = tl.split(e13)
        sf = e0 | (e1 << 8) | (e2 << 16) | (e3 << 24)
        sf = tl.where(valid, sf, 0)
        _store_tile(out_ptr, rows * 64, rmask, code.to(tl.uint8), BLOCK_R, 6, 2, 2, LB)
        tl.store(sf_ptr + rows, sf.to(tl.int32, bitcast=True), mask=rmask)
        if FOLD != 5:
            if FOLD == 1:
                wo = w * ws
            elif FOLD == 4:
                wo = _round_bf16(w * ws)
            else:
                wo = (w * ws) * hs
            wo = tl.where(valid & (wo == wo), wo, nan_w)
            tl.store(wout_ptr + rows, wo, mask=rmask)
    else:
        # ---- FP8: one scale per row
        if BF16_HAD:  # all 128 values rounded to bf16 before the amax (sglang_ue8m0)
            y = _round_bf16(y)
        amax = _row_amax(y, 1, HADAMARD or BF16_HAD)
        k120 = _const(0x03800000)  # 2^-120
        # an out-of-range position's row is all zero codes: the encoder's factor and sign mask
        # are 0 for it (see _e4m3fn), and its NaN code (_row_code) is 0
        k120 = tl.where(valid, k120, 0.0)[:, None]
        sm = tl.where(valid, 0x80000000, 0).to(tl.uint32)[:, None]
        if QUANT == 2:  # vLLM's CuTe: e of fmax(amax, 1e-4) * fl(1/448) rounded up (Inf: 255)
            ec = (((_bits(_fmax_floor(amax, _const(0x38D1B717)) * _const(0x3B124925)) + 0x7FFFFF)
                   >> 23) & 0xFF)
            scale = _f32(ec << 23)
            inv = _f32((254 - ec) << 23)  # 32-bit unsigned: ec = 255 gives -Inf
            v = y * inv[:, None]
            code = tl.where(v != v, _row_code(valid, 0x7F000000),
                            _e4m3fn(v, False, k120, sm))
        elif QUANT == 3 or QUANT == 6:
            # pow2ceil(fmax(amax, floor) * fl(1/448)); vLLM's V3.2: floor 1e-10, NaN -> 0x7e;
            # SGLang's V3.2 act_quant (sglang_ue8m0): floor 1e-4, NaN -> 0xfe (-448)
            if QUANT == 3:
                qs = _fmax_floor(amax, _const(0x2EDBE6FF)) * _const(0x3B124925)
            else:
                qs = _fmax_floor(amax, _const(0x38D1B717)) * _const(0x3B124925)
            scale = _f32((((_bits(qs) + 0x7FFFFF) >> 23) & 0xFF) << 23)
            inv = tl.math.div_rn(1.0, scale)  # exact: see the vllm case below
            v = y * inv[:, None]
            if QUANT == 3:
                code = tl.where(v != v, _row_code(valid, 0x7E000000),
                                _e4m3fn(v, False, k120, sm))
            else:
                code = tl.where(v != v, _row_code(valid, 0xFE000000),
                                _e4m3fn(v, False, k120, sm))
        elif QUANT == 1:
            qs = tl.math.div_rn(_fmax_floor(amax, _const(0x38D1B717)), 448.0)
            scale = _f32((((_bits(qs) + 0x7FFFFF) >> 23) & 0xFF) << 23)  # pow2_ceil
            # x / scale for a power of two (or +Inf) scale: 1 / scale is exact (a power of two,
            # or 0), and x * (1 / scale) is the same correctly rounded real number as
            # x / scale (Inf and NaN cases alike: x / Inf = x * 0), so one division per row
            inv = tl.math.div_rn(1.0, scale)
            v = y * inv[:, None]
            code = tl.where(v != v, _row_code(valid, 0x7F000000),
                            _e4m3fn(v, False, k120, sm))
        elif QUANT == 8:
            # vLLM's ROCm quantizer (vllm_fnuz224): q_scale = pow2ceil(fmax(amax, 1e-4) / 224);
            # the e4m3fnuz code of v = x / q_scale is the e4m3fn code of 2v (exact: a power-of-two
            # product), -0 (0x80, e4m3fnuz's NaN) written as 0x00, NaN v -> 0x80 (row.h
            # fnuz224_code); x * (1 / q_scale) is x / q_scale, as in the vllm case below
            qs = tl.math.div_rn(_fmax_floor(amax, _const(0x38D1B717)), 224.0)
            scale = _f32((((_bits(qs) + 0x7FFFFF) >> 23) & 0xFF) << 23)  # pow2_ceil
            inv = tl.math.div_rn(1.0, scale)
            v = y * inv[:, None]
            code = _e4m3fn(v * 2.0, False, k120, sm)
            code = tl.where(code == 0x80000000, 0, code)
            code = tl.where(v != v, _row_code(valid, 0x80000000), code)
        else:
            # SGLang's: scale = fmax(1e-4, amax) / LIM, codes of clamp(y * (1 / scale), -LIM, LIM)
            # with LIM = 448, or 224 for the gfx942 form (sglang_224, row.h sglang_fp8_max)
            if QUANT == 7:
                lim = 224.0
            else:
                lim = 448.0
            scale = tl.math.div_rn(_fmax_floor(amax, _const(0x38D1B717)), lim)
            inv = tl.math.div_rn(1.0, scale)
            t = y * inv[:, None]
            t = tl.where(t < lim, t, lim)  # fminf(t, lim): NaN -> lim
            t = tl.where(t > -lim, t, -lim)
            # an out-of-range position's row encoded as zeros: k120 = 0 and no sign
            code = _e4m3fn(t, True, k120, sm)
            if FMT == 1:
                code = tl.where(code == 0x80000000, 0, code)
        _store_tile(out_ptr, rows * 128, rmask, (code >> 24).to(tl.uint8), BLOCK_R, 7, 3, 3, LB)
        if SCALE_OUT:  # the row scale as float32 into q_sf (+0 for an out-of-range position)
            tl.store(sf_ptr + rows, tl.where(valid, scale, 0.0), mask=rmask)
        if FOLD != 5:
            if FOLD == 0:
                wo = (w * ws) * scale
            elif FOLD == 1:
                wo = w * ws
            elif FOLD == 2:
                wo = ((w * scale) * ws) * hs
            elif FOLD == 4:
                wo = _round_bf16(w * ws)
            elif FOLD == 6:
                wo = ((w * hs) * scale) * ws
            else:
                wo = (w * ws) * hs
            if FMT == 1 and QUANT != 8:  # SGLang's FNUZ recipes double it; vLLM's ROCm form not
                wo = wo * 2.0
            wo = tl.where(valid & (wo == wo), wo, nan_w)
            tl.store(wout_ptr + rows, wo, mask=rmask)


# ---- launcher ---------------------------------------------------------------------------------
def _f32_round(x: float) -> float:
    """A Python float rounded to float32 once (nearest even; overflow -> +-Inf), as the binding
    does with float(double)."""
    return torch.tensor(float(x), dtype=torch.float64).to(torch.float32).item()


def interpreting() -> bool:
    """True when Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1 when this
    module was imported)."""
    return type(quant_q_kernel).__name__ == "InterpretedFunction"


def default_block_rows(n_rows: int, device_type: str) -> int:
    """Rows per program (with default_lanes lanes a row and default_num_warps warps).
    bench/triton_bench.py --sweep times the alternatives."""
    if interpreting():
        return 512  # numpy per program: big blocks amortize the interpreter's per-op cost
    return 8


def default_lanes(block_rows: int) -> int:
    """Lanes sharing a row: 4 (each holds 4 of the row's 16-byte pieces; 2 Hadamard stages
    across lanes). The interpreter runs the same arithmetic (its reductions are numpy's)."""
    return 4


def default_num_warps(block_rows: int, lanes: int = 4) -> int:
    """As many warps as the rows fill: block_rows * lanes / 32 (1 to 4)."""
    return max(1, min(4, block_rows * lanes // 32))


_LANES_LOG2 = {1: 0, 2: 1, 4: 2}


def launch(info, q_input: torch.Tensor, q_out: torch.Tensor, q_sf: Optional[torch.Tensor],
           weight: torch.Tensor, weights_out: torch.Tensor, weight_scale: float,
           freqs: torch.Tensor, positions: torch.Tensor, head_scale: float = 1.0,
           block_rows: Optional[int] = None, num_warps: Optional[int] = None,
           lanes: Optional[int] = None) -> None:
    """Runs the kernel on arguments that the library's validator accepted (shapes, dtypes,
    layouts, devices checked there): writes q_out (raw codes: any 1-byte dtype), q_sf (FP4) and
    weights_out in place. block_rows, num_warps, lanes: the launch shape (rows per program,
    warps per program, lanes a row: 1, 2 or 4; None: the defaults)."""
    B, H = q_input.shape[0], q_input.shape[1]
    n_rows = B * H
    if n_rows == 0:
        return
    consts = recipe_constants(info)
    br = block_rows or default_block_rows(n_rows, q_input.device.type)
    ln = lanes or default_lanes(br)
    nw = num_warps or default_num_warps(br, ln)
    out = q_out.view(torch.uint8)
    # arguments the recipe does not take (0-element tensors) are never read: any pointer will do
    if not consts["ROPE"]:
        freqs, positions = q_input, q_input
    if consts["FOLD"] == 5:
        weight, weights_out = q_input, out
    # q_sf: FP4 block scales (int32) or scale_out's row scale (float32); else unused: any pointer
    sf = q_sf if q_sf is not None else weights_out
    grid = (triton.cdiv(n_rows, br),)
    quant_q_kernel[grid](
        q_input, weight, freqs, positions, out, sf, weights_out,
        n_rows, H, weight.stride(0) if consts["FOLD"] != 5 else 0,
        freqs.shape[0] if consts["ROPE"] else 0,
        _f32_round(weight_scale), _f32_round(head_scale),
        IN_KIND=_IN_KIND[q_input.dtype],
        W_KIND=_IN_KIND[weight.dtype] if consts["FOLD"] != 5 else _IN_KIND[q_input.dtype],
        BLOCK_R=br, LANES_LOG2=_LANES_LOG2[ln], num_warps=nw, enable_fp_fusion=False,
        **consts,
    )


def compile_offline(info, dtype: str = "bf16", block_rows: Optional[int] = None,
                    num_warps: Optional[int] = None, lanes: Optional[int] = None,
                    arch: int = 90):
    """The kernel for a recipe compiled for sm_<arch> without a GPU, at the GPU launcher's
    default shape unless given (Triton's compiled kernel: .asm["ptx"], ["cubin"], .n_regs
    is not set offline)."""
    from triton.backends.compiler import GPUTarget

    kind = {"bf16": 0, "fp16": 1, "fp32": 2}[dtype]
    sig = {"q_ptr": "*" + dtype, "w_ptr": "*" + dtype, "freqs_ptr": "*fp32", "pos_ptr": "*i64",
           "out_ptr": "*u8", "sf_ptr": "*i32", "wout_ptr": "*fp32", "n_rows": "i32", "H": "i32",
           "w_stride_b": "i32", "max_pos": "i32", "weight_scale": "fp32", "head_scale": "fp32"}
    br = block_rows or 8  # default_block_rows on a GPU
    ln = lanes or 4  # default_lanes on a GPU
    num_warps = num_warps or default_num_warps(br, ln)
    cx = dict(IN_KIND=kind, W_KIND=kind, BLOCK_R=br, LANES_LOG2=_LANES_LOG2[ln],
              **recipe_constants(info))
    if cx["SCALE_OUT"]:
        sig["sf_ptr"] = "*fp32"  # the row scale
    sig.update({k: "constexpr" for k in cx})
    # the pointers 16-byte aligned, as a launch with torch's allocations specializes them
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(7)}
    src = triton.compiler.ASTSource(fn=quant_q_kernel, signature=sig, constexprs=cx, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, enable_fp_fusion=False))


def ptx_of(info, dtype: str = "bf16", block_rows: Optional[int] = None,
           num_warps: Optional[int] = None, arch: int = 90, lanes: Optional[int] = None) -> str:
    """The PTX of the kernel for a recipe, compiled for sm_<arch> without a GPU (inspection and
    tests: no .ftz, no approximate division, which fma)."""
    return compile_offline(info, dtype, block_rows, num_warps, lanes, arch).asm["ptx"]
