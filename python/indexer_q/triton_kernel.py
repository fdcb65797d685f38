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
- fmax / fmin / fabs are written with comparisons and bit masks, with the NaN rules of row.h,
  never with a device min/max whose NaN or signed-zero behaviour varies;
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

Layout: one program handles BLOCK_R rows, loaded and stored contiguously. RoPE views a row as
(half, pair, even/odd) and works on the recipe's half; the Hadamard stage at stride s views it
as (128 / 2s, 2, s) and splits the middle axis, so every add and subtract is the spec's, in the
spec's stage order (Triton turns the views into register / shuffle / shared-memory moves).
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
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return _f32(tl.where(nan, u | 0x00400000, r))


@triton.jit
def _e4m3fn(f, IN_RANGE: tl.constexpr):
    # float32 -> e4m3fn code (uint32 in 0..255): nearest even, saturating, NaN -> 0x7f | sign;
    # the codes of row.h e4m3fn_encode, computed as follows. With E = max(exponent(|f|), -6),
    # e4m3's step at |f| is 2^(E - 3); adding and removing 2^(E + 20) rounds |f| to that step
    # (float32 addition, nearest even; the subtraction is exact): r. Every such r is
    # m * 2^-9 (m < 8) or a normal e4m3 value, so r * 2^-120 is exact (a float32 subnormal
    # m * 2^-129, or a normal number with exponent E - 120), and its bits >> 20 are the code
    # (subnormals kept: no flush to zero). IN_RANGE: the caller guarantees |f| <= 448 and no
    # NaN (SGLang's clamp; 448 itself gives 0x7e): the saturation / NaN selects are skipped.
    u = _bits(f)
    sign = (u >> 24) & 0x80
    a = u & 0x7FFFFFFF
    eb = a & 0x7F800000
    eb = tl.where(eb > 0x3C800000, eb, 0x3C800000)
    magic = _f32(eb + (20 << 23))
    r = (_f32(a) + magic) - magic
    code = _bits(r * _const(0x03800000)) >> 20  # * 2^-120
    if not IN_RANGE:
        code = tl.where(a >= 0x43E00000, 0x7E, code)
        code = tl.where(a > 0x7F800000, 0x7F, code)
    return sign | code


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
def _max_combine(a, b):
    return tl.where(a > b, a, b)


_MAX_COMBINE = getattr(tl.standard, "_elementwise_max", _max_combine)  # (Triton 3.6 and 3.9 have it)


@triton.jit
def _row_amax(y, axis: tl.constexpr):
    # max over `axis` of |y| with NaN ignored: NaNs (and nothing else) become +0 first, then an
    # exact max of non-negative, non-NaN values (any order, any max instruction: same value)
    a = _abs(y)
    a = tl.where(a > 0.0, a, 0.0)
    return tl.reduce(a, axis, _MAX_COMBINE)


@triton.jit
def _fmax_floor(a, floor):
    # fmaxf(floor, a) for a non-NaN a
    return tl.where(a > floor, a, floor)


# E2M1 codes. row.h counts the thresholds {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} below
# a = min(|v|, 6) (NaN -> 6). Here the count comes from one rounding of a scaled to its range's
# code step: a in [0, 2] has codes 0..4 every 0.5 (k = 2), (2, 4] codes 4..6 every 1 (k = 1),
# (4, 6] codes 6..7 every 2 (k = 0.5); a * k is exact (a power-of-two factor) and so is
# a * k - off for the offsets used (Sterbenz, or a result <= 0 that the clamp removes).
@triton.jit
def _e2m1_sglang(v):
    # ties to the smaller magnitude: the count of thresholds strictly below a is
    # base + max(ceil(a * k - off), 0); sign bit only on a nonzero code of a negative v
    av = _abs(v)
    a = tl.where(av < 6.0, av, 6.0)
    hi = a > 4.0
    mid = a > 2.0
    k = tl.where(hi, 0.5, tl.where(mid, 1.0, 2.0))
    off = tl.where(mid, 2.5, 0.5)
    base = tl.where(hi, 6, tl.where(mid, 4, 0)).to(tl.uint32)
    y = a * k - off
    # ceil(y) for y in [-0.5, 3.5]: the nearest integer by adding and removing 1.5 * 2^23
    # (where float32's step is 1), plus one if that fell below y (no ceil instruction: on
    # NVIDIA Triton's ceil is libdevice's, flushing subnormal inputs in its default mode)
    r = (y + 12582912.0) - 12582912.0
    t = tl.where(r < y, r + 1.0, r)
    t = tl.where(t > 0.0, t, 0.0)
    m = base + t.to(tl.uint32)
    return m | tl.where((v < 0.0) & (m != 0), 8, 0).to(tl.uint32)


