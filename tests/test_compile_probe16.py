"""chainrule.compile and round thirty-two: a node's inputs or local
derivatives written through Value's own slots or its ``_fn``, a Value's
class swapped between calls (``w.__class__ = Param``), a method of the
user's Value subclass replaced between calls (``d * x`` runs the new one).
Eager's numbers, never another."""

from __future__ import annotations

import math
import operator
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Primitive, Value
from chainrule.compiler import CompileWarning
from chainrule.value.primitives import ADD as P_ADD
from chainrule.value.primitives import EXP as P_EXP
from chainrule.value.primitives import MUL as P_MUL

pytestmark = pytest.mark.usefixtures("trace_every_graph")

W = Value(0.3)
U = Value(-0.7)
_CUT = Value.__dict__["_prev"].__set__
_SET_LOCAL = Value.__dict__["_local"].__set__
_MUL5 = Primitive("*", operator.mul, lambda M, a, b, out: (5.0 * b, a))


def _numbers(fn: Callable[..., Value], params: list[Value], *args: Any) -> tuple[Any, ...]:
    """``fn(*args)``'s number and the parameters' gradients after its backward."""
    for p in params:
        p.grad = 0.0
    out = fn(*args)
    out.backward()
    return (out.data, *(p.grad for p in params))


def _same_as_eager(
    fn: Callable[..., Value], calls: list[tuple[Any, ...]], params: list[Value]
) -> Callable[..., Value]:
    """Each call compiled and eagerly, the same numbers and gradients; the
    compiled function, for its stats."""
    fast = chainrule.compile(fn, budget=False)
    for args in calls:
        assert _numbers(fast, params, *args) == _numbers(fn, params, *args), args
    return fast


# -- a node's parts written by hand (AU1, AU2) --------------------------------


def _cut_by_slot(x: float) -> Value:
    h = W * x
    _CUT(h, ())  # micrograd's detach by hand, through the slot itself
    return h * U + W


def _local_by_slot(x: float) -> Value:
    h = W * x
    _SET_LOCAL(h, (5.0 * x, W.data, P_MUL))
    return h * U + W


def _retagged(x: float) -> Value:
    h = W * x
    h._fn = _MUL5  # the node keeps its local derivatives eagerly
    return h * U + W


@pytest.mark.parametrize("fn", [_cut_by_slot, _local_by_slot])
def test_a_node_s_parts_written_through_value_s_slots_run_eagerly(
    fn: Callable[[float], Value],
) -> None:
    """Value's slot descriptors write past the trace's watch of ``_prev``
    and ``_local``: the check after the trace sees the node no longer
    holds what its operation gave it."""
    with pytest.warns(CompileWarning, match="sets the inputs or local derivatives of a Value"):
        fast = _same_as_eager(fn, [(1.0,), (2.0,), (3.0,)], [W, U])
    assert fast.stats()["hits"] == 0


def test_a_node_s_fn_written_runs_eagerly_named_at_the_user_s_line() -> None:
    """``h._fn = P`` writes ``_local`` from chainrule's own setter: the
    write is the user's, at the line that wrote it."""
    with pytest.warns(CompileWarning, match=r"test_compile_probe16.py:\d+: writes _fn of a Value"):
        fast = _same_as_eager(_retagged, [(1.0,), (2.0,), (3.0,)], [W, U])
    assert fast.stats()["hits"] == 0


def _leaf_rewired(x: float) -> Value:
    c = Value(W.data + U.data)  # a leaf made inside, from read floats...
    c._prev = (W, U)  # ...made a node by hand, with a local derivative of its own
    c._local = (3.0, 1.0, P_ADD)
    return c * x


def _leaf_rewired_by_slot(x: float) -> Value:
    c = Value(W.data * U.data)
    _CUT(c, (W, U))
    _SET_LOCAL(c, (2.0 * U.data, W.data, P_MUL))
    return c * x


@pytest.mark.parametrize("fn", [_leaf_rewired, _leaf_rewired_by_slot])
def test_a_leaf_made_inside_and_rewired_by_hand_runs_eagerly(
    fn: Callable[[float], Value],
) -> None:
    """A ``Value(x)`` whose ``_prev`` and ``_local`` are set by hand is a
    node eagerly (its number as made, its gradient by the local derivative
    set): the call that traces too, whose result keeps the wiring."""
    with pytest.warns(CompileWarning, match="sets the inputs or local derivatives of a Value"):
        fast = _same_as_eager(fn, [(1.0,), (2.0,), (3.0,)], [W, U])
    assert fast.stats()["hits"] == 0


