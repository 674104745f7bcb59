"""Drawing the graph of a Value or a Tensor: Graphviz DOT text, and SVG or
PNG files.

:func:`to_dot` needs nothing: it writes the DOT language as text. Each Value
is a record ``label | data | grad``; each operation is an oval between its
inputs and its output; edges run forward, the way the values flowed. Node
ids follow a fixed forward order (``v0``, ``v1``, ...), so the same graph
always gives the same text.

:func:`draw` hands that text to Graphviz's ``dot`` program, which must be
installed (``apt-get install graphviz``, ``brew install graphviz``);
:func:`to_svg` returns the SVG as a string, which is what a Value shows in
Jupyter. A Tensor's record shows its shape and dtype, and its gradient as
a number (one element) or a norm (an array).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..io.sealed import replace_file
from ..value.engine import Value
from ..value.sums import ADD_N, AFFINE, AFFINE_RELU, DOT
from .text import display_name, format_number, forward_order, printable

#: Graphs with more Values than this are drawn as a one-node summary.
DEFAULT_MAX_NODES = 200
#: Output formats ``draw`` accepts, by file extension.
FORMATS = ("svg", "png", "pdf")

INSTALL_HINT = (
    "install Graphviz (apt-get install graphviz, or brew install graphviz), "
    "or write the DOT text with to_dot() and render it elsewhere"
)


class GraphvizNotFound(RuntimeError):
    """Graphviz's ``dot`` program is not on the PATH."""


class GraphTooLarge(ValueError):
    """A graph of more than ``max_nodes`` values, refused by a drawing that
    cannot summarise it (the interactive page)."""

    def __init__(self, op: str, nodes: int, max_nodes: int) -> None:
        super().__init__(
            f"{op}: the graph has {nodes} nodes, more than max_nodes={max_nodes}; "
            "pass a larger max_nodes to draw it"
        )
        self.nodes = nodes
        self.max_nodes = max_nodes


# --------------------------------------------------------------------------
# Shared with explain: the nodes in order, their names, their numbers
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# DOT
# --------------------------------------------------------------------------


def _quoted(text: str) -> str:
    """A DOT quoted string that shows ``text`` literally (escString; ``&``
    as ``&amp;``, since Graphviz decodes HTML entities in labels)."""
    text = printable(text).replace("&", "&amp;")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _field(text: str) -> str:
    """``text`` as one field of a record label: its separators escaped, and
    ``&`` as ``&amp;`` (Graphviz decodes HTML entities in labels)."""
    for c in "\\{}|<>":
        text = text.replace(c, "\\" + c)
    return text.replace("&", "&amp;")


def _is_tensor(node: Any) -> bool:
    return hasattr(node, "_vjp") and hasattr(node.data, "shape")


def _record_line(key: str, fields: tuple[str, ...], root: bool = False) -> str:
    # Backslashes are already escaped for the record parser, which reads the
    # string as written; only the quote needs the string-level escape.
    label = '"{' + "|".join(fields).replace('"', '\\"') + '}"'
    extra = ", penwidth=2" if root else ""
    return f"  {key} [shape=record, label={label}{extra}];"


def _record(node: Any, index: int, root: bool) -> str:
    if _is_tensor(node):  # NumPy is there: the node is an array
        from .tensor_table import grad_summary, shape_text

        described = (
            f"{shape_text(node.data.shape)} {node.data.dtype}",
            "grad " + grad_summary(node.grad),
        )
    else:
        described = ("data " + format_number(node.data), "grad " + format_number(node.grad))
    return _record_line(f"v{index}", (_field(display_name(node, index)), *described), root)


