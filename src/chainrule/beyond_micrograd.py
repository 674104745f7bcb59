"""The methods of ``Value`` that micrograd's engine does not have.

PyTorch's names for more functions of one or two scalars (each one node,
its rule in :mod:`chainrule.primitives`), comparisons by value, and the
guard against ``float(v)``, which would drop the graph. A base class of
:class:`chainrule.engine.Value`, so that ``engine.py`` shows micrograd's
operators alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from . import engine as E  # the nodes are made there (a cycle only at import)
from .primitives import ABS, COS, MAXIMUM, MINIMUM, POW, SIGMOID, SIN, SOFTPLUS, SQRT

if TYPE_CHECKING:
    from .engine import Value

Scalar = Union["Value", int, float]


class BeyondMicrograd:
    """More operations, comparisons and conversions (a base of ``Value``)."""

    __slots__ = ()

    data: float

    def __rpow__(self, other: Scalar) -> Value:
        return E._apply(POW, (E._leaf(other, "**"), self))  # type: ignore[arg-type]

    def __pos__(self) -> Value:
        return self  # type: ignore[return-value]

    def __abs__(self) -> Value:
        return E._apply(ABS, (self,))  # type: ignore[arg-type]

    def abs(self) -> Value:
        """The absolute value; its gradient at 0 is 0, as PyTorch's."""
        return E._apply(ABS, (self,))  # type: ignore[arg-type]

    def sqrt(self) -> Value:
        """The square root (``nan`` below 0, as PyTorch)."""
        return E._apply(SQRT, (self,))  # type: ignore[arg-type]

    def sigmoid(self) -> Value:
        """``1 / (1 + e ** -self)``, computed without overflow."""
        return E._apply(SIGMOID, (self,))  # type: ignore[arg-type]

    def softplus(self) -> Value:
        """``log(1 + e ** self)``, exact and without overflow."""
        return E._apply(SOFTPLUS, (self,))  # type: ignore[arg-type]

    def sin(self) -> Value:
        """The sine."""
        return E._apply(SIN, (self,))  # type: ignore[arg-type]

    def cos(self) -> Value:
        """The cosine."""
        return E._apply(COS, (self,))  # type: ignore[arg-type]

    def max(self, other: Scalar) -> Value:
        """The larger of ``self`` and ``other`` (a tie splits the gradient)."""
        return E._apply(MAXIMUM, (self, E._lift(other, "max")))  # type: ignore[arg-type]

    def min(self, other: Scalar) -> Value:
        """The smaller of ``self`` and ``other`` (a tie splits the gradient)."""
        return E._apply(MINIMUM, (self, E._lift(other, "min")))  # type: ignore[arg-type]

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
        return E.Value(self.data)

    def _repr_svg_(self) -> str | None:
        """Jupyter shows a Value as the drawing of its graph when Graphviz's
        ``dot`` is installed; None falls back to the repr."""
        from .viz import svg_or_none  # lazily: drawing is not the engine's job

        return svg_or_none(self)  # type: ignore[arg-type]


def _data(x: object, op: str) -> float:
    return x.data if isinstance(x, E.Value) else E._as_float(x, op)
