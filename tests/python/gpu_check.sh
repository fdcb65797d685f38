#!/usr/bin/env bash
# One-shot check of the Python package on a CUDA machine (the team's GPU machine: torch 2.11+cu130,
# nvcc 13.0, no network). Run from the repository root; logs go to $OUT (default ./gpu_check_out).
#  1. ABI: if build-torch/abi/_indexer_q_ops.so exists (built elsewhere, e.g. against torch 2.13
#     CPU), load it under this torch and run the golden + error tests with it (CUDA tensors then
#     take the composed ATen path, since that build has no CUDA kernel).
#  2. pip install --no-build-isolation --no-deps . (CUDA backend on when torch has CUDA + nvcc).
#  3. python -m pytest tests/python -q against the installed package (pytest-xdist if present).
#  4. tests/python/bench_op.py: timings through torch (CUDA graphs on the GPU, CPU wall time).
set -u -o pipefail
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
{
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda,
torch.cuda.is_available() and torch.cuda.get_device_name(0))'
  nvcc --version | tail -2
} 2>&1 | tee "$OUT/env.log"

if [ -f build-torch/abi/_indexer_q_ops.so ]; then
  echo "== ABI check: prebuilt build-torch/abi/_indexer_q_ops.so under this torch"
  INDEXER_Q_TORCH_LIBRARY=$PWD/build-torch/abi/_indexer_q_ops.so PYTHONPATH=$PWD/python \
    timeout 300 python3 -m pytest tests/python/test_golden.py tests/python/test_errors.py -q \
    -p no:cacheprovider 2>&1 | tee "$OUT/abi.log" | tail -4
fi

echo "== pip install --no-build-isolation --no-deps ."
start=$(date +%s)
python3 -m pip install -v --no-build-isolation --no-deps . > "$OUT/install.log" 2>&1
rc=$?
echo "install rc=$rc in $(( $(date +%s) - start )) s"
grep -E "indexer_q: torch|indexer_q torch binding|CUDA compiler|Successfully installed" "$OUT/install.log"
[ $rc -eq 0 ] || { tail -40 "$OUT/install.log"; exit $rc; }

echo "== pytest tests/python"
python3 -c 'import indexer_q; print(indexer_q.library_path, indexer_q.available_backends())' \
  2>&1 | tee -a "$OUT/env.log"
XDIST=""
python3 -c "import xdist" 2>/dev/null && XDIST="-n ${PYTEST_WORKERS:-6}"
start=$(date +%s)
timeout 420 python3 -m pytest tests/python -q -p no:cacheprovider -rfE --durations=8 $XDIST 2>&1 \
  | tee "$OUT/pytest.log" | grep -vE "^(tests/python/.*(PASSED|SKIPPED))" | tail -40
echo "pytest rc=${PIPESTATUS[0]} in $(( $(date +%s) - start )) s"

echo "== bench (tests/python/bench_op.py)"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  timeout 120 python3 tests/python/bench_op.py --device cuda 2>&1 | tee "$OUT/bench.log"
fi
timeout 120 python3 tests/python/bench_op.py --device cpu --tokens 1,64,1024 2>&1 | tee -a "$OUT/bench.log"