def _expansion(node: Value, i: int, index: dict[Any, int]) -> tuple[list[str], list[str]] | None:
    """The lines and edges that draw fused node ``i`` (``sum``, ``dot``,
    ``ReLU(dot)`` over Values) as the chain micrograd builds for it:
    ``w1*x1``, ``w2*x2``, ``b + w1*x1``, ``... + w2*x2``, ``ReLU``. The
    pieces show their data and the grad they would hold after
    ``backward()``; None when the node is not one of these."""
    fn = node._fn
    kids = node._children
    if fn is ADD_N:
        terms = [(f"v{index[c]}", c.data) for c in kids]
        products: list[tuple[Value, Value]] = []
    elif fn in (DOT, AFFINE, AFFINE_RELU):
        n = len(kids) // 2
        products = list(zip(kids[:n], kids[n : 2 * n]))
        terms = [(f"v{index[kids[-1]]}", kids[-1].data)] if fn is not DOT else []
    else:
        return None
    relu = fn is AFFINE_RELU
    if len(terms) + len(products) < 2 or (len(terms) + len(products) == 2 and not relu):
        return None  # already one binary op
    grad = node.grad.data if isinstance(node.grad, Value) else float(node.grad)
    inner = grad if not relu or node.data > 0.0 else 0.0  # the grad of every piece
    name = display_name(node, i)
    lines: list[str] = []
    edges: list[str] = []
    pieces = 0

    def piece(op: str, inputs: list[str], data: float, last: bool = False) -> str:
        nonlocal pieces
        key = f"v{i}" if last else f"v{i}_{pieces}"
        if not last:
            pieces += 1
            fields = (_field(f"{name}.{pieces}"), f"data {format_number(data)}")
            lines.append(_record_line(key, (*fields, f"grad {format_number(inner)}")))
        lines.append(f"  {key}_op [shape=ellipse, label={_quoted(op)}];")
        edges.extend(f"  {k} -> {key}_op;" for k in inputs)
        edges.append(f"  {key}_op -> {key};")
        return key

    for w, x in products:
        product = w.data * x.data
        terms.append((piece("*", [f"v{index[w]}", f"v{index[x]}"], product), product))
    key, total = terms[0]
    for j, (k, data) in enumerate(terms[1:], start=2):
        total += data
        key = piece("+", [key, k], total, last=j == len(terms) and not relu)
    if relu:
        piece("ReLU", [key], node.data, last=True)
    return lines, edges


