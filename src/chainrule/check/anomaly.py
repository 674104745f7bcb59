"""``detect_anomaly``: every op and every backward contribution watched
(through the recording mode's observer hook), stopping at the first one
that turns finite numbers into nan or inf."""

from __future__ import annotations

import linecache
import os
import sys
from contextlib import ContextDecorator, ExitStack
from math import isfinite
from typing import Any

from ..value.engine import Value
from ..value.mode import observing
from ..value.primitives import NUMBER

# --------------------------------------------------------------------------
# detect_anomaly
# --------------------------------------------------------------------------

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # chainrule/

#: Where a node was made: file, line, function.
Location = tuple[str, int, str]


def _user_location() -> Location | None:
    """The innermost stack frame outside the chainrule package."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None
    return frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name


def _describe(location: Location | None) -> str:
    if location is None:
        return "created outside detect_anomaly (enter it before the forward pass to see where)"
    filename, line, function = location
    source = linecache.getline(filename, line).strip()
    where = f"created at {filename}:{line}, in {function}"
    return f"{where}\n    {source}" if source else where


def _float(x: Any) -> float:
    return x.data if isinstance(x, Value) else float(x)


class AnomalyError(RuntimeError):
    """The first op, forward or backward, that turned finite numbers into
    nan or inf, as found by :func:`detect_anomaly`.

    ``phase`` is ``"forward"`` or ``"backward"``, ``op`` the op's name,
    ``inputs`` the data of its inputs (for a Tensor op, their shapes),
    ``value`` the non-finite output (or gradient contribution; for Tensors,
    its first non-finite element) and ``location`` ``(file, line, function)`` of
    the user code that created the op, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        phase: str,
        op: str,
        inputs: tuple[Any, ...],
        value: float,
        location: Location | None,
    ) -> None:
        super().__init__(message)
        self.phase = phase
        self.op = op
        self.inputs = inputs
        self.value = value
        self.location = location


def _anomaly(
    phase: str, op: str, what: str, inputs: tuple[Any, ...], value: float, location: Any
) -> AnomalyError:
    message = f"detect_anomaly: {what}\n  {_describe(location)}"
    return AnomalyError(message, phase=phase, op=op, inputs=inputs, value=value, location=location)


def backward_anomaly(
    op: str,
    inputs: tuple[float, ...],
    output: float,
    position: int,
    contribution: float,
    incoming: float,
    location: Location | None = None,
) -> AnomalyError:
    """The error for a scalar op's backward that gave the non-finite
    ``contribution`` to input ``position`` from the finite ``incoming``
    gradient (also a compiled replay's, whose nodes the detector did not
    see made: ``chainrule.compiler.anomaly``)."""
    what = (
        f"the backward of {op} (inputs {inputs!r}, output {output!r}) gave the gradient "
        f"{contribution!r} to input {position} from the finite incoming gradient {incoming!r}"
    )
    return _anomaly("backward", op, what, inputs, contribution, location)


