"""The integration call, and nothing else: other projects' own tests of the indexer family,
run against indexer_q.

- the engines' Python modules (SGLang 0.5.23, vLLM 0.33.0, from scripts/fetch_engines.sh) go on
  sys.path, with their own package __init__ files (nothing of them is stubbed);
- EXT_TESTS_DEPS, when set, is a folder of the engines' pure-Python runtime dependencies
  (pip install --no-deps --target), put first on sys.path;
- the integration call: indexer_q.integrations.sglang / .vllm install_on_import() (what
  INDEXER_Q_INTEGRATE=all does), and indexer_q.integrations.sgl_kernel_xpu.install() (sgl-kernel-xpu's
  entry points of the family as the module sgl_kernel where no sgl_kernel is installed).
"""

import os
import sys

_CACHE = os.environ.get("INDEXER_Q_ENGINE_CACHE",
                        os.path.join(os.path.expanduser("~"), ".cache", "indexer_q", "engines"))
for _name in ("sglang-0.5.23", "vllm-0.33.0"):
    _root = os.path.join(_CACHE, _name)
    if os.path.isdir(_root) and _root not in sys.path:
        sys.path.append(_root)
_DEPS = os.environ.get("EXT_TESTS_DEPS")
if _DEPS and os.path.isdir(_DEPS) and _DEPS not in sys.path:
    sys.path.insert(0, _DEPS)

import indexer_q.integrations.sgl_kernel_xpu as _iq_sgl_kernel_xpu  # noqa: E402
import indexer_q.integrations.sglang as _iq_sglang  # noqa: E402
import indexer_q.integrations.vllm as _iq_vllm  # noqa: E402

_iq_sglang.install_on_import()
_iq_vllm.install_on_import()
_iq_sgl_kernel_xpu.install()
