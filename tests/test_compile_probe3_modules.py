"""Modules a compiled function reaches anywhere (a closure cell, an
argument, ``self``, a container, a submodule of a global module) are
guarded as a global module is: a changed attribute gives eager's number
on the next call. Config objects (``types.SimpleNamespace``,
``argparse.Namespace``) are guarded as plain objects. ``hessian``,
``jvp`` and ``hvp`` of a compiled function give eager's numbers (the
third probe's repros 11, 14 and 15).
"""

from __future__ import annotations

import argparse
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def replays_as_eager(
    f: Callable[..., Value], change: Callable[[], None], args: tuple[Any, ...] = (1.0,)
) -> None:
    """``f`` compiled: traced and replayed, then ``change`` applied; every
    call gives eager's number and warns of nothing."""
    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(2):
            assert fast(*args).data == f(*args).data
        assert fast.stats()["hits"] >= 1  # (a replay, not eager calls)
        before = f(*args).data
        change()
        assert f(*args).data != before  # (the change is one eager sees)
        assert fast(*args).data == f(*args).data
        assert fast(*args).data == f(*args).data


@pytest.fixture
def config() -> Iterator[types.ModuleType]:
    """A config module of the user's (``import config``), in ``sys.modules``."""
    module = types.ModuleType("config_probe3_modules")
    module.scale = 2.0  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


# --------------------------------------------------------------------------
# Repro 14: a module through a closure cell, as an argument
# --------------------------------------------------------------------------


def test_a_module_in_a_closure_cell_is_guarded(config: Any) -> None:
    w = Value(0.5)

    def loss(x: float) -> Value:
        return w * x * config.scale

    replays_as_eager(loss, lambda: setattr(config, "scale", 3.0))


def test_a_module_passed_as_an_argument_is_guarded(config: Any) -> None:
    w = Value(0.5)

    def loss(cfg: Any, x: float) -> Value:
        return w * x * cfg.scale

    replays_as_eager(loss, lambda: setattr(config, "scale", 3.0), (config, 1.0))


def test_a_module_on_self_is_guarded(config: Any) -> None:
    class Model:
        def __init__(self) -> None:
            self.cfg = config
            self.w = Value(0.5)

        def __call__(self, x: float) -> Value:
            return self.w * x * self.cfg.scale

    model = Model()
    replays_as_eager(model, lambda: setattr(config, "scale", 3.0))


def test_a_module_in_a_container_is_guarded(config: Any) -> None:
    w = Value(0.5)
    configs = {"main": config}

    def loss(x: float) -> Value:
        return w * x * configs["main"].scale

    replays_as_eager(loss, lambda: setattr(config, "scale", 3.0))


def test_an_attribute_added_to_a_module_later_is_guarded(config: Any) -> None:
    w = Value(0.5)

    def loss_named(x: float) -> Value:
        return w * x * (config.shift if "shift" in vars(config) else 1.0)

    replays_as_eager(loss_named, lambda: setattr(config, "shift", 3.0))


def test_a_module_attribute_read_by_getattr_is_guarded(config: Any) -> None:
    w = Value(0.5)

    def loss(x: float) -> Value:
        return w * x * getattr(config, "scale", 1.0)

    replays_as_eager(loss, lambda: setattr(config, "scale", 3.0))


def test_a_module_attribute_served_by_its_getattr_is_guarded() -> None:
    # PEP 562: the module's __getattr__ serves what its namespace lacks
    lazy = types.ModuleType("lazy_probe3_modules")
    exec(
        "_values = {'scale': 2.0}\ndef __getattr__(name):\n    return _values[name]\n",
        lazy.__dict__,
    )
    sys.modules[lazy.__name__] = lazy
    try:
        w = Value(0.5)
        replays_as_eager(
            lambda x: w * x * lazy.scale,  # type: ignore[attr-defined]
            lambda: lazy._values.__setitem__("scale", 3.0),  # type: ignore[attr-defined]
        )
    finally:
        del sys.modules[lazy.__name__]


# --------------------------------------------------------------------------
# Repro 15: a submodule's attribute, the package a global
# --------------------------------------------------------------------------


project = types.ModuleType("project_probe3_modules")
project.config = types.ModuleType("project_probe3_modules.config")  # type: ignore[attr-defined]
project.config.scale = 2.0  # type: ignore[attr-defined]
w_global = Value(0.5)


def submodule_loss(x: float) -> Value:
    return w_global * x * project.config.scale  # type: ignore[attr-defined]


def test_a_submodules_attribute_is_guarded() -> None:
    sys.modules[project.__name__] = project
    sys.modules[project.config.__name__] = project.config  # type: ignore[attr-defined]
    try:
        replays_as_eager(submodule_loss, lambda: setattr(project.config, "scale", 3.0))  # type: ignore[attr-defined]
    finally:
        del sys.modules[project.__name__], sys.modules[project.config.__name__]  # type: ignore[attr-defined]


