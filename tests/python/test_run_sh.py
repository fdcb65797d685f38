"""scripts/run.sh's choice of what to build (RUN_PLAN=1 prints it and stops), with stand-in
nvidia-smi programs on PATH: CUDA only for a GPU the driver reports (sm_80 or newer) and only
for its architecture; nvcc alone builds nothing of CUDA."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NVCC = shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg") is None or shutil.which("bash") is None,
    reason="scripts/setup.sh (run first by run.sh) checks packages with dpkg")


def plan(tmp_path, smi):
    env = dict(os.environ, RUN_PLAN="1")
    d = tmp_path / "bin"
    d.mkdir()
    (d / "nvidia-smi").write_text("#!/bin/sh\n" + smi + "\n")  # ahead of any real one
    (d / "nvidia-smi").chmod(0o755)
    env["PATH"] = f"{d}:{env['PATH']}"
    r = subprocess.run(["bash", "scripts/run.sh"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("smi,cuda", [
    ('echo "NVIDIA-SMI has failed: no driver"; exit 9', None),  # no driver: CPU only
    ('echo "No devices were found"; exit 6', None),  # the driver sees no GPU
    ('echo "7.5"', None),                            # below sm_80: CPU only
    ('echo "9.0"', "90-real"),
    ('echo "12.0"; echo "12.0"', "120-real"),        # two GPUs: the first one's architecture
])
def test_run_sh_builds_what_the_machine_runs(tmp_path, smi, cuda):
    line = plan(tmp_path, smi)
    if cuda is None or not NVCC:
        assert line == "run: plan: INDEXER_Q_CUDA=OFF", line
    else:
        assert line == f"run: plan: INDEXER_Q_CUDA=ON INDEXER_Q_CUDA_ARCHS={cuda}", line
