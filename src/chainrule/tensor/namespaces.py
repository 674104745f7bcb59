"""The two math namespaces every Tensor VJP is evaluated in.

A VJP is written once, as ``rule(M, g, out)``: ordinary operators (``+ -
* / @``, indexing) and the methods arrays and Tensors share (``.reshape``,
``.transpose``, ``.swapaxes``, ``.T``, ``.sum``, ``.mean``), plus the
functions of ``M``. The scalar engine's derivative rules work the same way
(``chainrule.value.primitives.FLOAT`` / ``GRAPH``).

* ``ARRAY``: ``g`` and the values are NumPy arrays; the ordinary backward
  pass, as fast as hand-written NumPy.
* ``GRAPH``: ``g`` and the values are Tensors, so the gradient is recorded
  as a graph of its own and can be differentiated again
  (``backward(create_graph=True)``, ``grad(grad(f))``).

``M.of(t)`` is what a rule differentiates: ``t.data`` under ``ARRAY``, the
node ``t`` itself under ``GRAPH``. A rule reads ``t.data`` directly only
for what is a constant in both passes: masks, comparisons, shapes.

The functions, the same in both: ``M.graph`` (False, True), ``M.of(t)``,
``M.fit(g, x)`` (sum ``g`` over the axes ``x`` was broadcast along, cast to
its dtype), ``M.where(cond, a, b)`` (``cond`` a constant mask),
``M.exp``, ``M.log``, ``M.sqrt``, ``M.tanh``, ``M.erf``, ``M.sigmoid``,
``M.log_sigmoid``,
``M.threshold(g, out)`` (relu's select), ``M.matmul`` (BLAS on arrays,
with the thread choice of :mod:`chainrule.tensor.blas`),
``M.rms_norm_backward(g, x, r)`` (in place on arrays), ``M.row_sum`` and
``M.row_mean`` (over the last axis, kept), ``M.broadcast_to(x, shape)``,
``M.scatter(shape, index, basic, values)`` (zeros with ``values`` added at
``index``), ``M.add_at(x, index, value)``, ``M.fill(x, mask, value)`` and
``M.astype(x, dtype)``; the three maps of a convolution,
``M.conv2d(x, w, geo)``, ``M.conv2d_input(g, w, geo, x_shape)`` and
``M.conv2d_weight(x, g, geo, w_shape, cols)`` (``cols``: the forward's
im2col matrix, which only the plain pass reuses). ``GRAPH.softmax`` recomputes a softmax as a node,
for rules whose plain form reuses the forward's arrays. Where the plain
pass has a faster kernel of its own (relu's bitwise select, rms_norm's
in-place update, BLAS threads), it is ``ARRAY``'s entry and the Tensor
formula ``GRAPH``'s: each rule still reads the same.
"""

from __future__ import annotations

from operator import attrgetter
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import conv as cv
from . import elementwise as ew
from . import linalg as la
from . import nn_ops as nn
from . import reduce as rd
from . import shape as sh
from .blas import matmul as blas_matmul
from .blas import matmul_pair as blas_matmul_pair
from .rows import row_mean, row_sum
from .tensor import Tensor, fit

# ----------------------------------------------------------------------------
# ARRAY: NumPy
# ----------------------------------------------------------------------------


def _array_scatter(shape: tuple[int, ...], index: Any, basic: bool, values: np.ndarray) -> Any:
    gx = np.zeros(shape, dtype=values.dtype)
    if basic:
        gx[index] = values
    else:  # repeated indices must add up: unbuffered add
        np.add.at(gx, index, values)
    return gx


def _array_put(x: np.ndarray, index: Any, value: Any) -> np.ndarray:
    """``x`` with ``value`` added at ``index``: in place, on a fresh array."""
    x[index] += value
    return x


def _array_fill(x: np.ndarray, mask: Any, value: float) -> np.ndarray:
    """``x`` with ``value`` where ``mask``: in place, on a fresh array."""
    x[mask] = value
    return x


def _array_astype(x: np.ndarray, dtype: Any) -> np.ndarray:
    return x if x.dtype == dtype else x.astype(dtype)


ARRAY = SimpleNamespace(
    graph=False,
    of=attrgetter("data"),
    fit=fit,
    where=np.where,
    exp=np.exp,
    tanh=np.tanh,
    matmul=blas_matmul,
    matmul_pair=blas_matmul_pair,
    log=np.log,
    sqrt=np.sqrt,
    row_sum=row_sum,
    row_mean=row_mean,
    broadcast_to=np.broadcast_to,
    scatter=_array_scatter,
    add_at=_array_put,
    fill=_array_fill,
    astype=_array_astype,
)

# ----------------------------------------------------------------------------
# GRAPH: Tensors
# ----------------------------------------------------------------------------


def _identity(x: Any) -> Any:
    return x


def _graph_where(cond: Any, a: Any, b: Any) -> Any:
    return ew.where(cond, a, b)


