#!/usr/bin/env python3
"""Top-k overlap of the indexer's scores against context length (docs/RECALL.md): prints the table
of indexer_q.recall.overlap_vs_context for a few query / key recipe pairs and, with --out, plots
it (one panel per k, overlap against context, log scale; matplotlib).

    PYTHONPATH=python INDEXER_Q_TORCH_LIBRARY=build/bindings/torch/_indexer_q_ops.so \\
        python3 bench/plot_overlap.py --out overlap.png
"""

import argparse
import warnings

from indexer_q import recall

PAIRS = (("v4_fp8", "v4_k_fp8"), ("v4_fp4", "v4_k_fp4"), ("vllm_v4_fp8", "v4_k_fp8"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default=",".join(f"{q}:{k}" for q, k in PAIRS),
                   help="query:key recipe pairs, comma-separated")
    p.add_argument("--contexts", default="1024,4096,16384,65536")
    p.add_argument("--topk", default="64,2048")
    p.add_argument("--queries", type=int, default=4)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the plot here (PNG)")
    a = p.parse_args()
    contexts = [int(x) for x in a.contexts.split(",")]
    topks = [int(x) for x in a.topk.split(",")]
    rows = []
    for pair in a.pairs.split(","):
        q, k = pair.split(":")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", recall.RecipeMismatchWarning)  # marked in the table
            rows += recall.overlap_vs_context(q, k, contexts, topks, queries=a.queries,
                                              heads=a.heads, seed=a.seed)
    print(recall.format_overlaps(rows))
    if not a.out:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(topks), figsize=(5 * len(topks), 4), squeeze=False)
    for ax, k in zip(axes[0], topks):
        for pair in a.pairs.split(","):
            q, kr = pair.split(":")
            pts = [(r.context, r.overlap) for r in rows
                   if r.q_recipe == q and r.k_recipe == kr and r.topk == k]
            if pts:
                mism = any(r.mismatch for r in rows if r.q_recipe == q and r.k_recipe == kr)
                ax.plot(*zip(*pts), "o--" if mism else "o-",
                        label=f"{q} + {kr}" + (" (mismatched)" if mism else ""))
        ax.plot([c for c in contexts if c >= k], [k / c for c in contexts if c >= k], ":",
                color="gray", label="chance (k / T)")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("context length T (key tokens)")
        ax.set_ylabel(f"top-{k} overlap with float64")
        ax.set_title(f"k = {k}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
