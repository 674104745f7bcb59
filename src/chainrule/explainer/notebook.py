"""How a Value or a Tensor shows in a notebook: the drawing of its graph.

One record per node (label | data | grad, a Tensor's shape and dtype and
its gradient or its norm), one oval per operation, laid out and drawn by
the stepping page's own code (:mod:`chainrule.explainer.walkthrough`), so no
Graphviz, no network and no script: the SVG reads the same in JupyterLab,
the classic Notebook, VS Code and an nbconvert HTML export. A graph of more
than ``max_nodes`` values shows a summary that says how to draw it all.

:func:`draw_dot` is micrograd's drawing call, with its signature, and
:func:`walkthrough` the stepping page as a notebook output.
"""

from __future__ import annotations

import html
import os
import secrets
from pathlib import Path
from typing import Any

from ..io.sealed import replace_file
from ..value.engine import Value
from .draw import INSTALL_HINT, GraphvizNotFound, _is_tensor, _render, to_dot
from .table import check_digits, explain
from .text import display_name, format_number, forward_order
from .walkthrough import (
    DEFAULT_MAX_NODES,
    FONT,
    Picture,
    _checked_walk,
    picture_svg,
    walkthrough_widget,
    write_walkthrough,
)

#: A notebook draws graphs of up to this many values; beyond, a summary.
DISPLAY_MAX_NODES = 300


def _prefix() -> str:
    """Ids unique on the page: a notebook shows many outputs side by side."""
    return f"cr{secrets.token_hex(4)}-"


def picture(root: Any, digits: int = 6) -> Picture:
    """The picture of ``root``'s graph (a Value or a Tensor) as it is now:
    grads as they are, so call ``backward()`` first to see them."""
    nodes = forward_order(root)
    index = {node: i for i, node in enumerate(nodes)}
    if _is_tensor(root):  # NumPy is there: the nodes are arrays
        from .tensor_table import grad_summary, shape_text

        data = [f"{shape_text(v.data.shape)} {v.data.dtype}" for v in nodes]
        grads = [grad_summary(v.grad, digits) for v in nodes]
    else:
        data = ["data " + format_number(v.data, digits) for v in nodes]
        grads = [format_number(v.grad, digits) for v in nodes]
    return Picture(
        titles=[display_name(v, i) for i, v in enumerate(nodes)],
        data=data,
        grads=grads,
        ops=[(v._op or "?") if v._prev else "" for v in nodes],
        inputs=[[(index[c], "") for c in v._prev] for v in nodes],
    )


def _checked(root: Any, op: str) -> None:
    if not isinstance(root, Value) and not _is_tensor(root):
        raise TypeError(f"{op}: expected a Value or a Tensor, got {type(root).__name__}")


def graph_svg(root: Any, *, max_nodes: int = DISPLAY_MAX_NODES, prefix: str | None = None) -> str:
    """``root``'s graph as one SVG element (a summary past ``max_nodes``)."""
    _checked(root, "graph_svg")
    prefix = _prefix() if prefix is None else prefix
    nodes = forward_order(root)
    if len(nodes) > max_nodes:
        return _summary(root, nodes, max_nodes, prefix)
    return picture_svg(picture(root), prefix=prefix)


def graph_html(root: Any, *, max_nodes: int = DISPLAY_MAX_NODES) -> str:
    """The drawing in a box that scrolls when the graph is larger than the
    notebook's column. Notebooks shrink a wide drawing to the column; this
    one shrinks to 60% of its size at the most, then scrolls."""
    svg = graph_svg(root, max_nodes=max_nodes)
    width = float(svg.split(' width="', 1)[1].split('"', 1)[0])
    svg = svg.replace(" viewBox=", f' style="min-width:{0.6 * width:g}px" viewBox=', 1)
    return (
        f'<div class="cr-display" style="overflow:auto;max-width:100%;max-height:640px">{svg}</div>'
    )


def _summary(root: Any, nodes: list[Any], max_nodes: int, prefix: str) -> str:
    operations = sum(1 for v in nodes if v._prev)
    name = display_name(root, len(nodes) - 1)
    lines = [
        f"{name}: a graph of {len(nodes):,} values and {operations:,} operations,",
        f"more than the {max_nodes} a notebook draws.",
        f"draw_dot({name if root.label else 'root'}, max_nodes={len(nodes)}) draws it here,",
        "chainrule.draw(root, 'graph.svg', max_nodes=...) to a file (Graphviz),",
        "chainrule.explain(root) tables its backward pass.",
    ]
    width = 20 + 7.5 * max(len(t) for t in lines)
    height = 24 + 18 * len(lines)
    texts = "".join(
        f'<text x="12" y="{26 + 18 * k}">{html.escape(t)}</text>' for k, t in enumerate(lines)
    )
    return (
        f'<svg id="{prefix}graph" class="cr-graph cr-summary" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
        f'viewBox="0 0 {width:g} {height:g}" font-family="{FONT}" font-size="12" '
        f'data-records="{len(nodes)}" data-ops="{operations}">'
        f'<rect x="1" y="1" width="{width - 2:g}" height="{height - 2:g}" rx="6" fill="#fffbe8" '
        f'stroke="#d49a00"/>{texts}</svg>'
    )


# --------------------------------------------------------------------------
# micrograd's draw_dot
# --------------------------------------------------------------------------


