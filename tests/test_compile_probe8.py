"""chainrule.compile and the eighth probe: state another thread or a
logger holds (an Event's flag, a queue's items, a logger's level) is read
at every call, as eagerly (the function runs eagerly); a Value whose
``.data`` is a NumPy scalar computes by NumPy's rules, as eagerly; a
compiled output is a ``Value`` by name."""

from __future__ import annotations

import logging
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def quietly(f: Callable[..., Any], *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        return f(*args)


def test_an_events_flag_a_queues_items_a_loggers_level_are_read_at_every_call() -> None:
    w = Value(0.5)
    stop = threading.Event()
    batches: queue.Queue[float] = queue.Queue()
    log = logging.getLogger("chainrule.test_probe8")
    log.setLevel(logging.INFO)

    def flagged(x: float) -> Value:
        return w * x * (0.0 if stop.is_set() else 1.0)

    def batched(x: float) -> Value:
        return w * batches.get() * x

    def logged(x: float) -> Value:
        return w * x * (2.0 if log.isEnabledFor(logging.DEBUG) else 1.0)

    fast = [chainrule.compile(f) for f in (flagged, batched, logged)]
    for b in (1.0, 2.0, 3.0, 4.0):
        batches.put(b)
    got = [[quietly(f, 1.0).data for f in fast]]
    stop.set()
    log.setLevel(logging.DEBUG)
    got.append([quietly(f, 1.0).data for f in fast])
    assert got == [[0.5, 0.5, 0.5], [0.0, 1.0, 1.0]]
    assert batches.qsize() == 2  # each call took its batch, as eagerly


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_numpy_scalar_in_data_computes_by_numpys_rules(dtype: Any) -> None:
    def run(compiled: bool) -> list[Any]:
        w, b = Value(1.0), Value(0.25)
        w.data, b.data = dtype(0.5), dtype(0.75)

        def f(x: float) -> Value:
            y = w * x + b
            ratio = (b.data - w.data) / (w.data - 0.5)  # 0.25 / 0: NumPy's inf
            return y * float(ratio > 1.0)

        g = chainrule.compile(f) if compiled else f
        with np.errstate(all="ignore"):
            out = quietly(g, 2.0)
            out.backward()
        return [repr(out.data), repr(w.grad), repr(b.grad)]

    assert run(True) == run(False)
    assert run(False)[0] == repr(dtype(0.5) * 2.0 + dtype(0.75))


def test_a_compiled_output_is_a_value_by_name() -> None:
    w = Value(0.5)
    fast = chainrule.compile(lambda x: w * x)
    out = fast(2.0)
    assert type(out).__name__ == "Value" and isinstance(out, Value)
    with pytest.raises(TypeError, match=r"^'Value' object is not subscriptable$"):
        out[0]  # type: ignore[index]
