"""The routing table (python/indexer_q/routing.py): one table device -> implementation for every op,
used by the registration and by available_backends(); no import cycle, no private torch call."""

import ast
import os

import pytest
import torch

import indexer_q
from indexer_q import routing, triton_dispatch

PKG = os.path.dirname(os.path.abspath(indexer_q.__file__))
QUERY_OPS = ("quant_q", "fused_q_indexer_rope_hadamard_quant")


def _has(op, key):
    # test-only oracle: the dispatcher's own answer, to check the table against
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"indexer_q::{op}", key))


def test_table_covers_every_op_and_device():
    rows = routing.table()
    want = {(o, d) for o in routing.OPS for d in routing.DEVICES}
    assert {(r.op, r.device) for r in rows} == want
    assert set(routing.OPS) == {"quant_q", "fused_q_indexer_rope_hadamard_quant", "kside_store"}
    for r in rows:
        assert r.impl in routing.IMPLEMENTATIONS and r.why, r
    for op in routing.OPS:
        assert routing.route(op, "cpu").impl == "native"
        assert routing.route(op, "mps").device == "other"
        assert routing.route(op, "mps").impl == "composed"


def test_native_devices_is_the_extensions_report():
    native = routing.native_devices()
    bits = torch.ops.indexer_q.native_devices()
    assert native == frozenset(n for b, n in ((1, "cpu"), (2, "cuda")) if bits & b)
    assert "cpu" in native
    assert "cpu" in native
    assert native <= {"cpu", "cuda"}


def test_table_agrees_with_the_dispatcher():
    """Every native entry has the extension's kernel for its key; every triton entry has the
    Python kernel registered from the table; a composed entry of a device without a native kernel
    of the query side has none of ours for its key (the CompositeExplicitAutograd fallback runs)."""
    for (op, dev), r in routing.ROUTES.items():
        if dev == "other":
            continue
        key = routing._KEYS[dev]
        if r.impl in ("native", "triton"):
            assert _has(op, key), (op, dev, r)
        if r.impl == "triton":
            assert (op, key) in triton_dispatch._registered
        if r.impl == "native":
            assert (op, key) not in triton_dispatch._registered
    # CompositeExplicitAutograd (the composed path) is every op's fallback
    for op in routing.OPS:
        assert _has(op, "CompositeExplicitAutograd"), op
    # the query ops route alike; the key side never to Triton
    for dev in routing.DEVICES:
        a, b = routing.ROUTES[(QUERY_OPS[0], dev)], routing.ROUTES[(QUERY_OPS[1], dev)]
        assert a.impl == b.impl, dev
        assert routing.ROUTES[("kside_store", dev)].impl in ("native", "composed")


def test_cuda_and_xpu_route_by_build():
    cuda_native = "cuda" in routing.native_devices()
    for op in routing.OPS:
        assert routing.ROUTES[(op, "cuda")].impl == ("native" if cuda_native else (
            "triton" if op in QUERY_OPS else "composed"))
        assert routing.ROUTES[(op, "xpu")].impl == ("triton" if op in QUERY_OPS else "composed")
    # the key side without a native kernel: the composed path on CUDA (a ROCm build) as on XPU
    assert routing.ROUTES[("kside_store", "xpu")].why.endswith("the key side has no Triton kernel")


def test_available_backends_is_the_table():
    for op in (None,) + routing.OPS:
        got = indexer_q.available_backends(op)
        assert set(got) == set(routing.DEVICES)
        for dev, impl in got.items():
            assert impl == routing.route(op or "quant_q", dev).impl
    assert indexer_q.available_backends()["cpu"] == "native"
    with pytest.raises(ValueError, match="op: expected one of"):
        indexer_q.available_backends("no_such_op")


def test_triton_entries_resolve_live(monkeypatch):
    monkeypatch.setenv("INDEXER_Q_TRITON", "0")
    r = routing.route("quant_q", "xpu")
    assert r.impl == "composed" and "INDEXER_Q_TRITON=0" in r.why
    assert indexer_q.available_backends()["xpu"] == "composed"
    assert routing.route("kside_store", "xpu").impl == "composed"
    monkeypatch.delenv("INDEXER_Q_TRITON")
    r = routing.route("quant_q", "xpu")
    assert r.impl == ("triton" if triton_dispatch.why_not("xpu") is None else "composed")


def _imports(path):
    """The package-relative modules a file imports, at any depth (function bodies included)."""
    tree = ast.parse(open(path).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return out


def test_no_import_cycle_in_the_package():
    mods = {f[:-3] for f in os.listdir(PKG) if f.endswith(".py")}
    graph = {m: _imports(os.path.join(PKG, m + ".py")) & mods for m in mods}
    graph.pop("__init__", None)
    seen, stack = set(), []

    def visit(m):
        assert m not in stack, f"import cycle: {' -> '.join(stack + [m])}"
        if m in seen:
            return
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            visit(n)
        stack.pop()
        seen.add(m)

    for m in sorted(graph):
        visit(m)
    assert "triton_dispatch" not in graph["_ops"] and "routing" not in graph["_ops"]


def test_no_private_torch_call_in_the_package():
    for f in sorted(os.listdir(PKG)):
        if f.endswith(".py"):
            src = open(os.path.join(PKG, f)).read()
            assert "torch._C" not in src, f


def test_format_table():
    lines = routing.format_table().splitlines()
    assert len(lines) == len(routing.OPS) * len(routing.DEVICES)
    assert any(ln.split()[:3] == ["kside_store", "cpu", "native"] for ln in lines)


def test_triton_serves_is_worked_out_once_per_device_type():
    # auto_quant_q asks at every call: the answer for a GPU device type is kept (Triton's
    # install does not change in a process); the CPU's (the interpreter) is asked each time
    from indexer_q import triton_dispatch

    first = triton_dispatch.triton_serves("xpu")
    assert triton_dispatch._SERVES["xpu"] == first
    assert triton_dispatch.triton_serves("xpu") == first
    triton_dispatch.triton_serves("cpu")
    assert "cpu" not in triton_dispatch._SERVES
