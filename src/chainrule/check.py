"""Checking gradients: ``gradcheck`` against finite differences, and
``detect_anomaly`` for the first nan or inf.

``gradcheck`` compares the engine's derivatives with central differences,
``(f(x + eps) - f(x - eps)) / 2 eps``, an oracle that shares nothing with
the derivative table: it is how a custom :class:`~chainrule.Primitive` is
tested. ``detect_anomaly`` watches every op and every backward contribution
(through the observer hook of ``chainrule.graph``) and stops at the first
one that turns finite numbers into nan or inf.
"""

from __future__ import annotations

import linecache
import numbers
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import ContextDecorator, ExitStack
from dataclasses import dataclass
from math import isfinite
from typing import Any

from .autograd import gradients
from .engine import Value
from .graph import enable_grad, no_grad, observing
from .primitives import NUMBER

# --------------------------------------------------------------------------
# gradcheck
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """One derivative where the engine and finite differences disagree.

    ``index`` is ``(i,)`` for ``df/dx_i`` and ``(i, j)`` for
    ``d²f/dx_i dx_j``. For Tensor inputs ``element`` holds the element of
    each of those inputs (``((1, 2),)``: ``df/dx0[1, 2]``).
    """

    order: int
    index: tuple[int, ...]
    analytic: float
    numeric: float
    element: tuple[tuple[int, ...], ...] = ()

    @property
    def name(self) -> str:
        """The derivative's name, ``df/dx0`` (for an array with the element, ``df/dx0[1, 2]``)."""
        parts = [
            f"dx{i}" + (f"[{', '.join(map(str, self.element[n]))}]" if self.element else "")
            for n, i in enumerate(self.index)
        ]
        return ("df/" if self.order == 1 else "d²f/") + "".join(parts)

    def __str__(self) -> str:
        return f"{self.name}: analytic {self.analytic!r}, numeric {self.numeric!r}"


class GradcheckReport:
    """What :func:`gradcheck` found: every mismatch, and how many
    derivatives it checked. True when everything agreed.

    >>> from chainrule import gradcheck
    >>> report = gradcheck(lambda x, y: x * y.exp(), [2.0, 0.5])
    >>> bool(report), report.checked, report.mismatches
    (True, 2, [])
    """

    def __init__(
        self,
        mismatches: list[Mismatch],
        checked: int,
        order: int,
        op: str | None = None,
        culprit: str = "",
    ) -> None:
        self.mismatches = mismatches
        self.checked = checked
        self.order = order
        #: For Tensor functions, the first op whose VJP disagrees with finite
        #: differences on its own (None when none was singled out), and why.
        self.op = op
        self.culprit = culprit

    @property
    def worst(self) -> Mismatch | None:
        """The mismatch with the largest error, if any."""
        return max(self.mismatches, key=_error, default=None)

    @property
    def ok(self) -> bool:
        """True when every derivative agreed (also the report's truth value)."""
        return not self.mismatches

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        noun = "derivative" if self.checked == 1 else "derivatives"
        head = f"gradcheck (order {self.order}): {self.checked} {noun} checked, "
        if self.ok:
            return head + "all agree with finite differences"
        count = len(self.mismatches)
        verb = "disagrees" if count == 1 else "disagree"
        lines = [head + f"{count} {verb} with finite differences:"]
        lines.extend(f"  {m}" for m in self.mismatches[:_SHOWN])
        if count > _SHOWN:
            lines.append(f"  ... and {count - _SHOWN} more; worst: {self.worst}")
        if self.culprit:
            lines.append(self.culprit)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<GradcheckReport order={self.order} checked={self.checked} "
            f"mismatches={self.mismatches!r}>"
        )


_SHOWN = 10  # mismatches a report prints


