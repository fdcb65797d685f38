#!/usr/bin/env bash
# Issue 20, the Python entry points' overhead (branch pyover): quant_q_alloc's defaults (out_kind
# 0, weights_dims 3) and its 2-D q_input with the rows flag (quantize_fp4_indexer_tensor) on CUDA
# tensors, through the Python wrappers that now call it with fewer arguments. Builds the torch
# operator with the CUDA backend (sm_90) and runs the affected tests on the GPU: test_api.py
# (quant_q_alloc against quant_q on every recipe, its defaults and 2-D rows, opcheck), test_cuda.py,
# test_kside.py, the integrations' wrappers and the V4.1 / unfused / golden tests.
#
# Output: $OUT/summary.txt (the short form) and the logs (default OUT ./pyover_out). Success: the
# build rc=0, torch.cuda.is_available True, and the pytest line "N passed, M skipped" with no
# "failed" / "error" (M: the tests for other devices, no CUDA case skipped for want of a GPU).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/pyover_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
J=$(nproc)
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
t0=$(date +%s)
{ cmake -S . -B build-pyover -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DINDEXER_Q_CUDA_ARCHS=90-real -DINDEXER_Q_BUILD_TORCH=ON \
    -DINDEXER_Q_BUILD_TESTS=OFF &&
  cmake --build build-pyover -j"$J" --target indexer_q_torch_ops; } >"$OUT/build.log" 2>&1
rb=$?
say "build rc=$rb ($(( $(date +%s) - t0 )) s)"
[ $rb -ne 0 ] && { tail -30 "$OUT/build.log"; exit 1; }
SO=$(find build-pyover -name '_indexer_q_ops*.so' | head -1)
t1=$(date +%s)
XDIST=""
python3 -c "import xdist" 2>/dev/null && XDIST="-n 8"
INDEXER_Q_TORCH_LIBRARY=$PWD/$SO PYTHONPATH=$PWD/python timeout 140 python3 -m pytest -q -rfE \
  -p no:cacheprovider $XDIST tests/python/test_api.py tests/python/test_cuda.py \
  tests/python/test_kside.py tests/python/test_integrations_wrappers.py tests/python/test_unfused.py \
  -k "not torch_compile" >"$OUT/pytest.txt" 2>&1
rt=$?
say "pytest rc=$rt ($(( $(date +%s) - t1 )) s): $(tail -1 "$OUT/pytest.txt")"
say "torch.cuda.is_available: $(python3 -c 'import torch; print(torch.cuda.is_available())' 2>&1 | tail -1)"
grep -E '^(FAILED|ERROR) ' "$OUT/pytest.txt" | head -30 | tee -a "$SUM"
exit $rt
