"""``gradients()``: the backward pass as a function, ``torch.autograd.grad``
for Values. It runs the one walk of :mod:`chainrule.value.walk` and puts every
``.grad`` it used back as it was."""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from .engine import Scalar, Value, _as_float, _lift
from .mode import mode
from .walk import EdgeHook, backpropagate, topological_order

__all__ = ["gradients"]

#: True while :func:`walk_aside` runs (``gradients()``, the functional
#: transforms): a pass that leaves every ``.grad`` as it was, so a node
#: whose backward sets other nodes' ``.grad`` (a compiled call's outputs
#: returned together) has nothing to set.
aside: ContextVar[bool] = ContextVar("chainrule_walk_aside", default=False)


def gradients(
    output: Value,
    inputs: Sequence[Value],
    gradient: Scalar = 1.0,
    *,
    create_graph: bool = False,
) -> list[Any]:
    """d output / d input for each of ``inputs``, leaving every ``.grad`` as
    it was (``torch.autograd.grad``). An input the output does not depend
    on gets 0.

    With ``create_graph=True`` each gradient is a Value that can be
    differentiated again; otherwise a float.

    >>> from chainrule import Value, gradients
    >>> x = Value(3.0)
    >>> gradients(x * x, [x])
    [6.0]
    """
    if not isinstance(output, Value):
        raise TypeError(f"gradients: output must be a Value, got {type(output).__name__}")
    seed: Any = _lift(gradient, "gradients") if create_graph else _as_float(gradient, "gradients")
    observer = mode.observer
    on_edge = None if observer is None else observer.backward
    return walk_aside(output, seed, inputs, create_graph=create_graph, on_edge=on_edge)


def _beside(x: Any, root: Value, seed: Any, reached: set[Any]) -> Any:
    """d root / d ``x`` for an input the walk of ``root`` did not reach: 0.0,
    unless ``x``'s class computes it (``_gradient_beside``: an output of a
    ``chainrule.compile`` call returned beside ``root``, outside its graph)."""
    beside = getattr(type(x), "_gradient_beside", None)
    return 0.0 if beside is None else beside(x, root, seed, reached)


def walk_aside(
    root: Value,
    seed: Any,
    inputs: Sequence[Value] = (),
    *,
    create_graph: bool = False,
    on_edge: EdgeHook | None = None,
) -> list[Any]:
    """Run the backward pass of ``root`` and return the gradients of
    ``inputs``, putting every ``.grad`` the walk used back as it was."""
    nodes, leaves = order = topological_order(root)
    saved = [(v, v.grad) for v in nodes] + [(v, v.grad) for v in leaves]
    token = aside.set(True)
    try:
        backpropagate(root, seed, create_graph=create_graph, on_edge=on_edge, order=order)
        reached = {v for v, _ in saved}
        walked: list[Any] = [x.grad if x in reached else None for x in inputs]
        # (after every gradient the walk gave is read: a node beside it may run a pass)
        out = [_beside(x, root, seed, reached) if g is None else g for g, x in zip(walked, inputs)]
        if create_graph:  # a node that got no contribution holds the float 0.0
            out = [g if isinstance(g, Value) else Value(g) for g in out]
        return out
    finally:
        aside.reset(token)
        for v, g in saved:
            v.grad = g
