"""bench/plot_bench.py turns benchmark output into a PNG (skipped when matplotlib is missing)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "plot_bench.py")
SAMPLE = os.path.join(ROOT, "tests", "data", "bench_sample.csv")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# A few lines of indexer_q_cuda_bench output (bench/cuda_results/2026-11-30-h200-final-recipes/).
CUDA_BENCH_LINES = """\
# device: NVIDIA H200, 132 SMs; bf16 input, int64 positions
     1  64 v4_fp8                 auto                        25224 B     1.811 us    13.9 GB/s
csv,tokens,heads,dtype,recipe,shape,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,gbps_vs_v4_fp8,bytes_equal
csv,1,64,bf16,v4_fp8,auto,25224,1.811,13.9,1.026,24.6,0.566,1.000,yes
csv,1,64,bf16,v4_fp8,baseline-warp-per-row,25224,1.987,12.7,1.026,24.6,0.516,0.911,yes
csv,4096,64,bf16,v4_fp8,auto,103317504,32.003,3228.3,25.878,3992.4,0.809,1.000,yes
csv,4096,64,bf16,v4_fp8,baseline-warp-per-row,103317504,96.382,1072.0,25.878,3992.4,0.268,0.332,yes
"""


def run_plot(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120)


def assert_png(path):
    assert os.path.getsize(path) > 0
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE


def test_cli_csv_to_png(tmp_path):
    out = tmp_path / "sample.png"
    r = run_plot(SAMPLE, "-o", str(out), "--heads", "64", "--title", "sample")
    assert r.returncode == 0, r.stderr
    assert_png(out)


def test_cuda_bench_output_and_recipe_choice(tmp_path):
    src = tmp_path / "cuda_bench.txt"
    src.write_text(CUDA_BENCH_LINES)
    out = tmp_path / "cuda.png"
    r = run_plot(str(src), SAMPLE, "-o", str(out), "--recipes", "v4_fp4,v4_fp8")
    assert r.returncode == 0, r.stderr
    assert_png(out)


def test_help():
    r = run_plot("--help")
    assert r.returncode == 0
    assert "--recipes" in r.stdout and "--heads" in r.stdout


@pytest.mark.parametrize("content", ["", "hello,world\n1,2\n", "backend,isa,tokens\n"])
def test_bad_or_empty_file(tmp_path, content):
    src = tmp_path / "bad.csv"
    src.write_text(content)
    out = tmp_path / "bad.png"
    r = run_plot(str(src), "-o", str(out))
    assert r.returncode == 2
    assert "error:" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_missing_file_and_unknown_recipe(tmp_path):
    r = run_plot(str(tmp_path / "nope.csv"), "-o", str(tmp_path / "x.png"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = run_plot(SAMPLE, "-o", str(tmp_path / "x.png"), "--recipes", "no_such_recipe")
    assert r.returncode == 2 and "no_such_recipe" in r.stderr
    r = run_plot(SAMPLE, "-o", str(tmp_path / "x.png"), "--heads", "32")
    assert r.returncode == 2 and "--heads 32" in r.stderr


PDL_LINES = """\
csv,tokens,heads,dtype,recipe,shape,pdl,bytes,us,gbps,copy_us,copy_gbps,ratio_to_copy,gbps_vs_v4_fp8,bytes_equal
csv,1,64,bf16,v4_fp8,auto,on,25224,1.294,19.5,1.021,24.7,0.789,1.000,yes
csv,1,64,bf16,v4_fp8,auto,off,25224,1.800,14.0,1.021,24.7,0.567,1.000,yes
csv,8,64,bf16,v4_fp8,auto,off,201792,1.874,107.7,1.112,181.5,0.593,1.000,yes
csv,64,64,bf16,v4_fp8,lanes16-trigger-late,on,1614336,1.9,849.6,1.3,1241.0,0.68,1.000,yes
csv,4096,64,bf16,v4_fp8,auto,on,103317504,32.7,3159.5,25.9,3992.4,0.79,1.000,yes
csv,4096,64,bf16,v4_fp8,baseline-warp-per-row,on,103317504,80.6,1281.8,25.9,3992.4,0.32,0.41,yes
csv,4096,64,bf16,v4_fp8,baseline-loads-before-wait,on,103317504,80.0,1291.5,25.9,3992.4,0.32,0.41,yes
"""


def test_pdl_column_and_sweep_shapes_are_filtered(tmp_path):
    # one PDL setting at a time; sweep shapes and the baseline's other placements left out
    src = tmp_path / "pdl.txt"
    src.write_text(PDL_LINES)
    out = tmp_path / "pdl.png"
    r = run_plot(str(src), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "(1 recipe(s), 2 token counts)" in r.stdout, r.stdout  # 1 and 4096, PDL on
    assert_png(out)
    r = run_plot(str(src), "-o", str(out), "--pdl", "off")
    assert r.returncode == 0, r.stderr
    assert "(1 recipe(s), 2 token counts)" in r.stdout, r.stdout  # 1 and 8, PDL off
