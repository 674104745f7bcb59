"""chainrule.compile and the sixth probe: a user's ``Primitive`` has its
derivative rule evaluated when eager evaluates it, at the operation's run
(the state it reads, the exceptions it raises and when), and
``detect_anomaly()`` inside a compiled function raises eager's
``AnomalyError``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Primitive, Value
from chainrule.check.anomaly import AnomalyError
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")

#: A global a derivative rule reads (a slope a schedule anneals): a rule's
#: globals are not guarded, so a change between calls replays.
SCALE = 0.0


def set_scale(s: float) -> None:
    global SCALE
    SCALE = s


scaled = Primitive("scaled", lambda x: x * 3.0, lambda M, x, out: (SCALE,))


def quiet(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and how many CompileWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, sum(issubclass(w.category, CompileWarning) for w in caught)


def test_user_rule_reads_state_at_the_call_not_at_backward() -> None:
    """A rule reading a global a schedule changes between the call and
    ``backward()``: the call's value, as eagerly (trace and replays)."""
    w, b = Value(0.5), Value(0.1)

    def f(x: float) -> Value:
        return scaled(w * x) * b

    def step(fn: Callable[[float], Value], x: float) -> tuple[float, float]:
        w.grad = b.grad = 0.0
        set_scale(2.0 + x)
        out = fn(x)
        set_scale(7.0)  # schedule.step() between the forward and the backward
        out.backward()
        return w.grad, b.grad

    eager = [step(f, x) for x in (1.0, 2.0, 3.0)]
    fast = chainrule.compile(f)
    compiled, warned = quiet(lambda: [step(fast, x) for x in (1.0, 2.0, 3.0)])
    assert compiled == eager
    assert eager[1][0] == 0.1 * 4.0 * 2.0  # d/dw = b * SCALE(call) * x
    assert warned == 0
    assert (fast.traces, fast.hits) == (1, 2)  # replays: the rule runs in their forward


def test_user_rule_state_held_per_call_backward_twice() -> None:
    """Two outputs of two replays, backward in the other order and twice:
    each keeps its own call's local derivative, as eager's nodes do."""
    w = Value(0.5)

    def f(x: float) -> Value:
        return scaled(w * x)

    def run(fn: Callable[[float], Value]) -> list[float]:
        w.grad = 0.0
        outs = []
        for s in (2.0, 5.0, 11.0):
            set_scale(s)
            outs.append(fn(1.5))
        set_scale(-1.0)
        grads = []
        for out in (outs[2], outs[0], outs[0], outs[1]):
            w.grad = 0.0
            out.backward()
            grads.append(w.grad)
        return grads

    eager = run(f)
    assert eager == [11.0 * 1.5, 2.0 * 1.5, 2.0 * 1.5, 5.0 * 1.5]
    fast = chainrule.compile(f)
    assert quiet(lambda: run(fast))[0] == eager
    assert fast.hits == 2


def test_user_rule_state_in_a_larger_graph_and_in_training_step() -> None:
    """The compiled output used in more arithmetic (its backward inside a
    larger pass) and ``compile(optimizer=...)``'s step on arrays: the
    call's local derivative."""

    def grads(fn: Callable[[Value, float], Value]) -> list[float]:
        w = Value(0.5)
        seen = []
        for s in (2.0, 3.0, 4.0):
            w.grad = 0.0
            set_scale(s)
            out = fn(w, 1.0) * 2.0
            set_scale(100.0)
            out.backward()
            seen.append(w.grad)
        return seen

    def f(w: Value, x: float) -> Value:
        return scaled(w * x)

    assert quiet(lambda: grads(chainrule.compile(f)))[0] == grads(f) == [4.0, 6.0, 8.0]

    def train(compiled: bool) -> list[float]:
        w = Value(0.5)
        opt = chainrule.optim.SGD([w], lr=0.1)

        def loss(x: float) -> Value:
            return scaled(w * x)

        fn: Any = chainrule.compile(loss, optimizer=opt) if compiled else None
        seen = []
        for s in (2.0, 3.0, 4.0):
            set_scale(s)
            if fn is None:
                opt.zero_grad()
                out = loss(1.0)
                set_scale(100.0)
                out.backward()
                opt.step()
            else:
                fn(1.0)
            seen.append(w.data)
        return seen

    assert quiet(lambda: train(True))[0] == train(False)


