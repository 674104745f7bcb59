"""What a compiled function reads besides its arguments is guarded
(``chainrule.compiler.sources``): state reached through containers that
are not plain lists, tuples or dicts, through classes, modules' functions
and ``functools.partial``, changed after tracing, gives eager's number on
the next call, or the function runs eagerly with one warning naming why.
"""

from __future__ import annotations

import array
import collections
import functools
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def replays_as_eager(f: Callable[[float], Value], change: Callable[[], None]) -> None:
    """``f`` compiled: traced and replayed, then ``change`` applied; every
    call gives eager's number and warns of nothing."""
    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(2):
            assert fast(1.0).data == f(1.0).data
        assert fast.stats()["hits"] >= 1  # (a replay, not eager calls)
        before = f(1.0).data
        change()
        assert f(1.0).data != before  # (the change is one eager sees)
        assert fast(1.0).data == f(1.0).data
        assert fast(1.0).data == f(1.0).data


class Row(list):  # type: ignore[type-arg]
    pass


class Box:
    def __init__(self) -> None:
        self.k = 1.0


class Hyper(NamedTuple):
    scale: list[float]
    shift: float


def _containers() -> list[tuple[str, Any, Callable[[Any], float], Callable[[Any], None]]]:
    """(name, state, its read, a change of it)."""

    def put(key: Any, value: Any) -> Callable[[Any], None]:
        return lambda box: box.__setitem__(key, value)

    def swap(box: Any) -> None:  # a set's number replaced
        box.clear()
        box.add(3.0)

    return [
        ("OrderedDict", collections.OrderedDict(a=1.0), lambda b: b["a"], put("a", 3.0)),
        ("defaultdict", collections.defaultdict(float, a=1.0), lambda b: b["a"], put("a", 3.0)),
        ("Counter", collections.Counter(a=1), lambda b: b["a"], put("a", 3)),
        ("list subclass", Row([1.0]), lambda b: b[0], put(0, 3.0)),
        (
            "NamedTuple's list",
            Hyper([1.0], 0.0),
            lambda b: b.scale[-1],
            lambda b: b.scale.append(2.0),
        ),
        ("set", {1.0}, max, swap),
        (
            "frozenset",
            frozenset([Box()]),
            lambda b: next(iter(b)).k,
            lambda b: setattr(*b, "k", 3),
        ),
        ("deque", collections.deque([1.0]), lambda b: b[0], put(0, 3.0)),
        ("array.array", array.array("d", [1.0]), lambda b: b[0], put(0, 3.0)),
        ("bytearray", bytearray(b"\x01"), lambda b: b[0], put(0, 3)),
        ("object ndarray", np.array([1.0, None], dtype=object), lambda b: b[0], put(0, 3.0)),
        ("attribute of a list subclass", Row(), lambda b: b.k, lambda b: setattr(b, "k", 3.0)),
    ]


@pytest.mark.parametrize(
    ("state", "read", "change"),
    [case[1:] for case in _containers()],
    ids=[case[0] for case in _containers()],
)
def test_numbers_in_other_containers_are_guarded(
    state: Any, read: Callable[[Any], float], change: Callable[[Any], None]
) -> None:
    """A subclass of dict, list or tuple, a set, a deque, an array.array, an
    object array: a number in it changed after tracing is the new one."""
    if isinstance(state, Row) and not state:
        state.k = 1.0  # type: ignore[attr-defined]
    w = Value(0.5)
    replays_as_eager(lambda x: w * x * read(state), lambda: change(state))


def test_values_in_an_object_array_are_guarded() -> None:
    params = np.array([Value(1.0), Value(2.0)], dtype=object)
    old = params[0]
    replays_as_eager(lambda x: params[0] * x, lambda: params.__setitem__(0, Value(3.0)))
    out = chainrule.compile(lambda x: params[0] * x)(2.0)
    out.backward()
    assert params[0].grad == 2.0 and old.grad == 0.0


