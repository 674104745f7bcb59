"""chainrule: reverse-mode automatic differentiation, micrograd's backward
pass made exact, deep and fast."""

from .engine import (
    Primitive,
    Value,
    add_n,
    cos,
    dot,
    exp,
    gradients,
    log,
    maximum,
    minimum,
    relu,
    sigmoid,
    sin,
    softplus,
    sqrt,
    tanh,
)
from .graph import enable_grad, is_grad_enabled, no_grad

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Tensor needs NumPy; importing chainrule must not.
    if name == "Tensor":
        from .tensor import Tensor

        return Tensor
    raise AttributeError(f"module 'chainrule' has no attribute {name!r}")


__all__ = [
    "Primitive",
    "Tensor",
    "Value",
    "add_n",
    "cos",
    "dot",
    "enable_grad",
    "exp",
    "gradients",
    "is_grad_enabled",
    "log",
    "maximum",
    "minimum",
    "no_grad",
    "relu",
    "sigmoid",
    "sin",
    "softplus",
    "sqrt",
    "tanh",
]
