#!/usr/bin/env bash
# Installs what indexer_q needs on a fresh Debian/Ubuntu machine. Idempotent.
#   scripts/setup.sh          C++ build + tests: compiler, CMake, Ninja, GoogleTest, clang (fuzzing)
#   scripts/setup.sh --run    only what scripts/run.sh needs: compiler, CMake, Ninja
#   scripts/setup.sh --python also the Python side: torch (CPU build), pytest, scikit-build-core,
#                             triton (the Triton kernel's tests run through its CPU interpreter)
set -euo pipefail

want_python=0
run_only=0
for arg in "$@"; do
  case "$arg" in
    --python) want_python=1 ;;
    --run) run_only=1 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (expected --run, --python or --help)" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# clang: the libFuzzer targets of scripts/ci_checks.sh (Debian's clang; libFuzzer is in its
# libclang-rt package, checked below).
pkgs=(g++ cmake ninja-build libgtest-dev clang)
[ "$run_only" -eq 1 ] && pkgs=(g++ cmake ninja-build)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# -fsanitize=fuzzer needs clang's runtime libraries (libclang-rt-<major>-dev on Debian 12).
if [ "$run_only" -eq 0 ] && ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     clang++ -x c++ -fsanitize=fuzzer,address - -o /dev/null >/dev/null 2>&1; then
  rt="libclang-rt-$(clang++ -dumpversion | cut -d. -f1)-dev"
  echo "setup: installing $rt (libFuzzer)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$rt" >/dev/null
fi

if [ "$want_python" -eq 1 ]; then
  PY=${PYTHON:-python3}
  # torch==2.13.0 is pinned: on this project's machines it resolves to a CPU build on local disk.
  "$PY" -m pip install -q -r "$(dirname "$0")/../requirements-dev.txt"
fi
echo "setup: ok"
