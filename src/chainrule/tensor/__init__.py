"""``chainrule.tensor``: the backward pass on NumPy arrays.

``Tensor`` is to an array what ``Value`` is to a float: the same graph, the
same topological order and the same backward loop, with each op supplying a
vector-Jacobian product instead of a local derivative. Needs NumPy
(``pip install 'chainrule[tensor]'``).
"""

from __future__ import annotations

try:
    import numpy as _np  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without numpy only
    raise ImportError(
        "chainrule.Tensor needs NumPy: pip install 'chainrule[tensor]' (or pip install numpy)"
    ) from e

# abs, pow, max, min and sum shadow the builtins on purpose, as NumPy's do.
from .elementwise import (
    abs,  # noqa: A004
    add,
    clamp,
    clip,
    div,
    exp,
    gelu,
    log,
    mul,
    neg,
    pow,  # noqa: A004
    relu,
    sigmoid,
    sqrt,
    sub,
    tanh,
    where,
)
from .linalg import linear, matmul
from .nn_ops import (
    attention,
    causal_mask,
    cross_entropy,
    dropout,
    layer_norm,
    log_softmax,
    masked_fill,
    rms_norm,
    softmax,
)
from .reduce import max, mean, min, std, sum, var  # noqa: A004
from .shape import (
    cat,
    concatenate,
    embedding,
    flatten,
    getitem,
    reshape,
    squeeze,
    stack,
    swapaxes,
    transpose,
    unsqueeze,
)
from .tensor import Tensor, unbroadcast  # first: the ops modules build on it

__all__ = [
    "Tensor",
    "abs",
    "add",
    "attention",
    "cat",
    "causal_mask",
    "clamp",
    "clip",
    "concatenate",
    "cross_entropy",
    "div",
    "dropout",
    "embedding",
    "exp",
    "flatten",
    "gelu",
    "getitem",
    "layer_norm",
    "linear",
    "log",
    "log_softmax",
    "masked_fill",
    "matmul",
    "max",
    "mean",
    "min",
    "mul",
    "neg",
    "pow",
    "relu",
    "reshape",
    "rms_norm",
    "sigmoid",
    "softmax",
    "sqrt",
    "squeeze",
    "stack",
    "std",
    "sub",
    "sum",
    "swapaxes",
    "tanh",
    "transpose",
    "unbroadcast",
    "unsqueeze",
    "var",
    "where",
]
