"""compile and the state it reads through its arguments: the class
attributes of an object among them (a decorated method's ``self`` too), a
large NumPy array passed (or held) and refilled in place, a function stored
on an argument object whose closure changes. Each case gives eager's
numbers, or runs eagerly with a CompileWarning."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

np = pytest.importorskip("numpy")


def quiet(fn: Any) -> Any:
    """``chainrule.compile(fn, budget=False)``: traced at once."""
    return chainrule.compile(fn, budget=False)


# -- 1. the class attributes of an object among the arguments ---------------


def test_a_class_attribute_of_an_argument_object_is_guarded() -> None:
    class Model:
        temperature = 1.0

        def __init__(self) -> None:
            self.w = Value(2.0)

    fast = quiet(lambda model, x: model.w * x * model.temperature)
    m = Model()
    assert fast(m, 1.5).data == 3.0
    assert fast(m, 1.5).data == 3.0
    Model.temperature = 4.0
    assert fast(m, 1.5).data == 12.0


def test_a_decorated_methods_class_attributes_and_methods_are_guarded() -> None:
    class Model:
        temperature = 1.0

        def __init__(self) -> None:
            self.w = Value(2.0)

        def act(self, h: Value) -> Value:
            return h.tanh()

        @chainrule.compile(budget=False)
        def loss(self, x: float) -> Value:
            return self.act(self.w * x) / self.temperature

        def eager(self, x: float) -> Value:
            return self.act(self.w * x) / self.temperature

    m = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert m.loss(1.5).data == m.eager(1.5).data
        assert m.loss(1.5).data == m.eager(1.5).data
        Model.temperature = 4.0
        assert m.loss(1.5).data == m.eager(1.5).data == pytest.approx(0.2487, abs=1e-4)
        Model.act = lambda self, h: h.relu()  # type: ignore[method-assign]
        assert m.loss(1.5).data == m.eager(1.5).data == 0.75


def test_a_base_classes_attribute_is_guarded() -> None:
    class Base:
        scale = 2.0

    class Child(Base):
        def __init__(self) -> None:
            self.w = Value(1.0)

    fast = quiet(lambda m: m.w * m.scale)
    c = Child()
    assert fast(c).data == 2.0
    Base.scale = 5.0
    assert fast(c).data == 5.0


def test_class_descriptors_still_replay() -> None:
    # properties, static and class methods, a dataclass's fields, a compiled
    # method on the class: walking the class does not make it run eagerly
    @dataclasses.dataclass
    class Net:
        w: Value
        bias: float = 0.5
        names: list[str] = dataclasses.field(default_factory=list)

        @property
        def doubled(self) -> Value:
            return self.w * 2.0

        @staticmethod
        def square(v: Value) -> Value:
            return v * v

        @classmethod
        def one(cls) -> float:
            return 1.0

        @functools.cached_property
        def unused(self) -> float:
            return 0.0

        @chainrule.compile(budget=False)
        def loss(self, x: float) -> Value:
            return self.square(self.doubled * x) + self.bias + self.one()

    net = Net(Value(0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert net.loss(2.0).data == 5.5
        assert net.loss(3.0).data == 10.5
    assert Net.loss.hits >= 1  # type: ignore[attr-defined]


# -- 2. large arrays among the arguments ------------------------------------


def test_a_large_array_argument_refilled_in_place() -> None:
    w = Value(0.5)

    def loss(batch: Any) -> Value:
        return w * batch[0] + w * batch.sum()

    fast = quiet(loss)
    buf = np.ones(10_000)  # 80 KB: over the bytes an argument's key holds
    for step in range(3):
        buf[:] = step + 1.0
        assert fast(buf).data == loss(buf).data == 0.5 * (step + 1.0) * 10_001


def test_a_large_array_on_an_argument_object_refilled_in_place() -> None:
    class Loader:
        def __init__(self) -> None:
            self.batch = np.ones(10_000)

    w = Value(0.5)

    def loss(data: Loader) -> Value:
        return w * data.batch.sum()

    fast = quiet(loss)
    data = Loader()
    for step in range(3):
        data.batch[:] = step + 1.0
        assert fast(data).data == loss(data).data == 0.5 * (step + 1.0) * 10_000


# -- 3. functions reached as data --------------------------------------------


class Cfg:
    def __init__(self) -> None:
        self.w = Value(2.0)
        box = [1.0]
        self.scale = lambda: box[0]
        self.set_scale = lambda s: box.__setitem__(0, s)


def scaled(m: Cfg, x: float) -> Value:
    return m.w * x * m.scale()


def test_a_closure_on_an_argument_object_changes() -> None:
    fast = quiet(scaled)
    m = Cfg()
    for k in range(3):
        m.set_scale(1.0 + k)
        assert fast(m, 1.5).data == scaled(m, 1.5).data == 3.0 * (1.0 + k)


def counter(n: float) -> Any:
    def get() -> float:
        return n

    return get


def test_a_closure_reached_from_a_global_changes() -> None:
    acts = {"scale": counter(1.0)}
    holder = [acts]
    w = Value(2.0)

    def loss(x: float) -> Value:
        return w * x * holder[0]["scale"]()

    fast = quiet(loss)
    assert fast(1.5).data == 3.0
    assert fast(1.5).data == 3.0
    cell = acts["scale"].__closure__[0]  # type: ignore[index]
    cell.cell_contents = 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        assert fast(1.5).data == loss(1.5).data == 9.0


def test_a_functions_defaults_on_an_argument_object() -> None:
    class Box:
        def __init__(self) -> None:
            self.w = Value(1.0)
            self.f = lambda k=2.0: k

    fast = quiet(lambda b: b.w * b.f())
    b = Box()
    assert fast(b).data == 2.0
    b.f.__defaults__ = (7.0,)
    assert fast(b).data == 7.0