@triton.jit
def _e2m1_vllm(v):
    # nearest, ties to even (the code steps are even / odd codes alike: rint of a * k, by the
    # 2^23 add / subtract), saturating at 6, sign bit of v on every code; NaN -> 0x7
    av = _abs(v)
    a = tl.where(av < 6.0, av, 6.0)
    hi = a > 4.0
    mid = a > 2.0
    k = tl.where(hi, 0.5, tl.where(mid, 1.0, 2.0))
    base = tl.where(hi, 4, tl.where(mid, 2, 0)).to(tl.uint32)
    t = (a * k + 8388608.0) - 8388608.0
    m = base + t.to(tl.uint32)
    code = m | ((_bits(v) >> 28) & 8)
    return tl.where(v != v, 7, code)


@triton.jit
def _e2m1_mag_even(v):
    # the E2M1 magnitude (0..7) of min(|v|, 6), nearest with ties to even, NaN -> 7 (row.h
    # e2m1_magnitude_rne): rint of a * k as in _e2m1_vllm
    av = _abs(v)
    a = tl.where(av < 6.0, av, 6.0)  # NaN -> 6
    hi = a > 4.0
    mid = a > 2.0
    k = tl.where(hi, 0.5, tl.where(mid, 1.0, 2.0))
    base = tl.where(hi, 4, tl.where(mid, 2, 0)).to(tl.uint32)
    t = (a * k + 8388608.0) - 8388608.0
    return base + t.to(tl.uint32)


@triton.jit
def _e2m1_rne(v):
    # SGLang V4.1's packer (row.h e2m1_encode_rne): ties to even, NaN -> 7, the sign bit only on a
    # nonzero magnitude of a negative v
    m = _e2m1_mag_even(v)
    return m | tl.where((v < 0.0) & (m != 0), 8, 0).to(tl.uint32)


@triton.jit
def _e2m1_value(m):
    # the value of magnitude m (uint32 0..7): 0, 0.5, 1, 1.5, 2, 3, 4, 6 (row.h e2m1_value)
    mf = m.to(tl.float32)
    return tl.where(mf < 4.0, mf * 0.5, tl.where(mf < 6.0, mf - 2.0, tl.where(mf == 6.0, 4.0, 6.0)))


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


