"""bench/perf_tables.py prints docs/PERFORMANCE.md's tables from a reference run's folder."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "perf_tables.py")
RUN = os.path.join(ROOT, "bench", "cuda_results", "2026-12-02-h200-reference-s7")


def tables(run, section):
    r = subprocess.run([sys.executable, SCRIPT, run, "--section", section], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def csv_line(path, pred):
    for ln in open(path):
        c = ln.strip().split(",")
        if c[0] == "csv" and pred(c):
            return c
    raise AssertionError("no such line")


def test_cells_are_the_run_figures():
    c = csv_line(os.path.join(RUN, "cuda_bench.txt"),
                 lambda c: c[1:3] == ["16384", "64"] and c[4:6] == ["v4_fp8", "auto"])
    row = next(ln for ln in tables(RUN, "cuda").splitlines() if ln.startswith("| `v4_fp8` |"))
    assert f"{float(c[8]):.2f} ({float(c[12]):.2f})" in row
    assert "NOT EXACT" not in row
    k = csv_line(os.path.join(RUN, "kside_bench.txt"),
                 lambda c: c[1] == "4096" and c[3] == "v4_k_fp8" and c[4].startswith("ours-auto") and c[5] == "1")
    assert f"{float(k[7]):.2f} /" in tables(RUN, "kside")
    assert "| `v4_fp8` |" in tables(RUN, "triton")
    assert "| `v4_fp8` |" in tables(RUN, "cpu")
    assert "| `fused_q_indexer_rope_hadamard_quant (v4_fp8)` |" in tables(RUN, "python")


def test_a_row_that_was_not_exact_says_so(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    p = run / "cuda_bench.txt"
    lines = p.read_text().splitlines(keepends=True)
    for i, ln in enumerate(lines):
        c = ln.strip().split(",")
        if c[0] == "csv" and c[1:3] == ["16384", "64"] and c[4:6] == ["v4_fp8", "auto"]:
            lines[i] = ln.rstrip("\n").rsplit(",", 1)[0] + ",NO\n"
    p.write_text("".join(lines))
    row = next(ln for ln in tables(str(run), "cuda").splitlines() if ln.startswith("| `v4_fp8` |"))
    assert "NOT EXACT" in row


def test_missing_files_and_folder():
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(ROOT, "no-such-run")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "does not exist" in r.stderr
    out = tables(os.path.join(ROOT, "bench", "cuda_results", "2026-12-02-h200-session7-main"), "kside")
    assert "no kside_bench.txt" in out