# -- a Value's class swapped between calls (AU3) -------------------------------


class Doubled(Value):
    __slots__ = ()

    def __mul__(self, other: Any) -> Value:
        return Value.__mul__(self, other) * 2.0

    __rmul__ = __mul__


SWAPPED = Value(0.3)
SWAPPED_IN_LIST = [Value(0.3)]
SWAPPED_HOLDER = types.SimpleNamespace(p=Value(0.3))


def _global(x: float) -> Value:
    return SWAPPED * x + 1.0


def _listed(x: float) -> Value:
    return SWAPPED_IN_LIST[0] * x + 1.0


def _attribute(x: float) -> Value:
    return SWAPPED_HOLDER.p * x + 1.0


@pytest.mark.parametrize(
    ("fn", "p"),
    [
        (_global, SWAPPED),
        (_listed, SWAPPED_IN_LIST[0]),
        (_attribute, SWAPPED_HOLDER.p),
    ],
)
def test_a_value_s_class_swapped_between_calls_is_guarded(
    fn: Callable[[float], Value], p: Value
) -> None:
    """The same object of another class runs another ``__mul__``: the
    walk before a replay keeps each Value's class once a class of the
    user's derives from Value."""
    calls = []
    fast = chainrule.compile(fn, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        try:
            sequence = [(Value, 1.0), (Value, 2.0), (Doubled, 1.0), (Doubled, 2.0), (Value, 3.0)]
            for cls, x in sequence:
                p.__class__ = cls
                calls.append(_numbers(fast, [p], x) == _numbers(fn, [p], x))
        finally:
            p.__class__ = Value
    assert calls == [True] * 5
    assert fast.stats()["hits"] >= 2


def _by_argument(v: Value, x: float) -> Value:
    return v * x + 1.0


def test_a_value_argument_s_class_is_part_of_the_key() -> None:
    v = Value(0.3)
    fast = chainrule.compile(_by_argument, budget=False)
    got = []
    try:
        for cls in (Value, Doubled, Value, Doubled):
            v.__class__ = cls
            got.append((fast(v, 1.0).data, _by_argument(v, 1.0).data))
    finally:
        v.__class__ = Value
    assert got == [(1.3, 1.3), (1.6, 1.6), (1.3, 1.3), (1.6, 1.6)]
    assert fast.stats()["hits"] == 2


# -- a method of the user's Value subclass replaced between calls (AU4) --------


class Param(Value):
    __slots__ = ()

    def __mul__(self, other: Any) -> Value:
        return Value.__mul__(self, other) * 2.0


D = Param(0.3)


def _implicit(x: float) -> Value:
    return D * x


def _times3(self: Value, other: Any) -> Value:
    return Value.__mul__(self, other) * 3.0


def test_a_method_of_your_value_subclass_replaced_between_calls_is_guarded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``d * x`` looks ``__mul__`` up on the class, never named in the
    code: the class of a Value of the user's reached is walked as any
    object's."""
    fast = chainrule.compile(_implicit, budget=False)
    first = _numbers(fast, [D], 1.0)
    assert first == _numbers(_implicit, [D], 1.0) == (0.6, 2.0)
    assert _numbers(fast, [D], 1.0) == first
    monkeypatch.setattr(Param, "__mul__", _times3)  # a notebook cell redefines it
    assert _numbers(fast, [D], 1.0) == _numbers(_implicit, [D], 1.0) == (0.8999999999999999, 3.0)
    assert _numbers(fast, [D], 2.0) == _numbers(_implicit, [D], 2.0)
    assert fast.stats()["hits"] >= 2


# -- the warning names whose Primitive raised (AU s01) -------------------------

_MY_EXP = Primitive("my_exp", math.exp, P_EXP.derivative)


def _guarded_exp(x: float) -> Value:
    h = W * x
    try:
        return _MY_EXP(h)
    except OverflowError:
        return h


def test_a_primitive_of_yours_with_a_c_forward_is_named_yours() -> None:
    """``math.exp`` with the table's derivative is not chainrule's ``exp``."""
    fast = chainrule.compile(_guarded_exp, budget=False)
    with pytest.warns(CompileWarning, match="'my_exp', a Primitive of yours, raises"):
        got = [(fast(x).data, _guarded_exp(x).data) for x in (1e4, 1.0, 2.0)]
    assert got == [(3000.0, 3000.0), (math.exp(0.3), math.exp(0.3)), (math.exp(0.6), math.exp(0.6))]


# -- an optional argument tested by identity (AV1) -------------------------------

_NOTHING = object()
_REF: list[float] = [1.0, 2.0]


def _masked(x: float, mask: Any = None) -> Value:
    h = [W * x, U * x]
    if mask is not None:
        h = [hi * m for hi, m in zip(h, mask)]
    if mask is _NOTHING:
        return W
    return h[0] + h[1]


def test_an_optional_argument_tested_against_none_replays() -> None:
    """``mask is not None`` on a list, tuple or dict argument: the trace
    holds a copy of it, but neither the copy nor the caller's one is
    ``None`` or any object of another type; the answer is eager's, and
    replays go on."""
    fast = chainrule.compile(_masked, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for args in [(1.0, [1.0, 0.0]), (2.0, [0.0, 1.0]), (3.0, (1.0, 1.0)), (4.0, (2.0, 0.5))]:
            assert _numbers(fast, [W, U], *args) == _numbers(_masked, [W, U], *args)
    assert fast.stats()["hits"] == 2


def _is_ref(xs: list[float]) -> Value:
    return W * (2.0 if xs is _REF else 1.0)


def test_a_list_argument_that_may_be_the_global_it_is_compared_with_runs_eagerly() -> None:
    """Against a list reached otherwise, the caller's list may be that one."""
    fast = chainrule.compile(_is_ref, budget=False)
    with pytest.warns(CompileWarning, match="list, tuple or dict argument"):
        got = [(fast(xs).data, _is_ref(xs).data) for xs in ([1.0, 2.0], _REF, [3.0, 4.0])]
    assert got == [(0.3, 0.3), (0.6, 0.6), (0.3, 0.3)]


# -- round thirty-three (AW) ------------------------------------------------------

_SET_DATA = Value.__dict__["data"].__set__
FIVE = Value(5.0)


def _clamped_by_slot(x: float) -> Value:
    h = FIVE * x
    _SET_DATA(h, 5.0)  # the number it holds on the call that traces (x = 1.0)
    return h * U + W


def test_data_written_through_value_s_slot_runs_eagerly_even_when_equal() -> None:
    """The check after the trace compares each node's number with the
    very float its operation gave it: an equal one written is a write."""
    with pytest.warns(CompileWarning, match="writes .data of a Value it made"):
        fast = _same_as_eager(_clamped_by_slot, [(1.0,), (2.0,), (3.0,)], [W, U])
    assert fast.stats()["hits"] == 0


def _freed(x: float) -> Value:
    h = W * x
    out = h * U + W
    del h.data  # freed by hand after its last use
    return out


def test_data_deleted_on_a_node_made_inside_runs_eagerly() -> None:
    """Eagerly the numbers (the backward pass reads the saved local
    derivatives); it raised compile's own AttributeError."""
    with pytest.warns(CompileWarning, match="deletes .data of a Value it made"):
        fast = _same_as_eager(_freed, [(1.0,), (2.0,)], [W, U])
    assert fast.stats()["hits"] == 0


class _Meta(type):
    scale = 2.0

    @property
    def factor(cls) -> float:
        return _Meta.scale


class _Settings(metaclass=_Meta):
    def factor_of(self) -> float:
        return float(type(self).factor)  # type: ignore[attr-defined]


SETTINGS = _Settings()


def _through_the_metaclass(x: float) -> Value:
    return W * x * SETTINGS.factor_of()


def test_a_metaclass_attribute_read_through_an_object_s_class_is_guarded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``type(self).factor``, a property of the metaclass of an object's
    class: the metaclass's namespace is walked with the class's."""
    fast = chainrule.compile(_through_the_metaclass, budget=False)
    assert _numbers(fast, [W], 1.0) == _numbers(_through_the_metaclass, [W], 1.0)
    assert _numbers(fast, [W], 2.0) == _numbers(_through_the_metaclass, [W], 2.0)
    monkeypatch.setattr(_Meta, "scale", 3.0)
    assert _numbers(fast, [W], 2.0) == _numbers(_through_the_metaclass, [W], 2.0)
    assert _numbers(fast, [W], 2.0) == (1.7999999999999998, 6.0)
    assert fast.stats()["hits"] >= 2
