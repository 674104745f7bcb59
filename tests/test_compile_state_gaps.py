"""State a compiled function reads that its guards once missed: a
``threading.local``'s attributes (each thread's own), a function's own
attributes set by code compile cannot copy (a ``functools.lru_cache``
wrapper, a library's function, a compiled function), and the class
attributes of an object reached deeper than an argument or ``self``
(``model.layer.scale``). Changed between calls, each gives eager's number
on the next call; changed while the function runs, the function runs
eagerly with one warning."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")

W = Value(2.0)


@contextlib.contextmanager
def no_warning() -> Iterator[None]:
    """A block in which a CompileWarning is an error (no call runs eagerly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        yield


# -- 1. a threading.local's attributes ---------------------------------------

cfg = threading.local()


def scaled_by_cfg(x: float) -> Value:
    return W * x * cfg.scale


def test_a_thread_locals_attribute_changed_between_calls_traces_again() -> None:
    cfg.scale = 2.0
    fast = chainrule.compile(scaled_by_cfg)
    with no_warning():
        assert [fast(1.0).data, fast(1.0).data] == [4.0, 4.0]
        cfg.scale = 3.0
        assert fast(1.0).data == 6.0 == scaled_by_cfg(1.0).data
    assert fast.stats()["hits"] >= 1


def test_another_thread_gets_its_own_thread_locals_number() -> None:
    cfg.scale = 2.0
    fast = chainrule.compile(scaled_by_cfg)
    assert [fast(1.0).data, fast(1.0).data] == [4.0, 4.0]
    seen: dict[str, Any] = {}

    def other() -> None:
        cfg.scale = 5.0  # this thread's own
        seen["compiled"] = fast(1.0).data
        seen["eager"] = scaled_by_cfg(1.0).data

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == {"compiled": 10.0, "eager": 10.0}
    assert fast(1.0).data == 4.0  # this thread's own, as before


def test_a_thread_without_the_attribute_raises_as_eagerly() -> None:
    cfg.scale = 2.0
    fast = chainrule.compile(scaled_by_cfg)
    assert [fast(1.0).data, fast(1.0).data] == [4.0, 4.0]
    raised: list[str] = []

    def other() -> None:
        try:
            fast(1.0)
        except AttributeError as e:
            raised.append(str(e))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert raised == ["'_thread._local' object has no attribute 'scale'"]


# -- 2. a function's own attributes ------------------------------------------


@functools.lru_cache(maxsize=0)  # (no cache: it runs at every call, as is)
def bump(n: float) -> float:
    bump.calls += 1  # type: ignore[attr-defined]
    return n


def counts_in_code_not_copied(x: float) -> Value:
    bump(x)
    return W * bump.calls  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=0)
def bump_from_nothing() -> None:
    bump_from_nothing.calls = getattr(bump_from_nothing, "calls", 0) + 1  # type: ignore[attr-defined]


def counts_from_nothing(x: float) -> Value:
    bump_from_nothing()
    return W * x * bump_from_nothing.calls  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("f", "counted"),
    [(counts_in_code_not_copied, bump), (counts_from_nothing, bump_from_nothing)],
)
def test_a_counter_on_a_wrapped_function_written_by_its_own_code_runs_eagerly(
    f: Any, counted: Any
) -> None:
    counted.calls = 0
    fast = chainrule.compile(f)
    with pytest.warns(CompileWarning, match="changes a global"):
        assert [fast(1.0).data for _ in range(3)] == [2.0, 4.0, 6.0]
    assert counted.calls == 3
    del counted.calls


@functools.lru_cache(maxsize=0)
def cached(n: float) -> float:
    return n


def through_cached(x: float) -> Value:
    return W * cached(x) * cached.scale  # type: ignore[attr-defined]


def through_json(x: float) -> Value:
    return W * x * json.dumps.scale  # type: ignore[attr-defined]


@pytest.mark.parametrize(("f", "owner"), [(through_cached, cached), (through_json, json.dumps)])
def test_an_attribute_set_on_a_wrapped_or_librarys_function_traces_again(
    f: Any, owner: Any
) -> None:
    owner.scale = 1.0
    try:
        fast = chainrule.compile(f)
        with no_warning():
            assert [fast(1.0).data, fast(1.0).data] == [2.0, 2.0]
            owner.scale = 3.0
            assert fast(1.0).data == 6.0 == f(1.0).data
    finally:
        del owner.scale


inner = chainrule.compile(lambda x: W * x)


def through_compiled(x: float) -> Value:
    return inner(x) * inner.scale  # type: ignore[attr-defined]


