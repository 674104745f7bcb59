"""The methods of ``Value`` that micrograd's engine does not have.

PyTorch's names for more functions of one or two scalars (each one node,
its rule in :mod:`chainrule.value.primitives`), comparisons by value, and the
guard against ``float(v)``, which would drop the graph. A base class of
:class:`chainrule.value.engine.Value`, so that ``engine.py`` shows micrograd's
operators alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Union

from . import display
from .intake import as_float
from .primitives import ABS, COS, MAXIMUM, MINIMUM, POW, SIGMOID, SIN, SOFTPLUS, SQRT, Primitive

if TYPE_CHECKING:
    from .engine import Value

Scalar = Union["Value", int, float]


class BeyondMicrograd:
    """More operations, comparisons and conversions (a base of ``Value``)."""

    __slots__ = ()

    data: float
    # Set by engine.py, which builds Value on this class (so this module
    # cannot import it): a node from a primitive, a number as a leaf, a new leaf.
    _apply: Callable[[Primitive, tuple[Any, ...]], Value]
    _lift: Callable[[object, str], Value]
    _new_leaf: Callable[[float], Value]

    def __rpow__(self, other: Scalar) -> Value:
        return self._apply(POW, (self._lift(other, "**"), self))

    def __pos__(self) -> Value:
        return self  # type: ignore[return-value]

    def __abs__(self) -> Value:
        return self._apply(ABS, (self,))

    def abs(self) -> Value:
        """The absolute value; its gradient at 0 is 0, as PyTorch's."""
        return self._apply(ABS, (self,))

    def sqrt(self) -> Value:
        """The square root (``nan`` below 0, as PyTorch)."""
        return self._apply(SQRT, (self,))

    def sigmoid(self) -> Value:
        """``1 / (1 + e ** -self)``, computed without overflow."""
        return self._apply(SIGMOID, (self,))

    def softplus(self) -> Value:
        """``log(1 + e ** self)``, exact and without overflow."""
        return self._apply(SOFTPLUS, (self,))

    def sin(self) -> Value:
        """The sine."""
        return self._apply(SIN, (self,))

    def cos(self) -> Value:
        """The cosine."""
        return self._apply(COS, (self,))

    def max(self, other: Scalar) -> Value:
        """The larger of ``self`` and ``other`` (a tie splits the gradient)."""
        return self._apply(MAXIMUM, (self, self._lift(other, "max")))

    def min(self, other: Scalar) -> Value:
        """The smaller of ``self`` and ``other`` (a tie splits the gradient)."""
        return self._apply(MINIMUM, (self, self._lift(other, "min")))

    def __lt__(self, other: Scalar) -> bool:
        return self.data < _data(other, "<")

    def __le__(self, other: Scalar) -> bool:
        return self.data <= _data(other, "<=")

    def __gt__(self, other: Scalar) -> bool:
        return self.data > _data(other, ">")

    def __ge__(self, other: Scalar) -> bool:
        return self.data >= _data(other, ">=")

    def item(self) -> float:
        """The number, as a float (``v.data``; PyTorch's name)."""
        return self.data

    def __float__(self) -> float:
        raise TypeError(
            "float(Value): converting a Value to a float drops its graph, and the "
            "gradient with it (math.sin(v), math.exp(v), int(v), round(v) do this); use "
            "chainrule.sin(v) or v.sin() (likewise exp, log, sqrt, tanh, ...) to keep it, "
            "or v.data / v.item() for the number alone"
        )

    __int__ = __index__ = __round__ = __float__

    def __format__(self, spec: str) -> str:
        return format(self.data, spec)

    def detach(self) -> Value:
        """A new leaf with the same data, cut off from this graph."""
        return self._new_leaf(self.data)

    def _repr_svg_(self) -> str | None:
        """Jupyter shows a Value as the drawing of its graph, drawn by the
        layer that registered with :mod:`~chainrule.value.display`; None
        falls back to the repr."""
        return display.render("svg", self)

    def _repr_html_(self) -> str | None:
        """The same drawing in a box that scrolls when it is wider than the
        notebook (what JupyterLab, VS Code and nbconvert show first)."""
        return display.render("html", self)


def _data(x: object, op: str) -> float:
    return x.data if isinstance(x, BeyondMicrograd) else as_float(x, op)
