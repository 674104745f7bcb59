"""chainrule.compile and the seventh probe: a class fn instantiates.
What its ``__init__``, ``__new__``, ``__call__`` and other methods read
(globals, a global dict's entry, a class attribute) is guarded like what fn
reads; the class's own entries are guarded (``Layer.__init__`` patched on
the class traces again); what they change (``Counter.n += 1``) is seen as a
change of state while fn runs (it runs eagerly, warned)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")

w = Value(1.0)
SCALE = 2.0
CFG = {"s": 1.0}


class Layer:
    def __init__(self) -> None:
        self.scale = SCALE * CFG["s"]


class Cfg:
    lr = 1.0


class Layer2:
    def __init__(self) -> None:
        self.lr = Cfg.lr


class Layer3:
    def __call__(self, x: Any) -> Any:
        return x * SCALE


class Layer4:
    def forward(self, x: Any) -> Any:
        return self.helper(x)

    def helper(self, x: Any) -> Any:
        return x * CFG["s"]


def made_and_read(x: float) -> Value:
    return w * x * Layer().scale


def class_attribute(x: float) -> Value:
    return w * x * Layer2().lr


def called(x: float) -> Value:
    return Layer3()(w * x)


def method_helper(x: float) -> Value:
    return Layer4().forward(w * x)


@pytest.mark.parametrize("fn", [made_and_read, class_attribute, called, method_helper])
def test_what_a_made_objects_methods_read_is_guarded(fn: Any) -> None:
    global SCALE
    fast = chainrule.compile(fn, budget=False)
    eager, compiled = [], []
    try:
        for k in range(3):
            SCALE, CFG["s"], Cfg.lr = 2.0 + k, 1.0 + k, 10.0 + k
            eager.append(fn(1.0).data)
            compiled.append(fast(1.0).data)
    finally:
        SCALE, CFG["s"], Cfg.lr = 2.0, 1.0, 1.0
    assert compiled == eager
    assert len(set(eager)) == 3


class Patched:
    def __init__(self) -> None:
        self.s = 2.0

    def __call__(self, x: Any) -> Any:
        return x * 2.0


def _init5(self: Any) -> None:
    self.s = 5.0


def patched_init(x: float) -> Value:
    return w * x * Patched().s


def patched_call(x: float) -> Value:
    return Patched()(w * x)


@pytest.mark.parametrize(
    "fn, name, method",
    [(patched_init, "__init__", _init5), (patched_call, "__call__", lambda self, x: x * 7.0)],
)
def test_a_method_patched_on_a_made_class_traces_again(fn: Any, name: str, method: Any) -> None:
    fast = chainrule.compile(fn, budget=False)
    old = vars(Patched)[name]
    try:
        assert fast(1.0).data == fn(1.0).data == 2.0
        setattr(Patched, name, method)
        eager = fn(1.0).data
        assert eager in (5.0, 7.0)
        assert fast(1.0).data == eager
    finally:
        setattr(Patched, name, old)


class Counter:
    n = 0

    def __init__(self) -> None:
        Counter.n += 1
        self.k = float(Counter.n)


def counted(x: float) -> Value:
    return w * x * Counter().k


def test_an_init_that_changes_class_state_runs_eagerly() -> None:
    Counter.n = 0
    eager = [counted(1.0).data for _ in range(3)]
    assert eager == [1.0, 2.0, 3.0]
    Counter.n = 0
    fast = chainrule.compile(counted, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = [fast(1.0).data for _ in range(3)]
    assert compiled == eager
    assert Counter.n == 3
    assert any(
        issubclass(c.category, CompileWarning) and "changes a global" in str(c.message)
        for c in caught
    )


TOTAL = 0


class Tally:
    def __init__(self) -> None:
        global TOTAL
        TOTAL += 1
        self.k = float(TOTAL)


def tallied(x: float) -> Value:
    return w * x * Tally().k


def _closure_counter() -> Any:
    """fn and a class whose ``__init__`` counts in a closure cell (``nonlocal``)."""
    made = 0

    class Made:
        def __init__(self) -> None:
            nonlocal made
            made += 1
            self.k = float(made)

    def fn(x: float) -> Value:
        return w * x * Made().k

    return fn


def _global_counter() -> Any:
    """``tallied``, its counter (a global ``__init__`` writes) set to 0."""
    global TOTAL
    TOTAL = 0
    return tallied


@pytest.mark.parametrize("make", [_global_counter, _closure_counter])
def test_an_init_that_changes_a_global_or_a_cell_runs_eagerly(make: Any) -> None:
    eager_fn = make()
    eager = [eager_fn(1.0).data for _ in range(3)]
    fast = chainrule.compile(make(), budget=False)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        compiled = [fast(1.0).data for _ in range(3)]
    assert compiled == eager == [1.0, 2.0, 3.0]
