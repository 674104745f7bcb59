"""``chainrule.tensor``: the backward pass on NumPy arrays.

``Tensor`` is to an array what ``Value`` is to a float: the same graph, the
same topological order and the same backward loop, with each op supplying a
vector-Jacobian product instead of a local derivative. Needs NumPy
(``pip install numpy``; in a checkout, ``pip install -e '.[tensor]'``).

The array engine's layer: above the scalar engine (``value``: its
recording mode and node labels) and the pieces both engines' models share
(``module``, ``random_state``, ``transformer``), and ``io``; it imports
nothing above (not the training API, ``compiler``, ``explainer``, ``cli``).
"""

try:
    import numpy as _np  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without numpy only
    raise ImportError(
        "chainrule.Tensor needs NumPy: pip install numpy "
        "(in a checkout: pip install -e '.[tensor]')"
    ) from e

# abs, pow, max, min and sum shadow the builtins on purpose, as NumPy's do.
from . import elementwise as _elementwise
from . import linalg as _linalg
from . import namespaces as _namespaces
from . import nn_ops as _nn_ops
from . import reduce as _reduce
from . import shape as _shape
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
from .tensor import Tensor, gradients, unbroadcast
from .tensor import ops as _ops

# Tensor's methods reach the ops modules through tensor.ops (the modules
# import tensor.py, so tensor.py cannot import them).
_ops.__dict__.update(ew=_elementwise, la=_linalg, nn=_nn_ops, rd=_reduce, sh=_shape, ns=_namespaces)

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
