#!/usr/bin/env bash
# CPU A/B on a host with AVX-512 (the H200 machine's 16-core Sapphire-Rapids host): builds the
# CLI of two trees (CUDA, tests and torch off) and times both, one thread pinned by taskset, in 3
# alternating rounds: every query recipe at 4096 tokens x 64 heads and both key-side recipes at
# 4096 tokens, bf16, on AVX-512 and AVX2 (ROUNDS=n to change the 3). Wall-clock medians per call (`indexer-q bench`, 10
# samples after 5 warm-up calls); round 1 also checks every output against the scalar reference.
#
#   bash bench/cpu_results/2026-12-02-cpu-perf-3/host_ab.sh MAIN_TREE [OUT]
#
# MAIN_TREE: a checkout of main (the "base" side); the "new" side is the tree holding this script.
# OUT (or $OUT; default ./cpuperf-host-out): ab.csv (round,side, then the CLI's csv columns),
# summary.csv (per case: base and new minimum over the rounds in ns per row / per token, new/base),
# cpu.txt, build logs. Timing takes about 2-3 minutes after the builds.
set -u
[ $# -ge 1 ] || { echo "usage: $0 MAIN_TREE [OUT]" >&2; exit 2; }
BASE_SRC=$(cd "$1" && pwd) || exit 2
NEW_SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${2:-${OUT:-$PWD/cpuperf-host-out}}
mkdir -p "$OUT"
JOBS=${JOBS:-$(nproc)}
CORE=${CORE:-2}

{ grep -m1 'model name' /proc/cpuinfo; echo "nproc $(nproc)";
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512[a-z_0-9]*)$' | tr '\n' ' ')";
  lscpu 2>/dev/null | grep -E 'Model name|MHz|L2|L3'; uptime;
  echo "base: $BASE_SRC ($(git -C "$BASE_SRC" rev-parse --short HEAD 2>/dev/null))";
  echo "new: $NEW_SRC ($(git -C "$NEW_SRC" rev-parse --short HEAD 2>/dev/null))"; } > "$OUT/cpu.txt" 2>&1
cat "$OUT/cpu.txt"

for side in base new; do
  src=$BASE_SRC; [ $side = new ] && src=$NEW_SRC
  b=$src/build-hostab
  echo "== $(date +%T) build $side ($src)"
  cmake -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINDEXER_Q_CUDA=OFF -DINDEXER_Q_BUILD_TESTS=OFF \
        -DINDEXER_Q_BUILD_TORCH=OFF > "$OUT/configure_$side.log" 2>&1 &&
    cmake --build "$b" -j"$JOBS" --target indexer-q > "$OUT/build_$side.log" 2>&1 ||
    { echo "build $side failed: see $OUT/build_$side.log"; exit 1; }
done

run() {  # run ROUND SIDE: one pass of every case for one build, csv rows prefixed by round,side
  local round=$1 side=$2 src=$BASE_SRC check=--no-check
  [ "$side" = new ] && src=$NEW_SRC
  [ "$round" = 1 ] && check=
  local cli=$src/build-hostab/tools/indexer-q
  for isa in avx512 avx2; do
    taskset -c "$CORE" "$cli" bench --backend cpu --isa $isa --threads 1 --tokens 4096 --heads 64 --dtype bf16 \
        --recipe all --warmup 5 --iters 10 --format csv $check 2>>"$OUT/stderr.log"
    taskset -c "$CORE" "$cli" bench --backend cpu --isa $isa --threads 1 --tokens 4096 --dtype bf16 \
        --recipe v4_k_fp8,v4_k_fp4 --warmup 5 --iters 10 --format csv $check 2>>"$OUT/stderr.log"
  done | grep -v '^backend' | sed "s/^/$round,$side,/"
}

echo "round,side,backend,isa,tokens,heads,dtype,threads,pdl,sets,us_median,gbps,copy_us,copy_gbps,ratio_to_copy,exact,recipe" > "$OUT/ab.csv"
for round in $(seq 1 "${ROUNDS:-3}"); do
  for side in base new; do
    [ $((round % 2)) = 0 ] && side=$([ $side = base ] && echo new || echo base)  # alternate the order
    echo "== $(date +%T) round $round $side"
    run $round $side >> "$OUT/ab.csv"
  done
done

# summary: minimum over rounds of us per call -> ns per row (query: tokens x heads rows; key side:
# tokens), new / base.
python3 - "$OUT/ab.csv" > "$OUT/summary.csv" <<'PY'
import csv, sys, collections
best = collections.defaultdict(lambda: {})
exact = collections.defaultdict(set)
for r in csv.DictReader(open(sys.argv[1])):
    rows = int(r['tokens']) * (1 if r['recipe'].startswith('v4_k_') else int(r['heads']))
    ns = float(r['us_median']) * 1000.0 / rows
    k = (r['recipe'], r['isa'])
    best[k][r['side']] = min(best[k].get(r['side'], 1e30), ns)
    if r['exact'] != '-': exact[k].add(r['side'] + ':' + r['exact'])
print('recipe,isa,base_ns_per_row,new_ns_per_row,new_over_base,exact')
for (rec, isa), v in best.items():
    b, n = v.get('base', float('nan')), v.get('new', float('nan'))
    print('%s,%s,%.2f,%.2f,%.3f,%s' % (rec, isa, b, n, n / b, ' '.join(sorted(exact[(rec, isa)]))))
PY
cat "$OUT/summary.csv"
grep -c ',NO,' "$OUT/ab.csv" | sed 's/^/rows not exact: /'
