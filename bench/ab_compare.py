#!/usr/bin/env python3
"""Before/after table of two sets of benchmark outputs (scripts/device/ab_bench.sh writes them).

  python3 bench/ab_compare.py --base cuda_base_1.txt cuda_base_2.txt --new cuda_new_1.txt cuda_new_2.txt

Reads the csv lines of indexer_q_cuda_bench (`csv,`-prefixed, either op) or indexer_q_cpu_bench
`--format csv` output. A row's key is every column before the first of bytes / inline_rows (sizes,
recipe, shape or impl, pdl; ISA and threads on the CPU); its time the `us` (CUDA) or
`cpu_ns_per_row` (CPU, else `us_median`) column, the median over the files of a side. Prints one
line per key found on both sides: base, new, new / base, and ratio_to_copy of each; then how many
rows of each side had bytes that differ from the reference (bytes_equal / exact `NO`). Exit 1 if
any did.
"""
import argparse
import csv
import statistics
import sys

KEY_END = ("bytes", "inline_rows")
TIME_COLS = ("us", "cpu_ns_per_row", "us_median")


def read(paths):
    rows, bad, order = {}, 0, []
    for path in paths:
        header = None
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("csv,"):
                    line = line[4:]
                elif not line or line.startswith("#") or "," not in line:
                    continue
                fields = next(csv.reader([line]))
                if "ratio_to_copy" in fields:
                    header = fields
                    continue
                if header is None or len(fields) != len(header):
                    continue
                r = dict(zip(header, fields))
                end = min(header.index(c) for c in KEY_END if c in header)
                key = tuple(f"{c}={r[c]}" for c in header[:end])
                tcol = next(c for c in TIME_COLS if c in header and float(r[c]) >= 0)
                if r.get("bytes_equal", r.get("exact")) == "NO":
                    bad += 1
                if key not in rows:
                    order.append(key)
                rows.setdefault(key, []).append((tcol, float(r[tcol]), float(r["ratio_to_copy"])))
    return rows, bad, order


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--new", nargs="+", required=True)
    a = ap.parse_args()
    base, bad_b, order = read(a.base)
    new, bad_n, _ = read(a.new)
    print("key | base | new | new/base | copy ratio base | copy ratio new")
    for k in order:
        if k not in new:
            continue
        b, n = base[k], new[k]
        tb = statistics.median(x[1] for x in b)
        tn = statistics.median(x[1] for x in n)
        rb = statistics.median(x[2] for x in b)
        rn = statistics.median(x[2] for x in n)
        print(f"{' '.join(k)} | {tb:.3f} | {tn:.3f} {n[0][0]} | {tn / tb if tb else 0:.3f} | {rb:.3f} | {rn:.3f}")
    only = [k for k in order if k not in new]
    if only:
        print(f"{len(only)} base rows have no new counterpart (first: {' '.join(only[0])})")
    print(f"rows with bytes differing from the reference: base {bad_b}, new {bad_n}")
    return 1 if bad_b or bad_n else 0


if __name__ == "__main__":
    sys.exit(main())