class AnomalyDetector(ContextDecorator):
    """The context returned by :func:`detect_anomaly`; a
    ``chainrule.value.mode.Observer``."""

    def __init__(self) -> None:
        # id(node) -> (node._id, location). Keyed by id so no node is kept
        # alive; the creation number tells a reused id from the node it named.
        self._where: dict[int, tuple[int, Location | None]] = {}
        self._interned: dict[Location | None, Location | None] = {}
        self._stack: list[ExitStack] = []

    def _recreate_cm(self) -> AnomalyDetector:
        return AnomalyDetector()  # one per decorated call: safe across threads

    def __enter__(self) -> AnomalyDetector:
        stack = ExitStack()
        stack.enter_context(observing(self))
        self._stack.append(stack)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.pop().close()
        if not self._stack:
            self._where.clear()
            self._interned.clear()

    # -- the Observer protocol ----------------------------------------------

    def forward(self, node: Any) -> None:
        """Called for every new node: remembers where it was made, and stops
        at the first op that turns finite inputs into nan or inf."""
        location = _user_location()
        location = self._interned.setdefault(location, location)
        self._where[id(node)] = (node._id, location)
        y = node.data
        if not isinstance(y, float):  # a Tensor (compile's traced float is a float)
            _check_tensor_forward(node, location)
            return
        if isfinite(y):
            return
        inputs = tuple(child.data for child in node._prev)
        if all(map(isfinite, inputs)):
            what = f"{node._op} returned {y!r} from finite inputs {inputs!r}"
            raise _anomaly("forward", node._op, what, inputs, y, location)

    def backward(self, node: Any, child: Any, contribution: Any, incoming: Any) -> None:
        """Called for every contribution of the backward pass: stops at the
        first one that is nan or inf while the gradient arriving is finite."""
        if not isinstance(node.data, float):  # a Tensor
            if _finite_array(contribution) or not _finite_array(incoming):
                return  # fine, or already non-finite further down: not the first
            _tensor_backward_error(node, child, contribution, self._location(node))
        c = _float(contribution)
        if isfinite(c) or child._fn is NUMBER:  # a number operand's gradient is nobody's
            return
        g = _float(incoming)
        if not isfinite(g):
            return  # already non-finite further down: not the first
        inputs = tuple(x.data for x in node._prev)
        position = next(i for i, x in enumerate(node._prev) if x is child)
        raise backward_anomaly(node._op, inputs, node.data, position, c, g, self._location(node))

    def _location(self, node: Any) -> Location | None:
        """Where ``node`` was created, if this detector saw it happen."""
        known = self._where.get(id(node))
        same_node = known is not None and known[0] == getattr(node, "_id", None)
        return known[1] if known is not None and same_node else None


# Tensors: the same checks on whole arrays; the error gives the input shapes
# and the first non-finite element instead of the numbers.


def _array(x: Any) -> Any:
    """The array of a Tensor; an array as it is."""
    tensor = sys.modules["chainrule.tensor.tensor"].Tensor  # loaded: a Tensor exists
    return x.data if isinstance(x, tensor) else x


def _finite_array(x: Any) -> bool:
    np = sys.modules["numpy"]  # loaded: a Tensor exists
    return bool(np.isfinite(_array(x)).all())


def _first_bad(x: Any) -> tuple[tuple[int, ...], float]:
    """The index and value of the first nan or inf in ``x``."""
    np = sys.modules["numpy"]
    data = np.asarray(_array(x))
    index = tuple(int(i) for i in np.argwhere(~np.isfinite(data))[0])
    return index, float(data[index])


def _shapes(node: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(child.data.shape) for child in node._prev)


def _check_tensor_forward(node: Any, location: Location | None) -> None:
    if _finite_array(node.data) or not all(_finite_array(c.data) for c in node._prev):
        return
    index, value = _first_bad(node.data)
    shapes = _shapes(node)
    what = (
        f"{node._op} returned {value!r} at index {list(index)} of its output "
        f"{tuple(node.data.shape)} from finite inputs of shapes {shapes}"
    )
    raise _anomaly("forward", node._op, what, shapes, value, location)


def _tensor_backward_error(
    node: Any, child: Any, contribution: Any, location: Location | None
) -> None:
    position = next(i for i, x in enumerate(node._prev) if x is child)
    index, value = _first_bad(contribution)
    shapes = _shapes(node)
    what = (
        f"the backward of {node._op} (inputs of shapes {shapes}, output "
        f"{tuple(node.data.shape)}) gave {value!r} at index {list(index)} of the gradient of "
        f"input {position} from a finite incoming gradient"
    )
    raise _anomaly("backward", node._op, what, shapes, value, location)


def detect_anomaly() -> AnomalyDetector:
    """A context (or decorator) that raises :class:`AnomalyError` at the
    first op producing nan or inf from finite numbers.

    Forward: an op whose output is nan or inf while its inputs are finite.
    Backward (``backward()``, ``gradients()``, ``grad``): a gradient
    contribution that is nan or inf while the incoming gradient is finite.
    The error names the op, its inputs and the line of user code that
    created it. Ops under ``no_grad`` record nothing and are not watched.
    Per thread, like ``no_grad``, and slow (about twice the time of a
    training step): for debugging.

    >>> from chainrule import AnomalyError, Value, detect_anomaly
    >>> try:
    ...     with detect_anomaly():
    ...         y = Value(0.0).log() * 0.0
    ... except AnomalyError as e:
    ...     print(e.op, e.inputs, e.value)
    log (0.0,) -inf
    """
    return AnomalyDetector()
