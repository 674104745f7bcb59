"""chainrule.compile and the sixth probe: what the rewritten copies see.
A class that fn instantiates runs its ``__init__`` as a copy (a random draw
there is seen); chainrule's own draws (``nn.Neuron``'s weights) are seen
however they are reached; C functions that tell objects apart by identity
(``operator.is_``, ``object.__hash__``...) answer for the entry a pick
``W[i]`` is; a chained comparison with ``is`` links is rewritten link by link."""

from __future__ import annotations

import functools
import itertools
import operator
import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value, nn
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def runs(fn: Callable[..., Any], calls: list[tuple[Any, ...]], seed: int | None = None) -> Any:
    """Eager's and compiled's ``.data`` over ``calls`` (``random`` seeded
    with ``seed`` before each run), and how many CompileWarnings compiled gave."""

    def run(f: Callable[..., Any]) -> list[Any]:
        if seed is not None:
            random.seed(seed)
        return [f(*args).data for args in calls]

    fast = chainrule.compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = run(fast)
    eager = run(fn)
    return eager, compiled, sum(issubclass(w.category, CompileWarning) for w in caught)


# ---------------------------------------------------------------- finding 1

w = Value(0.5)


class Drop:
    """Dropout whose decision is drawn when the layer is made."""

    def __init__(self, p: float) -> None:
        self.keep = random.random() > p

    def __call__(self, v: Value) -> Value:
        return v if self.keep else v * 0.0


class Noisy:
    """A Python ``__new__`` that draws, and an ``__init__`` that draws."""

    def __new__(cls, scale: float) -> Noisy:
        obj = super().__new__(cls)
        return obj

    def __init__(self, scale: float) -> None:
        self.noise = random.gauss(0.0, scale)


def test_random_draw_in_init_of_class_made_inside_fn_runs_eagerly() -> None:
    """``Drop(0.5)(w * x)``: the draw in ``__init__`` is seen (the class call
    runs its ``__init__`` as a copy): eager's masks on every call."""

    def f(x: float) -> Value:
        return Drop(0.5)(w * x)

    eager, compiled, warned = runs(f, [(1.0,)] * 6, seed=0)
    assert compiled == eager
    assert len(set(eager)) == 2  # the seed gives both decisions
    assert warned >= 1


def test_class_made_inside_fn_with_python_new_draws_seen() -> None:
    def f(x: float) -> Value:
        return w * x + Noisy(1.0).noise

    eager, compiled, warned = runs(f, [(1.0,)] * 3, seed=1)
    assert compiled == eager
    assert len(set(eager)) == 3
    assert warned >= 1


def test_class_made_inside_fn_keeps_construction_semantics() -> None:
    """The copied class call is ``type.__call__``'s: ``__init__`` returning
    a value is eager's TypeError; a ``__new__`` returning another type skips
    ``__init__``; no draw: no warning."""

    class Bad:
        def __init__(self) -> None:
            return 1  # type: ignore[return-value]

    class Other:
        def __new__(cls, v: Value) -> Any:
            return v * 2.0

        def __init__(self, v: Value) -> None:
            raise AssertionError("not called: __new__ returned another type")

    class Scale:
        def __init__(self, k: float) -> None:
            self.k = k

    def f(x: float) -> Value:
        return Other(w * Scale(x).k)

    eager, compiled, warned = runs(f, [(1.0,), (3.0,)])
    assert compiled == eager == [1.0, 3.0]
    assert warned == 0

    def g(x: float) -> Value:
        Bad()
        return w * x

    fast = chainrule.compile(g)
    with pytest.raises(TypeError, match="__init__\\(\\) should return None"):
        g(1.0)
    with pytest.raises(TypeError, match="__init__\\(\\) should return None"):
        fast(1.0)


def test_neuron_built_inside_fn_runs_eagerly() -> None:
    """``nn.Neuron(1)`` built inside fn draws its weights each call."""

    def g(x: float) -> Value:
        return nn.Neuron(1)([x]) * w

    eager, compiled, warned = runs(g, [(1.0,)] * 4, seed=0)
    assert compiled == eager
    assert len(set(eager)) > 1
    assert warned >= 1


class Net(nn.Module):
    """A user's module whose ``__init__`` calls ``super()`` (not copied)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Layer(1, 1)

    def __call__(self, x: Any) -> Any:
        return self.layer(x)

    def parameters(self) -> list[Value]:
        return self.layer.parameters()


def test_chainrules_own_draw_seen_in_code_not_copied() -> None:
    """``Net``'s ``__init__`` runs as it is (``super()``): the Neuron's draw
    of its weights is chainrule's own, seen all the same."""

    def h(x: float) -> Value:
        return Net()([x]) * w

    eager, compiled, warned = runs(h, [(1.0,)] * 3, seed=0)
    assert compiled == eager
    assert len(set(eager)) > 1
    assert warned >= 1


