#!/usr/bin/env bash
# Sets up, builds, and runs the main job: `indexer-q run` (extra arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target indexer-q >/dev/null
exec build/tools/indexer-q run "$@"