def to_dot(
    root: Any, *, max_nodes: int = DEFAULT_MAX_NODES, rankdir: str = "LR", expand: bool = False
) -> str:
    """The graph of ``root``, a Value or a Tensor, in Graphviz's DOT language.

    One record per Value (label, data, grad; the root drawn bold; for a
    Tensor: label, shape and dtype, grad or its norm), one oval
    per operation, edges from inputs to the operation and from it to its
    output. Unlabelled Values are shown as ``#n``, their place in the order.
    Grads are shown as they are: call ``backward()`` first to see them.

    A graph of more than ``max_nodes`` Values is drawn as the root alone
    with a note giving the graph's size, rather than an unreadable picture.

    ``expand=True`` draws each fused node (a neuron's ``ReLU(dot)``, a
    ``dot``, a ``sum``) as the chain of ``*`` and ``+`` micrograd would
    have built, for display only: the graph itself is not changed.

    >>> from chainrule import Value
    >>> x = Value(3.0, label="x")
    >>> y = x * x
    >>> y.backward()
    >>> print(to_dot(y))
    digraph chainrule {
      rankdir=LR;
      node [fontname="Helvetica", fontsize=12];
      v0 [shape=record, label="{x|data 3.0|grad 6.0}"];
      v1 [shape=record, label="{#1|data 9.0|grad 1.0}", penwidth=2];
      v1_op [shape=ellipse, label="*"];
      v0 -> v1_op;
      v0 -> v1_op;
      v1_op -> v1;
    }
    """
    if not isinstance(root, Value) and not _is_tensor(root):
        raise TypeError(f"to_dot: expected a Value or a Tensor, got {type(root).__name__}")
    if rankdir not in ("LR", "RL", "TB", "BT"):
        raise ValueError(f"to_dot: rankdir must be LR, RL, TB or BT, got {rankdir!r}")
    nodes = forward_order(root)
    lines = [
        "digraph chainrule {",
        f"  rankdir={rankdir};",
        '  node [fontname="Helvetica", fontsize=12];',
    ]
    if len(nodes) > max_nodes:
        operations = sum(1 for v in nodes if v._prev)
        note = (
            f"{len(nodes)} values and {operations} operations: "
            f"more than max_nodes={max_nodes}.\\nOnly the root is drawn; "
            "pass a larger max_nodes\\n(chainrule explain: --max-nodes) to draw them all."
        )
        lines.append(_record(root, len(nodes) - 1, root=True))
        lines.append(f'  note [shape=note, label="{note}"];')
        lines.append(f"  note -> v{len(nodes) - 1} [style=dashed, arrowhead=none];")
        lines.append("}")
        return "\n".join(lines)

    index = {node: i for i, node in enumerate(nodes)}
    edges: list[str] = []
    for i, node in enumerate(nodes):
        lines.append(_record(node, i, root=node is root))
        drawn = _expansion(node, i, index) if expand and isinstance(node, Value) else None
        if drawn is not None:
            lines.extend(drawn[0])
            edges.extend(drawn[1])
        elif node._prev:
            lines.append(f"  v{i}_op [shape=ellipse, label={_quoted(node._op or '?')}];")
            edges.extend(f"  v{index[child]} -> v{i}_op;" for child in node._prev)
            edges.append(f"  v{i}_op -> v{i};")
    lines.extend(edges)
    lines.append("}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Rendering through Graphviz
# --------------------------------------------------------------------------


def graphviz_available() -> bool:
    """True when Graphviz's ``dot`` program is on the PATH."""
    return shutil.which("dot") is not None


def _render(dot_text: str, fmt: str, timeout: float) -> bytes:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFound(f"drawing needs Graphviz's `dot` program: {INSTALL_HINT}")
    try:
        done = subprocess.run(
            [exe, f"-T{fmt}"],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"dot took longer than {timeout:g} s; try a smaller max_nodes") from None
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"dot failed: {reason[0] if reason else f'exit {done.returncode}'}")
    return done.stdout


def draw(
    root: Any,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,  # noqa: A002
    max_nodes: int = DEFAULT_MAX_NODES,
    rankdir: str = "LR",
    timeout: float = 30.0,
    expand: bool = False,
) -> Path:
    """Draw the graph of ``root`` into ``path``, an ``.svg``, ``.png`` or
    ``.pdf`` file, and return the path. The extension picks the format
    unless ``format`` names one.

    Runs Graphviz's ``dot``; raises :class:`GraphvizNotFound` with the
    install hint when it is missing. Call ``backward()`` first to see grads.

    >>> from chainrule import Value
    >>> y = Value(2.0, label="x").tanh()
    >>> y.backward()
    >>> draw(y, "graph.svg")  # doctest: +SKIP
    PosixPath('graph.svg')
    """
    path = Path(path)
    fmt = format or path.suffix.lower().lstrip(".")
    if format is not None and format not in FORMATS:
        raise ValueError(f"draw: format must be one of {', '.join(FORMATS)}, got {format!r}")
    if fmt not in FORMATS:
        raise ValueError(
            f"draw: cannot tell the format of {str(path)!r}: "
            f"end the name with {', '.join('.' + f for f in FORMATS)}"
        )
    dot_text = to_dot(root, max_nodes=max_nodes, rankdir=rankdir, expand=expand)
    data = _render(dot_text, fmt, timeout)
    replace_file(path, data)  # atomically: a full disk leaves no empty file
    return path


def to_svg(root: Any, *, max_nodes: int = DEFAULT_MAX_NODES, timeout: float = 30.0) -> str:
    """The drawing of ``root``'s graph as SVG text (needs ``dot``)."""
    return _render(to_dot(root, max_nodes=max_nodes), "svg", timeout).decode("utf-8")
