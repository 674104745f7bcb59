"""An attribute in the ``__slots__`` of a user's subclass of Value, read by
a compiled function, is guarded like one in its ``__dict__`` (probe9 B/2)."""

import warnings

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning


class Param(Value):
    """A parameter carrying a setting in a slot (Value uses __slots__)."""

    __slots__ = ("scale",)

    def __init__(self, data: float, scale: float = 1.0) -> None:
        super().__init__(data)
        self.scale = scale


class DictParam(Param):
    """Slots and a __dict__ both: ``scale`` in the slot, ``shift`` in the dict."""

    def __init__(self, data: float, scale: float = 1.0, shift: float = 0.0) -> None:
        super().__init__(data, scale)
        self.shift = shift


class Unset(Value):
    """A slot never set until the user sets it."""

    __slots__ = ("scale",)


def test_slot_of_a_global_value_is_guarded() -> None:
    p = Param(1.0, scale=2.0)
    fast = chainrule.compile(lambda x: p * x * p.scale, budget=False)
    assert fast(1.0).data == (p * 1.0 * p.scale).data == 2.0
    p.scale = 7.0
    assert fast(1.0).data == (p * 1.0 * p.scale).data == 7.0


def test_slot_of_a_picked_value_is_guarded() -> None:
    W = [Param(1.0, 2.0), Param(2.0, 3.0)]
    pick = chainrule.compile(lambda i, x: W[i] * x * W[i].scale, budget=False)
    assert pick(0, 1.0).data == 2.0
    assert pick(1, 2.0).data == 12.0
    W[1].scale = 7.0
    assert pick(1, 2.0).data == (W[1] * 2.0 * W[1].scale).data == 28.0
    assert pick(0, 1.0).data == 2.0


def test_slot_of_a_value_argument_runs_eagerly() -> None:
    q = Param(1.0, scale=2.0)
    arg = chainrule.compile(lambda v, x: v * x * v.scale, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert arg(q, 1.0).data == 2.0
        q.scale = 7.0
        out = arg(q, 1.0)
    assert out.data == (q * 1.0 * q.scale).data == 7.0
    assert any(issubclass(w.category, CompileWarning) for w in caught)
    out.backward()
    assert q.grad == 7.0


def test_slots_and_dict_both_guarded() -> None:
    p = DictParam(1.0, scale=2.0, shift=1.0)
    fast = chainrule.compile(lambda x: p * x * p.scale + p.shift, budget=False)
    assert fast(1.0).data == 3.0
    p.scale = 5.0
    assert fast(1.0).data == (p * 1.0 * p.scale + p.shift).data == 6.0
    p.shift = 4.0
    assert fast(1.0).data == (p * 1.0 * p.scale + p.shift).data == 9.0


def test_unset_slot_raises_then_is_read() -> None:
    p = Unset(1.0)
    fast = chainrule.compile(lambda x: p * x * getattr(p, "scale", 1.0), budget=False)
    assert fast(3.0).data == 3.0
    p.scale = 2.0
    assert fast(3.0).data == (p * 3.0 * p.scale).data == 6.0
    del p.scale
    assert fast(3.0).data == 3.0
    strict = chainrule.compile(lambda x: p * x * p.scale, budget=False)
    with pytest.raises(AttributeError):
        strict(3.0)
    p.scale = 4.0
    assert strict(3.0).data == 12.0


def test_unset_slot_of_an_argument() -> None:
    q = Unset(1.0)
    arg = chainrule.compile(lambda v, x: v * x * getattr(v, "scale", 1.0), budget=False)
    assert arg(q, 3.0).data == 3.0
    q.scale = 2.0
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert arg(q, 3.0).data == 6.0
