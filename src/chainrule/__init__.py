"""chainrule: reverse-mode automatic differentiation, micrograd's backward
pass made exact, deep and fast."""

from .check import AnomalyError, GradcheckError, GradcheckReport, detect_anomaly, gradcheck
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
from .explain import explain
from .functional import grad, hessian, value_and_grad
from .graph import enable_grad, is_grad_enabled, no_grad
from .viz import draw, to_dot

__version__ = "0.1.0"

__all__ = [
    "AnomalyError",
    "GradcheckError",
    "GradcheckReport",
    "Primitive",
    "Value",
    "add_n",
    "cos",
    "detect_anomaly",
    "dot",
    "draw",
    "enable_grad",
    "exp",
    "explain",
    "grad",
    "gradcheck",
    "gradients",
    "hessian",
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
    "to_dot",
    "value_and_grad",
]
