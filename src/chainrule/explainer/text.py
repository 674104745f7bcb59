"""What every view of a graph shares: the nodes in forward order, their
names, their numbers, and tables as text or Markdown. The drawings
(:mod:`.draw`), the tables and traces (:mod:`.table`, :mod:`.tensor_table`)
and the stepping page (:mod:`.walkthrough`) all build on it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..value.engine import Value
from ..value.primitives import NUMBER
from ..value.walk import topological_order

#: Labels longer than this are shortened with "..." in pictures and tables.
LABEL_WIDTH = 40


def forward_order(root: Any) -> list[Any]:
    """Every node ``root`` depends on, each after the nodes it was computed
    from; a leaf comes just before its first use. Iterative.

    >>> from chainrule import Value
    >>> a, b = Value(2.0, label="a"), Value(3.0, label="b")
    >>> [v.label for v in forward_order((a + b) * a)]
    ['a', 'b', '', '']
    """
    if isinstance(root, Value):  # the scalar engine's own order, as backward() walks it
        interior, _ = topological_order(root)
    else:  # a Tensor: the order its engine's backward() walks
        from ..tensor.tensor import creation_order  # NumPy is there: a Tensor exists

        interior, _ = creation_order(root)
    if not interior:
        return [root]
    order: list[Any] = []
    placed: set[Any] = set()
    for node in reversed(interior):  # oldest first: inputs before outputs
        for child in node._prev:
            if child not in placed and not child._prev:
                placed.add(child)
                order.append(child)
        order.append(node)
    return order


#: Characters no drawing can show: controls (a NUL ends Graphviz's input)
#: and lone surrogates (not encodable, so not writable, in UTF-8).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with its whitespace runs as one space and every character no
    drawing can show as a visible escape (``\\x00``, ``\\ud800``)."""
    text = " ".join(text.split())
    return _UNPRINTABLE.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x80 else f"\\u{ord(m[0]):04x}", text
    )


def display_name(node: Any, index: int) -> str:
    """The node's label, shortened to ``LABEL_WIDTH``, or ``#index``
    when it has none (the same number in the drawing and in the table), a
    leaf made from a number operand (``x * 2``) as that number; characters
    no drawing can show are escaped (:func:`printable`)."""
    label = printable(node.label)
    if not label:
        return format_number(node.data) if getattr(node, "_fn", None) is NUMBER else f"#{index}"
    if len(label) > LABEL_WIDTH:
        return label[: LABEL_WIDTH - 3] + "..."
    return label


def format_number(x: Any, digits: int = 6) -> str:
    """A float as Python would print it when short (``-3.0``, ``0.25``),
    else rounded to ``digits`` significant digits (``0.333333``).

    >>> format_number(64), format_number(1 / 3), format_number(float("nan"))
    ('64.0', '0.333333', 'nan')
    """
    if isinstance(x, Value):  # a grad from backward(create_graph=True)
        x = x.data
    x = float(x)
    text = repr(x)
    if len(text) <= digits + 3 or not math.isfinite(x):
        return text
    text = f"{x:.{digits}g}"
    if text.lstrip("-").isdigit():
        text += ".0"
    return text


def table(
    header: tuple[str, ...],
    rows: list[tuple[str, ...]],
    format: str = "text",  # noqa: A002
    *,
    right_aligned: tuple[int, ...] = (),
    code_columns: tuple[int, ...] = (0, 1),
) -> str:
    """Rows of cells as aligned text (the columns in ``right_aligned``
    line up on their last digit) or as a Markdown table, the cells of
    ``code_columns`` as inline code."""
    if format == "markdown":
        align = "|" + "|".join("--:" if k in right_aligned else "---" for k in range(len(header)))
        lines = ["| " + " | ".join(header) + " |", align + "|"]
        for r in rows:
            cells = [code(c) if k in code_columns else c for k, c in enumerate(r)]
            lines.append(("| " + " | ".join(cells) + " |").replace("|  |", "| |"))
        return "\n".join(lines)
    widths = [max(len(c[k]) for c in [header, *rows]) for k in range(len(header))]
    rule = tuple("-" * w for w in widths)
    lines = []
    for row in (header, rule, *rows):
        parts = [
            cell.rjust(w) if k in right_aligned and row is not header else cell.ljust(w)
            for k, (cell, w) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def code(text: str) -> str:
    """``text`` as inline code in a Markdown table cell ('' stays empty)."""
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`" if text else ""
