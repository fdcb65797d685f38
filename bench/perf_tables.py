#!/usr/bin/env python3
"""The tables of docs/PERFORMANCE.md (and the README's) from one run's folder.

    python3 bench/perf_tables.py RUN_DIR [--section cuda|kside|triton|cpu|python|readme|all]

RUN_DIR holds what `scripts/device/reference_run.sh` writes (any file may be missing; its
table is then left out, and says so):
  cuda_bench.txt      indexer_q_cuda_bench --recipes all --heads 64,16 (query side, PDL on)
  kside_bench.txt     indexer_q_cuda_bench --op kside --recipes all (key side, PDL on)
  triton.txt          bench/triton_bench.py --recipes all
  cpu_1t.csv          indexer_q_cpu_bench --threads 1 (query side, every ISA)
  cpu_nt.csv          indexer_q_cpu_bench --threads N (query side, one ISA)
  kside_cpu_1t.csv    indexer_q_cpu_bench --op kside --threads 1
  python_overhead.txt bench/python_overhead.py
Every figure printed is read from those files; nothing is computed but ratios and medians
already in them. A row whose output was not byte-equal to the reference is marked "NOT EXACT".
"""

import argparse
import csv
import os
import re
import sys


def csv_rows(path, prefix="csv,"):
    """The `csv,`-prefixed lines of a benchmark's output, as dicts keyed by its header line."""
    if not os.path.exists(path):
        return None
    lines = [ln[len(prefix):] for ln in open(path) if ln.startswith(prefix)] if prefix else \
        [ln for ln in open(path) if ln.strip() and not ln.startswith("#")]
    if not lines:
        return []
    return list(csv.DictReader(lines))


def uniq(rows, key):
    """The values of `key` in `rows`, in order of first appearance."""
    return list(dict.fromkeys(r[key] for r in rows))


def f(x, nd=2):
    return f"{float(x):.{nd}f}"


def exact(r, key="bytes_equal"):
    return "" if r.get(key, "yes") in ("yes", "1", "true") else " NOT EXACT"


def device_line(path):
    for ln in open(path):
        if ln.startswith("# device:"):
            return ln[len("# device:"):].strip()
    return ""