def test_an_attribute_set_on_a_compiled_function_traces_again() -> None:
    inner.scale = 1.0  # type: ignore[attr-defined]
    fast = chainrule.compile(through_compiled)
    with no_warning():
        assert [fast(1.0).data, fast(1.0).data] == [2.0, 2.0]
        inner.scale = 3.0  # type: ignore[attr-defined]
        assert fast(1.0).data == 6.0 == through_compiled(1.0).data
        assert fast(1.0).data == 6.0  # (its own counters change at every call: not guarded)
    assert fast.stats()["hits"] >= 2


shift = 1.0


@functools.lru_cache(maxsize=0)
def wrapped_loss(x: float) -> Value:
    return W * x + shift


def test_the_globals_of_a_compiled_lru_cache_wrapped_function_are_guarded() -> None:
    global shift
    fast = chainrule.compile(wrapped_loss)
    try:
        with no_warning():
            assert [fast(1.0).data, fast(1.0).data] == [3.0, 3.0]
            shift = 5.0
            assert fast(1.0).data == 7.0 == wrapped_loss(1.0).data
    finally:
        shift = 1.0


# -- 3. the class attributes of an object reached deeper ---------------------


class Base:
    scale = 2.0


class Layer(Base):
    def __init__(self) -> None:
        self.w = Value(0.5)

    def act(self, h: Value) -> Value:
        return h * 1.0


class Net:
    def __init__(self) -> None:
        self.layer = Layer()
        self.layers = [Layer(), Layer()]

    def loss(self, x: float) -> Value:
        return self.layers[1].w * x * self.layers[1].scale


def through_argument(net: Net, x: float) -> Value:
    return net.layer.act(net.layer.w * x * net.layer.scale)


held = {"net": Net()}


def through_global(x: float) -> Value:
    return held["net"].layer.w * x * held["net"].layer.scale


@pytest.fixture
def restore_classes() -> Any:
    yield
    Base.scale = 2.0
    vars(Layer).get("scale") is not None and delattr(Layer, "scale")
    Layer.act = lambda self, h: h * 1.0  # type: ignore[method-assign]


@pytest.mark.usefixtures("restore_classes")
def test_a_class_attribute_of_an_arguments_attribute_is_guarded() -> None:
    fast = chainrule.compile(through_argument)
    net = Net()
    with no_warning():
        assert [fast(net, 2.0).data, fast(net, 2.0).data] == [2.0, 2.0]
        Layer.scale = 4.0  # type: ignore[misc]
        assert fast(net, 2.0).data == 4.0 == through_argument(net, 2.0).data
        Base.scale = 8.0  # (shadowed by Layer's: no change)
        assert fast(net, 2.0).data == 4.0
        del Layer.scale
        assert fast(net, 2.0).data == 8.0 == through_argument(net, 2.0).data
        Layer.act = lambda self, h: h * 3.0  # type: ignore[method-assign]
        assert fast(net, 2.0).data == 24.0 == through_argument(net, 2.0).data


@pytest.mark.usefixtures("restore_classes")
def test_a_class_attribute_of_an_object_in_a_global_dict_is_guarded() -> None:
    fast = chainrule.compile(through_global)
    with no_warning():
        assert [fast(2.0).data, fast(2.0).data] == [2.0, 2.0]
        Layer.scale = 4.0  # type: ignore[misc]
        assert fast(2.0).data == 4.0 == through_global(2.0).data


@pytest.mark.usefixtures("restore_classes")
def test_a_class_attribute_of_an_object_in_a_list_of_self_is_guarded() -> None:
    net = Net()
    fast = chainrule.compile(net.loss)
    with no_warning():
        assert [fast(2.0).data, fast(2.0).data] == [2.0, 2.0]
        Base.scale = 3.0
        assert fast(2.0).data == 3.0 == net.loss(2.0).data


def layer_class() -> tuple[type, list[float]]:
    box = [1.0]

    class Scaled:
        def __init__(self) -> None:
            self.w = Value(2.0)

        def act(self, h: Value) -> Value:
            return h * box[0]

    return Scaled, box


def test_a_methods_closure_in_the_class_of_an_object_reached_deeper_is_guarded() -> None:
    Scaled, box = layer_class()
    nets = {"layer": Scaled()}

    def f(x: float) -> Value:
        layer = nets["layer"]
        return layer.act(layer.w * x)

    fast = chainrule.compile(f)
    with no_warning():
        assert [fast(1.0).data, fast(1.0).data] == [2.0, 2.0]
        box[0] = 3.0  # a cell of the method's closure, changed in place
        assert fast(1.0).data == 6.0 == f(1.0).data
