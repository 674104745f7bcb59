"""The backward pass as a table, one row per node, the way the seeds teach it.

Rows come in reverse topological order, the root first: the order in which
the backward pass visits the nodes. Each row gives the node's label, its
operation, its data, the local gradient toward each of its inputs (stored
when the node was made), and its grad. A node used by several consumers
receives one contribution ``local * consumer.grad`` from each, and its row
shows the sum: ``16.0 + 48.0 = 64.0``.

:func:`explain` computes that pass itself and reads nothing but ``data`` and
the local gradients: it neither needs nor changes ``.grad``. Its grad column
is what ``root.backward()`` gives on fresh gradients (seed 1.0).
"""

from __future__ import annotations

from typing import NamedTuple

from .engine import Value, backpropagate
from .viz import display_name, format_number, forward_order

#: A node with more contributions than this shows their count, not each one.
MAX_TERMS = 6

HEADER = ("node", "op", "data", "local gradient toward each input", "grad")


def explain(root: Value, format: str = "text", *, digits: int = 6) -> str:  # noqa: A002
    """The backward pass of ``root`` as a table: ``format`` is ``"text"``
    (aligned columns) or ``"markdown"``; numbers keep ``digits``
    significant digits when they do not print short.

    Read-only: the grads are computed here (seed 1.0, as ``backward()``),
    and no ``.grad`` is changed.

    >>> from chainrule import Value
    >>> a, b = Value(2.0, label="a"), Value(3.0, label="b")
    >>> c = a * b; c.label = "c"
    >>> d = c + a; d.label = "d"
    >>> e = d ** 2; e.label = "e"
    >>> print(explain(e))
    node  op   data  local gradient toward each input  grad
    ----  ---  ----  --------------------------------  ------------------
    e     **2  64.0  d: 16.0                           1.0 (seed)
    d     +     8.0  c: 1.0, a: 1.0                    16.0
    c     *     6.0  a: 3.0, b: 2.0                    16.0
    b           3.0                                    32.0
    a           2.0                                    16.0 + 48.0 = 64.0
    """
    if not isinstance(root, Value):
        raise TypeError(f"explain: expected a Value, got {type(root).__name__}")
    if format not in ("text", "markdown"):
        raise ValueError(f"explain: format must be 'text' or 'markdown', got {format!r}")
    rows = _rows(root, digits)
    if format == "markdown":
        return _markdown(rows)
    return _text(rows)


class _Row(NamedTuple):
    node: str
    op: str
    data: str
    local: list[tuple[str, str]]  # (input, d node / d input), one per input
    grad: str


def _rows(root: Value, digits: int) -> list[_Row]:
    nodes = forward_order(root)
    name = {node: display_name(node, i) for i, node in enumerate(nodes)}
    received: dict[Value, list[float]] = {}

    def record(node: Value, child: Value, contribution: float, incoming: float) -> None:
        received.setdefault(child, []).append(contribution)

    # The backward pass itself, watched term by term (inf or nan into relu,
    # max or min follows its masking rule): the sums agree exactly.
    grads = backpropagate(root, 1.0, on_edge=record)

    def fmt(x: float) -> str:
        return format_number(x, digits)

    rows = []
    for node in reversed(nodes):
        if node is root:
            grad_text = f"{fmt(1.0)} (seed)"
        else:
            terms = received.get(node, [])
            grad_text = _sum_text([fmt(t) for t in terms], fmt(grads.get(node, 0.0)))
        local_text = [(name[c], fmt(d)) for c, d in zip(node._children, node._local_grads)]
        rows.append(_Row(name[node], node._op, fmt(node.data), local_text, grad_text))
    return rows


def _sum_text(terms: list[str], total: str) -> str:
    if len(terms) <= 1:
        return total
    if len(terms) > MAX_TERMS:
        return f"sum of {len(terms)} contributions = {total}"
    text = terms[0]
    for t in terms[1:]:
        text += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
    return f"{text} = {total}"


def _text(rows: list[_Row]) -> str:
    cells = [
        (r.node, r.op, r.data, ", ".join(f"{n}: {d}" for n, d in r.local), r.grad) for r in rows
    ]
    widths = [max(len(c[k]) for c in [HEADER, *cells]) for k in range(len(HEADER))]
    rule = tuple("-" * w for w in widths)
    lines = []
    for row in (HEADER, rule, *cells):
        # data is right-aligned so the numbers line up on their last digit
        data_column = row[2].ljust(widths[2]) if row is HEADER else row[2].rjust(widths[2])
        parts = [row[0].ljust(widths[0]), row[1].ljust(widths[1]), data_column]
        parts += [row[3].ljust(widths[3]), row[4]]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _code(text: str) -> str:
    """``text`` as inline code in a Markdown table cell."""
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`" if text else ""


def _markdown(rows: list[_Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|---|---|--:|---|---|"]
    for r in rows:
        local = ", ".join(f"{_code(n)}: {d}" for n, d in r.local)
        lines.append(f"| {_code(r.node)} | {_code(r.op)} | {r.data} | {local} | {r.grad} |")
    return "\n".join(lines)