def test_a_container_it_cannot_walk_runs_eagerly_with_a_warning() -> None:
    """An iterator (a C object whose entries the guard cannot read): the
    function runs eagerly, with one warning naming it, and eager's numbers."""
    numbers = iter([1.0, 2.0, 3.0, 4.0])
    w = Value(1.0)
    fast = chainrule.compile(lambda x: w * x * next(numbers))
    with pytest.warns(CompileWarning, match="list_iterator|iterator made outside"):
        assert fast(1.0).data == 1.0
    assert fast(1.0).data == 2.0
    assert fast(1.0).data == 3.0


# --------------------------------------------------------------------------
# Classes, modules' functions, partials: what the code they name reads
# --------------------------------------------------------------------------


class Net:
    scale = 1.0  # a class attribute, read as self.scale

    def __init__(self) -> None:
        self.w = Value(0.5)

    def __call__(self, x: float) -> Value:
        return (self.w * x * self.scale).tanh()


def test_a_class_attribute_read_through_self_is_guarded() -> None:
    net = Net()
    try:
        replays_as_eager(lambda x: net(x), lambda: setattr(Net, "scale", 3.0))
        # set on the object, it shadows the class's
        replays_as_eager(lambda x: net(x), lambda: setattr(net, "scale", 5.0))
    finally:
        Net.scale = 1.0


def test_a_method_patched_on_the_class_is_guarded() -> None:
    class Model:
        def __init__(self) -> None:
            self.w = Value(2.0)

        def act(self, v: Value) -> Value:
            return v * 1.0

        def loss(self, x: float) -> Value:
            return self.act(self.w * x)

    m = Model()
    replays_as_eager(m.loss, lambda: setattr(Model, "act", lambda self, v: v * 3.0))


def test_the_globals_of_a_module_function_it_calls_are_guarded() -> None:
    mylib = types.ModuleType("mylib_sources_test")
    exec("K = 1.0\ndef apply(v):\n    return v * K\n", mylib.__dict__)
    sys.modules[mylib.__name__] = mylib
    try:
        w = Value(0.5)
        namespace = {"mylib": mylib, "w": w}
        exec("def f(x):\n    return mylib.apply(w * x)\n", namespace)
        replays_as_eager(namespace["f"], lambda: setattr(mylib, "K", 5.0))
    finally:
        del sys.modules[mylib.__name__]


def test_a_partials_arguments_and_keywords_are_guarded() -> None:
    w = Value(0.5)
    cfg = {"s": 1.0}
    rows = [1.0]
    scaled = functools.partial(lambda r, v, d: v * d["s"] * r[0], rows, d=cfg)
    replays_as_eager(lambda x: scaled(w * x), lambda: cfg.__setitem__("s", 9.0))
    replays_as_eager(lambda x: scaled(w * x), lambda: rows.__setitem__(0, 2.0))


class Config:
    lr = 1.0
    factor = 1.0

    @staticmethod
    def double() -> float:
        return 2.0 * Config.factor

    @classmethod
    def triple(cls) -> float:
        return 3.0 * cls.factor


def test_attributes_static_and_class_methods_of_a_class_it_names_are_guarded() -> None:
    w = Value(0.5)
    f = lambda x: w * x * Config.lr * Config.double() * Config.triple()  # noqa: E731
    try:
        replays_as_eager(f, lambda: setattr(Config, "lr", 2.0))
        replays_as_eager(f, lambda: setattr(Config, "factor", 4.0))
    finally:
        Config.lr = Config.factor = 1.0


def test_a_property_and_what_its_getter_reads_are_guarded() -> None:
    extra = {"k": 1.0}

    class Model:
        def __init__(self) -> None:
            self.w = Value(0.5)

        @property
        def scale(self) -> float:
            return extra["k"]

        def loss(self, x: float) -> Value:
            return self.w * x * self.scale

    m = Model()
    replays_as_eager(m.loss, lambda: extra.__setitem__("k", 3.0))
    replays_as_eager(m.loss, lambda: setattr(Model, "scale", property(lambda self: 7.0)))


def test_keyword_only_defaults_and_a_compiled_functions_globals_are_guarded() -> None:
    w = Value(0.5)
    box = {"v": 1.0}

    def f(x: float, *, s: dict[str, float] = box) -> Value:
        return w * x * s["v"]

    replays_as_eager(f, lambda: f.__kwdefaults__.__setitem__("s", {"v": 6.0}))  # type: ignore[union-attr]
    inner = chainrule.compile(lambda x: w * x * box["v"])
    replays_as_eager(lambda x: inner(x) + 1.0, lambda: box.__setitem__("v", 2.0))


