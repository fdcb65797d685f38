#!/usr/bin/env bash
# Sets up, builds, and runs every test: the C++ suite (GoogleTest + CLI checks under CTest)
# and the Python operator's suite (pytest). GPU tests skip cleanly on a machine without one;
# the CUDA code is still compiled whenever nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python

echo "== C++: configure, build, ctest"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== C++ example: install, find_package(indexer_q), build and run examples/cpp; CPU-only package"
scripts/example.sh build

echo "== Python: build the wheel, check what it holds, install it and run pytest"
PY=${PYTHON:-python3}
rm -rf build/dist
"$PY" -m pip wheel -q --no-build-isolation --no-deps -w build/dist .
"$PY" scripts/check_wheel.py build/dist/indexer_q-*.whl
"$PY" -m pip install -q --no-deps --force-reinstall build/dist/indexer_q-*.whl
# the integration tests import SGLang's and vLLM's own modules from their pinned PyPI wheels
# (scripts/fetch_engines.sh: cached; 375 MB of wheels and 20-50 s on a cold cache)
scripts/fetch_engines.sh
INDEXER_Q_REQUIRE_ENGINES=1 "$PY" -m pytest tests/python -q

# Sanitizers (ASan + UBSan suite, TSan concurrency) and fuzzing; each part prints its time.
# SKIP_CI_CHECKS=1 skips them (a quick local run); CI never sets it.
if [ -z "${SKIP_CI_CHECKS:-}" ]; then
  echo "== Reliability checks: scripts/ci_checks.sh (asan, tsan, fuzz)"
  scripts/ci_checks.sh
fi
