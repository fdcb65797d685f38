#!/usr/bin/env bash
# The Triton kernel on a CUDA machine: tests/python/test_triton.py compiled on the GPU (no
# interpreter) and bench/triton_bench.py (with the launch-shape sweep), logs under $OUT.
#
# Assumes the package is already pip-installed there (the lead's combined script builds it);
# this repository's python/ sources are used with that installed operator library, so the
# Triton files of this checkout are what is tested even if the install predates them.
#
#   OUT=/some/dir scripts/device/triton_gpu.sh            (from the repository root)
#   TRITON_BENCH_ARGS="--recipes v4_fp8,v4_fp4" ...        (default: every recipe, with --sweep)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/triton_gpu_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}

# the installed operator library (imported from outside the checkout)
LIB=$(cd / && "$PY" -c "import indexer_q, os; print(indexer_q.library_path)" 2>"$OUT/triton_env.err")
if [ -z "$LIB" ]; then
  echo "triton_gpu: indexer_q is not installed here (see $OUT/triton_env.err)" | tee "$OUT/triton_summary.txt"
  exit 1
fi
export INDEXER_Q_TORCH_LIBRARY="$LIB"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET

{
  echo "library: $LIB"
  "$PY" - <<'PYEOF'
import os, torch, triton, indexer_q
print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda)
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
print("available_backends", indexer_q.available_backends())
inst = os.path.dirname(indexer_q.library_path)
print("installed package has triton_selfcheck.bin:",
      os.path.exists(os.path.join(inst, "triton_selfcheck.bin")))
PYEOF
} > "$OUT/triton_env.txt" 2>&1

rc=0
"$PY" -m pytest tests/python/test_triton.py -q -rs -p no:cacheprovider --durations=10 \
  > "$OUT/triton_tests.log" 2>&1 || rc=1
"$PY" bench/triton_bench.py ${TRITON_BENCH_ARGS:---sweep} > "$OUT/triton_bench.log" 2>&1 || rc=1

{
  cat "$OUT/triton_env.txt"
  echo "--- tests:"; tail -n 3 "$OUT/triton_tests.log"
  echo "--- bench (csv):"; grep '^csv' "$OUT/triton_bench.log" | head -n 80
  grep '^sweep ' "$OUT/triton_bench.log" | cut -c1-60
  echo "rc=$rc"
} > "$OUT/triton_summary.txt"
cat "$OUT/triton_summary.txt"
exit $rc
