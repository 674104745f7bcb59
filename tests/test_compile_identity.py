"""chainrule.compile and what a replay cannot see again (probe 2): identity
of a pick asked through C code, dict keys of arguments, hidden state behind
a subclass or a context, a counter kept on the function itself. Eager's
numbers, or one CompileWarning and eager's numbers: never a silent other
number."""

from __future__ import annotations

import contextvars
import dataclasses
import gc
import operator
import random
import resource
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def data(out: Any) -> Any:
    return out.data if isinstance(out, Value) else out


def same_as_eager(
    f: Callable[..., Any], calls: list[tuple[Any, ...]], match: str | None, reset: Any = None
) -> None:
    """``f`` compiled gives eager's numbers on each call; with ``match``, one
    CompileWarning that matches it, else none (``reset``: between the runs)."""
    if reset is not None:
        reset()
    eager = [data(f(*args)) for args in calls]
    if reset is not None:
        reset()
    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = [data(fast(*args)) for args in calls]
    assert compiled == eager
    found = [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]
    if match is None:
        assert found == []
    else:
        assert len(found) == 1 and match in found[0], found


# --------------------------------------------------------------------------
# 3. Hidden state behind a subclass, a context, a counter
# --------------------------------------------------------------------------

W = Value(2.0)


class RNG(random.Random):
    """A user's seeded generator: its methods are random.Random's."""


def test_a_subclass_of_random_runs_eagerly() -> None:
    rng = RNG(0)
    same_as_eager(lambda x: W * (x + rng.random()), [(1.0,)] * 3, "RNG.random", lambda: rng.seed(0))


def test_a_context_variable_runs_eagerly() -> None:
    scale = contextvars.ContextVar("scale", default=1.0)
    f = lambda x: W * x * scale.get()  # noqa: E731
    fast = chainrule.compile(f, budget=False)
    with pytest.warns(CompileWarning, match="ContextVar.get"):
        got = []
        for s in (1.0, 2.0, 3.0):
            scale.set(s)
            got.append(fast(1.5).data)
    assert got == [3.0, 6.0, 9.0]


@pytest.mark.parametrize(
    ("read", "name"),
    [
        (lambda: resource.getrusage(resource.RUSAGE_SELF).ru_utime * 0.0, "getrusage"),
        (lambda: gc.get_count()[0] * 0.0, "get_count"),
    ],
)
def test_counters_run_eagerly(read: Callable[[], float], name: str) -> None:
    fast = chainrule.compile(lambda x: W * x + read(), budget=False)
    with pytest.warns(CompileWarning, match=name):
        assert fast(1.5).data == 3.0


# --------------------------------------------------------------------------
# 2. Dict keys of arguments: by type and value, not by ==
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Task:
    """Hashed and compared by name only."""

    name: str
    weight: float = dataclasses.field(compare=False)


@pytest.mark.parametrize("kind", [dict, OrderedDict, lambda d: defaultdict(float, d)])
def test_dict_keys_by_type_and_bits(kind: Callable[[Any], Any]) -> None:
    by_sign = lambda d: sum((W / k * v for k, v in d.items()), Value(0.0))  # noqa: E731
    same_as_eager(by_sign, [(kind({0.0: 1.0}),), (kind({-0.0: 1.0}),)], None)
    by_name = lambda d: sum((W * len(str(k)) * v for k, v in d.items()), Value(0.0))  # noqa: E731
    calls = [(kind({1: 1.0}),), (kind({True: 1.0}),), (kind({1.0: 1.0}),), (kind({(1,): 1.0}),)]
    same_as_eager(by_name, calls + [(kind({(True,): 1.0}),)], None)


def test_object_keys_by_identity() -> None:
    weighted = lambda d: sum((W * t.weight * s for t, s in d.items()), Value(0.0))  # noqa: E731
    same_as_eager(weighted, [({Task("a", w): 1.0},) for w in (1.0, 2.0, 3.0)], None)


# --------------------------------------------------------------------------
# 1. Identity of a pick asked through C code called for the user
# --------------------------------------------------------------------------

E = [Value(0.5), Value(1.5), Value(-1.0)]
PICK = "compares an entry picked by an int argument"


def test_dict_fromkeys_of_picks_gives_eager_numbers_and_gradients() -> None:
    def loss(a: int, b: int) -> Value:
        rows = list(dict.fromkeys([E[a], E[b]]))
        return E[a] * E[b] + 0.1 * sum(r * r for r in rows)

    fast = chainrule.compile(loss, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for a, b in [(0, 1), (1, 1), (2, 2)]:
            results = []
            for f in (loss, fast):
                for p in E:
                    p.grad = 0.0
                out = f(a, b)
                out.backward()
                results.append((out.data, [p.grad for p in E]))
            assert results[0] == results[1]
    assert any(PICK in str(w.message) for w in caught if w.category is CompileWarning)


def index_of(i: int) -> Value:
    return E[E.index(E[i])] * 2.0


@pytest.mark.parametrize(
    "f",
    [
        lambda i, j: E[0] * E.count(E[i]),
        lambda i, j: E[0] * float(operator.contains(E, E[i])),
        lambda i, j: E[0] * len(set(map(id, [E[i], E[j]]))),
        lambda i, j: E[0] * len(sorted([E[i], E[j]], key=id)) + sorted([E[i], E[j]], key=id)[0],
        lambda i, j: E[0] * float(E[i].__hash__() == E[j].__hash__()),
        lambda i, j: index_of(i) + E[j],
    ],
)
def test_identity_through_c_code_runs_eagerly(f: Callable[..., Any]) -> None:
    same_as_eager(f, [(1, 1), (1, 2), (0, 0)], PICK)


def test_compiles_own_use_of_picks_is_not_a_comparison() -> None:
    same_as_eager(lambda i, j: E[i] * E[j] + sum([E[i], E[j]], Value(0.0)), [(1, 1), (1, 2)], None)


# --------------------------------------------------------------------------
# 4. A counter kept as an attribute of the function itself
# --------------------------------------------------------------------------


def counted(x: float) -> Value:
    counted.calls = getattr(counted, "calls", 0) + 1  # type: ignore[attr-defined]
    return W * x * counted.calls  # type: ignore[attr-defined]


def counted_by_setattr(x: float) -> Value:
    setattr(counted_by_setattr, "calls", getattr(counted_by_setattr, "calls", 0) + 1)  # noqa: B010
    return W * x * counted_by_setattr.calls  # type: ignore[attr-defined]


@pytest.mark.parametrize("f", [counted, counted_by_setattr])
def test_a_counter_on_the_function_runs_eagerly(f: Any) -> None:
    same_as_eager(
        f, [(1.0,)] * 3, "changes an attribute of a function", lambda: setattr(f, "calls", 0)
    )
    assert f.calls == 3


def test_a_counter_on_the_compiled_function_runs_eagerly() -> None:
    @chainrule.compile(budget=False)
    def step(x: float) -> Value:
        step.calls += 1
        return W * x * step.calls

    step.calls = 0
    with pytest.warns(CompileWarning, match="changes an attribute of a function"):
        assert [step(1.0).data for _ in range(3)] == [2.0, 4.0, 6.0]
