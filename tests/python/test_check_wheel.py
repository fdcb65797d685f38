"""scripts/check_wheel.py on synthetic wheels: a well-formed one passes and is classified; each
kind of stray or missing content is named. (The real wheel is checked by scripts/test.sh, which
builds it, checks it and installs it.)"""

import importlib.util
import os
import zipfile

import pytest

import indexer_q

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "check_wheel", os.path.join(ROOT, "scripts", "check_wheel.py"))
check_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_wheel)

V = indexer_q.__version__


def make(tmp_path, name=None, extra=(), drop=(), lib=b"\x7fELF ... libc.so.6 ...", meta=None):
    name = name or f"indexer_q-{V}-py3-none-linux_x86_64.whl"
    files = {f"indexer_q/{m}": "" for m in check_wheel.MODULES}
    files["indexer_q/__init__.py"] = f'__version__ = "{V}"\n'
    files["indexer_q/_indexer_q_ops.so"] = lib
    files["indexer_q/triton_selfcheck.bin"] = b"\0"
    di = f"indexer_q-{V}.dist-info"
    files[f"{di}/METADATA"] = meta if meta is not None else (
        f"Metadata-Version: 2.4\nName: indexer_q\nVersion: {V}\nLicense-Expression: MIT\n"
        "Requires-Dist: torch>=2.11\n")
    files[f"{di}/WHEEL"] = "Wheel-Version: 1.0\n"
    files[f"{di}/RECORD"] = ""
    files[f"{di}/licenses/LICENSE"] = "MIT License\n"
    for k in drop:
        del files[k]
    files.update(dict(extra))
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return str(path)


def test_a_good_wheel_passes(tmp_path):
    problems, report = check_wheel.check(make(tmp_path))
    assert problems == []
    assert "CPU only" in report[0]
    problems, report = check_wheel.check(
        make(tmp_path, lib=b"\x7fELF ... libcudart.so.13 ... libtorch_cuda.so ..."))
    assert problems == [] and "CUDA backend" in report[0]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(extra={"torch/__init__.py": ""}), "outside indexer_q/"),
    (dict(extra={"indexer_q/include/indexer_q/indexer_q.h": ""}), "unexpected files"),
    (dict(extra={"indexer_q/libindexer_q.a": ""}), "unexpected files"),
    (dict(drop=["indexer_q/_indexer_q_ops.so"]), "one operator library"),
    (dict(drop=["indexer_q/kside.py"]), "missing indexer_q/kside.py"),
    (dict(name=f"indexer_q-{V}-cp311-cp311-linux_x86_64.whl"), "file name"),
    (dict(name="indexer_q-9.9.9-py3-none-linux_x86_64.whl"), "version"),
    (dict(meta=f"Name: indexer_q\nVersion: {V}\nLicense-Expression: MIT\n"), "require torch"),
])
def test_problems_are_named(tmp_path, kwargs, needle):
    problems, _ = check_wheel.check(make(tmp_path, **kwargs))
    assert any(needle in p for p in problems), problems
