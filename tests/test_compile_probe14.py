"""chainrule.compile and round twenty-seven: what the methods of an object
passed as an argument read (a global rebound in a notebook cell, a config
dict, a module's or a class's attribute, a helper redefined), a class's
metaclass, and a method added to or patched on ``Value``. Eager's numbers,
never another."""

from __future__ import annotations

import ctypes
import decimal
import itertools
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")

T = TypeVar("T")

TEMPERATURE = 1.0
CONFIG = {"scale": 1.0}
HP = types.ModuleType("chainrule_tests_hp")
HP.wd = 0.5  # type: ignore[attr-defined]


class Settings:
    decay = 0.5


def _helper(w: Value) -> Value:
    return w * 2.0


class Model:
    def __init__(self) -> None:
        self.w = Value(0.5)
        self.layers = [Layer()]

    def __call__(self, x: float) -> Value:
        return self.w * x * CONFIG["scale"] / TEMPERATURE

    def penalty(self) -> Value:
        return HP.wd * self.w * self.w + Settings.decay * self.w  # type: ignore[attr-defined]

    @property
    def shared(self) -> Value:
        return _helper(self.w)


class Layer:
    def forward(self, v: Value) -> Value:
        return v * TEMPERATURE


def _change(what: str) -> Iterator[None]:
    """Yield once before and once after ``what`` changes (restored after)."""
    global TEMPERATURE, _helper
    kept = (TEMPERATURE, CONFIG["scale"], HP.wd, Settings.decay, _helper)  # type: ignore[attr-defined]
    try:
        yield
        if what == "global":
            TEMPERATURE = 2.0
        elif what == "dict":
            CONFIG["scale"] = 3.0
        elif what == "module":
            HP.wd = 2.0  # type: ignore[attr-defined]
        elif what == "class":
            Settings.decay = 4.0
        else:
            _helper = lambda w: w * 5.0  # noqa: E731 (a helper redefined in a cell)
        yield
    finally:
        TEMPERATURE, CONFIG["scale"], HP.wd, Settings.decay, _helper = kept  # type: ignore[attr-defined]


def _loss(model: Model, x: float) -> Value:
    return model(x) + model.penalty() + model.shared + model.layers[0].forward(model.w)


