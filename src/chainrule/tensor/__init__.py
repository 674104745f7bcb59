"""``chainrule.tensor``: the backward pass on NumPy arrays.

``Tensor`` is to an array what ``Value`` is to a float: the same graph, the
same topological order and the same backward loop, with each op supplying a
vector-Jacobian product instead of a local derivative. Needs NumPy
(``pip install numpy``; in a checkout, ``pip install -e '.[tensor]'``).
"""

try:
    import numpy as _np  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without numpy only
    raise ImportError(
        "chainrule.Tensor needs NumPy: pip install numpy "
        "(in a checkout: pip install -e '.[tensor]')"
    ) from e

# abs, pow, max, min and sum shadow the builtins on purpose, as NumPy's do.
from . import namespaces as _namespaces
from .conv import conv1d, conv2d
from .elementwise import (
    abs,  # noqa: A004
    add,
    astype,
    clamp,
    clip,
    div,
    exp,
    gelu,
    log,
    log_sigmoid,
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
from .losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    l1_loss,
    mse_loss,
    nll_loss,
)
from .nn_ops import (
    attention,
    causal_mask,
    dropout,
    layer_norm,
    log_softmax,
    masked_fill,
    rms_norm,
    softmax,
)
from .norm import batch_norm
from .pool import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .primitive import Primitive
from .reduce import max, mean, min, std, sum, var  # noqa: A004
from .shape import (
    broadcast_to,
    cat,
    concatenate,
    embedding,
    flatten,
    getitem,
    reshape,
    scatter,
    squeeze,
    stack,
    swapaxes,
    transpose,
    unsqueeze,
)
from .tensor import Tensor, gradients, unbroadcast  # first: the ops modules build on it

_namespaces.bind_array_functions()

__all__ = [
    "Primitive",
    "Tensor",
    "abs",
    "adaptive_avg_pool2d",
    "add",
    "astype",
    "attention",
    "avg_pool2d",
    "batch_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "broadcast_to",
    "cat",
    "causal_mask",
    "clamp",
    "clip",
    "concatenate",
    "conv1d",
    "conv2d",
    "cross_entropy",
    "div",
    "dropout",
    "embedding",
    "exp",
    "flatten",
    "gelu",
    "getitem",
    "gradients",
    "l1_loss",
    "layer_norm",
    "linear",
    "log",
    "log_sigmoid",
    "log_softmax",
    "masked_fill",
    "matmul",
    "max",
    "max_pool2d",
    "mean",
    "min",
    "mse_loss",
    "mul",
    "neg",
    "nll_loss",
    "pow",
    "relu",
    "reshape",
    "rms_norm",
    "scatter",
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
