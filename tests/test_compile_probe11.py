"""chainrule.compile and the eleventh probe (round seventeen): the float
an operation hands back may be an object eager code already holds
(``relu`` hands back its input's, ``max`` and ``softplus`` the shared
``math.nan``), and ``Value(x)`` holds ``x`` itself. Identity (``is``, a
nan found in a list) asked of them is eager's on the call that traces,
and later calls run eagerly; never a silent other answer."""

from __future__ import annotations

import math
import warnings

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning
from test_compile_probe10 import _both

pytestmark = pytest.mark.usefixtures("trace_every_graph")


W = Value(2.0)


def test_a_leaf_made_from_a_float_argument_holds_that_very_float() -> None:
    def f(x: float) -> Value:
        return W * (1.0 if Value(x).data is x else 3.0)

    eager, got, words = _both(f, [(float("1.5"),), (float("-2.5"),)])
    assert eager == [2.0, 2.0]
    assert got == eager
    assert words == ""  # (a guard that the argument is the leaf's float: always)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_relu_hands_back_its_input_float_itself(sign: float) -> None:
    p = Value(1.5 * sign)

    def f(x: float) -> Value:
        h = p * x
        return W * (1.0 if h.relu().data is h.data else 3.0)

    eager, got, words = _both(f, [(1.0,), (2.0,), (-1.0,)])
    assert eager == ([2.0, 2.0, 6.0] if sign > 0 else [6.0, 6.0, 2.0])
    assert got == eager
    assert "asks whether two objects are one" in words


def test_a_nan_through_relu_is_found_in_a_list_by_identity() -> None:
    nan = float("nan")
    p = Value(nan)

    def found(x: float) -> Value:
        return W * float([x].count(Value(x).relu().data))

    def member(x: float) -> Value:
        return W * (1.0 if x in [Value(x).relu().data] else 3.0)

    def leaf() -> Value:
        return W * (1.0 if p.relu().data in [p.data] else 3.0)

    for f, args in [(found, (nan,)), (member, (nan,)), (leaf, ())]:
        eager, got, _ = _both(f, [args] * 3)
        assert eager == [2.0, 2.0, 2.0]
        assert got == eager


def test_max_and_softplus_of_a_nan_hand_back_one_shared_nan() -> None:
    a, b, c, d = Value(1.0), Value(math.nan), Value(3.0), Value(math.nan)

    def f() -> Value:
        return W * (1.0 if a.max(b).data in [c.max(d).data] else 3.0)

    def g() -> Value:
        return W * float([b.softplus().data].count(d.softplus().data))

    def h() -> Value:
        return W * (1.0 if a.max(b).data in (math.nan, math.inf) else 3.0)

    for fn in (f, g, h):
        eager, got, _ = _both(fn, [()] * 2)
        assert eager == [2.0, 2.0]
        assert got == eager


def test_the_isnan_idiom_on_a_leaf_replays() -> None:
    """``v.data != v.data``: two reads of one Value's ``.data`` are one
    object, as eagerly; float's own ``!=`` asks no identity."""
    v = Value(1.0)

    def f(k: float) -> Value:
        return W * k * (0.0 if v.data != v.data else 1.0)

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = []
        for k, x in [(1.0, 1.0), (2.0, math.nan), (3.0, math.nan), (4.0, 2.0), (5.0, 2.0)]:
            v.data = x
            got.append(fast(k).data)
            assert got[-1] == f(k).data
    assert got == [2.0, 0.0, 0.0, 8.0, 10.0]
    assert fast.stats()["hits"] == 2


def test_a_module_found_by_name_is_guarded_where_it_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module the function finds in ``sys.modules`` (an ``import``
    inside it, ``importlib.import_module``, ``sys.modules[...]``) replaced
    there by another (as ``monkeypatch.setitem`` does: the number of
    modules stays the same) is a change: the next call traces again."""
    import importlib
    import sys
    import types

    real, fake = types.ModuleType("probe11_cfg"), types.ModuleType("probe11_cfg")
    real.scale, fake.scale = 2.0, 5.0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "probe11_cfg", real)

    def imported(x: float) -> Value:
        import probe11_cfg  # type: ignore[import-not-found]

        return W * x * probe11_cfg.scale

    def by_importlib(x: float) -> Value:
        return W * x * importlib.import_module("probe11_cfg").scale

    def by_entry(x: float) -> Value:
        return W * x * sys.modules["probe11_cfg"].scale

    for f in (imported, by_importlib, by_entry):
        fast = chainrule.compile(f, budget=False)
        for module, expected in [(real, 6.0), (fake, 15.0), (real, 6.0)]:
            monkeypatch.setitem(sys.modules, "probe11_cfg", module)
            assert f(1.5).data == expected
            assert fast(1.5).data == expected
        real.scale = 3.0  # type: ignore[attr-defined]
        assert fast(1.5).data == f(1.5).data == 9.0
        real.scale = 2.0  # type: ignore[attr-defined]


def test_a_module_unloaded_and_another_loaded_is_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    import types

    def f(x: float) -> Value:
        return W * x * (1.0 if "probe11_plugin_a" in sys.modules else 3.0)

    fast = chainrule.compile(f, budget=False)
    got = [fast(1.5).data]
    monkeypatch.setitem(sys.modules, "probe11_plugin_a", types.ModuleType("probe11_plugin_a"))
    got.append(fast(1.5).data)
    monkeypatch.delitem(sys.modules, "probe11_plugin_a")
    monkeypatch.setitem(sys.modules, "probe11_plugin_b", types.ModuleType("probe11_plugin_b"))
    got.append(fast(1.5).data)
    assert got == [9.0, 3.0, 9.0]


def test_a_compiled_function_called_while_another_traces_is_followed_as_a_helper() -> None:
    """Its float arguments stay inputs of the outer trace (one trace for
    every value), and identity inside it asks about the outer arguments."""
    vs = [Value(1.0), Value(2.0)]

    def lin(x: float, y: float) -> Value:
        return W * x + y

    def soft(vs: list[Value]) -> Value:
        m = max(v.data for v in vs)
        return sum((v - m).exp() for v in vs)  # type: ignore[return-value]

    def same(x: float, y: float) -> Value:
        return W * (1.0 if x is y else 3.0)

    lin_c, soft_c, same_c = (chainrule.compile(f, budget=False) for f in (lin, soft, same))
    outer = chainrule.compile(lambda x, y: lin_c(x, y) * 2.0 + soft_c(vs), budget=False)
    for k in range(6):
        vs[1].data = 2.0 + k
        x, y = 1.0 + k, 2.0 * k
        assert outer(x, y).data == (lin(x, y) * 2.0 + soft(vs)).data
    assert outer.stats()["traces"] == 1

    a, b = float("1.5"), float("1.5")
    outer_is = chainrule.compile(lambda x, y: same_c(x, y) * 2.0, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = [outer_is(x, y).data for x, y in [(a, a), (a, b), (a, a), (b, a)]]
    assert got == [4.0, 12.0, 4.0, 12.0]
    assert outer_is.stats()["eager"] is None
