"""The routing machinery shared by the engine integrations: replace an engine function by a routed
one everywhere the engine holds it, serve the call with indexer_q when the call is a form of the
library, and hand every other call back to the engine's own function (one warning per reason)."""

from __future__ import annotations

import functools
import importlib
import inspect
import keyword
import sys
import types
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


_MISSING = object()


def module_attr(module, name: str, default=None):
    """``getattr(module, name, default)``, what the adapters read of the engine module on every
    call (its platform flags), without the AttributeError an absent name costs getattr: for a
    plain module (no module ``__getattr__``) its ``__dict__`` answers; anything else goes to
    getattr."""
    d = getattr(module, "__dict__", None)
    if d is not None:
        v = d.get(name, _MISSING)
        if v is not _MISSING:
            return v
        if type(module) is types.ModuleType and "__getattr__" not in d:
            return default
    return getattr(module, name, default)


def _binder(sig: inspect.Signature) -> Callable:
    """``bind(args, kwargs)``: the call's arguments by name, defaults applied, as
    ``sig.bind(*args, **kwargs)`` + ``apply_defaults()`` give them (TypeError for a malformed
    call). Any signature binds through inspect (the slow path: the routed call of a signature that
    is not plain, see :func:`_plain_binder`)."""
    def bind_slow(args, kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments
    return bind_slow


def _plain_binder(sig: inspect.Signature) -> Optional[Tuple[Callable, Tuple[str, ...]]]:
    """For a signature of plain parameters (positional-or-keyword and keyword-only, the engines'
    form): ``(bind, names)``, ``bind(*args, **kwargs)`` returning the values of every parameter
    in order, defaults applied (TypeError for a malformed call), made once as a function of the
    same parameters: Python's own argument binding, no dict built per call. None for any other
    signature."""
    params = list(sig.parameters.values())
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if not all(p.kind in kinds and p.name.isidentifier() and not keyword.iskeyword(p.name)
               for p in params):
        return None
    names = tuple(p.name for p in params)
    env = {}
    decl = []
    star = False
    for i, p in enumerate(params):
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            decl.append("*")
            star = True
        if p.default is p.empty:
            decl.append(p.name)
        else:
            env[f"_d{i}"] = p.default
            decl.append(f"{p.name}=_d{i}")
    body = ", ".join(names) + ("," if len(names) == 1 else "")
    src = f"def bind({', '.join(decl)}):\n    return ({body})\n"
    exec(compile(src, "<indexer_q routed binder>", "exec"), env)  # noqa: S102 (our own text)
    return env["bind"], names


def _positional_fills(sig: inspect.Signature) -> Dict[int, tuple]:
    """For a plain signature (:func:`_plain_binder`): ``{k: the defaults of the parameters after
    the first k}`` for every k a call of k positional arguments and no keyword binds (from the
    required count to the positional count), so that such a call's values are ``args +
    fills[k]``, what ``bind`` returns for it, without calling it. Empty when a keyword-only
    parameter has no default (no positional call binds)."""
    params = list(sig.parameters.values())
    pos = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    kwonly = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if any(p.default is p.empty for p in kwonly):
        return {}
    required = sum(1 for p in pos if p.default is p.empty)
    tail = tuple(p.default for p in kwonly)
    return {k: tuple(p.default for p in pos[k:]) + tail for k in range(required, len(pos) + 1)}


def _positional(adapter: Callable, names: Tuple[str, ...]) -> bool:
    """Whether ``adapter(module, *values)`` binds every value to the parameter of its name: the
    adapter's parameters after the module are exactly ``names``, in order, none keyword-only."""
    try:
        params = list(inspect.signature(adapter).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    return (tuple(p.name for p in params) == names
            and all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params))


def _routed(label: str, module, original: Callable, adapter: Callable) -> Callable:
    sig = inspect.signature(original)
    plain = _plain_binder(sig)
    if plain is not None and _positional(adapter, plain[1]):
        # the engine's plain signature, the adapter's parameters the same: the call's values
        # go to the adapter positionally (no dict, no keywords)
        bind_values = plain[0]
        # a call of positional arguments only (the engines' call sites): its values without
        # calling bind (one Python call less)
        fills_get = _positional_fills(sig).get

        @functools.wraps(original)
        def routed(*args, **kwargs):
            fill = None if kwargs else fills_get(len(args))
            if fill is not None:
                values = args + fill
            else:
                try:
                    values = bind_values(*args, **kwargs)
                except TypeError:
                    return original(*args, **kwargs)  # the engine's own error for a malformed call
            try:
                return adapter(module, *values)
            except Unsupported as e:
                reason = str(e)
            except (TypeError, ValueError, NotImplementedError) as e:
                # the library validates every argument before writing anything
                reason = f"indexer_q refused the call ({e})"
            _warn_once(label, reason)
            return original(*args, **kwargs)
    else:
        if plain is not None:
            bind_values, names = plain

            def bind(args, kwargs):
                return dict(zip(names, bind_values(*args, **kwargs)))
        else:
            bind = _binder(sig)

        @functools.wraps(original)
        def routed(*args, **kwargs):
            try:
                arguments = bind(args, kwargs)
            except TypeError:
                return original(*args, **kwargs)  # the engine's own error for a malformed call
            try:
                return adapter(module, **arguments)
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


# ---- routing on import (INDEXER_Q_INTEGRATE) -----------------------------------------------------
class _RoutingLoader:
    """Wraps the loader of a watched engine module: runs the module as its own loader would, then
    routes the module's targets (before any other module can bind them by name)."""

    def __init__(self, loader, name: str):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _route_watched(self._name)

    def __getattr__(self, attr):  # get_source, is_package, get_resource_reader, ...
        return getattr(self._loader, attr)


class _Watcher:
    """A finder at the front of ``sys.meta_path`` that finds nothing itself: for a watched engine
    module it takes the spec the other finders give and wraps its loader (:class:`_RoutingLoader`).
    Every other import costs one dictionary lookup."""

    def find_spec(self, name, path, target=None):
        if name not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RoutingLoader(spec.loader, name)
        return spec

    def invalidate_caches(self):
        pass


# module name -> [(engine prefixes, attr, adapter)] routed when the module is imported
_WATCHED: Dict[str, List[Tuple[Tuple[str, ...], str, Callable]]] = {}
_WATCHER = _Watcher()


def _route_watched(name: str) -> None:
    for prefixes, attr, adapter in _WATCHED.get(name, ()):
        try:
            why = route(prefixes, name, attr, adapter)
        except Exception as e:  # never break the engine's import
            why = f"{type(e).__name__}: {e}"
        if why is not None:
            warnings.warn(f"indexer_q: {name}.{attr}: not routed on import: {why}",
                          RuntimeWarning, stacklevel=2)


def route_on_import(engine_prefixes: Tuple[str, ...],
                    targets: Tuple[Tuple[str, str, Callable], ...]) -> Dict[str, str]:
    """Routes each target ``(module, attr, adapter)`` whose module is loaded now (as
    :func:`route`), and watches the others: when the engine imports one later, it is routed as
    soon as it has run, so the engine modules that import its functions by name afterwards bind
    the routed ones. Imports nothing itself. Returns ``{"module.attr": "routed" | "on import"}``.
    """
    out = {}
    for m, a, fn in targets:
        mod = sys.modules.get(m)
        if mod is not None and getattr(mod, a, None) is not None:
            why = route(engine_prefixes, m, a, fn)
            out[f"{m}.{a}"] = "routed" if why is None else why
        else:
            out[f"{m}.{a}"] = "on import"
        entry = (engine_prefixes, a, fn)
        watched = _WATCHED.setdefault(m, [])
        if entry not in watched:
            watched.append(entry)  # also routes the module again if it is reloaded
    if _WATCHED and _WATCHER not in sys.meta_path:
        sys.meta_path.insert(0, _WATCHER)
    return out


def unwatch(engine_prefixes: Tuple[str, ...]) -> None:
    """Stops routing ``engine_prefixes`` modules on import (:func:`route_on_import`)."""
    for m in list(_WATCHED):
        _WATCHED[m] = [e for e in _WATCHED[m] if e[0] != engine_prefixes]
        if not _WATCHED[m]:
            del _WATCHED[m]
    if not _WATCHED and _WATCHER in sys.meta_path:
        sys.meta_path.remove(_WATCHER)


def watching() -> Tuple[str, ...]:
    """The engine modules routed when imported."""
    return tuple(sorted(_WATCHED))


def engine_entry_points(engine_prefixes: Tuple[str, ...], targets, name: str):
    """The four public functions of an engine's integration module (``install``,
    ``install_on_import``, ``uninstall``, ``routed``) over its ``targets`` ((module, function,
    replacement) triples); ``name`` is the engine's name in their docstrings."""

    def install() -> Dict[str, Optional[str]]:
        return {f"{m}.{a}": route(engine_prefixes, m, a, fn) for m, a, fn in targets}

    def install_on_import() -> Dict[str, str]:
        return route_on_import(engine_prefixes, targets)

    def uninstall() -> int:
        unwatch(engine_prefixes)
        return unroute(engine_prefixes)

    def routed() -> Dict[str, str]:
        return routed_bindings(engine_prefixes)

    install.__doc__ = (
        f"Routes {name}'s functions (TARGETS) to indexer_q, in the defining modules and in every "
        f"loaded {name} module that imported them by name; modules imported later get the routed "
        'functions from the defining modules. Returns {"module.function": None} for each routed '
        "function, or the reason it is not routed (its module does not import). Idempotent.")
    install_on_import.__doc__ = (
        "What INDEXER_Q_INTEGRATE does when indexer_q is imported: routes the functions of "
        "TARGETS whose modules are loaded now (as install) and, without importing anything, each "
        f'other one as soon as {name} imports its module. Returns {{"module.function": "routed" | '
        '"on import"} (or why it is not routed).')
    uninstall.__doc__ = (f"Restores {name}'s own functions (and stops routing its modules on "
                         "import); returns how many bindings were restored.")
    routed.__doc__ = 'Every binding now routed: {"module.attr": "defining module.function"}.'
    return install, install_on_import, uninstall, routed
