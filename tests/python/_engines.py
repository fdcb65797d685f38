"""Imports the engines' real Python modules (SGLang 0.5.23, vLLM 0.33.0, fetched from PyPI by
scripts/fetch_engines.sh) without their dependencies, for the integration tests.

A package of an engine is loaded without running its ``__init__`` (a module whose ``__path__`` is
the real folder), so importing one module runs only that module and what it imports. What the
tested modules import and this machine lacks is stubbed, and only that: the engines' JIT / kernel
loaders (``FakeKernel`` records each launch instead of compiling), their platform probes (flags the
tests set) and unrelated runtime modules (``Anything``: every attribute a callable, subclassable
placeholder). The modules under test, and the engine code they call, are the engines' own.
"""

import importlib
import importlib.abc
import importlib.util
import os
import subprocess
import sys
import types

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CACHE = os.environ.get("INDEXER_Q_ENGINE_CACHE",
                        os.path.join(os.path.expanduser("~"), ".cache", "indexer_q", "engines"))
_ROOTS = {}


_FAILED = []


def _give_up(msg):
    if os.environ.get("INDEXER_Q_REQUIRE_ENGINES") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def engine_root(name: str) -> str:
    """The extracted engine (fetching it on first use); skips the test when pip cannot fetch it
    (no network) unless INDEXER_Q_REQUIRE_ENGINES=1 (CI), which makes that a failure."""
    if _FAILED:
        _give_up(_FAILED[0])
    if not _ROOTS:
        res = subprocess.run([os.path.join(ROOT, "scripts", "fetch_engines.sh"), _CACHE],
                             capture_output=True, text=True)
        if res.returncode != 0:
            msg = ("the engine wheels could not be fetched from PyPI (scripts/fetch_engines.sh: "
                   + (res.stderr.strip().splitlines() or ["no output"])[-1] + ")")
            _FAILED.append(msg)
            _give_up(msg)
        for line in res.stdout.split():
            k, v = line.split("=", 1)
            _ROOTS[k] = v
    return _ROOTS[name]


# ---- placeholders ---------------------------------------------------------------------------------
class _AnyMeta(type):
    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _any(attr)

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        return super().__call__()

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls


