"""The known-answer check the Triton path runs once per device before it is used there.

The check data (``triton_selfcheck.bin`` beside this file) is a subset of the project's golden
files (tests/data/golden/**, produced on an H200 by the reference CUDA kernels of SGLang's
design and by vLLM's Triton kernels): every row of each ``*edge*`` file (zero, tiny, huge,
spike, NaN / Inf rows, subnormal values) and a few rows of every other file, each row made
its own token (B = rows, H = 1) with a freqs table holding only the positions used. Stored as
zlib-compressed safetensors (8-byte header length, JSON header, raw little-endian data).

Regenerate after a golden file changes (tests/python/test_triton.py checks that the shipped file
equals what this produces):

    PYTHONPATH=python python -m indexer_q.triton_selfcheck --write tests/data/golden

The check runs each case's recipe (and the FNUZ twin of an FP8 case, expected bytes derived as
docs/RECIPES.md says) with bf16 and with float32 inputs (the same values) and compares bytes.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from typing import Callable, Dict, List, Optional, Tuple

import torch

DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton_selfcheck.bin")

_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I32": torch.int32,
       "I8": torch.int8, "I64": torch.int64, "U8": torch.uint8, "F8_E4M3": torch.float8_e4m3fn}
_DT_NAME = {v: k for k, v in _DT.items()}


# ---- a minimal safetensors reader / writer ------------------------------------------------------
def _parse(blob: bytes) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        raw = bytearray(blob[8 + n + lo:8 + n + hi])
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(_DT[info["dtype"]]).reshape(info["shape"]).clone()
    return out, meta


def _serialize(tensors: Dict[str, torch.Tensor], meta: Dict[str, str]) -> bytes:
    header: Dict[str, object] = {"__metadata__": meta}
    chunks, off = [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _DT_NAME[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)


# ---- building the data from the golden files -------------------------------------------------
_NON_EDGE_ROWS = 4  # rows taken from each file that is not an edge case (spread over the file)


def build(golden_dir: str) -> bytes:
    """The check data, from the golden files under golden_dir (deterministic bytes)."""
    files = []
    for sub in ("", "variants", "vllm", "vllm_v32", "vllm_cutedsl", "sgl_v41_fp4_rope_pack",
                "sgl_v41_fp4_quant", "sgl_v32_unfused"):
        d = os.path.join(golden_dir, sub)
        files += [os.path.join(sub, f) for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]
    tensors: Dict[str, torch.Tensor] = {}
    cases = []
    for k, rel in enumerate(files):
        with open(os.path.join(golden_dir, rel), "rb") as f:
            t, meta = _parse(f.read())
        recipe = meta.get("variant", "v4_fp8")
        B, H = t["q_input"].shape[0], t["q_input"].shape[1]
        n = B * H
        if "edge" in meta.get("kind", "") or "edge" in rel:
            rows = list(range(n))
        else:
            rows = sorted({(i * (n - 1)) // (_NON_EDGE_ROWS - 1) for i in range(_NON_EDGE_ROWS)})
        sel = torch.tensor(rows, dtype=torch.int64)
        tok = sel // H
        p = f"c{k}."
        tensors[p + "q_input"] = t["q_input"].reshape(n, 1, 128)[sel].contiguous()
        if "positions" in t:  # a form without RoPE has no freqs / positions
            pos = t["positions"].to(torch.int64)[tok]
            used, remap = torch.unique(pos, sorted=True, return_inverse=True)
            tensors[p + "freqs"] = t["freqs"][used].contiguous()
            tensors[p + "positions"] = remap.to(t["positions"].dtype)
        if "weight" in t:  # a form without weights has no weight / weights_out
            tensors[p + "weight"] = t["weight"].reshape(n, 1)[sel].contiguous()
        fp4 = "q_fp4" in t
        if fp4:
            tensors[p + "q_out"] = t["q_fp4"].view(torch.uint8).reshape(n, 1, 64)[sel].contiguous()
            tensors[p + "q_sf"] = t["q_sf"].reshape(n, 1)[sel].contiguous()
        else:
            tensors[p + "q_out"] = t["q_fp8"].view(torch.uint8).reshape(n, 1, 128)[sel].contiguous()
            if "q_scale" in t:  # scale_out: the FP8 row scale (float32), stored as q_sf
                tensors[p + "q_sf"] = t["q_scale"].reshape(n, 1)[sel].contiguous()
        if "weights_out" in t:
            tensors[p + "weights_out"] = t["weights_out"].reshape(n, 1)[sel].contiguous()
        if "scale_arg" in meta:  # vLLM's CuTe kernel: one factor fl32(softmax_scale * head_scale)
            ws, hs = meta["scale_arg"], "1.0"
        elif "softmax_scale_arg" in meta or "softmax_scale" in meta:  # vLLM's, SGLang V3.2's
            ws = meta.get("softmax_scale_arg", meta.get("softmax_scale"))
            hs = meta.get("head_scale_arg", meta.get("head_scale"))
        elif "weight_scale_arg" in meta:  # SGLang V4.1
            ws, hs = meta["weight_scale_arg"], "1.0"
        elif "weight_scale" in meta:
            ws, hs = meta["weight_scale"], "1.0"
        else:  # no weights
            ws, hs = "1.0", "1.0"
        cases.append({"id": p[:-1], "source": rel, "recipe": recipe, "rows": len(rows),
                      "weight_scale": ws, "head_scale": hs})
    meta_out = {"cases": json.dumps(cases, sort_keys=True), "golden_dir": "tests/data/golden"}
    return zlib.compress(_serialize(tensors, meta_out), 9)


def load(path: str = DATA_PATH) -> List[dict]:
    """The cases: dicts with recipe, weight_scale, head_scale (floats), and tensors."""
    with open(path, "rb") as f:
        tensors, meta = _parse(zlib.decompress(f.read()))
    out = []
    for c in json.loads(meta["cases"]):
        p = c["id"] + "."
        case = dict(c, weight_scale=float(c["weight_scale"]), head_scale=float(c["head_scale"]))
        for name in ("q_input", "weight", "freqs", "positions", "q_out", "q_sf", "weights_out"):
            case[name] = tensors.get(p + name)
        out.append(case)
    return out


# ---- running the check ---------------------------------------------------------------------------
Runner = Callable[..., None]  # runner(recipe, q_input, q_out, q_sf, weight, weights_out, ws, freqs, positions, hs)


def _fnuz_of(recipe: str, recipe_info, resolve) -> Optional[str]:
    if recipe_info(recipe).format != "e4m3fn":
        return None
    try:
        twin = resolve(recipe, torch.float8_e4m3fnuz)
    except ValueError:
        return None
    return twin if twin != recipe else None


def run_check(device: torch.device, runner: Runner, recipe_info, resolve,
              cases: Optional[List[dict]] = None) -> List[str]:
    """Runs every case on `device` through `runner`; returns the mismatches (empty: passed),
    each a line naming the case, recipe, input dtype and what differed."""
    cases = load() if cases is None else cases
    problems: List[str] = []
    for c in cases:
        recipes = [c["recipe"]]
        twin = _fnuz_of(c["recipe"], recipe_info, resolve)
        if twin:
            recipes.append(twin)
        for recipe in recipes:
            info = recipe_info(recipe)
            want_q, want_w = c["q_out"], c["weights_out"]  # want_w None: no weights
            if info.format == "e4m3fnuz":
                want_q = torch.where(want_q == 0x80, torch.zeros_like(want_q), want_q)
                want_w = want_w * 2.0
            for dt in (torch.bfloat16, torch.float32):
                # what a form does not take: 0-element tensors (the library's empty views)
                empty = torch.empty(0, device=device)
                q_in = c["q_input"].to(dt).to(device)
                w_in = empty
                if c["weight"] is not None:  # a bf16 weight takes the input dtype (exact); an
                    w = c["weight"]            # fp32 one (SGLang V3.2's weights_proj) stays fp32
                    w_in = (w.to(dt) if w.dtype == torch.bfloat16 else w).to(device)
                q_out = torch.full(want_q.shape, 0x5A, dtype=torch.uint8, device=device)
                q_sf = None
                if info.fp4:
                    q_sf = torch.full(want_q.shape[:2], 0x5A5A5A5A, dtype=torch.int32,
                                      device=device)
                elif info.scale_out:  # the FP8 row scale, float32 (rows, 1)
                    q_sf = torch.full(want_q.shape[:2], -7.25, dtype=torch.float32, device=device)
                w_out = (torch.full(want_w.shape, -7.25, dtype=torch.float32, device=device)
                         if want_w is not None else empty)
                freqs = c["freqs"].to(device) if c["freqs"] is not None else empty
                pos = c["positions"].to(device) if c["positions"] is not None else empty
                runner(recipe, q_in, q_out, q_sf, w_in, w_out, c["weight_scale"], freqs, pos,
                       c["head_scale"])
                what = f"{c['source']} rows={c['rows']} recipe={recipe} input={dt}"
                nq = int((q_out.cpu() != want_q).sum())
                if nq:
                    problems.append(f"{what}: {nq} of {want_q.numel()} code bytes differ")
                if info.fp4 or info.scale_out:  # compared as bits (int32 or float32)
                    ns = int((q_sf.cpu().view(torch.int32) != c["q_sf"].view(torch.int32)).sum())
                    if ns:
                        problems.append(f"{what}: {ns} of {c['q_sf'].numel()} q_sf values differ")
                if want_w is None:
                    continue
                got_w = w_out.cpu()
                same = (got_w.view(torch.int32) == want_w.view(torch.int32)) | (
                    torch.isnan(got_w) & torch.isnan(want_w))
                nw = int((~same).sum())
                if nw:
                    problems.append(f"{what}: {nw} of {want_w.numel()} weights_out values differ")
    return problems


def _main(argv: List[str]) -> int:
    if len(argv) == 3 and argv[1] == "--write":
        blob = build(argv[2])
        with open(DATA_PATH, "wb") as f:
            f.write(blob)
        print(f"wrote {DATA_PATH} ({len(blob)} bytes, {len(load())} cases)")
        return 0
    print("usage: python -m indexer_q.triton_selfcheck --write <tests/data/golden>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