def test_user_rule_that_raises_raises_at_the_call() -> None:
    """A rule raising for some input (``1.0 / x`` at 0): the call raises,
    as eagerly, on a replay too; other calls replay as before."""
    w, b = Value(0.5), Value(0.1)
    lg = Primitive(
        "lg", lambda x: math.log(abs(x)) if x else -math.inf, lambda M, x, out: (1.0 / x,)
    )

    def f(x: float) -> Value:
        return lg(w * x) * b

    def run(fn: Callable[[float], Value]) -> list[Any]:
        seen: list[Any] = []
        for x in (1.0, 2.0, 0.0, 3.0):
            w.grad = b.grad = 0.0
            try:
                out = fn(x)
            except ZeroDivisionError as e:
                seen.append(("call", str(e)))
                continue
            out.backward()
            seen.append((out.data, w.grad, b.grad))
        return seen

    eager = run(f)
    assert eager[2] == ("call", "float division by zero")
    compiled, warned = quiet(lambda: run(chainrule.compile(f)))
    assert compiled == eager
    assert warned == 0


def test_user_rule_that_raises_on_a_group_of_many() -> None:
    """Many nodes of the user's primitive in one group (arrays): values,
    gradients and a raising element as eagerly."""
    W = [Value(0.25 * (i + 1)) for i in range(8)]
    inv = Primitive("inv", lambda x: 1.0 / x if x else math.inf, lambda M, x, out: (-1.0 / x**2,))

    def f(x: float) -> Value:
        return sum((inv(w - x) for w in W), Value(0.0))

    def run(fn: Callable[[float], Value]) -> list[Any]:
        seen: list[Any] = []
        for x in (0.1, 0.3, 0.75, 0.2):
            for w in W:
                w.grad = 0.0
            try:
                out = fn(x)
            except ZeroDivisionError:
                seen.append("raised")
                continue
            out.backward()
            seen.append((out.data, [w.grad for w in W]))
        return seen

    eager = run(f)
    assert eager[2] == "raised"
    assert quiet(lambda: run(chainrule.compile(f)))[0] == eager


def test_detect_anomaly_inside_fn_raises_anomaly_error() -> None:
    """``detect_anomaly()`` inside fn: eager's AnomalyError and message on
    the call that traces and after (a parameter's data turned negative: no
    replay, which would not check, gives nan); the function runs eagerly,
    named."""
    w = Value(0.5)

    def f(x: float) -> Value:
        with chainrule.detect_anomaly():
            return (w * x).log()

    def run(fn: Callable[[float], Value]) -> list[Any]:
        seen: list[Any] = []
        for x, wd in ((-1.0, 0.5), (2.0, 0.5), (2.0, 0.6), (2.0, -0.5), (4.0, 0.5)):
            w.data, w.grad = wd, 0.0
            try:
                out = fn(x)
                out.backward()
                seen.append((out.data, w.grad))
            except AnomalyError as e:
                seen.append(str(e))
        return seen

    eager = run(f)
    assert eager[0].startswith("detect_anomaly: log returned nan from finite inputs (-0.5,)")
    assert eager[3].startswith("detect_anomaly: log returned nan from finite inputs (-1.0,)")
    fast = chainrule.compile(f)
    compiled, warned = quiet(lambda: run(fast))
    assert compiled == eager
    assert warned == 1
    assert "detect_anomaly() inside the function" in fast.stats()["eager"]


def test_detect_anomaly_inside_fn_backward_anomaly() -> None:
    """An anomaly of the backward pass (a nan gradient from finite ones)
    with ``detect_anomaly()`` inside fn and around ``backward()``: eager's
    error."""
    w = Value(0.0)

    def f(x: float) -> Value:
        with chainrule.detect_anomaly():
            return (w * x).sqrt() * 0.0

    def run(fn: Callable[[float], Value]) -> list[Any]:
        seen: list[Any] = []
        for x in (1.0, 2.0):
            w.grad = 0.0
            try:
                with chainrule.detect_anomaly():
                    out = fn(x)
                    out.backward()
                seen.append((out.data, w.grad))
            except AnomalyError as e:
                seen.append(str(e).splitlines()[0])
        return seen

    eager = run(f)
    assert quiet(lambda: run(chainrule.compile(f)))[0] == eager
