"""The graph itself: recording mode (``no_grad``, the anomaly observer),
per thread, and, for the ``Tensor`` engine, creation order.

The recording mode is shared by the scalar ``Value`` engine and the NumPy
``Tensor`` engine. Nothing in this module imports an engine.

A Tensor node is any object with ``_prev`` (its inputs, a tuple) and
``_id`` (a creation counter). Two facts make its backward pass cheap and
recursion-free:

* A node is always created after its inputs, so sorting the nodes of a graph
  by creation number, newest first, is a valid reverse topological order. No
  depth-first search, no recursion, no depth limit.
* Leaves (no inputs) never need to be visited: they only receive gradient.

The ``Value`` engine orders its graph itself (:mod:`chainrule.value.walk`): an
iterative depth-first search in micrograd's and microgpt's order, so its
gradients are theirs bit for bit, with no counter to keep per node.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: Creation counter shared by every engine: a node's ``_id`` is larger than
#: the ``_id`` of every node it was computed from.
next_id: Callable[[], int] = itertools.count(1).__next__


class Observer(Protocol):
    """What anomaly detection plugs into the engines (see ``check.py``)."""

    def forward(self, node: Any) -> None: ...

    def backward(self, node: Any, child: Any, contribution: Any, incoming: Any) -> None: ...


class _State:
    """A recording state other than the default (recording, unobserved)."""

    __slots__ = ("grad_enabled", "observer")

    def __init__(self, grad_enabled: bool, observer: Observer | None) -> None:
        self.grad_enabled = grad_enabled
        self.observer = observer


#: This thread's recording state: None while operations record a graph and
#: nobody observes them (the default), else a :class:`_State`. A context
#: variable is per thread (and per asyncio task): what one thread does
#: (``no_grad``, ``detect_anomaly``) never changes the graph another builds.
#: ``state.get() is None`` is the one check an operation makes.
state: ContextVar[_State | None] = ContextVar("chainrule_recording", default=None)


def _state(grad_enabled: bool, observer: Observer | None) -> _State | None:
    return None if grad_enabled and observer is None else _State(grad_enabled, observer)


class _Mode:
    """The current thread's recording state, read as attributes."""

    @property
    def fast(self) -> bool:
        """True when operations record a graph and nobody observes them."""
        return state.get() is None

    @property
    def grad_enabled(self) -> bool:
        s = state.get()
        return True if s is None else s.grad_enabled

    @property
    def observer(self) -> Observer | None:
        s = state.get()
        return None if s is None else s.observer


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
        self._saved: dict[int, list[Token[_State | None]]] = {}

    def __enter__(self) -> None:
        token = state.set(_state(self._enabled, mode.observer))
        self._saved.setdefault(threading.get_ident(), []).append(token)

    def __exit__(self, *exc: object) -> None:
        thread = threading.get_ident()
        stack = self._saved[thread]
        state.reset(stack.pop())
        if not stack:
            del self._saved[thread]

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

    Per thread and nestable, like ``torch.no_grad``.

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
def observing(observer: Observer) -> Iterator[Observer]:
    """Install ``observer`` for this thread (used by ``detect_anomaly``)."""
    token = state.set(_state(mode.grad_enabled, observer))
    try:
        yield observer
    finally:
        state.reset(token)


class Labelled:
    """The ``label`` both engines' nodes carry: stored only when set, so an
    unlabelled node pays nothing for it (a subclass has a ``_label`` slot)."""

    __slots__ = ()

    @property
    def label(self) -> str:
        """The node's name in drawings and ``explain`` tables ("" when unnamed)."""
        try:
            return self._label
        except AttributeError:
            return ""

    @label.setter
    def label(self, label: str) -> None:
        self._label = str(label)  # type: ignore[misc]
