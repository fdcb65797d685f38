"""Route the inference engines' own call sites of the indexer query / key op family to indexer_q.

``indexer_q.integrations.sglang.install()`` and ``indexer_q.integrations.vllm.install()`` replace
the engines' functions (SGLang 0.5.23, vLLM 0.33.0; the list in docs/INTEGRATIONS.md) by routed
twins with the engines' exact signatures, argument conversions and return types. A call that is
not a form of the library is handed back to the engine's own function, with one
``HandBackWarning`` per reason. ``uninstall()`` restores the engine's functions.
``INDEXER_Q_INTEGRATE=sglang,vllm`` (or ``all``) in the environment does the same when indexer_q
is imported, for the engine's modules imported before or after it (``install_on_import()``).
``indexer_q.integrations.sgl_kernel_xpu`` has sgl-kernel-xpu's entry points of the family with its
signatures.
"""

from ._route import HandBackWarning, Unsupported  # noqa: F401

__all__ = ["HandBackWarning", "Unsupported"]