def _error(m: Mismatch) -> float:
    error = abs(m.analytic - m.numeric)
    return error if error == error else float("inf")  # nan: the worst


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck(..., raise_exception=True)``; ``.report`` has
    the details."""

    def __init__(self, report: GradcheckReport) -> None:
        super().__init__(str(report))
        self.report = report


def _output(f: Callable[..., Any], xs: list[Value]) -> Value:
    out = f(*xs)
    if isinstance(out, Value):
        return out
    if isinstance(out, numbers.Real):
        return Value(float(out))
    raise TypeError(
        f"gradcheck: the function must return a scalar (a Value or a number), "
        f"got {type(out).__name__} {out!r}"
    )


def _evaluate(f: Callable[..., Any], point: list[float]) -> float:
    with no_grad():  # values only: no graph to build
        return _output(f, [Value(p) for p in point]).data


def _gradient(f: Callable[..., Any], point: list[float]) -> list[float]:
    xs = [Value(p) for p in point]
    return gradients(_output(f, xs), xs)


def _central(g: Callable[[list[float]], Any], point: list[float], j: int, eps: float) -> Any:
    """Central difference of ``g`` (a number or a list of numbers) along x_j."""
    up, down = list(point), list(point)
    up[j] += eps
    down[j] -= eps
    hi, lo = g(up), g(down)
    if isinstance(hi, list):
        return [(h - l) / (2.0 * eps) for h, l in zip(hi, lo)]
    return (hi - lo) / (2.0 * eps)


def _agree(analytic: float, numeric: float, atol: float, rtol: float) -> bool:
    # torch.allclose's rule; nan never agrees, not even with nan.
    return abs(analytic - numeric) <= atol + rtol * abs(numeric)


def gradcheck(
    f: Callable[..., Any],
    inputs: Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    *,
    order: int = 1,
    raise_exception: bool = False,
) -> GradcheckReport:
    """Compare the derivatives of ``f`` at ``inputs`` with central differences.

    ``f`` takes one Value per input and returns a scalar; or, when the
    inputs are Tensors or NumPy arrays, one Tensor per input, returning a
    Tensor of any shape (and the report names the op whose VJP is wrong:
    ``chainrule.tensor.gradcheck``). With ``order=1``
    each ``df/dx_i`` from the backward pass is compared with
    ``(f(x + eps e_i) - f(x - eps e_i)) / 2 eps``. With ``order=2`` the
    second derivatives are checked too: the derivatives of the
    ``create_graph=True`` gradient against central differences of the
    gradient. A derivative agrees when ``|analytic - numeric| <= atol +
    rtol * |numeric|``.

    Returns a :class:`GradcheckReport` listing every mismatch (true when
    there is none); with ``raise_exception=True`` a mismatch raises
    :class:`GradcheckError` instead.

    >>> from chainrule import Primitive, gradcheck
    >>> bad_cube = Primitive("cube", lambda x: x**3, lambda M, x, out: (2 * x * x,))
    >>> report = gradcheck(bad_cube, [2.0])
    >>> report.ok, report.mismatches[0].analytic, round(report.mismatches[0].numeric, 6)
    (False, 8.0, 12.0)
    """
    if order not in (1, 2):
        raise ValueError(f"gradcheck: order must be 1 or 2, got {order!r}")
    if not eps > 0.0:
        raise ValueError(f"gradcheck: eps must be positive, got {eps!r}")
    if any(map(_is_tensor_like, inputs)):
        from .tensor.gradcheck import gradcheck_tensors

        report = gradcheck_tensors(f, inputs, eps, atol, rtol, order)
        if raise_exception and report.mismatches:
            raise GradcheckError(report)
        return report
    point = [x.data if isinstance(x, Value) else _number(x) for x in inputs]
    n = len(point)
    mismatches: list[Mismatch] = []

    def compare(k: int, index: tuple[int, ...], analytic: float, numeric: float) -> None:
        if not _agree(analytic, numeric, atol, rtol):
            mismatches.append(Mismatch(k, index, analytic, numeric))

    with enable_grad():  # the analytic side needs a graph even inside no_grad
        first = _gradient(f, point)
        for i in range(n):
            compare(1, (i,), first[i], _central(lambda p: _evaluate(f, p), point, i, eps))
        checked = n
        if order == 2:
            xs = [Value(p) for p in point]
            graph = gradients(_output(f, xs), xs, create_graph=True)
            rows = [gradients(g, xs) for g in graph]
            columns = [_central(lambda p: _gradient(f, p), point, j, eps) for j in range(n)]
            for i in range(n):
                for j in range(n):
                    compare(2, (i, j), rows[i][j], columns[j][i])
            checked += n * n
    report = GradcheckReport(mismatches, checked, order)
    if raise_exception and mismatches:
        raise GradcheckError(report)
    return report


def _is_tensor_like(x: object) -> bool:
    """A Tensor or a NumPy array (whose modules are loaded if it is one)."""
    tensor = sys.modules.get("chainrule.tensor.tensor")
    np = sys.modules.get("numpy")
    return (tensor is not None and isinstance(x, tensor.Tensor)) or (
        np is not None and isinstance(x, np.ndarray)
    )


def _number(x: object) -> float:
    if isinstance(x, numbers.Real):
        return float(x)
    raise TypeError(f"gradcheck: inputs must be numbers or Values, got {type(x).__name__} {x!r}")


# --------------------------------------------------------------------------
# detect_anomaly
# --------------------------------------------------------------------------

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep

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
    phase: str, node: Any, what: str, inputs: tuple[Any, ...], value: float, location: Any
) -> AnomalyError:
    message = f"detect_anomaly: {what}\n  {_describe(location)}"
    return AnomalyError(
        message, phase=phase, op=node._op, inputs=inputs, value=value, location=location
    )


class AnomalyDetector(ContextDecorator):
    """The context returned by :func:`detect_anomaly`; a
    ``chainrule.graph.Observer``."""

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
        if type(y) is not float:  # a Tensor
            _check_tensor_forward(node, location)
            return
        if isfinite(y):
            return
        inputs = tuple(child.data for child in node._prev)
        if all(map(isfinite, inputs)):
            what = f"{node._op} returned {y!r} from finite inputs {inputs!r}"
            raise _anomaly("forward", node, what, inputs, y, location)

    def backward(self, node: Any, child: Any, contribution: Any, incoming: Any) -> None:
        """Called for every contribution of the backward pass: stops at the
        first one that is nan or inf while the gradient arriving is finite."""
        if type(node.data) is not float:  # a Tensor
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
        location = self._location(node)
        what = (
            f"the backward of {node._op} (inputs {inputs!r}, output {node.data!r}) gave the "
            f"gradient {c!r} to input {position} from the finite incoming gradient {g!r}"
        )
        raise _anomaly("backward", node, what, inputs, c, location)

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
    raise _anomaly("forward", node, what, shapes, value, location)


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
    raise _anomaly("backward", node, what, shapes, value, location)


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
