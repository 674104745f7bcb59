"""Custom Tensor operations: a forward function on arrays and its VJP.

The user-facing form of what every built-in op is (HIPS autograd's
``defvjp``, JAX's ``custom_vjp``, PyTorch's ``autograd.Function``): the
VJP is written once against the math namespace ``M``, so the op works in
``backward()``, in ``create_graph=True`` passes (higher-order gradients),
in ``grad``/``hessian`` and in ``gradcheck`` like a built-in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .tensor import Tensor, as_array, lift, make

ForwardFn = Callable[..., Any]
VJPFn = Callable[..., Sequence[Any]]


class Primitive:
    """A Tensor operation defined by the user: ``forward`` on arrays and
    its vector-Jacobian product.

    ``forward(*arrays)`` returns the output array. ``vjp(M, g, *inputs,
    out)`` returns one gradient per input (None for none): the gradient
    ``g`` of the output pulled back to each input. It is written with
    ordinary operators and the functions of ``M`` (``M.exp``, ``M.log``,
    ``M.sqrt``, ``M.where``, ``M.fit``, ...): in the ordinary backward
    pass ``g``, ``inputs`` and ``out`` are arrays; under
    ``create_graph=True`` they are Tensors, so the gradient can be
    differentiated again. Each gradient is summed back to its input's shape
    where the forward broadcast it.

    >>> import numpy as np
    >>> from chainrule import Tensor
    >>> from chainrule.tensor import Primitive, gradients
    >>> cube = Primitive("cube", lambda x: x**3, lambda M, g, x, out: (g * 3.0 * x * x,))
    >>> x = Tensor([1.0, 2.0])
    >>> (dx,) = gradients(cube(x).sum(), [x], create_graph=True)
    >>> dx.data, gradients(dx.sum(), [x])[0]
    (array([ 3., 12.]), array([ 6., 12.]))
    """

    __slots__ = ("name", "forward", "vjp", "_rule")

    def __init__(self, name: str, forward: ForwardFn, vjp: VJPFn) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"Primitive: name must be a non-empty string, got {name!r}")
        if not callable(forward) or not callable(vjp):
            raise TypeError(f"Primitive {name}: forward and vjp must be callables")
        self.name = name
        self.forward = forward
        self.vjp = vjp
        self._rule = _rule_for(self)

    def __call__(self, *inputs: Any) -> Tensor:
        xs = tuple(lift(x, self.name) for x in inputs)
        with np.errstate(all="ignore"):
            y = as_array(self.forward(*(x.data for x in xs)), None, self.name)
        return make(y, xs, self._rule)

    def __repr__(self) -> str:
        return f"Primitive({self.name!r})"


def _rule_for(op: Primitive) -> Callable[[Any, Any, Tensor], tuple[Any, ...]]:
    """The engine's form of the user's VJP: reads the inputs and the output
    in the pass's namespace, checks the count, fits every gradient to its
    input's shape and dtype, and keeps a create_graph pass in Tensors."""

    def rule(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
        xs = out._prev
        with np.errstate(all="ignore"):
            grads = tuple(op.vjp(M, g, *(M.of(x) for x in xs), M.of(out)))
        if len(grads) != len(xs):
            raise ValueError(f"{op.name}: vjp gave {len(grads)} gradients for {len(xs)} inputs")
        fitted = []
        for x, gx in zip(xs, grads):
            if gx is not None:
                if not M.graph:
                    gx = np.asarray(gx)
                elif not isinstance(gx, Tensor):
                    gx = Tensor(np.asarray(gx, dtype=x.data.dtype))
                gx = M.fit(gx, x.data)
                if gx.shape != x.data.shape:
                    raise ValueError(
                        f"{op.name}: vjp gave a gradient of shape {gx.shape} "
                        f"for an input of shape {x.data.shape}"
                    )
            fitted.append(gx)
        return tuple(fitted)

    rule.__name__ = rule.__qualname__ = f"_{op.name}_vjp"  # Tensor._op reads it
    return rule


__all__ = ["Primitive"]
