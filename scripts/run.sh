#!/usr/bin/env bash
# Sets up, builds, and runs the main job: `indexer-q run` (extra arguments are passed on).
# Builds only what this machine can run, in build-run/: the CPU backends, plus the CUDA backend
# for the local GPU's architecture alone when nvidia-smi finds a GPU (the driver, not nvcc,
# decides) and nvcc is installed. scripts/test.sh (CI) builds every GPU target instead.
# The compiler's progress ([n/N] lines) is shown; set RUN_QUIET=1 to hide it. RUN_PLAN=1 prints
# the choice (INDEXER_Q_CUDA, the architecture) and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --run

[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
cuda=OFF
arch=""
why="no GPU found by nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
  # compute_cap: e.g. 9.0 for an H100/H200 (drivers since 2022 report it); first GPU only.
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
  if [[ "$cap" =~ ^[0-9]+$ ]] && [ "$cap" -lt 80 ]; then
    why="the GPU's compute capability ${cap:0:-1}.${cap: -1} is below 8.0, which indexer_q's CUDA backend needs"
  elif [[ "$cap" =~ ^[0-9]+$ ]]; then
    if command -v nvcc >/dev/null 2>&1; then
      cuda=ON
      arch="${cap}-real"
      why="GPU of compute capability ${cap:0:-1}.${cap: -1} found by nvidia-smi: CUDA for sm_${cap} only"
    else
      why="a GPU is present, but nvcc is not installed"
    fi
  elif nvidia-smi >/dev/null 2>&1; then
    why="nvidia-smi reports no GPU compute capability"
  fi
fi
if [ "$cuda" = OFF ]; then
  echo "run: building for the CPU only ($why)"
else
  echo "run: building the CPU backends and CUDA ($why)"
fi

jobs=$(nproc)
# RUN_PLAN=1: print what would be built and stop (how the choice above is tested).
[ -n "${RUN_PLAN:-}" ] && { echo "run: plan: INDEXER_Q_CUDA=$cuda${arch:+ INDEXER_Q_CUDA_ARCHS=$arch}"; exit 0; }
cfg=(-DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_BUILD_TESTS=OFF -DINDEXER_Q_CUDA=$cuda)
[ "$cuda" = ON ] && cfg+=(-DINDEXER_Q_CUDA_ARCHS="$arch")
mkdir -p build-run
cmake -S . -B build-run -G Ninja "${cfg[@]}" >build-run/configure.log 2>&1 ||
  { cat build-run/configure.log >&2; echo "run: configure failed (log above)" >&2; exit 1; }
t0=$(date +%s)
if [ -n "${RUN_QUIET:-}" ]; then
  cmake --build build-run -j"$jobs" --target indexer-q >/dev/null
else
  cmake --build build-run -j"$jobs" --target indexer-q
fi
echo "run: built in $(( $(date +%s) - t0 )) s; running build-run/tools/indexer-q run $*"
exec build-run/tools/indexer-q run "$@"
