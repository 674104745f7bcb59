"""chainrule.compile: what a trace captures and what a call returns.

Each test holds compile to eager's numbers (values, gradients, exceptions),
or to running eagerly with one CompileWarning that names the cause: a
backward pass inside the function, a recipe that raises where a guard
protects it, the gradient of an intermediate Value returned beside the
loss, a returned pick that is the parameter itself, outputs a replay cannot
make again (closures, generators), a trace with no graph, a pick read but
not used, and identity tests on picked entries.
"""

from __future__ import annotations

import collections
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _compiled(fn: Callable[..., Any]) -> Any:
    return chainrule.compile(fn, budget=False)


# --------------------------------------------------------------------------
# 1. backward() inside the function
# --------------------------------------------------------------------------


def _steps(compiled: bool) -> tuple[list[tuple[float, float]], float]:
    w = Value(0.5)
    opt = optim.SGD([w], lr=0.1)

    def step(x: float) -> Value:
        loss = (w * x - 1.0) ** 2
        loss.backward()
        return loss

    f = _compiled(step) if compiled else step
    out = []
    for x in (1.0, 2.0, 3.0, 2.0):
        opt.zero_grad()
        loss = f(x)
        out.append((loss.data, w.grad))
        opt.step()
    return out, w.data


def test_backward_inside_the_function_runs_eagerly() -> None:
    eager = _steps(False)
    with pytest.warns(CompileWarning, match=r"calls backward\(\) inside the function"):
        assert _steps(True) == eager


TABLE = [Value(0.1 * (k + 1)) for k in range(4)]
SCALE = Value(0.5)


def pick_step(i: int) -> Value:
    loss = (TABLE[i] * SCALE).tanh()
    loss.backward()
    return loss


def test_backward_inside_the_function_through_a_pick() -> None:
    """The traced call's backward pass reaches the picked entry itself."""
    got = []
    fast = _compiled(pick_step)
    for f in (pick_step, fast):
        for p in [*TABLE, SCALE]:
            p.grad = 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)
            for i in (2, 1, 2):
                f(i)
        got.append([p.grad for p in [*TABLE, SCALE]])
    assert got[0] == got[1] and got[0][2] != 0.0
    assert fast.eager_reason is not None and "backward()" in fast.eager_reason


# --------------------------------------------------------------------------
# 2. a recipe that raises: a guard failure, never the replay's exception
# --------------------------------------------------------------------------

W = Value(0.5)


def protected(x: float) -> Value:
    scale = 1.0 / x if x != 0.0 else 1.0
    return W * scale


def protected_read(x: float) -> Value:
    d = (W * x).data
    scale = 1.0 / d if d != 0.0 else 1.0
    return W * scale


@pytest.mark.parametrize("fn", [protected, protected_read])
def test_a_recipe_protected_by_a_branch_does_not_raise(fn: Callable[[float], Value]) -> None:
    fast = _compiled(fn)
    for x in (1.0, 0.0, 2.0, 0.0, 4.0):
        assert fast(x).data == fn(x).data


def divide(x: float) -> Value:
    return (W * x) / x


def test_the_engines_division_by_a_float_argument() -> None:
    fast = _compiled(divide)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for x in (1.0, 0.0, 2.0, math.inf, 3.0):
            want, got = divide(x).data, fast(x).data
            assert got == want or (math.isnan(got) and math.isnan(want))


def raising(x: float) -> Value:
    return W * (1.0 / x)


def test_a_recipe_that_raises_eagerly_raises_the_same() -> None:
    fast = _compiled(raising)
    assert fast(2.0).data == 0.25
    with pytest.raises(ZeroDivisionError):
        fast(0.0)
    assert fast(4.0).data == 0.125


# --------------------------------------------------------------------------
# 3. the gradient of an intermediate Value returned beside the loss
# --------------------------------------------------------------------------

B = Value(0.1)


def hidden(x: float) -> tuple[Value, Value, Value, Value]:
    h = (W * x + B).tanh()
    unused = W * 3.0  # not on the loss's path: its .grad stays as it is
    return h, (h - 1.0) ** 2, unused, h


