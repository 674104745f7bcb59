"""``deep-chain``: one chain of 100,000 alternating ``x * c`` and ``x + c``,
forward and backward.

micrograd sorts its graph with a recursive depth-first search, so a chain
deeper than Python's recursion limit raises ``RecursionError``; chainrule's
order is iterative. micrograd runs under Python's default recursion limit
(1000): with a raised limit its recursion could overflow the C stack and
crash the process instead of raising.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..value.engine import Value
from .harness import Arm, Engine, Sizes, Workload, built

DEFAULT_RECURSION_LIMIT = 1000  # CPython's


@contextmanager
def default_recursion_limit() -> Iterator[None]:
    """Run with at most CPython's default recursion limit, then restore."""
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(min(saved, DEFAULT_RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(saved)


def chain(value: Callable[[float], Any], length: int) -> tuple[Any, Any]:
    """``length`` user-level ops on one Value, alternating ``+ 0.001`` and
    ``* 1.0001``; returns the leaf and the root."""
    x = value(0.5)
    y = x
    for i in range(length):
        y = y * 1.0001 if i % 2 else y + 0.001
    return x, y


def _make(value_class: Callable[[], Callable[[float], Any]], limit: bool) -> Callable[[Sizes], Arm]:
    def make(sizes: Sizes) -> Callable[[], None]:
        value = value_class()
        n = sizes.chain_length

        def run() -> None:
            _, y = chain(value, n)
            if limit:
                with default_recursion_limit():
                    y.backward()
            else:
                y.backward()

        return run

    return built(make)


def _micrograd_value() -> Callable[[float], Any]:
    from micrograd.engine import Value as MicrogradValue

    return MicrogradValue


DEEP_CHAIN = Workload(
    "deep-chain",
    "100,000 alternating x * c, x + c in one chain, forward + backward",
    baseline="micrograd",
    engines=(
        Engine("micrograd", _make(_micrograd_value, limit=True), requires=("micrograd",)),
        Engine("chainrule", _make(lambda: Value, limit=False)),
    ),
)
