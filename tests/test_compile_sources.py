"""What a compiled function reads besides its arguments is guarded
(``chainrule.compiler.sources``): state reached through containers that
are not plain lists, tuples or dicts, through classes, modules' functions
and ``functools.partial``, changed after tracing, gives eager's number on
the next call, or the function runs eagerly with one warning naming why.
"""

from __future__ import annotations

import array
import collections
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def replays_as_eager(f: Callable[[float], Value], change: Callable[[], None]) -> None:
    """``f`` compiled: traced and replayed, then ``change`` applied; every
    call gives eager's number and warns of nothing."""
    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(2):
            assert fast(1.0).data == f(1.0).data
        assert fast.stats()["hits"] >= 1  # (a replay, not eager calls)
        before = f(1.0).data
        change()
        assert f(1.0).data != before  # (the change is one eager sees)
        assert fast(1.0).data == f(1.0).data
        assert fast(1.0).data == f(1.0).data


class Row(list):  # type: ignore[type-arg]
    pass


class Box:
    def __init__(self) -> None:
        self.k = 1.0


class Hyper(NamedTuple):
    scale: list[float]
    shift: float


def _containers() -> list[tuple[str, Any, Callable[[Any], float], Callable[[Any], None]]]:
    """(name, state, its read, a change of it)."""

    def put(key: Any, value: Any) -> Callable[[Any], None]:
        return lambda box: box.__setitem__(key, value)

    def swap(box: Any) -> None:  # a set's number replaced
        box.clear()
        box.add(3.0)

    return [
        ("OrderedDict", collections.OrderedDict(a=1.0), lambda b: b["a"], put("a", 3.0)),
        ("defaultdict", collections.defaultdict(float, a=1.0), lambda b: b["a"], put("a", 3.0)),
        ("Counter", collections.Counter(a=1), lambda b: b["a"], put("a", 3)),
        ("list subclass", Row([1.0]), lambda b: b[0], put(0, 3.0)),
        (
            "NamedTuple's list",
            Hyper([1.0], 0.0),
            lambda b: b.scale[-1],
            lambda b: b.scale.append(2.0),
        ),
        ("set", {1.0}, max, swap),
        (
            "frozenset",
            frozenset([Box()]),
            lambda b: next(iter(b)).k,
            lambda b: setattr(*b, "k", 3),
        ),
        ("deque", collections.deque([1.0]), lambda b: b[0], put(0, 3.0)),
        ("array.array", array.array("d", [1.0]), lambda b: b[0], put(0, 3.0)),
        ("bytearray", bytearray(b"\x01"), lambda b: b[0], put(0, 3)),
        ("object ndarray", np.array([1.0, None], dtype=object), lambda b: b[0], put(0, 3.0)),
        ("attribute of a list subclass", Row(), lambda b: b.k, lambda b: setattr(b, "k", 3.0)),
    ]


@pytest.mark.parametrize(
    ("state", "read", "change"),
    [case[1:] for case in _containers()],
    ids=[case[0] for case in _containers()],
)
def test_numbers_in_other_containers_are_guarded(
    state: Any, read: Callable[[Any], float], change: Callable[[Any], None]
) -> None:
    """A subclass of dict, list or tuple, a set, a deque, an array.array, an
    object array: a number in it changed after tracing is the new one."""
    if isinstance(state, Row) and not state:
        state.k = 1.0  # type: ignore[attr-defined]
    w = Value(0.5)
    replays_as_eager(lambda x: w * x * read(state), lambda: change(state))


def test_values_in_an_object_array_are_guarded() -> None:
    params = np.array([Value(1.0), Value(2.0)], dtype=object)
    old = params[0]
    replays_as_eager(lambda x: params[0] * x, lambda: params.__setitem__(0, Value(3.0)))
    out = chainrule.compile(lambda x: params[0] * x)(2.0)
    out.backward()
    assert params[0].grad == 2.0 and old.grad == 0.0


def test_a_container_it_cannot_walk_runs_eagerly_with_a_warning() -> None:
    """An iterator (a C object whose entries the guard cannot read): the
    function runs eagerly, with one warning naming it, and eager's numbers."""
    numbers = iter([1.0, 2.0, 3.0, 4.0])
    w = Value(1.0)
    fast = chainrule.compile(lambda x: w * x * next(numbers))
    with pytest.warns(CompileWarning, match="list_iterator"):
        assert fast(1.0).data == 1.0
    assert fast(1.0).data == 2.0
    assert fast(1.0).data == 3.0
