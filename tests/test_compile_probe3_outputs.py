"""chainrule.compile: a returned pick of nodes made inside the function,
and nodes made outside it (the third probe's repros 16, 19, 9 and 10).

Each test holds compile to eager's numbers (values, gradients, trained
parameters), or to running eagerly with one CompileWarning that names
the cause, and checks that no object of the trace (a ``TraceValue``, a
stand-in) is handed back or left in the user's objects.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _compiled(fn: Callable[..., Any]) -> Any:
    return chainrule.compile(fn, budget=False)


def _values(result: Any) -> list[Value]:
    """The Values in a result (a Value, or lists, tuples, dicts of them)."""
    if isinstance(result, Value):
        return [result]
    items = result.values() if isinstance(result, dict) else result
    return [v for item in items for v in _values(item)]


def _run(
    fn: Callable[..., Any], calls: list[tuple[Any, ...]], params: list[Value]
) -> list[tuple[list[float], list[float], list[str]]]:
    """Per call: the data of the Values ``fn`` returns, the parameters'
    gradients after the first one's backward(), and the returned types."""
    out = []
    for args in calls:
        got = _values(fn(*args))
        for p in params:
            p.grad = 0.0
        got[0].backward()
        out.append(
            ([v.data for v in got], [p.grad for p in params], [type(v).__name__ for v in got])
        )
    return out


# --------------------------------------------------------------------------
# 1. a pick of nodes made inside the function, returned (repros 16, 19)
# --------------------------------------------------------------------------


def test_returned_pick_of_a_models_outputs_is_this_calls() -> None:
    """``return model(x)[label]``: each replay's pick and its gradient, not
    the traced call's (nor the traced node itself)."""
    random.seed(0)
    model = chainrule.MLP(2, [4, 3])

    def f(x: list[float], label: int) -> Value:
        return model(x)[label]

    calls = [([1.0, 2.0], 1), ([0.5, -1.0], 0), ([3.0, 1.0], 2), ([3.0, 1.0], 1)]
    params = model.parameters()
    eager = _run(f, calls, params)
    fast = _compiled(f)
    assert _run(fast, calls, params) == [(d, g, ["CompiledValue"]) for d, g, _ in eager]
    assert fast.stats()["hits"] == 3


W = [Value(0.5), Value(1.5), Value(-2.0)]


def _outs(x: float) -> list[Value]:
    return [W[0] * x, W[1] * x, W[2] * x + 1.0]


PICKS: dict[str, Callable[[float, int], Any]] = {
    "in a list": lambda x, k: [_outs(x)[k]],
    "in a dict": lambda x, k: {"p": _outs(x)[k]},
    "two picks": lambda x, k: (_outs(x)[k], _outs(x)[k - 1]),
    "a pick and its square": lambda x, k: (lambda o: (o[k], o[k] * o[k]))(_outs(x)),
    "among parameters": lambda x, k: [W[0], W[1] * x, W[2] * x][k],
    "a row": lambda x, k: [[W[0] * x, W[1] * x], [W[2] * x, W[0] * x * x]][k % 2],
    "from a dict": lambda x, k: {0: W[0] * x, 1: W[1] * x, 2: W[2] * x}[k],
    "from a tuple": lambda x, k: (W[0] * x, W[1] * x, W[2] * x)[k],
    "max with key": lambda x, k: max(_outs(x * k), key=lambda v: v.data),
}


@pytest.mark.parametrize("name", PICKS)
def test_returned_pick_variants_are_this_calls(name: str) -> None:
    f = PICKS[name]
    calls = [(1.0, 1), (2.0, 0), (3.0, 2), (-1.5, 1), (0.5, 2)]
    eager = _run(f, calls, W)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = _run(_compiled(f), calls, W)
    assert [(d, g) for d, g, _ in got] == [(d, g) for d, g, _ in eager]
    assert not {"TraceValue", "StandIn"} & {t for _, _, types in got for t in types}


def _trained(compiled: bool) -> list[tuple[float, float, float]]:
    """A training step whose loss an int argument picks among losses made
    inside the function (repro 19)."""
    w = [Value(0.5), Value(1.5)]
    opt = optim.SGD(w, lr=0.1)

    def loss_fn(x: float, k: int) -> Value:
        return [(w[0] * x - 1.0) ** 2, (w[1] * x - 1.0) ** 2][k]

    step = chainrule.compile(loss_fn, optimizer=opt, budget=False)
    out = []
    for x, k in ((1.0, 1), (2.0, 0), (3.0, 1), (0.5, 0)):
        if compiled:
            loss = step(x, k)
        else:
            loss = loss_fn(x, k)
            opt.zero_grad()
            loss.backward()
            opt.step()
        out.append((loss.data, w[0].data, w[1].data))
    return out


def test_compiled_step_on_a_picked_loss_trains_as_eagerly() -> None:
    assert _trained(True) == _trained(False)
