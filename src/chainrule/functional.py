"""Function transforms: ``grad``, ``value_and_grad`` and ``hessian``.

As in JAX and ``torch.func``, they turn a Python function of numbers into
the function that computes its derivatives, and they compose:
``grad(grad(f))`` is the second derivative. All three are built on one
engine call, :func:`chainrule.gradients`.

How nesting works. A transformed function called with plain numbers makes
a fresh leaf per number and returns floats. Called inside another
transform, or with Values, it differentiates with ``create_graph=True`` and
returns Values, so the outer transform can differentiate the result again.
A Value argument is not differentiated in place: it is first passed
through a one-input node (``arg``) and the derivative is taken with respect
to that node. The inner derivative then stays a function of the outer
variable, yet does not mix up the inner variable with other uses of the same
Value (JAX's "perturbation confusion")::

    grad(lambda x: grad(lambda y: x * y)(x))(3.0)  # d/dx x = 1.0, not 2.0
"""

from __future__ import annotations

import numbers
import threading
from collections.abc import Callable, Sequence
from typing import Any, Union

from .engine import Primitive, Value, gradients
from .graph import enable_grad

ArgNums = Union[int, Sequence[int]]

#: The node a Value argument is differentiated through: the identity, with
#: local derivative 1, so gradients flow on to the caller's graph.
ARG = Primitive("arg", float, lambda M, x, out: (1.0,))


class _Depth(threading.local):
    """How many transformed functions this thread is inside."""

    level: int = 0


_depth = _Depth()


def _is_scalar(x: object) -> bool:
    return isinstance(x, (Value, numbers.Real))


def _has_value(x: object) -> bool:
    if isinstance(x, Value):
        return True
    return isinstance(x, (list, tuple)) and any(isinstance(item, Value) for item in x)


def _variable(x: object, where: str) -> Value:
    """The node to differentiate with respect to, for one scalar argument."""
    if isinstance(x, Value):
        return ARG(x)
    if isinstance(x, numbers.Real):
        return Value(float(x))
    raise TypeError(f"{where}: expected a number or a Value, got {type(x).__name__} {x!r}")


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


class _Call:
    """One call of a transformed function: its variables, and ``f`` run on them."""

    def __init__(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        positions: tuple[int, ...],
    ) -> None:
        # Values among the arguments, or an outer transform, may want to
        # differentiate the result again: then it is a graph, else floats.
        self.create_graph = (
            _depth.level > 0 or any(map(_has_value, args)) or any(map(_has_value, kwargs.values()))
        )
        self.variables: list[Value] = []
        # per differentiated argument: how many variables, and list, tuple or None (a scalar)
        self.shapes: list[tuple[int, type | None]] = []
        call_args = list(args)
        for i in positions:
            arg = args[i]
            where = f"{name}: argument {i}"
            if isinstance(arg, (list, tuple)):
                container = tuple if isinstance(arg, tuple) else list
                made = [_variable(item, where) for item in arg]
                call_args[i] = container(made)
                self.shapes.append((len(made), container))
                self.variables.extend(made)
            else:
                if not _is_scalar(arg):
                    raise TypeError(
                        f"{where} must be a number, a Value or a list of them, "
                        f"got {type(arg).__name__} {arg!r}"
                    )
                self.variables.append(_variable(arg, where))
                call_args[i] = self.variables[-1]
                self.shapes.append((1, None))
        self.call_args = call_args
        self.name = name

    def run(self, f: Callable[..., Any], kwargs: dict[str, Any]) -> Value:
        _depth.level += 1
        try:
            out = f(*self.call_args, **kwargs)
        finally:
            _depth.level -= 1
        if isinstance(out, Value):
            return out
        if isinstance(out, numbers.Real):
            return Value(float(out))  # a constant: every derivative is 0
        raise TypeError(
            f"{self.name}: the function must return a scalar (a Value or a number), "
            f"got {type(out).__name__} {out!r}"
        )

    def result(self, x: Any) -> Any:
        """A Value as the caller should see it: a float at the outermost level."""
        return x if self.create_graph else x.data if isinstance(x, Value) else float(x)

    def unflatten(self, flat: list[Any], single: bool) -> Any:
        """Gradients shaped like the differentiated arguments."""
        grouped: list[Any] = []
        start = 0
        for count, container in self.shapes:
            part = [self.result(g) for g in flat[start : start + count]]
            start += count
            grouped.append(part[0] if container is None else container(part))
        return grouped[0] if single else tuple(grouped)


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
        flat = gradients(out, call.variables, create_graph=call.create_graph)
    return call.result(out), call.unflatten(flat, isinstance(argnums, int))


def value_and_grad(f: Callable[..., Any], argnums: ArgNums = 0) -> Callable[..., Any]:
    """The function that returns ``(f(*args), gradient of f)``.

    ``argnums`` says which positional arguments to differentiate: an int
    gives one gradient, a tuple of ints a tuple of gradients. An argument may
    be a number, a Value, or a list or tuple of them (its gradient is then a
    list or tuple). ``f`` must return a scalar.

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
    Called with numbers it returns floats; called with Values, or inside
    another transform, it returns Values that can be differentiated again.

    >>> from chainrule import grad
    >>> f = lambda x: x**3
    >>> grad(f)(2.0), grad(grad(f))(2.0), grad(grad(grad(f)))(2.0)
    (12.0, 12.0, 6.0)
    """

    def transformed(*args: Any, **kwargs: Any) -> Any:
        return _evaluate(f, argnums, "grad", args, kwargs)[1]

    _named("grad", f, transformed)
    return transformed


def hessian(f: Callable[..., Any], argnums: ArgNums | None = None) -> Callable[..., Any]:
    """The function that returns the matrix of second derivatives of ``f``.

    The variables are the scalars of the arguments named by ``argnums``
    (default: every positional argument), in order, a list argument
    contributing each of its items. The result is a list of rows:
    ``H[i][j] = d²f / dx_i dx_j``.

    >>> from chainrule import hessian
    >>> hessian(lambda x, y: x * x * y)(3.0, 2.0)
    [[4.0, 6.0], [6.0, 0.0]]
    >>> hessian(lambda v: v[0] * v[1])([1.0, 2.0])
    [[0.0, 1.0], [1.0, 0.0]]
    """

    def transformed(*args: Any, **kwargs: Any) -> list[list[Any]]:
        positions = _positions(argnums, len(args), "hessian")
        call = _Call("hessian", args, kwargs, positions)
        with enable_grad():
            out = call.run(f, kwargs)
            first = gradients(out, call.variables, create_graph=True)
            rows = [gradients(g, call.variables, create_graph=call.create_graph) for g in first]
        return [[call.result(h) for h in row] for row in rows]

    _named("hessian", f, transformed)
    return transformed
