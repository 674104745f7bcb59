"""chainrule.compile and round thirty-four: a parameter read besides the
arguments wired into a node between calls (microgpt's ``w.__init__(d,
children, local_grads)``, micrograd's ``_prev`` and ``_backward``), a node
built inside through Value's own slots. Eager's numbers, never another."""

from __future__ import annotations

import math
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


# -- a complex's zero sign changed between calls (AX2) ------------------------

SIGNED = {"c": 0j}


class _Holder:
    c = 0j


def _through_global(x: float, w: Value) -> Value:
    return w * x * math.copysign(1.0, SIGNED["c"].real)


def _through_class(x: float, w: Value) -> Value:
    return w * x * math.copysign(1.0, _Holder.c.imag)


def _through_key(x: float, w: Value) -> Value:
    (key,) = TABLE.keys()
    return w * x * math.copysign(1.0, key.real)


TABLE: dict[complex, int] = {0j: 1}


@pytest.mark.parametrize(
    ("f", "flip"),
    [
        (_through_global, lambda: SIGNED.update(c=complex(-0.0, 0.0))),
        (_through_class, lambda: setattr(_Holder, "c", complex(0.0, -0.0))),
        (_through_key, lambda: (TABLE.clear(), TABLE.update({complex(-0.0, 0.0): 1}))),
    ],
)
def test_a_complex_whose_zero_changes_sign_traces_again(
    f: Callable[[float, Value], Value], flip: Callable[[], None]
) -> None:
    SIGNED["c"], _Holder.c = 0j, 0j
    TABLE.clear()
    TABLE[0j] = 1
    w = Value(0.5)
    fast = chainrule.compile(f, budget=False)
    assert [fast(x, w).data for x in (1.0, 2.0)] == [0.5, 1.0]
    flip()
    assert f(2.0, w).data == -1.0
    assert fast(2.0, w).data == -1.0


# -- an optimizer's step that raises in a compiled step (AX1) -----------------


def test_a_step_that_raises_leaves_this_steps_gradients_as_eagerly() -> None:
    def run(compiled: bool) -> tuple[str, list[float], list[float]]:
        w = [Value(0.5), Value(-1.5)]
        opt = optim.SGD(list(w), lr=0.01, momentum=0.9)

        def loss(x: float) -> Value:
            return (w[0] * x + w[1]) ** 2

        def eager_step(x: float) -> Value:
            out = loss(x)
            opt.zero_grad()
            out.backward()
            opt.step()
            return out

        step = chainrule.compile(loss, optimizer=opt, budget=False) if compiled else eager_step
        step(1.0)
        step(2.0)
        before = [p.grad for p in w]
        opt.params.append(Value(0.0))  # the momentum buffer one short
        with pytest.raises(ValueError) as raised:
            step(3.0)
        return str(raised.value), before, [p.grad for p in w]

    eager, compiled = run(False), run(True)
    assert compiled == eager
    message, before, after = eager
    assert "could not be broadcast" in message
    assert after != before and after[0] == after[1] * 3.0  # d/dw0 = 3 * d/dw1 at x = 3
