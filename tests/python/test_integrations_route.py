"""The routed function's binding (indexer_q.integrations._route._binder) gives, for every call
shape, what ``inspect.Signature.bind`` + ``apply_defaults`` give: the same arguments by name, or a
TypeError for the same malformed calls (which the routed function hands to the engine's own
function, for the engine's own error)."""

import inspect
import itertools

import pytest
import torch

from indexer_q.integrations import _route


def plain(a, b, c=3, d=None, *, e=torch.float32, f=False):
    pass


def positional_only(a, b=2, /, c=3):
    pass


def variadic(a, *args, b=1, **kw):
    pass


CALLS = [
    ((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((1, 2, 3, 4), {}), ((1, 2, 3, 4, 5), {}),
    ((1,), {"b": 2}), ((), {"a": 1, "b": 2}), ((1, 2), {"e": 5}), ((1, 2), {"f": True, "d": 0}),
    ((1, 2), {"a": 1}), ((1, 2), {"g": 1}), ((), {"b": 2, "c": 1}), ((1, 2), {"c": 9, "e": 1}),
    ((1, 2, 3), {"c": 4}), ((), {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}),
    ((1, 2, 3, 4), {"e": 1, "z": 2}),
]


def reference(sig, args, kwargs):
    try:
        b = sig.bind(*args, **kwargs)
    except TypeError:
        return TypeError
    b.apply_defaults()
    return dict(b.arguments)


@pytest.mark.parametrize("fn", [plain, positional_only, variadic])
def test_binder_matches_inspect(fn):
    sig = inspect.signature(fn)
    bind = _route._binder(sig)
    for args, kwargs in CALLS:
        want = reference(sig, args, kwargs)
        try:
            got = bind(args, dict(kwargs))
        except TypeError:
            got = TypeError
        assert got == want, (fn.__name__, args, kwargs)


def test_binder_default_values_are_the_signature_objects():
    bound = _route._binder(inspect.signature(plain))((1, 2), {})
    assert bound["e"] is torch.float32 and bound["d"] is None and list(bound) == list("abcdef")


def test_routed_malformed_call_gets_the_engines_error():
    def engine(x, y=1):
        return ("engine", x, y)
    routed = _route._routed("t.engine", None, engine, lambda module, x, y: ("routed", x, y))
    assert routed(1) == ("routed", 1, 1) and routed(x=2, y=3) == ("routed", 2, 3)
    with pytest.raises(TypeError):
        routed(1, 2, 3)
    with pytest.raises(TypeError):
        routed(1, z=2)


def test_routed_positional_calls_get_the_bound_values():
    # a call of positional arguments only takes the precomputed defaults (no bind call): the
    # adapter gets what bind gives, for every count the signature binds, the engine's own error
    # for the others
    seen = []

    def adapter(module, a, b, c=3, d=None, *, e=torch.float32, f=False):
        seen.append((a, b, c, d, e, f))
        return "routed"

    def engine(*args, **kwargs):
        return "engine"
    engine.__signature__ = inspect.signature(plain)
    routed = _route._routed("t.plain", None, engine, adapter)
    sig = inspect.signature(plain)
    for args, kwargs in CALLS:
        seen.clear()
        got = routed(*args, **kwargs)
        want = reference(sig, args, kwargs)
        if want is TypeError:
            assert got == "engine" and not seen, (args, kwargs)
        else:
            assert got == "routed" and seen == [tuple(want.values())], (args, kwargs)
    assert _route._positional_fills(sig) == {2: (3, None, torch.float32, False),
                                             3: (None, torch.float32, False),
                                             4: (torch.float32, False)}

    def kw_required(a, *, b):
        pass
    assert _route._positional_fills(inspect.signature(kw_required)) == {}
