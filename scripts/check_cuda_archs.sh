#!/usr/bin/env bash
# The GPU targets of the CUDA build (issue 10). Three uses:
#
#   check_cuda_archs.sh list LIB ELF PTX   (CTest test cuda_archs, tests/CMakeLists.txt)
#       `cuobjdump --list-elf` / `--list-ptx` of LIB (the built library) must show exactly the
#       machine code ELF (comma-separated, e.g. sm_80,sm_89,sm_90) and the PTX PTX (e.g. sm_90)
#       that CMakeLists.txt configured (INDEXER_Q_CUDA_ARCHS); "unknown" (all, native, ...)
#       cannot be checked. Exit 77 (CTest: skipped) with the reason when cuobjdump is missing:
#       it comes from `pip install nvidia-cuda-cuobjdump` (requirements-dev.txt), a CUDA toolkit's
#       bin/, or $CUOBJDUMP.
#   check_cuda_archs.sh skip REASON        exit 77 after printing REASON (a build without CUDA).
#
#   check_cuda_archs.sh gpu                on a CUDA machine (the team's H200 through the device
#       tool): the code paths of older GPUs run on the newer one through PTX JIT. Builds the
#       library and the tests for compute_80 PTX only (software FP8 conversion, no PDL
#       instructions) and for compute_89 PTX only (conversion instruction, no PDL), runs the
#       CUDA tests of each on the GPU (the driver compiles the PTX for it, so __CUDA_ARCH__ is
#       800 / 890 there), then unless SKIP_FULL=1 builds the full list (INDEXER_Q_CUDA_ARCHS=all),
#       checks its targets with cuobjdump and runs the CUDA tests on the machine code (SKIP_JIT=1:
#       only that: the two halves in separate calls where one call has a short time limit).
#       Logs and a summary under $OUT (default ./cuda_archs_out). GoogleTest: an installed one,
#       or the source tree GTEST_SRC (default .dev/googletest). FILTER: the gtest filter
#       (default 'Cuda*': Cuda.*, CudaArch.*, CudaKside.*; JIT_FILTER for the PTX builds,
#       default the same without *Pdl*).
set -u -o pipefail
cd "$(dirname "$0")/.."

find_cuobjdump() {
  if [ -n "${CUOBJDUMP:-}" ] && [ -x "$CUOBJDUMP" ]; then echo "$CUOBJDUMP"; return 0; fi
  if command -v cuobjdump >/dev/null 2>&1; then command -v cuobjdump; return 0; fi
  for d in "${CUOBJDUMP_HINT:-}" /usr/local/cuda/bin; do
    if [ -n "$d" ] && [ -x "$d/cuobjdump" ]; then echo "$d/cuobjdump"; return 0; fi
  done
  # pip install nvidia-cuda-cuobjdump: <site-packages>/nvidia/cu*/bin/cuobjdump
  "${PYTHON:-python3}" - <<'EOF' 2>/dev/null
import glob, importlib.util, os, sys
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    for p in sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump"))):
        if os.access(p, os.X_OK):
            print(p)
            sys.exit(0)
sys.exit(1)
EOF
}

# Sorted unique target names (sm_XX[a|f]) of `cuobjdump --list-elf|--list-ptx` lines such as
# "ELF file    1: libindexer_q.1.sm_80.cubin" (an archive lists each member's).
targets_of() {
  "$CU" "$1" "$2" 2>&1 | sed -n 's/.*\.\(sm_[0-9]*[af]\{0,1\}\)\.\(cubin\|ptx\)$/\1/p' | sort -u | paste -sd, -
}

sorted_csv() { tr ',' '\n' <<<"$1" | sed '/^$/d' | sort -u | paste -sd, -; }

