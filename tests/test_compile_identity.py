"""chainrule.compile and what a replay cannot see again (probe 2): identity
of a pick asked through C code, dict keys of arguments, hidden state behind
a subclass or a context, a counter kept on the function itself. Eager's
numbers, or one CompileWarning and eager's numbers: never a silent other
number."""

from __future__ import annotations

import contextvars
import dataclasses
import gc
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
