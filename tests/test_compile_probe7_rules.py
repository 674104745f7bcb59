"""chainrule.compile and the seventh probe: a user's ``Primitive`` whose
derivative rule gives a local derivative a float64 buffer cannot hold as
eager uses it (a NumPy ``float32``, ``None``, an int past the floats) runs
eagerly with a CompileWarning naming the primitive, at the trace or at the
replay that meets it: eager's gradient (and its type), eager's exception at
eager's time (``backward()``, not the call)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Primitive, Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")

sq32 = Primitive("sq32", lambda x: x * x, lambda M, x, out: (np.float32(2.0) * np.float32(x),))
maybe_none = Primitive("maybe_none", lambda x: x, lambda M, x, out: (None if x > 10 else 1.0,))
huge = Primitive("huge", lambda x: x, lambda M, x, out: (10**400 if x > 10 else 1,))
twice_int = Primitive("twice_int", lambda x: 2.0 * x, lambda M, x, out: (2,))


def warned(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    """``fn(*args)`` and the messages of the CompileWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]


def call_then_backward(fn: Callable[[float], Value], w: Value, x: float) -> tuple[float, Any]:
    """The call's value and then ``w.grad`` after ``backward()``, or the
    exception ``backward()`` raised (the call itself must not raise)."""
    w.grad = 0.0
    out = fn(x)
    try:
        out.backward()
    except (TypeError, OverflowError) as e:
        return out.data, (type(e), str(e))
    return out.data, w.grad


def test_rule_returning_float32_runs_eagerly_with_eagers_float32_gradient() -> None:
    """NumPy 2 keeps ``float32 * float`` a float32: eager's gradient is a
    float32; a replay would store float64. The trace warns and runs eagerly."""
    w = Value(0.1)

    def f(x: float) -> Value:
        return sq32(w * x)

    fast = chainrule.compile(f, budget=False)
    messages: list[str] = []
    for x in (0.3, 1.3):  # the call that traces, then an eager call
        eager = call_then_backward(f, w, x)
        compiled, said = warned(call_then_backward, fast, w, x)
        assert compiled == eager and type(compiled[1]) is type(eager[1]) is np.float32
        messages += said
    assert len(messages) == 1 and "'sq32'" in messages[0] and "float32" in messages[0]


@pytest.mark.parametrize("rule", [maybe_none, huge], ids=["None", "10**400"])
@pytest.mark.parametrize("first", [1.0, 20.0], ids=["replay", "trace"])
def test_rule_not_a_float_raises_at_backward_as_eagerly(rule: Primitive, first: float) -> None:
    """A rule giving ``None`` or ``10**400`` at 20.0: eagerly the call
    returns 40.0 and only ``backward()`` raises (TypeError, OverflowError).
    Met at the trace or at a replay (which traces again), the function runs
    eagerly with a warning naming the primitive: eager's value, exception
    and timing; calls at 1.0 keep eager's gradient."""
    w = Value(1.0)

    def f(x: float) -> Value:
        return rule(w * x) * 2.0

    fast = chainrule.compile(f, budget=False)
    messages: list[str] = []
    for x in (first, 20.0, 1.0, 20.0):
        eager = call_then_backward(f, w, x)
        compiled, said = warned(call_then_backward, fast, w, x)
        assert compiled == eager
        messages += said
    assert eager[0] == 40.0 and eager[1][0] in (TypeError, OverflowError)
    assert len(messages) == 1 and repr(rule.name) in messages[0]


def test_rule_returning_an_exact_int_replays() -> None:
    """An int a float holds exactly: eager's ``2 * grad`` is ``2.0 * grad``,
    so the replay keeps it, silently and with eager's gradient."""
    w = Value(0.7)

    def f(x: float) -> Value:
        return twice_int(w * x) * 1.5

    fast = chainrule.compile(f, budget=False)
    for x in (0.3, 1.3, 2.9):
        eager = call_then_backward(f, w, x)
        compiled, messages = warned(call_then_backward, fast, w, x)
        assert compiled == eager and type(compiled[1]) is float and not messages
    assert (fast.traces, fast.hits) == (1, 2)