def test_a_submodule_imported_from_its_package_is_guarded() -> None:
    # `from . import cfg` in a package's module: cfg is a global of that module
    package = types.ModuleType("pkg_probe3_modules")
    package.__path__ = []  # type: ignore[attr-defined]
    cfg = types.ModuleType("pkg_probe3_modules.cfg")
    cfg.scale = 2.0  # type: ignore[attr-defined]
    package.cfg = cfg  # type: ignore[attr-defined]
    model = types.ModuleType("pkg_probe3_modules.model")
    model.__package__ = package.__name__
    for m in (package, cfg, model):
        sys.modules[m.__name__] = m
    try:
        model.w = Value(0.5)  # type: ignore[attr-defined]
        exec("from . import cfg\ndef loss(x):\n    return w * x * cfg.scale\n", model.__dict__)
        replays_as_eager(model.loss, lambda: setattr(cfg, "scale", 3.0))  # type: ignore[attr-defined]
    finally:
        for m in (package, cfg, model):
            del sys.modules[m.__name__]


# --------------------------------------------------------------------------
# Library modules: as for globals (what the code names of them), never a warning
# --------------------------------------------------------------------------


def test_numpy_through_a_closure_replays() -> None:
    def make(numpy: Any) -> Callable[[float], Value]:
        w = Value(0.5)

        def loss(x: float) -> Value:
            return (w * x * float(numpy.sqrt(2.0))).tanh() * numpy.pi

        return loss

    loss = make(np)
    fast = chainrule.compile(loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for x in (1.0, 2.0, 3.0):
            assert fast(x).data == loss(x).data
    assert fast.stats()["hits"] >= 1


# --------------------------------------------------------------------------
# Namespaces: plain objects, guarded through closures, self, arguments
# --------------------------------------------------------------------------


@pytest.mark.parametrize("make", [types.SimpleNamespace, argparse.Namespace])
def test_a_namespace_in_a_closure_is_guarded(make: Any) -> None:
    cfg = make(scale=2.0)
    w = Value(0.5)
    replays_as_eager(lambda x: w * x * cfg.scale, lambda: setattr(cfg, "scale", 3.0))


@pytest.mark.parametrize("make", [types.SimpleNamespace, argparse.Namespace])
def test_a_namespace_on_self_is_guarded(make: Any) -> None:
    class Model:
        def __init__(self) -> None:
            self.cfg = make(scale=2.0, inner=make(shift=1.0))
            self.w = Value(0.5)

        def __call__(self, x: float) -> Value:
            return self.w * x * self.cfg.scale + self.cfg.inner.shift

    model = Model()
    replays_as_eager(model, lambda: setattr(model.cfg, "scale", 3.0))
    replays_as_eager(model, lambda: setattr(model.cfg.inner, "shift", 4.0))


@pytest.mark.parametrize("make", [types.SimpleNamespace, argparse.Namespace])
def test_a_namespace_passed_as_an_argument_is_guarded(make: Any) -> None:
    cfg = make(scale=2.0)
    w = Value(0.5)

    def loss(c: Any, x: float) -> Value:
        return w * x * c.scale

    replays_as_eager(loss, lambda: setattr(cfg, "scale", 3.0), (cfg, 1.0))


# --------------------------------------------------------------------------
# Repro 11: higher-order transforms of a compiled function
# --------------------------------------------------------------------------


W = Value(0.7)


def two_inputs(x: Any, y: Any) -> Any:
    return ((W * x) * y + (x * x).tanh()) * y


def test_hessian_of_a_compiled_function_is_eagers() -> None:
    fast = chainrule.compile(two_inputs, budget=False)
    assert chainrule.hessian(fast)(0.5, 2.0) == chainrule.hessian(two_inputs)(0.5, 2.0)
    both = chainrule.hessian(fast, argnums=(0, 1))(0.5, 2.0)
    assert both == chainrule.hessian(two_inputs, argnums=(0, 1))(0.5, 2.0)


def test_jvp_and_hvp_of_a_compiled_function_are_eagers() -> None:
    fast = chainrule.compile(two_inputs, budget=False)
    point, tangent = (0.5, 2.0), (1.0, 0.0)
    assert chainrule.jvp(fast, point, tangent) == chainrule.jvp(two_inputs, point, tangent)
    assert chainrule.hvp(fast, point, tangent) == chainrule.hvp(two_inputs, point, tangent)


def test_nested_grad_and_a_compiled_method_are_eagers() -> None:
    fast = chainrule.compile(two_inputs, budget=False)
    assert chainrule.grad(chainrule.grad(fast))(0.5, 2.0) == chainrule.grad(
        chainrule.grad(two_inputs)
    )(0.5, 2.0)

    class Model:
        def __init__(self) -> None:
            self.w = Value(0.7)

        @chainrule.compile
        def loss(self, x: Any) -> Any:
            return (self.w * x * x).tanh()

    model = Model()
    eager = chainrule.hessian(Model.loss.fn.__get__(model))(0.3)
    assert chainrule.hessian(model.loss)(0.3) == eager


def test_create_graph_through_a_compiled_output_says_why() -> None:
    fast = chainrule.compile(two_inputs, budget=False)
    x = Value(0.5)
    fast(x, 2.0)  # (traced: the next call replays)
    out = Value(1.0) * fast(x, 2.0)
    with pytest.raises(TypeError, match=r"^a compiled function's output has no Values"):
        chainrule.gradients(out, [x], create_graph=True)
