"""The routing machinery shared by the engine integrations: replace an engine function by a routed
one everywhere the engine holds it, serve the call with indexer_q when the call is a form of the
library, and hand every other call back to the engine's own function (one warning per reason)."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import warnings
from typing import Callable, Dict, List, Optional, Tuple


class Unsupported(Exception):
    """Raised by an adapter before anything is written: the call is not a form indexer_q serves;
    the message says why. The routed function then calls the engine's own function."""


class HandBackWarning(UserWarning):
    """A call of an engine function routed to indexer_q was handed back to the engine's own path."""


_WARNED: set = set()
# (module name, attribute, routed function, original function), for uninstall()
_PATCHED: List[Tuple[str, str, Callable, Callable]] = []


def _warn_once(label: str, reason: str) -> None:
    key = (label, reason)
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(f"indexer_q: {label}: handed back to the engine's own path: {reason}",
                  HandBackWarning, stacklevel=3)


def _routed(label: str, module, original: Callable, adapter: Callable) -> Callable:
    sig = inspect.signature(original)

    @functools.wraps(original)
    def routed(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # the engine's own error for a malformed call
        bound.apply_defaults()
        try:
            return adapter(module, **bound.arguments)
        except Unsupported as e:
            reason = str(e)
        except (TypeError, ValueError, NotImplementedError) as e:
            # the library validates every argument before writing anything
            reason = f"indexer_q refused the call ({e})"
        _warn_once(label, reason)
        return original(*args, **kwargs)

    routed.__indexer_q_original__ = original
    routed.__indexer_q_label__ = label
    return routed


def route(engine_prefixes: Tuple[str, ...], module_name: str, attr: str,
          adapter: Callable) -> Optional[str]:
    """Replaces ``module_name.attr`` by its routed twin in that module and in every loaded module
    of the engine (``engine_prefixes``) that bound the same function object (``from ... import``).
    Returns None when routed, else why not (the module does not import)."""
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the engine, or one of its dependencies, is not installed
        return f"{module_name} does not import ({type(e).__name__}: {e})"
    current = getattr(module, attr, None)
    if current is None:
        return f"{module_name} has no {attr}"
    if getattr(current, "__indexer_q_original__", None) is not None:
        return None  # already routed
    label = f"{module_name}.{attr}"
    new = _routed(label, module, current, adapter)
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(engine_prefixes):
            continue
        for a, v in list(vars(mod).items()):
            if v is current:
                setattr(mod, a, new)
                _PATCHED.append((name, a, new, current))
    return None


def unroute(engine_prefixes: Tuple[str, ...]) -> int:
    """Puts the engine's own functions back (modules of ``engine_prefixes``); returns how many
    bindings were restored."""
    n = 0
    keep = []
    for name, a, new, old in _PATCHED:
        if not name.startswith(engine_prefixes):
            keep.append((name, a, new, old))
            continue
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, a, None) is new:
            setattr(mod, a, old)
            n += 1
    _PATCHED[:] = keep
    return n


def routed_bindings(engine_prefixes: Tuple[str, ...]) -> Dict[str, str]:
    """``{"module.attr": "engine module.function"}`` of every routed binding now in place."""
    return {f"{n}.{a}": new.__indexer_q_label__ for n, a, new, _ in _PATCHED
            if n.startswith(engine_prefixes)}