def _any(name):
    def call(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return self
    return _AnyMeta(name, (), {"__call__": call, "__getattr__": lambda self, a: _any(a)
                               if not a.startswith("__") else (_ for _ in ()).throw(
                                   AttributeError(a))})


class Anything(types.ModuleType):
    """A stub module: every attribute is a placeholder class (callable, subclassable, usable as a
    decorator)."""

    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        val = _any(attr)
        setattr(self, attr, val)
        return val


class FakeKernel:
    """Stands for an engine's compiled kernel module: records every launch (name, args)."""

    launches = []

    def __init__(self, name="kernel"):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def launch(*args, **kwargs):
            FakeKernel.launches.append((f"{self._name}.{attr}", args, kwargs))
        return launch

    def __getitem__(self, grid):  # a Triton launch kernel[grid](...)
        def launch(*args, **kwargs):
            FakeKernel.launches.append((self._name, args, kwargs))
        return launch

    def __call__(self, *args, **kwargs):
        FakeKernel.launches.append((self._name, args, kwargs))


def _pkg(root, name):
    """The package ``name`` without running its __init__ (its real folder as __path__)."""
    if name in sys.modules:
        return sys.modules[name]
    m = types.ModuleType(name)
    m.__path__ = [os.path.join(root, *name.split("."))]
    m.__indexer_q_stub_package__ = True
    sys.modules[name] = m
    return m


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__indexer_q_stub__ = True
    for k, v in attrs.items():
        setattr(m, k, v)
    sys.modules[name] = m
    return m


def _anything(name, **attrs):
    m = Anything(name)
    for k, v in attrs.items():
        setattr(m, k, v)
    sys.modules[name] = m
    return m


def _packages(root, dotted):
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        _pkg(root, ".".join(parts[:i]))


def import_real(root, name):
    """Imports the engine's real module ``name`` (its parent packages without their __init__)."""
    if root not in sys.path:
        sys.path.insert(0, root)
    _packages(root, name)
    mod = importlib.import_module(name)
    assert mod.__file__.startswith(root), mod.__file__
    return mod


# ---- SGLang ---------------------------------------------------------------------------------------
class SGFlags:
    hip = False
    xpu = False
    preshuffle = False
    blackwell = False


def load_sglang():
    """SGLang's modules of the family, imported for real; returns a namespace of them."""
    root = engine_root("sglang")
    if root not in sys.path:
        sys.path.insert(0, root)
    for p in ("sglang.kernels.jit", "sglang.srt.layers.attention.dsa",
              "sglang.kernels.ops.quantization", "sglang.kernels.ops.attention.dsv4"):
        _packages(root, p + ".x")
    _anything("sglang.kernels.jit.utils",
            cache_once=lambda f: f,
            is_arch_support_pdl=lambda *a, **k: False,
            load_jit=lambda *a, **k: FakeKernel("jit:" + str(a[0] if a else "")),
            make_cpp_args=lambda *a: ",".join(map(str, a)),
            aligned_new_empty=lambda *a, **k: None)
    _module("sglang.srt.utils", is_hip=lambda: SGFlags.hip, is_xpu=lambda: SGFlags.xpu,
            is_gfx95_supported=lambda: False, is_cuda=lambda: False)
    _module("sglang.srt.layers.attention.dsa.utils", INDEXER_K_CACHE_PRESHUFFLE_TILE=16,
            aiter_can_use_preshuffle_paged_mqa=lambda: SGFlags.preshuffle)
    _module("sglang.srt.runtime_context",
            get_platform=lambda: types.SimpleNamespace(is_blackwell=SGFlags.blackwell))
    ns = types.SimpleNamespace()
    base = "sglang.kernels.ops.attention.dsv4."
    ns.norm_rope = import_real(root, base + "norm_rope")
    ns.compress = import_real(root, base + "compress")
    ns.fp4_indexer_rope = import_real(root, base + "fp4_indexer_rope")
    ns.fp4_quant = import_real(root, "sglang.kernels.ops.quantization.fp4_indexer_quant")
    ns.root = root
    return ns


# ---- vLLM -----------------------------------------------------------------------------------------
class VFlags:
    cutedsl = False
    xpu = False
    cpu = False
    fp8 = torch.float8_e4m3fn


class _Platform:
    def is_xpu(self):
        return VFlags.xpu

    def is_cpu(self):
        return VFlags.cpu

    def is_cuda(self):
        return not (VFlags.xpu or VFlags.cpu)

    def is_rocm(self):
        return VFlags.fp8 == torch.float8_e4m3fnuz

    def fp8_dtype(self):
        return VFlags.fp8

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return lambda *a, **k: False


# modules sparse_attn_indexer.py imports that are vLLM's runtime, not this op family
_VLLM_RUNTIME = (
    "vllm.envs", "vllm._custom_ops", "vllm._aiter_ops", "vllm.compilation.breakable_cudagraph",
    "vllm.config", "vllm.distributed", "vllm.forward_context", "vllm.logger",
    "vllm.model_executor.custom_op", "vllm.model_executor.kernels.attention.dsa.candidate_blocks",
    "vllm.model_executor.layers.indexer_topk",
    "vllm.model_executor.layers.quantization.utils.quant_utils", "vllm.utils.deep_gemm",
    "vllm.utils.torch_utils", "vllm.v1.attention.backends.mla.indexer",
    "vllm.v1.attention.ops.common", "vllm.v1.attention.ops.pcp", "vllm.v1.worker.workspace",
    "vllm.model_executor.warmup.jit_warmup",
    "vllm.transformers_utils.deepseek_v4_utils",  # imported by the V4 ops package's cache_utils
    # what cpu_sparse.py imports besides its CPU kernel wrapper: the model and attention backends
    "vllm.model_executor.utils", "vllm.models.deepseek_v4.attention",
    "vllm.models.deepseek_v4.cpu.cpu_compressor", "vllm.models.deepseek_v4.cpu.cpu_mla",
    "vllm.models.deepseek_v4.cpu.cpu_utils", "vllm.models.deepseek_v4.sparse_mla",
    "vllm.v1.attention.backend", "vllm.v1.attention.backends.mla.sparse_swa",
)


def load_vllm():
    """vLLM's modules of the family, imported for real; returns a namespace of them."""
    root = engine_root("vllm")
    if root not in sys.path:
        sys.path.insert(0, root)
    for name in _VLLM_RUNTIME:
        _packages(root, name)
        if name not in sys.modules:
            sys.modules[name] = Anything(name)
    _packages(root, "vllm.platforms.x")
    _module("vllm.platforms", current_platform=_Platform())
    import triton
    import triton.language as tl
    _packages(root, "vllm.triton_utils")
    _module("vllm.triton_utils", triton=triton, tl=tl, HAS_TRITON=True)
    _packages(root, "vllm.utils.import_utils")
    _module("vllm.utils.import_utils", has_cutedsl=lambda: VFlags.cutedsl)
    ns = types.SimpleNamespace()
    ns.fused_indexer_q = import_real(root, "vllm.models.deepseek_v4.common.ops.fused_indexer_q")
    ns.sparse_attn_indexer = import_real(root, "vllm.model_executor.layers.sparse_attn_indexer")
    ns.cpu_sparse = import_real(root, "vllm.models.deepseek_v4.cpu.cpu_sparse")
    _packages(root, "vllm.models.deepseek_v41.common.ops.x")
    ns.root = root
    return ns


def run_package_init(name):
    """Runs the real ``__init__.py`` of the engine package ``name`` (loaded without it so far), as
    a later import of the package would: its ``from .x import f`` re-exports bind then."""
    pkg = sys.modules[name]
    path = os.path.join(pkg.__path__[0], "__init__.py")
    pkg.__package__ = name
    pkg.__file__ = path
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), pkg.__dict__)
    return pkg
