"""``INDEXER_Q_INTEGRATE``: the engines to route when indexer_q is imported.

``INDEXER_Q_INTEGRATE=sglang``, ``vllm``, ``sglang,vllm`` or ``all`` (comma- or space-separated,
any case; ``none`` or empty: nothing) makes ``import indexer_q`` call each named engine's
``install_on_import()``: its functions of the family are routed at once where the engine is
already imported, and otherwise as soon as the engine imports them, whichever of indexer_q and
the engine is imported first. A name not among those: one warning naming the variable and the
accepted values; the names it accepts are still routed.
"""

from __future__ import annotations

import os
import warnings
from typing import Dict, List, Optional, Tuple

VARIABLE = "INDEXER_Q_INTEGRATE"
ENGINES = ("sglang", "vllm")
ACCEPTED = ENGINES + ("all", "none")


def parse(value: Optional[str]) -> Tuple[List[str], List[str]]:
    """``(engines, unknown)`` from the variable's value: the engines named (in ENGINES order) and
    the names that are not accepted values."""
    engines, unknown = set(), []
    for word in (value or "").replace(",", " ").split():
        w = word.strip().lower()
        if w == "all":
            engines.update(ENGINES)
        elif w in ENGINES:
            engines.add(w)
        elif w != "none":
            unknown.append(word)
    return [e for e in ENGINES if e in engines], unknown


def install_from_environment(environ=None) -> Dict[str, Dict[str, str]]:
    """Routes the engines ``INDEXER_Q_INTEGRATE`` names (``install_on_import()`` of each);
    returns ``{engine: its report}``."""
    value = (os.environ if environ is None else environ).get(VARIABLE, "")
    engines, unknown = parse(value)
    if unknown:
        warnings.warn(
            f"indexer_q: {VARIABLE}={value!r}: {', '.join(repr(u) for u in unknown)} "
            f"{'is' if len(unknown) == 1 else 'are'} not an accepted value (accepted, "
            f"comma-separated: {', '.join(ACCEPTED)}); ignored", RuntimeWarning, stacklevel=3)
    out = {}
    for engine in engines:
        if engine == "sglang":
            from . import sglang as mod
        else:
            from . import vllm as mod
        out[engine] = mod.install_on_import()
    return out
