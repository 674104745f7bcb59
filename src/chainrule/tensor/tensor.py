"""``Tensor``: a NumPy array and the graph that computed it.

The same backward pass as the scalar ``Value``, with arrays. A node records
its inputs (``_prev``), a *vector-Jacobian product* (``_vjp``) and whatever
the product needs beyond the inputs' and its own data (``_ctx``). The
backward pass is micrograd's and microgpt's loop, unchanged::

    for node in reverse topological order:
        for child, contribution in zip(node._prev, node._vjp(M, node.grad, node)):
            child.grad += contribution

The VJP turns the gradient of the output into one gradient per input, each
of its input's shape: where an input was broadcast, the VJP sums the
gradient back over the broadcast axes (:func:`unbroadcast`).

Each VJP is written once, against a math namespace ``M``
(:mod:`chainrule.tensor.namespaces`), as the scalar engine's derivative
rules are: with ``M = ARRAY`` it runs on NumPy arrays (the ordinary
backward pass), with ``M = GRAPH`` on Tensors, so the gradient is itself a
graph that can be differentiated again (``create_graph=True``). Both passes
go through one walk, :func:`propagate`.

Constants (Python numbers, NumPy arrays) never become nodes: an op keeps
them in ``_ctx``, so the graph holds only what can receive a gradient.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from operator import attrgetter
from types import SimpleNamespace
from typing import Any, Union

import numpy as np

from ..value import display
from ..value.mode import Labelled, enable_grad, mode, next_id, observing

_by_creation = attrgetter("_id")


def creation_order(root: Any) -> tuple[list[Any], list[Any]]:
    """The Tensor engine's topological order: the nodes ``root`` depends on,
    split in two lists.

    The first holds the interior nodes, ``root`` first, each one before
    every node it was computed from: the order of the backward pass. The
    second holds the leaves, which only receive gradient.

    Iterative (no recursion, so depth is bounded by memory only) and linear
    apart from one sort of the interior nodes by creation number.
    """
    if not root._prev:
        return [], [root]
    seen = {root}
    stack = [root]
    nodes = []
    leaves = []
    mark = seen.add
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child in node._prev:
            if child not in seen:
                mark(child)
                if child._prev:
                    stack.append(child)
                else:
                    leaves.append(child)
    nodes.sort(key=_by_creation, reverse=True)
    return nodes, leaves


#: The ops modules the methods call (``ops.ew.add``: :mod:`.elementwise`;
#: ``la`` linalg, ``nn`` nn_ops, ``rd`` reduce, ``sh`` shape, ``ns`` the
#: namespaces). They build on this module, so it does not import them:
#: ``chainrule.tensor``'s ``__init__`` fills this in once they are loaded.
ops = SimpleNamespace()

#: A gradient rule: (math namespace, gradient of the output, the output
#: node) -> one gradient per input (None where an input gets nothing).
VJP = Callable[[Any, Any, "Tensor"], Sequence[Any]]

#: What ops accept where a Tensor belongs: constants are kept as they are.
Operand = Union["Tensor", np.ndarray, int, float]

FLOAT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))

_new = object.__new__


def _leaf_vjp(M: Any, g: Any, out: Tensor) -> tuple[()]:  # pragma: no cover - never called
    return ()


class Tensor(Labelled):
    """An array of float64 (default) or float32 numbers that records how it
    was computed, so ``backward()`` can fill ``.grad`` of everything it
    depends on.

    ``data`` is the NumPy array; ``grad`` is None until a backward pass
    reaches the tensor, then an array of the same shape and dtype.

    >>> from chainrule import Tensor
    >>> x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad
    array([[2., 4.],
           [6., 8.]])

    Leaves accumulate: a second ``backward()`` without ``zero_grad()``
    leaves every leaf with twice the gradient, while the gradients of
    interior nodes are recomputed.

    Unlike PyTorch, a new tensor requires a gradient unless made with
    ``requires_grad=False`` (the engine is for differentiating). A result
    computed only from tensors that do not require one, or under
    ``no_grad()``, does not either: it records no graph, and its
    ``backward()`` raises, as PyTorch's.
    """

    __slots__ = ("data", "grad", "requires_grad", "_prev", "_vjp", "_ctx", "_id", "_label")

    data: np.ndarray
    grad: np.ndarray | None
    requires_grad: bool
    _prev: tuple[Tensor, ...]
    _vjp: VJP
    _ctx: Any
    _id: int

    # NumPy defers to Tensor in mixed expressions (ndarray * Tensor -> Tensor).
    __array_priority__ = 1000.0
    __array_ufunc__ = None

    def __init__(
        self, data: Any, dtype: Any = None, label: str = "", *, requires_grad: bool = True
    ) -> None:
        self.data = as_array(data, dtype, "Tensor")
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self._prev = ()
        self._vjp = _leaf_vjp
        self._ctx = None
        self._id = 0
        if label:
            self._label = str(label)

    # -- description ----------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape, as ``numpy.ndarray.shape``."""
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype (float64 by default; float32 stays float32)."""
        return self.data.dtype

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return self.data.ndim

    @property
    def size(self) -> int:
        """The number of elements."""
        return self.data.size

    @property
    def _op(self) -> str:
        """The name of the operation that made this tensor ('' for a leaf)."""
        if not self._prev:
            return ""
        return self._vjp.__name__.strip("_").removesuffix("_vjp")

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        body = np.array2string(self.data, separator=", ", prefix="Tensor(")
        suffix = "" if self.data.dtype == np.float64 else f", dtype={self.data.dtype}"
        return f"Tensor({body}{suffix})"

    def _repr_svg_(self) -> str | None:
        """A notebook shows a Tensor as the drawing of its graph, drawn by
        the layer that registered with :mod:`chainrule.value.display`."""
        return display.render("svg", self)

    def _repr_html_(self) -> str | None:
        return display.render("html", self)

    def retain_grad(self) -> None:
        """PyTorch's call to keep an intermediate tensor's ``.grad``: here
        every tensor of the graph keeps its gradient after ``backward()``
        already, so there is nothing to do (kept so PyTorch code runs)."""

    @property
    def retains_grad(self) -> bool:
        """Always true here, as every tensor of a graph keeps its ``.grad``
        (PyTorch's attribute, false there for an intermediate tensor)."""
        return True

    def item(self) -> float:
        """The value of a one-element tensor as a Python float."""
        if self.data.size != 1:
            raise ValueError(f"item: tensor has {self.data.size} elements, not 1")
        return float(self.data.reshape(()))

    def _number(self, convert: str) -> float:
        # A number leaves the graph: math.sin(t) would give a value whose
        # derivative is silently lost. PyTorch allows it; micrograd's Value
        # (no __float__) and JAX under grad refuse, and so do we.
        if self.requires_grad:
            raise TypeError(
                f"{convert}() of a Tensor that requires a gradient would drop it from the graph "
                "(math.* on it too): use Tensor ops (t.exp(), t.tanh(), chainrule.tensor.log "
                "...) to stay differentiable, or t.item() for the number"
            )
        return self.item()

    def __float__(self) -> float:
        return self._number("float")

    def __int__(self) -> int:
        return int(self._number("int"))

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"`` formats a one-element tensor's value (any spec
        works on its ``item()``); an empty spec is ``str(t)``."""
        if not spec:
            return str(self)
        if self.data.size == 1:
            return format(self.item(), spec)
        return format(self.data, spec)  # NumPy's message for an array

    def numpy(self) -> np.ndarray:
        """The data array (shared, not copied)."""
        return self.data

    def tolist(self) -> Any:
        """The values as (nested lists of) Python floats; a float for a 0-d tensor."""
        return self.data.tolist()

    # -- the array protocols: NumPy, and DLPack (PyTorch, JAX, CuPy ...) -------

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(t)`` is ``t.data`` itself, not an array of Tensors."""
        convert = dtype is not None and np.dtype(dtype) != self.data.dtype
        if convert and copy is False:
            raise ValueError(f"__array__: float data of {self.data.dtype} as {dtype} needs a copy")
        if copy or convert:
            return np.array(self.data, dtype=dtype, copy=True)
        return self.data

    def __dlpack__(self, **kwargs: Any) -> Any:
        """The data as a DLPack capsule: ``torch.from_dlpack(t)`` and
        ``np.from_dlpack(t)`` share its memory. The arguments are the Python
        array API's (``stream``, ``max_version``, ``dl_device``, ``copy``),
        passed on to NumPy."""
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.data.__dlpack_device__()

    # -- graph ----------------------------------------------------------------

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data, cut off from the graph
        (and, as PyTorch's, not requiring a gradient)."""
        return Tensor(self.data, requires_grad=False)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` of this leaf in place; returns it."""
        if self._prev and not requires_grad:
            raise RuntimeError(
                "requires_grad_: only leaves can stop requiring a gradient; use detach()"
            )
        self.requires_grad = bool(requires_grad)
        return self

    def zero_grad(self) -> None:
        """Forget the gradient (``grad = None``)."""
        self.grad = None

    def backward(self, gradient: Any = None, *, create_graph: bool = False) -> None:
        """Fill ``.grad`` of every tensor this one was computed from.

        The textbook algorithm: order the graph topologically, seed this
        tensor's gradient (ones; ``gradient`` for a non-scalar root), walk
        the order in reverse and let every node add its vector-Jacobian
        product into each input's ``.grad``. Leaves accumulate across calls;
        interior nodes are recomputed on every call.

        With ``create_graph=True`` every ``.grad`` is a Tensor with a graph
        of its own, which can be differentiated again (to any order). It
        refers back to the graph it came from, a reference cycle (as in
        PyTorch) that the cyclic garbage collector frees; in a loop prefer
        :func:`gradients`, whose results hold no cycle.
        """
        if not self.requires_grad:
            raise RuntimeError(
                "backward: this tensor does not require a gradient and has no graph: it was "
                "computed under no_grad(), or only from tensors with requires_grad=False"
            )
        seed = _seed(self, gradient, create_graph)
        order, leaves = creation_order(self)
        if not order:
            self.grad = seed if self.grad is None else self.grad + seed
            return
        grads = propagate(order, self, seed, create_graph)
        for v in order:
            v.grad = _gradient(grads.get(v))
        # Leaves add this pass's gradient to what they held in one step: two
        # passes give exactly twice one pass. Every leaf gets an array of its
        # own: a broadcast view (from sum) is read-only, and one array may
        # reach several leaves (both inputs of an add get the same one), so
        # an in-place update of one leaf's gradient must not change another's.
        given = {id(seed)}
        for leaf in leaves:
            g = _gradient(grads.get(leaf))
            if g is None or not leaf.requires_grad:  # a constant input keeps none
                continue
            before = leaf.grad
            if before is not None:
                leaf.grad = before + g
            elif create_graph:
                leaf.grad = g if isinstance(g, Tensor) else Tensor(g)
            elif id(g) in given or not g.flags.writeable:
                leaf.grad = g.copy()
            else:
                given.add(id(g))
                leaf.grad = g

    # -- arithmetic (the rules live in elementwise.py and friends) ------------

    def __add__(self, other: Operand) -> Tensor:
        return ops.ew.add(self, other)

    def __radd__(self, other: Operand) -> Tensor:
        return ops.ew.add(self, other)

    def __sub__(self, other: Operand) -> Tensor:
        return ops.ew.sub(self, other)

    def __rsub__(self, other: Operand) -> Tensor:
        return ops.ew.sub(other, self)

    def __mul__(self, other: Operand) -> Tensor:
        return ops.ew.mul(self, other)

    def __rmul__(self, other: Operand) -> Tensor:
        return ops.ew.mul(self, other)

    def __truediv__(self, other: Operand) -> Tensor:
        return ops.ew.div(self, other)

    def __rtruediv__(self, other: Operand) -> Tensor:
        return ops.ew.div(other, self)

    def __pow__(self, other: Operand) -> Tensor:
        return ops.ew.pow(self, other)

    def __rpow__(self, other: Operand) -> Tensor:
        return ops.ew.pow(other, self)

    def __neg__(self) -> Tensor:
        return ops.ew.neg(self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return ops.ew.abs(self)

    def __matmul__(self, other: Operand) -> Tensor:
        return ops.la.matmul(self, other)

    def __rmatmul__(self, other: Operand) -> Tensor:
        return ops.la.matmul(other, self)

    def __getitem__(self, index: Any) -> Tensor:
        return ops.sh.getitem(self, index)

    # Comparisons give plain boolean arrays (no gradient), as in NumPy.
    def __lt__(self, other: Operand) -> np.ndarray:
        return self.data < data_of(other)

    def __le__(self, other: Operand) -> np.ndarray:
        return self.data <= data_of(other)

    def __gt__(self, other: Operand) -> np.ndarray:
        return self.data > data_of(other)

    def __ge__(self, other: Operand) -> np.ndarray:
        return self.data >= data_of(other)

    # Identity, as Value: tensors can be dict keys and set members.
    __hash__ = object.__hash__

    # -- functions ------------------------------------------------------------

    def exp(self) -> Tensor:
        """``e ** x`` elementwise; see :func:`chainrule.tensor.exp`."""
        return ops.ew.exp(self)

    def log(self) -> Tensor:
        """The natural logarithm elementwise (``log(0) = -inf``); see ``tensor.log``."""
        return ops.ew.log(self)

    def sqrt(self) -> Tensor:
        """The square root elementwise; see :func:`chainrule.tensor.sqrt`."""
        return ops.ew.sqrt(self)

    def tanh(self) -> Tensor:
        """The hyperbolic tangent elementwise; see :func:`chainrule.tensor.tanh`."""
        return ops.ew.tanh(self)

    def sigmoid(self) -> Tensor:
        """``1 / (1 + e ** -x)`` elementwise; see :func:`chainrule.tensor.sigmoid`."""
        return ops.ew.sigmoid(self)

    def relu(self) -> Tensor:
        """``max(x, 0)`` elementwise; see :func:`chainrule.tensor.relu`."""
        return ops.ew.relu(self)

    def abs(self) -> Tensor:
        """The absolute value elementwise; see :func:`chainrule.tensor.abs`."""
        return ops.ew.abs(self)

    def sum(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """The sum over ``axis`` (all axes when None); see :func:`chainrule.tensor.sum`."""
        return ops.rd.sum(self, axis, keepdims)

    def mean(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """The mean over ``axis`` (all axes when None); see :func:`chainrule.tensor.mean`."""
        return ops.rd.mean(self, axis, keepdims)

    def max(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """The maximum over ``axis`` (all axes when None); see :func:`chainrule.tensor.max`."""
        return ops.rd.max(self, axis, keepdims)

    def min(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """The minimum over ``axis`` (all axes when None); see ``tensor.min``."""
        return ops.rd.min(self, axis, keepdims)

    def var(self, axis: Axis = None, correction: float = 1, keepdims: bool = False) -> Tensor:
        """The variance over ``axis``, divided by ``n - correction`` (PyTorch's default 1)."""
        return ops.rd.var(self, axis, correction, keepdims)

    def std(self, axis: Axis = None, correction: float = 1, keepdims: bool = False) -> Tensor:
        """The standard deviation: the square root of ``var`` with the same arguments."""
        return ops.rd.std(self, axis, correction, keepdims)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        """Each element limited to ``[min, max]`` (either may be None); ``clip`` is the same."""
        return ops.ew.clamp(self, min, max)

    clip = clamp

    def gelu(self, approximate: str = "none") -> Tensor:
        """GELU elementwise, exact (``"none"``) or ``"tanh"``-approximated, as PyTorch's."""
        return ops.ew.gelu(self, approximate)

    def view(self, *shape: Any) -> Tensor:
        """``reshape`` under PyTorch's name (the data may be copied)."""
        return self.reshape(*shape)

    def unsqueeze(self, axis: int) -> Tensor:
        """A new axis of length 1 at ``axis``."""
        return ops.sh.unsqueeze(self, axis)

    def squeeze(self, axis: Any = None) -> Tensor:
        """The axes of length 1 removed (only ``axis`` when it is given)."""
        return ops.sh.squeeze(self, axis)

    def flatten(self, start: int = 0, end: int = -1) -> Tensor:
        """Axes ``start`` to ``end`` (inclusive) merged into one."""
        return ops.sh.flatten(self, start, end)

    def reshape(self, *shape: Any) -> Tensor:
        """The same elements in a new shape, given as ``reshape(2, 3)`` or ``reshape((2, 3))``."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return ops.sh.reshape(self, shape)

    def transpose(self, *axes: Any) -> Tensor:
        """The axes permuted (reversed when none are given), as ``numpy.transpose``."""
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        return ops.sh.transpose(self, axes or None)

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        """The two axes exchanged, as ``numpy.swapaxes``."""
        return ops.sh.swapaxes(self, axis1, axis2)

    @property
    def T(self) -> Tensor:
        """The axes reversed, as ``x.transpose()`` reverses them."""
        return ops.sh.transpose(self, None)

    def softmax(self, axis: int = -1) -> Tensor:
        """``exp(x) / sum(exp(x))`` along ``axis``, computed stably; see ``tensor.softmax``."""
        return ops.nn.softmax(self, axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        """``x - logsumexp(x)`` along ``axis``, computed stably; see ``tensor.log_softmax``."""
        return ops.nn.log_softmax(self, axis)


Axis = Union[int, Sequence[int], None]


# ----------------------------------------------------------------------------
# Numbers coming in
# ----------------------------------------------------------------------------

_ACCEPTED = "a Tensor, NumPy array, real number or nested list of numbers"


def as_array(data: Any, dtype: Any, op: str) -> np.ndarray:
    """``data`` as a float array: float32 and float64 arrays keep their dtype,
    everything else becomes float64 (or ``dtype`` when given)."""
    if isinstance(data, Tensor):
        data = data.data
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype not in FLOAT_DTYPES:
            raise TypeError(f"{op}: dtype must be float32 or float64, got {dtype}")
    if isinstance(data, (str, bytes)) or data is None:
        raise TypeError(f"{op}: expected {_ACCEPTED}, got {type(data).__name__} {data!r}")
    if not isinstance(data, (np.ndarray, np.generic)):
        if hasattr(data, "__dlpack__"):
            data = _from_dlpack(data, op)  # a torch tensor, a JAX array ...: shared, not copied
        elif hasattr(data, "__array__"):
            data = np.asarray(data)  # NumPy's array protocol: shared when it can be
    if isinstance(data, np.ndarray) and data.dtype in FLOAT_DTYPES:
        return data if dtype is None or data.dtype == dtype else data.astype(dtype)
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as e:
        raise TypeError(f"{op}: expected {_ACCEPTED}, got {data!r} ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{op}: expected {_ACCEPTED}, got {arr.dtype} data {data!r}")
    return arr.astype(dtype or np.float64)


def _from_dlpack(data: Any, op: str) -> np.ndarray:
    """An array sharing the memory of a DLPack producer (a torch tensor, a
    JAX array ...); a one-line TypeError when it cannot be shared (on a GPU,
    or a torch tensor that requires grad)."""
    try:
        return np.from_dlpack(data)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        hint = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TypeError(
            f"{op}: cannot read {type(data).__name__} through DLPack ({hint}); "
            "pass a CPU array (for torch: t.detach().cpu())"
        ) from None


def constant(x: Any, op: str) -> Any:
    """A non-Tensor operand as ops use it: a Python float for any real
    scalar (so a float32 tensor stays float32, as in PyTorch), an array
    otherwise."""
    if type(x) is float:
        return x
    if isinstance(x, numbers.Real):  # int, bool, NumPy real scalars (np.float64 too)
        return float(x)
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise TypeError(f"{op}: expected {_ACCEPTED}, got {x.dtype} array")
        return x
    return as_array(x, None, op)


def data_of(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


def lift(x: Any, op: str) -> Tensor:
    """A Tensor as it is; anything else as a new constant leaf."""
    if isinstance(x, Tensor):
        return x
    return Tensor(as_array(x, None, op), requires_grad=False)


# ----------------------------------------------------------------------------
# Node creation: every op goes through here
# ----------------------------------------------------------------------------


def make(data: np.ndarray, prev: tuple[Tensor, ...], vjp: VJP, ctx: Any = None) -> Tensor:
    """A new tensor holding ``data``, computed from ``prev`` with the
    gradient rule ``vjp``. Under ``no_grad`` it is a leaf with no history."""
    t = _new(Tensor)
    # NumPy gives a scalar (numpy.float64), not a 0-d array, for an ufunc on
    # 0-d arrays: a Tensor always holds an array (np.asarray(t) needs one).
    t.data = data if type(data) is np.ndarray else np.asarray(data)
    t.grad = None
    for p in prev:
        if p.requires_grad:
            break
    else:  # nothing to differentiate: a constant
        return _constant_result(t)
    t.requires_grad = True
    if mode.fast:
        t._prev = prev
        t._vjp = vjp
        t._ctx = ctx
        t._id = next_id()
        return t
    if not mode.grad_enabled:
        return _constant_result(t)
    t._prev = prev
    t._vjp = vjp
    t._ctx = ctx
    t._id = next_id()
    if mode.observer is not None:
        mode.observer.forward(t)
    return t


def _gradient(g: Any) -> Any:
    """A gradient as ``.grad`` holds it: an array (a 0-d one, never a NumPy
    scalar, for a 0-d tensor), a Tensor under ``create_graph``, or None."""
    if g is None or type(g) is np.ndarray or isinstance(g, Tensor):
        return g
    return np.asarray(g)


def _constant_result(t: Tensor) -> Tensor:
    t.requires_grad = False
    t._prev = ()
    t._vjp = _leaf_vjp
    t._ctx = None
    t._id = 0
    return t


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` over the axes along which an operand of ``shape`` was
    broadcast, so the gradient has the operand's shape again."""
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


def fit(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``g`` summed to ``x``'s shape and cast to its dtype (a float32 input
    of a float64 op gets a float32 gradient)."""
    if g.shape != x.shape:
        g = unbroadcast(g, x.shape)
    if g.dtype != x.dtype:
        g = g.astype(x.dtype)
    return g


def _seed(root: Tensor, gradient: Any, create_graph: bool, op: str = "backward") -> Any:
    """The root's gradient: ones for a scalar root, else ``gradient``. A
    Tensor ``gradient`` stays a node in a ``create_graph`` pass (the result
    is differentiable with respect to it too)."""
    if gradient is None:
        if root.data.size != 1:
            raise ValueError(
                f"{op}: the root has shape {root.data.shape}; pass gradient= for a non-scalar root"
            )
        seed = np.ones_like(root.data)
    elif create_graph and isinstance(gradient, Tensor):
        if gradient.data.shape != root.data.shape:
            raise ValueError(
                f"{op}: gradient has shape {gradient.data.shape}, the root {root.data.shape}"
            )
        return gradient
    else:
        # a copy: the caller's array must not become (and later change) a grad
        seed = np.array(as_array(gradient, root.data.dtype, op))
        if seed.shape != root.data.shape:
            raise ValueError(f"{op}: gradient has shape {seed.shape}, the root {root.data.shape}")
    return Tensor(seed) if create_graph else seed


def propagate(
    order: list[Tensor], root: Tensor, seed: Any, create_graph: bool
) -> dict[Tensor, Any]:
    """The backward walk, the one loop both passes share: the gradient of
    ``root`` for every node in ``order`` (reverse topological, from
    :func:`~chainrule.value.mode.creation_order`) and every leaf it
    reaches, in a dict; no ``.grad`` is touched.

    Plain pass: the VJPs run on arrays (``ARRAY``). ``create_graph``: on
    Tensors (``GRAPH``), recording a graph, so each gradient can be
    differentiated again. Under ``detect_anomaly`` every contribution is
    shown to the observer.
    """
    observer = mode.observer
    if not create_graph:
        return _walk(order, root, seed, ops.ns.ARRAY, observer)
    # The gradient graph is recorded even under no_grad. detect_anomaly
    # judges its nodes as contributions of the op being differentiated,
    # not as forward ops of their own.
    with enable_grad(), observing(_BackwardOnly(observer)) if observer else nullcontext():
        return _walk(order, root, seed, ops.ns.GRAPH, observer)


class _BackwardOnly:
    """An observer that passes on the backward checks only."""

    def __init__(self, observer: Any) -> None:
        self.backward = observer.backward

    def forward(self, node: Any) -> None:
        pass


def _walk(order: list[Tensor], root: Tensor, seed: Any, M: Any, observer: Any) -> dict[Tensor, Any]:
    grads: dict[Tensor, Any] = {root: seed}
    get = grads.get
    for v in order:
        g = get(v)
        if g is None:  # nothing flowed here (e.g. only through argmax)
            continue
        for child, cg in zip(v._prev, v._vjp(M, g, v)):
            if cg is not None:
                if observer is not None:
                    observer.backward(v, child, cg, g)
                acc = get(child)
                # New arrays, never in place: a contribution may be a view
                # of another node's gradient.
                grads[child] = cg if acc is None else acc + cg
    return grads


def gradients(
    output: Tensor,
    inputs: Sequence[Tensor],
    gradient: Any = None,
    *,
    create_graph: bool = False,
) -> list[Any]:
    """d output / d input for each of ``inputs``, without touching ``.grad``
    (``torch.autograd.grad``): NumPy arrays, or with ``create_graph=True``
    Tensors that can be differentiated again. An input the output does not
    depend on gets zeros. ``gradient`` seeds a non-scalar output.

    >>> from chainrule import Tensor
    >>> from chainrule.tensor import gradients
    >>> x = Tensor([1.0, 2.0])
    >>> (dx,) = gradients((x * x * x).sum(), [x], create_graph=True)
    >>> gradients(dx.sum(), [x])[0]
    array([ 6., 12.])
    """
    if not isinstance(output, Tensor):
        raise TypeError(f"gradients: output must be a Tensor, got {type(output).__name__}")
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            raise TypeError(f"gradients: input {i} must be a Tensor, got {type(x).__name__}")
    seed = _seed(output, gradient, create_graph, "gradients")
    order = creation_order(output)[0]
    grads = propagate(order, output, seed, create_graph) if order else {output: seed}
    out = []
    for x in inputs:
        g = _gradient(grads.get(x))
        if g is None:
            g = np.zeros_like(x.data)
        if create_graph and not isinstance(g, Tensor):
            g = Tensor(g)
        elif not create_graph and not g.flags.writeable:
            g = g.copy()
        out.append(g)
    return out
