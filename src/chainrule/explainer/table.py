"""The backward pass as the walkthroughs tell it: a table, one row per node,
and the trace of every ``+=`` update in the order the pass applies them.

:func:`backward_walk` runs the engine's own backward walk
(``chainrule.value.walk.backpropagate``) with a hook that watches every
term, so it neither needs nor changes ``.grad``. It records the
topological order, the seed, and every update
``child.grad += local * node.grad`` (the local derivative read from the
node's ``_local_grads``) with the child's running total. The table (:func:`explain`), the trace
(:func:`trace`) and the interactive page (:mod:`chainrule.explainer.walkthrough`) are
all drawn from that one record, and their gradients are what
``root.backward()`` gives on fresh gradients (seed 1.0).

Rows come in reverse topological order, the root first: the order in which
the backward pass visits the nodes. A node used by several consumers
receives one contribution from each, and its row shows the sum:
``16.0 + 48.0 = 64.0``. Tensor graphs have a table too, with shapes, dtypes
and gradient norms (``chainrule.explainer.tensor_table``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..value.autograd import walk_aside
from ..value.engine import Value
from ..value.walk import topological_order
from .text import code, display_name, format_number, forward_order, table

#: A node with more contributions than this shows their count, not each one.
MAX_TERMS = 6

#: 17 significant digits tell every float64 apart; more show nothing true.
MAX_DIGITS = 17

HEADER = ("node", "op", "data", "local gradient toward each input", "grad", "meaning")


@dataclass(frozen=True)
class Update:
    """One ``child.grad += local * node.grad`` of the backward pass; nodes
    are indices into ``Walk.nodes``."""

    node: int
    child: int
    local: float
    incoming: float  # node.grad, complete when the node is processed
    contribution: float  # what child.grad receives (local * incoming)
    before: float  # child.grad before the update
    after: float  # and after it


@dataclass(frozen=True)
class Walk:
    """The record of one backward pass from ``nodes[root]``.

    ``nodes`` are in topological (forward) order, each after its inputs;
    ``names`` their labels (``#n`` when unlabelled); ``order`` the interior
    nodes in the order the pass processes them; ``updates`` every ``+=`` in
    the order applied; ``grads`` each node's final gradient, and
    ``received`` the contributions that summed to it.
    """

    nodes: list[Value]
    names: list[str]
    order: list[int]
    root: int
    seed: float
    updates: list[Update]
    grads: list[float]
    received: list[list[float]]

    def locals_of(self, i: int) -> list[tuple[int, float]]:
        """``(input, d node / d input)`` for each input of node ``i``."""
        index = {id(v): k for k, v in enumerate(self.nodes)}
        node = self.nodes[i]
        return [(index[id(c)], float(d)) for c, d in zip(node._children, node._local_grads)]


def backward_walk(root: Value) -> Walk:
    """Run the backward pass of ``root`` on the side (seed 1.0, as
    ``backward()``) and record every update. No ``.grad`` is changed.

    >>> from chainrule.explainer.formula import evaluate
    >>> walk = backward_walk(evaluate("c = a*b; d = c + a; e = d**2", {"a": 2, "b": 3}))
    >>> [(walk.names[u.child], u.contribution) for u in walk.updates]
    [('d', 16.0), ('c', 16.0), ('a', 16.0), ('a', 48.0), ('b', 32.0)]
    """
    if not isinstance(root, Value):
        raise TypeError(f"backward_walk: expected a Value, got {type(root).__name__}")
    nodes = forward_order(root)
    for node in nodes:
        try:
            node._local_grads  # noqa: B018 - a micrograd-style _backward closure has none
        except AttributeError as e:
            raise TypeError(f"explain: {e}") from None
    index = {node: i for i, node in enumerate(nodes)}
    names = [display_name(node, i) for i, node in enumerate(nodes)]
    grads = [0.0] * len(nodes)
    received: list[list[float]] = [[] for _ in nodes]
    updates: list[Update] = []
    r = len(nodes) - 1  # the root comes last in the forward order
    grads[r] = 1.0
    # where each node's next input is looked for: an input that appears
    # twice (x * x) gets its two local derivatives in turn, and an input a
    # masking op skips (inf or nan into relu) is passed over
    position: dict[int, int] = {}

    def watch(node: Value, child: Value, contribution: float, incoming: float) -> None:
        i, k = index[node], index[child]
        p = position.get(i, 0)
        children = node._children
        while children[p] is not child:
            p += 1
        position[i] = p + 1
        before = grads[k]
        grads[k] = before + contribution if received[k] else contribution
        received[k].append(contribution)
        local = float(node._local_grads[p])
        updates.append(Update(i, k, local, incoming, contribution, before, grads[k]))

    walk_aside(root, 1.0, on_edge=watch)
    order = [index[v] for v in topological_order(root)[0]]
    return Walk(nodes, names, order, r, 1.0, updates, grads, received)


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------


def check_digits(digits: object, op: str) -> None:
    """TypeError or ValueError, naming ``op``, unless ``digits`` is an int
    from 1 to ``MAX_DIGITS``."""
    if type(digits) is not int:
        raise TypeError(f"{op}: digits must be an int, got {type(digits).__name__} {digits!r}")
    if not 1 <= digits <= MAX_DIGITS:
        raise ValueError(f"{op}: digits must be between 1 and {MAX_DIGITS}, got {digits}")


def explain(root: Any, format: str = "text", *, digits: int = 6) -> str:  # noqa: A002
    """The backward pass of ``root`` as a table: ``format`` is ``"text"``
    (aligned columns) or ``"markdown"``; numbers keep ``digits``
    significant digits when they do not print short. ``root`` is a Value,
    or a Tensor (shapes, dtypes and gradient norms).

    Read-only: the grads are computed here (seed 1.0, as ``backward()``),
    and no ``.grad`` is changed.

    >>> from chainrule import Value
    >>> a, b = Value(2.0, label="a"), Value(3.0, label="b")
    >>> c = a * b; c.label = "c"
    >>> d = c + a; d.label = "d"
    >>> e = d ** 2; e.label = "e"
    >>> for line in explain(e).splitlines():  # without the meaning column
    ...     print(line[:69].rstrip())
    node  op   data  local gradient toward each input  grad
    ----  ---  ----  --------------------------------  ------------------
    e     **2  64.0  d: 16.0                           1.0 (seed)
    d     +     8.0  c: 1.0, a: 1.0                    16.0
    c     *     6.0  a: 3.0, b: 2.0                    16.0
    b           3.0                                    32.0
    a           2.0                                    16.0 + 48.0 = 64.0
    >>> explain(e).splitlines()[-1][71:]
    'if a increases by a small h, e increases by 64h'
    """
    if format not in ("text", "markdown"):
        raise ValueError(f"explain: format must be 'text' or 'markdown', got {format!r}")
    check_digits(digits, "explain")
    if not isinstance(root, Value):
        if hasattr(root, "_vjp"):  # a Tensor: NumPy is there
            from .tensor_table import explain_tensor

            return explain_tensor(root, format, digits=digits)
        raise TypeError(f"explain: expected a Value or a Tensor, got {type(root).__name__}")
    rows = _rows(backward_walk(root), digits, format == "markdown")
    return table(HEADER, rows, format, right_aligned=(2,))


def _rows(walk: Walk, digits: int, markdown: bool) -> list[tuple[str, ...]]:
    def fmt(x: float) -> str:
        return format_number(x, digits)

    def name(k: int) -> str:
        return code(walk.names[k]) if markdown else walk.names[k]

    rows: list[tuple[str, ...]] = []
    root_name = walk.names[walk.root]
    for i in range(len(walk.nodes) - 1, -1, -1):
        node = walk.nodes[i]
        if i == walk.root:
            grad_text = f"{fmt(walk.seed)} (seed)"
        else:
            grad_text = sum_text([fmt(t) for t in walk.received[i]], fmt(walk.grads[i]))
        local = ", ".join(f"{name(k)}: {fmt(d)}" for k, d in walk.locals_of(i))
        meaning = meaning_of(walk.names[i], root_name, walk.grads[i], i == walk.root, digits)
        rows.append((walk.names[i], node._op, fmt(node.data), local, grad_text, meaning))
    return rows


def meaning_of(name: str, root: str, grad: float, is_root: bool, digits: int = 6) -> str:
    """The grad in words, as the walkthroughs put it: how ``root`` moves
    when ``name`` moves a little.

    >>> meaning_of("a", "f", -3.0, False)
    'if a increases by a small h, f decreases by 3h'
    """
    if is_root:
        return "seed: the output itself"
    if math.isnan(grad):
        return f"the rate of change of {root} is undefined here (nan)"
    if grad == 0.0:
        return f"a small change in {name} leaves {root} unchanged"
    direction = "increases" if grad > 0 else "decreases"
    if math.isinf(grad):
        return f"{root} {direction} without bound as {name} increases (inf)"
    size = format_number(abs(grad), digits).removesuffix(".0")
    by = "h" if size == "1" else (f"{size}*h" if "e" in size else f"{size}h")
    return f"if {name} increases by a small h, {root} {direction} by {by}"


def sum_text(terms: list[str], total: str) -> str:
    """``16.0 + 48.0 = 64.0`` (negative terms subtracted); a single term
    is just the total, and many are counted rather than listed."""
    if len(terms) <= 1:
        return total
    if len(terms) > MAX_TERMS:
        return f"sum of {len(terms)} contributions = {total}"
    return f"{_joined(terms)} = {total}"


def _joined(terms: list[str]) -> str:
    text = terms[0]
    for t in terms[1:]:
        text += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
    return text


# --------------------------------------------------------------------------
# The trace
# --------------------------------------------------------------------------


def trace(root: Value, *, digits: int = 6) -> str:
    """The backward pass of ``root`` update by update, as the walkthroughs
    describe it: the topological order, the seed, then for each node in
    reverse order every ``child.grad += local * node.grad`` with the numbers
    and the child's running total.

    >>> from chainrule.explainer.formula import evaluate
    >>> print(trace(evaluate("c = a*b; d = c + a; e = d**2", {"a": 2, "b": 3})))
    topological order: a, b, c, d, e
    seed: e.grad = 1.0
    reverse order: e, d, c (then b, a: leaves, nothing to pass on)
      e = d**2   d.grad += 16.0 * 1.0  -> d.grad = 16.0
      d = c + a  c.grad += 1.0 * 16.0  -> c.grad = 16.0
                 a.grad += 1.0 * 16.0  -> a.grad = 16.0
      c = a * b  a.grad += 3.0 * 16.0  -> a.grad = 16.0 + 48.0 = 64.0
                 b.grad += 2.0 * 16.0  -> b.grad = 32.0
    """
    if not isinstance(root, Value):
        raise TypeError(f"trace: expected a Value, got {type(root).__name__}")
    check_digits(digits, "trace")
    walk = backward_walk(root)

    def fmt(x: float) -> str:
        return format_number(x, digits)

    names = walk.names
    interior = [names[i] for i in walk.order]
    leaves = [names[i] for i in range(len(walk.nodes) - 1, -1, -1) if not walk.nodes[i]._prev]
    lines = [
        "topological order: " + ", ".join(names),
        f"seed: {grad_of(names[walk.root])} = {fmt(walk.seed)}",
    ]
    if interior:
        rest = f" (then {', '.join(leaves)}: leaves, nothing to pass on)" if leaves else ""
        lines.append("reverse order: " + ", ".join(interior) + rest)
    else:
        lines.append(f"{names[walk.root]} is a leaf: nothing to pass on")
    steps = [
        (
            formula(walk, u.node),
            f"{grad_of(names[u.child])} += {fmt(u.local)} * {fmt(u.incoming)}",
            f"-> {grad_of(names[u.child])} = {total}",
        )
        for u, total in zip(walk.updates, running_totals(walk, digits))
    ]
    # a node that passes nothing on: a non-finite grad meeting a zero local
    # gradient of relu, max or min, which masks it (as PyTorch) instead of 0 * inf
    silent = set(walk.order) - {u.node for u in walk.updates}
    for i in silent:
        reached = i == walk.root or walk.received[i]
        why = f"its grad {fmt(walk.grads[i])} is masked" if reached else "no grad reached it"
        steps.append((formula(walk, i), f"passes nothing: {why}", ""))
    updates = [u.node for u in walk.updates] + list(silent)
    rank = {node: k for k, node in enumerate(walk.order)}
    rows = sorted(zip(updates, steps), key=lambda r: rank[r[0]])  # stable: updates in order
    w0 = max((len(s[0]) for s in steps), default=0)
    w1 = max((len(s[1]) for s in steps), default=0)
    previous = -1
    for node, (head, update, total) in rows:
        head = head if node != previous else ""
        previous = node
        lines.append(f"  {head.ljust(w0)}  {update.ljust(w1)}  {total}".rstrip())
    return "\n".join(lines)


def running_totals(walk: Walk, digits: int = 6) -> list[str]:
    """For each update, the receiving grad after it: ``16.0`` for a first
    contribution, ``16.0 + 48.0 = 64.0`` once there are more (past
    ``MAX_TERMS``, the previous total plus the new term)."""

    def fmt(x: float) -> str:
        return format_number(x, digits)

    totals = []
    count = [0] * len(walk.nodes)
    for u in walk.updates:
        count[u.child] += 1
        terms = walk.received[u.child][: count[u.child]]
        if len(terms) == 1:
            totals.append(fmt(u.after))
        elif len(terms) > MAX_TERMS:
            totals.append(f"{_joined([fmt(u.before), fmt(u.contribution)])} = {fmt(u.after)}")
        else:
            totals.append(f"{_joined([fmt(t) for t in terms])} = {fmt(u.after)}")
    return totals


_INFIX = {"+", "-", "*", "/", "**"}


def formula(walk: Walk, i: int) -> str:
    """How node ``i`` was computed, in its inputs' names: ``c = a * b``,
    ``f = ReLU(e)``, ``e = d**2``, ``g = 2.0 * f``; an operand that was a
    plain number, not a node, is ``number`` unless the local gradient
    gives it away."""
    node = walk.nodes[i]
    inputs = [walk.names[k] for k, _ in walk.locals_of(i)]
    op = node._op or "?"
    if op in _INFIX and len(inputs) == 2:
        body = f"{inputs[0]} {op} {inputs[1]}"
    elif op.startswith("**") and len(inputs) == 1:
        body = f"{inputs[0]}{op}"
    elif op.endswith("**") and len(inputs) == 1:
        body = f"{op}{inputs[0]}"
    else:
        body = f"{op}({', '.join(inputs)})"
    name = walk.names[i]
    if _same_text(name, body):  # a node named by its own formula: said once
        return name
    return f"{name} = {body}"


def _same_text(name: str, body: str) -> bool:
    """``relu(a*b + d)`` and ``ReLU(a*b + d)``, ``a*b`` and ``a * b``: the
    same formula, spaces and case aside (a name shortened with ``...``:
    the start of it)."""
    a, b = ("".join(t.split()).lower() for t in (name, body))
    return a == b or (a.endswith("...") and b.startswith(a[:-3]))


def grad_of(name: str) -> str:
    """``a.grad``, ``relu(e).grad``, and ``(a*b + d).grad`` for a name that
    is not one word or one call, so that the ``.grad`` belongs to all of it."""
    return f"{name}.grad" if _one_term(name) else f"({name}).grad"


_ONE_WORD = re.compile(r"[\w#.\[\]]+")
_CALL = re.compile(r"\w+\((.*)\)")


def _one_term(name: str) -> bool:
    """A word (``a``, ``#3``, ``w.0``) or a call whose parentheses hold
    the rest (``relu(a*b + d)``, not ``exp(a) + exp(b)``)."""
    if _ONE_WORD.fullmatch(name):
        return True
    call = _CALL.fullmatch(name)
    if call is None:
        return False
    depth = 0
    for c in call.group(1):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0
