#!/usr/bin/env python3
"""Checks what an indexer_q wheel holds and says what it is.

    python3 scripts/check_wheel.py dist/indexer_q-0.1.0-py3-none-linux_x86_64.whl

Fails (exit 1, each problem named) unless:
  - the file name is indexer_q-<version>-py3-none-<platform>.whl (one wheel for every Python 3:
    the extension uses no Python C API) and <version> is the package's __version__ inside it;
  - it holds the package's Python modules, exactly one operator library
    (indexer_q/_indexer_q_ops*.so), the metadata (METADATA with the license, WHEEL, RECORD,
    LICENSE) and nothing else: no torch, no C++ headers, static archives or CMake files;
  - METADATA requires torch and names the version.
Then prints the wheel's contents with sizes and whether its operator library has the CUDA
backend (it links libcudart or libtorch_cuda) or is CPU only.
"""

import re
import sys
import zipfile

MODULES = ("__init__.py", "_glue.py", "_ops.py", "kside.py", "recall.py", "routing.py",
           "triton_dispatch.py", "triton_kernel.py", "triton_selfcheck.py", "integrations/__init__.py",
           "integrations/_env.py", "integrations/_route.py", "integrations/sgl_kernel_xpu.py",
           "integrations/sglang.py", "integrations/vllm.py")


def check(path):
    """(problems, report lines) for the wheel at path."""
    problems, report = [], []
    name = path.rsplit("/", 1)[-1]
    m = re.fullmatch(r"indexer_q-([0-9][^-]*)-py3-none-([A-Za-z0-9_.]+)\.whl", name)
    if not m:
        problems.append(f"file name {name!r}: expected indexer_q-<version>-py3-none-<platform>.whl")
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        dist = [n for n in names if re.match(r"indexer_q-[^/]+\.dist-info/", n)]
        pkg = [n for n in names if n.startswith("indexer_q/")]
        other = [n for n in names if n not in dist and n not in pkg]
        if other:
            problems.append(f"files outside indexer_q/ and its dist-info: {other[:5]}")
        for mod in MODULES:
            if f"indexer_q/{mod}" not in names:
                problems.append(f"missing indexer_q/{mod}")
        libs = [n for n in pkg if re.fullmatch(r"indexer_q/_indexer_q_ops[^/]*\.(so|dylib|dll)", n)]
        if len(libs) != 1:
            problems.append(f"expected one operator library indexer_q/_indexer_q_ops*.so, found {libs}")
        allowed = re.compile(r"indexer_q/((integrations/)?[A-Za-z0-9_]+\.py|_indexer_q_ops[^/]*\.(so|dylib|dll)|"
                             r"triton_selfcheck\.bin|py\.typed)")
        stray = [n for n in pkg if not allowed.fullmatch(n)]
        if stray:
            problems.append(f"unexpected files in the package (headers, archives, torch?): {stray[:8]}")
        if any("torch/" in n or n.endswith((".h", ".a", ".cmake")) for n in names):
            problems.append("holds torch, C++ headers, archives or CMake files")
        meta_name = next((n for n in dist if n.endswith("/METADATA")), None)
        for part in ("METADATA", "WHEEL", "RECORD"):
            if not any(n.endswith("/" + part) for n in dist):
                problems.append(f"dist-info without {part}")
        if not any(re.search(r"/licenses?/LICENSE$|/LICENSE$", n) for n in dist):
            problems.append("dist-info without the LICENSE file")
        version = None
        if meta_name:
            meta = z.read(meta_name).decode()
            vm = re.search(r"^Version: (\S+)$", meta, flags=re.M)
            version = vm.group(1) if vm else None
            if not re.search(r"^Requires-Dist: torch", meta, flags=re.M):
                problems.append("METADATA does not require torch")
            if not re.search(r"^License(-Expression)?: MIT", meta, flags=re.M):
                problems.append("METADATA names no license")
        init = z.read("indexer_q/__init__.py").decode() if "indexer_q/__init__.py" in names else ""
        im = re.search(r'^__version__ = "([^"]+)"', init, flags=re.M)
        if m and (not im or im.group(1) != m.group(1) or version != m.group(1)):
            problems.append(f"version: file name {m.group(1)}, METADATA {version}, "
                            f"__version__ {im.group(1) if im else None}")
        kind = "unknown"
        if len(libs) == 1:
            blob = z.read(libs[0])
            cuda = b"libcudart" in blob or b"libtorch_cuda" in blob
            kind = "CUDA backend (links the CUDA runtime)" if cuda else "CPU only (no CUDA backend)"
        report.append(f"{name}: {kind}")
        for i in infos:
            report.append(f"  {i.file_size:>10}  {i.filename}")
    return problems, report


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rc = 0
    for path in argv[1:]:
        problems, report = check(path)
        print("\n".join(report))
        for p in problems:
            print(f"check_wheel: {path}: {p}", file=sys.stderr)
        rc |= bool(problems)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
