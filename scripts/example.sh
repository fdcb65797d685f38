#!/usr/bin/env bash
# Builds and runs the C++ consumer example (examples/cpp) against the installed package:
# installs an existing build directory into a temporary prefix, then configures the example
# as a separate project through find_package(indexer_q).
#   scripts/example.sh [BUILD_DIR]     (default: build, as scripts/test.sh leaves it)
# Then the CPU-only package: a build without CUDA (BUILD_DIR itself when it has none, else the
# library alone built in BUILD_DIR/cpu-package) is installed and consumed with the CUDA toolkit
# hidden (find_package(CUDAToolkit) disabled, nvcc off PATH); its consumer's link line must name
# nothing of CUDA. EXAMPLE_CPU_PACKAGE=0 skips that second part.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[ -f "$BUILD/CMakeCache.txt" ] || { echo "example.sh: no configured build in '$BUILD'" >&2; exit 2; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# consume PREFIX NAME [extra cmake args...]: configure, build and run examples/cpp against PREFIX.
consume() {
  local prefix=$1 name=$2; shift 2
  cmake -S examples/cpp -B "$TMP/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$TMP/$name.log" 2>&1 ||
    { cat "$TMP/$name.log" >&2; echo "example.sh: configuring the consumer failed ($name)" >&2; return 1; }
  cmake --build "$TMP/$name" >>"$TMP/$name.log" 2>&1 ||
    { cat "$TMP/$name.log" >&2; echo "example.sh: building the consumer failed ($name)" >&2; return 1; }
  "$TMP/$name/indexer_q_example"
}

cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
consume "$TMP/prefix" example

[ "${EXAMPLE_CPU_PACKAGE:-1}" = 0 ] && exit 0
cuda=$(sed -n 's/^INDEXER_Q_CUDA:BOOL=//p' "$BUILD/CMakeCache.txt")
if [[ "$cuda" =~ ^(ON|1|TRUE|YES)$ ]]; then
  cpu="$BUILD/cpu-package"
  echo "example.sh: building the library without CUDA in $cpu (the CPU-only package)"
  cmake -S . -B "$cpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=OFF \
        -DINDEXER_Q_BUILD_TESTS=OFF -DINDEXER_Q_BUILD_CLI=OFF >/dev/null
  cmake --build "$cpu" --target indexer_q >/dev/null
  cmake --install "$cpu" --prefix "$TMP/cpu-prefix" >/dev/null
else
  cp -r "$TMP/prefix" "$TMP/cpu-prefix"
fi
nocuda_path=$(echo "$PATH" | tr ':' '\n' | grep -v -i cuda | paste -sd: -)
PATH="$nocuda_path" consume "$TMP/cpu-prefix" example-cpu -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
  >"$TMP/example-cpu.out"
if grep -i -E 'cudart|libcuda|/cuda' "$TMP/example-cpu/build.ninja" >/dev/null; then
  echo "example.sh: the CPU-only package's consumer links CUDA:" >&2
  grep -i -o -E '[^ ]*(cudart|libcuda|/cuda)[^ ]*' "$TMP/example-cpu/build.ninja" | sort -u >&2
  exit 1
fi
echo "example.sh: CPU-only package: consumer configured, linked and ran without the CUDA toolkit"
