"""The backward pass: :func:`topological_order` (micrograd's ``build_topo``, reversed;
a stack where recursion would go too deep) and :func:`backpropagate`, which seeds the root
and adds ``local * node.grad`` into every input. A node needs ``_prev`` and ``_local``
(the local derivatives, then the primitive, which ``zip`` leaves out)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

from .edges import contributions

#: ``on_edge(node, child, contribution, incoming)`` sees every chain-rule term.
EdgeHook = Callable[[Any, Any, Any, Any], None]
before_walk: Callable[[Any], None] | None = None  # each walk's root, while compile traces


def topological_order(root: Any) -> tuple[list[Any], list[Any]]:
    """The interior nodes ``root`` depends on, each before its inputs, and
    the leaves: micrograd's order exactly, so gradients agree bit for bit."""
    if before_walk is not None:
        before_walk(root)
    if not root._prev:
        return [], [root]
    seen, nodes, leaves = {root}, [], []

    def build_topo(v: Any) -> None:  # micrograd's, with the leaves apart
        for child in v._prev:
            if child not in seen:
                seen.add(child)
                if child._prev:
                    build_topo(child)
                else:
                    leaves.append(child)
        nodes.append(v)

    try:
        build_topo(root)
    except RecursionError:  # deeper than Python recurses: the same order, with a stack
        seen, nodes[:], leaves[:] = {root}, [], []
        stack = [(root, iter(root._prev))]  # a node and the inputs it has yet to visit
        while stack:
            v, inputs = stack[-1]
            for child in inputs:
                if child not in seen:
                    seen.add(child)
                    if child._prev:  # child's inputs first, then back to v's
                        stack.append((child, iter(child._prev)))
                        break
                    leaves.append(child)
            else:  # every input of v is listed: v follows them
                stack.pop()
                nodes.append(v)
    finally:  # a recursive closure is a reference cycle: break it
        build_topo = None  # type: ignore[assignment]
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
    """Set every node's ``.grad`` to ``d root / d node`` (``root``: ``seed``)
    and return the order walked (pass ``order`` to reuse one). ``create_graph``
    evaluates each rule again on Values, so the gradients are differentiable."""
    nodes, leaves = topological_order(root) if order is None else order
    one_by_one = create_graph or on_edge is not None
    while True:
        for v in chain(nodes, leaves):
            v.grad = 0.0
        root.grad = seed
        if one_by_one:
            _term_by_term(nodes, create_graph, on_edge)
            return nodes, leaves
        _multiply_and_add(nodes)
        if all(leaf.grad - leaf.grad == 0.0 for leaf in leaves):
            return nodes, leaves
        # An inf or nan reached a leaf, so every gradient on its way was one too:
        # again, term by term, where a selecting op (relu, max) masks (PyTorch's).
        one_by_one = True


def _multiply_and_add(nodes: list[Any]) -> None:
    walk = iter(nodes)
    while True:
        try:
            for v in walk:  # the hot loop: micrograd's, with the gradient read once
                g = v.grad
                for child, d in zip(v._prev, v._local):
                    child.grad += d * g
            return
        except TypeError:  # micrograd's _backward? Its _local is its primitive alone
            if v._fn.closure is None:
                raise
            v._fn.closure()


def _term_by_term(nodes: list[Any], create_graph: bool, on_edge: EdgeHook | None) -> None:
    for v in nodes:
        g = v.grad
        if v._fn.closure is not None and not create_graph and on_edge is None:
            v._fn.closure()
            continue
        for child, contribution in contributions(v, g, create_graph):
            if on_edge is not None:
                on_edge(v, child, contribution, g)
            acc = child.grad  # the first term is the gradient: no 0.0 + x node
            child.grad = contribution if create_graph and type(acc) is float else acc + contribution
