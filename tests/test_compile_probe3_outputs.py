"""chainrule.compile: a returned pick of nodes made inside the function,
and nodes made outside it (the third probe's repros 16, 19, 9 and 10).

Each test holds compile to eager's numbers (values, gradients, trained
parameters), or to running eagerly with one CompileWarning that names
the cause, and checks that no object of the trace (a ``TraceValue``, a
stand-in) is handed back or left in the user's objects.
"""

from __future__ import annotations

import functools
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
    assert _run(fast, calls, params) == [(d, g, ["Value"]) for d, g, _ in eager]
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


def test_a_pick_of_picks_of_parameters_is_the_parameter_itself() -> None:
    """``[W[i], W[j]][k]``: the entry itself, as eagerly (an optimizer's
    write to the returned object is a write to the parameter)."""

    def f(i: int, j: int, k: int) -> Value:
        return [W[i], W[j]][k]

    fast = _compiled(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for i, j, k in ((0, 1, 0), (1, 2, 1), (2, 0, 0), (0, 2, 1)):
            assert fast(i, j, k) is f(i, j, k)
    assert fast.stats()["hits"] == 3


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


# --------------------------------------------------------------------------
# 2. a node made outside the function (repro 9)
# --------------------------------------------------------------------------


def _outside_node(compiled: bool) -> list[tuple[float, float, float]]:
    """``h = w * 2.0`` made once before the calls and read by ``fn``: eagerly
    its (stale) data, and a backward pass that fills ``h.grad`` and goes on
    through ``h`` into ``w``."""
    w = Value(0.5)
    h = w * 2.0

    def f(x: float) -> Value:
        return h * x

    g = _compiled(f) if compiled else f
    out = []
    for x in (1.0, 2.0, 3.0):
        y = g(x)
        w.grad = h.grad = 0.0
        y.backward()
        out.append((y.data, w.grad, h.grad))
        w.data += 1.0  # an optimizer's step
    return out


def test_a_node_made_outside_the_function_runs_eagerly() -> None:
    eager = _outside_node(False)
    assert eager == [(1.0, 2.0, 1.0), (2.0, 4.0, 2.0), (3.0, 6.0, 3.0)]
    with pytest.warns(
        CompileWarning, match=r"reads a Value made outside it .*\(h = \.\.\., a '\*'"
    ):
        assert _outside_node(True) == eager


H = [W[0] * 2.0, W[1] * 3.0]  # nodes made before any call


@pytest.mark.parametrize(
    "f",
    [lambda x, k: H[k] * x, lambda x, k: [H[0], H[1] * x][k]],
    ids=["a pick used", "among nodes made inside"],
)
def test_a_pick_among_nodes_made_outside_runs_eagerly(f: Callable[[float, int], Any]) -> None:
    calls = [(1.0, 1), (2.0, 0), (3.0, 1)]
    eager = _run(f, calls, W)
    with pytest.warns(CompileWarning, match="reads a Value made outside it"):
        assert _run(_compiled(f), calls, W) == eager


def test_a_returned_pick_among_nodes_made_outside_is_the_entry_itself() -> None:
    """(Correct before too, and compiled; now it runs eagerly: the walk meets
    the nodes made outside as the candidates of the pick.)"""
    fast = _compiled(lambda k: H[k])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        assert [fast(k) is H[k] for k in (0, 1, 0)] == [True, True, True]


def test_a_node_another_trace_kept_is_made_outside_the_next() -> None:
    """A node a trace appends to a list (that function then runs eagerly)
    is a plain Value afterwards, and to another compiled function that
    reads it a node made outside it."""
    w = Value(0.5)
    log: list[Value] = []

    def keep(x: float) -> Value:
        log.append(w * 2.0)
        return w * x

    def read(x: float) -> Value:
        return log[0] * x

    once = _compiled(keep)
    with pytest.warns(CompileWarning, match="changes a global, a closure's"):
        once(1.0)
        once(1.0)
    assert type(log[0]) is Value
    fast = _compiled(read)
    with pytest.warns(CompileWarning, match="reads a Value made outside it"):
        for x in (1.0, 2.0, 3.0):
            assert fast(x).data == read(x).data == x
            w.data += 1.0


def test_a_pick_another_trace_kept_is_made_outside_the_next() -> None:
    """The same for a pick's stand-in left in a list: no internal error."""
    log: list[Value] = []

    def keep(x: float, i: int) -> Value:
        log.append(W[i])
        return W[i] * x

    def read(x: float) -> Value:
        return log[0] * x

    once = _compiled(keep)
    with pytest.warns(CompileWarning, match="changes a global, a closure's"):
        once(1.0, 1)
        once(1.0, 1)
    fast = _compiled(read)
    with pytest.warns(CompileWarning, match="reads a Value made outside it"):
        assert [fast(x).data for x in (1.0, 2.0)] == [read(x).data for x in (1.0, 2.0)]


def test_another_compiled_functions_output_read_runs_eagerly() -> None:
    w = Value(0.5)
    made = _compiled(lambda x: w * x)(2.0)

    def f(x: float) -> Value:
        return made * x

    with pytest.warns(CompileWarning, match="reads a Value made outside it .*'compiled' node"):
        assert _compiled(f)(3.0).data == f(3.0).data == 3.0


# --------------------------------------------------------------------------
# 3. nodes kept by a functools cache (repro 10)
# --------------------------------------------------------------------------


def _cached_nodes(compiled: bool, how: str) -> tuple[list[tuple[float, float]], set[str]]:
    """A ``functools.lru_cache`` helper that returns nodes made from the
    parameters: eagerly later calls reuse the nodes as first made. Returns
    the values and ``W[0]``'s gradients, and the types the cache holds."""
    w = [Value(0.5), Value(1.5)]

    @functools.lru_cache(maxsize=4)
    def doubled() -> list[Value]:
        return [v * 2.0 for v in w]

    class Model:
        @functools.cache  # noqa: B019  (the object lives as long as the test)
        def doubled(self) -> list[Value]:
            return [v * 2.0 for v in w]

    model = Model()
    helper = model.doubled if how == "method" else doubled
    if how == "warm":  # filled by an eager call before the first trace
        doubled()

    def f(x: float) -> Value:
        return sum((v * x for v in helper()), Value(0.0))

    if how == "exec":  # code compile runs as it is: its call of the cache is not seen
        space: dict[str, Any] = {"helper": helper, "Value": Value}
        exec("def f(x):\n    return sum((v * x for v in helper()), Value(0.0))", space)
        f = space["f"]
    g = _compiled(f) if compiled else f
    out = []
    for k in range(3):
        y = g(1.0 + k)
        w[0].grad = 0.0
        y.backward()
        out.append((y.data, w[0].grad))
        w[0].data += 1.0  # an optimizer's step
    return out, {type(v).__name__ for v in helper()}


CACHE_WARNINGS = {
    "function": "calls .*doubled, a functools.lru_cache/cache function, which keeps Values",
    "method": "calls .*Model.doubled, a functools.lru_cache/cache function",
    "warm": "reads a Value made outside it",
    "exec": "doubled, a functools.lru_cache/cache function, is called from code compile runs",
}


@pytest.mark.parametrize("how", CACHE_WARNINGS)
def test_nodes_kept_by_a_functools_cache_run_eagerly(how: str) -> None:
    eager = _cached_nodes(False, how)
    assert eager == ([(4.0, 2.0), (8.0, 4.0), (12.0, 6.0)], {"Value"})
    with pytest.warns(CompileWarning, match=CACHE_WARNINGS[how]):
        assert _cached_nodes(True, how) == eager  # no TraceValue left in the cache


def test_a_functools_cache_of_numbers_and_parameters_is_replayed() -> None:
    w = [Value(0.5), Value(1.5)]

    @functools.cache
    def offsets(n: int) -> list[int]:
        return list(range(n))

    @functools.cache
    def params() -> tuple[Value, Value]:
        return w[0], w[1]

    def f(x: float) -> Value:
        a, b = params()
        return sum((a * (x + k) for k in offsets(3)), b)

    fast = _compiled(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for x in (1.0, 2.0, 3.0):
            assert fast(x).data == f(x).data
            w[0].data += 1.0
    assert fast.stats()["hits"] == 2
