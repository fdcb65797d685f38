#!/usr/bin/env python3
"""Plot indexer_q benchmark results: effective GB/s against tokens, one line per recipe.

Reads either format (and a mix of files):
  * `indexer-q bench --format csv` output (header
    backend,isa,tokens,heads,dtype,threads,pdl,sets,us_median,gbps,copy_us,copy_gbps,ratio_to_copy,exact,recipe)
  * the `csv,`-prefixed lines of `indexer_q_cuda_bench` output (header
    csv,tokens,heads,dtype,recipe,shape,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,gbps_vs_v4_fp8,bytes_equal);
    the other lines of that output are ignored, except a `# device: NAME, ...` line, which
    names the device in the default title. Rows with shape `baseline-warp-per-row` are drawn
    as the one-warp-per-row baseline; rows of other fixed shapes (the launch-shape sweep of
    `--shapes`, the baseline's other PDL placements) are left out: a recipe's line is its
    `auto` shape, what the library launches.

Files with a `pdl` column hold each size twice (PDL on and off): only the rows of --pdl are
plotted (default `on`, the library's default on sm_90+). Older files without the column are
taken as they are.

The copy ceiling is the same run's plain device copy of the same bytes (copy_gbps): one dashed
grey line per token count (the median over the plotted recipes; their byte counts differ only
for the FP4 recipes). Recipes named `NAME(again)` (a repeat measurement of NAME in the same run)
are left out unless named in --recipes.

Example:
  python3 bench/plot_bench.py bench/cuda_results/2026-11-30-h200-final-recipes/cuda_bench.txt \\
      -o docs/perf_h200.png
"""

import argparse
import csv
import os
import re
import statistics
import sys

CLI_COLS = ["backend", "isa", "tokens", "heads", "dtype", "threads", "sets", "us_median",
            "gbps", "copy_us", "copy_gbps", "ratio_to_copy", "exact", "recipe"]
CUDA_COLS = ["tokens", "heads", "dtype", "recipe", "shape", "bytes", "us", "gbps", "copy_us",
             "copy_gbps", "ratio_to_copy", "gbps_vs_v4_fp8", "bytes_equal"]
BASELINE_SHAPE = "baseline-warp-per-row"


class BenchError(Exception):
    pass


def _num(value, what, where):
    try:
        return float(value)
    except ValueError:
        raise BenchError(f"{where}: column {what!r} is not a number: {value!r}") from None


def read_rows(path):
    """Return (rows, device) from one file. Each row: dict with recipe, tokens, heads, gbps,
    copy_gbps, baseline (bool), backend."""
    try:
        with open(path, newline="") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BenchError(f"{path}: cannot read: {e.strerror}") from None
    device = None
    cli_lines, cuda_lines = [], []
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        m = re.match(r"#\s*device:\s*([^,;]+)", s)
        if m:
            device = m.group(1).strip()
            continue
        if s.startswith("#"):
            continue
        if s.startswith("csv,"):
            cuda_lines.append((n, s[4:]))
        elif s.startswith("backend,") or cli_lines:
            cli_lines.append((n, s))
    rows = []
    for kind, cols, body in (("cli", CLI_COLS, cli_lines), ("cuda", CUDA_COLS, cuda_lines)):
        if not body:
            continue
        header = next(csv.reader([body[0][1]]))
        missing = [c for c in cols if c not in header and c not in ("threads", "sets", "isa",
                                                                    "exact", "bytes_equal",
                                                                    "gbps_vs_v4_fp8", "bytes")]
        if missing:
            raise BenchError(f"{path}:{body[0][0]}: header lacks column(s) {', '.join(missing)} "
                             f"(expected `indexer-q bench --format csv` output or the csv, lines "
                             f"of indexer_q_cuda_bench)")
        for n, text in body[1:]:
            fields = next(csv.reader([text]))
            if fields == header:
                continue  # a repeated header (concatenated runs)
            if len(fields) != len(header):
                raise BenchError(f"{path}:{n}: {len(fields)} fields, header has {len(header)}")
            r = dict(zip(header, fields))
            where = f"{path}:{n}"
            rows.append({
                "recipe": r["recipe"],
                "tokens": _num(r["tokens"], "tokens", where),
                "heads": int(_num(r["heads"], "heads", where)),
                "gbps": _num(r["gbps"], "gbps", where),
                "copy_gbps": _num(r["copy_gbps"], "copy_gbps", where),
                "baseline": r.get("shape") == BASELINE_SHAPE,
                "backend": r.get("backend", "cuda"),
                "isa": r.get("isa", "-"),
                "threads": r.get("threads", "-"),
                "shape": r.get("shape", "auto"),
                "pdl": r.get("pdl", "-"),
            })
    if not rows:
        raise BenchError(f"{path}: no benchmark rows found (expected `indexer-q bench --format csv` "
                         f"output or indexer_q_cuda_bench output with `csv,` lines)")
    return rows, device