def test_an_intermediate_output_gets_its_gradient() -> None:
    fast = _compiled(hidden)
    for x in (1.0, 2.0, -0.5):
        want = []
        for f in (hidden, fast):
            h, loss, unused, again = f(x)
            unused.grad = 7.0
            loss.backward()
            want.append((h.grad, loss.grad, unused.grad, again is h))
            loss.backward()  # interior nodes are set again, not added to
            want.append((h.grad, loss.grad))
        assert want[0:2] == want[2:4]
        assert want[0][0] != 0.0 and want[0][2] == 7.0 and want[0][3]


LOGITS = [Value(0.3), Value(-0.2), Value(0.5)]


def softmax_parts(t: int) -> tuple[Value, Value, Value, list[Value]]:
    logits = [w * 2.0 for w in LOGITS]
    top = max(v.data for v in logits)
    ex = [(v - top).exp() for v in logits]
    total = sum(ex)
    probs = [e / total for e in ex]
    loss = -probs[t].log()
    return probs[0], total, loss, ex


def test_softmax_parts_get_their_gradients_through_a_pick() -> None:
    fast = _compiled(softmax_parts)
    for t in (0, 1, 0, 2):
        got = []
        for f in (softmax_parts, fast):
            p0, total, loss, ex = f(t)
            loss.backward()
            got.append((p0.grad, total.grad, [e.grad for e in ex], loss.grad))
        assert got[0] == got[1]
    assert fast.traces == 1


# --------------------------------------------------------------------------
# 4. a returned pick is the entry itself
# --------------------------------------------------------------------------


def _lookups(compiled: bool) -> tuple[list[float], bool, bool]:
    E = [Value(1.0), Value(2.0), Value(3.0)]
    rows = [[Value(1.0), Value(-1.0)], [Value(2.0), Value(-2.0)]]

    def lookup(i: int) -> Value:
        return E[i]

    def row(i: int) -> tuple[Value, Value]:
        r = rows[i]
        return r[0], r[1] * 2.0

    h = _compiled(lookup) if compiled else lookup
    g = _compiled(row) if compiled else row
    for i in (0, 1, 0, -1):
        h(i).data -= 0.5
    first, _ = g(1)
    return [v.data for v in E], h(2) is E[2] and h(-3) is E[0], first is rows[1][0]


def test_a_returned_pick_is_the_parameter_itself() -> None:
    assert _lookups(True) == _lookups(False) == ([0.0, 1.5, 2.5], True, True)


def pick_arg(xs: list[Value], i: int) -> Value:
    return xs[i]


def test_a_returned_pick_of_an_argument_is_that_argument() -> None:
    fast = _compiled(pick_arg)
    for i in (0, 1, 2, 1):
        xs = [Value(1.0), Value(2.0), Value(3.0)]
        assert fast(xs, i) is xs[i]


# --------------------------------------------------------------------------
# 5. outputs a replay cannot make again run eagerly
# --------------------------------------------------------------------------


def closures(x: float) -> tuple[Value, Callable[[float], Value], Iterator[Value]]:
    out = W * x
    return out, (lambda y: W * x * y), (W * t for t in (x, 2 * x))


def test_a_closure_or_generator_output_runs_eagerly() -> None:
    fast = _compiled(closures)
    with pytest.warns(CompileWarning, match="returns a function"):
        fast(1.0)
    for x in (2.0, 3.0):
        out, f, gen = fast(x)
        assert (out.data, f(3.0).data, [v.data for v in gen]) == (
            0.5 * x,
            0.5 * x * 3.0,
            [0.5 * x, 0.5 * 2 * x],
        )


Pair = collections.namedtuple("Pair", "a b")