@triton.jit
def _butterfly(x, BLOCK_R: tl.constexpr, S: tl.constexpr):
    # one Hadamard stage at stride S on (BLOCK_R, 128): (x[i], x[i + S]) -> (a + b, a - b) for
    # every i whose bit S is clear; the row viewed as (128 / 2S, 2, S), the middle axis split
    if S == 1:
        a, b = tl.split(tl.reshape(x, (BLOCK_R, 64, 2)))
        return tl.reshape(tl.join(a + b, a - b), (BLOCK_R, 128))
    else:
        t = tl.reshape(x, (BLOCK_R, 64 // S, 2, S))
        t = tl.permute(t, (0, 1, 3, 2))
        a, b = tl.split(t)
        t = tl.join(a + b, a - b)
        t = tl.permute(t, (0, 1, 3, 2))
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
    SCALE_OUT: tl.constexpr, BLOCK_R: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    rmask = rows < n_rows
    b = rows // H
    h = rows - b * H

    # ---- loads: the row (contiguous), the weight, the position's freqs row (contiguous)
    i = tl.arange(0, 128)
    k = tl.arange(0, 64)
    x = _decode(tl.load(q_ptr + rows[:, None] * 128 + i[None, :], mask=rmask[:, None], other=0),
                IN_KIND)
    if FOLD != 5:  # the recipe has weights
        w = _decode(tl.load(w_ptr + b * w_stride_b + h, mask=rmask, other=0), W_KIND)
    else:
        w = tl.zeros([BLOCK_R], tl.float32)
    # the row viewed as 64 pairs p = (x0, x1): adjacent dims (2p, 2p+1), or NeoX pairs: within
    # each half of 64, (j, j + 32) for pair p = 32 * half + j
    if NEOX:
        xp = tl.reshape(tl.permute(tl.reshape(x, (BLOCK_R, 2, 2, 32)), (0, 1, 3, 2)),
                        (BLOCK_R, 64, 2))
    else:
        xp = tl.reshape(x, (BLOCK_R, 64, 2))
    xr, xi = tl.split(xp)
    if ROPE:
        pos = tl.load(pos_ptr + b, mask=rmask, other=0).to(tl.int64)
        valid = (pos >= 0) & (pos < max_pos)
        prow = tl.where(valid, pos, 0)  # an out-of-range row reads row 0 and writes the NaN marker
        # (cos, sin) of pair p (0..63) of the row; only the recipe's 32 pairs are read and used
        j = k - ROPE_OFF // 2
        rot = (j >= 0) & (j < 32)
        fmask = rmask[:, None] & rot[None, :]
        fbase = freqs_ptr + prow[:, None] * 64
        if FREQS_INTERLEAVED:  # (cos, sin) per pair
            c = tl.load(fbase + 2 * j[None, :], mask=fmask, other=0.0)
            s = tl.load(fbase + 2 * j[None, :] + 1, mask=fmask, other=0.0)
        else:  # [cos x32 | sin x32]
            c = tl.load(fbase + j[None, :], mask=fmask, other=0.0)
            s = tl.load(fbase + 32 + j[None, :], mask=fmask, other=0.0)

        # ---- RoPE (row.h rope_row) on the recipe's 32 pairs, then their bf16 point
        xis = xi * s
        nr = tl.fma(xr, c, _neg(xis))
        if ROPE_FMA_X1C:  # x1' = fma(x1, c, x0 * s)
            ni = tl.fma(xi, c, xr * s)
        else:  # x1' = fma(x0, s, x1 * c)
            ni = tl.fma(xr, s, xi * c)
        if BF16_ROPE:
            nr = _round_bf16(nr)
            ni = _round_bf16(ni)
        xr = tl.where(rot[None, :], nr, xr)
        xi = tl.where(rot[None, :], ni, xi)
    else:  # no RoPE: no freqs, no positions, every row valid
        valid = rows >= 0

    # ---- Hadamard: strides 1, 2, 4, ..., 64, in that order, then 1/sqrt(128)
    if HADAMARD and not NEOX:  # stride 1 on the (even, odd) pairs as they are
        y = tl.reshape(tl.join(xr + xi, xr - xi), (BLOCK_R, 128))
    else:
        y = tl.join(xr, xi)
        if NEOX:
            y = tl.permute(tl.reshape(y, (BLOCK_R, 2, 32, 2)), (0, 1, 3, 2))
        y = tl.reshape(y, (BLOCK_R, 128))
        if HADAMARD:
            y = _butterfly(y, BLOCK_R, 1)
    if HADAMARD:
        y = _butterfly(y, BLOCK_R, 2)
        y = _butterfly(y, BLOCK_R, 4)
        y = _butterfly(y, BLOCK_R, 8)
        y = _butterfly(y, BLOCK_R, 16)
        y = _butterfly(y, BLOCK_R, 32)
        y = _butterfly(y, BLOCK_R, 64)
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
        amax = _row_amax(yb, 2)
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
            g = _e2m1_value(_e2m1_mag_even(u))
            yb = tl.where(u < 0.0, _neg(g), g) * sc1[:, :, None]
            ex = _rne_exponent(_row_amax(yb, 2))
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
        tl.store(out_ptr + rows[:, None] * 64 + k[None, :], code.to(tl.uint8), mask=rmask[:, None])
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
        amax = _row_amax(y, 1)
        if QUANT == 2:  # vLLM's CuTe: e of fmax(amax, 1e-4) * fl(1/448) rounded up (Inf: 255)
            ec = (((_bits(_fmax_floor(amax, _const(0x38D1B717)) * _const(0x3B124925)) + 0x7FFFFF)
                   >> 23) & 0xFF)
            scale = _f32(ec << 23)
            inv = _f32((254 - ec) << 23)  # 32-bit unsigned: ec = 255 gives -Inf
            v = y * inv[:, None]
            code = tl.where(v != v, 0x7F, _e4m3fn(v, False))
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
                code = tl.where(v != v, 0x7E, _e4m3fn(v, False))
            else:
                code = tl.where(v != v, 0xFE, _e4m3fn(v, False))
        elif QUANT == 1:
            qs = tl.math.div_rn(_fmax_floor(amax, _const(0x38D1B717)), 448.0)
            scale = _f32((((_bits(qs) + 0x7FFFFF) >> 23) & 0xFF) << 23)  # pow2_ceil
            # x / scale for a power of two (or +Inf) scale: 1 / scale is exact (a power of two,
            # or 0), and x * (1 / scale) is the same correctly rounded real number as
            # x / scale (Inf and NaN cases alike: x / Inf = x * 0), so one division per row
            inv = tl.math.div_rn(1.0, scale)
            v = y * inv[:, None]
            code = tl.where(v != v, 0x7F, _e4m3fn(v, False))
        elif QUANT == 8:
            # vLLM's ROCm quantizer (vllm_fnuz224): q_scale = pow2ceil(fmax(amax, 1e-4) / 224);
            # the e4m3fnuz code of v = x / q_scale is the e4m3fn code of 2v (exact: a power-of-two
            # product), -0 (0x80, e4m3fnuz's NaN) written as 0x00, NaN v -> 0x80 (row.h
            # fnuz224_code); x * (1 / q_scale) is x / q_scale, as in the vllm case below
            qs = tl.math.div_rn(_fmax_floor(amax, _const(0x38D1B717)), 224.0)
            scale = _f32((((_bits(qs) + 0x7FFFFF) >> 23) & 0xFF) << 23)  # pow2_ceil
            inv = tl.math.div_rn(1.0, scale)
            v = y * inv[:, None]
            code = _e4m3fn(v * 2.0, False)
            code = tl.where(code == 0x80, 0, code)
            code = tl.where(v != v, 0x80, code)
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
            code = _e4m3fn(t, True)
            if FMT == 1:
                code = tl.where(code == 0x80, 0, code)
        code = tl.where(valid[:, None], code, 0)
        tl.store(out_ptr + rows[:, None] * 128 + i[None, :], code.to(tl.uint8), mask=rmask[:, None])
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
    """Rows per program. 4 rows on one warp: the fewest instructions per row in the sm_90
    PTX of the Hadamard recipes (v4_fp8 about 240 warp instructions a row against 300-400 for
    8 rows on 2 or 4 warps; the other recipes are within 10 % of each other), and 32 resident
    programs of 4 rows keep about 32 KB of loads in flight per SM. bench/triton_bench.py
    --sweep times the alternatives."""
    if interpreting():
        return 512  # numpy per program: big blocks amortize the interpreter's per-op cost
    return 4


def default_num_warps(block_rows: int) -> int:
    return 1 if block_rows <= 4 else (2 if block_rows <= 8 else 4)


def launch(info, q_input: torch.Tensor, q_out: torch.Tensor, q_sf: Optional[torch.Tensor],
           weight: torch.Tensor, weights_out: torch.Tensor, weight_scale: float,
           freqs: torch.Tensor, positions: torch.Tensor, head_scale: float = 1.0,
           block_rows: Optional[int] = None, num_warps: Optional[int] = None) -> None:
    """Runs the kernel on arguments that the library's validator accepted (shapes, dtypes,
    layouts, devices checked there): writes q_out (raw codes: any 1-byte dtype), q_sf (FP4) and
    weights_out in place."""
    B, H = q_input.shape[0], q_input.shape[1]
    n_rows = B * H
    if n_rows == 0:
        return
    consts = recipe_constants(info)
    br = block_rows or default_block_rows(n_rows, q_input.device.type)
    nw = num_warps or default_num_warps(br)
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
        BLOCK_R=br, num_warps=nw, enable_fp_fusion=False, **consts,
    )


def ptx_of(info, dtype: str = "bf16", block_rows: Optional[int] = None,
           num_warps: Optional[int] = None, arch: int = 90) -> str:
    """The PTX of the kernel for a recipe, compiled for sm_<arch> without a GPU (inspection and
    tests: no .ftz, no approximate division, which fma)."""
    from triton.backends.compiler import GPUTarget

    kind = {"bf16": 0, "fp16": 1, "fp32": 2}[dtype]
    sig = {"q_ptr": "*" + dtype, "w_ptr": "*" + dtype, "freqs_ptr": "*fp32", "pos_ptr": "*i64",
           "out_ptr": "*u8", "sf_ptr": "*i32", "wout_ptr": "*fp32", "n_rows": "i32", "H": "i32",
           "w_stride_b": "i32", "max_pos": "i32", "weight_scale": "fp32", "head_scale": "fp32"}
    br = block_rows or 4  # default_block_rows on a GPU
    num_warps = num_warps or default_num_warps(br)
    cx = dict(IN_KIND=kind, W_KIND=kind, BLOCK_R=br, **recipe_constants(info))
    if cx["SCALE_OUT"]:
        sig["sf_ptr"] = "*fp32"  # the row scale
    sig.update({k: "constexpr" for k in cx})
    # the pointers 16-byte aligned, as a launch with torch's allocations specializes them
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(7)}
    src = triton.compiler.ASTSource(fn=quant_q_kernel, signature=sig, constexprs=cx, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                       options=dict(num_warps=num_warps, enable_fp_fusion=False))
    return k.asm["ptx"]