@pytest.mark.parametrize("what", ["global", "dict", "module", "class", "helper"])
def test_what_an_argument_s_methods_read_is_guarded(what: str) -> None:
    """``loss(model, x)`` calls methods of ``model`` (``__call__``, a
    method, a property, a method of an object it holds) that read a global,
    a config dict, a module's or a class's attribute, a helper function:
    changed between calls, the next call is eager's (a replay kept the
    first number and gradient, with one trace and no warning)."""
    sys.modules[HP.__name__] = HP
    model = Model()
    fast = chainrule.compile(_loss, budget=False)
    seen: list[tuple[float, float, float, float]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in _change(what):
            for _ in range(2):
                row = []
                for g in (_loss, fast):
                    model.w.grad = 0.0
                    out = g(model, 2.0)
                    out.backward()
                    row += [out.data, model.w.grad]
                seen.append((row[0], row[1], row[2], row[3]))
    before = (1.0 + 0.125 + 0.25 + 1.0 + 0.5, 2.0 + 0.5 + 0.5 + 2.0 + 1.0)
    after = {
        "global": (0.5 + 0.125 + 0.25 + 1.0 + 1.0, 1.0 + 0.5 + 0.5 + 2.0 + 2.0),
        "dict": (3.0 + 0.125 + 0.25 + 1.0 + 0.5, 6.0 + 0.5 + 0.5 + 2.0 + 1.0),
        "module": (1.0 + 0.5 + 0.25 + 1.0 + 0.5, 2.0 + 2.0 + 0.5 + 2.0 + 1.0),
        "class": (1.0 + 0.125 + 2.0 + 1.0 + 0.5, 2.0 + 0.5 + 4.0 + 2.0 + 1.0),
        "helper": (1.0 + 0.125 + 0.25 + 2.5 + 0.5, 2.0 + 0.5 + 0.5 + 5.0 + 1.0),
    }[what]
    assert [(e, ge) for e, ge, _, _ in seen] == [before, before, after, after]
    assert [(c, gc) for _, _, c, gc in seen] == [before, before, after, after]
    assert fast.stats()["hits"] == 2  # (each state's second call replays)


class Meta(type):
    factor = 1.0

    @property
    def scale(cls) -> float:
        return CONFIG["scale"]


class Tuned(metaclass=Meta):
    pass


def _through_metaclass(x: Value) -> Value:
    return x * Tuned.factor * Tuned.scale  # type: ignore[attr-defined]


@pytest.mark.parametrize("what", ["attribute", "property"])
def test_an_attribute_of_a_class_s_metaclass_is_guarded(what: str) -> None:
    """``Tuned.factor`` found on the metaclass, ``Tuned.scale`` a property
    of it reading a global dict: changed between calls, eager's number."""
    fast = chainrule.compile(_through_metaclass, budget=False)
    got = []
    try:
        for step in range(4):
            if step == 2:
                if what == "attribute":
                    Meta.factor = 2.0
                else:
                    CONFIG["scale"] = 3.0
            got.append((_through_metaclass(Value(1.0)).data, fast(Value(1.0)).data))
    finally:
        Meta.factor, CONFIG["scale"] = 1.0, 1.0
    changed = 2.0 if what == "attribute" else 3.0
    assert got == [(1.0, 1.0), (1.0, 1.0), (changed, changed), (changed, changed)]
    assert fast.stats()["hits"] == 2


def _activated(x: Value) -> Value:
    return x.relu() * 2.0


def test_a_method_patched_on_value_is_followed() -> None:
    """``Value.relu = leaky`` in a notebook cell after a trace: the next
    call is eager's leaky relu (a replay ran the first relu)."""
    fast = chainrule.compile(_activated, budget=False)
    original: Callable[[Value], Value] = Value.relu
    got = []
    try:
        for step in range(4):
            if step == 2:
                Value.relu = lambda v: v * 0.1  # type: ignore[method-assign,assignment]
            got.append((_activated(Value(-1.0)).data, fast(Value(-1.0)).data))
    finally:
        Value.relu = original  # type: ignore[method-assign]
    assert got == [(0.0, 0.0), (0.0, 0.0), (-0.2, -0.2), (-0.2, -0.2)]
    assert fast.stats()["hits"] == 2


SEEN: dict[str, object] = {}


def _sees_value_s_namespace(x: Value) -> Value:
    SEEN.update(vars(Value))
    return x * 2.0


def test_the_names_a_trace_swaps_on_value_are_left_out_of_its_guard() -> None:
    """A trace sets some of Value's methods while it runs (another thread's
    trace shows them): those are the names the guard of Value's namespace
    leaves out (``sources.SWAPPED``), and no other; but for the engine's
    ``+`` and ``*``, whose copies the guard sees as the engine's own
    (``sources.STANDS_FOR``)."""
    from chainrule.compiler.slotreads import HOT
    from chainrule.compiler.sources import STANDS_FOR, SWAPPED

    SEEN.clear()
    fast = chainrule.compile(_sees_value_s_namespace, budget=False)
    with pytest.warns(CompileWarning):
        fast(Value(1.0))
        fast(Value(1.0))
    now = vars(Value)
    changed = {k for k, v in SEEN.items() if now.get(k) is not v}
    copies = {k for k in changed if SEEN[k] in STANDS_FOR and STANDS_FOR[SEEN[k]] is now[k]}
    assert changed - copies == SWAPPED
    assert copies == set(HOT)


def _states(f: Callable[[float], Value], states: list[Callable[[], object]]) -> list[tuple]:
    """Eager's and compiled's result (a number, or the exception's type and
    message) after each change of state, twice per state."""
    fast = chainrule.compile(f, budget=False)
    out: list[tuple] = []
    for change in states:
        change()
        for _ in range(2):
            row = []
            for g in (f, fast):
                try:
                    row.append(g(1.5).data)
                except Exception as error:
                    row.append((type(error).__name__, str(error)))
            out.append(tuple(row))
    return out


def _warns(x: float) -> Value:
    warnings.warn("lr is large", UserWarning, stacklevel=1)
    return W * x


W = Value(2.0)


def test_a_function_that_warns_runs_eagerly_and_raises_under_an_error_filter() -> None:
    """A ``warnings.warn`` inside: under ``simplefilter("error")`` set
    between calls eager raises, and so does the compiled call (a replay
    returned a number: it never warns)."""
    with warnings.catch_warnings():
        modes = ["ignore", "error", "ignore", "error"]
        got = _states(_warns, [lambda m=m: warnings.simplefilter(m) for m in modes])  # type: ignore[misc]
    raised = ("UserWarning", "lr is large")
    assert (
        got == [(3.0, 3.0)] * 2 + [(raised, raised)] * 2 + [(3.0, 3.0)] * 2 + [(raised, raised)] * 2
    )


FLAG = [""]
DIGITS = decimal.Context(prec=3)
C_SCALE = ctypes.c_double(1.0)
CELL = types.CellType(1.0)


def _by_state(how: str) -> Callable[[float], Value]:
    def f(x: float) -> Value:
        if how == "exists":
            scale = 5.0 if os.path.exists(FLAG[0]) else 1.0
        elif how == "getcwd":
            scale = float(len(os.getcwd()))
        elif how == "recursionlimit":
            scale = sys.getrecursionlimit() / 1000
        elif how == "seterr":
            try:
                scale = float(np.float64(1.0) / np.float64(0.0) > 0)
            except FloatingPointError:
                scale = 3.0
        elif how == "printoptions":
            scale = float(len(np.array2string(np.array([1 / 3]))))
        elif how == "decimal":
            scale = float(decimal.Decimal(1) / decimal.Decimal(3))
        elif how == "context":
            scale = float(DIGITS.divide(decimal.Decimal(1), decimal.Decimal(3)))
        elif how == "ctypes":
            scale = C_SCALE.value
        else:
            scale = CELL.cell_contents
        return W * x * scale

    return f


@pytest.mark.parametrize(
    "how",
    ["exists", "getcwd", "recursionlimit", "seterr", "printoptions", "decimal", "context"]
    + ["ctypes", "cell"],
)
def test_state_outside_python_s_objects_changed_between_calls_is_eagers(
    how: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file created, the working directory, the recursion limit, NumPy's
    error handling and print options, decimal's context, a ctypes number,
    a decimal Context or a cell held in a global: changed between calls,
    the compiled call gives eager's number (a replay kept the first)."""
    FLAG[0] = str(tmp_path / "flag")
    (tmp_path / "deeper").mkdir()
    limit = sys.getrecursionlimit()
    changes: dict[str, list[Callable[[], object]]] = {
        "exists": [lambda: None, lambda: (tmp_path / "flag").write_text("")],
        "getcwd": [
            lambda: monkeypatch.chdir(tmp_path),
            lambda: monkeypatch.chdir(tmp_path / "deeper"),
        ],
        "recursionlimit": [lambda: None, lambda: sys.setrecursionlimit(limit + 1000)],
        "seterr": [lambda: np.seterr(divide="ignore"), lambda: np.seterr(divide="raise")],
        "printoptions": [lambda: None, lambda: np.set_printoptions(precision=3)],
        "decimal": [lambda: None, lambda: setattr(decimal.getcontext(), "prec", 4)],
        "context": [lambda: None, lambda: setattr(DIGITS, "prec", 5)],
        "ctypes": [lambda: None, lambda: setattr(C_SCALE, "value", 3.0)],
        "cell": [lambda: None, lambda: setattr(CELL, "cell_contents", 3.0)],
    }
    f = _by_state(how)
    errors, options = np.geterr(), np.get_printoptions()
    try:
        with decimal.localcontext(), warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)
            got = _states(f, changes[how])
    finally:
        sys.setrecursionlimit(limit)
        np.seterr(**errors)
        np.set_printoptions(**options)
        DIGITS.prec, C_SCALE.value, CELL.cell_contents = 3, 1.0, 1.0
    assert [e for e, _ in got] == [c for _, c in got]
    assert got[0] != got[2]  # (the change shows eagerly)


def _pairs(xs: list[float]) -> Value:
    a, b = itertools.tee(x * W for x in xs)
    next(b)
    return sum((p * q for p, q in zip(a, b)), Value(0.0))


def test_iterators_made_by_tee_inside_are_the_function_s_own() -> None:
    """``itertools.tee`` of a generator made inside: the two iterators are
    the trace's own, and later calls replay (it ran eagerly, warned that
    an iterator was made outside the function)."""
    fast = chainrule.compile(_pairs, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = [(_pairs(xs).data, fast(xs).data) for xs in ([1.0, 2.0, 3.0], [2.0, 2.0, 3.0])]
    assert got == [(32.0, 32.0), (40.0, 40.0)]
    assert fast.stats()["hits"] == 1


class Net:
    pass


def test_what_a_fallback_warning_says_reads_as_a_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning's words: one object to another (it said "from one Net
    object to another to one Net object to another"), a replay about as
    long as an eager call (it said "1 times as long"), a partial by its
    function's name (it printed the partial's arguments, a model whole)."""
    import functools

    from chainrule.compiler import _named, budget, keys

    def key(x: object) -> tuple:
        items, _, shape = keys.flatten([x])
        return keys.classify(items, shape, True).key

    assert keys.describe(key(Net()), key(Net())) == (
        "an argument changes from one Net object to another"
    )
    monkeypatch.setattr(budget, "ALLOWANCE", 2.0)  # (the real budget's account)
    account = budget.Budget()
    for _ in range(3):
        account.replayed(1.02, 1.0)
    assert (account.replays_lose() or "").startswith(
        "a replay, with its backward pass, takes about as long as an eager call of"
    )
    assert _named(functools.partial(_loss, Model())) == "functools.partial(_loss)"
    assert _named(Net()) == "a Net object"


def test_a_graph_never_met_twice_is_not_traced_whatever_a_trace_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The budget traces a new graph when its replays to come would repay
    the trace: with every graph so far met once, none would, also when a
    trace measured faster than a (slow) eager call made its cost look like
    nothing (the budget then traced every new graph, and never warned)."""
    from chainrule.compiler import budget

    monkeypatch.setattr(budget, "ALLOWANCE", 2.0)  # (the real budget's account)
    account = budget.Budget()
    account.ran_eagerly(0.004, "first")
    account.traced(0.001, 0.001, 0.004)  # (a trace that took less than the eager call)
    assert account.trace_estimate(0.004) >= budget.TRACE_FIXED
    assert {account.first_sight(("graph", k)) for k in range(20)} <= {"eager", "rare"}


def _copied_once(x: Value) -> Value:
    return x * 3.0 + 1.0


def test_copying_a_function_is_a_cost_paid_once_not_every_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first trace of a function copies its code (and its helpers'),
    which no later trace does again: the budget's account keeps that time,
    its estimate of the next trace's cost leaves it out (a first trace of
    0.19 s, 0.08 s of it copying, made every later trace look 200 eager
    calls long)."""
    from chainrule.compiler import budget, rewrite

    before = rewrite.COPYING[0]
    chainrule.compile(_copied_once, budget=False)(Value(1.0))
    assert rewrite.COPYING[0] > before  # (its copy made: timed)
    monkeypatch.setattr(budget, "ALLOWANCE", 2.0)  # (the real budget's account)
    account = budget.Budget()
    account.traced(1.0, 0.05, 0.01, 0.9)
    assert account.extra == pytest.approx(0.99)
    assert account.trace_estimate(0.01) == pytest.approx(0.09)


@pytest.mark.parametrize("how", ["operator.call", "methodcaller", "map"])
def test_a_hidden_call_made_through_operator_s_callers_is_seen(
    how: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``operator.call(os.getcwd)``, ``operator.methodcaller("getcwd")(os)``
    and ``map(operator.call, [os.getcwd])`` call a function whose result
    changes between calls: the compiled call is eager's (a replay kept the
    first directory's length)."""
    import operator

    def f(x: float) -> Value:
        if how == "operator.call":
            cwd = operator.call(os.getcwd)
        elif how == "methodcaller":
            cwd = operator.methodcaller("getcwd")(os)
        else:
            cwd = next(map(operator.call, [os.getcwd]))
        return W * x * float(len(cwd))

    (tmp_path / "deeper").mkdir()
    got = _states(
        f, [lambda: monkeypatch.chdir(tmp_path), lambda: monkeypatch.chdir(tmp_path / "deeper")]
    )
    assert [e for e, _ in got] == [c for _, c in got]
    assert got[0] != got[2]


def test_one_slow_eager_call_does_not_make_traces_look_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An eager call of a graph is never taken to be slower than a traced
    run of it (which does its work and more): a process's first eager call,
    slow, made every trace look cheaper than a call, and a function whose
    int argument pins a slice traced at every call (29 traces, 3x eager's
    time) and never warned."""
    from chainrule.compiler import budget

    monkeypatch.setattr(budget, "ALLOWANCE", 2.0)  # (the real budget's account)
    account = budget.Budget()
    assert account.first_sight("graph") == "eager"  # (the first call: eagerly, remembered)
    account.ran_eagerly(0.044, "graph")
    assert account.eager_of("graph", 0.0137) == 0.0137
    for _ in range(5):
        account.traced(0.03, 0.0137, account.eager_of("graph", 0.0137))
    assert account.extra == pytest.approx(5 * (0.03 - 0.0137))


class Scaled(Value):
    k = 1.0

    def __mul__(self, other: Any) -> Value:
        return Value.__mul__(self, other * Scaled.k * CONFIG["scale"])


class Pair(NamedTuple):
    a: float
    b: float

    def total(self) -> float:
        return (self.a + self.b) * CONFIG["scale"]


class Box:
    scale = 1.0


class Held(Generic[T]):
    def get(self) -> float:
        return Box.scale * 1.0


HELD_FLOAT = Held[float]


def _through_argument_classes(how: str, arg: Any) -> Value:
    if how == "Value subclass":
        return arg * 2.0
    if how == "named tuple":
        return W * arg.total()
    return W * HELD_FLOAT().get()


@pytest.mark.parametrize("how", ["Value subclass", "named tuple", "generic alias"])
def test_what_the_classes_of_arguments_and_aliases_read_is_guarded(how: str) -> None:
    """A Value argument of your subclass whose ``__mul__`` reads a class
    attribute and a global, a named tuple argument whose method reads a
    global, a class made through a generic alias held in a global
    (``Held[float]()``) whose method reads a class attribute: changed
    between calls, eager's number (a replay kept the first)."""
    fast = chainrule.compile(_through_argument_classes, budget=False)
    got = []
    try:
        for step in range(4):
            if step == 2:
                Scaled.k, Box.scale, CONFIG["scale"] = 3.0, 3.0, 3.0
            arg = Scaled(1.5) if how == "Value subclass" else Pair(1.5, 1.0)
            got.append((_through_argument_classes(how, arg).data, fast(how, arg).data))
    finally:
        Scaled.k, Box.scale, CONFIG["scale"] = 1.0, 1.0, 1.0
    assert [e for e, _ in got] == [c for _, c in got]
    assert got[0] != got[2]


@pytest.mark.parametrize("how", ["unbound", "__call__", "iter"])
def test_a_generator_s_draw_reached_other_ways_runs_eagerly(how: str) -> None:
    """``Random.random(rng)``, ``rng.random.__call__()`` and
    ``next(iter(rng.random, None))`` draw from your generator: every call
    eager's draw (a replay kept the first)."""
    import random

    def run(g: Callable[[Any], Value], rng: random.Random) -> list[float]:
        return [g(rng).data for _ in range(3)]

    def f(rng: random.Random) -> Value:
        if how == "unbound":
            u = random.Random.random(rng)
        elif how == "__call__":
            u = rng.random.__call__()
        else:
            u = next(iter(rng.random, None))
        return W * u

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        got = run(chainrule.compile(f, budget=False), random.Random(7))
    assert got == run(f, random.Random(7))
    assert len(set(got)) == 3


def test_id_of_equal_strings_among_the_arguments_runs_eagerly() -> None:
    """``id(s) == id(t)`` of two equal strings: one key, by value; the
    function runs eagerly (a replay kept the answer for one object)."""

    def f(s: str, t: str) -> Value:
        return W * (2.0 if id(s) == id(t) else 3.0)

    one, other = "ab" * 20, "".join(["ab"] * 20)
    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        got = [fast(one, one).data, fast(one, other).data]
    assert got == [f(one, one).data, f(one, other).data] == [4.0, 6.0]


def test_files_found_by_glob_are_read_at_every_call(tmp_path: Any) -> None:
    """``glob.glob`` reads the file system: a file added between calls is
    counted, as eagerly (a replay kept the first count)."""
    import glob

    def f(x: float) -> Value:
        return W * x * float(len(glob.glob(str(tmp_path / "*.txt"))))

    got = _states(f, [lambda: None, lambda: (tmp_path / "a.txt").write_text("")])
    assert [e for e, _ in got] == [c for _, c in got] == [0.0, 0.0, 3.0, 3.0]
