#!/usr/bin/env bash
# Builds and runs the C++ consumer example (examples/cpp) against the installed package:
# installs an existing build directory into a temporary prefix, then configures the example
# as a separate project through find_package(indexer_q).
#   scripts/example.sh [BUILD_DIR]     (default: build, as scripts/test.sh leaves it)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[ -f "$BUILD/CMakeCache.txt" ] || { echo "example.sh: no configured build in '$BUILD'" >&2; exit 2; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
cmake -S examples/cpp -B "$TMP/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$TMP/prefix" >/dev/null
cmake --build "$TMP/build" >/dev/null
"$TMP/build/indexer_q_example"