def build_parser():
    p = argparse.ArgumentParser(
        description="Plot effective GB/s against tokens (log x axis), one line per recipe, with the "
                    "same-run copy ceiling and, when present, the one-warp-per-row baseline. Input: "
                    "`indexer-q bench --format csv` output and/or indexer_q_cuda_bench output (its "
                    "`csv,` lines).",
        epilog="Example: python3 bench/plot_bench.py "
               "bench/cuda_results/2026-11-30-h200-final-recipes/cuda_bench.txt -o docs/perf_h200.png")
    p.add_argument("inputs", nargs="+", metavar="FILE", help="benchmark output file(s)")
    p.add_argument("-o", "--output", default="bench.png", help="PNG to write (default: bench.png)")
    p.add_argument("--recipes", help="comma-separated recipes to plot, in legend order "
                                     "(default: all present, in file order)")
    p.add_argument("--heads", type=int, help="only rows with this many heads (default: all; "
                                             "required when the files mix head counts)")
    p.add_argument("--title", help="figure title (default: device and heads)")
    p.add_argument("--no-copy", action="store_true", help="leave out the copy ceiling")
    p.add_argument("--no-baseline", action="store_true", help="leave out the one-warp-per-row baseline")
    p.add_argument("--pdl", choices=["on", "off"], default="on",
                   help="which rows of files with a pdl column to plot (default: on)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        rows, devices = [], []
        for path in args.inputs:
            r, d = read_rows(path)
            rows += r
            if d and d not in devices:
                devices.append(d)
        # a recipe's line is its automatic launch shape; the baseline its own shape
        rows = [r for r in rows if r["baseline"] or r["shape"] == "auto"]
        rows = [r for r in rows if r["pdl"] in ("-", args.pdl)]
        if not rows:
            raise BenchError(f"no rows with pdl {args.pdl}")
        if args.heads is not None:
            rows = [r for r in rows if r["heads"] == args.heads]
            if not rows:
                raise BenchError(f"no rows with --heads {args.heads}")
        heads = sorted({r["heads"] for r in rows})
        if len(heads) > 1:
            raise BenchError(f"the input mixes head counts {heads}: choose one with --heads")
        present = []
        for r in rows:
            if not r["baseline"] and r["recipe"] not in present:
                present.append(r["recipe"])
        if args.recipes:
            recipes = [x.strip() for x in args.recipes.split(",") if x.strip()]
            unknown = [x for x in recipes if x not in present]
            if unknown:
                raise BenchError(f"recipe(s) not in the input: {', '.join(unknown)} "
                                 f"(present: {', '.join(present)})")
        else:
            recipes = [x for x in present if not x.endswith("(again)")]
    except BenchError as e:
        print(f"plot_bench.py: error: {e}", file=sys.stderr)
        return 2

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("plot_bench.py: error: matplotlib is not installed (pip install matplotlib)",
              file=sys.stderr)
        return 2

    def series(sel):
        by_tok = {}
        for r in sel:
            by_tok.setdefault(r["tokens"], []).append(r["gbps"])
        xs = sorted(by_tok)
        return xs, [statistics.median(by_tok[x]) for x in xs]

    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    markers = "osD^v<>ph*X"
    cmap = plt.get_cmap("tab10")
    colors = [cmap(i) for i in range(10) if i != 7]  # tab10's grey is kept for the copy line
    for i, name in enumerate(recipes):
        xs, ys = series([r for r in rows if r["recipe"] == name and not r["baseline"]])
        ax.plot(xs, ys, marker=markers[i % len(markers)], markersize=5, linewidth=1.8,
                color=colors[i % len(colors)], label=name)
    base = [r for r in rows if r["baseline"]]
    if base and not args.no_baseline:
        names = sorted({r["recipe"] for r in base})
        xs, ys = series(base)
        ax.plot(xs, ys, color="black", linestyle=":", marker="x", linewidth=1.8,
                label=f"one-warp-per-row baseline ({', '.join(names)})")
    if not args.no_copy:
        by_tok = {}
        for r in rows:
            if r["recipe"] in recipes or r["baseline"]:
                by_tok.setdefault(r["tokens"], []).append(r["copy_gbps"])
        xs = sorted(by_tok)
        ax.plot(xs, [statistics.median(by_tok[x]) for x in xs], color="grey", linestyle="--",
                linewidth=2.2, label="copy of the same bytes (same run)")

    ax.set_xscale("log")
    toks = sorted({r["tokens"] for r in rows if r["recipe"] in recipes or r["baseline"]})
    ax.set_xticks(toks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("tokens (log scale)")
    ax.set_ylabel("effective GB/s (bytes read + written once / time)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.35)
    if args.title:
        title = args.title
    else:
        if devices:
            dev = " / ".join(devices)
        else:
            backs = sorted({f"{r['backend']} {r['isa']}".replace(" -", "") for r in rows})
            dev = " / ".join(backs)
        pdl = f", PDL {args.pdl}" if any(r["pdl"] != "-" for r in rows) else ""
        title = f"indexer_q on {dev}, {heads[0]} heads{pdl}: effective GB/s by recipe"
    ax.set_title(title, fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    fig.tight_layout()
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        print(f"plot_bench.py: error: output folder {out_dir} does not exist", file=sys.stderr)
        return 2
    fig.savefig(args.output, format="png", dpi=100)
    plt.close(fig)
    print(f"wrote {args.output} ({len(recipes)} recipe(s), {len(toks)} token counts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
