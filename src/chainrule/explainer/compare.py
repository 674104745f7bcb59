"""Check gradients written by hand against chainrule's, as micrograd's
"backprop ninja" lecture does with its ``cmp()`` helper.

:func:`compare_grads` takes the gradients a learner worked out, by node (a
label, or the Value or Tensor itself), and prints one line per node in the
lecture's form, ``exact`` / ``approximate`` / ``maxdiff``, against the
gradients of the backward pass of ``root``. chainrule keeps every node's
gradient (no ``retain_grad()`` needed; ``Tensor.retain_grad()`` exists and
does nothing), and the pass is run on the side: no ``.grad`` is changed.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from ..value.engine import Value
from .draw import _is_tensor
from .table import backward_walk
from .text import display_name, forward_order


@dataclass(frozen=True)
class Comparison:
    """One node's line: its name, whether the two gradients are equal bit
    for bit, equal to ``rtol``/``atol`` (``torch.allclose``), and the
    largest absolute difference."""

    name: str
    exact: bool
    approximate: bool
    maxdiff: float

    def line(self, width: int = 15) -> str:
        """The lecture's line: ``name | exact: ... | approximate: ... | maxdiff: ...``."""
        return (
            f"{self.name:{width}s} | exact: {self.exact!s:5s} | "
            f"approximate: {self.approximate!s:5s} | maxdiff: {self.maxdiff}"
        )


@dataclass(frozen=True)
class GradComparison:
    """Every line of :func:`compare_grads`, in the order given."""

    rows: list[Comparison]

    @property
    def all_exact(self) -> bool:
        """Every gradient given equals chainrule's bit for bit."""
        return all(r.exact for r in self.rows)

    @property
    def first_wrong(self) -> Comparison | None:
        """The first node whose gradient is not even approximately right."""
        return next((r for r in self.rows if not r.approximate), None)

    def __str__(self) -> str:
        width = max([15, *(len(r.name) for r in self.rows)])
        lines = [r.line(width) for r in self.rows]
        wrong = self.first_wrong
        if wrong is not None:
            lines.append(f"first wrong: {wrong.name} (maxdiff {wrong.maxdiff})")
        elif self.all_exact:
            lines.append("all exact")
        else:
            lines.append("all approximately right")
        return "\n".join(lines)


def compare_grads(
    root: Any,
    manual: Mapping[Any, Any],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    file: IO[str] | None = None,
    quiet: bool = False,
) -> GradComparison:
    """Compare the gradients in ``manual`` (d root / d node, keyed by the
    node's label or by the node) with chainrule's, print the lecture's
    table (to ``file``, standard output by default; ``quiet``: not at
    all) and return it.

    >>> from chainrule import Value
    >>> a, b = Value(2.0, label="a"), Value(-3.0, label="b")
    >>> e = a * b; e.label = "e"
    >>> _ = compare_grads(e, {"a": -3.0, b: 1.0})
    a               | exact: True  | approximate: True  | maxdiff: 0.0
    b               | exact: False | approximate: False | maxdiff: 1.0
    first wrong: b (maxdiff 1.0)
    """
    if not isinstance(root, Value) and not _is_tensor(root):
        raise TypeError(f"compare_grads: expected a Value or a Tensor, got {type(root).__name__}")
    if not isinstance(manual, Mapping):
        raise TypeError(
            "compare_grads: manual gradients go in a dict, {node or label: gradient}, "
            f"got {type(manual).__name__}"
        )
    nodes = forward_order(root)
    if isinstance(root, Value):
        walk = backward_walk(root)
        ours: dict[int, Any] = {id(v): g for v, g in zip(walk.nodes, walk.grads)}
    else:
        from .tensor_table import tensor_grads

        ours = {id(v): g for v, g in tensor_grads(root)[1].items()}
    by_label: dict[str, list[Any]] = {}
    for v in nodes:
        if v.label:
            by_label.setdefault(v.label, []).append(v)
    in_graph = {id(v) for v in nodes}
    rows = []
    for key, theirs in manual.items():
        node, name = _node(key, by_label, in_graph, nodes)
        rows.append(_compare(name, theirs, ours.get(id(node)), node, rtol, atol))
    report = GradComparison(rows)
    if not quiet:
        print(report, file=file or sys.stdout)
    return report


def _node(key: Any, by_label: dict[str, list[Any]], in_graph: set[int], nodes: list[Any]) -> Any:
    if isinstance(key, str):
        found = by_label.get(key, [])
        if len(found) != 1:
            how = "no node" if not found else f"{len(found)} nodes"
            raise KeyError(f"compare_grads: {how} of the graph labelled {key!r}") from None
        return found[0], key
    if id(key) not in in_graph:
        raise KeyError(
            f"compare_grads: {type(key).__name__} {key!r} is not in the graph of the root"
        )
    return key, display_name(key, next(i for i, v in enumerate(nodes) if v is key))


def _compare(name: str, theirs: Any, ours: Any, node: Any, rtol: float, atol: float) -> Comparison:
    if isinstance(node, Value):
        return _compare_numbers(name, theirs, ours, rtol, atol)
    import numpy as np

    mine = np.zeros_like(node.data) if ours is None else np.asarray(ours)
    given = np.asarray(getattr(theirs, "data", theirs), dtype=mine.dtype)
    if given.shape != mine.shape:
        raise ValueError(
            f"compare_grads: the gradient given for {name} has shape {given.shape}, "
            f"the node {mine.shape}"
        )
    diff = float(np.abs(given - mine).max()) if mine.size else 0.0
    exact = bool(np.array_equal(given, mine))
    return Comparison(name, exact, bool(np.allclose(given, mine, rtol=rtol, atol=atol)), diff)


def _compare_numbers(name: str, theirs: Any, ours: Any, rtol: float, atol: float) -> Comparison:
    t = float(theirs.data if isinstance(theirs, Value) else theirs)
    o = 0.0 if ours is None else float(ours)
    diff = abs(t - o)
    close = diff <= atol + rtol * abs(o) or (t == o)  # inf == inf
    return Comparison(name, t == o, close, diff if not math.isnan(diff) else math.inf)
