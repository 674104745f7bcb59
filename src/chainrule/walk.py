"""The backward pass: one topological order and one walk over it.

micrograd's ``backward()`` in two steps, without recursion:
:func:`topological_order` is micrograd's ``build_topo``, reversed, with an
explicit stack; :func:`backpropagate` seeds the root's gradient and walks
that order, adding ``local * node.grad`` into every input::

    for node in nodes:
        for child, local in zip(node._prev, node._local):
            child.grad += local * node.grad

``Value.backward()``, ``gradients()``, ``explain``, ``--trace``, anomaly
detection (through ``on_edge``) and compile's capture all use these two.
A node needs ``_prev``, ``_local`` (None for a micrograd ``_backward``
closure, which ``_fn`` holds) and ``_fn``; this module imports no engine.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

from .edges import contributions

#: ``on_edge(node, child, contribution, incoming)``: sees every term of the
#: chain rule as it is added (anomaly detection, the explain table).
EdgeHook = Callable[[Any, Any, Any, Any], None]


def topological_order(root: Any) -> tuple[list[Any], list[Any]]:
    """The interior nodes ``root`` depends on, each before its inputs, and
    the leaves: micrograd's order exactly, so gradients agree bit for bit."""
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
    """Set every node's ``.grad`` to ``d root / d node`` (leaves included;
    ``root`` gets ``seed``) and return the order walked (pass ``order`` to
    reuse one). ``create_graph`` evaluates each rule again on Values, so the
    gradients can be differentiated in turn; ``on_edge`` sees every term."""
    nodes, leaves = topological_order(root) if order is None else order
    for v in chain(nodes, leaves):
        v.grad = 0.0
    root.grad = seed
    if create_graph or on_edge is not None:
        for v in nodes:
            g = v.grad
            for child, contribution in contributions(v, g, create_graph):
                if on_edge is not None:
                    on_edge(v, child, contribution, g)
                acc = child.grad  # the first term is the gradient: no 0.0 + x node
                child.grad = (
                    contribution if create_graph and type(acc) is float else acc + contribution
                )
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
            for child, contribution in contributions(v, g):
                child.grad += contribution
    return nodes, leaves