case "${1:-}" in
  skip)
    echo "SKIPPED: ${2:-no reason given}"
    exit 77
    ;;
  list)
    LIB=${2:?library path}
    WANT_ELF=${3-}
    WANT_PTX=${4-}
    if [ "$WANT_ELF" = unknown ] || [ "$WANT_PTX" = unknown ]; then
      echo "SKIPPED: the CUDA architectures are a CMake keyword (all, all-major, native, ...): no list to check against"
      exit 77
    fi
    if ! CU=$(find_cuobjdump); then
      echo "SKIPPED: cuobjdump not found (pip install nvidia-cuda-cuobjdump, see requirements-dev.txt;" \
           "or a CUDA toolkit's bin/ on PATH; or CUOBJDUMP=/path/to/cuobjdump)"
      exit 77
    fi
    [ -f "$LIB" ] || { echo "FAIL: no library at $LIB"; exit 1; }
    echo "cuobjdump: $CU ($("$CU" --version 2>&1 | grep -o 'release [0-9.]*' | head -1))"
    GOT_ELF=$(targets_of --list-elf "$LIB")
    GOT_PTX=$(targets_of --list-ptx "$LIB")
    WANT_ELF=$(sorted_csv "$WANT_ELF")
    WANT_PTX=$(sorted_csv "$WANT_PTX")
    echo "machine code: want [$WANT_ELF] got [$GOT_ELF]"
    echo "PTX:          want [$WANT_PTX] got [$GOT_PTX]"
    if [ "$GOT_ELF" = "$WANT_ELF" ] && [ "$GOT_PTX" = "$WANT_PTX" ]; then
      echo "OK: $(basename "$LIB") holds exactly the configured targets"
      exit 0
    fi
    echo "FAIL: the library's targets differ from the configured ones"
    exit 1
    ;;
  gpu)
    OUT=${OUT:-$PWD/cuda_archs_out}
    mkdir -p "$OUT"
    [ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
    J=$(nproc)
    FILTER=${FILTER:-'Cuda*'}
    SUM=$OUT/summary.txt
    : >"$SUM"
    say() { echo "$*" | tee -a "$SUM"; }
    say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -1); $(git rev-parse --short HEAD 2>/dev/null)"
    # The JIT cache must hold the kernels compiled from PTX for the whole run.
    export CUDA_CACHE_PATH=$OUT/.jit_cache CUDA_CACHE_MAXSIZE=4294967296
    GT=(-DINDEXER_Q_GTEST_SOURCE_DIR="${GTEST_SRC:-$PWD/.dev/googletest}")
    build() {  # dir archs
      local t0=$(date +%s)
      cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=ON -DINDEXER_Q_CUDA_ARCHS="$2" \
        -DINDEXER_Q_BUILD_CLI=OFF "${GT[@]}" >"$OUT/build-$1.log" 2>&1 &&
        cmake --build "$1" -j"$J" --target indexer_q indexer_q_tests >>"$OUT/build-$1.log" 2>&1
      local rc=$?
      say "build $1 (INDEXER_Q_CUDA_ARCHS=$2) rc=$rc ($(( $(date +%s) - t0 )) s)"
      return $rc
    }
    run_tests() {  # dir label
      local t0=$(date +%s)
      timeout 400 "$1/tests/indexer_q_tests" --gtest_filter="$FILTER" >"$OUT/tests-$1.log" 2>&1
      local rc=$?
      say "$2: gtest rc=$rc ($(( $(date +%s) - t0 )) s): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$OUT/tests-$1.log" | tr '\n' ' ')"
      grep -E '^\[arch\]' "$OUT/tests-$1.log" | tee -a "$SUM"
      grep -E '^\[  FAILED  \] ' "$OUT/tests-$1.log" | head -20 | tee -a "$SUM"
    }
    if [ -z "${SKIP_JIT:-}" ]; then
      # The two PTX-only builds at once (half the cores each), then their tests one after the other.
      J=$(( J > 3 ? J / 2 : 1 ))
      build build-jit80 80-virtual & P80=$!
      build build-jit89 89-virtual & P89=$!
      wait $P80; R80=$?
      wait $P89; R89=$?
      J=$(nproc)
      # Below sm_90 there is no PDL: the PDL tests' own producer kernels (same PTX) cannot trigger
      # early, so their overlap probe cannot hold; they run on the full list's sm_90 code below.
      FULL_FILTER=$FILTER
      FILTER=${JIT_FILTER:-"$FILTER:-*Pdl*"}
      [ $R80 -eq 0 ] && run_tests build-jit80 "compute_80 PTX, JIT on this GPU (sm_80 path: software FP8, no PDL)"
      [ $R89 -eq 0 ] && run_tests build-jit89 "compute_89 PTX, JIT on this GPU (sm_89 path: instruction FP8, no PDL)"
      FILTER=$FULL_FILTER
    fi
    if [ -z "${SKIP_FULL:-}" ]; then
      if build build-archs all; then
        ctest --test-dir build-archs -R '^cuda_archs$' --output-on-failure >"$OUT/cuobjdump.log" 2>&1
        say "ctest cuda_archs (cuobjdump) rc=$?: $(grep -E 'tests passed|tests failed' "$OUT/cuobjdump.log" | tail -1)"
        grep -E '^(machine code|PTX|OK|FAIL|SKIPPED)' "$OUT/cuobjdump.log" | tee -a "$SUM"
        run_tests build-archs "full list, machine code"
      fi
    fi
    echo; cat "$SUM"
    ;;
  *)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