def test_the_slots_of_a_methods_object_are_guarded() -> None:
    """A method of an object with ``__slots__`` and no ``__dict__`` (a
    dataclass with ``slots=True``): its attributes changed after tracing."""

    class Model:
        __slots__ = ("w", "k")

        def __init__(self) -> None:
            self.w = Value(0.5)
            self.k = 1.0

        def loss(self, x: float) -> Value:
            return self.w * x * self.k

    m = Model()
    replays_as_eager(m.loss, lambda: setattr(m, "k", 3.0))


def test_what_a_function_in_an_attribute_of_self_reads_is_guarded() -> None:
    """``self.act(v)``, ``self.act`` a lambda (or a partial) set on the
    object: the globals and cells it reads are guarded too."""
    k = {"s": 1.0}

    class Model:
        def __init__(self) -> None:
            self.w = Value(0.5)
            self.act = lambda v: v * k["s"]

        def loss(self, x: float) -> Value:
            return self.act(self.w * x)

    m = Model()
    replays_as_eager(m.loss, lambda: k.__setitem__("s", 3.0))


class Settings:
    lr = 1.0


settings = Settings()


def through_settings(x: float) -> Value:
    return Value(0.5) * x * settings.lr


def test_a_class_attribute_of_an_object_in_a_global_is_guarded() -> None:
    try:
        replays_as_eager(through_settings, lambda: setattr(Settings, "lr", 3.0))
        replays_as_eager(through_settings, lambda: setattr(settings, "lr", 5.0))
    finally:
        Settings.lr = 1.0
        vars(settings).pop("lr", None)


def test_a_long_list_it_reads_holds_with_one_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list of over 256 entries (a model's parameters in one list) has a
    length that is a new int object at each walk: the check before a replay
    compares lengths by value, so an unchanged list holds with one walk
    (the identity pass), and a changed one still retraces."""
    from chainrule.compiler.sources import Sources

    params = [Value(0.001 * k) for k in range(300)]

    def l2() -> Value:
        return sum((p * p for p in params), Value(0.0))

    fast = chainrule.compile(l2, budget=False)
    fast()
    walks = []
    take = Sources.take
    monkeypatch.setattr(
        Sources, "take", lambda self, *a, **k: walks.append(a) or take(self, *a, **k)
    )
    assert fast().data == l2().data
    assert len(walks) == 1  # the identity pass held
    params.append(Value(2.0))  # 301 entries: a change, found by the second walk
    assert fast().data == l2().data
    assert fast.retraces == 1


class Scaled(Value):
    """A Value of the user's subclass, with attributes of its own."""


def test_the_attributes_of_a_users_value_subclass_are_guarded() -> None:
    """``p.scale`` and ``p.mask`` of a parameter of the user's Value
    subclass, read through a global and changed between calls: each change
    traces again (a fourth probe's repro 1: the replay kept 6.0)."""
    p = Scaled(2.0)
    p.scale, p.mask = 3.0, [1.0]

    def f(x: float) -> Value:
        return p * p.scale * x + p * p.mask[0]

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for scale, m in [(3.0, 1.0), (5.0, 1.0), (5.0, -2.0), (-1.0, 4.0)]:
            p.scale = scale
            p.mask[0] = m
            assert fast(1.0).data == f(1.0).data == 2.0 * scale + 2.0 * m


def test_a_users_value_subclass_with_attributes_as_an_argument_runs_eagerly() -> None:
    """Passed as an argument, its attributes would not be read again by a
    replay: the call runs eagerly, named, with eager's numbers."""
    v = Scaled(2.0)
    v.scale = 1.0
    fast = chainrule.compile(lambda v, x: v * v.scale * x, budget=False)
    with pytest.warns(CompileWarning, match="Scaled"):
        assert fast(v, 2.0).data == 4.0
    for scale in (2.0, 3.5):
        v.scale = scale
        assert fast(v, 2.0).data == 4.0 * scale
