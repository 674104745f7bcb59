"""Function transforms: ``grad``, ``value_and_grad``, ``hessian``,
``jacobian``, ``vjp``, ``jvp`` and ``hvp``.

As in JAX and ``torch.func``, they turn a Python function into the function
that computes its derivatives, and they compose: ``grad(grad(f))`` is the
second derivative. They work on both engines: the arguments may be numbers
and Values (the scalar engine) or Tensors and NumPy arrays (the Tensor
engine), alone or in lists, tuples and dicts. All of them are built on one
engine call, ``gradients`` (``torch.autograd.grad``).

One convention for which arguments, JAX's: ``argnums`` is an int (default
0, the first argument) giving one result, or a tuple of ints giving a tuple
of results. ``vjp``, ``jvp`` and ``hvp`` take their primals together and,
as ``jax.vjp`` and ``jax.jvp``, differentiate all of them unless
``argnums`` names some.

How nesting works. A transformed function called with plain numbers (or
arrays) makes a fresh leaf per number and returns floats (arrays). Called
inside another transform, or with Values (Tensors), it differentiates with
``create_graph=True`` and returns Values (Tensors), so the outer transform
can differentiate the result again. A Value argument is not differentiated
in place: it is first passed through a one-input identity node (``arg``) and
the derivative is taken with respect to that node. The inner derivative then
stays a function of the outer variable, yet does not mix up the inner
variable with other uses of the same Value (JAX's "perturbation
confusion")::

    grad(lambda x: grad(lambda y: x * y)(x))(3.0)  # d/dx x = 1.0, not 2.0

A function compiled by ``chainrule.compile`` is differentiated twice
(``hessian``, ``jvp``, ``hvp``, a nested transform) through its own
function, eagerly: a replay's output has no Values to differentiate again.

``jvp`` is forward-over-reverse: the VJP is linear in its cotangent ``u``,
so the derivative of ``<vjp(u), tangent>`` with respect to ``u`` is the
Jacobian-vector product. ``hvp`` is reverse-over-reverse: the gradient of
``<grad f, v>``, never forming the Hessian.
"""

from __future__ import annotations

import numbers
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import MethodType
from typing import Any, Union

from .value.autograd import gradients as _value_gradients
from .value.engine import Primitive, Value
from .value.mode import enable_grad

ArgNums = Union[int, Sequence[int]]

#: The node a Value argument is differentiated through: the identity, with
#: local derivative 1, so gradients flow on to the caller's graph.
ARG = Primitive("arg", float, lambda M, x, out: (1.0,))


class _Depth(threading.local):
    """How many transformed functions this thread is inside."""

    level: int = 0


_depth = _Depth()

# ----------------------------------------------------------------------------
# Leaves and containers
# ----------------------------------------------------------------------------

# What a leaf was given as, which decides how its result is returned.
NUMBER, VALUE, ARRAY, TENSOR = "number", "value", "array", "tensor"


def _tensor_module() -> Any:
    """``chainrule.tensor`` (imported on first use: it needs NumPy)."""
    from . import tensor

    return tensor


def _loaded_tensor_class() -> Any:
    """``Tensor`` if its module is loaded, else None: no argument can be a
    Tensor before that, and the scalar engine never imports NumPy."""
    module = sys.modules.get("chainrule.tensor.tensor")
    # (None while another thread still runs its import: no Tensor exists yet)
    return getattr(module, "Tensor", None)


def _kind(x: object) -> str | None:
    if isinstance(x, Value):
        return VALUE
    if isinstance(x, numbers.Real):
        return NUMBER
    tensor = _loaded_tensor_class()
    if tensor is not None and isinstance(x, tensor):
        return TENSOR
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray) and x.dtype.kind in "biuf":
        return ARRAY
    return None


_LEAVES = "a number, a Value, a Tensor, an array or a list, tuple or dict of them"


