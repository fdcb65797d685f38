"""The documentation's examples, executed: every ```python block of README.md and docs/*.md.

The blocks of one page run in order, in one namespace (a page is read top to bottom: a later
example may use what an earlier one defined), on the CPU. Conventions of the pages:
  - a block whose lines start with ``>>>`` is a doctest: its printed output must match;
  - a ```output block right after a ```python block (blank lines and one line of prose between
    them allowed) is that block's expected standard output, compared exactly;
  - ``<!-- docs-test: skip (reason) -->`` on the line before a fence leaves that block out; the
    reason is required (e.g. code that shows another project's call, or needs a GPU).
Besides: every console command ``$ scripts/...`` names an executable script, every relative
link of README.md and docs/*.md resolves to a file inside the repository, and the version is one
number everywhere (python/indexer_q/__init__.py, CMakeLists.txt, CHANGELOG.md).
"""

import contextlib
import doctest
import glob
import io
import os
import re
import textwrap
import warnings

import pytest

import indexer_q

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ["README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((.+)\)\s*-->")


def blocks(page):
    """[(line, info, code, skip_reason)] of a page's fenced blocks, dedented."""
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:  # the loop below consumes each block's closing fence
            i += 1
            continue
        start, info, body = i + 1, m.group(2), []  # start: the opening fence's 1-based line
        i += 1
        while i < len(lines) and not _FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        prev = lines[start - 2] if start >= 2 else ""
        skip = _SKIP.search(prev)
        out.append((start, info, textwrap.dedent("\n".join(body)) + "\n",
                    skip.group(1) if skip else None))
        i += 1
    return out


def python_examples(page):
    """[(line, code, expected_output or None, skip_reason)] of a page's python blocks."""
    bs = blocks(page)
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().splitlines()
    out = []
    for k, (line, info, code, skip) in enumerate(bs):
        if info != "python":
            continue
        expected = None
        if k + 1 < len(bs) and bs[k + 1][1] == "output":
            close = line + code.count("\n")  # 0-based index of the closing fence
            between = [l for l in lines[close + 1:bs[k + 1][0] - 1] if l.strip()]
            if len(between) <= 1:
                expected = bs[k + 1][2]
        out.append((line, code, expected, skip))
    return out


PAGES_WITH_PYTHON = [p for p in PAGES if python_examples(p)]


def test_the_pages_have_examples():
    # the README's Python section and docs/TORCH.md at least: a parser that finds nothing
    # would make the test below pass vacuously
    assert "README.md" in PAGES_WITH_PYTHON and "docs/TORCH.md" in PAGES_WITH_PYTHON
    n = sum(len(python_examples(p)) for p in PAGES)
    assert n >= 10, n


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON)
def test_python_examples_run(page):
    ns = {"__name__": "__docs__"}
    ran = 0
    for line, code, expected, skip in python_examples(page):
        where = f"{page}:{line}"
        if skip:
            continue
        if code.lstrip().startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, ns, where, page, line)
            runner = doctest.DocTestRunner(
                optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
            out = io.StringIO()
            runner.run(test, out=out.write)
            assert runner.failures == 0, f"{where}: doctest failed\n{out.getvalue()}"
            ns.update(test.globs)
        else:
            buf = io.StringIO()
            try:
                with contextlib.redirect_stdout(buf), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # e.g. the bf16 -> float8 casts' notices
                    exec(compile(code, where, "exec"), ns)
            except Exception as e:  # name the block, not this file
                raise AssertionError(f"{where}: the example raised {type(e).__name__}: {e}") from e
            if expected is not None:
                assert buf.getvalue() == expected, (
                    f"{where}: printed\n{buf.getvalue()}\nthe page says\n{expected}")
        ran += 1
    assert ran > 0


@pytest.mark.parametrize("page", PAGES)
def test_skips_give_a_reason(page):
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    for m in re.finditer(r"<!--\s*docs-test:.*?-->", text):
        assert _SKIP.search(m.group(0)), f"{page}: malformed marker {m.group(0)!r}"


@pytest.mark.parametrize("page", PAGES)
def test_console_scripts_exist(page):
    for line, info, code, _ in blocks(page):
        if info not in ("console", "sh", "bash", "shell"):
            continue
        for cmd in re.findall(r"^\$ (\S+)", code, flags=re.M):
            if cmd.startswith("scripts/"):
                path = os.path.join(ROOT, cmd)
                assert os.path.isfile(path) and os.access(path, os.X_OK), f"{page}:{line}: {cmd}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES)
def test_links_stay_in_the_repository(page):
    base = os.path.dirname(os.path.join(ROOT, page))
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    for target in _LINK.findall(text):
        assert "://" not in target, f"{page}: link out of the repository: {target}"
        path = target.split("#", 1)[0]
        if not path:
            continue
        full = os.path.normpath(os.path.join(base, path))
        assert full.startswith(ROOT + os.sep), f"{page}: link out of the repository: {target}"
        assert os.path.exists(full), f"{page}: broken link {target}"


def test_one_version_everywhere():
    cmake = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r"project\(indexer_q VERSION ([0-9.]+)", cmake)
    assert m and m.group(1) == indexer_q.__version__, (m and m.group(1), indexer_q.__version__)
    log = open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8").read()
    assert f"## {indexer_q.__version__}" in log


def test_cpu_only_build_under_cuda_torch_warns():
    msg = indexer_q._cuda_backend_warning("13.0", True)
    assert "without its CUDA backend" in msg and "13.0" in msg and "--no-build-isolation" in msg
    assert indexer_q._cuda_backend_warning("13.0", False) is None  # a CUDA build: native kernel
    assert indexer_q._cuda_backend_warning(None, True) is None  # a CPU torch: nothing to say


# ---- C++ snippets: compiled (syntax and API) against include/, each in its own function ----
_CPP_PRELUDE = """
  const int64_t B = 2, H = 4, N = 3, max_pos = 16, pages = 1, num_pages = 1, page_size = 64;
  const int64_t w_row_stride = 4;
  const float weight_scale = 0.088f;
  static uint16_t q[2 * 4 * 128], w[2 * 4];
  static uint8_t q_fp8[2 * 4 * 128], q_fp4[2 * 4 * 64], cache[132 * 64];
  static int32_t q_sf[2 * 4];
  static float w_out[2 * 4], freqs[16 * 64], k[3 * 128], norm_w[128];
  static int64_t pos[3], slots[3];
"""


def _cxx():
    import shutil
    return shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")


@pytest.mark.skipif(not _cxx(), reason="no C++ compiler")
def test_cpp_snippets_compile(tmp_path):
    import subprocess

    head, bodies = ["#include <cstdint>", "#include <cstdio>"], []
    for page in PAGES:
        for line, info, code, skip in blocks(page):
            if info != "cpp" or skip:
                continue
            body = []
            for i, l in enumerate(code.splitlines()):
                if l.startswith(("#include", "using namespace")):
                    head.append(l)
                else:  # errors point at the page's own line
                    body.append(f'#line {line + 1 + i} "{page}"\n{l}')
            bodies.append(f"// {page}:{line}\nvoid example_{len(bodies)}() {{{_CPP_PRELUDE}"
                          + "\n".join(body) + "\n}\n")
    assert len(bodies) >= 4, len(bodies)  # docs/API.md and docs/KSIDE.md hold some
    src = tmp_path / "snippets.cpp"
    src.write_text("\n".join(dict.fromkeys(head)) + "\n" + "\n".join(bodies))
    r = subprocess.run([_cxx(), "-std=c++17", "-fsyntax-only", "-I", os.path.join(ROOT, "include"),
                        str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
