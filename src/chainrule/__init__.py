"""chainrule: reverse-mode automatic differentiation, micrograd's backward
pass made exact, deep and fast."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

# _launch first: Ctrl-C while the chainrule command starts is one line, not a traceback
from . import (
    _launch,  # noqa: F401
    checkpoint,
    data,
    losses,
    nn,
    optim,
)
from ._version import __version__ as __version__
from .check import AnomalyError, GradcheckError, GradcheckReport, detect_anomaly, gradcheck
from .compiler import compile  # noqa: A004 - the field's name (jax.jit, torch.compile)
from .explainer.compare import compare_grads
from .explainer.draw import draw, to_dot
from .explainer.notebook import draw_dot, walkthrough
from .explainer.table import explain
from .functional import grad, gradients, hessian, hvp, jacobian, jvp, value_and_grad, vjp
from .nn import MLP, Layer, Module, Neuron, Sequential
from .optim import SGD, Adam, LinearDecay
from .random_state import manual_seed
from .threads import get_num_threads, set_num_threads
from .value.engine import Primitive, Value
from .value.functions import (
    cos,
    exp,
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
from .value.mode import enable_grad, is_grad_enabled, no_grad
from .value.sums import add_n, dense, dot

if _TYPE_CHECKING:  # for type checkers: chainrule.Tensor is the class (loaded lazily below)
    from .tensor import Tensor as Tensor


def __getattr__(name: str) -> object:
    # Tensor needs NumPy; importing chainrule must not. (Not in __all__
    # either, so `from chainrule import *` works without NumPy.)
    if name == "Tensor":
        from .tensor import Tensor

        return Tensor
    raise AttributeError(f"module 'chainrule' has no attribute {name!r}")


__all__ = [
    "MLP",
    "SGD",
    "Adam",
    "AnomalyError",
    "GradcheckError",
    "GradcheckReport",
    "Layer",
    "LinearDecay",
    "Module",
    "Neuron",
    "Primitive",
    "Sequential",
    "Value",
    "add_n",
    "checkpoint",
    "compare_grads",
    "compile",
    "cos",
    "data",
    "dense",
    "detect_anomaly",
    "dot",
    "draw",
    "draw_dot",
    "enable_grad",
    "exp",
    "explain",
    "get_num_threads",
    "grad",
    "gradcheck",
    "gradients",
    "hessian",
    "hvp",
    "is_grad_enabled",
    "jacobian",
    "jvp",
    "log",
    "losses",
    "manual_seed",
    "maximum",
    "minimum",
    "nn",
    "no_grad",
    "optim",
    "relu",
    "set_num_threads",
    "sigmoid",
    "sin",
    "softplus",
    "sqrt",
    "tanh",
    "to_dot",
    "value_and_grad",
    "vjp",
    "walkthrough",
]