def _flatten(x: Any, where: str, leaves: list[Any]) -> Any:
    """Append the leaves of ``x`` to ``leaves``; return its structure, for
    :func:`_build`: None for a leaf, else (container type, parts)."""
    if isinstance(x, (list, tuple)):
        container = type(x) if type(x) in (list, tuple) else tuple
        return container, [_flatten(item, where, leaves) for item in x]
    if isinstance(x, dict):
        return dict, [(k, _flatten(v, where, leaves)) for k, v in x.items()]
    if _kind(x) is None:
        raise TypeError(f"{where} must be {_LEAVES}, got {type(x).__name__} {x!r}")
    leaves.append(x)
    return None


def _build(structure: Any, leaves: Iterator[Any]) -> Any:
    """The structure :func:`_flatten` returned, filled with new leaves."""
    if structure is None:
        return next(leaves)
    container, parts = structure
    if container is dict:
        return {k: _build(part, leaves) for k, part in parts}
    return container([_build(part, leaves) for part in parts])


def _any_graph(x: Any) -> bool:
    """A Value or a Tensor anywhere in ``x``: the caller may differentiate
    the result again."""
    if isinstance(x, (list, tuple)):
        return any(map(_any_graph, x))
    if isinstance(x, dict):
        return any(map(_any_graph, x.values()))
    return _kind(x) in (VALUE, TENSOR)


def _positions(argnums: ArgNums | None, nargs: int, name: str) -> tuple[int, ...]:
    """``argnums`` as a tuple of non-negative positions into the arguments."""
    if argnums is None:
        wanted: Sequence[int] = range(nargs)
    elif isinstance(argnums, int):
        wanted = (argnums,)
    else:
        wanted = tuple(argnums)
    positions = []
    for i in wanted:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"{name}: argnums must be ints, got {i!r}")
        if not -nargs <= i < nargs:
            raise IndexError(f"{name}: argnums {i} is out of range for {nargs} argument(s)")
        positions.append(i % nargs)
    if len(set(positions)) != len(positions):
        raise ValueError(f"{name}: argnums {argnums!r} names an argument twice")
    return tuple(positions)


# ----------------------------------------------------------------------------
# One call of a transformed function
# ----------------------------------------------------------------------------


