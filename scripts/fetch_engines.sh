#!/usr/bin/env bash
# Fetches the pinned engine wheels the integration tests import (SGLang 0.5.23, vLLM 0.33.0) with
# pip (no dependencies) into a cache and extracts their Python sources only (the wheels' compiled
# kernels are not needed: the tests import the engines' Python modules and route them to
# indexer_q). Idempotent: a complete extraction is kept (its .complete marker) and reused.
#   scripts/fetch_engines.sh [CACHE_DIR]   (default: $INDEXER_Q_ENGINE_CACHE or
#                                           ~/.cache/indexer_q/engines)
# Prints the extracted roots, one "name=path" a line. Exit 1 if pip cannot fetch a wheel.
set -euo pipefail
PY=${PYTHON:-python3}
CACHE=${1:-${INDEXER_Q_ENGINE_CACHE:-$HOME/.cache/indexer_q/engines}}
mkdir -p "$CACHE/wheels"
fetch() {  # name version
  local name=$1 ver=$2 dest="$CACHE/$1-$2"
  if [ ! -f "$dest/.complete" ]; then
    local t0=$SECONDS
    if ! ls "$CACHE/wheels/$name-$ver-"*.whl >/dev/null 2>&1; then
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
        -d "$CACHE/wheels" "$name==$ver" >&2
    fi
    rm -rf "$dest"
    "$PY" - "$CACHE/wheels" "$name" "$ver" "$dest" <<'PYEOF'
import glob, os, sys, zipfile
wheels, name, ver, dest = sys.argv[1:]
whl = sorted(glob.glob(os.path.join(wheels, f"{name}-{ver}-*.whl")))[0]
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.endswith(".py") and m.startswith(name + "/")]
    z.extractall(dest, members)
print(f"fetch_engines: {name} {ver}: {len(members)} Python files from {os.path.basename(whl)}",
      file=sys.stderr)
PYEOF
    touch "$dest/.complete"
    echo "fetch_engines: $name $ver ready in $((SECONDS - t0)) s" >&2
  fi
  echo "$name=$dest"
}
fetch sglang 0.5.23
fetch vllm 0.33.0
