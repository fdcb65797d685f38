#!/usr/bin/env bash
# Before/after benchmarks in one GPU-machine call: the CUDA benchmark (indexer_q_cuda_bench, the
# query side; with STEPS including kside also the key side: `--op kside`, or the separate
# indexer_q_cuda_kside_bench of a tree from before the two shared one harness) and the CPU
# benchmark (indexer_q_cpu_bench, the host's CPU) of a baseline source tree and of this checkout,
# built the same way there, run alternately (base, new, base, new) so that both sides see the same
# machine state. Only the recipes both trees have are timed. The before/after table
# (bench/ab_compare.py, medians over the rounds) ends $OUT/summary.txt.
#
#   BASE=dir         the baseline source tree (default .dev/base: `git archive <commit>` of it)
#   RECIPES=list     default: the recipes of the baseline's include/indexer_q/recipes.inc
#   TOKENS=list      default 1,8,64,4096,16384,65536      HEADS=n  default 64
#   ROUNDS=n         alternations (default 2)             CPU_TOKENS (default 4096)
#   STEPS=cuda,kside,cpu   default cuda,cpu           KRECIPES=list  key recipes (default both)
#   KTOKENS=list     the key side's (default TOKENS)     KDTYPE  default fp32
# Logs and CSVs packed into $OUT/ab_logs.tgz (default OUT ./ab_out); $OUT/summary.txt is the short form.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/ab_out}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
BASE=${BASE:-.dev/base}
STEPS=${STEPS:-cuda,cpu}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
J=$(nproc)
CORE=${CORE:-$(( J > 2 ? 2 : 0 ))}  # the core the CPU benchmark is pinned to
if [ ! -f "$BASE/CMakeLists.txt" ]; then echo "ab_bench: BASE=$BASE is not a source tree" >&2; exit 2; fi
RECIPES=${RECIPES:-$(sed -n 's/^IQ_RECIPE([A-Za-z0-9_]*, *"\([a-z0-9_]*\)".*/\1/p' "$BASE/include/indexer_q/recipes.inc" | paste -sd,)}
TOKENS=${TOKENS:-1,8,64,4096,16384,65536}
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); base $BASE; recipes $RECIPES"

build() {  # build <src> <dir>: the two benchmarks only, sm_90, Release
  local targets=""
  { has cuda || has kside; } && targets="$targets indexer_q_cuda_bench"
  has kside && [ -f "$1/bench/cuda_kside_bench.cu" ] && targets="$targets indexer_q_cuda_kside_bench"
  has cpu && targets="$targets indexer_q_cpu_bench"
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=$({ has cuda || has kside; } && echo ON || echo OFF) \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DINDEXER_Q_CUDA_ARCHS=90-real -DINDEXER_Q_BUILD_TESTS=OFF >"$OUT/build_$(basename "$2").log" 2>&1 &&
    cmake --build "$2" -j"$J" --target $targets >>"$OUT/build_$(basename "$2").log" 2>&1
}
t0=$(date +%s)
build "$BASE" build-ab-base & pb=$!
build . build-ab-new & pn=$!
wait $pb; rb=$?
wait $pn; rn=$?
say "build base rc=$rb, new rc=$rn ($(( $(date +%s) - t0 )) s)"
[ $rb -ne 0 ] && tail -20 "$OUT/build_build-ab-base.log"
[ $rn -ne 0 ] && tail -20 "$OUT/build_build-ab-new.log"
[ $rb -ne 0 ] || [ $rn -ne 0 ] && exit 1

for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in base new; do
    if has cuda; then
      timeout 200 "build-ab-$side/bench/indexer_q_cuda_bench" --tokens "$TOKENS" --heads "${HEADS:-64}" \
        --recipes "$RECIPES" --pdl off,on >"$OUT/cuda_${side}_$r.txt" 2>&1
      say "cuda $side round $r rc=$? ($(( $(date +%s) - t0 )) s)"
    fi
    if has kside; then
      kbin="build-ab-$side/bench/indexer_q_cuda_kside_bench" kop=""
      [ -x "$kbin" ] || { kbin="build-ab-$side/bench/indexer_q_cuda_bench" kop="--op kside"; }
      # shellcheck disable=SC2086
      timeout 150 "$kbin" $kop --tokens "${KTOKENS:-$TOKENS}" --dtype "${KDTYPE:-fp32}" --pdl both \
        --recipes "${KRECIPES:-v4_k_fp8,v4_k_fp4}" >"$OUT/kside_${side}_$r.txt" 2>&1
      say "kside $side round $r rc=$? ($(( $(date +%s) - t0 )) s)"
    fi
    if has cpu; then
      timeout 150 taskset -c "$CORE" "build-ab-$side/bench/indexer_q_cpu_bench" --isa avx512,avx2 --threads 1 \
        --tokens "${CPU_TOKENS:-4096}" --heads "${HEADS:-64}" --recipe "$RECIPES" --iters 15 --format csv \
        >"$OUT/cpu_${side}_$r.csv" 2>&1
      say "cpu $side round $r rc=$? ($(( $(date +%s) - t0 )) s)"
    fi
  done
done
say "total $(( $(date +%s) - t0 )) s"
for kind in cuda kside cpu; do
  ls "$OUT/${kind}_base_"* >/dev/null 2>&1 || continue
  say "== before/after, $kind (bench/ab_compare.py)"
  python3 bench/ab_compare.py --base "$OUT/${kind}_base_"* --new "$OUT/${kind}_new_"* >>"$SUM" 2>&1
  say "ab_compare $kind rc=$?"
done
# one archive (the device tool brings back at most 8 files); the summary stays beside it
tar czf /tmp/ab_logs.tgz -C "$OUT" --exclude summary.txt . && mv /tmp/ab_logs.tgz "$OUT/" &&
  find "$OUT" -maxdepth 1 -type f ! -name ab_logs.tgz ! -name summary.txt -delete