def _graph_fit(g: Any, x: Any) -> Any:
    """``fit`` on a Tensor: summed over the broadcast axes, cast to ``x``'s dtype."""
    if not isinstance(g, Tensor):
        return fit(np.asarray(g), x)
    shape = tuple(x.shape)
    if g.data.shape != shape:
        extra = g.data.ndim - len(shape)
        axes = tuple(range(extra)) + tuple(
            extra + i for i, n in enumerate(shape) if n == 1 and g.data.shape[extra + i] != 1
        )
        g = rd.sum(g, axes).reshape(shape)
    return _graph_astype(g, x.dtype)


def _graph_row_sum(x: Any) -> Any:
    return rd.sum(x, -1, True)


def _graph_row_mean(x: Any) -> Any:
    return rd.mean(x, -1, True)


def _graph_scatter(shape: tuple[int, ...], index: Any, basic: bool, values: Any) -> Any:
    return sh.scatter(shape, index, basic, values)


def _graph_add_at(x: Any, index: Any, value: Any) -> Any:
    bump = np.zeros(x.shape, dtype=x.dtype)
    bump[index] += value
    return x + bump


def _graph_fill(x: Any, mask: Any, value: float) -> Any:
    m = np.asarray(mask)
    if m.ndim < x.ndim:  # a mask over rows
        m = m.reshape(m.shape + (1,) * (x.ndim - m.ndim))
    return ew.where(m, value, x)


def _graph_astype(x: Any, dtype: Any) -> Any:
    return x if x.dtype == dtype else ew.astype(x, dtype)


# The ops modules may still be loading when this one is imported (they
# import tensor.py, which imports this): look their functions up per call.
def _graph_exp(x: Any) -> Any:
    return ew.exp(x)


def _graph_log(x: Any) -> Any:
    return ew.log(x)


def _graph_sqrt(x: Any) -> Any:
    return ew.sqrt(x)


def _graph_rms_norm_backward(g: Any, x: Any, r: Any) -> Any:
    return r * (g - x * (r * r) * _graph_row_mean(g * x))


def _graph_matmul(a: Any, b: Any) -> Any:
    return la.matmul(a, b)


def _graph_matmul_pair(a: Any, b: Any, c: Any, d: Any) -> tuple[Any, Any]:
    return la.matmul(a, b), la.matmul(c, d)


def _graph_tanh(x: Any) -> Any:
    return ew.tanh(x)


def _graph_erf(x: Any) -> Any:
    return ew.erf_op(x)


def _graph_sigmoid(x: Any) -> Any:
    return ew.sigmoid(x)


def _graph_log_sigmoid(x: Any) -> Any:
    return ew.log_sigmoid(x)


def _graph_threshold(g: Any, out: np.ndarray) -> Any:
    return ew.where(out <= 0.0, 0.0, g)


def _graph_broadcast_to(x: Any, shape: tuple[int, ...]) -> Any:
    return sh.broadcast_to(x, shape)


def _graph_softmax(x: Any) -> Any:
    return nn.softmax(x)


def _graph_conv2d(x: Any, w: Any, geo: Any) -> Any:
    return cv.convolve(x, w, None, geo)


def _graph_conv2d_input(g: Any, w: Any, geo: Any, x_shape: Any) -> Any:
    return cv.input_grad_op(g, w, geo, x_shape)


def _graph_conv2d_weight(x: Any, g: Any, geo: Any, w_shape: Any, cols: Any) -> Any:
    return cv.weight_grad_op(x, g, geo, w_shape)


GRAPH = SimpleNamespace(
    graph=True,
    of=_identity,
    fit=_graph_fit,
    where=_graph_where,
    exp=_graph_exp,
    tanh=_graph_tanh,
    matmul=_graph_matmul,
    matmul_pair=_graph_matmul_pair,
    rms_norm_backward=_graph_rms_norm_backward,
    erf=_graph_erf,
    sigmoid=_graph_sigmoid,
    log_sigmoid=_graph_log_sigmoid,
    threshold=_graph_threshold,
    log=_graph_log,
    sqrt=_graph_sqrt,
    row_sum=_graph_row_sum,
    row_mean=_graph_row_mean,
    broadcast_to=_graph_broadcast_to,
    scatter=_graph_scatter,
    add_at=_graph_add_at,
    fill=_graph_fill,
    astype=_graph_astype,
    softmax=_graph_softmax,
    conv2d=_graph_conv2d,
    conv2d_input=_graph_conv2d_input,
    conv2d_weight=_graph_conv2d_weight,
)


def bind_array_functions() -> None:
    """Put the array functions the ops modules define into ``ARRAY``:
    called once they are loaded (they import this module's importer)."""
    ARRAY.threshold = ew.threshold_backward
    ARRAY.erf = ew.erf
    ARRAY.sigmoid = ew.sigmoid_array
    ARRAY.log_sigmoid = ew.log_sigmoid_array
    ARRAY.rms_norm_backward = nn.rms_norm_backward
    ARRAY.conv2d = cv.conv2d_array
    ARRAY.conv2d_input = cv.input_grad_array
    ARRAY.conv2d_weight = cv.weight_grad_array


__all__ = ["ARRAY", "GRAPH", "bind_array_functions"]
