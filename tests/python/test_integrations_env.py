"""INDEXER_Q_INTEGRATE (docs/INTEGRATIONS.md): set when indexer_q is imported, it routes the named
engines' functions, whether the engine's modules are imported before indexer_q or after; unset,
nothing is routed or watched; an unknown name gives one warning naming the variable and the
accepted values, and no crash. Each case runs in a fresh interpreter (the variable is read at
import), importing the engines' real modules through _engines.py as the other integration tests
do, and compares a routed call's bytes with the direct recipe call."""

import os
import subprocess
import sys
import textwrap

import pytest

import _engines

HERE = os.path.dirname(os.path.abspath(__file__))
import indexer_q  # noqa: E402  (the package under test: the subprocesses import the same one)

# The folder holding the indexer_q this process imported (the installed package in CI, the
# source tree with INDEXER_Q_TORCH_LIBRARY in development), and its operator library.
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(indexer_q.__file__)))
LIBRARY = indexer_q.library_path

# the checks each case's interpreter runs: "first" (indexer_q before the engine, or after it),
# then the engine module functions called on the CPU and compared byte for byte
PRELUDE = """
import sys, warnings
warnings.simplefilter("always")
import torch
import _engines
def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
def sg_call(iq, sg):
    g = torch.Generator().manual_seed(3)
    q = torch.randn((5, 7, 128), generator=g).to(torch.bfloat16)
    w = torch.randn((5, 7), generator=g).to(torch.bfloat16)
    ang = torch.rand((11, 32), generator=g, dtype=torch.float64) * 30
    fc = torch.polar(torch.ones_like(ang), ang).to(torch.complex64)
    pos = torch.randint(0, 11, (5,), generator=g)
    _engines.FakeKernel.launches.clear()
    got = sg.norm_rope.fused_q_indexer_rope_hadamard_quant(q, w, 0.25, fc, pos)
    launched = len(_engines.FakeKernel.launches)
    if launched:
        return "engine"
    want = iq.quant_q("v4_fp8", q, w, 0.25, torch.view_as_real(fc).flatten(-2), pos)
    return "same" if same(got[0], want[0]) and same(got[1], want[1]) else "DIFFERENT"
def vl_call(iq, vl):
    _engines.VFlags.cpu = True
    g = torch.Generator().manual_seed(4)
    q = torch.randn((3, 9, 128), generator=g).to(torch.bfloat16)
    w = torch.randn((3, 9), generator=g).to(torch.bfloat16)
    ang = torch.rand((13, 32), generator=g, dtype=torch.float64) * 30
    cache = torch.cat([ang.cos(), ang.sin()], dim=1).float()
    pos = torch.randint(0, 13, (3,), generator=g)
    f = vl.fused_indexer_q.fused_indexer_q_rope_quant
    if not hasattr(f, "__indexer_q_original__"):
        return "engine"
    got = f(pos, q, cache, w, 0.125, 0.5)
    want = iq.fused_indexer_q_rope_quant(pos, q, cache, w, 0.125, 0.5)
    return "same" if same(got[0], want[0]) and same(got[1], want[1]) else "DIFFERENT"
"""


def run_case(env_value, body):
    env = dict(os.environ)
    env.pop("INDEXER_Q_INTEGRATE", None)
    if env_value is not None:
        env["INDEXER_Q_INTEGRATE"] = env_value
    env["PYTHONPATH"] = os.pathsep.join(
        [PYTHON_DIR, HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    res = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=env,
                         capture_output=True, text=True, cwd=HERE, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    out = dict(line.split("=", 1) for line in res.stdout.split() if "=" in line)
    return out, res.stderr


@pytest.fixture(scope="module", autouse=True)
def engines():
    _engines.engine_root("sglang")  # fetched once here (skips without network, as the others)


def test_indexer_q_first_routes_modules_imported_later():
    out, _ = run_case("sglang", """
        import indexer_q as iq
        from indexer_q.integrations import sglang as r
        assert not any(k.startswith("sglang") for k in sys.modules)  # nothing imported by us
        sg = _engines.load_sglang()
        print("call=" + sg_call(iq, sg))
        pkg = _engines.run_package_init("sglang.kernels.ops.attention.dsv4")
        print("pkg=" + str(hasattr(pkg.compress_norm_rope_store, "__indexer_q_original__")))
        print("routed=" + str(len(set(r.routed().values()))))
        print("fp4q=" + str(hasattr(sg.fp4_quant.quantize_fp4_indexer_tensor,
                                    "__indexer_q_original__")))
    """)
    assert out == {"call": "same", "pkg": "True", "routed": "5", "fp4q": "True"}


def test_engine_first_routed_when_indexer_q_is_imported():
    out, _ = run_case("SGLang", """
        sg = _engines.load_sglang()
        print("before=" + sg_call(__import__("types").SimpleNamespace(), sg))
        import indexer_q as iq
        print("after=" + sg_call(iq, sg))
    """)
    assert out == {"before": "engine", "after": "same"}


def test_all_routes_both_engines_and_uninstall_stops_watching():
    out, _ = run_case("all", """
        import indexer_q as iq
        vl = _engines.load_vllm()
        print("vllm=" + vl_call(iq, vl))
        sg = _engines.load_sglang()
        print("sglang=" + sg_call(iq, sg))
        from indexer_q.integrations import _route, sglang, vllm
        sglang.uninstall(); vllm.uninstall()
        print("watching=" + str(len(_route.watching())))
        print("restored=" + sg_call(iq, sg) + "," + vl_call(iq, vl))
    """)
    assert out == {"vllm": "same", "sglang": "same", "watching": "0",
                   "restored": "engine,engine"}


def test_unset_routes_nothing():
    out, _ = run_case(None, """
        import indexer_q as iq
        sg = _engines.load_sglang()
        vl = _engines.load_vllm()
        print("sglang=" + sg_call(iq, sg) + " vllm=" + vl_call(iq, vl))
        print("integrations=" + str("indexer_q.integrations._env" in sys.modules))
        from indexer_q.integrations import _route
        print("watcher=" + str(_route._WATCHER in sys.meta_path))
    """)
    assert out == {"sglang": "engine", "vllm": "engine", "integrations": "False",
                   "watcher": "False"}


def test_unknown_name_warns_once_and_routes_the_known_ones():
    out, err = run_case("sglang, sglng,bogus", """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import indexer_q as iq
        msgs = [str(w.message) for w in caught if "INDEXER_Q_INTEGRATE" in str(w.message)]
        print("warnings=" + str(len(msgs)))
        for m in msgs:
            print("msg:", m, file=sys.stderr)
        sg = _engines.load_sglang()
        print("sglang=" + sg_call(iq, sg))
    """)
    assert out == {"warnings": "1", "sglang": "same"}, err
    msg = [line for line in err.splitlines() if line.startswith("msg:")][0]
    for word in ("INDEXER_Q_INTEGRATE", "'sglng'", "'bogus'", "sglang", "vllm", "all"):
        assert word in msg, msg
