"""chainrule.compile and round thirty-four: a parameter read besides the
arguments wired into a node between calls (microgpt's ``w.__init__(d,
children, local_grads)``, micrograd's ``_prev`` and ``_backward``), a node
built inside through Value's own slots. Eager's numbers, never another."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.compiler import CompileWarning
from chainrule.value.protocols import MICROGPT

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _microgpt_rewire(w: Value, a: Value) -> None:
    w.__init__(w.data, (a,), (2.0,))  # type: ignore[misc]


def _micrograd_rewire(w: Value, a: Value) -> None:
    w._prev = (a,)

    def _backward() -> None:
        a.grad += 2.0 * w.grad

    w._backward = _backward


def _side_by_side(
    f: Callable[[float], Value],
    params: list[Value],
    xs: tuple[float, ...],
    before: Callable[[int], None] = lambda k: None,
) -> list[tuple[float, ...]]:
    """Each call eagerly then compiled (``before(k)`` ahead of call ``k``): the
    number and the parameters' gradients, eager's equal to compiled's; the
    last call's."""
    fast = chainrule.compile(f, budget=False)
    seen: list[tuple[float, ...]] = []
    for k, x in enumerate(xs):
        before(k)
        for g in (f, fast):
            for p in params:
                p.grad = 0.0
            out = g(x)
            out.backward()
            seen.append((out.data, *(p.grad for p in params)))
    assert seen[0::2] == seen[1::2]
    return seen[-1]


@pytest.mark.parametrize("rewire", [_microgpt_rewire, _micrograd_rewire])
def test_a_parameter_made_a_node_between_calls_passes_its_gradient_on(
    rewire: Callable[[Value, Value], None],
) -> None:
    a, w = Value(0.5), Value(0.3)

    def f(x: float) -> Value:
        return w * x + 1.0

    def before(k: int) -> None:
        if k == 2:
            rewire(w, a)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        last = _side_by_side(f, [w, a], (1.0, 2.0, 2.0, 3.0), before)
    assert last == (1.9, 3.0, 6.0)  # a's gradient, through w: 2 * 3


def test_a_parameter_made_a_node_between_training_steps_passes_its_gradient_on() -> None:
    def run(compiled: bool) -> list[float]:
        a, w = Value(0.5), Value(0.3)
        opt = optim.SGD([w, a], lr=0.1)

        def loss(x: float) -> Value:
            return (w * x - 1.0) ** 2

        step = chainrule.compile(loss, optimizer=opt, budget=False) if compiled else None
        for k, x in enumerate((1.0, 2.0, 1.5, 3.0)):
            if k == 2:
                _microgpt_rewire(w, a)
            if step is not None:
                step(x)
            else:
                out = loss(x)
                opt.zero_grad()
                out.backward()
                opt.step()
        return [w.data, a.data]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, compiled = run(False), run(True)
    assert compiled == eager
    assert eager[1] != 0.5  # a learned, through w


# -- a node built by hand inside through Value's slots (AW s13) ---------------

_SLOTS = {k: Value.__dict__[k] for k in ("data", "grad", "_prev", "_local")}


def test_a_node_built_through_the_slots_inside_runs_eagerly_named_as_such() -> None:
    w, u = Value(0.3), Value(-0.7)

    def f(x: float) -> Value:
        a = w * x
        n = Value.__new__(Value)
        _SLOTS["data"].__set__(n, a.data * u.data)
        _SLOTS["grad"].__set__(n, 0.0)
        _SLOTS["_prev"].__set__(n, (a, u))
        _SLOTS["_local"].__set__(n, (u.data, a.data, MICROGPT))
        return n + w

    with pytest.warns(CompileWarning, match="builds a node by hand on Values made inside it"):
        last = _side_by_side(f, [w, u], (1.0, 2.0, 3.0))
    assert last == (0.3 * 3.0 * -0.7 + 0.3, -0.7 * 3.0 + 1.0, 0.3 * 3.0)


# -- a large array read besides the arguments, changed in place ---------------


@pytest.mark.parametrize("entries", [1_000, 200_000])
def test_a_global_array_changed_in_place_is_read_afresh_or_runs_eagerly(entries: int) -> None:
    np = pytest.importorskip("numpy")
    w = Value(0.5)
    table = np.ones(entries)

    def f(i: int) -> Value:
        return w * float(table[i]) + w * w

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = []
        for k in range(4):
            if k == 2:
                table[3] = 7.0
            got.append((f(3).data, fast(3).data))
    assert got == [(0.75, 0.75), (0.75, 0.75), (3.75, 3.75), (3.75, 3.75)]
    said = [str(m.message) for m in caught if m.category is CompileWarning]
    if entries * 8 > (1 << 20):
        assert len(said) == 1 and "numpy.ndarray of 1,600,000 bytes" in said[0]
    else:
        assert said == [] and fast.stats()["hits"] >= 1