class _Call:
    """One call of a transformed function: its variables, and ``f`` run on them."""

    def __init__(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        positions: tuple[int, ...],
        twice: bool = False,
    ) -> None:
        self.name = name
        # Values or Tensors among the arguments, or an outer transform, may
        # want to differentiate the result again: then it is a graph.
        self.create_graph = (
            _depth.level > 0 or any(map(_any_graph, args)) or any(map(_any_graph, kwargs.values()))
        )
        # the transform differentiates f's graph again (hessian, jvp, hvp)
        self.twice = twice
        found: list[list[Any]] = []
        structures = []
        for i in positions:
            leaves: list[Any] = []
            structures.append(_flatten(args[i], f"{name}: argument {i}", leaves))
            found.append(leaves)
        kinds = [_kind(x) for leaves in found for x in leaves]
        tensor = any(k in (TENSOR, ARRAY) for k in kinds)
        if tensor and VALUE in kinds:
            raise TypeError(f"{name}: Values and Tensors cannot be differentiated together")
        # the Tensor engine's module when the variables are Tensors, else None
        self.ct = _tensor_module() if tensor else None
        self.kinds = kinds
        self.variables = [self._variable(x) for leaves in found for x in leaves]
        self.structures = structures
        call_args = list(args)
        it = iter(self.variables)
        for i, structure in zip(positions, structures):
            call_args[i] = _build(structure, it)
        self.call_args = call_args

    def _variable(self, x: Any) -> Any:
        """The node to differentiate with respect to, for one leaf."""
        if isinstance(x, Value):
            return ARG(x)
        if self.ct is None:
            return Value(float(x))
        if isinstance(x, self.ct.Tensor):
            return _tensor_arg(self.ct)(x)
        return self.ct.Tensor(x)  # a number or an array: a fresh leaf

    def call(self, f: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """``f`` on the variables, its result as it returned it."""
        if self.twice or self.create_graph:
            f = _differentiable(f)
        _depth.level += 1
        try:
            return f(*self.call_args, **kwargs)
        finally:
            _depth.level -= 1

    def run(self, f: Callable[..., Any], kwargs: dict[str, Any], scalar: bool = True) -> Any:
        """``f`` on the variables: one node (a scalar one when ``scalar``)."""
        out = self.call(f, kwargs)
        if self.ct is not None:
            if isinstance(out, numbers.Real):
                return self.ct.Tensor(float(out))  # a constant: every derivative is 0
            if isinstance(out, self.ct.Tensor) and (out.data.size == 1 or not scalar):
                return out
            if isinstance(out, self.ct.Tensor):
                what = f"a Tensor of shape {out.data.shape}"
            else:
                what = f"{type(out).__name__} {out!r}"
            raise TypeError(
                f"{self.name}: the function must return a scalar (a one-element Tensor or "
                f"a number), got {what}"
            )
        if isinstance(out, Value):
            return out
        if isinstance(out, numbers.Real):
            return Value(float(out))
        raise TypeError(
            f"{self.name}: the function must return a scalar (a Value or a number), "
            f"got {type(out).__name__} {out!r}"
        )

    def gradients(
        self, out: Any, xs: Sequence[Any], seed: Any = None, graph: bool = False
    ) -> list[Any]:
        """d out / d x for each of ``xs`` (``seed`` weighting a non-scalar
        ``out``); a graph when ``graph`` or the caller wants one."""
        create_graph = graph or self.create_graph
        if self.ct is not None:
            return self.ct.gradients(out, xs, seed, create_graph=create_graph)
        return _value_gradients(out, xs, 1.0 if seed is None else seed, create_graph=create_graph)

    def value(self, x: Any) -> Any:
        """The function's value as the caller should see it."""
        if self.create_graph:
            return x
        if self.ct is not None:
            return float(x.data.reshape(())) if x.data.size == 1 else x.data
        return x.data

    def result(self, x: Any, kind: str) -> Any:
        """A gradient as the caller should see it: a graph when wanted,
        else a float for a number or Value and an array for an array."""
        if self.create_graph:
            return x
        data = self.data(x)
        if kind in (NUMBER, VALUE):
            return float(data)
        return data

    def data(self, x: Any) -> Any:
        """The number or array inside a Value or Tensor; others as they are."""
        if isinstance(x, Value) or (self.ct is not None and isinstance(x, self.ct.Tensor)):
            return x.data
        return x

    def unflatten(self, flat: list[Any], single: bool) -> Any:
        """Results shaped like the differentiated arguments."""
        return self.group([self.result(g, k or NUMBER) for g, k in zip(flat, self.kinds)], single)

    def group(self, items: list[Any], single: bool) -> Any:
        """One item per variable, put back in the arguments' structure: the
        argument's own (an int ``argnums``) or a tuple of them (JAX's rule)."""
        it = iter(items)
        grouped = tuple([_build(structure, it) for structure in self.structures])
        return grouped[0] if single else grouped

    def outputs(self, out: Any) -> tuple[Any, list[Any]]:
        """The leaves of ``f``'s result as nodes (numbers and arrays as
        constants), and its structure for :func:`_build`."""
        leaves: list[Any] = []
        structure = _flatten(out, f"{self.name}: the function's result", leaves)
        nodes = []
        for leaf in leaves:
            kind, ct = _kind(leaf), self.ct
            if ct is None:
                if kind in (TENSOR, ARRAY):
                    raise TypeError(
                        f"{self.name}: the function of numbers or Values returned a {kind}"
                    )
                nodes.append(Value(float(leaf)) if kind == NUMBER else leaf)
            else:
                if kind == VALUE:
                    raise TypeError(f"{self.name}: the function of Tensors returned a Value")
                nodes.append(leaf if kind == TENSOR else ct.Tensor(leaf))  # a constant
        return structure, nodes

    def jacobian(self, outputs: list[Any]) -> list[list[Any]]:
        """``J[a][j]``: the derivative of output ``a`` with respect to
        variable ``j``, of shape ``outputs[a].shape + variables[j].shape``
        (a float or Value in the scalar engine), one reverse pass per
        output element."""
        xs = self.variables
        if self.ct is None:
            return [self.gradients(o, xs) for o in outputs]
        np = sys.modules["numpy"]
        blocks: list[list[Any]] = []
        for o in outputs:
            flat = o.reshape(-1)
            rows = [self.gradients(flat[k], xs) for k in range(flat.data.size)]
            blocks.append([])
            for j, x in enumerate(xs):
                shape = (*o.data.shape, *x.data.shape)
                column = [row[j] for row in rows]
                if self.create_graph:
                    block = self.ct.stack(column) if column else self.ct.Tensor(np.zeros(shape))
                else:
                    block = np.stack(column) if column else np.zeros(shape, x.data.dtype)
                blocks[-1].append(block.reshape(shape))
        return blocks

    def block(self, x: Any, row_kind: str | None, col_kind: str | None) -> Any:
        """A block of a Jacobian or Hessian as the caller should see it: a
        float between two scalar variables, else an array (a graph when
        wanted)."""
        if self.create_graph:
            return x
        data = self.data(x)
        if self.ct is None or (data.ndim == 0 and {row_kind, col_kind} <= {NUMBER, VALUE}):
            return float(data)
        return data

    def dot(self, xs: list[Any], tangents: list[Any]) -> Any:
        """``sum_i <xs_i, tangents_i>``: a scalar node."""
        if self.ct is not None:
            terms = [(x * self.ct.Tensor(t)).sum() for x, t in zip(xs, tangents)]
            return self.ct.sum(self.ct.stack(terms)) if terms else self.ct.Tensor(0.0)
        total: Any = Value(0.0)
        for x, t in zip(xs, tangents):
            total = total + x * float(t)
        return total

    def tangents(self, tangents: Any, name: str) -> list[Any]:
        """The tangent leaves (numbers or arrays), checked against the variables."""
        leaves: list[Any] = []
        _flatten(tangents, f"{name}: tangent", leaves)
        if len(leaves) != len(self.variables):
            raise ValueError(
                f"{name}: {len(leaves)} tangent(s) for {len(self.variables)} primal(s)"
            )
        out = []
        for t, x in zip(leaves, self.variables):
            t = self.data(t)
            if self.ct is not None:
                t = self.ct.tensor.as_array(t, x.data.dtype, name)
                if t.shape != x.data.shape:
                    raise ValueError(
                        f"{name}: tangent of shape {t.shape} for a primal of shape {x.data.shape}"
                    )
            else:
                t = float(t)
            out.append(t)
        return out


_TENSOR_ARG: list[Any] = []


def _differentiable(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f``, or for a function compiled by :func:`chainrule.compile` (a
    method decorated with it too) the function itself: a replay's output is
    one node whose backward is the replay's, with no Values to differentiate
    again, so a transform that does (``hessian``, ``jvp``, ``hvp``, a nested
    one) runs it eagerly, with eager's numbers. (Not one with an optimizer:
    a call of it is a training step.)"""
    compiler = sys.modules.get("chainrule.compiler")
    if compiler is None:  # (nothing compiled yet)
        return f
    bound = getattr(f, "__self__", None) if isinstance(f, MethodType) else None
    compiled = f.__func__ if bound is not None else f  # type: ignore[attr-defined]
    if not isinstance(compiled, compiler.Compiled) or compiled.optimizer is not None:
        return f
    return compiled.fn if bound is None else MethodType(compiled.fn, bound)


def _tensor_arg(ct: Any) -> Any:
    """The Tensor engine's ``arg``: the identity, as a custom op."""
    if not _TENSOR_ARG:
        _TENSOR_ARG.append(ct.Primitive("arg", lambda x: x, lambda M, g, x, out: (g,)))
    return _TENSOR_ARG[0]


def _named(transform: str, f: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    name = getattr(f, "__name__", "f")
    wrapper.__name__ = wrapper.__qualname__ = f"{transform}({name})"
    wrapper.__doc__ = f"The {transform} of {name}, made by chainrule.{transform}."


def _evaluate(
    f: Callable[..., Any],
    argnums: ArgNums,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[Any, Any]:
    positions = _positions(argnums, len(args), name)
    call = _Call(name, args, kwargs, positions)
    with enable_grad():  # a transform, like torch.func: an outer no_grad does not apply
        out = call.run(f, kwargs)
        flat = call.gradients(out, call.variables)
    return call.value(out), call.unflatten(flat, isinstance(argnums, int))


# ----------------------------------------------------------------------------
# The transforms
# ----------------------------------------------------------------------------


def value_and_grad(f: Callable[..., Any], argnums: ArgNums = 0) -> Callable[..., Any]:
    """The function that returns ``(f(*args), gradient of f)``.

    ``argnums`` says which positional arguments to differentiate: an int
    gives one gradient, a tuple of ints a tuple of gradients. An argument may
    be a number, a Value, a Tensor, a NumPy array, or a list, tuple or dict
    of them (its gradient has the same structure). ``f`` must return a
    scalar: a number, a Value or a one-element Tensor.

    >>> from chainrule import value_and_grad
    >>> value_and_grad(lambda x, y: x * y + y, argnums=(0, 1))(2.0, 3.0)
    (9.0, (3.0, 3.0))
    """

    def transformed(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return _evaluate(f, argnums, "value_and_grad", args, kwargs)

    _named("value_and_grad", f, transformed)
    return transformed


def grad(f: Callable[..., Any], argnums: ArgNums = 0) -> Callable[..., Any]:
    """The function that returns the gradient of ``f``, a scalar function.

    Composable to any order: ``grad(grad(f))`` is the second derivative.
    Called with numbers (arrays) it returns floats (arrays); called with
    Values (Tensors), or inside another transform, it returns Values
    (Tensors) that can be differentiated again.

    >>> from chainrule import grad
    >>> f = lambda x: x**3
    >>> grad(f)(2.0), grad(grad(f))(2.0), grad(grad(grad(f)))(2.0)
    (12.0, 12.0, 6.0)
    >>> import numpy as np
    >>> grad(lambda t: (t * t * t).sum())(np.array([1.0, 2.0, 3.0]))
    array([ 3., 12., 27.])
    """

    def transformed(*args: Any, **kwargs: Any) -> Any:
        return _evaluate(f, argnums, "grad", args, kwargs)[1]

    _named("grad", f, transformed)
    return transformed


def hessian(f: Callable[..., Any], argnums: ArgNums = 0) -> Callable[..., Any]:
    """The function that returns the second derivatives of ``f``, a scalar
    function, as ``jax.hessian`` and ``torch.func.hessian``.

    ``argnums`` works as for :func:`grad`: an int (default 0) gives the
    Hessian with respect to that argument, a tuple of ints the tuple of
    blocks, ``H[i][j] = d²f / dx_i dx_j``. A scalar argument gives a float,
    an array or Tensor a block of shape ``x_i.shape + x_j.shape``, and a
    list (tuple, dict) of them the nested structure JAX gives: a list of
    rows for a list argument.

    >>> from chainrule import hessian
    >>> rosenbrock = lambda x, y: (1 - x) ** 2 + 100 * (y - x * x) ** 2
    >>> hessian(rosenbrock)(1.0, 1.0)
    802.0
    >>> hessian(rosenbrock, argnums=(0, 1))(1.0, 1.0)
    ((802.0, -400.0), (-400.0, 200.0))
    >>> hessian(lambda v: v[0] * v[1])([1.0, 2.0])
    [[0.0, 1.0], [1.0, 0.0]]
    """

    def transformed(*args: Any, **kwargs: Any) -> Any:
        positions = _positions(argnums, len(args), "hessian")
        call = _Call("hessian", args, kwargs, positions, twice=True)
        with enable_grad():
            out = call.run(f, kwargs)
            first = call.gradients(out, call.variables, graph=True)
            blocks = call.jacobian(first)
        single = isinstance(argnums, int)
        rows = [
            call.group([call.block(h, ka, kb) for h, kb in zip(row, call.kinds)], single)
            for row, ka in zip(blocks, call.kinds)
        ]
        return call.group(rows, single)

    _named("hessian", f, transformed)
    return transformed


def jacobian(f: Callable[..., Any], argnums: ArgNums = 0) -> Callable[..., Any]:
    """The function that returns the Jacobian of ``f`` by reverse mode, one
    backward pass per output element (``jax.jacrev``,
    ``torch.func.jacrev``).

    ``f`` returns a Value, a Tensor, or a list, tuple or dict of them; the
    result has that structure, each output replaced by its derivatives with
    respect to the arguments named by ``argnums`` (an int, default 0, or a
    tuple giving a tuple). The block of output ``y`` and argument ``x`` has
    the shape ``y.shape + x.shape`` (a float for two scalars).

    >>> import numpy as np
    >>> from chainrule import jacobian
    >>> jacobian(lambda x: x * x)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    >>> jacobian(lambda x, y: [x * y, x + y], argnums=(0, 1))(2.0, 3.0)
    [(3.0, 2.0), (1.0, 1.0)]
    """

    def transformed(*args: Any, **kwargs: Any) -> Any:
        positions = _positions(argnums, len(args), "jacobian")
        call = _Call("jacobian", args, kwargs, positions)
        with enable_grad():
            structure, outputs = call.outputs(call.call(f, kwargs))
            blocks = call.jacobian(outputs)
        single = isinstance(argnums, int)
        per_output = [
            call.group([call.block(b, TENSOR, k) for b, k in zip(row, call.kinds)], single)
            for row in blocks
        ]
        return _build(structure, iter(per_output))

    _named("jacobian", f, transformed)
    return transformed


def _all_or(argnums: ArgNums | None, nargs: int, name: str) -> tuple[int, ...]:
    """The positions ``argnums`` names; every argument when None (``jax.vjp``
    and ``jax.jvp`` differentiate all their primals)."""
    return tuple(range(nargs)) if argnums is None else _positions(argnums, nargs, name)


def _primals(primals: Any) -> tuple[Any, ...]:
    return tuple(primals) if isinstance(primals, tuple) else (primals,)


def vjp(
    f: Callable[..., Any], *primals: Any, argnums: ArgNums | None = None
) -> tuple[Any, Callable[[Any], Any]]:
    """``(f(*primals), vjp_fn)``: ``vjp_fn(cotangent)`` returns, for each
    primal, the cotangent pulled back through ``f`` (``jax.vjp``). ``f``
    may return any Value or Tensor; ``vjp_fn`` can be called many times.
    ``argnums`` (an int, or a tuple giving a tuple) pulls back to those
    primals only; by default to all of them, as JAX.

    >>> import numpy as np
    >>> from chainrule import vjp
    >>> y, pull = vjp(lambda x: x * x, np.array([1.0, 2.0]))
    >>> pull(np.array([1.0, 10.0]))
    (array([ 2., 40.]),)
    """
    call = _Call("vjp", primals, {}, _all_or(argnums, len(primals), "vjp"))
    with enable_grad():
        out = call.run(f, {}, scalar=False)

    def vjp_fn(cotangent: Any) -> Any:
        with enable_grad():
            flat = call.gradients(out, call.variables, cotangent)
        return call.unflatten(flat, isinstance(argnums, int))

    return call.value(out), vjp_fn


def jvp(
    f: Callable[..., Any], primals: Any, tangents: Any, *, argnums: ArgNums | None = None
) -> tuple[Any, Any]:
    """``(f(*primals), J @ tangents)``: the directional derivative of ``f``
    along ``tangents`` (``jax.jvp``), forward-over-reverse. ``primals`` is
    a tuple of arguments (or one argument) and ``tangents`` matches it, or,
    with ``argnums``, matches the primals it names (the others held fixed).

    >>> from chainrule import jvp
    >>> jvp(lambda x, y: x * y, (2.0, 3.0), (1.0, 0.0))
    (6.0, 3.0)
    >>> jvp(lambda x, y: x * y, (2.0, 3.0), 1.0, argnums=1)
    (6.0, 2.0)
    """
    args = _primals(primals)
    call = _Call("jvp", args, {}, _all_or(argnums, len(args), "jvp"), twice=True)
    ts = call.tangents(tangents, "jvp")
    with enable_grad():
        out = call.run(f, {}, scalar=False)
        # The VJP is linear in its cotangent u; d<vjp(u), t>/du = J t.
        if call.ct is not None:
            u = call.ct.Tensor(sys.modules["numpy"].zeros_like(out.data))
        else:
            u = Value(0.0)
        pulled = call.gradients(out, call.variables, u, graph=True)
        (tangent_out,) = call.gradients(call.dot(pulled, ts), [u])
    kind = TENSOR if call.ct is not None else NUMBER
    return call.value(out), call.result(tangent_out, kind)


def hvp(
    f: Callable[..., Any], primals: Any, tangents: Any, *, argnums: ArgNums | None = None
) -> tuple[Any, Any]:
    """``(f(*primals), H @ tangents)``: the Hessian of the scalar function
    ``f`` times a vector, without forming the Hessian (reverse-over-reverse:
    the gradient of ``<grad f, tangents>``), as
    ``torch.autograd.functional.hvp``. The product has the structure of
    ``primals`` (a tuple of arguments, or one argument); with ``argnums``
    the tangents and the product are those of the primals it names, as
    :func:`grad`'s.

    >>> from chainrule import hvp
    >>> hvp(lambda x, y: x * x * y, (3.0, 2.0), (1.0, 0.0))
    (18.0, (4.0, 6.0))
    >>> hvp(lambda x, y: x * x * y, (3.0, 2.0), 1.0, argnums=0)
    (18.0, 4.0)
    """
    args = _primals(primals)
    call = _Call("hvp", args, {}, _all_or(argnums, len(args), "hvp"), twice=True)
    ts = call.tangents(tangents, "hvp")
    with enable_grad():
        out = call.run(f, kwargs={})
        first = call.gradients(out, call.variables, graph=True)
        product = call.gradients(call.dot(first, ts), call.variables)
    single = isinstance(argnums, int) or (argnums is None and not isinstance(primals, tuple))
    return call.value(out), call.unflatten(product, single)


def gradients(
    output: Any, inputs: Sequence[Any], gradient: Any = None, *, create_graph: bool = False
) -> list[Any]:
    """d output / d input for each of ``inputs``, without touching ``.grad``
    (``torch.autograd.grad``), for Values (floats, or Values with
    ``create_graph=True``) and Tensors (arrays, or Tensors with
    ``create_graph=True``). ``gradient`` weights the output (1 by default;
    required for a non-scalar Tensor)."""
    tensor = _loaded_tensor_class()
    if tensor is not None and isinstance(output, tensor):
        return _tensor_module().gradients(output, inputs, gradient, create_graph=create_graph)
    return _value_gradients(
        output, inputs, 1.0 if gradient is None else gradient, create_graph=create_graph
    )
