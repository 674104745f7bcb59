"""compile and its arguments: what it keys, guards, rebuilds and hands to
the function (objects among the arguments, containers the function
changes, the same Value for several arguments, keyword arguments,
containers of other types, methods). Each case gives eager's numbers, or
runs eagerly with a CompileWarning."""

from __future__ import annotations

import collections
import warnings
from typing import Any, NamedTuple

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.compiler import Compiled, CompileWarning

pytest.importorskip("numpy")


def quiet(fn: Any, **options: Any) -> Any:
    """``chainrule.compile(fn, budget=False)``: traced at once."""
    return chainrule.compile(fn, budget=False, **options)


# -- 1. objects among the arguments: what the trace reads through them ------


class Model:
    def __init__(self, w: float = 0.5) -> None:
        self.w = Value(w)
        self.temperature = 1.0


def loss_fn(model: Model, x: float) -> Value:
    return model.w * x / model.temperature


def test_an_argument_objects_attributes_are_guarded() -> None:
    fast = quiet(loss_fn)
    m = Model()
    assert fast(m, 1.0).data == loss_fn(m, 1.0).data == 0.5
    assert fast(m, 1.0).data == 0.5 and fast.hits == 1
    m.temperature = 2.0  # a float attribute
    assert fast(m, 1.0).data == loss_fn(m, 1.0).data == 0.25
    m.w = Value(7.0)  # a parameter swapped
    out = fast(m, 1.0)
    assert out.data == loss_fn(m, 1.0).data == 3.5
    out.backward()
    assert m.w.grad == 0.5
    m.w.data = 3.0  # a leaf's data: an input, replayed
    hits = fast.hits
    assert fast(m, 1.0).data == 1.5 and fast.hits == hits + 1


def test_an_argument_objects_lists_are_guarded() -> None:
    class Batch:
        def __init__(self, xs: list[float]) -> None:
            self.xs = xs

    w = Value(3.0)

    def f(b: Batch) -> Value:
        return sum((w * x for x in b.xs), Value(0.0))

    fast = quiet(f)
    b = Batch([1.0, 2.0])
    assert fast(b).data == 9.0
    b.xs = [5.0, 7.0]
    assert fast(b).data == f(b).data == 36.0
    b.xs[0] = 1.0  # in place
    assert fast(b).data == f(b).data == 24.0


def test_a_function_that_changes_an_argument_object_runs_eagerly() -> None:
    class Counter:
        def __init__(self) -> None:
            self.calls = 0

    w = Value(2.0)

    def f(c: Counter, x: float) -> Value:
        c.calls += 1
        return w * x * c.calls

    fast, c, eager = quiet(f), Counter(), Counter()
    with pytest.warns(CompileWarning, match="Counter"):
        got = [fast(c, 1.0).data for _ in range(3)]
    assert got == [f(eager, 1.0).data for _ in range(3)] == [2.0, 4.0, 6.0]
    assert c.calls == 3


# -- 2. containers among the arguments: the caller's own ----------------------


def test_a_list_the_function_changes_in_place_runs_eagerly_on_the_callers_list() -> None:
    w = Value(2.0)

    def step(xs: list[float]) -> Value:
        xs[0] = xs[0] * 2.0
        return w * xs[0]

    fast, xs, ys = quiet(step), [1.0], [1.0]
    with pytest.warns(CompileWarning, match="in place"):
        got = [fast(xs).data for _ in range(3)]
    assert got == [step(ys).data for _ in range(3)] == [4.0, 8.0, 16.0]
    assert xs == ys == [8.0] and type(xs[0]) is float


@pytest.mark.parametrize("budget", [False, True])
def test_a_list_the_function_appends_to_is_the_callers(budget: bool) -> None:
    w = Value(2.0)

    def step(x: float, history: list[Any]) -> Value:
        out = w * x
        for _ in range(300):  # (long enough for the budget to trace it)
            out = out * 1.0
        history.append(out.data)
        return out

    fast = chainrule.compile(step, budget=budget)
    mine: list[Any] = []
    theirs: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for x in (1.0, 2.0, 3.0, 4.0):
            assert fast(x, mine).data == step(x, theirs).data
    assert mine == theirs == [2.0, 4.0, 6.0, 8.0]
    assert all(type(h) is float for h in mine)


def test_a_dict_the_function_changes_is_the_callers() -> None:
    w = Value(2.0)

    def f(d: dict[str, Any]) -> Value:
        d["seen"] = d.get("seen", 0) + 1
        return w * d["x"]

    fast, mine, theirs = quiet(f), {"x": 1.5}, {"x": 1.5}
    with pytest.warns(CompileWarning, match="dict"):
        assert fast(mine).data == f(theirs).data == 3.0
    assert fast(mine).data == f(theirs).data
    assert mine == theirs == {"x": 1.5, "seen": 2}


def test_the_same_list_for_two_arguments_runs_eagerly() -> None:
    w = Value(2.0)

    def f(a: list[float], b: list[float]) -> Value:
        a.append(1.0)
        b.append(2.0)
        return w * len(a)

    fast, mine, theirs = quiet(f), [0.5], [0.5]
    with pytest.warns(CompileWarning, match="one list or dict is passed twice"):
        assert fast(mine, mine).data == f(theirs, theirs).data == 6.0
    assert mine == theirs == [0.5, 1.0, 2.0]


# -- 3. the same Value for several arguments ----------------------------------


