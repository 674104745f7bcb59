"""chainrule.compile and what a function reads besides its arguments
(``chainrule.compiler.sources``), the twelfth round: a module named by a
string of the code that is relative (``".cfg"``) or names an attribute
after it (``"pkg.cfg:scale"``, ``"pkg.cfg.scale"``: ``pkgutil.resolve_name``);
a decorator written as a class (a callable object with ``__wrapped__``,
whose ``__call__`` reads globals and its own attributes); a
``functools.lru_cache`` helper cleared between calls; and a function
stored on an object (a compiled function, a lambda) called by name.
Each changed between calls gives eager's number, never the trace's."""

from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import chainrule
from chainrule import Value

pytestmark = pytest.mark.usefixtures("trace_every_graph")

W = Value(2.0)
SCALE = 1.0
SC = 1.0


def _runs(
    fn: Any, fast: Any, change: Any, steps: int, *args: Any
) -> tuple[list[float], list[float]]:
    """Eager's and the compiled function's numbers, ``change(step)`` before each step."""
    eager, got = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no CompileWarning: these replay)
        for step in range(steps):
            change(step)
            eager.append(fn(*args).data)
            got.append(fast(*args).data)
    return eager, got


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str) -> Any:
    """A package ``srcpkg12`` on disk: ``cfg`` (``scale = 1.0``) and ``user`` (the code)."""
    pkg = tmp_path / "srcpkg12"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cfg.py").write_text("scale = 1.0\n")
    (pkg / "user.py").write_text(user)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("srcpkg12", "srcpkg12.cfg", "srcpkg12.user"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import srcpkg12.cfg
    import srcpkg12.user

    return srcpkg12.cfg, srcpkg12.user


_USER = """\
import importlib
import pkgutil
from chainrule import Value

load = importlib.import_module  # (by another name: no module found by a computed name)
find = pkgutil.resolve_name
w = Value(2.0)


def relative(x):
    return w * x * load(".cfg", __package__).scale


def colon(x):
    return w * x * find("srcpkg12.cfg:scale")


def dots(x):
    return w * x * find("srcpkg12.cfg.scale")


def resolved(x):
    return w * x * pkgutil.resolve_name("srcpkg12.cfg:scale")
"""


@pytest.mark.parametrize("name", ["relative", "colon", "dots", "resolved"])
def test_a_module_named_relative_or_with_its_attribute_is_guarded(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, user = _package(tmp_path, monkeypatch, _USER)
    fn = getattr(user, name)
    fast = chainrule.compile(fn, budget=False)

    def change(step: int) -> None:
        cfg.scale = (1.0, 3.0, 5.0)[step]  # changed in place

    eager, got = _runs(fn, fast, change, 3, 1.0)
    assert eager == got == [2.0, 6.0, 10.0]
    assert fast.traces == 3


class _Scaled:
    """A decorator written as a class (``functools.update_wrapper``)."""

    def __init__(self, f: Any) -> None:
        functools.update_wrapper(self, f)
        self.offset = 0.0

    def __call__(self, x: Any) -> Any:
        return self.__wrapped__(x) * SCALE + self.offset


@_Scaled
def _act(x: Any) -> Any:
    return x * 2.0


def test_a_decorator_class_is_followed_through_its_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def f(x: float) -> Value:
        return W * _act(x)

    fast = chainrule.compile(f, budget=False)
    monkeypatch.setattr(_act, "offset", 0.0)
    module = sys.modules[__name__]

    def change(step: int) -> None:
        if step == 1:
            monkeypatch.setattr(module, "SCALE", 3.0)  # a global its __call__ reads
        if step == 2:
            monkeypatch.setattr(_act, "offset", 10.0)  # its own attribute

    eager, got = _runs(f, fast, change, 4, 1.0)
    assert eager == got == [4.0, 12.0, 32.0, 32.0]
    assert fast.traces == 3


def test_a_cache_cleared_between_calls_is_called_again(monkeypatch: pytest.MonkeyPatch) -> None:
    module = sys.modules[__name__]

    @functools.cache
    def table(n: int) -> float:
        return n * SC

    def f(x: float, n: int) -> Value:
        return W * x * table(n)

    table(2)  # filled at SC = 1.0
    monkeypatch.setattr(module, "SC", 2.0)  # the entry is stale, eagerly too
    fast = chainrule.compile(f, budget=False)

    def change(step: int) -> None:
        if step == 1:
            table.cache_clear()  # refreshed: eagerly the next call recomputes

    eager, got = _runs(f, fast, change, 3, 1.0, 2)
    assert eager == got == [4.0, 8.0, 8.0]
    assert fast.traces == 2 and fast.hits == 1


class _Model:
    def __init__(self) -> None:
        self.fast = chainrule.compile(self.loss, budget=False)
        self.act = lambda x: x * SC

    def loss(self, x: Any) -> Any:
        return W * x * SC


_M = _Model()


@pytest.mark.parametrize("attribute", ["fast", "act"])
def test_a_function_stored_on_an_object_is_followed(
    attribute: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = sys.modules[__name__]
    if attribute == "fast":

        def f(x: float) -> Value:
            return _M.fast(x) + W

    else:

        def f(x: float) -> Value:
            return W * _M.act(x)

    fast = chainrule.compile(f, budget=False)

    def change(step: int) -> None:
        monkeypatch.setattr(module, "SC", (1.0, 3.0, 3.0)[step])  # the global it reads

    eager, got = _runs(f, fast, change, 3, 1.0)
    assert eager == got == ([4.0, 8.0, 8.0] if attribute == "fast" else [2.0, 6.0, 6.0])
    assert fast.traces == 2 and fast.hits == 1
