#!/usr/bin/env bash
# Runs other projects' own tests of the indexer family (SGLang, sgl-kernel-xpu, vLLM) against
# indexer_q. The tests are not part of this repository: they live in a scratch folder fetched by
# hand (never committed), with a MANIFEST.tsv naming each file's repository, path and commit, and a
# conftest.py that is the integration call and nothing else (scripts/ext_tests_conftest.py, copied
# there when the folder has none; docs/INTEGRATIONS.md, "Other projects' own tests").
#
#   scripts/ext_tests.sh SCRATCH [pytest arguments...]   run them; summary per file
#   scripts/ext_tests.sh --pack SCRATCH                   pack the engines' Python files (and
#                                                         EXT_TESTS_DEPS) into SCRATCH, for a
#                                                         machine without network
#
# Environment:
#   INDEXER_Q_TORCH_LIBRARY  the built _indexer_q_ops.so (else the one inside python/indexer_q)
#   INDEXER_Q_ENGINE_CACHE   the engines' extracted wheels (scripts/fetch_engines.sh; default
#                            ~/.cache/indexer_q/engines); when missing, SCRATCH/engines.tar.xz
#                            (from --pack) is unpacked, else fetch_engines.sh is tried
#   EXT_TESTS_DEPS           a folder of the engines' pure-Python runtime dependencies
#                            (pip install --no-deps --target); else SCRATCH/deps.tar.xz if packed
#   OUT                      where the JUnit XML goes (default SCRATCH/_results)
# Exit status: pytest's (1 when any test failed or a test file did not import).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}

if [ "${1:-}" = "--pack" ]; then
  S=${2:?usage: scripts/ext_tests.sh --pack SCRATCH}
  CACHE=${INDEXER_Q_ENGINE_CACHE:-$HOME/.cache/indexer_q/engines}
  tar -C "$CACHE" -cJf "$S/engines.tar.xz" sglang-0.5.23 vllm-0.33.0 || exit 1
  if [ -n "${EXT_TESTS_DEPS:-}" ]; then
    tar -C "$EXT_TESTS_DEPS" -cJf "$S/deps.tar.xz" . || exit 1
  fi
  du -sh "$S"/*.tar.xz
  exit 0
fi

S=$(cd "${1:?usage: scripts/ext_tests.sh SCRATCH [pytest arguments...]}" && pwd) || exit 2
shift
if [ ! -f "$S/conftest.py" ]; then  # the integration call
  cp "$ROOT/scripts/ext_tests_conftest.py" "$S/conftest.py"
fi

CACHE=${INDEXER_Q_ENGINE_CACHE:-$HOME/.cache/indexer_q/engines}
if [ ! -d "$CACHE/sglang-0.5.23" ] || [ ! -d "$CACHE/vllm-0.33.0" ]; then
  if [ -f "$S/engines.tar.xz" ]; then
    CACHE=$S/_engines
    mkdir -p "$CACHE" && tar -C "$CACHE" -xJf "$S/engines.tar.xz"
  elif ! "$ROOT/scripts/fetch_engines.sh" "$CACHE" >/dev/null; then
    echo "ext_tests: the engines could not be fetched; their tests will not import" >&2
  fi
fi
export INDEXER_Q_ENGINE_CACHE=$CACHE
if [ -z "${EXT_TESTS_DEPS:-}" ] && [ -f "$S/deps.tar.xz" ]; then
  EXT_TESTS_DEPS=$S/_deps
  mkdir -p "$EXT_TESTS_DEPS" && tar -C "$EXT_TESTS_DEPS" -xJf "$S/deps.tar.xz"
fi
[ -n "${EXT_TESTS_DEPS:-}" ] && export EXT_TESTS_DEPS

OUT=${OUT:-$S/_results}
mkdir -p "$OUT"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
cd "$S"
# -c /dev/null --rootdir: none of this repository's pytest settings; names relative to SCRATCH
"$PY" -m pytest -c /dev/null --rootdir "$S" -p no:cacheprovider -q -rA \
  --continue-on-collection-errors --junitxml="$OUT/ext_tests.xml" . "$@"
rc=$?
"$PY" - "$OUT/ext_tests.xml" <<'PYEOF'
import collections, sys, xml.etree.ElementTree as ET
counts = collections.OrderedDict()
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    kinds = [child.tag for child in case]
    module = case.get("classname") or ""
    if not module:  # a test file that did not import: its module in "name"
        module, outcome = case.get("name", ""), "not imported"
    elif "failure" in kinds or "error" in kinds:
        outcome = "failed"
    elif "skipped" in kinds:
        outcome = "skipped"
    else:
        outcome = "passed"
    counts.setdefault(module.replace(".", "/") + ".py", collections.Counter())[outcome] += 1
print("ext_tests: file | passed | skipped | failed | not imported")
for name, c in counts.items():
    print(f"  {name} | {c['passed']} | {c['skipped']} | {c['failed']} | {c['not imported']}")
PYEOF
exit $rc
