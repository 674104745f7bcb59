"""The graph itself: recording mode (``no_grad``, ``elementary``, the
anomaly observer) and, for the ``Tensor`` engine, creation order.

The recording mode is shared by the scalar ``Value`` engine and the NumPy
``Tensor`` engine. Nothing in this module imports an engine.

A Tensor node is any object with ``_prev`` (its inputs, a tuple) and
``_id`` (a creation counter). Two facts make its backward pass cheap and
recursion-free:

* A node is always created after its inputs, so sorting the nodes of a graph
  by creation number, newest first, is a valid reverse topological order. No
  depth-first search, no recursion, no depth limit.
* Leaves (no inputs) never need to be visited: they only receive gradient.

The ``Value`` engine orders its graph itself (``engine.topological_order``):
an iterative depth-first search in micrograd's and microgpt's order, so its
gradients are theirs bit for bit, with no counter to keep per node.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: Creation counter shared by every engine: a node's ``_id`` is larger than
#: the ``_id`` of every node it was computed from.
next_id: Callable[[], int] = itertools.count(1).__next__


class Observer(Protocol):
    """What anomaly detection plugs into the engines (see ``check.py``)."""

    def forward(self, node: Any) -> None: ...

    def backward(self, node: Any, child: Any, contribution: Any, incoming: Any) -> None: ...


# How many threads are not in the default mode (recording, unobserved), and
# who wants to know when that number becomes or stops being 0: the engines
# keep a module global for it, one check per operation, instead of reading
# the thread-local state on every op.
_not_fast_threads = 0
_fast_lock = threading.Lock()
_fast_listeners: list[Callable[[bool], None]] = []


def on_fast_change(listener: Callable[[bool], None]) -> None:
    """Call ``listener(all_fast)`` now and whenever it changes: True while
    every thread records a graph and nobody observes (``mode.fast``
    everywhere)."""
    _fast_listeners.append(listener)
    listener(_not_fast_threads == 0)


class _Mode(threading.local):
    """Per-thread recording state.

    ``fast`` is True when ops record a graph and nobody observes them.
    """

    grad_enabled: bool = True
    observer: Observer | None = None
    elementary: bool = False
    fast: bool = True

    def refresh(self) -> None:
        global _not_fast_threads
        fast = self.grad_enabled and self.observer is None and not self.elementary
        if fast == self.fast:
            return
        self.fast = fast
        with _fast_lock:
            _not_fast_threads += -1 if fast else 1
            all_fast = _not_fast_threads == 0
            for listener in _fast_listeners:
                listener(all_fast)


mode = _Mode()


def is_grad_enabled() -> bool:
    """True when operations record a graph (the default)."""
    return mode.grad_enabled


class _GradModeContext:
    """Context manager and decorator that sets grad mode, and restores it."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        # The states to restore, per thread (by thread id): one context
        # object may be entered by several threads at once, as a shared
        # ``NO_GRAD = no_grad()``. An entry is dropped when its list empties.
        self._saved: dict[int, list[bool]] = {}

    def __enter__(self) -> None:
        self._saved.setdefault(threading.get_ident(), []).append(mode.grad_enabled)
        mode.grad_enabled = self._enabled
        mode.refresh()

    def __exit__(self, *exc: object) -> None:
        thread = threading.get_ident()
        stack = self._saved[thread]
        mode.grad_enabled = stack.pop()
        if not stack:
            del self._saved[thread]
        mode.refresh()

    def __call__(self, func: F) -> F:
        enabled = self._enabled

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _GradModeContext(enabled):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def no_grad() -> _GradModeContext:
    """Inside ``with no_grad():`` (or a function decorated ``@no_grad()``)
    operations compute values only: no graph, no gradients.

    Thread-local and nestable, like ``torch.no_grad``.

    >>> from chainrule import Value, no_grad
    >>> x = Value(3.0)
    >>> with no_grad():
    ...     y = x * x
    >>> y._prev
    ()
    """
    return _GradModeContext(False)


def enable_grad() -> _GradModeContext:
    """Turn recording back on inside a ``no_grad`` block."""
    return _GradModeContext(True)


@contextmanager
def elementary() -> Iterator[None]:
    """Inside ``with elementary():`` every operation is its own node, as in
    micrograd: ``sum(w * x for ...)`` stays a chain of ``*`` and ``+``
    nodes instead of one ``sum`` node, and ``nn`` networks are built from
    binary and unary operations instead of fused ``ReLU(dot)`` nodes. The
    values and gradients are the same; the graph is what micrograd draws,
    for teaching and drawing. Thread-local and nestable, like ``no_grad``.

    >>> from chainrule import Value, elementary
    >>> w, x = [Value(1.0), Value(2.0)], [Value(3.0), Value(4.0)]
    >>> sum(a * b for a, b in zip(w, x))._op
    'sum'
    >>> with elementary():
    ...     sum(a * b for a, b in zip(w, x))._op
    '+'
    """
    saved = mode.elementary
    mode.elementary = True
    mode.refresh()
    try:
        yield
    finally:
        mode.elementary = saved
        mode.refresh()


def is_elementary() -> bool:
    """True inside :func:`elementary`: operations are not fused."""
    return mode.elementary


@contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """Install ``observer`` for this thread (used by ``detect_anomaly``)."""
    saved = mode.observer
    mode.observer = observer
    mode.refresh()
    try:
        yield observer
    finally:
        mode.observer = saved
        mode.refresh()


class Labelled:
    """The ``label`` both engines' nodes carry: stored only when set, so an
    unlabelled node pays nothing for it (a subclass has a ``_label`` slot)."""

    __slots__ = ()

    @property
    def label(self) -> str:
        try:
            return self._label
        except AttributeError:
            return ""

    @label.setter
    def label(self, label: str) -> None:
        self._label = str(label)  # type: ignore[misc]


_by_creation = attrgetter("_id")


def reverse_topological_order(root: Any) -> tuple[list[Any], list[Any]]:
    """The nodes ``root`` depends on, split in two lists.

    The first holds the interior nodes, ``root`` first, each one before
    every node it was computed from: the order of the backward pass. The
    second holds the leaves, which only receive gradient.

    Iterative (no recursion, so depth is bounded by memory only) and linear
    apart from one sort of the interior nodes by creation number.
    """
    if not root._prev:
        return [], [root]
    seen = {root}
    stack = [root]
    nodes = []
    leaves = []
    mark = seen.add
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child in node._prev:
            if child not in seen:
                mark(child)
                if child._prev:
                    stack.append(child)
                else:
                    leaves.append(child)
    nodes.sort(key=_by_creation, reverse=True)
    return nodes, leaves
