#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus/:
  safetensors/  small files (so libFuzzer's mutations stay fast): one tiny conformance case per
                output form (FP8 with each input dtype, FP4 with q_sf, vLLM two-factor metadata,
                weights_out (B, H)), plus malformed ones (truncated header, truncated data,
                overlapping offsets, bad JSON)
  validate/     byte strings for fuzz_validate, which reads its decisions from the bytes: 48
                pseudo-random strings of 64..1024 bytes (fixed seed), long enough that each
                input makes many decisions (sizes, mutations) from the start
Standard library only; re-running it rewrites the same bytes. The fuzzer's own finds are added
with `-merge=1` (docs/TESTING.md)."""
import json
import os
import random
import struct
import sys

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I32": 4, "I64": 8, "U8": 1, "I8": 1}


def st_bytes(tensors, metadata=None):
    header, blobs, at = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        dtype, shape = tensors[name]
        n = SIZES[dtype]
        for d in shape:
            n *= d
        # deterministic, varied contents (a few bit patterns repeated)
        blob = bytes((i * 37 + len(name)) & 0xFF for i in range(n))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        blobs.append(blob)
        at += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def case(B, H, max_pos, dtype="BF16", pos="I64", fp4=False, wo2d=False, weight_dtype=None):
    t = {
        "q_input": (dtype, [B, H, 128]),
        "weight": (weight_dtype or dtype, [B, H]),
        "freqs": ("F32", [max_pos, 64]),
        "positions": (pos, [B]),
        "weights_out": ("F32", [B, H] if wo2d else [B, H, 1]),
    }
    if fp4:
        t["q_fp4"] = ("U8", [B, H, 64])
        t["q_sf"] = ("I32", [B, H])
    else:
        t["q_fp8"] = ("F8_E4M3", [B, H, 128])
    return t


def validate_seeds(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(20261130)
    for i in range(48):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(64, 1024)))
        with open(os.path.join(out_dir, f"random_{i:02d}"), "wb") as f:
            f.write(data)
    print(f"48 seeds in {out_dir}")


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    seeds = {
        "v4_fp8_bf16": st_bytes(case(1, 1, 1)),
        "v4_fp8_f16_i32": st_bytes(case(2, 1, 2, "F16", "I32"), {"weight_scale": "0.5"}),
        "v4_fp8_f32_b0": st_bytes(case(0, 2, 1, "F32")),
        "v32_fp8": st_bytes(case(1, 2, 1), {"variant": "v32_fp8", "weight_scale": "1"}),
        "v4_fp4": st_bytes(case(1, 1, 1, fp4=True), {"variant": "v4_fp4"}),
        "vllm_fp8_wo2d": st_bytes(case(1, 1, 1, wo2d=True),
                                  {"variant": "vllm_v4_fp8", "softmax_scale": "0.088", "head_scale": "0.125"}),
        "vllm_mxfp4": st_bytes(case(1, 1, 1, fp4=True), {"variant": "vllm_v4_mxfp4", "softmax_scale": "1e-3",
                                                         "head_scale": "2"}),
        "weight_f32_of_bf16": st_bytes(case(1, 1, 1, weight_dtype="F32")),
    }
    good = seeds["v4_fp8_bf16"]
    n = struct.unpack("<Q", good[:8])[0]
    seeds["bad_truncated_header"] = good[: 8 + n // 2]
    seeds["bad_truncated_data"] = good[:-7]
    seeds["bad_length_field"] = struct.pack("<Q", 1 << 40) + good[8:64]
    seeds["bad_json"] = struct.pack("<Q", 16) + b'{"a":[1,2,{"b":'
    seeds["bad_overlap"] = good.replace(b'"data_offsets":[0,', b'"data_offsets":[1,', 1)
    seeds["empty_object"] = struct.pack("<Q", 8) + b"{}      "
    for name, data in seeds.items():
        with open(os.path.join(out_dir, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out_dir}")


if __name__ == "__main__":
    corpus = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    main(os.path.join(corpus, "safetensors"))
    validate_seeds(os.path.join(corpus, "validate"))
