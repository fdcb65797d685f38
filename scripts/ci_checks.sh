#!/usr/bin/env bash
# Reliability checks of CI (issue 11), called by scripts/test.sh after the normal suite:
#   asan  the whole C++ suite (GoogleTest + CLI tests under CTest, and the allocation test)
#         built with -fsanitize=address,undefined -fno-sanitize-recover=undefined, CUDA and the
#         Python binding off; then the ISA-dispatch tests again once per other supported ISA
#         (INDEXER_Q_CPU_ISA=<isa>), so the "auto" paths run every kernel under the sanitizers
#   tsan  the thread-pool and concurrency tests (tests/test_concurrency.cpp) under ThreadSanitizer
#   fuzz  the libFuzzer targets of tests/fuzz (clang) for FUZZ_SECONDS each (default 60) from
#         the committed corpus tests/fuzz/corpus/<target>; new finds go to a scratch directory.
#         This tree has the scalar CPU kernel only (INDEXER_Q_CPU_SIMD=OFF): clang takes minutes
#         per SIMD file with ASan + UBSan + coverage, and the SIMD kernels run under ASan above.
# Usage: scripts/ci_checks.sh [asan] [tsan] [fuzz]   (no argument: all three)
# Build trees: build-asan, build-tsan, build-fuzz (incremental on a second run). JOBS (default:
# nproc) sets the build and ctest parallelism.
# Any sanitizer report, test failure, fuzzer crash / timeout / leak fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(asan tsan fuzz)
for p in "${parts[@]}"; do
  case "$p" in asan|tsan|fuzz) ;; *) echo "ci_checks.sh: unknown part '$p' (expected asan, tsan or fuzz)" >&2; exit 2 ;; esac
done

JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
# -O1: sanitized code at -O3 takes several times longer to compile on the 2-core CI machine, for
# little gain in run time; no NDEBUG, so assertions stay on.
COMMON=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g"
        -DINDEXER_Q_CUDA=OFF -DINDEXER_Q_BUILD_TORCH=OFF)
SUMMARY=()
# Tests whose calls leave the ISA to "auto" (run again per other ISA under ASan); the other
# groups loop over every supported ISA themselves (backends_under_test, supported_cpu_isas).
AUTO_ISA_TESTS=${AUTO_ISA_TESTS:-'Api.*:Concurrency.*:FloatEnv.*:Kside.*:CpuThreads.*'}
T_ALL=$(date +%s)

note() { echo "ci_checks: $*"; }
finish() {  # part, start time, text
  local dt=$(( $(date +%s) - $2 ))
  SUMMARY+=("$(printf '%-5s %4d s  %s' "$1" "$dt" "$3")")
  note "$1 done in ${dt} s: $3"
}

# Sanitizer runtime options: stop at the first report, with a stack; leaks count.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

run_asan() {
  local t0 B=build-asan
  t0=$(date +%s)
  note "asan: configure + build ($B, -fsanitize=address,undefined)"
  cmake -S . -B $B "${GEN[@]}" "${COMMON[@]}" -DINDEXER_Q_SANITIZE=address,undefined >/dev/null
  cmake --build $B -j"$JOBS" --target indexer_q_tests indexer_q_alloc_tests indexer-q st_set_metadata indexer_q_cpu_bench
  local tb
  tb=$(date +%s)
  note "asan: ctest (the whole C++ suite)"
  ctest --test-dir $B --output-on-failure -j"$JOBS" >"$B/ctest.log" 2>&1 || {
    tail -120 "$B/ctest.log"; note "asan: ctest FAILED (log: $B/ctest.log)"; exit 1; }
  local summary
  summary=$(grep -E "tests passed|tests failed" "$B/ctest.log" | tail -1)
  note "asan: $summary"
  # The tests loop over the supported ISAs themselves; calls left to "auto" use the best one.
  # Run the tests that call with the default ISA once more for each other supported ISA,
  # through the environment override (INDEXER_Q_CPU_ISA), so every kernel runs those paths too.
  local flags isas=(scalar) ran=() isa n
  flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
  [[ $flags == *" avx2 "* && $flags == *" fma "* && $flags == *" f16c "* ]] && isas+=(avx2)
  [[ $flags == *" avx512f "* && $flags == *" avx512bw "* && $flags == *" avx512vl "* && $flags == *" avx512dq "* ]] && isas+=(avx512)
  for isa in "${isas[@]:0:${#isas[@]}-1}"; do
    INDEXER_Q_CPU_ISA=$isa $B/tests/indexer_q_tests --gtest_filter="$AUTO_ISA_TESTS" >"$B/isa_$isa.log" 2>&1 || {
      tail -60 "$B/isa_$isa.log"; note "asan: INDEXER_Q_CPU_ISA=$isa FAILED (log: $B/isa_$isa.log)"; exit 1; }
    n=$(grep -E '^\[  PASSED  \]' "$B/isa_$isa.log" | grep -oE '[0-9]+' | head -1)
    ran+=("$isa ($n tests)")
  done
  ran+=("${isas[-1]} (default, whole suite)")
  finish asan "$t0" "$summary (tests $(( $(date +%s) - tb )) s); ISA of 'auto': ${ran[*]}"
}