class Drawing:
    """What :func:`draw_dot` returns: shows as the drawing in a notebook,
    and ``render(filename)`` writes it, as the ``graphviz.Digraph`` that
    micrograd's ``draw_dot`` returns does. ``source`` is the DOT text."""

    def __init__(self, root: Any, format: str, rankdir: str, max_nodes: int) -> None:  # noqa: A002
        self.root = root
        self.format = format
        self.rankdir = rankdir
        self.max_nodes = max_nodes

    @property
    def source(self) -> str:
        """The graph in Graphviz's DOT language (needs nothing to make)."""
        return to_dot(self.root, max_nodes=self.max_nodes, rankdir=self.rankdir)

    def _repr_svg_(self) -> str:
        return graph_svg(self.root, max_nodes=self.max_nodes)

    def _repr_html_(self) -> str:
        return graph_html(self.root, max_nodes=self.max_nodes)

    def pipe(self, format: str | None = None) -> bytes:  # noqa: A002
        """The drawing as bytes: SVG drawn here, PNG or PDF by Graphviz."""
        fmt = format or self.format
        if fmt == "svg":
            return graph_svg(self.root, max_nodes=self.max_nodes, prefix="").encode("utf-8")
        if fmt not in ("png", "pdf"):
            raise ValueError(f"draw_dot: format must be 'svg', 'png' or 'pdf', got {fmt!r}")
        try:
            return _render(self.source, fmt, 30.0)
        except GraphvizNotFound:
            raise GraphvizNotFound(
                f"draw_dot: format {fmt!r} needs Graphviz's `dot` program ({INSTALL_HINT}); "
                "format='svg' needs nothing"
            ) from None

    def render(
        self,
        filename: str | os.PathLike[str] | None = None,
        directory: str | os.PathLike[str] | None = None,
        view: bool = False,
        cleanup: bool = False,
        format: str | None = None,  # noqa: A002
    ) -> str:
        """Write the DOT text to ``filename`` and the drawing beside it as
        ``filename.svg`` (or ``.png``, ``.pdf``), as ``graphviz`` does, and
        return the drawing's path. ``cleanup`` removes the DOT file."""
        if view:
            raise ValueError("draw_dot: render(view=True) is not supported; open the file")
        fmt = format or self.format
        path = Path(directory or ".") / (filename or "Digraph.gv")
        data = self.pipe(fmt)
        out = path.with_name(f"{path.name}.{fmt}")
        if not cleanup:
            replace_file(path, self.source.encode("utf-8"))
        replace_file(out, data)
        return str(out)


def draw_dot(
    root: Any,
    format: str = "svg",  # noqa: A002
    rankdir: str = "LR",
    *,
    max_nodes: int = DISPLAY_MAX_NODES,
) -> Drawing:
    """micrograd's ``draw_dot(root, format='svg', rankdir='LR')``: the graph
    of ``root`` (a Value or a Tensor), one record per value (label | data |
    grad) and one oval per operation. It shows in a notebook as it is, and
    ``.render(filename)`` writes it; nothing to install (Graphviz only for
    ``format='png'`` or ``'pdf'``, and for ``rankdir='TB'``'s files: the
    notebook drawing is always left to right).

    >>> from chainrule import Value
    >>> a = Value(2.0, label="a")
    >>> dot = draw_dot(a * a)
    >>> svg = dot._repr_svg_()
    >>> svg.count('class="node"'), svg.count('class="op"')
    (2, 1)
    """
    _checked(root, "draw_dot")
    if format not in ("svg", "png", "pdf"):
        raise ValueError(f"draw_dot: format must be 'svg', 'png' or 'pdf', got {format!r}")
    if rankdir not in ("LR", "TB"):
        raise ValueError(f"draw_dot: rankdir must be 'LR' or 'TB', got {rankdir!r}")
    return Drawing(root, format, rankdir, max_nodes)


# --------------------------------------------------------------------------
# The stepping page, inline
# --------------------------------------------------------------------------


class Walkthrough:
    """The stepping view of a backward pass, as a notebook output (each
    display its own ids: several on a page step independently). ``str()``
    is :func:`chainrule.explain`'s table; ``save(path)`` writes the page."""

    def __init__(self, root: Value, digits: int, title: str | None, max_nodes: int) -> None:
        self.root = root
        self.digits = digits
        self.title = title
        self.max_nodes = max_nodes
        check_digits(digits, "walkthrough")
        _checked_walk(root, "walkthrough", max_nodes)  # a mistake shows now, not at display

    def _repr_html_(self) -> str:
        return walkthrough_widget(
            self.root,
            prefix=_prefix(),
            title=self.title,
            digits=self.digits,
            max_nodes=self.max_nodes,
        )

    def __str__(self) -> str:
        return explain(self.root, digits=self.digits)

    def __repr__(self) -> str:
        return f"<walkthrough of {self.root!r}: display it in a notebook, or print it>"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the page (``chainrule explain --html``) to ``path``."""
        return write_walkthrough(
            self.root, path, digits=self.digits, title=self.title, max_nodes=self.max_nodes
        )


def walkthrough(
    root: Value,
    *,
    digits: int = 6,
    title: str | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> Walkthrough:
    """Step through the backward pass of ``root`` inside a notebook: the
    graph, the current ``child.grad += local * node.grad`` with its numbers
    and the table filling in, with buttons and the arrow keys (Home, End)
    while it has the focus. Read-only: no ``.grad`` changes.

    >>> from chainrule.explainer.formula import evaluate
    >>> view = walkthrough(evaluate("c = a*b; d = c + a; e = d**2", {"a": 2, "b": 3}))
    >>> print(str(view).splitlines()[2][:40].rstrip())
    e     **2  64.0  d: 16.0
    """
    return Walkthrough(root, digits, title, max_nodes)