def cuda_query(run, heads_small=16):
    rows = csv_rows(os.path.join(run, "cuda_bench.txt"))
    if rows is None:
        return "(no cuda_bench.txt in this run)\n"
    rows = [r for r in rows if r["pdl"] == "on"]
    big = [t for t in ("4096", "16384", "65536") if any(r["tokens"] == t for r in rows)]
    small = [t for t in ("1", "8", "64") if any(r["tokens"] == t for r in rows)]
    recipes = [rc for rc in uniq(rows, "recipe") if not rc.endswith("(again)")]

    def get(recipe, tokens, heads, shape):
        for r in rows:
            if (r["recipe"], r["tokens"], r["heads"], r["shape"]) == (recipe, tokens, heads, shape):
                return r
        return None

    def us(r):
        return f(r["us"]) + exact(r) if r else "-"

    def of_copy(r):
        return f"{f(r['us'])} ({f(r['ratio_to_copy'])}){exact(r)}" if r else "-"

    hs = str(heads_small)
    has_small_heads = any(r["heads"] == hs for r in rows)
    head = ["recipe"] + [f"{t} tok us" for t in small] + \
        [f"{'/'.join(small)} tok, `side_inputs_ready`"] + [f"{t} tok us (of copy)" for t in big]
    if has_small_heads:
        head += [f"{hs} heads: {t} tok us (of copy)" for t in big if t != "4096"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def line(label, recipe, shape, side_shape):
        cells = [label] + [us(get(recipe, t, "64", shape)) for t in small]
        cells.append(" / ".join(f(r["us"]) if (r := get(recipe, t, "64", side_shape)) else "-"
                                for t in small) if side_shape else "")
        cells += [of_copy(get(recipe, t, "64", shape)) for t in big]
        if has_small_heads:
            cells += [of_copy(get(recipe, t, hs, shape)) for t in big if t != "4096"]
        out.append("| " + " | ".join(cells) + " |")

    for rc in recipes:
        line(f"`{rc}`", rc, "auto", "auto-side-ready")
    for shape, label in (("baseline-warp-per-row", "SGLang-design baseline (`v4_fp8` bytes)"),
                         ("baseline-loads-before-wait", "SGLang-design baseline, side inputs before the wait")):
        if any(r["shape"] == shape for r in rows):
            line(label, "v4_fp8", shape, None)
    cells = ["copy of `v4_fp8`'s bytes"]
    for t in small + big:
        r = get("v4_fp8", t, "64", "auto")
        cells.append(f(r["copy_us"]) if r else "-")
        if t == small[-1]:
            cells.append("")
    if has_small_heads:
        cells += [f(r["copy_us"]) if (r := get("v4_fp8", t, hs, "auto")) else "-" for t in big if t != "4096"]
    out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def grid(rows, column, cell):
    """A recipe x tokens table: `column(tokens)` heads each column, `cell(recipe, tokens)` fills it."""
    tokens, recipes = uniq(rows, "tokens"), uniq(rows, "recipe")
    out = ["| recipe | " + " | ".join(column(t) for t in tokens) + " |", "|" + "---|" * (len(tokens) + 1)]
    for rc in recipes:
        out.append("| " + " | ".join([f"`{rc}`"] + [cell(rc, t) for t in tokens]) + " |")
    return "\n".join(out) + "\n"


def kside(run):
    rows = csv_rows(os.path.join(run, "kside_bench.txt"))
    if rows is None:
        return "(no kside_bench.txt in this run)\n"
    rows = [r for r in rows if r["pdl"] in ("1", "on")]

    def cell(rc, t):
        ours = next((r for r in rows if r["recipe"] == rc and r["tokens"] == t
                     and r["impl"].startswith("ours-auto")), None)
        base = next((r for r in rows if r["recipe"] == rc and r["tokens"] == t
                     and r["impl"].startswith("baseline")), None)
        if not ours:
            return "-"
        return (f"{f(ours['us'])} / {f(base['us']) if base else '-'} "
                f"({f(ours['ratio_to_copy'])}){exact(ours)}{exact(base) if base else ''}")

    dt = rows[0]["dtype"] if rows else "?"
    return (grid(rows, lambda t: f"{t} tok: ours / baseline us (of copy)", cell)
            + f"\n(input dtype {dt}; copy: a device copy of the same bytes)\n")


def triton(run):
    rows = csv_rows(os.path.join(run, "triton.txt"))
    if rows is None:
        return "(no triton.txt in this run)\n"

    def cell(rc, t):
        r = next((r for r in rows if r["recipe"] == rc and r["tokens"] == t), None)
        return (f"{f(r['native_us'])} / {f(r['triton_us'])} ({f(r['triton_over_native_gbps'])}){exact(r)}"
                if r else "-")

    return grid(rows, lambda t: f"{t} tok: native / Triton us (Triton of native)", cell)


def cpu(run):
    one = csv_rows(os.path.join(run, "cpu_1t.csv"), prefix="")
    many = csv_rows(os.path.join(run, "cpu_nt.csv"), prefix="") or []
    ks = csv_rows(os.path.join(run, "kside_cpu_1t.csv"), prefix="") or []
    if one is None:
        return "(no cpu_1t.csv in this run)\n"
    isas = uniq(one, "isa")
    nt = many[0]["threads"] if many else None
    head = ["recipe"] + [f"{i}, 1 thread: ns/row" for i in isas]
    if nt:
        head += [f"{many[0]['isa']}, {nt} threads, {many[0]['tokens']} x {many[0]['heads']}: GB/s (of copy)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rc in uniq(one, "recipe"):
        cells = [f"`{rc}`"]
        for i in isas:
            r = next((r for r in one if r["recipe"] == rc and r["isa"] == i), None)
            cells.append(f(r["ns_per_row"], 1) + exact(r, "exact") if r else "-")
        if nt:
            r = next((r for r in many if r["recipe"] == rc), None)
            cells.append(f"{f(r['gbps'], 1)} ({f(r['ratio_to_copy'])}){exact(r, 'exact')}" if r else "-")
        out.append("| " + " | ".join(cells) + " |")
    for rc in uniq(ks, "recipe"):
        cells = [f"key side `{rc}` (ns/token, {ks[0]['dtype']})"]
        for i in isas:
            r = next((r for r in ks if r["recipe"] == rc and r["isa"] == i), None)
            cells.append(f(r["ns_per_row"], 1) + exact(r, "exact") if r else "-")
        if nt:
            cells.append("")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def python_overhead(run):
    path = os.path.join(run, "python_overhead.txt")
    if not os.path.exists(path):
        return "(no python_overhead.txt in this run)\n"
    out = ["| entry point | op alone us | wrapper us | added us | allocating op us | wrapper - allocating op us |",
           "|---|---|---|---|---|---|"]
    num = r"(-?\d+\.\d+)"
    for ln in open(path):
        m = re.match(rf"^(\S.*?)\s+{num}\s+{num}\s+{num}(\s+{num}\s+{num})?\s*$", ln)
        if m:
            alloc = (m.group(6), m.group(7)) if m.group(5) else ("", "")
            out.append(f"| `{m.group(1)}` | {m.group(2)} | {m.group(3)} | {m.group(4)} | {alloc[0]} | {alloc[1]} |")
    return "\n".join(out) + "\n"


SECTIONS = {"cuda": cuda_query, "kside": kside, "triton": triton, "cpu": cpu, "python": python_overhead}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="the run's folder")
    ap.add_argument("--section", default="all", choices=list(SECTIONS) + ["all"])
    a = ap.parse_args()
    if not os.path.isdir(a.run):
        sys.exit(f"perf_tables: run folder {a.run!r} does not exist")
    for name, fn in SECTIONS.items():
        if a.section in (name, "all"):
            if a.section == "all":
                print(f"### {name}\n")
            print(fn(a.run))


if __name__ == "__main__":
    main()