def test_the_same_value_for_two_arguments_is_another_graph() -> None:
    def f(a: Value, b: Value) -> Value:
        return a * b

    v, u = Value(2.0), Value(3.0)
    fast = quiet(f)
    assert fast(v, v).data == 4.0
    assert fast(v, u).data == f(v, u).data == 6.0
    g = quiet(f)
    g(v, u)
    v.grad = 0.0
    out = g(v, v)
    out.backward()
    assert (out.data, v.grad) == (4.0, 4.0)
    assert len(g.keys()) == 2


def test_a_value_argument_that_it_also_reads_as_a_global() -> None:
    w = Value(2.0)

    def f(a: Value) -> Value:
        return w * a

    u = Value(3.0)
    fast = quiet(f)
    assert fast(w).data == 4.0
    assert fast(u).data == f(u).data == 6.0  # not u * u
    back = quiet(f)
    assert back(u).data == 6.0
    w.grad = 0.0
    out = back(w)
    out.backward()
    assert (out.data, w.grad) == (4.0, 4.0)

    m = Model(2.0)
    g = quiet(lambda m, a: m.w * a)
    assert g(m, m.w).data == 4.0
    assert g(m, u).data == 6.0


def test_a_parameter_passed_for_two_arguments_gets_both_gradients() -> None:
    def run(compiled: bool) -> list[tuple[float, float, float]]:
        a, c = Value(0.5), Value(2.0)
        opt = optim.SGD([a, c], lr=0.1)

        def loss(p: Value, q: Value, x: float) -> Value:
            return p * q * x

        step = quiet(loss, optimizer=opt)
        out = []
        for args in ((a, c, 1.0), (a, a, 1.0), (a, a, 2.0), (a, c, 2.0)):
            if compiled:
                L = step(*args)
            else:
                L = loss(*args)
                opt.zero_grad()
                L.backward()
                opt.step()
            out.append((L.data, a.grad, a.data))
        return out

    assert run(True) == run(False)


# -- 4. keyword arguments and containers of other types -----------------------


def test_keyword_arguments() -> None:
    w = Value(2.0)

    def f(x: float, scale: float = 1.0, *, shift: float = 0.0) -> Value:
        return w * x * scale + shift

    fast = quiet(f)
    assert fast(1.0, scale=3.0).data == f(1.0, scale=3.0).data == 6.0
    assert fast(2.0, scale=5.0).data == f(2.0, scale=5.0).data == 20.0
    assert fast.hits == 1 and fast.pinned is None  # the keyword's float an input
    assert fast(1.0, shift=0.5).data == 2.5  # another name: another key
    assert fast(1.0, 3.0).data == 6.0  # positionally: another key
    assert fast(x=1.0, scale=2.0, shift=1.0).data == 5.0
    with pytest.raises(TypeError):
        fast(1.0, nope=2.0)


class Batch(NamedTuple):
    x: float
    y: float


def test_named_tuples_as_arguments_and_results() -> None:
    w = Value(2.0)

    def f(b: Batch) -> Batch:
        return Batch((w * b.x - b.y) ** 2, w + b.x)

    fast = quiet(f)
    for b in (Batch(1.0, 0.5), Batch(2.0, 1.0)):
        got, want = fast(b), f(b)
        assert type(got) is Batch
        assert (got.x.data, got.y.data) == (want.x.data, want.y.data)
    assert fast.hits == 1


def test_a_defaultdict_argument_keeps_its_default() -> None:
    w = Value(2.0)

    def f(d: dict[str, float]) -> Value:
        return w * d["x"] + d["bias"]

    fast = quiet(f)
    mine = collections.defaultdict(float, x=1.0)
    theirs = collections.defaultdict(float, x=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        assert fast(mine).data == f(theirs).data == 2.0
        assert fast(mine).data == f(theirs).data
    assert mine == theirs and type(mine) is collections.defaultdict


def test_an_ordered_dict_result_is_an_ordered_dict() -> None:
    w = Value(2.0)
    fast = quiet(lambda x: collections.OrderedDict(loss=w * x))
    fast(1.0)
    out = fast(3.0)
    assert type(out) is collections.OrderedDict and out["loss"].data == 6.0


def test_another_container_subclass_runs_eagerly() -> None:
    class Row(list[Any]):
        pass

    w = Value(2.0)

    def f(r: Row) -> Value:
        return w * r[0]

    fast = quiet(f)
    with pytest.warns(CompileWarning, match="Row"):
        assert fast(Row([1.5])).data == 3.0
    assert fast(Row([2.5])).data == 5.0

    g = quiet(lambda x: Row([w * x]))
    with pytest.warns(CompileWarning, match="Row"):
        out = g(1.5)
    assert type(out) is Row and out[0].data == 3.0 and type(out[0]) is Value


# -- 5. methods -----------------------------------------------------------------


def test_a_compiled_method() -> None:
    class Net:
        def __init__(self, w: float) -> None:
            self.w = Value(w)

        @chainrule.compile(budget=False)
        def loss(self, x: float) -> Value:
            return (self.w * x - 1.0) ** 2

    a, b = Net(0.5), Net(1.0)
    assert a.loss(2.0).data == 0.0
    assert b.loss(2.0).data == 1.0  # never a's trace
    assert a.loss(4.0).data == 1.0
    a.w = Value(1.0)
    assert a.loss(2.0).data == 1.0
    assert isinstance(Net.loss, Compiled)
    assert Net.loss(b, 3.0).data == 4.0
