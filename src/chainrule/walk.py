"""The backward pass: one topological order and one walk over it.

micrograd's ``backward()`` in two steps, without recursion:

1. :func:`topological_order` lists the nodes a root depends on so that
   every node comes before the nodes it was computed from (micrograd's
   ``build_topo``, reversed, with an explicit stack instead of recursion,
   so a graph a million nodes deep needs no recursion limit);
2. :func:`backpropagate` seeds the root's gradient and walks that order,
   adding ``local * node.grad`` into every input::

       for node in nodes:
           for child, local in zip(node._prev, node._local):
               child.grad += local * node.grad

Everything that walks a scalar graph backwards uses these two:
``Value.backward()``, ``gradients()``, ``explain`` and ``--trace`` (through
``on_edge``), anomaly detection (likewise) and ``chainrule.compile``'s
capture. Nodes only need ``_prev`` (inputs), ``_local`` (their local
derivatives, or None for a micrograd ``_backward`` closure, which ``_fn``
then holds) and ``_fn`` (the primitive); this module imports no engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .primitives import DEAD_UNIT, ZERO_EXPONENT

#: ``on_edge(node, child, contribution, incoming)``: sees every term of the
#: chain rule as it is added (anomaly detection, the explain table).
EdgeHook = Callable[[Any, Any, Any, Any], None]


def topological_order(root: Any) -> tuple[list[Any], list[Any]]:
    """The nodes ``root`` depends on, in two lists.

    The first holds the interior nodes, ``root`` first, each before every
    node it was computed from: the order of the backward pass. The second
    holds the leaves, which only receive gradient.

    The order is micrograd's and microgpt's exactly (a depth-first search
    that lists a node after its inputs, reversed), so a node that receives
    several contributions adds them in the same order and the gradients
    agree bit for bit.
    """
    if not root._prev:
        return [], [root]
    state: dict[Any, bool] = {}  # entered: False, listed: True
    get = state.get
    stack = [root]
    push = stack.append
    nodes: list[Any] = []
    leaves: list[Any] = []
    while stack:
        v = stack.pop()
        s = get(v)
        if s is None:  # entering v: list its inputs first, then come back
            prev = v._prev
            if not prev:
                state[v] = True
                leaves.append(v)
                continue
            state[v] = False
            push(v)
            for child in reversed(prev):
                if child not in state:
                    push(child)
        elif s is False:  # leaving v: every input is listed
            state[v] = True
            nodes.append(v)
    nodes.reverse()
    return nodes, leaves


def backpropagate(
    root: Any,
    seed: Any = 1.0,
    *,
    create_graph: bool = False,
    on_edge: EdgeHook | None = None,
    order: tuple[list[Any], list[Any]] | None = None,
) -> tuple[list[Any], list[Any]]:
    """Set every node's ``.grad`` to ``d root / d node``: the backward pass.

    Every node ``root`` depends on, leaves included, starts from 0;
    ``root`` gets ``seed``. Returns the order walked, ``(nodes, leaves)``
    (pass ``order`` to reuse one already made).

    ``create_graph`` evaluates each node's rule again on Values, so the
    gradients are Values that can be differentiated in turn; ``on_edge``
    is called with ``(node, child, contribution, incoming)`` for every
    term of the chain rule, in the order they are added.
    """
    nodes, leaves = topological_order(root) if order is None else order
    for v in nodes:
        v.grad = 0.0
    for v in leaves:
        v.grad = 0.0
    root.grad = seed
    if create_graph or on_edge is not None:
        _walk_observed(nodes, create_graph, on_edge)
        return nodes, leaves
    for v in nodes:
        g = v.grad
        local = v._local
        if local is None:
            v._fn.closure()  # micrograd's _backward closure
        elif g - g == 0.0 or not v._fn.masked:
            for child, d in zip(v._prev, local):
                child.grad += d * g
        else:  # an inf or nan gradient meets a selecting op (relu, max, ...)
            for child, contribution in _masked(v, local, g):
                child.grad += contribution
    return nodes, leaves


def _walk_observed(nodes: list[Any], create_graph: bool, on_edge: EdgeHook | None) -> None:
    """The walk with a hook on every edge and, for ``create_graph``, the
    local derivatives evaluated on Values (the first contribution a node
    gets is its gradient, so no ``0.0 + x`` node is made)."""
    for v in nodes:
        g = v.grad
        for child, contribution in contributions(v, g, create_graph):
            if on_edge is not None:
                on_edge(v, child, contribution, g)
            acc = child.grad
            if create_graph and acc.__class__ is float:
                child.grad = contribution
            else:
                child.grad = acc + contribution


def contributions(v: Any, g: Any, create_graph: bool = False) -> Iterator[tuple[Any, Any]]:
    """``(child, local * g)`` for each input of ``v``: one node's chain rule.

    With ``create_graph`` the local derivatives are the table's rule
    evaluated on Values. An inf or nan ``g`` passes a selecting op (relu,
    max, min, pow's base) as PyTorch does: a masked input gets nothing.
    """
    fn = v._fn
    if v._local is None:
        raise TypeError(
            f"node {fn.name!r} backpropagates through a _backward closure (micrograd's "
            "protocol), which only backward() without create_graph can run; define the "
            "operation as a chainrule.Primitive to use it here"
        )
    if create_graph:
        from .higher_order import rule  # rules on Values need the Value engine

        local = rule(v)
    else:
        local = v._local
    if type(g) is float and g - g != 0.0 and fn.masked:
        yield from _masked(v, local, g)
        return
    for child, d in zip(v._prev, local):
        yield child, d * g


def _masked(v: Any, local: Sequence[Any], g: float) -> Iterator[tuple[Any, Any]]:
    """The contributions of a selecting op to a non-finite gradient: a
    masked input gets nothing (PyTorch's backward selects, so no 0 * inf)."""
    masked = v._fn.masked
    children = v._prev
    if masked == ZERO_EXPONENT:  # torch.pow selects, for the base only
        base, exponent = children
        if exponent.data != 0.0:
            yield base, local[0] * g
        yield exponent, local[1] * g
        return
    if masked == DEAD_UNIT:  # fused relu(w . x + b): the bias's local is 0 only when inactive
        if local[-1] == 0.0:
            return
        for child, d in zip(children, local):
            yield child, d * g
        return
    for child, d in zip(children, local):
        if d != 0.0:
            yield child, d * g
