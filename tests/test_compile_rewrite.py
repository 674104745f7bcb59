"""The user's objects are never modified while a trace runs (issue 32).

A trace runs rewritten copies of the user's functions
(``chainrule.compiler.rewrite``): a subscript of a list by an int argument
hands back a gather's stand-in without putting it in the list, so another
thread reading or training the parameters meanwhile sees only its own
objects. Functions whose source is not the code that runs are not
rewritten: their int subscripts pin, with eager's numbers.
"""

from __future__ import annotations

import importlib.util
import linecache
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import rewrite

pytestmark = pytest.mark.usefixtures("trace_every_graph")  # these tests count traces


@pytest.fixture
def switch_often() -> Any:
    """Threads take turns every microsecond: a window of a few bytecodes
    is met within a second."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_other_threads_never_see_a_stand_in_in_the_users_list(switch_often: Any) -> None:
    """While the main thread traces (a new key each call) and replays
    subscripts of ``W`` by an int argument, a reader thread finds ``W``'s
    own entries every time, and an eager thread's ``(W[3] * 5).backward()``
    always reaches ``W[3]``. (The earlier design put the stand-in in ``W``
    for one subscript: hundreds of sightings in such a run.)"""
    W = [Value(float(k) + 0.5) for k in range(6)]
    originals = list(W)
    stop = threading.Event()
    foreign = [0]
    lost = [0]
    rounds = [0, 0]

    def reader() -> None:
        while not stop.is_set():
            if not all(a is b for a, b in zip(W, originals)):
                foreign[0] += 1
            rounds[0] += 1

    def eager() -> None:
        w3 = originals[3]
        while not stop.is_set():
            before = w3.grad
            (W[3] * 5).backward()
            if w3.grad - before != 5.0:
                lost[0] += 1
            rounds[1] += 1

    def f(i: int, tag: str) -> Value:
        return W[i] * W[(i + 3) % 6] + W[3]

    compiled = chainrule.compile(f, max_traces=4)
    threads = [threading.Thread(target=reader), threading.Thread(target=eager)]
    for t in threads:
        t.start()
    try:
        deadline = time.perf_counter() + 1.5
        n = 0
        while time.perf_counter() < deadline or n < 200:
            i = n % 6
            out = compiled(i, f"key {n // 3}")  # a new key every third call: a trace
            assert out.data == (W[i] * W[(i + 3) % 6] + W[3]).data
            n += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert compiled.traces >= 60 and rounds[0] > 0 and rounds[1] > 0
    assert foreign[0] == 0, f"{foreign[0]} sightings of a foreign object in W"
    assert lost[0] == 0, f"{lost[0]} eager backward passes missed W[3]"
    assert all(a is b for a, b in zip(W, originals))


def test_the_users_function_is_not_modified() -> None:
    W = [Value(1.0), Value(2.0), Value(3.0)]

    def helper(row: list[Value], i: int) -> Value:
        return row[i] * 2.0

    def f(i: int) -> Value:
        return helper(W, i) + W[i]

    code, helper_code = f.__code__, helper.__code__
    compiled = chainrule.compile(f)
    assert [compiled(i).data for i in (0, 1, 2, 1)] == [3.0, 6.0, 9.0, 6.0]
    assert compiled.traces == 1  # the helper's subscript is a gather too
    assert f.__code__ is code and helper.__code__ is helper_code
    assert f.__closure__ is not None and f.__closure__[0].cell_contents is W


def test_a_lambda_made_by_exec_has_no_source_and_pins() -> None:
    W = [Value(1.5), Value(-2.0), Value(0.25)]
    namespace: dict[str, Any] = {"W": W}
    exec("g = lambda i: W[i] * W[i] + 1.0", namespace)
    g = namespace["g"]
    assert rewrite.copied_code(g.__code__) is None
    compiled = chainrule.compile(g)
    for i in (0, 1, 2, 0, 1):
        expected = g(i)
        got = compiled(i)
        assert got.data == expected.data
    assert compiled.traces == 3  # one per value of i: pinned


_MODULE = """
W = [{values}]


def pick(i):
    return W[i] * W[i] + W[0]
"""


def test_a_function_whose_file_changed_pins(tmp_path: Path) -> None:
    path = tmp_path / "edited_module.py"
    path.write_text(_MODULE.format(values="None"))
    spec = importlib.util.spec_from_file_location("edited_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.W[:] = [Value(0.5), Value(1.5), Value(-1.0)]
    assert rewrite.copied_code(module.pick.__code__) is not None  # its source: rewritten

    fresh = chainrule.compile(module.pick)
    assert [fresh(i).data for i in (0, 1, 2)] == [module.pick(i).data for i in (0, 1, 2)]
    assert fresh.traces == 1  # a gather

    # the file now says something else than the code that runs
    path.write_text(_MODULE.replace("W[i] * W[i]", "W[i] - W[i]").format(values="None"))
    linecache.checkcache(str(path))
    rewrite._copies.clear()
    assert rewrite.copied_code(module.pick.__code__) is None
    edited = chainrule.compile(module.pick)
    for i in (0, 1, 2, 1):
        assert edited(i).data == module.pick(i).data  # eager's numbers: W[i] * W[i]
    assert edited.traces == 3  # pinned
    rewrite._copies.clear()


def test_super_and_methods_give_eager_numbers() -> None:
    class Base:
        def __init__(self) -> None:
            self.W = [Value(2.0), Value(3.0)]

        def __call__(self, i: int) -> Value:
            return self.W[i] * 10.0

    class Child(Base):
        def __call__(self, i: int) -> Value:
            return super().__call__(i) + self.W[i]  # super(): not rewritten, pins

    class Plain(Base):
        def loss(self, i: int) -> Value:
            return self(i) + self.W[i]  # a callable object's __call__: rewritten

    child, plain = Child(), Plain()
    via_super = chainrule.compile(child)
    via_call = chainrule.compile(plain.loss)
    for i in (0, 1, 0, 1):
        assert via_super(i).data == child(i).data
        assert via_call(i).data == plain.loss(i).data
    assert via_super.traces == 2 and via_call.traces == 1
