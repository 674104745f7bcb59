"""chainrule.compile and the ninth probe: ``detect_anomaly()`` around the
backward pass only of a compiled output (the forward replayed outside it).
Eagerly the walk stops at the first nan or inf gradient term from a finite
incoming gradient; through a compiled output, the same AnomalyError (op,
inputs, value, message), and a finite backward from a graph built on the
output runs as eagerly instead of raising a create_graph TypeError."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import AnomalyError, Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")

Run = Callable[[Any], Any]


def _outcome(fn: Callable[[float], Value], leaves: list[Value], run: Run) -> Any:
    """``run`` on ``fn(2.0)`` under detect_anomaly: its AnomalyError's
    fields, or its result and the leaves' gradients."""
    for leaf in leaves:
        leaf.grad = 0.0
    y = fn(2.0)
    try:
        with chainrule.detect_anomaly():
            got = run(y)
    except AnomalyError as e:
        return ("error", str(e), e.phase, e.op, e.inputs, e.value, e.location)
    return ("ok", got, [leaf.grad for leaf in leaves])


def assert_as_eager(fn: Callable[[float], Value], leaves: list[Value], run: Run) -> Any:
    """The compiled function's replay, under ``run``, does what eager does."""
    eager = _outcome(fn, leaves, run)
    fast = chainrule.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        fast(1.0)  # the trace
        compiled = _outcome(fast, leaves, run)
    assert compiled == eager
    return eager


def _backward(y: Value) -> None:
    y.backward()


def _twice(y: Value) -> None:
    (y * 2.0).backward()


def _sum(y: Value) -> None:
    (y + y * 3.0).backward()


def _gradients(y: Value) -> Any:
    return chainrule.gradients(y, [W])


W = Value(0.0)
U = Value(1.5)


def sqrt_at_zero(x: float) -> Value:  # d/dW sqrt(W * W) at 0: 0.5 / 0 = inf
    return (W * W).sqrt() * x + W * x


def log_at_zero(x: float) -> Value:  # d/dW log(W * x) at 0: inf
    return (W * x).log() + W


def finite(x: float) -> Value:
    return W * x + W


@pytest.mark.parametrize("run", [_backward, _twice, _sum], ids=["backward", "times2", "sum"])
@pytest.mark.parametrize("fn", [sqrt_at_zero, log_at_zero], ids=["sqrt", "log"])
def test_anomaly_in_backward_of_compiled_output(fn: Callable[[float], Value], run: Run) -> None:
    got = assert_as_eager(fn, [W], run)
    assert got[0] == "error" and got[3] == fn.__name__.split("_")[0]


@pytest.mark.parametrize("run", [_backward, _twice, _sum, _gradients])
def test_finite_backward_under_detect_anomaly(run: Run) -> None:
    got = assert_as_eager(finite, [W], run)
    assert got[0] == "ok"


def number_operand(x: float) -> Value:
    # the term to 2.0 is -inf (ignored: a number); the first is log's, to W
    return (W + 0.0).log() * 2.0 + U * x


def test_number_operand_gradient_is_not_an_anomaly() -> None:
    got = assert_as_eager(number_operand, [W, U], _backward)
    assert got[3] == "log"


def in_a_running_sum(x: float) -> Value:
    # a product term of a running sum: eagerly a * node (U, log W)
    return U * x + U * (W + 0.0).log() + W * U + (U * x).exp()


def test_anomaly_in_running_sum_product() -> None:
    got = assert_as_eager(in_a_running_sum, [W, U], _backward)
    assert got[3] == "*" and got[4] == (1.5, -math.inf)
