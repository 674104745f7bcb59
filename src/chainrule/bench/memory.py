"""``memory``: bytes retained per user-level operation of a long chain.

The chain has 30,000 operations cycling through ``x * 1.0001``,
``x + 0.001`` and ``x.relu()``: a product and a sum with a constant and an
activation, the mix a network's forward pass is made of. tracemalloc counts
the bytes allocated while building it that are still held once it is built
(the graph, ready for ``backward()``), divided by the number of operations.
Whatever an engine allocates for an operation counts: micrograd wraps each
constant in a Value of its own and gives every node a set and a closure.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

from ..value.engine import Value
from .harness import Arm, Engine, Sizes, Workload, built


def build(value: Callable[[float], Any], ops: int) -> Any:
    """The chain: ``ops`` operations cycling ``* 1.0001``, ``+ 0.001``, relu."""
    y = value(0.5)
    for i in range(ops):
        k = i % 3
        if k == 0:
            y = y * 1.0001
        elif k == 1:
            y = y + 0.001
        else:
            y = y.relu()
    return y


def bytes_per_op(value: Callable[[float], Any], ops: int) -> float:
    """Bytes still allocated after building the chain, per operation."""
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        root = build(value, ops)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        if started:
            tracemalloc.stop()
    del root
    gc.collect()
    return (after - before) / ops


def _make(value_class: Callable[[], Callable[[float], Any]]) -> Callable[[Sizes], Arm]:
    def make(sizes: Sizes) -> Callable[[], float]:
        value = value_class()
        return lambda: bytes_per_op(value, sizes.memory_ops)

    return built(make)


def _micrograd_value() -> Callable[[float], Any]:
    from micrograd.engine import Value as MicrogradValue

    return MicrogradValue


MEMORY = Workload(
    "memory",
    "bytes per user-level op of a 30,000-op chain (x * c, x + c, relu), tracemalloc",
    baseline="micrograd",
    engines=(
        Engine("micrograd", _make(_micrograd_value), requires=("micrograd",)),
        Engine("chainrule", _make(lambda: Value)),
    ),
    unit="B/op",
)