# ---------------------------------------------------------------- finding 2

W = [Value(0.5), Value(1.5)]
PAIRS = [(0, 0), (0, 1), (1, 1), (1, 0)]


def same_by_is(i: int, j: int) -> bool:
    return bool(operator.is_(W[i], W[j]))


def same_by_is_not(i: int, j: int) -> bool:
    return not operator.is_not(W[i], W[j])


def same_by_hash(i: int, j: int) -> bool:
    return object.__hash__(W[i]) == object.__hash__(W[j])


def same_by_repr(i: int, j: int) -> bool:
    return object.__repr__(W[i]) == object.__repr__(W[j])


def same_by_eq(i: int, j: int) -> bool:
    return object.__eq__(W[i], W[j]) is True


def same_by_ne(i: int, j: int) -> bool:
    return object.__ne__(W[i], W[j]) is False


def same_by_map(i: int, j: int) -> bool:
    return list(map(operator.is_, [W[i]], [W[j]])) == [True]


def same_by_partial(i: int, j: int) -> bool:
    return bool(functools.partial(operator.is_, W[i])(W[j]))


def same_by_partial_in_map(i: int, j: int) -> bool:
    return list(map(functools.partial(operator.is_, W[i]), [W[j]])) == [True]


def same_by_starmap(i: int, j: int) -> bool:
    return list(itertools.starmap(operator.is_, [(W[i], W[j])])) == [True]


def same_by_sorted_key(i: int, j: int) -> bool:
    keys = sorted([W[i], W[j]], key=object.__hash__)
    return object.__hash__(keys[0]) == object.__hash__(keys[1])


@pytest.mark.parametrize(
    "same",
    [
        same_by_is,
        same_by_is_not,
        same_by_hash,
        same_by_repr,
        same_by_eq,
        same_by_ne,
        same_by_map,
        same_by_partial,
        same_by_partial_in_map,
        same_by_starmap,
        same_by_sorted_key,
    ],
)
def test_identity_of_picks_through_c_functions_is_the_entries(
    same: Callable[[int, int], bool],
) -> None:
    def f(i: int, j: int) -> Value:
        return W[i] * 2.0 + (1.0 if same(i, j) else 0.0)

    eager, compiled, warned = runs(f, PAIRS)
    assert eager == [2.0, 1.0, 4.0, 3.0]
    assert compiled == eager
    assert warned >= 1


def test_object_eq_returned_is_eagers() -> None:
    def f(i: int, j: int) -> Any:
        return object.__eq__(W[i], W[j])

    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [fast(i, j) for i, j in PAIRS] == [f(i, j) for i, j in PAIRS]


def test_partial_of_user_function_is_followed() -> None:
    """A ``functools.partial`` called inside fn calls its function as the
    copies call it: a draw inside is seen."""

    def noisy(v: Value, scale: float) -> Value:
        return v + random.gauss(0.0, scale)

    def f(x: float) -> Value:
        return functools.partial(noisy, scale=1.0)(w * x)

    eager, compiled, warned = runs(f, [(1.0,)] * 3, seed=2)
    assert compiled == eager
    assert warned >= 1


# ---------------------------------------------------------------- finding 3


def test_chained_is_on_picks() -> None:
    def f(i: int, j: int) -> Value:
        same = W[i] is W[j] is not None
        return W[i] * 2.0 + (1.0 if same else 0.0)

    eager, compiled, warned = runs(f, PAIRS)
    assert eager == [2.0, 1.0, 4.0, 3.0]
    assert compiled == eager
    assert warned >= 1


def test_chained_compare_keeps_python_semantics() -> None:
    """Each operand evaluated once, left to right, short-circuit; the
    value of the failing link (or of the last) is the result."""
    seen: list[str] = []

    def note(name: str, v: Any) -> Any:
        seen.append(name)
        return v

    def f(x: float) -> Value:
        a = note("a", 1) < note("b", 2) is not note("c", None) is not note("d", 3)
        b = note("e", 1) is note("f", 2) < note("g", 3)
        c = 0 < note("h", x) <= note("i", 2) is not None
        return w * x + float(a) + 10.0 * float(b) + 100.0 * float(c)

    eager = f(1.0).data
    eager_seen = list(seen)
    seen.clear()
    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)  # (seen.append: eager, warned)
        assert fast(1.0).data == eager
    assert seen == eager_seen == ["a", "b", "c", "d", "e", "f", "h", "i"]