@pytest.mark.parametrize(
    "fn", [lambda x: Pair(W * x, W + x), lambda x: collections.OrderedDict(a=W * x)]
)
def test_a_named_tuple_or_ordered_dict_output_is_rebuilt_as_its_type(
    fn: Callable[[float], Any],
) -> None:
    fast = _compiled(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for x in (1.0, 2.0, 3.0):
            got, want = fast(x), fn(x)
            assert type(got) is type(want) and repr(got) == repr(want)
    assert fast.traces == 1


def test_another_container_output_runs_eagerly() -> None:
    fn = lambda x: [W * x, collections.UserList([W])]  # noqa: E731
    fast = _compiled(fn)
    with pytest.warns(CompileWarning, match="returns a"):
        for x in (1.0, 2.0):
            got, want = fast(x), fn(x)
            assert type(got) is type(want) and repr(got) == repr(want)


# --------------------------------------------------------------------------
# 6. a pick read in a branch only
# --------------------------------------------------------------------------

PICKS = [Value(0.1), Value(0.2), Value(0.3)]


def branch_on_pick(n: int) -> Value:
    return W * (PICKS[n] if PICKS[n].data > 0.25 else -1.0)


def test_a_pick_read_only_in_a_branch() -> None:
    fast = _compiled(branch_on_pick)
    for n in (0, 1, 2, 0, 2):
        got = []
        for f in (branch_on_pick, fast):
            for p in [W, *PICKS]:
                p.grad = 0.0
            out = f(n)
            out.backward()
            got.append((out.data, W.grad, [p.grad for p in PICKS]))
        assert got[0] == got[1]


# --------------------------------------------------------------------------
# 7. a trace that builds no graph
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x,
        lambda x: None,
        lambda x: 2.0,
        lambda x: (x, None, "s"),
        lambda x: x * 2.0 + 1.0,
    ],
)
def test_a_trace_without_a_graph(fn: Callable[[float], Any]) -> None:
    fast = _compiled(fn)
    for x in (1.0, 2.0, -0.0):
        want, got = fn(x), fast(x)
        assert got == want and type(got) is type(want)


# --------------------------------------------------------------------------
# 8. identity of a picked entry
# --------------------------------------------------------------------------

WTE = [Value(0.1 * (k + 1)) for k in range(6)]


def distinct_in(tokens: list[int]) -> Value:
    seen: list[Value] = []
    total = Value(0.0)
    for t in tokens:
        e = WTE[t]
        if e not in seen:
            seen.append(e)
            total = total + e * e
    return total


def distinct_keys(tokens: list[int]) -> Value:
    uniq = {WTE[t]: None for t in tokens}
    return sum(uniq, Value(0.0)) * len({WTE[t] for t in tokens})


def equal_picks(i: int, j: int) -> Value:
    return WTE[0] * float(WTE[i] == WTE[j]) + WTE[1] * float(WTE[i] != WTE[3])


@pytest.mark.parametrize(
    ("fn", "calls"),
    [
        (distinct_in, [([3, 3, 3],), ([3, 1, 3],), ([0, 1, 2],)]),
        (distinct_keys, [([3, 3, 3],), ([3, 1, 3],), ([0, 1, 2],)]),
        (equal_picks, [(2, 2), (2, 3), (3, 3)]),
    ],
)
def test_identity_of_picks_is_eagers(fn: Callable[..., Value], calls: list[Any]) -> None:
    fast = _compiled(fn)
    with pytest.warns(CompileWarning, match="by identity"):
        for args in calls:
            assert fast(*args).data == fn(*args).data


def same_by_is(i: int, j: int) -> Value:
    return WTE[0] * float(WTE[i] is WTE[j]) + WTE[1] * float(WTE[i] is not WTE[3])


def same_by_id(i: int, j: int) -> Value:
    uniq = {id(WTE[t]): WTE[t] for t in (i, j)}
    return sum(uniq.values(), Value(0.0))


@pytest.mark.parametrize("fn", [same_by_is, same_by_id])
def test_is_and_id_of_picks_are_eagers(fn: Callable[[int, int], Value]) -> None:
    """``is``, ``is not`` and ``id()`` in a traced copy ask about the picked
    entry (rewrite: ``_op("is", ...)``), and the function runs eagerly."""
    fast = _compiled(fn)
    with pytest.warns(CompileWarning, match="by identity"):
        for i, j in [(2, 2), (2, 3), (3, 3), (1, 2)]:
            assert fast(i, j).data == fn(i, j).data