run_tsan() {
  local t0 B=build-tsan
  t0=$(date +%s)
  note "tsan: configure + build ($B, -fsanitize=thread)"
  cmake -S . -B $B "${GEN[@]}" "${COMMON[@]}" -DINDEXER_Q_SANITIZE=thread -DINDEXER_Q_BUILD_CLI=OFF >/dev/null
  cmake --build $B -j"$JOBS" --target indexer_q_concurrency_tests
  local tb
  tb=$(date +%s)
  note "tsan: tests/test_concurrency.cpp (indexer_q_concurrency_tests)"
  $B/tests/indexer_q_concurrency_tests >"$B/tsan.log" 2>&1 || {
    tail -120 "$B/tsan.log"; note "tsan: FAILED (log: $B/tsan.log)"; exit 1; }
  if grep -q "WARNING: ThreadSanitizer" "$B/tsan.log"; then
    grep -A30 "WARNING: ThreadSanitizer" "$B/tsan.log" | head -60; note "tsan: reports found"; exit 1
  fi
  finish tsan "$t0" "$(grep -E '^\[  PASSED  \]' "$B/tsan.log") (tests $(( $(date +%s) - tb )) s), no ThreadSanitizer report"
}

run_fuzz() {
  local t0 B=build-fuzz
  t0=$(date +%s)
  command -v clang++ >/dev/null 2>&1 || { note "fuzz: clang++ not found (scripts/setup.sh installs it)"; exit 1; }
  note "fuzz: configure + build ($B, clang, -fsanitize=fuzzer,address,undefined)"
  CC=clang CXX=clang++ cmake -S . -B $B "${GEN[@]}" "${COMMON[@]}" -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DINDEXER_Q_SANITIZE=address,undefined -DINDEXER_Q_FUZZ=ON \
    -DINDEXER_Q_BUILD_TESTS=OFF -DINDEXER_Q_BUILD_CLI=OFF -DINDEXER_Q_CPU_SIMD=OFF >/dev/null
  cmake --build $B -j"$JOBS" --target fuzz_safetensors fuzz_validate
  local res=() target work dict
  for target in fuzz_safetensors fuzz_validate; do
    work=$B/fuzz_work/$target
    rm -rf "$work" && mkdir -p "$work/new"
    dict=()
    [ -f tests/fuzz/${target#fuzz_}.dict ] && dict=(-dict=tests/fuzz/${target#fuzz_}.dict)
    note "fuzz: $target for ${FUZZ_SECONDS} s from tests/fuzz/corpus/${target#fuzz_}"
    # -fork=0, one process: a crash, sanitizer report, leak, timeout (10 s/input) or OOM ends it
    # with a nonzero status and leaves the input in $work (crash-*, timeout-*, leak-*, oom-*).
    if ! ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 $B/tests/fuzz/$target "${dict[@]}" \
        -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=3072 -max_len=4096 \
        -print_final_stats=1 -artifact_prefix="$work/" "$work/new" "tests/fuzz/corpus/${target#fuzz_}" \
        >"$work/log" 2>&1; then
      tail -60 "$work/log"
      note "fuzz: $target FAILED; the input is in $work (reproduce: $B/tests/fuzz/$target <file>)"
      exit 1
    fi
    local execs rate cov
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$work/log" | grep -oE '[0-9]+$' || echo '?')
    rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$work/log" | grep -oE '[0-9]+$' || echo '?')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$work/log" | tail -1 || true)
    res+=("$target: $execs execs, $rate/s, $cov, $(ls "$work/new" | wc -l) new inputs")
    note "fuzz: ${res[-1]}"
  done
  finish fuzz "$t0" "$(IFS=';'; echo "${res[*]}")"
}

for p in "${parts[@]}"; do "run_$p"; done
echo "== ci_checks summary (total $(( $(date +%s) - T_ALL )) s)"
printf '  %s\n' "${SUMMARY[@]}"
